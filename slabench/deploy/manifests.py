"""Find what the deploy needs in rendered manifests: names come from the charts, never re-derived here."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from slabench.core import yamlio
from slabench.core.errors import UserError
from slabench.deploy.errors import DeployFailed

# A Kubernetes object as plain JSON data (a rendered document, or what the API returns).
Manifest = dict[str, Any]


@dataclass(frozen=True)
class Rendered:
    """The text of `helm template` and its parsed documents."""

    chart: str
    text: str

    @property
    def docs(self) -> list[Manifest]:
        return [d for d in yamlio.parse_all(self.text, self.chart) if isinstance(d, dict)]

    def one(self, kind: str, component: str) -> Manifest:
        """The single object of `kind` labelled app.kubernetes.io/component=`component`."""
        found = [
            d
            for d in self.docs
            if d.get("kind") == kind
            and (d.get("metadata", {}).get("labels") or {}).get("app.kubernetes.io/component") == component
        ]
        if len(found) != 1:
            raise DeployFailed(
                f"{self.chart}: expected one {kind} with component={component} in the rendered chart, found "
                f"{len(found)} — check the chart values (e.g. mode=headless for the Locust Job)"
            )
        return found[0]

    def name(self, kind: str, component: str) -> str:
        return str(self.one(kind, component)["metadata"]["name"])


def target_host(serving: Rendered, namespace: str) -> str:
    """In-cluster URL of the vLLM Service, for the Locust workers."""
    svc = serving.one("Service", "server")
    port = next(p["port"] for p in svc["spec"]["ports"] if p.get("name") == "http")
    return f"http://{svc['metadata']['name']}.{namespace}.svc:{port}"


@dataclass(frozen=True)
class AlbTarget:
    """How the Locust Job reaches vLLM through the ALB: a fixed URL (the Ingress names its host), or the
    load balancer's DNS name, which exists only once the controller has created it (`url` None)."""

    ingress: str
    url: str | None


def alb_target(serving: Rendered) -> AlbTarget:
    ingresses = [d for d in serving.docs if d.get("kind") == "Ingress"]
    if len(ingresses) != 1:
        raise UserError(
            f"--target alb: the serving chart renders {len(ingresses)} Ingresses, not one — keep ingress.enabled "
            "(the default) in the serving values, or use --target service"
        )
    ing = ingresses[0]
    tls = "alb.ingress.kubernetes.io/certificate-arn" in (ing["metadata"].get("annotations") or {})
    host = next((r["host"] for r in ing["spec"].get("rules", []) if r.get("host")), None)
    if tls and not host:
        raise UserError(
            "--target alb: the ALB has a certificate but the Ingress no host to verify it against — set ingress.host"
        )
    return AlbTarget(ing["metadata"]["name"], f"{'https' if tls else 'http'}://{host}" if host else None)


# Pod Security Standards, least to most restrictive (the namespace label pod-security.kubernetes.io/enforce).
PSS_LEVELS = ("privileged", "baseline", "restricted")
PSS_LABEL = "pod-security.kubernetes.io/enforce"


def pod_security_level(rendered: Rendered) -> tuple[str, str]:
    """The strictest Pod Security Standard every pod template of `rendered` meets, and why not stricter (the parts
    of the standards these charts can hit: a hostPath is not baseline; root or added capabilities not restricted)."""
    level, why = "restricted", "every container is non-root with no added capability, and no hostPath"
    for doc in rendered.docs:
        spec = doc.get("spec") or {}
        pod = (spec.get("template") or {}).get("spec") if doc.get("kind") != "Pod" else spec
        if not pod:
            continue
        name = f"{doc['kind']}/{doc['metadata']['name']}"
        if any("hostPath" in v for v in pod.get("volumes") or []):
            return "privileged", f"{name} mounts a hostPath volume (weightCache.hostCache)"
        for c in (pod.get("initContainers") or []) + (pod.get("containers") or []):
            sc = c.get("securityContext") or {}
            if sc.get("runAsUser") == 0 or (sc.get("capabilities") or {}).get("add"):
                level, why = "baseline", f"{name} container {c['name']} runs as root or adds a capability"
    return level, why
