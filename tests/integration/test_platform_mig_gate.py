"""The MIG gate (`slabench fleet mig-gate`): a g7e node keeps its startup taint until mig-manager has sliced its card,
and a node that fails to slice is never opened and is replaced within a budget.

Decisions are checked as a pure function; the command runs for real (a subprocess, the real kubernetes client)
against the fake API server. No GPU, mig-manager or Karpenter runs: the node labels and allocatable they would set are
written by the test, with the values the GPU Operator documents (nvidia.com/mig.config.state, nvidia.com/gpu.product).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from slabench.fleet.miggate import Decision, GateSpec, decide
from tests.helpers.platform_fake_kube import FakeKube
from tests.helpers.platform_helpers import ROOT

SPEC = GateSpec(pool="gpu-g7e-mig", taint="slabench.io/mig-pending", profile="2g.48gb", slices=2, failed_after_s=1200)
NOW = 1_800_000_000.0  # 2027-01-15T08:00:00Z
TAINTS = [{"key": "nvidia.com/gpu", "effect": "NoSchedule"},
          {"key": "slabench.io/mig-pending", "value": "true", "effect": "NoSchedule"}]  # fmt: skip
SLICED = {"nvidia.com/mig.config.state": "success",
          "nvidia.com/gpu.product": "NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition-MIG-2g.48gb"}  # fmt: skip


def node(name: str, labels: dict | None = None, gpus: str = "0", age_s: float = 60, taints=TAINTS,
         now: float = NOW) -> dict:  # fmt: skip
    from datetime import UTC, datetime

    created = datetime.fromtimestamp(now - age_s, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "creationTimestamp": created,
                     "labels": {"karpenter.sh/nodepool": "gpu-g7e-mig", "nvidia.com/mig.config": "all-2g.48gb",
                                **(labels or {})}},
        "spec": {"taints": list(taints), "providerID": f"aws:///us-east-1a/i-{name}"},
        "status": {"allocatable": {"cpu": "8", "nvidia.com/gpu": gpus}},
    }  # fmt: skip


@pytest.mark.parametrize(
    ("labels", "gpus", "age_s", "action"),
    [
        (SLICED, "2", 300, "open"),
        # The device plugin still shows the whole card: the state label alone is not enough.
        (SLICED, "1", 300, "wait"),
        ({**SLICED, "nvidia.com/gpu.product": "NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition"}, "2", 300, "wait"),
        ({"nvidia.com/mig.config.state": "pending"}, "1", 300, "wait"),
        ({"nvidia.com/mig.config.state": "rebooting"}, "0", 600, "wait"),
        ({"nvidia.com/mig.config.state": "failed"}, "1", 120, "fail"),
        ({"nvidia.com/mig.config.state": "pending"}, "1", 1300, "fail"),  # stuck past --failed-after
        ({}, "0", 1300, "fail"),  # mig-manager never ran (operator missing or not tolerating the taint)
    ],
)
def test_decisions(labels, gpus, age_s, action):
    assert decide(node("n", labels, gpus, age_s), SPEC, NOW).action == action


def test_a_node_without_the_taint_is_left_alone():
    assert decide(node("n", taints=TAINTS[:1]), SPEC, NOW) == Decision("none", "not gated")


@pytest.fixture
def kube() -> Iterator[FakeKube]:
    k = FakeKube(crds=("nodeclaims.karpenter.sh",)).start()
    yield k
    k.stop()


def claim(name: str, node_name: str) -> dict:
    return {"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "metadata": {"name": name},
            "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "gpu-blackwell"}},
            "status": {"nodeName": node_name}}  # fmt: skip


def gate(kube: FakeKube, tmp_path: Path, *extra: str) -> subprocess.CompletedProcess:
    cfg = tmp_path / "kubeconfig"
    cfg.write_text(kube.kubeconfig())
    argv = [sys.executable, "-m", "slabench", "fleet", "mig-gate", "--once", "--kubeconfig", str(cfg),
            "--pool", "gpu-g7e-mig", "--profile", "2g.48gb", "--slices", "2",
            "--failed-after", "20m", *extra]  # fmt: skip
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=120)


def taint_keys(kube: FakeKube, name: str) -> list[str]:
    return [t["key"] for t in kube.get("Node", None, name)["spec"].get("taints", [])]


def test_the_gate_opens_sliced_nodes_and_replaces_failed_ones_within_its_budget(kube, tmp_path):
    import time

    now = time.time()  # the gate reads the wall clock: the nodes are a minute old
    kube.put(node("sliced", SLICED, "2", now=now))
    kube.put(node("booting", {"nvidia.com/mig.config.state": "pending"}, "1", now=now))
    kube.put(node("broken-1", {"nvidia.com/mig.config.state": "failed"}, "1", now=now))
    kube.put(node("broken-2", {"nvidia.com/mig.config.state": "failed"}, "1", now=now))
    other = node("whole-card", {}, "1", now=now)
    other["metadata"]["labels"]["karpenter.sh/nodepool"] = "gpu-whole"
    kube.put(other)
    for n in ("broken-1", "broken-2", "sliced"):
        kube.put(claim(f"gpu-g7e-mig-{n}", n))

    r = gate(kube, tmp_path, "--max-replacements", "1")
    assert r.returncode == 0, r.stderr
    decided = dict(line.split(": ", 1) for line in r.stdout.splitlines())
    assert decided["sliced"].startswith("open: sliced: 2 x 2g.48gb")
    assert decided["booting"].startswith("wait:")
    assert "whole-card" not in decided  # another pool: not the gate's business

    # Opened: only the startup taint is gone; the GPU taint stays.
    assert taint_keys(kube, "sliced") == ["nvidia.com/gpu"]
    assert "slabench.io/mig-pending" in taint_keys(kube, "booting")
    # Failed nodes keep the taint (no pod on a whole card), are labelled and explained by an event; only one
    # NodeClaim is deleted (budget 1 per hour), the other node is left for a person.
    for n in ("broken-1", "broken-2"):
        assert "slabench.io/mig-pending" in taint_keys(kube, n)
        assert kube.get("Node", None, n)["metadata"]["labels"]["slabench.io/mig-gate"] == "failed"
    claims = {o["metadata"]["name"] for o in kube.objects.values() if o["kind"] == "NodeClaim"}
    assert claims == {"gpu-g7e-mig-sliced", "gpu-g7e-mig-broken-2"}
    assert "NodeClaim deleted" in decided["broken-1"]
    assert "left for a person: 1 replacements in the last hour" in decided["broken-2"]
    events = [o for o in kube.objects.values() if o["kind"] == "Event"]
    assert {e["involvedObject"]["name"] for e in events} == {"broken-1", "broken-2"}
    assert all(e["type"] == "Warning" and e["reason"] == "MigSlicingFailed" for e in events)

    # A second pass changes nothing: the failed nodes are marked, the sliced one is open.
    before = len(kube.calls)
    r = gate(kube, tmp_path, "--max-replacements", "1")
    assert r.returncode == 0, r.stderr
    writes = [c for c in kube.calls[before:] if c.method in ("PATCH", "POST", "DELETE")]
    assert writes == []
