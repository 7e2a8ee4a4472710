"""GPU nodes read from a live cluster with the kubernetes client: labels set by Kubernetes, Karpenter and NVIDIA GPU
feature discovery (GFD) become `NodeFacts`. Mapping labels → facts is pure; only `read_cluster_nodes` talks to the
API server."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

from slabench.core.errors import UserError
from slabench.core.extras import require
from slabench.fleet.facts import FleetFacts, gpu_for_product, instance_gpu
from slabench.fleet.rules import Finding, NodeFacts, Severity
from slabench.fleet.versions import ComputeCapability, DriverVersion

if TYPE_CHECKING:
    from kubernetes.client import ApiClient, CoreV1Api

INSTANCE_TYPE = "node.kubernetes.io/instance-type"
INSTANCE_TYPE_BETA = "beta.kubernetes.io/instance-type"
GPU_PRESENT = "nvidia.com/gpu.present"
GPU_PRODUCT = "nvidia.com/gpu.product"
CC_MAJOR, CC_MINOR = "nvidia.com/gpu.compute.major", "nvidia.com/gpu.compute.minor"
DRIVER_FULL = "nvidia.com/cuda.driver-version.full"
DRIVER_PARTS = ("nvidia.com/cuda.driver-version.major", "nvidia.com/cuda.driver-version.minor",
                "nvidia.com/cuda.driver-version.revision")  # fmt: skip
DRIVER_PARTS_OLD = ("nvidia.com/cuda.driver.major", "nvidia.com/cuda.driver.minor", "nvidia.com/cuda.driver.rev")
MIG_CONFIG = "nvidia.com/mig.config"
_MIG_COUNT = re.compile(r"^nvidia\.com/mig-(.+)\.count$")  # GFD, mig.strategy=mixed
_PAGE = 500


def _driver(labels: Mapping[str, str]) -> DriverVersion | None:
    text = labels.get(DRIVER_FULL)
    if not text:
        for keys in (DRIVER_PARTS, DRIVER_PARTS_OLD):
            parts = [labels.get(k) for k in keys]
            if parts[0]:
                text = ".".join(p for p in parts if p)
                break
    try:
        return DriverVersion.parse(text) if text else None
    except ValueError:
        return None


def _mig_profiles(labels: Mapping[str, str]) -> tuple[str, ...]:
    """MIG profiles from GFD: the product suffix (strategy single), per-profile counts (mixed), else the
    mig-parted config label `all-<profile>` (what the node was asked to become)."""
    product = labels.get(GPU_PRODUCT, "")
    if "-MIG-" in product:
        return (product.split("-MIG-", 1)[1],)
    mixed = sorted(m.group(1) for k in labels if (m := _MIG_COUNT.match(k)))
    if mixed:
        return tuple(mixed)
    config = labels.get(MIG_CONFIG, "")
    if config.startswith("all-") and config != "all-disabled":
        return (config[len("all-") :],)
    return ()


def node_facts_from_labels(name: str, labels: Mapping[str, str], facts: FleetFacts) -> NodeFacts | str:
    """NodeFacts for a GPU node, or the reason the node is skipped (a string)."""
    instance_type = labels.get(INSTANCE_TYPE) or labels.get(INSTANCE_TYPE_BETA)
    known = instance_gpu(facts, instance_type) if instance_type else None
    gpu_key = known[0] if known else gpu_for_product(facts, labels.get(GPU_PRODUCT, ""))
    reported_cc = None
    if labels.get(CC_MAJOR) and labels.get(CC_MINOR):
        try:
            reported_cc = ComputeCapability.parse(f"{labels[CC_MAJOR]}.{labels[CC_MINOR]}")
        except ValueError:
            reported_cc = None
    is_gpu_node = gpu_key or reported_cc or labels.get(GPU_PRESENT) == "true" or GPU_PRODUCT in labels
    if not is_gpu_node:
        return f"{name}: not a GPU node ({instance_type or 'no instance-type label'})"
    gpu = facts.gpus.get(gpu_key) if gpu_key else None
    notes = []
    if gpu and reported_cc and reported_cc != gpu.cc:
        message = (
            f"the facts table gives {gpu.name} compute capability {gpu.cc}, the node reports {reported_cc}: "
            "using the node's value — fix gpu_facts.yaml"
        )
        notes.append(Finding("facts", Severity.WARN, message))
    cc = reported_cc or (gpu.cc if gpu else None)
    if cc is None:
        return f"{name}: GPU node of unknown GPU ({labels.get(GPU_PRODUCT) or instance_type}) and no compute labels"
    return NodeFacts(
        name=name,
        instance_type=instance_type,
        gpu=gpu_key,
        gpu_name=gpu.name if gpu else labels.get(GPU_PRODUCT, "unknown GPU").split("-MIG-")[0],
        cc=cc,
        driver=_driver(labels),
        mig_profiles=_mig_profiles(labels),
        notes=tuple(notes),
    )


def _list_nodes(api: CoreV1Api, selector: str | None) -> Iterator[tuple[str, dict[str, str]]]:
    token = None
    while True:
        page = api.list_node(label_selector=selector or None, limit=_PAGE, _continue=token, _request_timeout=30)
        for node in page.items:
            meta = node.metadata
            if meta is not None and meta.name:  # the API names every node; a nameless item is no node to check
                yield meta.name, dict(meta.labels or {})
        token = page.metadata._continue if page.metadata else None
        if not token:
            return


def _api_client(kubeconfig: str | None, context: str | None) -> ApiClient:
    require("kubernetes", "reading the cluster")
    from kubernetes import client, config

    try:
        if kubeconfig or context or not _in_cluster():
            api: ApiClient = config.new_client_from_config(config_file=kubeconfig, context=context)
            return api
        cfg = client.Configuration()
        config.load_incluster_config(client_configuration=cfg)
        return client.ApiClient(cfg)
    except (config.ConfigException, FileNotFoundError, OSError) as e:
        raise UserError(f"kubeconfig: cannot load it ({e}) — pass --kubeconfig/--context or set KUBECONFIG") from None


def _in_cluster() -> bool:
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST"))


def read_cluster_nodes(
    facts: FleetFacts, kubeconfig: str | None = None, context: str | None = None, selector: str | None = None
) -> tuple[list[NodeFacts], tuple[str, ...]]:
    """Read every node (optionally by label selector); returns the GPU nodes and the skipped ones with why."""
    api_client = _api_client(kubeconfig, context)
    from kubernetes import client
    from urllib3.exceptions import HTTPError

    try:
        listed = list(_list_nodes(client.CoreV1Api(api_client), selector))
    except client.ApiException as e:
        raise UserError(f"Kubernetes API: listing nodes failed: HTTP {e.status} {e.reason}") from None
    except HTTPError as e:
        host = api_client.configuration.host
        raise UserError(f"Kubernetes API at {host}: cannot connect ({type(e).__name__}) — check --kubeconfig") from None
    finally:
        api_client.close()
    nodes: list[NodeFacts] = []
    skipped: list[str] = []
    for name, labels in listed:
        item = node_facts_from_labels(name, labels, facts)
        if isinstance(item, str):
            skipped.append(item)
        else:
            nodes.append(item)
    return nodes, tuple(skipped)
