"""Find what the deploy needs in rendered manifests: names come from the charts, never re-derived here."""

from __future__ import annotations

from dataclasses import dataclass

from slabench import yamlio
from slabench.deploy.errors import DeployFailed


@dataclass(frozen=True)
class Rendered:
    """The text of `helm template` and its parsed documents."""

    chart: str
    text: str

    @property
    def docs(self) -> list[dict]:
        return [d for d in yamlio.parse_all(self.text, self.chart) if isinstance(d, dict)]

    def one(self, kind: str, component: str) -> dict:
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
        return self.one(kind, component)["metadata"]["name"]


def target_host(serving: Rendered, namespace: str) -> str:
    """In-cluster URL of the vLLM Service, for the Locust workers."""
    svc = serving.one("Service", "server")
    port = next(p["port"] for p in svc["spec"]["ports"] if p.get("name") == "http")
    return f"http://{svc['metadata']['name']}.{namespace}.svc:{port}"
