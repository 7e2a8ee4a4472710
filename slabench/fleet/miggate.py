"""`slabench fleet mig-gate`: keep vLLM pods off a g7e node until mig-manager has sliced its card.

A new node of the MIG pool starts whole: until the GPU Operator's mig-manager has applied the config its label
`nvidia.com/mig.config` names, the device plugin advertises the whole 96 GB card as one `nvidia.com/gpu`, and a vLLM
pod asking for one GPU would land on it. So the Karpenter pool gives its nodes a *startup taint*
(`slabench.io/mig-pending:NoSchedule`; Karpenter still provisions for pods that do not tolerate a startup taint and
expects another component to remove it). This gate removes it only when the node is what the pool promises — the
labels mig-manager and feature discovery set, as the GPU Operator documents them:

- `nvidia.com/mig.config.state` = `success` (mig-manager: pending → [rebooting] → success | failed),
- `nvidia.com/gpu.product` names the slice profile (e.g. `...-MIG-2g.48gb`),
- allocatable `nvidia.com/gpu` equals the slices per node.

When slicing fails (state `failed`, or not sliced within `--failed-after`), the taint stays (no pod ever runs on the
whole card), the node gets the label `slabench.io/mig-gate=failed` and a Warning event, and its NodeClaim is deleted
so Karpenter replaces the instance — at most `--max-replacements` per hour; past that, failed nodes are left for a
person (the SlabenchMigSlicingFailed alert fires) instead of churning instances.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from slabench.deploy.manifests import Manifest

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

STATE_LABEL = "nvidia.com/mig.config.state"
PRODUCT_LABEL = "nvidia.com/gpu.product"
GATE_LABEL = "slabench.io/mig-gate"
POOL_LABEL = "karpenter.sh/nodepool"
NODECLAIM = ("karpenter.sh", "v1", "nodeclaims")


@dataclass(frozen=True)
class GateSpec:
    pool: str  # the Karpenter NodePool whose nodes are gated
    taint: str  # the startup taint's key
    profile: str  # MIG profile every slice has, e.g. 2g.48gb
    slices: int  # nvidia.com/gpu a sliced node offers
    failed_after_s: float = 1200.0
    max_replacements_per_hour: int = 2


@dataclass(frozen=True)
class Decision:
    action: str  # none | wait | open | fail
    reason: str


def _age_s(node: Manifest, now: float) -> float:
    stamp = (node.get("metadata") or {}).get("creationTimestamp")
    if not stamp:
        return 0.0
    created = datetime.fromisoformat(str(stamp).replace("Z", "+00:00")).timestamp()
    return max(0.0, now - created)


def decide(node: Manifest, spec: GateSpec, now: float) -> Decision:
    """What to do with one node (pure: the node as the API returns it, and the time)."""
    taints = (node.get("spec") or {}).get("taints") or []
    if not any(t.get("key") == spec.taint for t in taints):
        return Decision("none", "not gated")
    labels = (node.get("metadata") or {}).get("labels") or {}
    if labels.get(GATE_LABEL) == "failed":
        return Decision("none", "already marked failed")
    state = labels.get(STATE_LABEL)
    product = labels.get(PRODUCT_LABEL, "")
    gpus = str(((node.get("status") or {}).get("allocatable") or {}).get("nvidia.com/gpu", "0"))
    sliced = state == "success" and gpus == str(spec.slices) and product.endswith(f"MIG-{spec.profile}")
    if sliced:
        return Decision("open", f"sliced: {gpus} x {spec.profile} ({product})")
    if state == "failed":
        return Decision("fail", f"mig-manager reported {STATE_LABEL}=failed")
    age = _age_s(node, now)
    seen = f"{STATE_LABEL}={state or 'unset'}, nvidia.com/gpu={gpus}, {PRODUCT_LABEL}={product or 'unset'}"
    if age >= spec.failed_after_s:
        return Decision("fail", f"not sliced after {age / 60:.0f} min ({seen})")
    return Decision("wait", seen)


class MigGate:
    """One pass (`run_once`) over the pool's nodes through the Kubernetes API; `run` repeats it."""

    def __init__(self, api_client: ApiClient, spec: GateSpec, clock: Callable[[], float] = time.time) -> None:
        from kubernetes import client

        self.spec = spec
        self.clock = clock
        self.core = client.CoreV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)
        self._api = api_client
        self.replacements: deque[float] = deque()

    def run_once(self) -> list[tuple[str, Decision]]:
        nodes = self.core.list_node(label_selector=f"{POOL_LABEL}={self.spec.pool}").items
        out = []
        for obj in nodes:
            node: Manifest = self._api.sanitize_for_serialization(obj)
            decision = decide(node, self.spec, self.clock())
            if decision.action == "open":
                self._remove_taint(node)
            elif decision.action == "fail":
                decision = self._fail(node, decision)
            out.append((node["metadata"]["name"], decision))
        return out

    def run(self, interval_s: float, log: Callable[[str], None] = print) -> None:
        """Pass after pass; an API error is logged and the next pass retries (a conflict on a node is normal)."""
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        last: dict[str, str] = {}
        while True:
            try:
                decided = self.run_once()
            except (ApiException, HTTPError) as e:
                log(f"mig-gate: Kubernetes API: {getattr(e, 'status', '')} {getattr(e, 'reason', e)}; retrying")
                decided = []
            for name, d in decided:
                line = f"{d.action}: {d.reason}"
                if last.get(name) != line and d.action != "none":
                    log(f"mig-gate: {name}: {line}")
                last[name] = line
            time.sleep(interval_s)

    def _remove_taint(self, node: Manifest) -> None:
        keep = [t for t in node["spec"].get("taints") or [] if t.get("key") != self.spec.taint]
        # resourceVersion: if Karpenter changed the taints meanwhile, the API refuses and the next pass retries.
        body = {"metadata": {"resourceVersion": node["metadata"]["resourceVersion"]}, "spec": {"taints": keep}}
        self.core.patch_node(node["metadata"]["name"], body)

    def _fail(self, node: Manifest, decision: Decision) -> Decision:
        name = node["metadata"]["name"]
        now = self.clock()
        while self.replacements and now - self.replacements[0] > 3600:
            self.replacements.popleft()
        replace = len(self.replacements) < self.spec.max_replacements_per_hour
        self.core.patch_node(name, {"metadata": {"labels": {GATE_LABEL: "failed"}}})
        what = (
            "its NodeClaim is deleted (Karpenter replaces it)"
            if replace
            else (f"left for a person: {self.spec.max_replacements_per_hour} replacements in the last hour")
        )
        self._event(node, f"MIG slicing failed: {decision.reason}; the node keeps taint {self.spec.taint}; {what}")
        if replace and self._delete_nodeclaim(node):
            self.replacements.append(now)
            return Decision("fail", f"{decision.reason}; NodeClaim deleted")
        return Decision("fail", f"{decision.reason}; {what}")

    def _delete_nodeclaim(self, node: Manifest) -> bool:
        found = self.custom.list_cluster_custom_object(*NODECLAIM)
        claims = found.get("items", []) if isinstance(found, dict) else []
        provider = (node.get("spec") or {}).get("providerID")
        name = node["metadata"]["name"]
        for claim in claims:
            status = claim.get("status") or {}
            if status.get("nodeName") == name or (provider and status.get("providerID") == provider):
                self.custom.delete_cluster_custom_object(*NODECLAIM, claim["metadata"]["name"])
                return True
        return False

    def _event(self, node: Manifest, message: str) -> None:
        from kubernetes.client import CoreV1Event, V1EventSource, V1ObjectMeta, V1ObjectReference

        name = node["metadata"]["name"]
        stamp = datetime.fromtimestamp(self.clock()).astimezone()
        event = CoreV1Event(
            metadata=V1ObjectMeta(generate_name=f"{name}.mig-gate."),
            involved_object=V1ObjectReference(
                kind="Node", name=name, uid=node["metadata"].get("uid"), api_version="v1"
            ),
            reason="MigSlicingFailed",
            message=message,
            type="Warning",
            source=V1EventSource(component="slabench-mig-gate"),
            first_timestamp=stamp,
            last_timestamp=stamp,
            count=1,
        )
        self.core.create_namespaced_event("default", event)
