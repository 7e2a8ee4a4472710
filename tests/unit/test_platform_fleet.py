"""Karpenter NodePools/EC2NodeClasses, the GPU Operator's MIG setup and the observability files, and how they fit
together (labels one file sets are the labels another selects on)."""

from __future__ import annotations

import json
import re

import pytest
import yaml

from tests.helpers import platform_helpers
from tests.helpers.platform_helpers import (
    FLEET,
    ROOT,
    SERVING,
    helm_template,
    one,
    render,
)

helm_bin = platform_helpers.helm_bin  # session fixture: fetches helm with .ci/get-helm
pytestmark = pytest.mark.usefixtures("helm_bin")

GPU_OPERATOR = ROOT / "gpu-operator"
OBSERVABILITY = ROOT / "observability"


def pools() -> dict[str, dict]:
    return {d["metadata"]["name"]: d for d in render(FLEET) if d["kind"] == "NodePool"}


def requirement(pool: dict, key: str) -> dict:
    (req,) = [r for r in pool["spec"]["template"]["spec"]["requirements"] if r["key"] == key]
    return req


def mig_configs() -> dict:
    values = yaml.safe_load((GPU_OPERATOR / "values.yaml").read_text())
    return yaml.safe_load(values["migManager"]["config"]["data"]["config.yaml"])["mig-configs"]


def test_four_pools_whole_cards_blackwell_mig_and_cpu():
    p = pools()
    assert set(p) == {"gpu-whole", "gpu-g7", "gpu-g7e-mig", "cpu-locust"}
    # g7 (RTX PRO 4500 Blackwell): one-card sizes on the Blackwell node class, from an AMI release that knows G7.
    assert requirement(p["gpu-g7"], "karpenter.k8s.aws/instance-family")["values"] == ["g7"]
    assert requirement(p["gpu-g7"], "karpenter.k8s.aws/instance-gpu-count")["values"] == ["1"]
    assert p["gpu-g7"]["spec"]["template"]["spec"]["nodeClassRef"]["name"] == "gpu-blackwell"
    alias = one(render(FLEET), "EC2NodeClass", "gpu-blackwell")["spec"]["amiSelectorTerms"]
    assert alias == [{"alias": "al2023@v20260917"}]  # the first EKS AMI release with G7/G7e support
    assert requirement(p["gpu-whole"], "karpenter.k8s.aws/instance-family")["values"] == ["g5", "g6", "g6e"]
    assert requirement(p["gpu-g7e-mig"], "node.kubernetes.io/instance-type")["values"] == ["g7e.2xlarge", "g7e.4xlarge"]
    assert requirement(p["cpu-locust"], "karpenter.k8s.aws/instance-family")["values"] == ["c7i", "m7i"]


def test_g7e_pool_carries_the_mig_config_label_and_it_names_a_mig_parted_config():
    labels = pools()["gpu-g7e-mig"]["spec"]["template"]["metadata"]["labels"]
    assert labels["nvidia.com/mig.config"] == "all-2g.48gb"
    config = mig_configs()["all-2g.48gb"]
    assert config == [{"devices": "all", "mig-enabled": True, "mig-devices": {"2g.48gb": 2}}]
    # Unlabelled nodes fall back to the operator's default, which must exist too.
    values = yaml.safe_load((GPU_OPERATOR / "values.yaml").read_text())
    assert values["migManager"]["config"]["default"] in mig_configs()


def test_node_overlay_tells_karpenter_the_slice_count_of_the_g7e_pool():
    overlay = one(render(FLEET), "NodeOverlay")
    assert overlay["apiVersion"] == "karpenter.sh/v1alpha1"
    reqs = {r["key"]: r["values"] for r in overlay["spec"]["requirements"]}
    assert reqs["karpenter.sh/nodepool"] == ["gpu-g7e-mig"]
    assert reqs["node.kubernetes.io/instance-type"] == ["g7e.2xlarge", "g7e.4xlarge"]
    slices = sum(mig_configs()["all-2g.48gb"][0]["mig-devices"].values())
    assert overlay["spec"]["capacity"] == {"nvidia.com/gpu": str(slices)}
    # The overlay's count is per node, so the pool must hold one-card sizes only.
    assert requirement(pools()["gpu-g7e-mig"], "karpenter.k8s.aws/instance-gpu-count")["values"] == ["1"]


def test_no_overlay_without_the_g7e_pool():
    docs = render(FLEET, values_files=(FLEET / "ci" / "whole-cards-only-values.yaml",))
    assert not [d for d in docs if d["kind"] == "NodeOverlay"]
    assert "gpu-g7e-mig" not in {d["metadata"]["name"] for d in docs if d["kind"] == "NodePool"}


def test_gpu_pools_are_tainted_and_the_serving_chart_tolerates_exactly_that():
    taints = [
        t for name, p in pools().items() if name.startswith("gpu") for t in p["spec"]["template"]["spec"]["taints"]
    ]
    assert taints == [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}] * 3
    dep = one(render(SERVING), "Deployment")
    tol = dep["spec"]["template"]["spec"]["tolerations"][0]
    assert (tol["key"], tol["operator"], tol["effect"]) == ("nvidia.com/gpu", "Exists", "NoSchedule")


def test_cpu_pool_taint_and_name_match_the_locust_chart_defaults():
    cpu = pools()["cpu-locust"]
    (taint,) = cpu["spec"]["template"]["spec"]["taints"]
    locust_values = yaml.safe_load((ROOT / "helm" / "locust" / "values.yaml").read_text())
    assert locust_values["nodeSelector"] == {"karpenter.sh/nodepool": "cpu-locust"}
    (tol,) = locust_values["tolerations"]
    assert (tol["key"], tol["value"], tol["effect"]) == (taint["key"], taint["value"], taint["effect"])


def test_every_pool_consolidates_to_zero_and_has_limits():
    for name, pool in pools().items():
        spec = pool["spec"]
        assert spec["disruption"]["consolidationPolicy"] == "WhenEmptyOrUnderutilized", name
        assert re.fullmatch(r"\d+[smh]", spec["disruption"]["consolidateAfter"]), name
        assert "replicas" not in spec, f"{name}: static capacity would never scale to zero"
        assert spec["limits"], name
    assert pools()["gpu-whole"]["spec"]["limits"]["nvidia.com/gpu"] == "8"


def test_drift_and_expiry_never_drain_a_node_mid_run():
    """do-not-disrupt on the pods does not stop drift once a terminationGracePeriod is set, and expiry is no budgeted
    disruption: every pool gives drift a zero budget and never expires its nodes."""
    for name, pool in pools().items():
        spec = pool["spec"]
        assert {"nodes": "0", "reasons": ["Drifted"]} in spec["disruption"]["budgets"], name
        assert spec["template"]["spec"]["expireAfter"] == "Never", name


def test_node_classes_pin_al2023_use_raid0_for_gpus_and_imdsv2():
    classes = {d["metadata"]["name"]: d["spec"] for d in render(FLEET) if d["kind"] == "EC2NodeClass"}
    assert set(classes) == {"gpu", "gpu-blackwell", "cpu"}
    for name, spec in classes.items():
        (term,) = spec["amiSelectorTerms"]
        assert re.fullmatch(r"al2023@v\d{8}", term["alias"]), name  # pinned, never @latest
        assert spec["metadataOptions"]["httpTokens"] == "required"
        assert spec["metadataOptions"]["httpPutResponseHopLimit"] == 1
        assert spec["blockDeviceMappings"][0]["ebs"]["encrypted"] is True
        # private subnets only, and no public address even in a subnet that would give one
        assert spec["subnetSelectorTerms"] == [
            {"tags": {"karpenter.sh/discovery": "slabench", "kubernetes.io/role/internal-elb": "1"}}
        ]
        assert spec["associatePublicIPAddress"] is False
    assert classes["gpu"]["instanceStorePolicy"] == "RAID0"
    assert classes["gpu-blackwell"]["instanceStorePolicy"] == "RAID0"
    assert "instanceStorePolicy" not in classes["cpu"]
    assert pools()["gpu-g7e-mig"]["spec"]["template"]["spec"]["nodeClassRef"]["name"] == "gpu-blackwell"


def test_latest_ami_alias_is_refused():
    proc = helm_template(FLEET, set_values=("amiAlias=al2023@latest",))
    assert proc.returncode != 0 and "amiAlias" in proc.stderr


def test_custom_ami_for_blackwell_switches_to_an_explicit_family():
    docs = render(FLEET, values_files=(FLEET / "ci" / "custom-network-values.yaml",))
    bw = one(docs, "EC2NodeClass", "gpu-blackwell")["spec"]
    assert bw["amiSelectorTerms"] == [{"tags": {"slabench.io/ami": "al2023-nvidia-595"}}]
    assert bw["amiFamily"] == "AL2023"
    assert one(docs, "EC2NodeClass", "gpu")["spec"]["subnetSelectorTerms"][0] == {"id": "subnet-0a1b2c3d4e5f60718"}


def test_gpu_operator_values_fit_the_eks_nvidia_ami_and_mig_single():
    v = yaml.safe_load((GPU_OPERATOR / "values.yaml").read_text())
    assert v["driver"]["enabled"] is False and v["toolkit"]["enabled"] is False
    assert v["mig"]["strategy"] == "single"
    # The chart creates the mig-parted ConfigMap from values (no kubectl apply step on a fresh cluster).
    assert v["migManager"]["config"]["create"] is True and "config.yaml" in v["migManager"]["config"]["data"]
    assert v["dcgmExporter"]["serviceMonitor"]["enabled"] is True


def test_a_new_g7e_node_is_gated_until_sliced_and_the_gpu_operator_may_run_there():
    """The g7e pool's nodes start with the MIG gate's startup taint; vLLM does not tolerate it, the GPU Operator's
    pods (mig-manager, device plugin, feature discovery) and node-feature-discovery do; the other pools have none."""
    docs = render(FLEET)
    p = pools()
    taint = {"key": "slabench.io/mig-pending", "value": "true", "effect": "NoSchedule"}
    assert p["gpu-g7e-mig"]["spec"]["template"]["spec"]["startupTaints"] == [taint]
    assert "startupTaints" not in p["gpu-whole"]["spec"]["template"]["spec"]
    v = yaml.safe_load((GPU_OPERATOR / "values.yaml").read_text())
    tolerates = {"key": "slabench.io/mig-pending", "operator": "Exists", "effect": "NoSchedule"}
    assert tolerates in v["daemonsets"]["tolerations"]
    assert tolerates in v["node-feature-discovery"]["worker"]["tolerations"]
    # mig-manager retries a failed mode change with a reboot instead of assuming a GPU reset works in the VM.
    assert {"name": "WITH_REBOOT", "value": "true"} in v["migManager"]["env"]
    serving = one(render(SERVING, values_files=(SERVING / "ci" / "g7e-mig-values.yaml",)), "Deployment")
    keys = {t["key"] for t in serving["spec"]["template"]["spec"]["tolerations"]}
    assert "slabench.io/mig-pending" not in keys
    # The gate itself: the pool, profile and slice count it checks come from the pool's own values.
    gate = one(docs, "Deployment", "t-mig-gate")
    cmd = gate["spec"]["template"]["spec"]["containers"][0]["command"]
    args = dict(zip(cmd[3::2], cmd[4::2], strict=True))
    assert cmd[:3] == ["slabench", "fleet", "mig-gate"]
    assert args == {"--pool": "gpu-g7e-mig", "--taint": "slabench.io/mig-pending", "--profile": "2g.48gb",
                    "--slices": "2", "--failed-after": "20m", "--max-replacements": "2",
                    "--interval": "15s"}  # fmt: skip
    affinity = gate["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]
    term = affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]["matchExpressions"][0]
    assert term == {"key": "karpenter.sh/nodepool", "operator": "DoesNotExist"}
    rules = one(docs, "ClusterRole", "t-mig-gate")["rules"]
    assert {(r["apiGroups"][0], r["resources"][0]): r["verbs"] for r in rules} == {
        ("", "nodes"): ["get", "list", "patch"], ("karpenter.sh", "nodeclaims"): ["list", "delete"],
        ("", "events"): ["create"]}  # fmt: skip


def test_without_the_g7e_pool_there_is_no_gate():
    docs = render(FLEET, values_files=(FLEET / "ci" / "whole-cards-only-values.yaml",))
    assert not [d for d in docs if "mig-gate" in d["metadata"]["name"]]


def test_prometheus_selects_the_labels_the_service_monitors_carry():
    kps = yaml.safe_load((OBSERVABILITY / "kube-prometheus-stack-values.yaml").read_text())
    selector = kps["prometheus"]["prometheusSpec"]["serviceMonitorSelector"]["matchLabels"]
    gpu_op = yaml.safe_load((GPU_OPERATOR / "values.yaml").read_text())
    assert gpu_op["dcgmExporter"]["serviceMonitor"]["additionalLabels"] == selector
    sm_labels = one(render(SERVING), "ServiceMonitor")["metadata"]["labels"]
    assert selector.items() <= sm_labels.items()
    assert kps["prometheus"]["prometheusSpec"]["serviceMonitorNamespaceSelector"] == {}
    # The "nodes per NodePool" panel needs the node label exported by kube-state-metrics.
    assert "karpenter.sh/nodepool" in kps["kube-state-metrics"]["metricLabelsAllowlist"][0]


def test_dashboard_has_the_panels_and_uses_metric_names_that_exist():
    dash = json.loads((OBSERVABILITY / "dashboards" / "slabench-fleet.json").read_text())
    panels = {p["title"]: p for p in dash["panels"] if p["type"] != "row"}
    exprs = {title: " ".join(t["expr"] for t in p["targets"]) for title, p in panels.items()}
    wanted = {
        "TTFT": "vllm:time_to_first_token_seconds_bucket",
        "Inter-token": "vllm:inter_token_latency_seconds_bucket",
        "Queue depth": "vllm:num_requests_waiting",
        "KV cache": "vllm:kv_cache_usage_perc",
        "GPU utilisation": "DCGM_FI_DEV_GPU_UTIL",
        "Nodes per NodePool": "label_karpenter_sh_nodepool",
    }
    for prefix, metric in wanted.items():
        matches = [t for t in exprs if t.startswith(prefix)]
        assert matches, f"no panel titled {prefix}..."
        assert metric in exprs[matches[0]], prefix
    # Every vLLM metric used is one vLLM exports (docs: docs/architecture.md "Metric names the ecosystem expects").
    known = {"vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
             "vllm:prompt_tokens_total", "vllm:generation_tokens_total", "vllm:num_preemptions_total",
             "vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds",
             "vllm:e2e_request_latency_seconds"}  # fmt: skip
    used = set(re.findall(r"vllm:[a-z0-9_]+", " ".join(exprs.values())))
    assert {re.sub(r"_bucket$", "", m) for m in used} <= known
    for title, p in panels.items():
        for t in p["targets"]:
            assert t["expr"].count("(") == t["expr"].count(")"), title
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
