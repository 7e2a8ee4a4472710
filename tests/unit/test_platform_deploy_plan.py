"""`slabench deploy` without a cluster: flags → plan → chart values, and the pure status readers."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest
import yaml

from slabench.core.errors import UserError
from slabench.deploy import cli
from slabench.deploy.kube import exit_code_of, job_state_of, rollout_of
from slabench.deploy.plan import locust_overrides, locust_values, merge_values, serving_overrides
from slabench.deploy.results import local_path

ROOT = Path(__file__).resolve().parents[2]
VALID_SLA = """\
name: qa
load: {concurrency: 4}
deployment: {instance_type: g6e.xlarge}
targets:
  ttft_p95_s: {max: 2.0}
"""


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    cli.add_parser(parser.add_subparsers())
    return parser.parse_args(["deploy", *argv])


SLA = """\
name: qa
load: {concurrency: 4}
deployment: {instance_type: g6e.xlarge}
targets:
  ttft_p95_s: {max: 2.0}
"""
SWEEP = """\
name: s
locustfile: locustfiles/qa_grading.py
levels: [1, 4]
repeats: 2
run: {duration_s: 30}
"""


@pytest.fixture
def sla(tmp_path: Path) -> Path:
    p = tmp_path / "sla.yaml"
    p.write_text(SLA)
    return p


@pytest.fixture
def sweep(tmp_path: Path) -> Path:
    p = tmp_path / "sweep.yaml"
    p.write_text(SWEEP)
    return p


def plan(*argv: str):
    return cli.plan_from_args(parse(*argv))


SUITE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/slabench/suite"


@pytest.fixture(autouse=True)
def suite_image(monkeypatch):
    """As in docs/eks.md step 0: the suite image pushed, named once in the environment."""
    monkeypatch.setenv("SUITE_IMAGE", f"{SUITE}:0.1.0")


def test_one_suite_image_feeds_the_locust_pods_and_the_weight_cache(sla, monkeypatch):
    p = plan("--sla", str(sla), "--results-s3", "s3://res-bkt/ci")
    assert locust_overrides(p, "http://x:1")["image"] == {"repository": SUITE, "tag": "0.1.0", "digest": ""}
    assert serving_overrides(p)["weightCache"]["image"] == {"repository": SUITE, "tag": "0.1.0", "digest": ""}
    pinned = plan("--sla", str(sla), "--results-s3", "s3://res-bkt/ci", "--suite-image", f"{SUITE}@sha256:{'0' * 64}")
    assert serving_overrides(pinned)["weightCache"]["image"] == {"repository": SUITE, "digest": f"sha256:{'0' * 64}"}
    with pytest.raises(UserError, match="--suite-image: 'suite' is not REGISTRY/REPO:TAG"):
        plan("--sla", str(sla), "--results-s3", "s3://res-bkt/ci", "--suite-image", "suite")
    monkeypatch.delenv("SUITE_IMAGE")
    with pytest.raises(UserError, match="--suite-image: set SUITE_IMAGE"):
        plan("--sla", str(sla), "--results-s3", "s3://res-bkt/ci")


def test_the_vllm_image_can_be_pinned_by_digest_without_editing_a_values_file(sla, monkeypatch, tmp_path):
    from tests.helpers import platform_helpers

    digest = "sha256:" + "ab" * 32
    p = plan("--sla", str(sla), "--results-s3", "s3://res-bkt/ci", "--serving-image", f"vllm/vllm-openai@{digest}")
    image = serving_overrides(p)["image"]
    assert image == {"repository": "vllm/vllm-openai", "digest": digest}
    # the serving chart runs the pinned image (helm merges these values over the chart's tag)
    values = tmp_path / "v.yaml"
    values.write_text(yaml.safe_dump({"image": image}))
    docs = platform_helpers.render(platform_helpers.SERVING, values_files=(values,))
    vllm = platform_helpers.container(platform_helpers.one(docs, "Deployment"), "vllm")
    assert vllm["image"] == f"vllm/vllm-openai@{digest}"
    monkeypatch.setenv("SERVING_IMAGE", "vllm/vllm-openai:v0.32.0-cu129")  # or from the environment, by tag
    tagged = serving_overrides(plan("--sla", str(sla), "--results-s3", "s3://res-bkt/ci"))["image"]
    assert tagged == {"repository": "vllm/vllm-openai", "tag": "v0.32.0-cu129", "digest": ""}
    with pytest.raises(UserError, match="--serving-image: 'vllm' is not REGISTRY/REPO:TAG"):
        plan("--sla", str(sla), "--results-s3", "s3://res-bkt/ci", "--serving-image", "vllm")
    monkeypatch.delenv("SERVING_IMAGE")
    assert "image" not in serving_overrides(plan("--sla", str(sla), "--results-s3", "s3://res-bkt/ci"))


def test_merge_values_follows_helm_maps_merge_lists_replace():
    base = {"a": {"b": 1, "c": [1, 2]}, "d": 1}
    over = {"a": {"c": [3]}, "e": {"f": 2}}
    assert merge_values(base, over) == {"a": {"b": 1, "c": [3]}, "d": 1, "e": {"f": 2}}
    assert base == {"a": {"b": 1, "c": [1, 2]}, "d": 1}


def test_flags_map_to_serving_values(sla):
    p = plan("--sla", str(sla), "--model", "org/m", "--revision", "abc", "--served-model-name", "qa",
             "--weights-s3", "s3://models-bkt/weights/v1", "--region", "eu-west-1", "--api-key-secret", "k",
             "--serving-role-arn", "arn:aws:iam::123456789012:role/r", "--dry-run")  # fmt: skip
    assert serving_overrides(p) == {
        "autoscaling": {"enabled": False},
        "replicaCount": 1,  # the contract's deployment.replicas (default 1)
        "aws": {"region": "eu-west-1"},
        "model": {"name": "org/m", "revision": "abc", "servedName": "qa"},
        "weightCache": {
            "bucket": "models-bkt",
            "prefix": "weights/v1",
            "image": {"repository": SUITE, "tag": "0.1.0", "digest": ""},
        },
        "serviceAccount": {"roleArn": "arn:aws:iam::123456789012:role/r"},
        "apiKey": {"secretName": "k"},
    }


def test_unset_flags_leave_chart_defaults_alone(sla, monkeypatch):
    monkeypatch.delenv("SUITE_IMAGE")
    assert serving_overrides(plan("--sla", str(sla), "--dry-run")) == {
        "autoscaling": {"enabled": False},
        "replicaCount": 1,  # the contract's deployment.replicas (default 1)
        "aws": {"region": "us-east-1"},
    }


def test_flags_map_to_a_headless_locust_run(sla):
    p = plan("--sla", str(sla), "--results-s3", "s3://res-bkt/ci", "--run-id", "r7", "--kind", "users", "--users", "64",
             "--spawn-rate", "8", "--run-time", "195s", "--workers", "6")  # fmt: skip
    v = locust_overrides(p, "http://svc.ns.svc:8000")
    assert v["mode"] == "headless" and v["targetHost"] == "http://svc.ns.svc:8000"
    assert v["headless"] == {"kind": "burst", "users": 64, "spawnRate": 8.0, "runTime": "195s",
                             "runId": "r7", "extraArgs": []}  # fmt: skip
    assert v["shape"] == ""  # closed loop: the users, no shape
    assert v["workers"] == {"replicas": 6}
    assert v["config"] == {"sla": SLA}
    assert v["results"] == {"s3Uri": "s3://res-bkt/ci/r7/"}


def test_the_contracts_replicas_are_set_on_the_release_or_a_different_count_refused(tmp_path):
    sla = tmp_path / "sla.yaml"
    sla.write_text(
        SLA.replace("deployment: {instance_type: g6e.xlarge}", "deployment: {instance_type: g6e.xlarge, replicas: 3}")
    )
    assert serving_overrides(plan("--sla", str(sla), "--dry-run"))["replicaCount"] == 3
    same, other = tmp_path / "same.yaml", tmp_path / "other.yaml"
    same.write_text("replicaCount: 3\n")
    other.write_text("replicaCount: 2\n")
    assert serving_overrides(plan("--sla", str(sla), "--dry-run", "--serving-values", str(same)))["replicaCount"] == 3
    with pytest.raises(UserError) as e:
        plan("--sla", str(sla), "--dry-run", "--serving-values", str(same), "--serving-values", str(other))
    assert str(e.value) == (
        f"--serving-values {other}: replicaCount 2 is not the contract's deployment.replicas 3 ({sla}) — the run "
        "would be graded and priced as 3; make them agree"
    )


def test_the_per_family_values_must_run_the_card_the_contract_names(sla, tmp_path):
    """The g6 values (an L4) with a contract on g6e.xlarge (an L40S) would grade and price one card's run as
    another's: refused before any GPU starts; the family's own contract, or values without a family, go."""
    g6 = ROOT / "helm" / "vllm-serving" / "ci" / "g6-values.yaml"
    with pytest.raises(UserError) as e:
        plan("--sla", str(sla), "--dry-run", "--serving-values", str(g6))
    assert str(e.value).startswith(
        f"--serving-values {g6}: nodeSelector karpenter.k8s.aws/instance-family g6 (NVIDIA L4) is not the family of "
        f"the contract's deployment.instance_type g6e.xlarge (NVIDIA L40S, {sla})"
    )
    on_g6 = tmp_path / "g6.yaml"
    on_g6.write_text(SLA.replace("g6e.xlarge", "g6.xlarge"))
    assert plan("--sla", str(on_g6), "--dry-run", "--serving-values", str(g6)).replicas == 1
    mig = ROOT / "helm" / "vllm-serving" / "ci" / "g7e-mig-values.yaml"  # a pool and a MIG config, no family
    two = tmp_path / "two.yaml"
    two.write_text(SLA.replace("{instance_type: g6e.xlarge}", "{instance_type: g7e.2xlarge, replicas: 2}"))
    assert plan("--sla", str(two), "--dry-run", "--serving-values", str(mig)).replicas == 2
    # A family the facts table does not know is not called another card: a new instance family deploys.
    new_family = tmp_path / "new.yaml"
    priced = "prices: {overrides_usd_per_hour: {g9x.xlarge: 2.0}}\n"
    new_family.write_text(SLA.replace("g6e.xlarge", "g9x.xlarge") + priced)
    assert plan("--sla", str(new_family), "--dry-run", "--serving-values", str(g6)).replicas == 1


def test_the_default_burst_replays_the_queue_with_the_shape(sla, tmp_path):
    """--kind burst is the seed's open-loop queue (the burst shape), not closed-loop users; a values file's own
    headless.extraArgs are kept before the run's flags."""
    values = tmp_path / "locust.yaml"
    values.write_text("headless:\n  extraArgs: [--burst-stride, '50']\n")
    p = plan("--sla", str(sla), "--dry-run", "--run-id", "r8", "--burst-time-scale", "10", "--locust-values",
             str(values))  # fmt: skip
    v = locust_values(p, "http://svc:8000")
    assert v["shape"] == "shapes/burst.py" and v["headless"]["kind"] == "burst"
    assert "users" not in v["headless"]
    assert v["headless"]["extraArgs"] == ["--burst-stride", "50", "--burst-time-scale", "10"]
    assert v["headless"]["runId"] == "r8"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("--users", "8"), "--users: --kind burst sets its own load"),
        (("--kind", "sweep", "--run-time", "1m"), "--run-time: --kind sweep sets its own load"),
        (("--kind", "users", "--burst-time-scale", "10"), "--burst-time-scale: only for --kind burst"),
        (("--burst-time-scale", "0"), "--burst-time-scale: must be greater than 0"),
    ],
)
def test_load_flags_must_fit_the_kind(sla, sweep, argv, message):
    with pytest.raises(UserError, match=message):
        plan("--sla", str(sla), "--sweep", str(sweep), "--dry-run", *argv)


def test_the_sweeps_cpu_request_follows_its_load_processes(sla, sweep, tmp_path):
    """A sweep sends its load from the Job pod: one core per locust process, plus the master's."""
    one = locust_overrides(plan("--sla", str(sla), "--kind", "sweep", "--sweep", str(sweep), "--dry-run"), "http://x:1")
    assert one["master"]["resources"]["requests"] == {"cpu": "2", "memory": "2Gi"}
    four = tmp_path / "sweep4.yaml"
    four.write_text(SWEEP.replace("run: {duration_s: 30}", "run: {duration_s: 30, processes: 4}"))
    v = locust_overrides(plan("--sla", str(sla), "--kind", "sweep", "--sweep", str(four), "--dry-run"), "http://x:1")
    assert v["master"]["resources"] == {"requests": {"cpu": "5", "memory": "5Gi"}, "limits": {"memory": "10Gi"}}
    assert "master" not in locust_overrides(plan("--sla", str(sla), "--dry-run"), "http://x:1")  # burst: workers


def test_server_metrics_come_from_the_service_never_the_alb(sla, tmp_path):
    """The ALB routes only /v1: the master scrapes the Service's /metrics — with one replica, since through a Service
    each scrape reaches a random pod; with more, none."""
    svc = "http://vllm-serving.slabench.svc:8000"
    v = locust_overrides(plan("--sla", str(sla), "--dry-run", "--target", "alb"), "http://alb.example", None, svc)
    args = v["headless"]["extraArgs"]
    assert args[args.index("--server-metrics") + 1] == f"{svc}/metrics"
    two = tmp_path / "two.yaml"
    two.write_text(
        SLA.replace("deployment: {instance_type: g6e.xlarge}", "deployment: {instance_type: g6e.xlarge, replicas: 2}")
    )
    args = locust_overrides(plan("--sla", str(two), "--dry-run"), svc, None, svc)["headless"]["extraArgs"]
    assert args[args.index("--server-metrics") + 1] == "off"


def test_in_the_cluster_every_serving_pod_is_scraped_whatever_the_replicas(sla, sweep, tmp_path):
    """With the serving pods' labels (what slabench deploy always has), the master scrapes each pod's own /metrics
    and sums them: two replicas are measured as two, not as a random one per scrape, and not left unscraped."""
    svc = "http://vllm-serving.slabench.svc:8000"
    selector = "app.kubernetes.io/instance=vllm-serving,app.kubernetes.io/component=server"
    two = tmp_path / "two.yaml"
    two.write_text(
        SLA.replace("deployment: {instance_type: g6e.xlarge}", "deployment: {instance_type: g6e.xlarge, replicas: 2}")
    )
    for argv in (("--sla", str(two)), ("--sla", str(sla), "--target", "alb")):
        args = locust_overrides(plan(*argv, "--dry-run"), svc, selector, svc)["headless"]["extraArgs"]
        assert args[args.index("--server-metrics") + 1] == f"pods:{selector}"
    # a sweep's load processes scrape the same way (slabench sweep --server-metrics passes it to each run)
    swept = plan("--sla", str(two), "--kind", "sweep", "--sweep", str(sweep), "--dry-run")
    args = locust_overrides(swept, svc, selector, svc)["headless"]["extraArgs"]
    assert args[args.index("--server-metrics") + 1] == f"pods:{selector}"


def test_sweep_needs_its_config(sla, sweep):
    with pytest.raises(UserError, match="--sweep: a sweep run needs the sweep config"):
        plan("--sla", str(sla), "--kind", "sweep", "--dry-run")
    p = plan("--sla", str(sla), "--kind", "sweep", "--sweep", str(sweep), "--dry-run", "--run-id", "r3")
    v = locust_overrides(p, "http://x:1")
    assert v["config"]["sweep"] == SWEEP
    assert v["headless"]["runId"] == "r3"  # the sweep's directory is named by the run id


# --- contents of the contract and the sweep config (issue 18: a bad contract never reaches the cluster) ---------


@pytest.mark.parametrize(
    ("file", "text", "message"),
    [
        ("sla", SLA.replace("ttft_p95_s", "ttft_p95"), r"sla.yaml:5: targets.ttft_p95: unknown key"),
        ("sla", SLA.replace("g6e.xlarge", "g9z.huge"), r"sla.yaml:3: deployment.instance_type: .*g9z.huge"),
        ("sla", SLA.replace("{max: 2.0}", "{max: -1}"), r"sla.yaml:5: targets.ttft_p95_s.max: .*greater than 0"),
        ("sla", SLA.replace("concurrency: 4", "concurrency: 64"),
         r"sla.yaml:2: load.concurrency: 64 is not one of the sweep's levels \[1, 4\]"),
        ("sweep", SWEEP.replace("repeats: 2", "repeats: 1"), r"sweep.yaml:4: repeats: 1 gives no confidence interval"),
        ("sweep", SWEEP.replace("duration_s", "duration"), r"sweep.yaml:5: run.duration: unknown"),
        ("sweep", SWEEP.replace("qa_grading", "qa_gradng"), r"sweep.yaml:2: locustfile: locustfiles/qa_gradng.py"),
        ("sweep", SWEEP.replace("[1, 4]", "[4, 4]"), r"sweep.yaml:3: levels: .*repeat a value"),
    ],
)  # fmt: skip
def test_dry_run_refuses_a_bad_contract_or_sweep_with_one_line_naming_file_and_field(tmp_path, file, text, message):
    sla, sweep = tmp_path / "sla.yaml", tmp_path / "sweep.yaml"
    sla.write_text(SLA)
    sweep.write_text(SWEEP)
    (sla if file == "sla" else sweep).write_text(text)
    with pytest.raises(UserError) as e:
        plan("--sla", str(sla), "--kind", "sweep", "--sweep", str(sweep), "--dry-run")
    assert "\n" not in str(e.value)
    assert e.value.exit_code == 3
    assert re.search(message, str(e.value)), str(e.value)


def test_a_contract_given_in_a_locust_values_file_is_checked_too(tmp_path):
    values = tmp_path / "locust.yaml"
    values.write_text(yaml.safe_dump({"config": {"sla": SLA.replace("ttft_p95_s", "ttft_p95")}}))
    with pytest.raises(UserError, match=r"locust.yaml: config.sla:5: targets.ttft_p95: unknown key"):
        plan("--locust-values", str(values), "--dry-run")


def test_dry_run_command_exits_3_with_one_line_and_renders_nothing(tmp_path, capsys):
    sla = tmp_path / "sla.yaml"
    sla.write_text(SLA.replace("ttft_p95_s", "ttft_p95"))
    code = cli.main(["--dry-run", "--sla", str(sla), "--helm", "/nonexistent/helm"])
    out, err = capsys.readouterr()
    assert code == 3 and out == ""
    expected = f"slabench: {sla}:5: targets.ttft_p95: unknown key (check the spelling; see the schema for allowed keys)"
    assert err.strip().splitlines() == [expected]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("--namespace", "Bad_NS"), "--namespace: 'Bad_NS' is not a valid name"),
        (("--locust-release", "vllm-serving"), "--locust-release: must differ"),
        (("--region", "useast1"), "--region: 'useast1' is not an AWS region"),
        (("--run-id", "../x"), "--run-id"),
        (("--charts-dir", "/nonexistent"), "--charts-dir: /nonexistent/vllm-serving is not a chart"),
        (("--weights-s3", "https://x"), "--weights-s3: 'https://x' is not an s3:// URL"),
        (("--kind", "users", "--users", "0"), "--users: must be at least 1"),
    ],
)
def test_bad_flags_name_the_flag(sla, argv, message):
    with pytest.raises(UserError, match=message.replace("(", r"\(")):
        plan("--sla", str(sla), "--dry-run", *argv)


def test_an_sla_and_a_results_bucket_are_required_for_a_real_run(sla):
    with pytest.raises(UserError, match="--sla: the run is graded"):
        plan("--dry-run")
    with pytest.raises(UserError, match="--results-s3"):
        plan("--sla", str(sla))


def test_durations():
    assert [cli.parse_duration(t) for t in ("90", "90s", "45m", "4h", "0.5s")] == [90, 90, 2700, 14400, 0.5]
    with pytest.raises(argparse.ArgumentTypeError):
        cli.parse_duration("soon")


def test_rollout_is_ready_only_when_the_new_generation_is_up():
    dep = {"metadata": {"generation": 2}, "spec": {"replicas": 2},
           "status": {"observedGeneration": 1, "updatedReplicas": 2, "readyReplicas": 2}}  # fmt: skip
    assert rollout_of(dep).ready is False  # status still describes the previous spec
    dep["status"]["observedGeneration"] = 2
    assert rollout_of(dep).ready is True
    dep["status"]["readyReplicas"] = 1
    assert rollout_of(dep) == rollout_of(dep).__class__(False, "1/2 ready, 2/2 updated")


def test_job_state_and_exit_code():
    assert job_state_of({"status": {"active": 1}}).done is False
    failed = {"status": {"conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}]}}
    assert job_state_of(failed) == job_state_of(failed).__class__(True, False, "BackoffLimitExceeded")
    pod = {"status": {"containerStatuses": [{"name": "master", "state": {"terminated": {"exitCode": 2}}}]}}
    assert exit_code_of(pod, "master") == 2
    assert exit_code_of({"status": {"containerStatuses": [{"name": "master", "state": {"running": {}}}]}},
                        "master") is None  # fmt: skip


def test_result_keys_cannot_escape_the_destination(tmp_path):
    assert local_path(tmp_path, "runs/r1/", "runs/r1/a/b.json") == tmp_path / "a" / "b.json"
    with pytest.raises(UserError, match="refusing"):
        local_path(tmp_path, "runs/r1/", "runs/r1/../../etc/passwd")


@pytest.mark.parametrize(
    ("file", "text", "message"),
    [
        ("sla.yaml", VALID_SLA + "targets: {ttft_p95_s: {max: 9}}\n", r"sla\.yaml:6: duplicate key 'targets' \(first"),
        ("sla.yaml", VALID_SLA.replace("ttft_p95_s", "ttft_p59_s"), r"sla\.yaml:5: targets\.ttft_p59_s: unknown key"),
        ("sla.yaml", VALID_SLA.replace("g6e.xlarge", "g6e.xlarg"), r"unknown instance type 'g6e\.xlarg'"),
        ("sweep.yaml", "name: s\nlevles: [1]\nrun: {duration_s: 5}\n", r"sweep\.yaml:1: levels: required key"),
        ("sweep.yaml", "name: s\nlevels: [1]\nrepeats: 1\nrun: {duration_s: 5}\n", r"sweep\.yaml:3: repeats: 1"),
    ],
)
def test_dry_run_checks_the_contract_and_sweep_contents_not_only_that_they_exist(tmp_path, sla, file, text, message):
    """A contract or sweep config that would fail in the cluster fails here, before anything is rendered or deployed."""
    bad = tmp_path / "bad" / file
    bad.parent.mkdir()
    bad.write_text(text)
    args = ("--sla", str(bad)) if file == "sla.yaml" else ("--sla", str(sla), "--kind", "sweep", "--sweep", str(bad))
    with pytest.raises(UserError, match=message):
        plan(*args, "--dry-run")
