"""Hardware provenance: what served a run is recorded in sweep.json / run_status.json, and the grader warns when the
contract names other hardware.

Real parts: a vLLM-shaped HTTP server on 127.0.0.1 (the JSON of vLLM's /version and /v1/models and a Prometheus
exposition with a vllm:*_info series), the embedded simulator and real `slabench sweep` / `locust` runs, the fake API
server for the Kubernetes side (no EKS: node labels are written by the test with the names and formats the GPU
Operator's feature discovery, Karpenter and EKS use), and `slabench grade`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from slabench.evidence import provenance
from tests.helpers.platform_fake_kube import FakeKube
from tests.helpers.platform_helpers import ROOT

REV = "3aed33c3d2bfa212a137f6c855d79b5426862b24"
ROOT_PATH = f"/models/RedHatAI/Meta-Llama-3.1-8B-Instruct-FP8/{REV}"
# GPU feature discovery's labels on a g7e node after mig-manager applied all-2g.48gb, plus Karpenter's and EKS's.
G7E_MIG = {
    "node.kubernetes.io/instance-type": "g7e.2xlarge", "karpenter.sh/capacity-type": "on-demand",
    "karpenter.sh/nodepool": "gpu-g7e-mig", "topology.kubernetes.io/zone": "us-east-1a",
    "nvidia.com/gpu.product": "NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition-MIG-2g.48gb", "nvidia.com/gpu.count": "2",
    "nvidia.com/gpu.memory": "48896", "nvidia.com/mig.config": "all-2g.48gb", "nvidia.com/mig.config.state": "success",
    "nvidia.com/cuda.driver.major": "595", "nvidia.com/cuda.driver.minor": "45", "nvidia.com/cuda.driver.rev": "04",
    "nvidia.com/cuda.runtime.major": "13", "nvidia.com/cuda.runtime.minor": "2",
}  # fmt: skip
L40S = {"node.kubernetes.io/instance-type": "g6e.xlarge", "nvidia.com/gpu.product": "NVIDIA-L40S",
        "nvidia.com/cuda.driver.major": "580", "nvidia.com/cuda.driver.minor": "65", "nvidia.com/cuda.driver.rev": "06",
        "nvidia.com/cuda.runtime.major": "13", "nvidia.com/cuda.runtime.minor": "0"}  # fmt: skip


def test_node_facts_from_feature_discovery_labels():
    f = provenance.node_facts(G7E_MIG)
    assert (f["instance_type"], f["mig_profile"], f["mig_config"]) == ("g7e.2xlarge", "2g.48gb", "all-2g.48gb")
    assert (f["driver_version"], f["cuda_version"], f["gpu_count"]) == ("595.45.04", "13.2", "2")
    whole = provenance.node_facts(L40S)
    assert whole["mig_profile"] is None and whole["gpu_product"] == "NVIDIA-L40S"
    # Newer feature discovery writes *-version.* labels (and .full): preferred over the older ones.
    newer = {"nvidia.com/cuda.driver-version.full": "595.58.03", "nvidia.com/cuda.driver.major": "1",
             "nvidia.com/cuda.runtime-version.major": "13", "nvidia.com/cuda.runtime-version.minor": "2"}  # fmt: skip
    f = provenance.node_facts(newer)
    assert (f["driver_version"], f["cuda_version"]) == ("595.58.03", "13.2")
    assert provenance.node_facts({})["driver_version"] is None


@pytest.mark.parametrize(
    ("root", "revision"),
    [("/models/RedHatAI/Meta-Llama-3.1-8B-Instruct-FP8/3aed33c3", "3aed33c3"), ("/models/org/m/main/", "main"),
     ("meta-llama/Llama-3.1-8B", None), (None, None)],
)  # fmt: skip
def test_the_revision_is_read_from_the_serving_charts_model_path(root, revision):
    assert provenance.revision_of(root) == revision


class VllmLike(BaseHTTPRequestHandler):
    """vLLM's answers for /version, /v1/models and /metrics (shapes as vLLM 0.x serves them); a key is required."""

    key = "k-123"

    def log_message(self, *a):  # quiet
        pass

    def do_GET(self):
        if self.headers.get("Authorization") != f"Bearer {self.key}":
            return self._send(401, b'{"error": "Unauthorized"}')
        body = {
            "/version": json.dumps({"version": "0.32.0"}).encode(),
            "/v1/models": json.dumps(
                {
                    "object": "list",
                    "data": [
                        {
                            "id": "qa-grader",
                            "object": "model",
                            "owned_by": "vllm",
                            "max_model_len": 8192,
                            "root": ROOT_PATH,
                            "parent": None,
                        }
                    ],
                }
            ).encode(),
            "/metrics": b"# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n"
            b"# TYPE vllm:cache_config_info gauge\n"
            b'vllm:cache_config_info{block_size="16",cache_dtype="auto",gpu_memory_utilization="0.9"} 1.0\n'
            b"# TYPE vllm:num_requests_waiting gauge\n"
            b'vllm:num_requests_waiting{model_name="qa-grader"} 0.0\n',
        }.get(self.path)
        self._send(200 if body else 404, body or b"{}")

    def _send(self, code: int, body: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def vllm_like() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), VllmLike)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_the_server_reports_vllm_version_model_revision_and_config(vllm_like, monkeypatch):
    monkeypatch.setenv("MY_KEY", VllmLike.key)
    p = provenance.collect(vllm_like, "MY_KEY", selector="")
    s = p["server"]
    assert s["vllm_version"] == "0.32.0"
    assert s["models"] == [{"id": "qa-grader", "max_model_len": 8192, "revision": REV, "root": ROOT_PATH}]
    assert s["metrics_info"] == {"vllm:cache_config_info": {"block_size": "16", "cache_dtype": "auto",
                                                            "gpu_memory_utilization": "0.9"}}  # fmt: skip
    assert p["errors"] == [] and p["nodes"] == []
    assert VllmLike.key not in json.dumps(p)  # the key is sent, never recorded


def test_what_cannot_be_read_is_said_never_raised(vllm_like):
    p = provenance.collect(vllm_like, None, selector="")  # no key: 401 on every path
    assert len(p["errors"]) == 3 and all("401" in e or "Unauthorized" in e for e in p["errors"])
    p = provenance.collect("http://127.0.0.1:9", None, selector="")
    assert len(p["errors"]) == 3 and p["server"] == {"url": "http://127.0.0.1:9"}


@pytest.mark.parametrize("body", [b"[1, 2]", b'"vllm"', b"null", b'{"data": 5}', b'{"data": ["m", 3]}'])
def test_json_that_is_not_an_answer_is_said_never_raised(body):
    """Found by typing: a /version or /v1/models answer that is JSON but not an object was an AttributeError that
    cost the run its provenance with a greenlet traceback."""

    class Odd(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Odd)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        p = provenance.collect(f"http://127.0.0.1:{server.server_address[1]}", None, selector="")
    finally:
        server.shutdown()
        server.server_close()
    assert p["server"].get("models", []) == [] and p["errors"], p


def test_the_serving_pods_nodes_are_read_through_the_kubernetes_api(tmp_path):
    from kubernetes import config

    kube = FakeKube().start()
    try:
        for name, labels in (("ip-10-0-1-5", G7E_MIG), ("ip-10-0-2-9", L40S)):
            kube.put({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}})
        sel = {"app.kubernetes.io/instance": "vllm-serving", "app.kubernetes.io/component": "server"}
        for pod, node in (("vllm-serving-a", "ip-10-0-1-5"), ("vllm-serving-b", None), ("other", "ip-10-0-2-9")):
            labels = sel if pod.startswith("vllm") else {"app": "x"}
            spec = {"containers": [], **({"nodeName": node} if node else {})}
            meta = {"name": pod, "namespace": "slabench", "labels": labels}
            kube.put({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec})
        cfg = tmp_path / "kubeconfig"
        cfg.write_text(kube.kubeconfig())
        api = config.new_client_from_config(config_file=str(cfg))
        selector = "app.kubernetes.io/instance=vllm-serving,app.kubernetes.io/component=server"
        nodes, errors = provenance.from_kubernetes(selector, "slabench", api_client=api)
    finally:
        kube.stop()
    assert errors == []
    (n,) = nodes  # the pending pod has no node; the other pod is not a serving pod
    assert (n["pod"], n["node"], n["instance_type"], n["mig_profile"]) == ("vllm-serving-a", "ip-10-0-1-5",
                                                                          "g7e.2xlarge", "2g.48gb")  # fmt: skip


VLLM_DIGEST = "sha256:" + "ab" * 32
SUITE_DIGEST = "sha256:" + "cd" * 32


def serving_pod(name: str, node: str | None, ready: bool, vllm_image: str, suite_image: str) -> dict:
    """A serving pod as the API server returns it once it ran: the images asked for (spec) and the digests the node
    pulled (status imageID, in containerd's `repo@sha256:` form)."""
    labels = {"app.kubernetes.io/instance": "vllm-serving", "app.kubernetes.io/component": "server"}
    spec = {"initContainers": [{"name": "hydrate", "image": suite_image}],
            "containers": [{"name": "vllm", "image": vllm_image}], **({"nodeName": node} if node else {})}  # fmt: skip
    status = {
        "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        "initContainerStatuses": [{"name": "hydrate", "image": suite_image, "imageID": f"ecr/suite@{SUITE_DIGEST}",
                                   "ready": True, "restartCount": 0}],
        "containerStatuses": [{"name": "vllm", "image": vllm_image, "ready": ready, "restartCount": 0,
                               "imageID": f"docker.io/vllm/vllm-openai@{VLLM_DIGEST}"}],
    }  # fmt: skip
    meta = {"name": name, "namespace": "slabench", "labels": labels}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status}


def read_serving_pods(tmp_path: Path, *pods: dict) -> list[dict]:
    from kubernetes import config

    kube = FakeKube().start()
    try:
        kube.put({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "ip-10-0-2-9", "labels": L40S}})
        for pod in pods:
            kube.put(pod)
        cfg = tmp_path / "kubeconfig"
        cfg.write_text(kube.kubeconfig())
        api = config.new_client_from_config(config_file=str(cfg))
        selector = "app.kubernetes.io/instance=vllm-serving,app.kubernetes.io/component=server"
        nodes, errors = provenance.from_kubernetes(selector, "slabench", api_client=api)
    finally:
        kube.stop()
    assert errors == []
    return nodes


def test_provenance_records_each_serving_containers_image_and_the_digest_the_node_ran(tmp_path):
    # The vLLM image asked for by tag (a tag can move: the digest says what ran); the suite image pinned by digest.
    (n,) = read_serving_pods(
        tmp_path, serving_pod("vllm-serving-a", "ip-10-0-2-9", True, "vllm/vllm-openai:v0.32.0-cu129",
                              f"ecr/suite@{SUITE_DIGEST}"))  # fmt: skip
    assert n["ready"] is True
    assert n["images"] == [
        {"container": "hydrate", "init": True, "image": f"ecr/suite@{SUITE_DIGEST}", "digest": SUITE_DIGEST,
         "pinned": True},
        {"container": "vllm", "init": False, "image": "vllm/vllm-openai:v0.32.0-cu129", "digest": VLLM_DIGEST,
         "pinned": False},
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("image_id", "image", "digest"),
    [(f"docker.io/vllm/vllm-openai@{VLLM_DIGEST}", "vllm/vllm-openai:v1", VLLM_DIGEST),
     (VLLM_DIGEST, "vllm/vllm-openai:v1", VLLM_DIGEST),  # some runtimes report the bare digest
     (None, f"vllm/vllm-openai@{VLLM_DIGEST}", VLLM_DIGEST),  # not run yet, but asked for by digest
     (None, "vllm/vllm-openai:v1", None), ("", None, None)],
)  # fmt: skip
def test_the_digest_comes_from_what_ran_else_from_what_was_pinned(image_id, image, digest):
    assert provenance.image_digest(image_id, image) == digest


def test_outside_a_cluster_the_kubernetes_side_is_an_error_entry_not_a_failure(vllm_like):
    nodes, errors = provenance.from_kubernetes("app=x")
    assert nodes == [] and len(errors) == 1 and errors[0].startswith("kubernetes: ")


SWEEP = """\
name: prov
locustfile: locustfiles/chat_replay.py
locust_options: {max-tokens: 8, prompt-tokens: 16}
levels: [1]
repeats: 2
run: {requests: 3, max_duration_s: 20}
analysis: {report: false}
"""


def test_sweep_json_and_run_status_record_what_served_the_run(simulator, tmp_path):
    url = simulator("--ttft", "0.01", "--itl", "0.001", "--output-tokens", "8")
    cfg = tmp_path / "sweep.yaml"
    cfg.write_text(SWEEP)
    p = subprocess.run(
        [sys.executable, "-m", "slabench", "sweep", "--config", str(cfg), "--target-url", url, "--output-dir",
         str(tmp_path / "runs"), "--sweep-id", "p1", "--no-report"],
        cwd=ROOT, capture_output=True, text=True, timeout=180, env={**os.environ, "SLABENCH_SERVING_SELECTOR": ""},
    )  # fmt: skip
    assert p.returncode == 0, p.stderr[-2000:]
    meta = json.loads((tmp_path / "runs" / "p1" / "sweep.json").read_text())
    served = meta["provenance"]["server"]
    assert served["url"] == url and served["models"][0]["id"]  # what the simulator lists
    assert "vllm:num_requests_waiting" not in served["metrics_info"]  # only *_info series
    # The simulator has no /version: recorded as such, the run went on.
    assert any(e.startswith(f"{url}/version") for e in meta["provenance"]["errors"])
    status = json.loads((tmp_path / "runs" / "p1" / "1" / "1" / "run_status.json").read_text())
    assert status["provenance"]["server"]["models"] == served["models"]


def _graded_run(tmp_path: Path, instance_type: str | None, pods: list[dict] | None = None) -> Path:
    """A small sweep (4 users, two repeats) aggregated into its summary.json, served by `instance_type` (or by the
    serving pods `pods`, as provenance records them)."""
    from slabench.analysis.aggregate import aggregate, summary_json
    from slabench.core.schema import SWEEP
    from tests.helpers.analysis_helpers import rec, write_run

    run = tmp_path / "run"
    for repeat in (1, 2):
        write_run(run, 4, repeat, [rec(0.5 * i, ttft=0.1) for i in range(40)])
    if instance_type or pods:
        nodes = pods or [{"pod": "vllm-serving-a", "node": "n1", "instance_type": instance_type}]
        sweep = {**SWEEP.stamp(), "provenance": {"server": {}, "nodes": nodes, "errors": []}}
        (run / "sweep.json").write_text(json.dumps(sweep))
    (run / "summary.json").write_text(summary_json(aggregate(run)))
    return run


@pytest.mark.parametrize(("served", "warned"), [("g7e.2xlarge", True), ("g6e.xlarge", False), (None, False)])
def test_the_grader_warns_when_the_contract_names_other_hardware(tmp_path, served, warned):
    run = _graded_run(tmp_path, served)
    sla = tmp_path / "sla.yaml"
    sla.write_text("name: t\nload: {concurrency: 4}\ndeployment: {instance_type: g6e.xlarge}\n"
                   "targets: {ttft_p95_s: {max: 100}}\n")  # fmt: skip
    p = subprocess.run([sys.executable, "-m", "slabench", "grade", str(run), "--sla", str(sla)], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)  # fmt: skip
    notes = json.loads((run / "verdict.json").read_text())["notes"]
    warning = [n for n in notes if "deployment.instance_type is g6e.xlarge, but the run was served by" in n]
    assert bool(warning) is warned, (p.stdout, p.stderr)
    if warned:
        assert "g7e.2xlarge" in warning[0] and "WARNING" in p.stdout + p.stderr


def _pods(ready: list[bool]) -> list[dict]:
    return [{"pod": f"vllm-serving-{i}", "node": f"n{i}", "instance_type": "g6e.xlarge", "ready": r}
            for i, r in enumerate(ready)]  # fmt: skip


@pytest.mark.parametrize(
    ("contract", "pods", "found"),
    [(2, _pods([True]), 1),  # the release ran fewer replicas than the contract prices
     (2, _pods([True, False]), 1),  # one pod scheduled but not Ready: it served nothing
     (1, _pods([True, True]), 2),
     (2, _pods([True, True]), None),
     (2, None, None)],  # outside a cluster: nothing recorded to compare
)  # fmt: skip
def test_the_grader_warns_when_the_contracts_replicas_are_not_what_provenance_found(tmp_path, contract, pods, found):
    run = _graded_run(tmp_path, None, pods)
    sla = tmp_path / "sla.yaml"
    deployment = f"deployment: {{instance_type: g6e.xlarge, replicas: {contract}}}\n"
    sla.write_text(f"name: t\nload: {{concurrency: 4}}\n{deployment}targets: {{ttft_p95_s: {{max: 100}}}}\n")
    p = subprocess.run([sys.executable, "-m", "slabench", "grade", str(run), "--sla", str(sla)], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)  # fmt: skip
    notes = json.loads((run / "verdict.json").read_text())["notes"]
    warning = [n for n in notes if "deployment.replicas" in n]
    if found is None:
        assert warning == [], notes
        return
    (w,) = warning
    assert f"deployment.replicas is {contract}, but provenance found {found} Ready serving pod" in w
    assert "WARNING" in p.stdout + p.stderr


def test_deploy_prints_the_verdicts_warnings_next_to_it(tmp_path):
    import io

    from slabench.deploy.flow import _print_verdict

    note = "WARNING: the contract's deployment.replicas is 2, but provenance found 1 Ready serving pod (in x)"
    (tmp_path / "verdict.json").write_text(json.dumps({"summary": "PASS (2 checks)", "notes": ["a note", note]}))
    log = io.StringIO()
    _print_verdict(tmp_path, log)
    assert log.getvalue().splitlines() == [f"deploy: verdict: PASS (2 checks) ({tmp_path / 'verdict.json'})",
                                           f"deploy: {note}"]  # fmt: skip


def test_an_in_cluster_locust_run_says_when_the_contracts_replicas_are_not_what_served_it(simulator, tmp_path):
    """The Job's own grading (locust --sla, as slabench deploy runs a burst): the run's provenance found two Ready
    serving pods, the contract prices one — the verdict says so. The pods are the fake API server's; the load goes to
    a real simulator."""
    from tests.helpers.locust_run import CHAT, run_users

    url = simulator("--ttft", "0.01", "--itl", "0.001", "--output-tokens", "4")
    kube = FakeKube().start()
    try:
        kube.put({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "ip-10-0-2-9", "labels": L40S}})
        for name in ("vllm-serving-a", "vllm-serving-b"):
            kube.put(
                serving_pod(name, "ip-10-0-2-9", True, "vllm/vllm-openai:v0.32.0-cu129", f"ecr/suite@{SUITE_DIGEST}")
            )
        cfg = tmp_path / "kubeconfig"
        cfg.write_text(kube.kubeconfig())
        sla = tmp_path / "sla.yaml"
        sla.write_text("name: t\nload: {concurrency: 1}\ndeployment: {instance_type: g6e.xlarge, replicas: 1}\n"
                       "targets: {ttft_p95_s: {max: 100}}\n")  # fmt: skip
        selector = "app.kubernetes.io/instance=vllm-serving,app.kubernetes.io/component=server"
        env = {**os.environ, "KUBECONFIG": str(cfg), "POD_NAMESPACE": "slabench", "SLABENCH_SERVING_SELECTOR": selector}
        env.pop("KUBERNETES_SERVICE_HOST", None)
        records = tmp_path / "run" / "records.jsonl"
        res = run_users(CHAT, url, records, "--max-tokens", "4", "--prompt-tokens", "16", "--sla", str(sla),
                        users=1, run_time="3s", env=env)  # fmt: skip
    finally:
        kube.stop()
    status = json.loads((records.parent / "run_status.json").read_text())
    assert [n["pod"] for n in status["provenance"]["nodes"]] == ["vllm-serving-a", "vllm-serving-b"], res.stderr[-2000:]
    notes = json.loads((records.parent / "verdict.json").read_text())["notes"]
    assert any("deployment.replicas is 1, but provenance found 2 Ready serving pods" in n for n in notes), notes
