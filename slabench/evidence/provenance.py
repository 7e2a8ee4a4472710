"""What served a run: the hardware and software behind the endpoint, recorded next to the results.

A verdict is about a model on some hardware; without a record of that hardware, a PASS measured on an L40S can be read
as one for an RTX PRO 6000. Two sources, each optional and each failing into `errors` (never into the run):

- the server itself (any OpenAI-compatible endpoint): vLLM's version (`/version`), the served models and the path
  they were loaded from (`/v1/models`: its `root` is `/models/<name>/<revision>` in helm/vllm-serving), and the
  `vllm:*_info` series of `/metrics` (cache and model configuration labels);
- inside Kubernetes, when the serving pods' label selector is given (`SLABENCH_SERVING_SELECTOR`, set by the Locust
  chart for `slabench deploy`): each serving pod's node and the labels Karpenter, EKS and the GPU Operator's feature
  discovery put on it — instance type, GPU product, MIG config and profile, driver and CUDA versions — whether the
  pod was Ready, and each container's image with the digest the node ran.

The result goes into `sweep.json` and `run_status.json` as `provenance`; `slabench grade` warns when the contract's
`deployment.instance_type` is not what served the run (`instance_type_warning`) or its `deployment.replicas` is not
the number of Ready serving pods (`replicas_warning`).
"""

from __future__ import annotations

import json
import os
import re
import ssl
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from slabench.core.api_key import api_key_from_env
from slabench.core.errors import UserError

SELECTOR_ENV = "SLABENCH_SERVING_SELECTOR"
NAMESPACE_ENV = "POD_NAMESPACE"
SA_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
TIMEOUT_S = 5.0


def _get(url: str, api_key: str | None, insecure: bool) -> bytes:
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {api_key}"} if api_key else {})
    ctx = None
    if insecure:
        ctx = ssl.create_default_context()
        ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    with urllib.request.urlopen(req, timeout=TIMEOUT_S, context=ctx) as resp:
        body: bytes = resp.read(4 << 20)
        return body


def revision_of(root: str | None) -> str | None:
    """`/models/<org>/<name>/<revision>` (the serving chart's layout) → revision; anything else → None."""
    m = re.fullmatch(r"/models/(?:[^/]+/)+([^/]+)/?", root or "")
    return m.group(1) if m else None


def info_series(metrics_text: str) -> dict[str, dict[str, str]]:
    """The labels of every `vllm:*_info` series in a Prometheus exposition (first sample of each)."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, dict[str, str]] = {}
    for family in text_string_to_metric_families(metrics_text):
        if family.name.startswith("vllm:") and family.name.endswith("_info") and family.samples:
            out[family.name] = dict(family.samples[0].labels)
    return out


def from_server(url: str, api_key: str | None = None, insecure: bool = False) -> tuple[dict[str, Any], list[str]]:
    base = url.rstrip("/")
    server: dict[str, Any] = {"url": base}
    errors: list[str] = []
    for path, parse in (("/version", _parse_version), ("/v1/models", _parse_models), ("/metrics", _parse_metrics)):
        try:
            server.update(parse(_get(base + path, api_key, insecure)))
        except (urllib.error.URLError, OSError, ValueError) as e:
            errors.append(f"{base}{path}: {getattr(e, 'reason', None) or e}")
    return server, errors


def _json_object(body: bytes) -> dict[str, Any]:
    """A JSON object, or ValueError (said as one of provenance's errors, never a traceback)."""
    data = json.loads(body)
    if not isinstance(data, dict):
        raise ValueError(f"not a JSON object but {type(data).__name__}")
    return data


def _parse_version(body: bytes) -> dict[str, Any]:
    return {"vllm_version": _json_object(body).get("version")}


def _parse_models(body: bytes) -> dict[str, Any]:
    models = []
    data = _json_object(body).get("data") or []
    for m in data if isinstance(data, list) else []:
        if not isinstance(m, dict):
            continue
        models.append(
            {
                "id": m.get("id"),
                "root": m.get("root"),
                "revision": revision_of(m.get("root")),
                "max_model_len": m.get("max_model_len"),
            }
        )
    return {"models": models}


def _parse_metrics(body: bytes) -> dict[str, Any]:
    return {"metrics_info": info_series(body.decode("utf-8", errors="replace"))}


# GPU feature discovery / Karpenter / EKS node labels → provenance fields
NODE_LABELS = {
    "instance_type": "node.kubernetes.io/instance-type",
    "capacity_type": "karpenter.sh/capacity-type",
    "nodepool": "karpenter.sh/nodepool",
    "zone": "topology.kubernetes.io/zone",
    "gpu_product": "nvidia.com/gpu.product",
    "gpu_count": "nvidia.com/gpu.count",
    "gpu_memory_mib": "nvidia.com/gpu.memory",
    "mig_config": "nvidia.com/mig.config",
    "mig_config_state": "nvidia.com/mig.config.state",
}


def node_facts(labels: dict[str, str]) -> dict[str, Any]:
    """Provenance of one node from its labels (pure)."""
    facts: dict[str, Any] = {k: labels.get(v) for k, v in NODE_LABELS.items()}
    product = labels.get("nvidia.com/gpu.product") or ""
    m = re.search(r"-MIG-(\d+g\.\d+gb(?:\+me)?)$", product)
    facts["mig_profile"] = m.group(1) if m else None
    facts["driver_version"] = _version(
        labels,
        "nvidia.com/cuda.driver-version.full",
        "nvidia.com/cuda.driver-version",
        ("major", "minor", "revision"),
        "nvidia.com/cuda.driver",
        ("major", "minor", "rev"),
    )
    facts["cuda_version"] = _version(
        labels,
        "nvidia.com/cuda.runtime-version.full",
        "nvidia.com/cuda.runtime-version",
        ("major", "minor"),
        "nvidia.com/cuda.runtime",
        ("major", "minor"),
    )
    return facts


def _version(
    labels: dict[str, str], full: str, new: str, new_parts: tuple[str, ...], old: str, old_parts: tuple[str, ...]
) -> str | None:
    """GPU feature discovery's version labels: `<new>.full`, else `<new>.<part>`, else the older `<old>.<part>`."""
    if labels.get(full):
        return labels[full]
    for prefix, parts in ((new, new_parts), (old, old_parts)):
        found = [labels.get(f"{prefix}.{p}") for p in parts]
        if any(found):
            return ".".join(p for p in found if p)
    return None


def kube_api(namespace: str | None = None, api_client: Any = None) -> tuple[Any, str]:
    """The core API and the namespace to read: with the pod's own service account inside a cluster, else the
    kubeconfig's current context (KUBECONFIG or ~/.kube/config); the namespace given, else the pod's own."""
    from kubernetes import client, config

    if api_client is None:
        if os.environ.get("KUBERNETES_SERVICE_HOST"):
            config.load_incluster_config()
        else:
            api_client = config.new_client_from_config()
    ns = namespace or os.environ.get(NAMESPACE_ENV)
    if not ns:
        ns = SA_NAMESPACE.read_text().strip() if SA_NAMESPACE.is_file() else "default"
    return client.CoreV1Api(api_client), ns


def metrics_port(spec: Any) -> int | None:
    """The serving container's port: the one named `http` (helm/vllm-serving), else the first declared."""
    ports = [p for c in spec.containers or [] for p in c.ports or []]
    named = [p for p in ports if p.name == "http"]
    return (named or ports)[0].container_port if ports else None


def serving_pod_metrics_urls(selector: str, namespace: str | None = None, api_client: Any = None) -> dict[str, str]:
    """Each running serving pod's own `/metrics` (pod IP and its http port), by pod name: scraped one by one, never
    through a Service that reaches a random replica. Raises what the API client raises."""
    core, ns = kube_api(namespace, api_client)
    urls = {}
    for pod in core.list_namespaced_pod(ns, label_selector=selector).items:
        status = pod.status
        port = metrics_port(pod.spec)
        if status is None or status.phase != "Running" or not status.pod_ip or port is None:
            continue
        host = f"[{status.pod_ip}]" if ":" in status.pod_ip else status.pod_ip
        urls[pod.metadata.name] = f"http://{host}:{port}/metrics"
    return urls


_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")


def image_digest(image_id: str | None, image: str | None = None) -> str | None:
    """The content digest a node ran: from the container status's imageID (`repo@sha256:...`, or `sha256:...` on some
    runtimes), else from an image asked for by digest; None when neither names one (a tag that has not run yet)."""
    for ref in (image_id, image):
        m = _DIGEST.search(ref or "")
        if m:
            return m.group(0)
    return None


def pod_images(spec: Any, status: Any) -> list[dict[str, Any]]:
    """Each container's image (init containers too: the weight-cache hydrator runs the suite image) as asked for, the
    digest the node pulled, and whether it was asked for by digest (pinned) rather than by a tag that can move."""
    ran = {}
    for st in [*(getattr(status, "container_statuses", None) or []),
               *(getattr(status, "init_container_statuses", None) or [])]:  # fmt: skip
        ran[st.name] = st.image_id
    out = []
    for init, containers in ((True, spec.init_containers), (False, spec.containers)):
        for c in containers or []:
            out.append(
                {
                    "container": c.name,
                    "init": init,
                    "image": c.image,
                    "digest": image_digest(ran.get(c.name), c.image),
                    "pinned": "@sha256:" in (c.image or ""),
                }
            )
    return out


def pod_ready(status: Any) -> bool:
    """The pod's Ready condition: a scheduled pod that is not Ready serves no traffic."""
    conditions = getattr(status, "conditions", None) or []
    return any(c.type == "Ready" and c.status == "True" for c in conditions)


def from_kubernetes(
    selector: str, namespace: str | None = None, api_client: Any = None
) -> tuple[list[dict[str, Any]], list[str]]:
    """Each serving pod's node, read through the API with the pod's own service account (in-cluster)."""
    try:
        core, ns = kube_api(namespace, api_client)
        pods = core.list_namespaced_pod(ns, label_selector=selector).items
        nodes = []
        for pod in pods:
            if pod.spec is None or not pod.spec.node_name:
                continue
            node = core.read_node(pod.spec.node_name)
            labels = node.metadata.labels if node.metadata else None
            nodes.append(
                {
                    "pod": pod.metadata.name if pod.metadata else None,
                    "node": pod.spec.node_name,
                    "ready": pod_ready(pod.status),
                    **node_facts(labels or {}),
                    "images": pod_images(pod.spec, pod.status),
                }
            )
        return nodes, ([] if nodes else [f"kubernetes: no scheduled pod matches {selector!r} in {ns}"])
    except Exception as e:  # provenance must never cost the run: say what could not be read
        return [], [f"kubernetes: {type(e).__name__}: {getattr(e, 'reason', None) or e}"]


def collect(
    url: str, api_key_env: str | None = None, insecure: bool = False, selector: str | None = None
) -> dict[str, Any]:
    """Everything known about what serves `url`; `errors` lists what could not be read."""
    try:
        api_key = api_key_from_env(api_key_env) if api_key_env else None
    except UserError as e:  # the commands refuse such a key before any load; never send it
        return {"server": {}, "nodes": [], "errors": [str(e)]}
    server, errors = from_server(url, api_key, insecure)
    out: dict[str, Any] = {"server": server, "nodes": []}
    selector = selector if selector is not None else os.environ.get(SELECTOR_ENV)
    if selector:
        out["nodes"], more = from_kubernetes(selector)
        errors += more
    out["errors"] = errors
    return out


def recorded_nodes(run_path: str | Path) -> list[dict[str, Any]] | None:
    """The serving pods recorded in a run's sweep.json or run_status.json (None: no Kubernetes side was recorded)."""
    p = Path(run_path)
    d = p if p.is_dir() else p.parent
    for name in ("sweep.json", "run_status.json"):
        try:
            data = json.loads((d / name).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        nodes = ((data if isinstance(data, dict) else {}).get("provenance") or {}).get("nodes") or []
        nodes = [n for n in nodes if isinstance(n, dict)]
        if nodes:
            return nodes
    return None


def measured_instance_types(run_path: str | Path) -> list[str] | None:
    """Instance types recorded in a run's sweep.json or run_status.json (None: nothing recorded)."""
    types = sorted({n["instance_type"] for n in recorded_nodes(run_path) or [] if n.get("instance_type")})
    return types or None


def serving_replicas(run_path: str | Path) -> int | None:
    """How many serving pods were Ready when the run recorded its provenance (a record from before readiness was
    recorded counts every scheduled pod); None when the run recorded no Kubernetes side."""
    nodes = recorded_nodes(run_path)
    if nodes is None:
        return None
    return sum(1 for n in nodes if n.get("ready", True) is True)


def replicas_warning(contract_replicas: int, run_path: str | Path) -> str | None:
    found = serving_replicas(run_path)
    if found is None or found == contract_replicas:
        return None
    return (
        f"WARNING: the contract's deployment.replicas is {contract_replicas}, but provenance found {found} Ready "
        f"serving pod{'s' if found != 1 else ''} (in {run_path}): the verdict and its cost figures are about "
        f"{contract_replicas} replica{'s' if contract_replicas != 1 else ''}, the load met {found}"
    )


def instance_type_warning(contract_type: str, run_path: str | Path) -> str | None:
    measured = measured_instance_types(run_path)
    if measured is None or measured == [contract_type]:
        return None
    return (
        f"WARNING: the contract's deployment.instance_type is {contract_type}, but the run was served by "
        f"{', '.join(measured)} (provenance in {run_path}): the verdict and its cost figures are not about the "
        "hardware the contract names"
    )
