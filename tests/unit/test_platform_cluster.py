"""The EKS cluster definition (scripts/eks/cluster.yaml): valid against eksctl's own ClusterConfig schema, and system
nodes big and numerous enough for what the runbook installs on them.

eksctl is not run here (it would create the cluster). Its v1alpha5 ClusterConfig JSON schema is kept as test data
(tests/data/eksctl/, from eksctl v0.230.0, with its source) and unknown keys are errors, as in the schema itself.
"""

from __future__ import annotations

import json
import re

import yaml
from jsonschema import Draft7Validator

from tests.helpers.platform_helpers import ROOT

CLUSTER = ROOT / "scripts" / "eks" / "cluster.yaml"
SCHEMA = ROOT / "tests" / "data" / "eksctl" / "clusterconfig-v1alpha5.schema.json"
ENV = {"CLUSTER": "slabench", "AWS_REGION": "us-east-1", "ACCOUNT": "123456789012"}


def config() -> dict:
    """What `envsubst < cluster.yaml` gives eksctl: ${VAR} replaced (every one must be known), the rest untouched."""
    text = re.sub(r"\$\{(\w+)\}", lambda m: ENV[m.group(1)], CLUSTER.read_text())
    return yaml.safe_load(text)


def test_the_cluster_config_is_valid_for_eksctl():
    errors = sorted(Draft7Validator(json.loads(SCHEMA.read_text())).iter_errors(config()), key=str)
    assert [f"{list(e.absolute_path)}: {e.message}" for e in errors] == []


def test_kubernetes_is_the_version_the_platform_is_built_for():
    """1.36, the seed's (1.33 left EKS standard support in July 2026); the charts accept it."""
    assert config()["metadata"]["version"] == "1.36"
    for chart in ("helm/locust", "helm/vllm-serving", "karpenter", "observability"):
        kube_version = yaml.safe_load((ROOT / chart / "Chart.yaml").read_text())["kubeVersion"]
        assert kube_version == ">=1.30.0-0", chart


def test_an_unknown_key_is_caught():
    bad = config()
    bad["managedNodeGroups"][0]["instancetype"] = "m7i.xlarge"
    assert list(Draft7Validator(json.loads(SCHEMA.read_text())).iter_errors(bad))


def test_what_the_charts_and_the_install_script_rely_on():
    c = config()
    assert c["iam"]["withOIDC"] is True  # IRSA for the weights, the results, the controllers
    addons = {a["name"]: a for a in c["addons"]}
    assert json.loads(addons["vpc-cni"]["configurationValues"]) == {"enableNetworkPolicy": "true"}
    # Prometheus' PVCs name no class: the EBS driver's default gp3 class serves them.
    assert json.loads(addons["aws-ebs-csi-driver"]["configurationValues"]) == {"defaultStorageClass": {"enabled": True}}
    assert c["metadata"]["tags"]["karpenter.sh/discovery"] == "slabench"  # karpenter/ selects subnets and SGs by it
    roles = {sa["metadata"]["name"]: sa for sa in c["iam"]["serviceAccounts"]}
    assert roles["aws-load-balancer-controller"]["wellKnownPolicies"] == {"awsLoadBalancerController": True}
    # Karpenter through Pod Identity, with the policies its v1.14 CloudFormation stack creates.
    (karpenter,) = c["iam"]["podIdentityAssociations"]
    assert (karpenter["namespace"], karpenter["serviceAccountName"]) == ("kube-system", "karpenter")
    assert len(karpenter["permissionPolicyARNs"]) == 6 and "eks-pod-identity-agent" in addons
    assert c["iamIdentityMappings"][0]["arn"].endswith(":role/KarpenterNodeRole-slabench")


# Allocatable of one system node (m7i.xlarge: 4 vCPU, 16 GiB) after EKS's kube-reserved (4 cores: 80m; memory
# 255 MiB + 11 MiB x 58 max pods) and the 100 MiB eviction threshold: ~3.92 CPU, ~14.7 GiB.
NODE_ALLOCATABLE = {"cpu": 3.92, "memory_gib": 14.7}
# Pods with no requests in their chart's defaults still use something: counted at this much each.
UNREQUESTED = {"cpu": 0.1, "memory_gib": 0.25}


def _cpu(v) -> float:
    s = str(v)
    return float(s[:-1]) / 1000 if s.endswith("m") else float(s)


def _gib(v) -> float:
    s = str(v)
    for unit, f in (("Gi", 1.0), ("Mi", 1 / 1024)):
        if s.endswith(unit):
            return float(s[: -len(unit)]) * f
    raise AssertionError(f"memory {s!r}")


def system_requests() -> list[tuple[str, int, float, float]]:
    """(what, replicas, cpu, memory GiB) of every pod the runbook places on the system nodes: our values where we set
    requests, the upstream charts' defaults where they do (GPU Operator v26.7.0, KEDA 2.20.2), UNREQUESTED otherwise."""
    load = lambda p: yaml.safe_load((ROOT / p).read_text())  # noqa: E731
    karp = load("scripts/eks/values/karpenter.yaml")["controller"]["resources"]["requests"]
    lbc = load("scripts/eks/values/aws-load-balancer-controller.yaml")
    keda = load("scripts/eks/values/keda.yaml")["resources"]
    prom = load("observability/kube-prometheus-stack-values.yaml")["prometheus"]["prometheusSpec"]["resources"]
    gate = load("karpenter/values.yaml")["migGate"]["resources"]["requests"]
    u = (UNREQUESTED["cpu"], UNREQUESTED["memory_gib"])
    rows = [
        ("karpenter", 2, _cpu(karp["cpu"]), _gib(karp["memory"])),
        ("aws-load-balancer-controller", lbc["replicaCount"], _cpu(lbc["resources"]["requests"]["cpu"]),
         _gib(lbc["resources"]["requests"]["memory"])),
        ("keda-operator", 1, _cpu(keda["operator"]["requests"]["cpu"]), _gib(keda["operator"]["requests"]["memory"])),
        ("keda-metrics-apiserver", 1, _cpu(keda["metricServer"]["requests"]["cpu"]),
         _gib(keda["metricServer"]["requests"]["memory"])),
        ("keda-admission-webhooks", 1, 0.1, 100 / 1024),  # chart default
        ("prometheus", 1, _cpu(prom["requests"]["cpu"]), _gib(prom["requests"]["memory"])),
        ("alertmanager", 1, *u), ("grafana", 1, *u), ("prometheus-operator", 1, *u), ("kube-state-metrics", 1, *u),
        ("gpu-operator", 1, 0.2, 100 / 1024), ("nfd-master", 1, 0.1, 128 / 1024), ("nfd-gc", 1, 0.01, 128 / 1024),
        ("slabench-mig-gate", 1, _cpu(gate["cpu"]), _gib(gate["memory"])),
        ("coredns", 2, 0.1, 70 / 1024),
    ]  # fmt: skip
    return rows


# DaemonSets on every system node: aws-node (25m), kube-proxy (100m), ebs-csi-node, node-exporter, nfd-worker.
PER_NODE = {"cpu": 0.025 + 0.1 + 0.03 + UNREQUESTED["cpu"] + 0.005, "memory_gib": 0.0 + 0.0 + 0.1 + 0.25 + 0.0625}


def test_two_system_nodes_hold_the_platform_with_room_and_one_small_node_would_not():
    ng = config()["managedNodeGroups"][0]
    assert ng["instanceType"] == "m7i.xlarge" and ng["minSize"] >= 2  # Karpenter's replicas need two hosts
    rows = system_requests()
    cpu = sum(n * c for _, n, c, _ in rows)
    mem = sum(n * m for _, n, _, m in rows)
    nodes = ng["minSize"]
    free_cpu = nodes * (NODE_ALLOCATABLE["cpu"] - PER_NODE["cpu"])
    free_mem = nodes * (NODE_ALLOCATABLE["memory_gib"] - PER_NODE["memory_gib"])
    assert cpu <= 0.75 * free_cpu, (cpu, free_cpu)  # room for rolling updates and the operators' own growth
    assert mem <= 0.75 * free_mem, (mem, free_mem)
    # The old runbook's single m7i.large (2 vCPU, 8 GiB, ~1.93 CPU / ~6.7 GiB allocatable): it does not fit.
    assert cpu > 1.93 - PER_NODE["cpu"] or mem > 6.7 - PER_NODE["memory_gib"]
