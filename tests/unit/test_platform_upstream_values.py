"""Our values for the upstream charts we install (GPU Operator, kube-prometheus-stack, Karpenter, KEDA, AWS Load
Balancer Controller) use only keys those charts have, at the versions scripts/eks/install-platform.sh pins.

The charts cannot be downloaded here; their key paths were taken from the upstream repositories at the pinned
versions and are kept as data with their source (tests/data/upstream_values/*.keys). A key upstream does not have is
silently ignored by Helm, so a typo would quietly turn a setting off on the cluster.
"""

from __future__ import annotations

import copy
import re

import pytest
import yaml

from slabench.deploy.values_keys import OPEN, key_paths, load_keys, unknown_keys
from tests.helpers.platform_helpers import ROOT

KEYS = ROOT / "tests" / "data" / "upstream_values"
SCRIPT = ROOT / "scripts" / "eks" / "install-platform.sh"
# our values file -> (the chart's keys file stem, the script's version variable)
OURS = {
    "gpu-operator/values.yaml": ("gpu-operator", "GPU_OPERATOR_VERSION"),
    "observability/kube-prometheus-stack-values.yaml": ("kube-prometheus-stack", "KUBE_PROMETHEUS_STACK_VERSION"),
    "scripts/eks/values/karpenter.yaml": ("karpenter", "KARPENTER_VERSION"),
    "scripts/eks/values/keda.yaml": ("keda", "KEDA_VERSION"),
    "scripts/eks/values/aws-load-balancer-controller.yaml": (
        "aws-load-balancer-controller",
        "AWS_LOAD_BALANCER_CONTROLLER_VERSION",
    ),
}


def pinned() -> dict[str, str]:
    return dict(re.findall(r"^([A-Z_]+_VERSION)=(\S+)$", SCRIPT.read_text(), re.M))


def keys_file(stem: str, var: str):
    return KEYS / f"{stem}-{pinned()[var]}.keys"


@pytest.mark.parametrize("ours", sorted(OURS))
def test_our_values_use_only_keys_of_the_pinned_chart(ours):
    stem, var = OURS[ours]
    known = load_keys(keys_file(stem, var))
    assert list(unknown_keys(yaml.safe_load((ROOT / ours).read_text()), known)) == []


def test_every_pin_is_a_real_version_with_its_keys_and_source():
    pins = pinned()
    assert set(pins) == {var for _, var in OURS.values()}
    for stem, var in OURS.values():
        assert re.fullmatch(r"v?\d+\.\d+\.\d+", pins[var]), (var, pins[var])
        f = keys_file(stem, var)
        header = [line for line in f.read_text().splitlines() if line.startswith("#")]
        assert any(re.search(r"\b[0-9a-f]{40}\b", line) for line in header), f"{f.name}: no source commit"
        assert any("github.com/" in line for line in header), f"{f.name}: no source repository"
    assert sorted(p.name for p in KEYS.glob("*.keys")) == sorted(keys_file(s, v).name for s, v in OURS.values())


def test_a_misspelled_or_misplaced_key_is_caught():
    ours = yaml.safe_load((ROOT / "gpu-operator" / "values.yaml").read_text())
    known = load_keys(keys_file(*OURS["gpu-operator/values.yaml"]))
    typo = copy.deepcopy(ours)
    typo["dcgmExporter"]["serviceMonitor"]["additonalLabels"] = typo["dcgmExporter"]["serviceMonitor"].pop(
        "additionalLabels"
    )
    assert list(unknown_keys(typo, known)) == ["dcgmExporter.serviceMonitor.additonalLabels"]
    moved = copy.deepcopy(ours)
    moved["mig"]["manager"] = {"enabled": True}  # migManager, not mig.manager
    assert list(unknown_keys(moved, known)) == ["mig.manager"]


def test_open_maps_accept_any_key_and_leaves_take_any_value():
    known = set(key_paths({"labels": {}, "tolerations": [], "image": {"tag": "x"}}))
    assert ("labels", OPEN) in known
    ours = {"labels": {"a.b/c": "d"}, "tolerations": [{"key": "k"}], "image": {"tag": "y", "tga": "z"}}
    assert list(unknown_keys(ours, known)) == ["image.tga"]
