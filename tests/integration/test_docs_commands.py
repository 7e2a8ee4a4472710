"""Every shell command printed in README.md and docs/*.md runs the way it is printed.

The commands are read from the docs' ```bash / ```sh / ```shell / ```console blocks (continuation lines joined, a
here-document kept with its command) and run through bash in a scratch directory that mirrors the checkout (its own
`runs/`; `.venv` is the venv running these tests). A command runs as printed unless HOW says otherwise, and HOW is
the one list of exceptions: a command run with a placeholder filled in, against a fake (the simulator, moto), as
`--help`, or not at all, each with its reason. A new command that does not run as printed fails here until it is
fixed or listed; an entry of HOW that matches no printed command fails too.

Runs are short through SLABENCH_MAX_RUN_S (Locust's -t, a sweep's run.duration_s, a planned load's span), set here
and never in the docs. Commands that grade accept the verdict's exit codes (0 PASS, 1 CONDITIONAL, 2 FAIL, 4
measurement incomplete: a busy machine's simulator runs late) and never 3 (bad input): every example grades.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import boto3
import pytest
import yaml

from tests.helpers.locust_run import machine_doubtful
from tests.helpers.moto_server import MotoServer
from tests.helpers.platform_helpers import get_helm
from tests.helpers.ports import free_port
from tests.helpers.weights_helpers import write_model

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
SHELL_BLOCK = re.compile(r"^```(?:bash|sh|shell|console)\n(.*?)^```", re.S | re.M)
CAP_S = 10  # SLABENCH_MAX_RUN_S: long enough for the simulated grader to answer a few calls per user
GRADES = frozenset({0, 1, 2, 4})  # a verdict: PASS, CONDITIONAL, FAIL, or measurement incomplete (never 3)
WHY_AWS = "needs an AWS account and an EKS cluster (docs/eks.md); the platform is validated offline by .ci/run"


@dataclass(frozen=True)
class Command:
    where: str  # file:line
    text: str  # as printed, continuation lines joined


def doc_commands() -> list[Command]:
    out = []
    for path in DOCS:
        text = path.read_text(encoding="utf-8")
        for block in SHELL_BLOCK.finditer(text):
            first_line = text.count("\n", 0, block.start(1)) + 1
            lines = block.group(1).splitlines()
            i = 0
            while i < len(lines):
                start, line = i, lines[i].removeprefix("$ ")
                i += 1
                if not line.strip() or line.lstrip().startswith("#"):
                    continue
                while line.endswith("\\") and i < len(lines):
                    line = line[:-1].rstrip() + " " + lines[i].strip()
                    i += 1
                if heredoc := re.search(r"<<\s*'?(\w+)'?", line):
                    body = []
                    while i < len(lines) and lines[i].strip() != heredoc.group(1):
                        body.append(lines[i])
                        i += 1
                    line = "\n".join([line, *body, lines[i] if i < len(lines) else ""])
                    i += 1
                elif i < len(lines) and lines[i].startswith("  ") and not lines[i].lstrip().startswith("#"):
                    while i < len(lines) and lines[i].startswith("  "):  # a synopsis's wrapped options
                        line += " " + lines[i].strip()
                        i += 1
                out.append(Command(f"{path.relative_to(REPO)}:{first_line + start}", line))
    return out


@dataclass(frozen=True)
class How:
    """How the doc test runs a command that does not run as printed here."""

    why: str
    subs: dict[str, str] = field(default_factory=dict)  # printed text → what runs ({sweep}, {run}, {sim}, {tmp}, …)
    suffix: str | None = None  # runs only this last part (the rest is a setup the test's own venv satisfies)
    help: str | None = None  # runs `<this> --help` instead
    serve: bool = False  # a server: runs until it answers, then is stopped
    ok: frozenset[int] = frozenset({0})
    env: dict[str, str] = field(default_factory=dict)
    skip: bool = False  # not run at all


def not_run(why: str) -> How:
    return How(why, skip=True)


SWEEP = "the README main job's sweep directory ({sweep}) stands for the printed one"
MY_SLA = "my-sla.yaml is the example contract without its QA quality floors"
CUT_SHORT = "runs as printed; cut short, an open loop leaves requests unsent: exit 4 (measurement incomplete) is right"
SHORT = {"SLABENCH_MAX_RUN_S": "4"}  # runs whose figures nothing reads: the CPU they cost is all they show
WEIGHTS_ENV = {"HOME": "{tmp}/home"}  # the Hugging Face cache below it holds the tiny model
MNT = {"/mnt/k8s-disks/0/models": "{tmp}/mnt/k8s-disks/0/models"}  # a host NVMe path is no place for a test
# docs/eks.md's variables, as its step 0 and its deploy section set them (each command runs in a shell of its own)
EKS_ENV = {
    "ACCOUNT": "123456789012",
    "AWS_REGION": "us-east-1",
    "MODEL": "RedHatAI/Meta-Llama-3.1-8B-Instruct-FP8",
    "REVISION": "3aed33c3d2bfa212a137f6c855d79b5426862b24",
    "SUITE_IMAGE": "123456789012.dkr.ecr.us-east-1.amazonaws.com/slabench/suite:0.1.0",
}
EKS_DEPLOY = (
    "--region us-east-1 --model RedHatAI/Meta-Llama-3.1-8B-Instruct-FP8 --revision "
    "3aed33c3d2bfa212a137f6c855d79b5426862b24 --served-model-name qa-grader --weights-s3 "
    "s3://123456789012-slabench-models/models --results-s3 s3://123456789012-slabench-results/ci --api-key-secret "
    "slabench-api-key --serving-values helm/vllm-serving/ci/g6-values.yaml --serving-role-arn "
    "arn:aws:iam::123456789012:role/slabench-weights-read --locust-role-arn "
    "arn:aws:iam::123456789012:role/slabench-results-write"
)
HOW: dict[str, How] = {  # a unique prefix of the printed command → how it runs, and why
    # README.md
    "python3 -m venv .venv && ": How(
        "the venv and pip install prefix is this test's own venv (linked as .venv, the project installed in it); "
        "the sweep and its grading run as printed",
        suffix=".venv/bin/slabench sweep --config sweeps/default.yaml --sla sla/config_sla_example.yaml",
        ok=GRADES,
    ),
    "bash .ci/run": not_run("CI's own entry point: installs packages and runs the whole suite, this test included"),
    "locust -f locustfiles/qa_grading.py --headless": How("grades its run", ok=GRADES),
    "locust -f locustfiles/chat_replay.py --host http://127.0.0.1:8000": How(
        "a simulator on a free port stands for the server on port 8000", subs={"http://127.0.0.1:8000": "{sim}"}
    ),
    "slabench simulate --port 8000 --ttft": How(
        "a server: a free port for 8000 (parallel tests), stopped once it answers", subs={"8000": "{port}"}, serve=True
    ),
    "slabench simulate --port 8000 --profile": How(
        "a server: a free port for 8000 (parallel tests), stopped once it answers", subs={"8000": "{port}"}, serve=True
    ),
    "slabench calibrate runs/<sweep-id> --model-config /models/m": How(
        "needs a served model's config.json and a sweep of that real server", help="slabench calibrate"
    ),
    "slabench aggregate runs/<sweep-id>": How(SWEEP, subs={"runs/<sweep-id>": "{sweep}"}),
    "slabench grade runs/<sweep-id>": How(SWEEP, subs={"runs/<sweep-id>": "{sweep}"}, ok=GRADES),
    "slabench deploy --dry-run ...": How(
        "`...` stands for the options of docs/eks.md, whose whole --dry-run command runs below", help="slabench deploy"
    ),
    "slabench weights hydrate --source s3://bucket/models/m/rev": How(
        "against moto, after the tiny model was published there; a scratch directory for the host NVMe path",
        subs={
            "s3://bucket/models/m/rev": "s3://acme-models/weights/meta-llama/Llama-3.1-8B-Instruct/main",
            "/mnt/k8s-disks/0/models/m/rev": "{tmp}/mnt/m/rev",
        },
    ),
    "slabench fleet check --nodes examples/fleet/nodes.yaml": How(
        "the example fleet holds nodes that fail on purpose (exit 1 names them)", ok=frozenset({1})
    ),
    # docs/analysis.md
    "slabench sweep --config sweeps/default.yaml ": How(
        "the README main job's sweep with its grading; run once, as that command", skip=True
    ),
    "slabench sweep --config sweeps/cliff-demo.yaml": How("runs as printed", env=SHORT),
    # README.md and docs/sla.md: the capacity search (capped runs carry too few requests to PASS: the search ends at
    # its lowest level, then the contract's own load is run and graded)
    "slabench sweep --config sweeps/default.yaml --sla sla/config_sla_example.yaml --search": How(
        "runs as printed, capped; it grades the contract's load", ok=GRADES
    ),
    "slabench sweep --config sweeps/default.yaml --sla sla/config_sla_example.yaml --search --search-tolerance": How(
        "the README's search with a tolerance: run once, as that command", skip=True
    ),
    "slabench sweep --config sweeps/vllm-remote.yaml": not_run(
        "needs a real vLLM server (8 levels × 5 repeats × 120 s); its YAML is loaded by test_sweep_configs_load"
    ),
    "slabench aggregate runs/default-20260101-120000": How(SWEEP, subs={"runs/default-20260101-120000": "{sweep}"}),
    # docs/distributed.md
    "slabench recover .slabench-spool/<run-id>": How(
        "needs the spool a killed master leaves (tests/integration/test_distributed_resilience.py makes one)",
        help="slabench recover",
    ),
    "slabench recover w1-spool/<run-id>": How(
        "needs the spools of killed workers (tests/integration/test_distributed_resilience.py)", help="slabench recover"
    ),
    # docs/eks.md
    "export CLUSTER=slabench AWS_REGION=us-east-1": How("sets variables only"),
    "aws ecr create-repository": not_run(WHY_AWS),
    "aws ecr get-login-password": not_run(WHY_AWS + "; and Docker"),
    "export SUITE_IMAGE=$ACCOUNT": How("sets a variable only", env=EKS_ENV),
    "export MODEL=": How("sets variables only"),
    "export ACCOUNT=$(aws sts": not_run(WHY_AWS),
    "curl -fsSL https://raw.githubusercontent.com/aws/karpenter-provider-aws": not_run("downloads from GitHub"),
    "aws cloudformation deploy": not_run(WHY_AWS),
    "envsubst < scripts/eks/cluster.yaml | eksctl create cluster": not_run(WHY_AWS),
    "kubectl get nodes -L slabench.io/pool": not_run(WHY_AWS),
    "kubectl create namespace monitoring": not_run(WHY_AWS),
    "kubectl -n monitoring create secret": not_run(WHY_AWS),
    "export VPC_ID=$(aws eks describe-cluster": not_run(WHY_AWS),
    "export LBC_ROLE_ARN=": How("sets a variable only", env={"ACCOUNT": "123456789012", "CLUSTER": "slabench"}),
    "scripts/eks/install-platform.sh": not_run(WHY_AWS + " (tests/integration/test_platform_install_order.py)"),
    "kubectl get nodes -l karpenter.sh/nodepool=gpu-g7e-mig": not_run(WHY_AWS),
    "kubectl -n kube-system logs deploy/slabench-fleet-mig-gate": not_run(WHY_AWS),
    "aws s3 mb s3://$ACCOUNT-slabench-models": not_run(WHY_AWS),
    "cat > weights-read.json <<EOF": How("writes a file", env={"ACCOUNT": "123456789012"}),
    "cat > results-write.json <<EOF": How("writes a file", env={"ACCOUNT": "123456789012"}),
    "aws iam create-policy --policy-name slabench-weights-read": not_run(WHY_AWS),
    "aws iam create-policy --policy-name slabench-results-write": not_run(WHY_AWS),
    "eksctl create iamserviceaccount --cluster $CLUSTER --namespace slabench --name vllm-serving": not_run(WHY_AWS),
    "eksctl create iamserviceaccount --cluster $CLUSTER --namespace slabench --name locust-master": not_run(WHY_AWS),
    "kubectl create namespace slabench": not_run(WHY_AWS),
    "kubectl label namespace slabench": not_run(WHY_AWS),
    "kubectl -n slabench create secret generic slabench-api-key": not_run(WHY_AWS),
    "huggingface-cli download": not_run("downloads from Hugging Face (no internet here)"),
    "slabench weights publish --from snapshot --to s3://$ACCOUNT": How(
        "its snapshot comes from Hugging Face: docs/weights.md's publish commands run against moto",
        help="slabench weights publish",
    ),
    "ROLE=arn:aws:iam::$ACCOUNT:role": How("sets a variable only", env={"ACCOUNT": "123456789012"}),
    'DEPLOY="--region $AWS_REGION': How("sets a variable only", env=EKS_ENV),
    "slabench deploy --dry-run $DEPLOY": How(
        "renders offline; the variables the runbook set before it (ACCOUNT from `aws sts`, MODEL, DEPLOY, "
        "SUITE_IMAGE) set by the test as those lines set them",
        env={**EKS_ENV, "DEPLOY": EKS_DEPLOY},
    ),
    "python -m slabench.deploy.validate rendered.yaml": How("validates what the --dry-run above rendered"),
    "slabench deploy $DEPLOY": not_run(WHY_AWS),
    "helm upgrade --install locust helm/locust": not_run(WHY_AWS),
    "kubectl -n slabench port-forward": not_run(WHY_AWS),
    "helm test locust -n slabench": not_run(WHY_AWS),
    # docs/images.md
    "docker buildx imagetools inspect": not_run("needs Docker and a registry"),
    "helm ... --set image.digest": not_run("a fragment of a helm command (`...`), not a command"),
    "docker buildx build -f docker/vllm/Dockerfile": not_run("builds vLLM with CUDA: needs Docker and hours of CPU"),
    "docker buildx build -f docker/suite/Dockerfile": not_run("needs Docker"),
    "docker run --rm -v": not_run("needs Docker and the image built above"),
    "slabench fleet check --from-cluster [--kubeconfig F]": How(
        "a synopsis ([…] marks options); the cluster path runs against a fake API server in tests/unit/test_fleet_*",
        help="slabench fleet check",
    ),
    # docs/live.md
    ".ci/install-vllm": not_run("builds vLLM's CPU venv (minutes, GBs); .ci/run does it before the live tier"),
    "python -m pytest tests/live -m live -q": not_run("the live tier itself: .ci/run runs it with tests/"),
    # docs/plan.md
    "python -m pytest tests/live/test_live_plan.py": not_run("the live tier's calibration (7 min; a vLLM CPU venv)"),
    "slabench plan --sla my-sla.yaml --profiles l40s,my-card.yaml": How(
        MY_SLA + ", my-card.yaml a copy of the built-in rtx-pro-6000 profile"
    ),
    "slabench plan --compare-search runs/<search-id>": How(
        "the README's search ({search}) stands for the printed one", subs={"runs/<search-id>": "{search}"}
    ),
    "slabench calibrate runs/my-sweep --model-config /models/my-model": How(
        "needs a served model's config.json and a sweep of that real server", help="slabench calibrate"
    ),
    # docs/shapes.md
    "locust -f locustfiles/chat_replay.py,shapes/steps.py": How("runs as printed", env=SHORT),
    "locust -f locustfiles/chat_replay.py,shapes/burst.py": How(CUT_SHORT, env=SHORT, ok=frozenset({0, 4})),
    "locust -f locustfiles/chat_replay.py,shapes/ --headless --shape rate": How(
        CUT_SHORT, env=SHORT, ok=frozenset({0, 4})
    ),
    "locust -f locustfiles/chat_replay.py,shapes/ --class-picker": How(
        "the web UI: on a free port (LOCUST_WEB_PORT), stopped once it answers", serve=True
    ),
    # docs/sla.md
    "slabench grade runs/default-20260702-101500": How(
        SWEEP, subs={"runs/default-20260702-101500": "{sweep}"}, ok=GRADES
    ),
    "slabench grade runs/20260702-101500-ab12": How(
        "the README's Locust run ({run}) stands for the printed one; " + MY_SLA,
        subs={"runs/20260702-101500-ab12": "{run}"},
        ok=GRADES,
    ),
    "locust -f locustfiles/chat_replay.py --headless -u 16 -t 5m --sla my-sla.yaml": How(
        "grades its run; " + MY_SLA, ok=GRADES
    ),
    "slabench grade runs/l4-sweep runs/l40s-sweep runs/mig-sweep": How(
        "the README main job's sweep stands for each of the three",
        subs={"runs/l4-sweep": "{sweep}", "runs/l40s-sweep": "{sweep}", "runs/mig-sweep": "{sweep}"},
        ok=GRADES,
    ),
    # docs/weights.md (S3 is moto; the tiny model sits at ./Llama-3.1-8B-Instruct and in ~/.cache/huggingface)
    "slabench weights publish --from ./Llama-3.1-8B-Instruct": How("against moto", env=WEIGHTS_ENV),
    "slabench weights publish --from ~/.cache/huggingface/hub": How(
        "against moto; HOME is a scratch directory whose Hugging Face cache holds the tiny model", env=WEIGHTS_ENV
    ),
    "slabench weights publish --hf-repo": not_run("downloads from Hugging Face (no internet here)"),
    "slabench weights hydrate --source s3://acme-models/weights": How(
        "against moto; a scratch directory for the host NVMe path", subs=MNT
    ),
    "slabench weights status /mnt/k8s-disks/0/models  ": How("against moto; the scratch NVMe path", subs=MNT),
    "slabench weights status /mnt/k8s-disks/0/models --offline": How("the scratch NVMe path", subs=MNT),
    "slabench weights status DIR --verify --json": How(
        "DIR is the hydrated model", subs={"DIR": "{tmp}/mnt/k8s-disks/0/models/meta-llama/Llama-3.1-8B-Instruct/main"}
    ),
    "slabench weights status --source s3://acme-models/weights": How("against moto"),
}
# Run first, in this order: later commands read what they leave (the sweep, the run, the published model).
FIRST = (
    "python3 -m venv .venv && ",
    "locust -f locustfiles/qa_grading.py --headless",
    "slabench weights publish --from ./Llama-3.1-8B-Instruct",
    "slabench weights publish --from ~/.cache/huggingface/hub",
    "slabench weights hydrate --source s3://acme-models/weights",
    "slabench deploy --dry-run $DEPLOY",
)


def how_of(cmd: Command) -> How | None:
    """The entry of the longest prefix the command starts with (a longer one is the more particular command)."""
    keys = sorted((k for k in HOW if cmd.text.startswith(k)), key=len, reverse=True)
    return HOW[keys[0]] if keys else None


def ordered(commands: list[Command]) -> list[Command]:
    def rank(c: Command) -> int:
        return next((i for i, k in enumerate(FIRST) if c.text.startswith(k)), len(FIRST))

    return sorted(commands, key=rank)  # stable: the rest in the docs' order


COMMANDS = ordered(doc_commands())


# -- the scratch checkout and the fakes -----------------------------------------------------------------------------
class Scratch:
    def __init__(self, root: Path, s3: MotoServer, sim_url: str) -> None:
        self.root, self.s3, self.sim_url = root, s3, sim_url
        self.sweep: str | None = None
        self.run: str | None = None
        self.search: str | None = None

    def env(self, how: How | None) -> dict[str, str]:
        env = {
            **os.environ,
            **self.s3.env(),
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
            "PYTHONPATH": str(REPO),
            "SLABENCH_MAX_RUN_S": str(CAP_S),
            "LOCUST_WEB_PORT": free_port(),
            "HELM_BIN": get_helm(4),
        }
        env.pop("OPENAI_API_KEY", None)
        for k, v in (how.env if how else {}).items():
            env[k] = self.fill(v)
        return env

    def fill(self, text: str) -> str:
        values = {
            "tmp": str(self.root),
            "sim": self.sim_url,
            "port": free_port(),
            "sweep": self.sweep,
            "run": self.run,
            "search": self.search,
        }
        for name, value in values.items():
            if "{" + name + "}" in text:
                assert value is not None, f"{{{name}}} is made by a command that did not run first"
                text = text.replace("{" + name + "}", value)
        return text


def mirror(root: Path) -> None:
    """The checkout's files, linked (its own runs/ excepted); `.venv` is the venv running the tests."""
    for entry in REPO.iterdir():
        if entry.name not in {"runs", ".venv", ".git", ".slabench-spool"} and not entry.name.startswith("."):
            (root / entry.name).symlink_to(entry)
    for hidden in (".ci",):
        (root / hidden).symlink_to(REPO / hidden)
    (root / ".venv").symlink_to(Path(sys.executable).parent.parent)
    # The user's own files the docs name: a contract (the example's), a GPU profile (a built-in one's copy).
    mine = yaml.safe_load((REPO / "sla" / "config_sla_example.yaml").read_text(encoding="utf-8"))
    del mine["quality"]  # the user's own contract, for any workload (a chat replay grades no QA task)
    (root / "my-sla.yaml").write_text(yaml.safe_dump(mine), encoding="utf-8")
    shutil.copy(REPO / "slabench" / "sim" / "profiles" / "rtx-pro-6000.yaml", root / "my-card.yaml")
    shutil.copy(REPO / "sweeps" / "default.yaml", root / "sweep.yaml")
    shutil.copy(REPO / "sla" / "config_sla_example.yaml", root / "sla.yaml")
    # The model docs/weights.md publishes: a tiny one, as a plain directory and in a Hugging Face cache.
    write_model(root / "Llama-3.1-8B-Instruct")
    repo = root / "home" / ".cache" / "huggingface" / "hub" / "models--meta-llama--Llama-3.1-8B-Instruct"
    sha = "0e9e39f249a16976918f6564b8830bc894c89659"
    write_model(repo / "snapshots" / sha)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(sha)


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory, simulator) -> Iterator[Scratch]:
    root = tmp_path_factory.mktemp("docs")
    mirror(root)
    with MotoServer() as s3:
        boto3.client("s3", **_boto(s3)).create_bucket(Bucket="acme-models")
        yield Scratch(root, s3, simulator("--ttft", "0.05", "--itl", "0.005"))


@pytest.fixture(scope="module")
def simulator() -> Iterator:
    procs: list[subprocess.Popen] = []

    def start(*flags: str) -> str:
        argv = [sys.executable, "-m", "slabench", "simulate", "--port", "0", *flags]
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=REPO)
        procs.append(proc)
        return proc.stdout.readline().strip().rsplit(" ", 1)[-1]  # type: ignore[union-attr]

    yield start
    for p in procs:
        p.terminate()
        p.wait(5)


def _boto(s3: MotoServer) -> dict[str, str]:
    env = s3.env()
    return {
        "endpoint_url": env["AWS_ENDPOINT_URL"],
        "region_name": "us-east-1",
        "aws_access_key_id": env["AWS_ACCESS_KEY_ID"],
        "aws_secret_access_key": env["AWS_SECRET_ACCESS_KEY"],
    }


# -- the tests -------------------------------------------------------------------------------------------------------
def test_every_doc_names_its_commands_and_every_exception_is_one_printed_command():
    assert len([c for c in COMMANDS if c.where.startswith("README.md")]) >= 15
    stale = [k for k in HOW if not any(c.text.startswith(k) for c in COMMANDS)]
    assert not stale, f"HOW lists commands the docs no longer print: {stale}"
    for c in COMMANDS:
        how_of(c)  # the longest matching entry decides
    for k, how in HOW.items():
        assert not (how.skip and (how.subs or how.help or how.suffix)), k
        for cmd in (c for c in COMMANDS if c.text.startswith(k)):
            assert all(s in cmd.text for s in how.subs), f"{cmd.where}: a substitution of {k!r} is not in {cmd.text}"
            assert how.suffix is None or cmd.text.endswith(how.suffix), f"{cmd.where}: does not end with the suffix"


def test_sweep_configs_load():
    """The sweep YAMLs the docs name, including the one only a real server can run, load as the sweep reads them."""
    from slabench.sweep.config import load_sweep

    for path in sorted((REPO / "sweeps").glob("*.yaml")):
        load_sweep(path, REPO)


@pytest.mark.parametrize("cmd", COMMANDS, ids=[f"{c.where}" for c in COMMANDS])
def test_documented_command_runs(cmd: Command, scratch: Scratch):
    how = how_of(cmd)
    if how is not None and how.skip:
        pytest.skip(f"not run: {how.why}")
    text = cmd.text
    if how is not None:
        if how.suffix is not None:
            text = how.suffix
        for printed, used in how.subs.items():
            text = text.replace(printed, used)
        if how.help is not None:
            text = f"{how.help} --help"
        text = scratch.fill(text)
    prelude = "set -e; export ACCOUNT=${ACCOUNT-} AWS_REGION=${AWS_REGION-}\n"
    before = set((scratch.root / "runs").glob("*")) if (scratch.root / "runs").exists() else set()
    env = scratch.env(how)
    if how is not None and how.serve:
        _serve(text, env, scratch.root)
        return
    started = time.time()
    p = subprocess.run(["bash", "-c", prelude + text], cwd=scratch.root, env=env, capture_output=True, text=True,
                       timeout=600)  # fmt: skip
    ok = how.ok if how else frozenset({0})
    if p.returncode == 4 and machine_doubtful(scratch.root, started):
        ok = ok | {4}  # a busy machine saturated or froze the load generator, and the run said so (as documented)
    assert p.returncode in ok, (
        f"{cmd.where}: `{text}` exited {p.returncode} (expected {sorted(ok)})\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    )
    assert "Traceback" not in p.stderr, p.stderr[-3000:]
    made = sorted(set((scratch.root / "runs").glob("*")) - before)
    if text.startswith(".venv/bin/slabench sweep"):
        (sweep,) = made
        assert (sweep / "verdict.json").is_file() and (sweep / "summary.json").is_file()
        scratch.sweep = str(sweep.relative_to(scratch.root))
    if text.startswith("slabench sweep --config sweeps/default.yaml --sla sla/config_sla_example.yaml --search"):
        (search,) = made
        assert (search / "search.json").is_file()
        scratch.search = str(search.relative_to(scratch.root))
    if text.startswith("locust -f locustfiles/qa_grading.py"):
        (run,) = made
        assert (run / "verdict.json").is_file()
        scratch.run = str(run.relative_to(scratch.root))


def _serve(text: str, env: dict[str, str], cwd: Path) -> None:
    """Start a printed server, wait until it answers on its port, stop it."""
    port = re.search(r"--port (\d+)", text)
    url = f"http://127.0.0.1:{port.group(1) if port else env['LOCUST_WEB_PORT']}/"
    url += "v1/models" if port else ""
    proc = subprocess.Popen(["bash", "-c", "exec " + text], cwd=cwd, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, f"`{text}` exited {proc.returncode}: {proc.stderr.read()[-3000:]}"  # type: ignore[union-attr]
            try:
                with urllib.request.urlopen(url, timeout=5) as r:
                    assert r.status == 200
                    return
            except OSError:
                assert time.monotonic() < deadline, f"`{text}` did not answer at {url} within 60 s"
                time.sleep(0.3)
    finally:
        proc.terminate()
        proc.wait(10)
