"""The documented install order works on a fresh cluster: scripts/eks/install-platform.sh, run for real with the real
`helm` binary, against the fake API server made strict about custom resources (a kind exists only once its CRD is
installed, as on EKS).

Each step runs with `--wait`, as on a cluster: the fake plays the kubelet for Deployments, which become ready only
when every image of their pods can be pulled — the published suite image (SUITE_IMAGE) and upstream images can, the
chart default ghcr.io/slabench/suite, which nobody publishes, cannot. So a chart that runs the suite image without
being told where it is times out here as it does on EKS.

EKS is not exercised. Our own charts (karpenter/ slabench-fleet, observability/ slabench-monitoring) are installed as
they are. The upstream charts (kube-prometheus-stack, Karpenter, the AWS Load Balancer Controller, the GPU Operator,
KEDA) cannot be downloaded here, so each is played by a small stand-in chart written below: it installs the CRDs the
real chart installs, and creates the custom resources the real chart (or, for the GPU Operator, its operator right
after install) creates with *our* values files — which is what decides the order.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.helpers.platform_fake_kube import FakeKube, crd_manifest
from tests.helpers.platform_helpers import ROOT, get_helm

SCRIPT = ROOT / "scripts" / "eks" / "install-platform.sh"
SUITE_IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/slabench/suite:0.1.0"
UNPUBLISHED = "ghcr.io/slabench/suite"  # the charts' placeholder default: not in any registry
ENV = {"CLUSTER": "slabench", "AWS_REGION": "us-east-1", "VPC_ID": "vpc-0abc", "LBC_ROLE_ARN": "arn:aws:iam::1:role/l",
       "SUITE_IMAGE": SUITE_IMAGE}  # fmt: skip
WAIT = "--wait --timeout 20s"

SERVICE_MONITOR = """\
{{- if %s }}
apiVersion: monitoring.coreos.com/v1
kind: ServiceMonitor
metadata:
  name: {{ .Release.Name }}
  labels: {{ toJson %s }}
spec:
  selector: {matchLabels: {app: {{ .Release.Name }}}}
  endpoints: [{port: metrics}]
{{- end }}
"""
# Stand-in chart -> (CRDs the real chart installs, templates of what it creates with our values)
STAND_INS = {
    "kube-prometheus-stack": (
        [
            "servicemonitors.monitoring.coreos.com",
            "podmonitors.monitoring.coreos.com",
            "prometheusrules.monitoring.coreos.com",
        ],
        {},
    ),
    "aws-load-balancer-controller": (
        ["targetgroupbindings.elbv2.k8s.aws"],
        {
            "servicemonitor.yaml": SERVICE_MONITOR
            % (".Values.serviceMonitor.enabled", ".Values.serviceMonitor.additionalLabels")
        },
    ),
    "karpenter": (
        [
            "nodepools.karpenter.sh",
            "nodeclaims.karpenter.sh",
            "nodeoverlays.karpenter.sh",
            "ec2nodeclasses.karpenter.k8s.aws",
        ],
        {
            "servicemonitor.yaml": SERVICE_MONITOR
            % (".Values.serviceMonitor.enabled", ".Values.serviceMonitor.additionalLabels")
        },
    ),
    # The operator reconciles its ClusterPolicy state by state; the DCGM exporter's ServiceMonitor comes before
    # feature discovery and the MIG manager, so without the CRD the node never gets its MIG config.
    "gpu-operator": (
        ["clusterpolicies.nvidia.com"],
        {
            "clusterpolicy.yaml": "apiVersion: nvidia.com/v1\nkind: ClusterPolicy\nmetadata:\n  name: cluster-policy\n"
            "spec:\n  mig: {{ toJson .Values.mig }}\n",
            "servicemonitor.yaml": SERVICE_MONITOR
            % (".Values.dcgmExporter.serviceMonitor.enabled", ".Values.dcgmExporter.serviceMonitor.additionalLabels"),
        },
    ),
    "keda": (
        ["scaledobjects.keda.sh"],
        {
            "podmonitor.yaml": "{{- if .Values.prometheus.operator.podMonitor.enabled }}\n"
            "apiVersion: monitoring.coreos.com/v1\nkind: PodMonitor\nmetadata:\n  name: keda-operator\n"
            "spec:\n  selector: {matchLabels: {app: keda-operator}}\n  podMetricsEndpoints: [{port: metrics}]\n"
            "{{- end }}\n"
        },
    ),
}


@pytest.fixture(scope="module")
def mirror(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("charts")
    for name, (crds, templates) in STAND_INS.items():
        chart = root / name
        (chart / "crds").mkdir(parents=True)
        (chart / "templates").mkdir()
        (chart / "Chart.yaml").write_text(f"apiVersion: v2\nname: {name}\nversion: 0.0.1\n")
        (chart / "values.yaml").write_text("{}\n")
        for crd in crds:
            (chart / "crds" / f"{crd}.yaml").write_text(yaml.safe_dump(crd_manifest(crd)))
        for file, text in templates.items():
            (chart / "templates" / file).write_text(text)
    return root


def kubelet(kube: FakeKube, obj: dict) -> None:
    """A Deployment's pods run (and it reports ready) only if every image can be pulled."""
    if obj["kind"] != "Deployment":
        return
    spec = obj["spec"]["template"]["spec"]
    images = [c["image"] for c in spec.get("initContainers", []) + spec["containers"]]
    pulled = not any(i.startswith(UNPUBLISHED) for i in images)
    n = obj["spec"].get("replicas", 1)
    obj["status"] = {
        "observedGeneration": obj["metadata"]["generation"], "replicas": n, "updatedReplicas": n,
        "readyReplicas": n if pulled else 0, "availableReplicas": n if pulled else 0,
        "unavailableReplicas": 0 if pulled else n,
        "conditions": [
            {"type": "Available", "status": "True" if pulled else "False",
             "reason": "MinimumReplicasAvailable" if pulled else "MinimumReplicasUnavailable"},
            {"type": "Progressing", "status": "True",
             "reason": "NewReplicaSetAvailable" if pulled else "ReplicaSetUpdated"},
        ],
    }  # fmt: skip
    kube.put(obj)


@pytest.fixture
def fresh() -> Iterator[FakeKube]:
    k = FakeKube(crds=(), on_write=[kubelet]).start()
    yield k
    k.stop()


def install(kube: FakeKube, mirror: Path, tmp_path: Path, *steps: str, helm_major: int = 4, wait: str = WAIT,
            **env_over: str):  # fmt: skip
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(kube.kubeconfig())
    env = {**os.environ, **ENV, "KUBECONFIG": str(kubeconfig), "HELM": get_helm(helm_major),
           "CHART_MIRROR": str(mirror), "HELM_WAIT_FLAGS": wait, **env_over}  # fmt: skip
    env = {k: v for k, v in env.items() if v}
    return subprocess.run(["bash", str(SCRIPT), *steps], env=env, capture_output=True, text=True, timeout=600)


def test_the_documented_order_installs_everything_on_a_fresh_cluster(fresh, mirror, tmp_path):
    r = install(fresh, mirror, tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    kinds = {k.split("/")[0] for k in fresh.kinds()}
    assert {"NodePool", "EC2NodeClass", "NodeOverlay", "ClusterPolicy", "PrometheusRule", "PodMonitor"} <= kinds
    monitors = sorted(k for k in fresh.kinds() if k.startswith("ServiceMonitor/"))
    assert monitors == ["ServiceMonitor/aws-load-balancer-controller", "ServiceMonitor/gpu-operator",
                        "ServiceMonitor/karpenter"]  # fmt: skip
    # Every ServiceMonitor carries the label kube-prometheus-stack selects.
    sm = [o for o in fresh.objects.values() if o["kind"] == "ServiceMonitor"]
    assert {o["metadata"]["labels"]["release"] for o in sm} == {"kube-prometheus-stack"}
    order = [line.removeprefix("== ").split(" ")[0] for line in r.stdout.splitlines() if line.startswith("== ")]
    assert order == ["kube-prometheus-stack", "aws-load-balancer-controller", "karpenter", "slabench-fleet",
                     "gpu-operator", "keda", "slabench-monitoring"]  # fmt: skip
    # The MIG gate runs the suite image the script was given, and came up (helm waited for it).
    gate = fresh.get("Deployment", "kube-system", "slabench-fleet-mig-gate")
    assert gate["spec"]["template"]["spec"]["containers"][0]["image"] == SUITE_IMAGE
    assert gate["status"]["readyReplicas"] == 1


@pytest.mark.parametrize(
    ("image", "expected"),
    [("reg.example:5000/team/suite@sha256:" + "a" * 64, "reg.example:5000/team/suite@sha256:" + "a" * 64),
     ("reg.example:5000/team/suite:1.2", "reg.example:5000/team/suite:1.2")],
)  # fmt: skip
def test_the_suite_image_can_be_given_by_tag_or_digest(fresh, mirror, tmp_path, image, expected):
    r = install(fresh, mirror, tmp_path, "monitoring", "karpenter", "fleet", SUITE_IMAGE=image)
    assert r.returncode == 0, r.stderr[-3000:]
    gate = fresh.get("Deployment", "kube-system", "slabench-fleet-mig-gate")
    assert gate["spec"]["template"]["spec"]["containers"][0]["image"] == expected


def test_with_the_unpublished_default_image_wait_times_out_at_the_fleet(fresh, mirror, tmp_path):
    """What the first try met: the MIG gate's image pulled from nowhere, `--wait` gave up, and nothing after ran."""
    r = install(fresh, mirror, tmp_path, "monitoring", "karpenter", "fleet", "keda",
                SUITE_IMAGE="ghcr.io/slabench/suite:0.1.0", wait="--wait --timeout 5s")  # fmt: skip
    assert r.returncode != 0
    assert "== slabench-fleet" in r.stdout and "== keda" not in r.stdout


def test_without_the_suite_image_nothing_is_installed(fresh, mirror, tmp_path):
    r = install(fresh, mirror, tmp_path, SUITE_IMAGE="")
    assert r.returncode == 3 and "set SUITE_IMAGE" in r.stderr
    assert not [c for c in fresh.calls if c.method in ("POST", "PUT", "PATCH")]
    r = install(fresh, mirror, tmp_path, "fleet", SUITE_IMAGE="registry.example/suite")
    assert r.returncode == 3 and "names no tag or digest" in r.stderr


@pytest.mark.parametrize(
    ("steps", "kind"),
    [(("karpenter",), "ServiceMonitor"), (("gpu-operator",), "ServiceMonitor"), (("fleet",), "NodePool"),
     (("slabench-monitoring",), "PrometheusRule"), (("karpenter", "monitoring"), "ServiceMonitor")],
)  # fmt: skip
def test_out_of_order_the_install_aborts_as_on_eks(fresh, mirror, tmp_path, steps, kind):
    """The old runbook installed Karpenter (with its ServiceMonitor) first: on a fresh cluster that aborts."""
    r = install(fresh, mirror, tmp_path, *steps)
    assert r.returncode != 0
    assert kind in r.stderr and ("ensure CRDs are installed first" in r.stderr or "no matches for kind" in r.stderr)


def test_helm3_follows_the_same_order(fresh, mirror, tmp_path):
    # helm 3 waits by reading ReplicaSets, which the fake does not model: order only.
    r = install(fresh, mirror, tmp_path, helm_major=3, wait="--timeout 2m")
    assert r.returncode == 0, r.stderr[-3000:]


def test_missing_settings_and_unknown_steps_are_refused_with_the_fix(fresh, mirror, tmp_path):
    r = install(fresh, mirror, tmp_path, "monitorin")
    assert r.returncode == 3 and "unknown step 'monitorin'" in r.stderr
    env = {k: v for k, v in os.environ.items() if k not in ENV}
    p = subprocess.run(["bash", str(SCRIPT), "load-balancer"], env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 3 and "set CLUSTER" in p.stderr
