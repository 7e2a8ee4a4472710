"""The Kubernetes API calls of a deploy (kubernetes client), each a small function over plain data."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ParamSpec, TypeVar

from slabench.core.extras import require
from slabench.deploy.errors import DeployFailed
from slabench.deploy.manifests import Manifest

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

P = ParamSpec("P")
T = TypeVar("T")

# The AWS Load Balancer Controller injects ALB target-health readiness gates into pods of namespaces with this label.
READINESS_GATE_LABEL = "elbv2.k8s.aws/pod-readiness-gate-inject"
# ...as readiness gates whose condition type starts with this.
READINESS_GATE_PREFIX = "target-health.elbv2.k8s.aws/"
# The controller's binding of a Service to an ALB target group (CRD installed with the controller).
TGB = ("elbv2.k8s.aws", "v1beta1", "targetgroupbindings")


@dataclass(frozen=True)
class Rollout:
    ready: bool
    summary: str


@dataclass(frozen=True)
class JobState:
    done: bool
    succeeded: bool
    reason: str


def rollout_of(deployment: Manifest) -> Rollout:
    """Ready when the current generation is observed and every wanted replica is updated and ready."""
    spec, status = deployment.get("spec") or {}, deployment.get("status") or {}
    want = spec.get("replicas", 1)
    gen, seen = deployment.get("metadata", {}).get("generation", 0), status.get("observedGeneration", 0)
    updated, ready = status.get("updatedReplicas") or 0, status.get("readyReplicas") or 0
    ok = seen >= gen and updated >= want and ready >= want
    return Rollout(ok, f"{ready}/{want} ready, {updated}/{want} updated")


def job_state_of(job: Manifest) -> JobState:
    for c in (job.get("status") or {}).get("conditions") or []:
        if c.get("status") == "True" and c.get("type") in ("Complete", "Failed"):
            return JobState(True, c["type"] == "Complete", c.get("reason") or c["type"])
    return JobState(False, False, "running")


def exit_code_of(pod: Manifest, container: str) -> int | None:
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        if cs.get("name") == container:
            terminated = (cs.get("state") or {}).get("terminated")
            return None if terminated is None else int(terminated["exitCode"])
    return None


class Kube:
    def __init__(self, kubeconfig: Path | None = None, context: str | None = None) -> None:
        require("kubernetes", "talking to the cluster")
        from kubernetes import client, config

        try:
            api = config.new_client_from_config(config_file=str(kubeconfig) if kubeconfig else None, context=context)
        except config.ConfigException as e:
            raise DeployFailed(
                f"kubeconfig: {e} — pass --kubeconfig/--context or run aws eks update-kubeconfig"
            ) from None
        self._api: ApiClient = api
        self.core = client.CoreV1Api(api)
        self.apps = client.AppsV1Api(api)
        self.batch = client.BatchV1Api(api)
        self.networking = client.NetworkingV1Api(api)
        self.custom = client.CustomObjectsApi(api)

    def _plain(self, obj: object) -> Manifest:
        plain: Manifest = self._api.sanitize_for_serialization(obj)
        return plain

    def _call(self, what: str, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        try:
            return fn(*args, **kwargs)
        except ApiException as e:
            raise DeployFailed(f"{what}: Kubernetes API said {e.status} {e.reason}") from None
        except HTTPError as e:
            raise DeployFailed(f"{what}: cannot reach the Kubernetes API ({e})") from None

    def _get(self, what: str, fn: Callable[..., object], *args: str) -> Manifest | None:
        """GET that maps 404 to None."""
        from kubernetes.client.exceptions import ApiException

        try:
            return self._plain(fn(*args))
        except ApiException as e:
            if e.status == 404:
                return None
            raise DeployFailed(f"{what}: Kubernetes API said {e.status} {e.reason}") from None

    def namespace_labels(self, name: str) -> dict[str, str] | None:
        """The namespace's labels, or None when it does not exist."""
        ns = self._get(f"namespace {name}", self.core.read_namespace, name)
        return None if ns is None else dict(ns.get("metadata", {}).get("labels") or {})

    def ensure_namespace(self, name: str, labels: dict[str, str], on_create: dict[str, str] | None = None) -> str:
        """Create the namespace with `labels` (and `on_create`), or add missing `labels`. Returns what was done."""
        ns = self._get(f"namespace {name}", self.core.read_namespace, name)
        if ns is None:
            from kubernetes.client import V1Namespace, V1ObjectMeta

            body = V1Namespace(metadata=V1ObjectMeta(name=name, labels={**labels, **(on_create or {})}))
            self._call(f"create namespace {name}", self.core.create_namespace, body)
            return "created"
        have = ns.get("metadata", {}).get("labels") or {}
        if all(have.get(k) == v for k, v in labels.items()):
            return "unchanged"
        self._call(f"label namespace {name}", self.core.patch_namespace, name, {"metadata": {"labels": labels}})
        return "labelled"

    def secret_exists(self, namespace: str, name: str) -> bool:
        # Only existence is used; the secret's data is never printed or kept.
        return self._get(f"secret {name}", self.core.read_namespaced_secret, name, namespace) is not None

    def rollout(self, namespace: str, name: str) -> Rollout:
        dep = self._get(f"deployment {name}", self.apps.read_namespaced_deployment, name, namespace)
        return Rollout(False, "not created yet") if dep is None else rollout_of(dep)

    def job_state(self, namespace: str, name: str) -> JobState:
        job = self._get(f"job {name}", self.batch.read_namespaced_job, name, namespace)
        return JobState(False, False, "not created yet") if job is None else job_state_of(job)

    def job_pods(self, namespace: str, job: str) -> list[Manifest]:
        pods = self._call(
            f"pods of job {job}",
            self.core.list_namespaced_pod,
            namespace,
            label_selector=f"batch.kubernetes.io/job-name={job}",
        )
        return [self._plain(p) for p in pods.items]

    def log_tail(self, namespace: str, pod: str, container: str, lines: int) -> str:
        return self._call(
            f"log of {pod}",
            self.core.read_namespaced_pod_log,
            pod,
            namespace,
            container=container,
            tail_lines=lines,
        )

    def pods(self, namespace: str, labels: dict[str, str]) -> list[Manifest]:
        selector = ",".join(f"{k}={v}" for k, v in labels.items())
        pods = self._call(f"pods {selector}", self.core.list_namespaced_pod, namespace, label_selector=selector)
        return [self._plain(p) for p in pods.items]

    def target_group_binding(self, namespace: str, service: str) -> tuple[bool, str]:
        """Has the AWS Load Balancer Controller bound `service` to an ALB target group? (done, summary)"""
        from kubernetes.client.exceptions import ApiException

        try:
            found = self.custom.list_namespaced_custom_object(*TGB[:2], namespace, TGB[2])
        except ApiException as e:
            if e.status == 404:
                raise DeployFailed(
                    "the cluster has no TargetGroupBinding API: the AWS Load Balancer Controller is not installed — "
                    "install it (docs/eks.md), or set ingress.enabled=false in the serving values"
                ) from None
            raise DeployFailed(f"targetgroupbindings: Kubernetes API said {e.status} {e.reason}") from None
        if not isinstance(found, dict):
            raise DeployFailed(f"targetgroupbindings: the Kubernetes API answered {type(found).__name__}, not a list")
        names = [
            t["metadata"]["name"]
            for t in found.get("items", [])
            if ((t.get("spec") or {}).get("serviceRef") or {}).get("name") == service
        ]
        return (True, f"bound by {names[0]}") if names else (False, "waiting for the AWS Load Balancer Controller")

    def ingress_hostname(self, namespace: str, name: str) -> str | None:
        ing = self._get(f"ingress {name}", self.networking.read_namespaced_ingress, name, namespace)
        lbs = (((ing or {}).get("status") or {}).get("loadBalancer") or {}).get("ingress") or []
        return next((lb.get("hostname") or lb.get("ip") for lb in lbs if lb.get("hostname") or lb.get("ip")), None)
