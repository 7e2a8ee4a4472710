"""A small in-memory Kubernetes API server on 127.0.0.1 that records every call.

It stands in for EKS (which cannot run here) so the deploy's sequence of calls — from the real `helm` binary and the
real kubernetes Python client — can be checked. It is not a cluster: nothing is scheduled, no controller runs, no
admission or schema validation happens. It serves discovery for the kinds the charts use, CRUD on namespaced and
cluster-scoped objects (POST, GET, LIST with label/field selectors, PUT, merge/strategic/apply PATCH, DELETE), pod
logs, and `on_write` hooks through which a test plays the controllers (mark a Deployment ready, finish a Job).

Custom resources behave as on a real API server: a kind exists only once its CustomResourceDefinition is installed
(created through the API, or named in `crds=` at start). Until then discovery does not list it and any request for it
is a 404, so an install that creates a ServiceMonitor before the Prometheus Operator's CRDs fails here as it does on
EKS. A created CRD is marked Established at once.
"""

from __future__ import annotations

import copy
import itertools
import json
import re
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import yaml

# Built-in kinds: (group, version, plural) -> (Kind, namespaced)
RESOURCES: dict[tuple[str, str, str], tuple[str, bool]] = {
    ("", "v1", "namespaces"): ("Namespace", False),
    ("", "v1", "secrets"): ("Secret", True),
    ("", "v1", "configmaps"): ("ConfigMap", True),
    ("", "v1", "services"): ("Service", True),
    ("", "v1", "serviceaccounts"): ("ServiceAccount", True),
    ("", "v1", "pods"): ("Pod", True),
    ("apps", "v1", "deployments"): ("Deployment", True),
    ("apps", "v1", "replicasets"): ("ReplicaSet", True),
    ("batch", "v1", "jobs"): ("Job", True),
    ("policy", "v1", "poddisruptionbudgets"): ("PodDisruptionBudget", True),
    ("networking.k8s.io", "v1", "ingresses"): ("Ingress", True),
    ("networking.k8s.io", "v1", "networkpolicies"): ("NetworkPolicy", True),
    ("rbac.authorization.k8s.io", "v1", "roles"): ("Role", True),
    ("rbac.authorization.k8s.io", "v1", "rolebindings"): ("RoleBinding", True),
    ("rbac.authorization.k8s.io", "v1", "clusterroles"): ("ClusterRole", False),
    ("rbac.authorization.k8s.io", "v1", "clusterrolebindings"): ("ClusterRoleBinding", False),
    ("", "v1", "nodes"): ("Node", False),
    ("", "v1", "events"): ("Event", True),
    ("apps", "v1", "daemonsets"): ("DaemonSet", True),
    ("autoscaling", "v2", "horizontalpodautoscalers"): ("HorizontalPodAutoscaler", True),
    ("apiextensions.k8s.io", "v1", "customresourcedefinitions"): ("CustomResourceDefinition", False),
}

# CRDs the platform uses, by CRD name: (group, version, Kind, plural, namespaced). Tests preinstall some with `crds=`.
KNOWN_CRDS: dict[str, tuple[str, str, str, str, bool]] = {
    "servicemonitors.monitoring.coreos.com": ("monitoring.coreos.com", "v1", "ServiceMonitor", "servicemonitors", True),
    "podmonitors.monitoring.coreos.com": ("monitoring.coreos.com", "v1", "PodMonitor", "podmonitors", True),
    "prometheusrules.monitoring.coreos.com": ("monitoring.coreos.com", "v1", "PrometheusRule", "prometheusrules", True),
    "nodepools.karpenter.sh": ("karpenter.sh", "v1", "NodePool", "nodepools", False),
    "nodeclaims.karpenter.sh": ("karpenter.sh", "v1", "NodeClaim", "nodeclaims", False),
    "nodeoverlays.karpenter.sh": ("karpenter.sh", "v1alpha1", "NodeOverlay", "nodeoverlays", False),
    "ec2nodeclasses.karpenter.k8s.aws": ("karpenter.k8s.aws", "v1", "EC2NodeClass", "ec2nodeclasses", False),
    "targetgroupbindings.elbv2.k8s.aws": (
        "elbv2.k8s.aws",
        "v1beta1",
        "TargetGroupBinding",
        "targetgroupbindings",
        True,
    ),
    "scaledobjects.keda.sh": ("keda.sh", "v1alpha1", "ScaledObject", "scaledobjects", True),
    "clusterpolicies.nvidia.com": ("nvidia.com", "v1", "ClusterPolicy", "clusterpolicies", False),
}
# How long one watch request stays open before the client is made to watch again.
WATCH_S = 2.0
# What the deploy tests had before CRDs were modelled: the monitoring CRD is there.
DEFAULT_CRDS = ("servicemonitors.monitoring.coreos.com",)


def crd_manifest(name: str) -> dict:
    """A minimal CustomResourceDefinition for one of KNOWN_CRDS (what an operator's chart installs)."""
    group, version, kind, plural, namespaced = KNOWN_CRDS[name]
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": name},
        "spec": {
            "group": group,
            "names": {"kind": kind, "plural": plural, "singular": kind.lower(), "listKind": f"{kind}List"},
            "scope": "Namespaced" if namespaced else "Cluster",
            "versions": [
                {
                    "name": version,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
                }
            ],
        },
    }


_PATH = re.compile(
    r"^/(?:api/(?P<cv>v1)|apis/(?P<g>[^/]+)/(?P<v>[^/]+))"
    r"(?:/namespaces/(?P<ns>[^/]+)(?=/))?/(?P<res>[^/]+)(?:/(?P<name>[^/]+))?(?:/(?P<sub>[^/]+))?$"
)


@dataclass(frozen=True)
class Call:
    method: str
    path: str
    query: dict[str, list[str]]
    user_agent: str
    content_type: str
    body: dict | None
    at: float = field(default_factory=time.monotonic)  # when the request arrived

    @property
    def client(self) -> str:
        """'helm' or 'python' (the kubernetes client), from the User-Agent."""
        ua = self.user_agent.lower()
        return "helm" if "helm" in ua else "python" if "openapi-generator" in ua or "python" in ua else ua

    def __str__(self) -> str:
        return f"{self.client} {self.method} {self.path}"


@dataclass
class FakeKube:
    """Start with `start()`; `url` is the server address; `calls` the recorded requests in order."""

    on_write: list[Callable[[FakeKube, dict], None]] = field(default_factory=list)
    on_read: list[Callable[[FakeKube, dict], None]] = field(default_factory=list)
    calls: list[Call] = field(default_factory=list)
    logs: dict[tuple[str, str], str] = field(default_factory=dict)  # (namespace, pod) -> log text
    objects: dict[tuple, dict] = field(default_factory=dict)  # (group, plural, namespace, name) -> object
    crds: tuple[str, ...] = DEFAULT_CRDS  # CRDs installed at start (names in KNOWN_CRDS)

    def __post_init__(self) -> None:
        self._lock = threading.RLock()
        self._rv = itertools.count(1)
        self._server: ThreadingHTTPServer | None = None
        for name in self.crds:
            self.put(crd_manifest(name))

    def resources(self) -> dict[tuple[str, str, str], tuple[str, bool]]:
        """Built-in kinds plus the kinds of every installed CRD (served versions)."""
        out = dict(RESOURCES)
        with self._lock:
            for (group, plural, _, _), obj in self.objects.items():
                if group == "apiextensions.k8s.io" and plural == "customresourcedefinitions":
                    spec = obj.get("spec") or {}
                    for v in spec.get("versions") or []:
                        if v.get("served", True):
                            key = (spec["group"], v["name"], spec["names"]["plural"])
                            out[key] = (spec["names"]["kind"], spec.get("scope") == "Namespaced")
        return out

    def crd_installed(self, kind: str) -> bool:
        return any(k == kind for (k, _) in self.resources().values())

    # --- lifecycle ---
    def start(self) -> FakeKube:
        fake = self

        class Handler(_Handler):
            kube = fake

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server:
            self._server.shutdown()
            self._server.server_close()

    @property
    def url(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def kubeconfig(self) -> str:
        return yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
                "users": [{"name": "fake", "user": {"token": "fake-token"}}],
                "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}],
                "current-context": "fake",
            }
        )

    # --- store (also used by hooks) ---
    def put(self, obj: dict) -> dict:
        """Create or replace an object directly (as a controller would), without recording a call."""
        with self._lock:
            key = self._key_of(obj)
            obj = copy.deepcopy(obj)
            self._stamp(obj, self.objects.get(key))
            self.objects[key] = obj
            return obj

    def get(self, kind: str, namespace: str | None, name: str) -> dict | None:
        with self._lock:
            for (_, _, ns, n), obj in self.objects.items():
                if obj.get("kind") == kind and ns == (namespace or "") and n == name:
                    return copy.deepcopy(obj)
        return None

    def kinds(self) -> list[str]:
        with self._lock:
            return sorted(f"{o['kind']}/{o['metadata']['name']}" for o in self.objects.values())

    def _key_of(self, obj: dict) -> tuple:
        group, _, _ = obj["apiVersion"].rpartition("/")
        plural = next(p for (g, _, p), (k, _) in self.resources().items() if g == group and k == obj["kind"])
        return (group, plural, obj["metadata"].get("namespace", ""), obj["metadata"]["name"])

    def _stamp(self, obj: dict, old: dict | None) -> None:
        if obj.get("kind") == "CustomResourceDefinition":  # the API server accepts the names at once
            obj["status"] = {
                "conditions": [
                    {
                        "type": t,
                        "status": "True",
                        "reason": t,
                        "message": "",
                        "lastTransitionTime": "2026-01-01T00:00:00Z",
                    }
                    for t in ("NamesAccepted", "Established")
                ],
                "acceptedNames": obj["spec"]["names"],
                "storedVersions": [v["name"] for v in obj["spec"]["versions"] if v.get("storage")],
            }
        meta = obj.setdefault("metadata", {})
        meta["resourceVersion"] = str(next(self._rv))
        meta.setdefault("uid", (old or {}).get("metadata", {}).get("uid") or str(uuid.uuid4()))
        meta.setdefault("creationTimestamp", "2026-01-01T00:00:00Z")
        old_gen = (old or {}).get("metadata", {}).get("generation", 0)
        changed = old is None or old.get("spec") != obj.get("spec")
        meta["generation"] = old_gen + 1 if changed else old_gen


class _Handler(BaseHTTPRequestHandler):
    kube: FakeKube
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:  # quiet
        pass

    # --- plumbing ---
    def _send(self, status: int, body: Any, content_type: str = "application/json") -> None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _status(self, code: int, reason: str, message: str) -> None:
        self._send(
            code,
            {
                "kind": "Status",
                "apiVersion": "v1",
                "status": "Failure",
                "message": message,
                "reason": reason,
                "code": code,
            },
        )

    def _body(self, decode: bool = True) -> tuple[dict | None, str]:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        ctype = (self.headers.get("Content-Type") or "").split(";")[0]
        if not raw or not decode:  # DELETE bodies (DeleteOptions) are read and ignored
            return None, ctype
        if "protobuf" in ctype:
            return decode_protobuf_object(raw), ctype
        return (yaml.safe_load(raw) if "yaml" in ctype else json.loads(raw)), ctype

    def _handle(self, method: str) -> None:
        parts = urlsplit(self.path)
        query = parse_qs(parts.query)
        body, ctype = (
            self._body(decode=method != "DELETE") if method in ("POST", "PUT", "PATCH", "DELETE") else (None, "")
        )
        self.kube.calls.append(
            Call(
                method,
                parts.path,
                query,
                self.headers.get("User-Agent", ""),
                ctype,
                body if isinstance(body, dict) else None,
            )
        )
        if "protobuf" in ctype and method != "DELETE" and not isinstance(body, dict):  # pragma: no cover
            return self._status(415, "UnsupportedMediaType", f"the fake API server decodes only Secrets from {ctype}")
        try:
            self._route(method, parts.path, query, body, ctype)
        except (BrokenPipeError, ConnectionResetError):
            return  # the client gave up on the answer (helm and kubectl cancel discovery requests)
        except Exception as e:  # a bug in the fake must show up as a failed call, not a hang
            self._status(500, "InternalError", f"fake API server: {type(e).__name__}: {e}")

    do_GET = lambda self: self._handle("GET")  # noqa: E731
    do_POST = lambda self: self._handle("POST")  # noqa: E731
    do_PUT = lambda self: self._handle("PUT")  # noqa: E731
    do_PATCH = lambda self: self._handle("PATCH")  # noqa: E731
    do_DELETE = lambda self: self._handle("DELETE")  # noqa: E731

    # --- discovery ---
    def _route(self, method: str, path: str, query: dict, body: Any, ctype: str) -> None:
        if path == "/version":
            return self._send(200, {"major": "1", "minor": "33", "gitVersion": "v1.33.0", "platform": "linux/amd64"})
        if path == "/api":
            return self._send(200, {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []})
        resources = self.kube.resources()
        if path == "/apis":
            # one entry per group, with every version it serves (karpenter.sh has v1 and v1alpha1)
            groups: dict[str, list[str]] = {}
            for g, v in sorted({(g, v) for (g, v, _) in resources if g}):
                groups.setdefault(g, []).append(v)
            return self._send(
                200,
                {
                    "kind": "APIGroupList",
                    "apiVersion": "v1",
                    "groups": [
                        {
                            "name": g,
                            "versions": [{"groupVersion": f"{g}/{v}", "version": v} for v in vs],
                            "preferredVersion": {"groupVersion": f"{g}/{vs[0]}", "version": vs[0]},
                        }
                        for g, vs in groups.items()
                    ],
                },
            )
        if path in ("/api/v1", *(f"/apis/{g}/{v}" for (g, v, _) in resources if g)):
            gv = path.removeprefix("/api/").removeprefix("/apis/")
            group, _, version = gv.rpartition("/")
            resources = [
                {
                    "name": plural,
                    "singularName": kind.lower(),
                    "namespaced": namespaced,
                    "kind": kind,
                    "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"],
                }
                for (g, v, plural), (kind, namespaced) in resources.items()
                if g == group and v == version
            ]
            if gv == "v1":
                resources.append(
                    {"name": "pods/log", "singularName": "", "namespaced": True, "kind": "Pod", "verbs": ["get"]}
                )
            return self._send(
                200, {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}
            )
        if path.startswith("/openapi/v3"):
            return self._openapi_v3(path)
        if path == "/openapi/v2":
            # An empty OpenAPI v2 document (a zero-length protobuf message): clients then find no schema for a kind,
            # as for a custom resource whose CRD is missing, and report the missing kind itself.
            return self._send(200, b"", "application/octet-stream")
        if path.startswith("/openapi"):
            return self._status(404, "NotFound", "the fake API server publishes only the OpenAPI v3 index")
        m = _PATH.match(path)
        if not m:
            return self._status(404, "NotFound", f"no route for {path}")
        group, version = ("", "v1") if m["cv"] else (m["g"], m["v"])
        res = (group, version, m["res"])
        if res not in resources:
            return self._status(404, "NotFound", f"the server could not find the requested resource {path}")
        kind, _ = resources[res]
        ns = m["ns"] or ""
        if m["sub"] == "log":
            text = self.kube.logs.get((ns, m["name"]))
            if text is None:
                return self._status(404, "NotFound", f'pods "{m["name"]}" not found')
            return self._send(200, text.encode(), "text/plain")
        if m["sub"] not in (None, "status"):
            return self._status(404, "NotFound", f"subresource {m['sub']} is not served")
        api_version = f"{group}/{version}" if group else version
        return self._crud(method, group, m["res"], kind, api_version, ns, m["name"], query, body, ctype)

    def _openapi_v3(self, path: str) -> None:
        """Just enough OpenAPI v3 for clients to see that the server validates fields itself (fieldValidation on
        PATCH): helm then sends fieldValidation=Strict instead of downloading schemas. No schemas are served."""
        resources = self.kube.resources()
        gvs = sorted({(g, v) for (g, v, _) in resources})
        doc_path = {(f"apis/{g}/{v}" if g else f"api/{v}"): (g, v) for g, v in gvs}
        if path.rstrip("/") == "/openapi/v3":
            return self._send(200, {"paths": {p: {"serverRelativeURL": f"/openapi/v3/{p}"} for p in doc_path}})
        gv = doc_path.get(path.removeprefix("/openapi/v3/"))
        if gv is None:
            return self._status(404, "NotFound", f"no OpenAPI document at {path}")
        paths = {}
        for (g, v, plural), (kind, namespaced) in resources.items():
            if (g, v) != gv:
                continue
            base = f"/apis/{g}/{v}" if g else f"/api/{v}"
            item = f"{base}/namespaces/{{namespace}}/{plural}/{{name}}" if namespaced else f"{base}/{plural}/{{name}}"
            paths[item] = {
                "patch": {
                    "x-kubernetes-group-version-kind": {"group": g, "version": v, "kind": kind},
                    "parameters": [{"name": "fieldValidation", "in": "query", "schema": {"type": "string"}}],
                    "responses": {"200": {"description": "OK"}},
                }
            }
        return self._send(200, {"openapi": "3.0.0", "info": {"title": "fake", "version": gv[1]}, "paths": paths})

    # --- objects ---
    def _crud(
        self,
        method: str,
        group: str,
        plural: str,
        kind: str,
        api_version: str,
        ns: str,
        name: str | None,
        query: dict,
        body: Any,
        ctype: str,
    ) -> None:
        kube = self.kube
        key = (group, plural, ns, name)
        if name is None and method == "GET" and query.get("watch", [""])[0] in ("true", "1"):
            return self._watch(group, plural, kind, api_version, ns, query)
        with kube._lock:
            if name is None and method == "GET":
                items = [
                    copy.deepcopy(o)
                    for (g, p, n, _), o in kube.objects.items()
                    if g == group and p == plural and (not ns or n == ns)
                ]
                items = [o for o in items if _selects(query, o)]
                for o in items:
                    for hook in kube.on_read:
                        hook(kube, o)
                return self._send(
                    200,
                    {
                        "kind": f"{kind}List",
                        "apiVersion": api_version,
                        "metadata": {"resourceVersion": str(next(kube._rv))},
                        "items": items,
                    },
                )
            if method == "POST":
                obj = copy.deepcopy(body)
                obj.setdefault("apiVersion", api_version)
                obj.setdefault("kind", kind)
                if not obj["metadata"].get("name") and obj["metadata"].get("generateName"):
                    obj["metadata"]["name"] = obj["metadata"]["generateName"] + uuid.uuid4().hex[:5]
                name = obj["metadata"].get("name")
                if ns:
                    obj["metadata"]["namespace"] = ns
                key = (group, plural, ns, name)
                if key in kube.objects:
                    return self._status(409, "AlreadyExists", f'{plural} "{name}" already exists')
                if "dryRun" not in query:
                    stored = kube.put(obj)
                    self._after_write(stored)
                    obj = kube.objects[key]
                return self._send(201, obj)
            current = kube.objects.get(key)
            if method == "GET":
                if current is None:
                    return self._status(404, "NotFound", f'{plural} "{name}" not found')
                out = copy.deepcopy(current)
                for hook in kube.on_read:
                    hook(kube, out)
                return self._send(200, kube.objects.get(key, out))
            if method == "DELETE":
                if current is None:
                    return self._status(404, "NotFound", f'{plural} "{name}" not found')
                del kube.objects[key]
                return self._send(200, current)
            if method == "PUT":
                if current is None:
                    return self._status(404, "NotFound", f'{plural} "{name}" not found')
                obj = copy.deepcopy(body)
                if ns:
                    obj["metadata"]["namespace"] = ns
                stored = kube.put(obj)
                self._after_write(stored)
                return self._send(200, kube.objects[key])
            if method == "PATCH":
                if current is None and "apply-patch" not in ctype:
                    return self._status(404, "NotFound", f'{plural} "{name}" not found')
                patch = body or {}
                base = current or {
                    "apiVersion": api_version,
                    "kind": kind,
                    "metadata": {"name": name, **({"namespace": ns} if ns else {})},
                }
                obj = _merge_patch(copy.deepcopy(base), patch)
                if ns:
                    obj["metadata"]["namespace"] = ns
                if "dryRun" in query:
                    return self._send(200, obj)
                stored = kube.put(obj)
                self._after_write(stored)
                return self._send(201 if current is None else 200, kube.objects[key])
        return self._status(405, "MethodNotAllowed", f"{method} is not supported here")

    def _watch(self, group: str, plural: str, kind: str, api_version: str, ns: str, query: dict) -> None:
        """A watch: each object changed after `resourceVersion` as one JSON event line, for a short while (at most
        WATCH_S; clients such as helm 4's status watcher then watch again from the last version they saw). With
        sendInitialEvents (a streaming list) every object comes first, then the bookmark that ends the list."""
        initial = query.get("sendInitialEvents", [""])[0] == "true"
        since = 0 if initial else int((query.get("resourceVersion") or ["0"])[0] or 0)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

        def event(kind_of_event: str, obj: dict) -> None:
            line = json.dumps({"type": kind_of_event, "object": obj}).encode() + b"\n"
            self.wfile.write(f"{len(line):x}\r\n".encode() + line + b"\r\n")

        sent: dict[tuple, int] = {}
        deadline = time.monotonic() + min(WATCH_S, float((query.get("timeoutSeconds") or [WATCH_S])[0]))
        while time.monotonic() < deadline:
            with self.kube._lock:
                changed = []
                for k, o in self.kube.objects.items():
                    if k[0] != group or k[1] != plural or (ns and k[2] != ns) or not _selects(query, o):
                        continue
                    out = copy.deepcopy(o)
                    for hook in self.kube.on_read:
                        hook(self.kube, out)
                    out = copy.deepcopy(self.kube.objects.get(k, out))
                    rv = int(out["metadata"]["resourceVersion"])
                    if rv > max(since, sent.get(k, 0)):
                        sent[k] = rv
                        changed.append(out)
            for o in changed:
                event("ADDED" if initial else "MODIFIED", o)
            if initial:
                initial = False
                with self.kube._lock:
                    rv = str(next(self.kube._rv))
                end = {"k8s.io/initial-events-end": "true"}
                event("BOOKMARK", {"kind": kind, "apiVersion": api_version,
                                   "metadata": {"resourceVersion": rv, "annotations": end}})  # fmt: skip
            self.wfile.flush()
            time.sleep(0.1)
        self.wfile.write(b"0\r\n\r\n")

    def _after_write(self, obj: dict) -> None:
        for hook in self.kube.on_write:
            hook(self.kube, copy.deepcopy(obj))


# --- protobuf: helm writes its release records (Secrets) in Kubernetes' protobuf encoding -------------------------


def _fields(buf: bytes) -> dict[int, list]:
    """Protobuf wire format → {field number: [values]} (varints as int, length-delimited as bytes)."""
    out: dict[int, list] = {}
    i = 0

    def varint() -> int:
        nonlocal i
        shift = value = 0
        while True:
            b = buf[i]
            i += 1
            value |= (b & 0x7F) << shift
            if b < 0x80:
                return value
            shift += 7

    while i < len(buf):
        tag = varint()
        number, wire = tag >> 3, tag & 7
        if wire == 0:
            value: Any = varint()
        elif wire == 2:
            n = varint()
            value, i = buf[i : i + n], i + n
        elif wire == 1:
            value, i = buf[i : i + 8], i + 8
        elif wire == 5:
            value, i = buf[i : i + 4], i + 4
        else:
            raise ValueError(f"protobuf wire type {wire} is not supported")
        out.setdefault(number, []).append(value)
    return out


def _str(fields: dict, n: int) -> str | None:
    return fields[n][0].decode() if n in fields else None


def _map(fields: dict, n: int, decode_value: Callable[[bytes], Any]) -> dict:
    entries = (_fields(e) for e in fields.get(n, []))
    return {e[1][0].decode(): decode_value(e.get(2, [b""])[0]) for e in entries}


def decode_protobuf_object(raw: bytes) -> dict:
    """A Secret sent as application/vnd.kubernetes.protobuf (runtime.Unknown envelope) → its JSON form."""
    import base64

    if not raw.startswith(b"k8s\x00"):
        raise ValueError("not a Kubernetes protobuf message")
    envelope = _fields(raw[4:])
    type_meta = _fields(envelope[1][0])
    kind = _str(type_meta, 2)
    if kind != "Secret":
        raise ValueError(f"protobuf decoding is implemented for Secret only, got {kind}")
    secret = _fields(envelope[2][0])
    meta = _fields(secret[1][0]) if 1 in secret else {}
    metadata = {
        k: v
        for k, v in {
            "name": _str(meta, 1),
            "namespace": _str(meta, 3),
            "resourceVersion": _str(meta, 6),
            "labels": _map(meta, 11, bytes.decode),
            "annotations": _map(meta, 12, bytes.decode),
        }.items()
        if v
    }
    obj = {"apiVersion": _str(type_meta, 1) or "v1", "kind": "Secret", "metadata": metadata}
    data = _map(secret, 2, lambda b: base64.b64encode(b).decode())
    if data:
        obj["data"] = data
    if 3 in secret:
        obj["type"] = _str(secret, 3)
    return obj


def _merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 merge patch (also used for strategic merge and server-side apply: good enough for a fake)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if not isinstance(target, dict):
        target = {}
    for k, v in patch.items():
        if v is None:
            target.pop(k, None)
        else:
            target[k] = _merge_patch(target.get(k), v)
    return target


def _selects(query: dict, obj: dict) -> bool:
    """Equality-based labelSelector and metadata.name/namespace fieldSelector."""
    labels = obj.get("metadata", {}).get("labels") or {}
    for sel in query.get("labelSelector", []):
        for term in filter(None, sel.split(",")):
            if "!=" in term:
                k, v = term.split("!=", 1)
                if labels.get(k) == v:
                    return False
            elif "=" in term:
                k, v = term.split("=", 1)
                if labels.get(k.rstrip("=")) != v.lstrip("="):
                    return False
            elif labels.get(term) is None:
                return False
    for sel in query.get("fieldSelector", []):
        for term in filter(None, sel.split(",")):
            k, v = term.split("=", 1)
            if k == "metadata.name" and obj["metadata"].get("name") != v:
                return False
            if k == "metadata.namespace" and obj["metadata"].get("namespace") != v:
                return False
    return True
