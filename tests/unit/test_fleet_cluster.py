"""Reading GPU nodes from Kubernetes: node labels → facts (pure), and the real kubernetes client against a small fake
API server on 127.0.0.1 that serves `GET /api/v1/nodes` with pagination. EKS itself is not exercised here: the
labels below are the ones Kubernetes, Karpenter and NVIDIA GPU feature discovery document."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

import pytest

from slabench.core.errors import UserError
from slabench.fleet.cluster import node_facts_from_labels, read_cluster_nodes
from slabench.fleet.facts import load_facts
from slabench.fleet.image import fleet_image
from slabench.fleet.rules import Severity, check_fleet

FACTS = load_facts()
IT = "node.kubernetes.io/instance-type"

NODES = {
    "g6e-580": {IT: "g6e.xlarge", "nvidia.com/gpu.product": "NVIDIA-L40S", "nvidia.com/gpu.present": "true",
                "nvidia.com/cuda.driver-version.full": "580.95.05", "nvidia.com/gpu.compute.major": "8",
                "nvidia.com/gpu.compute.minor": "9"},
    "g7e-mig-595": {IT: "g7e.2xlarge",
                    "nvidia.com/gpu.product": "NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition-MIG-2g.48gb",
                    "nvidia.com/cuda.driver-version.major": "595", "nvidia.com/cuda.driver-version.minor": "58",
                    "nvidia.com/cuda.driver-version.revision": "03", "nvidia.com/mig.strategy": "single",
                    "nvidia.com/mig.config": "all-2g.48gb"},
    "g5-old-labels": {IT: "g5.xlarge", "nvidia.com/gpu.product": "NVIDIA-A10G", "nvidia.com/cuda.driver.major": "580",
                      "nvidia.com/cuda.driver.minor": "95", "nvidia.com/cuda.driver.rev": "05"},
    "g7e-bad-mig": {IT: "g7e.4xlarge", "nvidia.com/mig.config": "all-3g.72gb",
                    "nvidia.com/cuda.driver-version.full": "580.95.05"},
    "g6-fresh": {IT: "g6.xlarge", "karpenter.sh/nodepool": "gpu"},  # launched, GFD has not labelled it yet
    "cpu-worker": {IT: "c7i.xlarge", "karpenter.sh/nodepool": "cpu"},
    "onprem-h100": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.compute.major": "9",
                    "nvidia.com/gpu.compute.minor": "0", "nvidia.com/cuda.driver-version.full": "595.58.03"},
}  # fmt: skip


def facts_of(name):
    return node_facts_from_labels(name, NODES[name], FACTS)


def test_labels_to_facts():
    n = facts_of("g6e-580")
    assert (n.gpu, str(n.cc), str(n.driver), n.mig_profiles, n.notes) == ("l40s", "8.9", "580.95.05", (), ())
    mig = facts_of("g7e-mig-595")
    assert (mig.gpu, str(mig.driver), mig.mig_profiles) == ("rtx-pro-server-6000", "595.58.03", ("2g.48gb",))
    assert str(facts_of("g5-old-labels").driver) == "580.95.05"  # deprecated GFD labels still read
    assert facts_of("g7e-bad-mig").mig_profiles == ("3g.72gb",)  # from the mig-parted config label
    assert facts_of("g6-fresh").driver is None
    assert facts_of("onprem-h100").gpu == "h100" and facts_of("onprem-h100").instance_type is None
    assert facts_of("cpu-worker") == "cpu-worker: not a GPU node (c7i.xlarge)"


def test_mixed_strategy_profiles_and_disabled_config():
    labels = {IT: "p5.48xlarge", "nvidia.com/mig-1g.10gb.count": "4", "nvidia.com/mig-3g.40gb.count": "1"}
    assert node_facts_from_labels("p5", labels, FACTS).mig_profiles == ("1g.10gb", "3g.40gb")
    labels = {IT: "g7e.2xlarge", "nvidia.com/mig.config": "all-disabled"}
    assert node_facts_from_labels("g7e", labels, FACTS).mig_profiles == ()


def test_reported_compute_capability_wins_over_the_table_and_says_so():
    labels = {**NODES["g6e-580"], "nvidia.com/gpu.compute.minor": "6"}
    n = node_facts_from_labels("odd", labels, FACTS)
    assert str(n.cc) == "8.6"
    (note,) = n.notes
    assert note.severity == Severity.WARN and "the node reports 8.6" in note.message


def test_unknown_gpu_with_compute_labels_is_still_checked():
    labels = {"nvidia.com/gpu.product": "NVIDIA-GeForce-RTX-5090", "nvidia.com/gpu.compute.major": "12",
              "nvidia.com/gpu.compute.minor": "0", "nvidia.com/cuda.driver-version.full": "580.95.05"}  # fmt: skip
    n = node_facts_from_labels("desk", labels, FACTS)
    assert n.gpu is None and n.gpu_name == "NVIDIA-GeForce-RTX-5090" and str(n.cc) == "12.0"
    bare = node_facts_from_labels("mystery", {"nvidia.com/gpu.present": "true"}, FACTS)
    assert isinstance(bare, str) and "unknown GPU" in bare


def _selected(labels, selector):
    """The equality/existence subset of Kubernetes label selectors: 'a=b,c'."""
    for term in filter(None, selector.split(",")):
        key, eq, value = term.partition("=")
        if (key not in labels) or (eq and labels[key] != value):
            return False
    return True


class FakeKubeAPI:
    """Serves GET /api/v1/nodes from NODES, `page` items per response with a continue token, like the real API."""

    def __init__(self, page=3, status=200):
        self.requests: list[dict] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                url = urlparse(self.path)
                query = {k: v[0] for k, v in parse_qs(url.query).items()}
                outer.requests.append({"path": url.path, "query": query, "auth": self.headers.get("Authorization")})
                if status != 200:
                    return self._send(
                        status, {"kind": "Status", "status": "Failure", "reason": "Forbidden", "code": status}
                    )
                if url.path != "/api/v1/nodes":
                    return self._send(404, {"kind": "Status", "code": 404})
                names = sorted(n for n in NODES if _selected(NODES[n], query.get("labelSelector", "")))
                start = int(query.get("continue", "0"))
                chunk = names[start : start + min(page, int(query.get("limit", page)))]
                more = start + len(chunk) < len(names)
                body = {"kind": "NodeList", "apiVersion": "v1",
                        "metadata": {"resourceVersion": "7", **({"continue": str(start + len(chunk))} if more else {})},
                        "items": [{"metadata": {"name": n, "labels": NODES[n]}} for n in chunk]}  # fmt: skip
                self._send(200, body)

            def _send(self, code, body):
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):  # keep test output quiet
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def url(self):
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


def kubeconfig(tmp_path, server):
    path = tmp_path / "kubeconfig"
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: fake\n"
        f"clusters:\n- name: fake\n  cluster:\n    server: {server}\n"
        "users:\n- name: u\n  user:\n    token: t0ken-for-tests\n"
        "contexts:\n- name: fake\n  context:\n    cluster: fake\n    user: u\n"
    )
    return str(path)


@pytest.fixture
def api():
    with FakeKubeAPI() as fake:
        yield fake


def test_reads_every_page_with_the_kubeconfig_credentials(tmp_path, api):
    nodes, skipped = read_cluster_nodes(FACTS, kubeconfig(tmp_path, api.url))
    assert sorted(n.name for n in nodes) == sorted(set(NODES) - {"cpu-worker"})
    assert skipped == ("cpu-worker: not a GPU node (c7i.xlarge)",)
    assert len(api.requests) == 3  # 7 nodes, 3 per page
    assert [r["query"].get("continue") for r in api.requests] == [None, "3", "6"]
    assert all("labelSelector" not in r["query"] and r["query"]["limit"] == "500" for r in api.requests)
    assert {r["auth"] for r in api.requests} == {"Bearer t0ken-for-tests"}


def test_label_selector_reaches_the_api(tmp_path, api):
    nodes, skipped = read_cluster_nodes(FACTS, kubeconfig(tmp_path, api.url), selector="karpenter.sh/nodepool")
    assert [n.name for n in nodes] == ["g6-fresh"] and len(skipped) == 1
    assert {r["query"]["labelSelector"] for r in api.requests} == {"karpenter.sh/nodepool"}


def test_cluster_nodes_get_the_same_verdicts_as_a_fleet_file(tmp_path, api):
    nodes, skipped = read_cluster_nodes(FACTS, kubeconfig(tmp_path, api.url))
    result = {r.node.name: r for r in check_fleet(fleet_image(), nodes, FACTS, skipped).results}
    assert {name for name, r in result.items() if r.severity == Severity.OK} == {
        "g6e-580", "g7e-mig-595", "g5-old-labels", "onprem-h100"}  # fmt: skip
    assert result["g7e-bad-mig"].severity == Severity.FAIL
    assert "3g.72gb is unknown" in " ".join(f.message for f in result["g7e-bad-mig"].findings)
    assert result["g6-fresh"].severity == Severity.WARN


def test_api_errors_are_one_line_user_errors(tmp_path):
    with FakeKubeAPI(status=403) as fake, pytest.raises(UserError, match="listing nodes failed: HTTP 403"):
        read_cluster_nodes(FACTS, kubeconfig(tmp_path, fake.url))
    closed = FakeKubeAPI()
    url = closed.url
    closed.server.server_close()  # nothing listens there any more
    with pytest.raises(UserError, match=rf"Kubernetes API at {url}: cannot connect"):
        read_cluster_nodes(FACTS, kubeconfig(tmp_path, url))
    with pytest.raises(UserError, match="kubeconfig: cannot load it"):
        read_cluster_nodes(FACTS, str(tmp_path / "missing-kubeconfig"))
