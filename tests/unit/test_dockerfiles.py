"""Static checks of the two Dockerfiles (no Docker engine and no hadolint here): pinned bases, the fleet's arch list
and CUDA release, non-root users, no secrets, the build context allowlist, and the charts' default images."""

import fnmatch
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from slabench.fleet.facts import load_facts
from slabench.fleet.image import (
    CUSTOM_IMAGE,
    CUSTOM_IMAGE_ARCH_LIST,
    FLEET_IMAGE,
    FLEET_IMAGE_ARCH_LIST,
    FLEET_IMAGE_CUDA,
    ImageSpec,
    image_problems,
)
from slabench.fleet.nodes import load_nodes
from slabench.fleet.rules import Severity, check_fleet
from slabench.fleet.versions import CudaVersion, parse_arch_list

ROOT = Path(__file__).resolve().parents[2]
VLLM = ROOT / "docker" / "vllm" / "Dockerfile"
SUITE = ROOT / "docker" / "suite" / "Dockerfile"
SUITE_IMAGE = "ghcr.io/slabench/suite:0.1.0"
FLEET_GPU_ARCHS = {"8.0", "8.6", "8.9", "9.0", "10.0", "12.0"}  # A100, A10G, L4/L40S, H100, B200, RTX PRO 6000


# --- a small Dockerfile reader ----------------------------------------------------------------------------------


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def all(self, keyword: str) -> list[str]:
        return [args for kw, args in self.instructions if kw == keyword]


@dataclass
class Dockerfile:
    global_args: dict[str, str]
    stages: list[Stage]

    @property
    def final(self) -> Stage:
        return self.stages[-1]


def _instructions(text: str) -> list[tuple[str, str]]:
    """(KEYWORD, arguments) per instruction: comments dropped, backslash continuations joined."""
    out, current = [], ""
    for raw in text.splitlines():
        line = raw.strip()
        if not current and (not line or line.startswith("#")):
            continue
        if current and line.startswith("#"):  # a comment inside a continued instruction
            continue
        if line.endswith("\\"):
            current += line[:-1].rstrip() + " "
            continue
        current += line
        keyword, _, args = current.partition(" ")
        out.append((keyword.upper(), args.strip()))
        current = ""
    assert not current, "the file ends inside a continued instruction"
    return out


def _arg(args: str) -> tuple[str, str | None]:
    name, eq, default = args.partition("=")
    return name.strip(), (shlex.split(default)[0] if default.strip() else "") if eq else None


def _subst(value: str, env: dict[str, str]) -> str:
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: env.get(m.group(1) or m.group(2), m.group(0)), value)


def parse_dockerfile(path: Path) -> Dockerfile:
    global_args: dict[str, str] = {}
    stages: list[Stage] = []
    for keyword, args in _instructions(path.read_text()):
        if keyword == "ARG" and not stages:
            name, default = _arg(args)
            global_args[name] = default or ""
        elif keyword == "FROM":
            words = [w for w in args.split() if not w.startswith("--platform")]
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" else None
            stages.append(Stage(_subst(words[0], global_args), name))
        else:
            stages[-1].instructions.append((keyword, args))
    return Dockerfile(global_args, stages)


def _pinned(ref: str) -> bool:
    """A base is pinned by a digest, or by a tag that carries a full x.y.z version (never `latest` or a bare 3.11)."""
    if "$" in ref:
        return False
    if re.search(r"@sha256:[0-9a-f]{64}$", ref):
        return True
    tag = ref.rpartition(":")[2] if ":" in ref.rpartition("/")[2] else ""
    return bool(re.match(r"^\d+\.\d+\.\d+(-[\w.-]+)?$", tag))


def _user_of(stage: Stage) -> str | None:
    users = stage.all("USER")
    return users[-1].split(":")[0] if users else None


SECRETISH = re.compile(r"(TOKEN|SECRET|PASSWORD|PASSWD|API_?KEY|ACCESS_KEY|CREDENTIAL)", re.IGNORECASE)


def _secret_assignments(df: Dockerfile) -> list[str]:
    found = [k for k, v in df.global_args.items() if SECRETISH.search(k) and v]
    for stage in df.stages:
        for keyword, args in stage.instructions:
            if keyword in ("ENV", "ARG", "LABEL") and SECRETISH.search(args.split("=")[0]):
                found.append(args)
    return found


# --- the serving image ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def vllm():
    return parse_dockerfile(VLLM)


def test_the_serving_image_is_the_upstream_release_of_the_same_vllm_and_cuda(vllm):
    """The default is vLLM's own v0.32.0 CUDA 12.9 image; the custom build is the same vLLM and CUDA, so switching
    between them changes only what upstream lacks (docker/vllm/README.md)."""
    args = vllm.global_args
    assert f"vllm/vllm-openai:v{args['VLLM_VERSION']}-cu129" == FLEET_IMAGE
    cuda = CudaVersion.parse(args["CUDA_VERSION"])
    assert str(cuda) == FLEET_IMAGE_CUDA and FLEET_IMAGE.endswith(f"-cu{cuda.major}{cuda.minor}")
    assert CUSTOM_IMAGE.endswith(f":{args['VLLM_VERSION']}-cu{cuda.major}{cuda.minor}")


def test_the_upstream_image_covers_every_gpu_of_the_fleet():
    """vLLM's v0.32.0 release pipeline builds its cu129 x86_64 image with CUDA_ARCH_X86_CU129 = "7.5 8.0 8.6 8.9 9.0
    10.0 12.0" (.buildkite/release-pipeline.yaml of the PyPI sdist, sha256 pinned in the Dockerfile): sm_80..sm_120."""
    upstream = {str(t.cc) for t in parse_arch_list(FLEET_IMAGE_ARCH_LIST)}
    assert upstream >= FLEET_GPU_ARCHS
    assert image_problems(ImageSpec.parse(FLEET_IMAGE, FLEET_IMAGE_CUDA, FLEET_IMAGE_ARCH_LIST), load_facts()) == []


def test_vllm_custom_build_args(vllm):
    args = vllm.global_args
    assert {"VLLM_VERSION", "CUDA_VERSION", "TORCH_CUDA_ARCH_LIST"} <= set(args)
    assert args["VLLM_VERSION"] == "0.32.0"
    cuda = CudaVersion.parse(args["CUDA_VERSION"])
    assert cuda >= CudaVersion(12, 8), "Blackwell (sm_100, sm_120) needs CUDA ≥ 12.8"
    assert args["TORCH_CUDA_ARCH_LIST"] == CUSTOM_IMAGE_ARCH_LIST
    assert {str(t.cc) for t in parse_arch_list(args["TORCH_CUDA_ARCH_LIST"])} == FLEET_GPU_ARCHS
    assert re.fullmatch(r"[0-9a-f]{64}", args["VLLM_SDIST_SHA256"])
    spec = ImageSpec.parse(CUSTOM_IMAGE, str(cuda), CUSTOM_IMAGE_ARCH_LIST)
    assert image_problems(spec, load_facts()) == []


def test_vllm_bases_are_pinned_cuda_images_of_the_same_release(vllm):
    assert [s.name for s in vllm.stages] == ["build", "vllm-openai"]
    for stage in vllm.stages:
        assert _pinned(stage.base), stage.base
        assert stage.base.startswith(f"nvidia/cuda:{vllm.global_args['CUDA_VERSION']}-")
    assert "-devel-" in vllm.stages[0].base and "-base-" in vllm.stages[1].base  # no compiler image at run time


def test_vllm_arch_list_reaches_the_compile_step_and_the_source_is_verified(vllm):
    build = vllm.stages[0]
    envs = " ".join(build.all("ENV"))
    assert "TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST}" in envs
    assert any(a == "TORCH_CUDA_ARCH_LIST" for a in build.all("ARG"))  # re-declared, or the ENV would be empty
    runs = " ".join(build.all("RUN"))
    assert "sha256sum -c -" in runs and "setup.py bdist_wheel" in runs
    assert runs.index("sha256sum -c -") < runs.index("setup.py bdist_wheel")


def test_vllm_runs_non_root_with_the_openai_entrypoint(vllm):
    final = vllm.final
    assert _user_of(final) == "10001"
    assert final.instructions[-1][0] in ("ENTRYPOINT", "EXPOSE", "CMD") and final.all("ENTRYPOINT") == [
        '["vllm", "serve"]'
    ]
    assert not [kw for kw, _ in final.instructions[final.instructions.index(("USER", "10001:10001")) :] if kw == "RUN"]
    assert "8000" in final.all("EXPOSE")


def test_the_built_image_passes_the_fleet_check(vllm):
    """The image this Dockerfile builds runs on every good node of the example fleet (g5/g6/g6e/g7e, 580/595)."""
    facts = load_facts()
    args = vllm.global_args
    image = ImageSpec.parse("dockerfile", args["CUDA_VERSION"], args["TORCH_CUDA_ARCH_LIST"])
    _, nodes = load_nodes(ROOT / "examples" / "fleet" / "nodes.yaml", facts)
    good = [n for n in nodes if not n.name.startswith(("bad-", "old-"))]
    assert check_fleet(image, good, facts).severity == Severity.OK


# --- the suite image --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def suite():
    return parse_dockerfile(SUITE)


def test_suite_base_is_a_pinned_slim_python_311(suite):
    for stage in suite.stages:
        assert _pinned(stage.base) and re.match(r"python:3\.11\.\d+-slim", stage.base), stage.base


def test_suite_layout_install_and_user(suite):
    final = suite.final
    assert final.all("WORKDIR") == ["/app"]
    sources = {w for args in final.all("COPY") if not args.startswith("--from") for w in args.split()[:-1]}
    assert {
        "pyproject.toml",
        "README.md",
        "slabench/",
        "locustfiles/",
        "shapes/",
        "analysis/",
        "sla/",
        "datasets/",
    } <= sources
    runs = " ".join(final.all("RUN"))
    # the image runs sweeps (report), the fleet check and MIG gate (platform), hydrates and uploads (weights)
    assert "pip install '.[report,platform,weights]'" in runs and "pip install -e" not in runs
    assert "slabench --help" in runs and "locust --version" in runs  # both commands land on PATH
    assert _user_of(final) == "10001"
    assert final.instructions[-1][0] in ("CMD", "EXPOSE") and not final.all("ENTRYPOINT")  # the chart gives argv


@pytest.mark.parametrize("path", [VLLM, SUITE], ids=["vllm", "suite"])
def test_no_secrets_and_no_remote_add(path):
    df = parse_dockerfile(path)
    assert _secret_assignments(df) == []
    assert not any(args.startswith(("http://", "https://")) for s in df.stages for args in s.all("ADD"))
    assert "curl -k" not in path.read_text() and "--insecure" not in path.read_text()


def test_the_reader_sees_what_the_checks_rely_on(tmp_path):
    """The checks above are only as good as this reader: it must see continuations, stage names and bad pins."""
    path = tmp_path / "Dockerfile"
    path.write_text('ARG BASE=python:3.11-slim\nARG GITHUB_TOKEN=abc\nFROM ${BASE} AS one\n'
                    "RUN a \\\n    # note\n    && b\nENV API_KEY=x\nFROM ubuntu:latest\nUSER root\n")  # fmt: skip
    df = parse_dockerfile(path)
    assert [s.name for s in df.stages] == ["one", None] and df.stages[0].all("RUN") == ["a && b"]
    assert not _pinned(df.stages[0].base) and not _pinned(df.stages[1].base)
    assert _pinned("python:3.11.15-slim-trixie") and _pinned("nvidia/cuda:12.9.1-base-ubuntu24.04")
    assert _pinned("python@sha256:" + "a" * 64) and not _pinned("python:3.11")
    assert _user_of(df.final) == "root"
    assert len(_secret_assignments(df)) == 2


# --- the build context ------------------------------------------------------------------------------------------


def _ignored(path: str, patterns: list[str]) -> bool:
    """Docker's rule: the last matching pattern wins; a pattern matching a parent directory matches the path."""
    parts = path.split("/")
    candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    ignored = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        pat = pattern.lstrip("!").strip("/")
        anywhere = pat.startswith("**/")  # the only '**' form the file uses
        regex = fnmatch.translate(pat[3:] if anywhere else pat).replace(".*", "[^/]*")  # '*' stops at '/'
        if any(re.fullmatch(("(?:.*/)?" if anywhere else "") + regex, c) for c in candidates):
            ignored = not negate
    return ignored


def test_dockerignore_is_an_allowlist_that_keeps_secrets_out():
    patterns = [
        p.strip() for p in (ROOT / ".dockerignore").read_text().splitlines() if p.strip() and not p.startswith("#")
    ]
    assert patterns[0] == "*"
    suite = parse_dockerfile(SUITE)
    sources = [w for args in suite.final.all("COPY") if not args.startswith("--from") for w in args.split()[:-1]]
    for src in sources:
        assert not _ignored(src.rstrip("/") + ("/x.py" if src.endswith("/") else ""), patterns), src
    secrets = [".env", ".git/config", "runs/r1/records.jsonl", "kubeconfig", ".aws/credentials", "id_rsa",
               "slabench/.env", "sla/tls.key", "slabench/__pycache__/x.pyc", ".venv/bin/python",
               "tests/x.py"]  # fmt: skip
    for secret in secrets:
        assert _ignored(secret, patterns), secret


# --- the charts use these images --------------------------------------------------------------------------------


def _chart_images() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}

    def walk(node, chart):
        if isinstance(node, dict):
            if isinstance(node.get("repository"), str) and "tag" in node:
                found.setdefault(chart, []).append(f"{node['repository']}:{node['tag']}")
            for value in node.values():
                walk(value, chart)
        elif isinstance(node, list):
            for value in node:
                walk(value, chart)

    for values in sorted((ROOT / "helm").glob("*/values.yaml")):
        walk(yaml.safe_load(values.read_text()), values.parent.name)
    return found


def test_chart_default_images_are_these_images():
    images = _chart_images()
    if not images:
        pytest.skip("no Helm charts in helm/ yet")
    ours = {img for imgs in images.values() for img in imgs if img.startswith("ghcr.io/slabench/")}
    assert ours <= {SUITE_IMAGE}, ours
    if "vllm-serving" in images:
        assert images["vllm-serving"][0] == FLEET_IMAGE  # the server's image: vLLM's release
    if "locust" in images:
        assert images["locust"][0] == SUITE_IMAGE
