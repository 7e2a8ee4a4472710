"""vLLM replicas that follow demand (KEDA on vllm:num_requests_waiting), scale to zero off-hours, and stay within the
NodePool's GPU limit — asserted on the real `helm template` output; and `slabench deploy` keeps replicas fixed."""

from __future__ import annotations

import pytest
import yaml

from slabench.deploy.plan import serving_overrides
from tests import platform_helpers
from tests.platform_helpers import FLEET, SERVING, helm_template, one, render

helm_bin = platform_helpers.helm_bin
pytestmark = pytest.mark.usefixtures("helm_bin")
SCENARIO = SERVING / "ci" / "autoscaling-values.yaml"


def scaled() -> tuple[dict, dict]:
    docs = render(SERVING, values_files=(SCENARIO,))
    return one(docs, "ScaledObject"), one(docs, "Deployment")


def test_off_by_default_and_the_deployment_keeps_its_replicas():
    docs = render(SERVING)
    assert not [d for d in docs if d["kind"] == "ScaledObject"]
    assert one(docs, "Deployment")["spec"]["replicas"] == 1


def test_scales_the_deployment_on_the_vllm_queue_of_this_release():
    so, dep = scaled()
    assert so["spec"]["scaleTargetRef"] == {"name": dep["metadata"]["name"]}
    assert "replicas" not in dep["spec"]  # the HPA owns it; a helm upgrade must not reset it
    queue = next(t for t in so["spec"]["triggers"] if t["type"] == "prometheus")["metadata"]
    assert queue["query"] == 'sum(vllm:num_requests_waiting{namespace="slabench",service="t-vllm-serving"})'
    assert queue["threshold"] == "16" and queue["ignoreNullValues"] == "true"
    # The series come from the chart's own ServiceMonitor (same Service, same namespace).
    sm = one(render(SERVING), "ServiceMonitor")
    assert sm["spec"]["namespaceSelector"]["matchNames"] == ["slabench"]
    assert queue["serverAddress"].startswith("http://kube-prometheus-stack-prometheus.monitoring.svc")


def test_zero_off_hours_min_replicas_in_business_hours():
    so, _ = scaled()
    assert so["spec"]["minReplicaCount"] == 0 and so["spec"]["maxReplicaCount"] == 4
    cron = next(t for t in so["spec"]["triggers"] if t["type"] == "cron")["metadata"]
    assert cron == {"timezone": "Europe/Berlin", "start": "0 6 * * 1-5", "end": "0 22 * * 1-5", "desiredReplicas": "1"}
    always_on = one(render(SERVING, "autoscaling.enabled=true", "autoscaling.schedule.enabled=false"), "ScaledObject")
    assert always_on["spec"]["minReplicaCount"] == 1
    assert [t["type"] for t in always_on["spec"]["triggers"]] == ["prometheus"]


def test_scale_down_is_slow_and_scale_up_one_gpu_at_a_time():
    behavior = scaled()[0]["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]
    assert behavior["scaleUp"]["policies"] == [{"type": "Pods", "value": 1, "periodSeconds": 120}]
    assert behavior["scaleDown"]["stabilizationWindowSeconds"] >= 300


def test_max_replicas_must_fit_the_nodepool_gpu_limit():
    proc = helm_template(SERVING, set_values=("autoscaling.enabled=true", "autoscaling.maxReplicas=5", "gpu.count=2"))
    assert proc.returncode != 0
    assert "autoscaling.maxReplicas (5) x gpu.count (2) needs more GPUs than the NodePool limit" in proc.stderr
    proc = helm_template(SERVING, set_values=("autoscaling.enabled=true", "autoscaling.minReplicas=5"))
    assert proc.returncode != 0 and "minReplicas (5) is above autoscaling.maxReplicas (4)" in proc.stderr


def test_the_default_limit_is_the_fleet_pools_gpu_limit():
    serving = yaml.safe_load((SERVING / "values.yaml").read_text())["autoscaling"]
    pools = {d["metadata"]["name"]: d for d in render(FLEET) if d["kind"] == "NodePool"}
    for name in ("gpu-whole", "gpu-g7e-mig"):
        assert int(pools[name]["spec"]["limits"]["nvidia.com/gpu"]) == serving["nodePoolGpuLimit"], name


def test_slabench_deploy_measures_a_fixed_replica_count(tmp_path):
    from tests.unit.test_platform_deploy_plan import SLA, plan

    sla = tmp_path / "sla.yaml"
    sla.write_text(SLA)
    assert serving_overrides(plan("--sla", str(sla), "--dry-run"))["autoscaling"] == {"enabled": False}
