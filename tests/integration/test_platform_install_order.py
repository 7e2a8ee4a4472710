"""The documented install order works on a fresh cluster: scripts/eks/install-platform.sh, run for real with the real
`helm` binary, against the fake API server made strict about custom resources (a kind exists only once its CRD is
installed, as on EKS).

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

from tests.platform_fake_kube import FakeKube, crd_manifest
from tests.platform_helpers import ROOT, get_helm

SCRIPT = ROOT / "scripts" / "eks" / "install-platform.sh"
ENV = {"CLUSTER": "slabench", "AWS_REGION": "us-east-1", "VPC_ID": "vpc-0abc", "LBC_ROLE_ARN": "arn:aws:iam::1:role/l"}

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


@pytest.fixture
def fresh() -> Iterator[FakeKube]:
    k = FakeKube(crds=()).start()
    yield k
    k.stop()


def install(kube: FakeKube, mirror: Path, tmp_path: Path, *steps: str, helm_major: int = 4):
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(kube.kubeconfig())
    env = {**os.environ, **ENV, "KUBECONFIG": str(kubeconfig), "HELM": get_helm(helm_major),
           "CHART_MIRROR": str(mirror), "HELM_WAIT_FLAGS": "--timeout 2m"}  # fmt: skip
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
    r = install(fresh, mirror, tmp_path, helm_major=3)
    assert r.returncode == 0, r.stderr[-3000:]


def test_missing_settings_and_unknown_steps_are_refused_with_the_fix(fresh, mirror, tmp_path):
    r = install(fresh, mirror, tmp_path, "monitorin")
    assert r.returncode == 3 and "unknown step 'monitorin'" in r.stderr
    env = {k: v for k, v in os.environ.items() if k not in ENV}
    p = subprocess.run(["bash", str(SCRIPT), "load-balancer"], env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 3 and "set CLUSTER" in p.stderr
