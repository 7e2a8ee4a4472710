"""vLLM replicas that follow demand (KEDA on the load per replica: running + waiting requests), scale to zero
off-hours, and stay within the NodePool's GPU limit — asserted on the real `helm template` output; the rule the chart
renders, run through the HPA's arithmetic on a queue of replicas, settles under a steady load, a ramp, a burst and
idleness; and `slabench deploy` keeps replicas fixed."""

from __future__ import annotations

import pytest
import yaml

from slabench.deploy.hpa import Fleet, Rule, desired_replicas, simulate
from slabench.deploy.plan import serving_overrides
from tests.helpers import platform_helpers
from tests.helpers.platform_helpers import FLEET, SERVING, helm_template, one, render

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


def test_scales_the_deployment_on_the_load_per_replica_of_this_release():
    so, dep = scaled()
    assert so["spec"]["scaleTargetRef"] == {"name": dep["metadata"]["name"]}
    assert "replicas" not in dep["spec"]  # the HPA owns it; a helm upgrade must not reset it
    queue = next(t for t in so["spec"]["triggers"] if t["type"] == "prometheus")["metadata"]
    sel = '{namespace="slabench",service="t-vllm-serving"}'
    assert queue["query"] == f"sum(vllm:num_requests_running{sel}) + sum(vllm:num_requests_waiting{sel})"
    assert queue["threshold"] == "48"  # 0.75 of max_num_seqs 64
    assert "metricType" not in queue  # KEDA's default, AverageValue: replicas = ⌈load ÷ 48⌉
    assert queue["activationThreshold"] == "0" and queue["ignoreNullValues"] == "true"
    wider = one(render(SERVING, "autoscaling.enabled=true", "model.maxNumSeqs=128"), "ScaledObject")
    assert wider["spec"]["triggers"][0]["metadata"]["threshold"] == "96"
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


# --- the rule the chart renders, through the HPA's arithmetic -------------------------------------------------------


def rendered_rule(*values: str, values_files: tuple = (SCENARIO,)) -> tuple[Rule, Fleet]:
    so = one(render(SERVING, *values, values_files=values_files), "ScaledObject")
    trigger = next(t for t in so["spec"]["triggers"] if t["type"] == "prometheus")["metadata"]
    assert "num_requests_waiting" in trigger["query"]
    rule = Rule(counts_running="num_requests_running" in trigger["query"], target=float(trigger["threshold"]))
    behavior = so["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]
    fleet = Fleet(
        min_replicas=1,
        max_replicas=so["spec"]["maxReplicaCount"],
        poll_s=so["spec"]["pollingInterval"],
        up_period_s=behavior["scaleUp"]["policies"][0]["periodSeconds"],
        down_window_s=behavior["scaleDown"]["stabilizationWindowSeconds"],
        down_period_s=behavior["scaleDown"]["policies"][0]["periodSeconds"],
    )
    return rule, fleet


def settled(trace, t0: float) -> bool:
    """From t0 on: one replica count, and no standing queue (what waits is gone within a poll)."""
    tail = trace.since(t0)
    return len(set(tail.replicas)) == 1 and max(tail.waiting) < 1.0


def test_hpa_arithmetic_follows_kubernetes():
    assert desired_replicas(2, 100, 48) == 2  # 100 / 96 = 1.04: within the 0.1 tolerance, keep
    assert desired_replicas(2, 96, 48) == 2
    assert desired_replicas(2, 140, 48) == 3
    assert desired_replicas(3, 100, 48) == 3  # 100/144 = 0.69 → ⌈100/48⌉ = 3
    assert desired_replicas(1, 0, 48) == 0


HOUR = 3600.0


def test_a_steady_load_settles_without_a_standing_queue():
    """8 requests/s of 15 s each: 120 in flight, 2.5 replicas' worth at 48 — it holds 3, nothing waits."""
    rule, fleet = rendered_rule()
    trace = simulate(rule, lambda t: 8.0, 2 * HOUR, fleet)
    assert settled(trace, HOUR) and trace.replicas[-1] == 3


def test_a_ramp_scales_up_without_ever_scaling_down():
    rule, fleet = rendered_rule()
    trace = simulate(rule, lambda t: min(10.0, 1.0 + 9.0 * t / HOUR), 2 * HOUR, fleet)
    assert trace.replicas == sorted(trace.replicas)  # never down while the load grows
    # 10/s × 15 s = 150 in flight: 3 replicas carry 50 each, within the tolerance of 48 (and 192 slots)
    assert settled(trace, 1.5 * HOUR) and trace.replicas[-1] == 3


def test_a_burst_goes_to_the_maximum_then_back_to_the_minimum():
    """The seed's burst, 20,000 requests in 195 s, then nothing."""
    rule, fleet = rendered_rule()
    trace = simulate(rule, lambda t: 20000 / 195 if t < 195 else 0.0, 2 * HOUR, fleet)
    assert max(trace.replicas) == fleet.max_replicas
    assert settled(trace, 1.5 * HOUR) and trace.replicas[-1] == fleet.min_replicas


def test_idle_stays_at_the_minimum():
    rule, fleet = rendered_rule()
    trace = simulate(rule, lambda t: 0.0, HOUR, fleet)
    assert set(trace.replicas) == {fleet.min_replicas}


def test_the_queue_alone_would_not_hold_a_steady_load():
    """The former rule, ⌈waiting ÷ 16⌉: with nothing queued it drops to the minimum, the queue comes back, and it
    never settles."""
    _, fleet = rendered_rule()
    trace = simulate(Rule(counts_running=False, target=16), lambda t: 8.0, 2 * HOUR, fleet)
    assert not settled(trace, HOUR)


def test_the_planner_reads_the_rule_the_chart_renders(tmp_path):
    """`slabench plan --autoscale` reads the rule from the chart's values and template; what it reads is what
    `helm template` renders, for the shipped values and for a values file that changes them."""
    from slabench.plan.chart_rule import chart_rule

    wider = tmp_path / "wider.yaml"
    wider.write_text("model: {maxNumSeqs: 128}\nautoscaling: {maxReplicas: 3, targetUtilization: 0.5}\n")
    for files in ((SCENARIO,), (SCENARIO, wider)):
        so = one(render(SERVING, values_files=files), "ScaledObject")
        rule, fleet = rendered_rule(values_files=files)
        planned = chart_rule([str(f) for f in files])
        assert (planned.target, planned.counts_running) == (rule.target, rule.counts_running)
        assert (planned.max_replicas, planned.poll_s, planned.cooldown_s) == (
            fleet.max_replicas,
            fleet.poll_s,
            so["spec"]["cooldownPeriod"],
        )
        assert (planned.up_period_s, planned.down_window_s, planned.down_period_s) == (
            fleet.up_period_s,
            fleet.down_window_s,
            fleet.down_period_s,
        )
        cron = next(t for t in so["spec"]["triggers"] if t["type"] == "cron")["metadata"]
        assert planned.schedule == (float(cron["start"].split()[1]), float(cron["end"].split()[1]))
    assert chart_rule([str(SCENARIO), str(wider)]).target == 64.0  # ⌊128 × 0.5⌋, as rendered
