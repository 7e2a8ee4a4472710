"""Server metrics from every serving pod, not through a Service that reaches a random replica.

No cluster here: the fake API server holds the serving pods (as the API returns them once running: phase, pod IP and
the `http` container port), and two real simulator processes stand in for them — what a pod network would provide is
translated, each pod's IP becomes 127.0.0.1 and its port the simulator's. The poller (`python -m
slabench.evidence.pod_scrape`, the process Locust starts for `--server-metrics pods`) lists them through the API with a
kubeconfig, as a user's machine would (inside a pod it uses the pod's service account).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit

from slabench.evidence.accounting import server_received
from slabench.evidence.scrape import RECEIVED, read_scrapes
from tests.helpers.locust_run import scrape
from tests.helpers.platform_fake_kube import FakeKube
from tests.helpers.platform_helpers import ROOT

NS = "slabench"
LABELS = {"app.kubernetes.io/instance": "vllm-serving", "app.kubernetes.io/component": "server"}
SELECTOR = ",".join(f"{k}={v}" for k, v in LABELS.items())


def serving_pod(name: str, url: str, phase: str = "Running") -> dict:
    port = urlsplit(url).port
    spec = {"containers": [{"name": "vllm", "image": "vllm/vllm-openai:v0.32.0-cu129",
                            "ports": [{"name": "http", "containerPort": port, "protocol": "TCP"}]}]}  # fmt: skip
    status = {"phase": phase, "podIP": "127.0.0.1", "conditions": [{"type": "Ready", "status": "True"}]}
    meta = {"name": name, "namespace": NS, "labels": LABELS}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status}


def complete(url: str, n: int) -> None:
    model = json.loads(urllib.request.urlopen(f"{url}/v1/models", timeout=10).read())["data"][0]["id"]
    for _ in range(n):
        body = json.dumps({"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}).encode()
        req = urllib.request.Request(f"{url}/v1/chat/completions", body, {"Content-Type": "application/json"})
        urllib.request.urlopen(req, timeout=30).read()


def test_each_serving_pod_is_scraped_and_the_fleet_is_their_sum(simulator, tmp_path: Path) -> None:
    a = simulator("--ttft", "0.01", "--itl", "0.001", "--output-tokens", "4")
    b = simulator("--ttft", "0.01", "--itl", "0.001", "--output-tokens", "4")
    complete(a, 2)  # before the run: a warm-up the run must not count
    kube = FakeKube().start()
    poller = None
    try:
        kube.put(serving_pod("vllm-serving-a", a))
        kube.put(serving_pod("vllm-serving-b", b))
        kube.put(serving_pod("vllm-serving-c", b, phase="Pending"))  # not running yet: nothing to scrape
        other = serving_pod("locust-master", a)
        kube.put({**other, "metadata": {**other["metadata"], "labels": {"app": "locust"}}})  # not a serving pod
        cfg = tmp_path / "kubeconfig"
        cfg.write_text(kube.kubeconfig())
        env = {**os.environ, "KUBECONFIG": str(cfg), "PYTHONPATH": str(ROOT)}
        env.pop("KUBERNETES_SERVICE_HOST", None)
        out = tmp_path / "server_metrics.jsonl"
        argv = [sys.executable, "-m", "slabench.evidence.pod_scrape", "--pods", SELECTOR, "--namespace", NS,
                "--out", str(out), "--run-id", "r1", "--interval", "0.2", "--stdin-control"]  # fmt: skip
        poller = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True, env=env, cwd=ROOT)  # fmt: skip
        assert poller.stdout is not None and poller.stdin is not None
        assert poller.stdout.readline().startswith("slabench-scrape ready")  # the baseline was taken
        complete(a, 3)
        complete(b, 5)
        poller.stdin.write("stop\n")
        poller.stdin.flush()
        done, err = poller.communicate(timeout=60)
    finally:
        if poller is not None and poller.poll() is None:
            poller.kill()
        kube.stop()
    assert poller.returncode == 0, err
    assert "slabench-scrape done" in done
    rows = read_scrapes(out, "r1")
    assert len(rows) >= 2
    assert set(rows[0]["pods"]) == {"vllm-serving-a", "vllm-serving-b"}
    assert all(set(r["pods"]) == {"vllm-serving-a", "vllm-serving-b"} for r in rows)
    # What the run sent to the two replicas, counted on each — a Service would have shown one replica per scrape.
    assert server_received(rows) == 8
    assert scrape(a)["slabench_sim_requests_received_total"] == 5  # 2 before the run + 3
    assert rows[-1]["counters"][RECEIVED] - rows[0]["counters"][RECEIVED] == 8
    assert all("gauges" in p for p in rows[-1]["pods"].values())


def test_the_pod_list_is_read_again_and_an_api_hiccup_keeps_the_pods_known(simulator, tmp_path: Path, capsys) -> None:
    from slabench.evidence.pod_scrape import PodsScraper

    a = simulator("--ttft", "0.01", "--itl", "0.001", "--output-tokens", "4")
    b = simulator("--ttft", "0.01", "--itl", "0.001", "--output-tokens", "4")
    complete(b, 3)  # b serves before it is listed: a replacement pod that came up mid-run
    answers: list[dict[str, str] | Exception] = [
        {"p-a": f"{a}/metrics"},
        RuntimeError("the API server timed out"),
        {"p-a": f"{a}/metrics", "p-b": f"{b}/metrics"},
    ]

    def list_pods() -> dict[str, str]:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    scraper = PodsScraper(list_pods, "the serving pods app=vllm", tmp_path / "m.jsonl", relist_s=0)
    try:
        first = scraper.scrape_once()
        complete(a, 2)
        second = scraper.scrape_once()  # the listing failed: the pods known are scraped
        third = scraper.scrape_once()  # b appears: all of its requests are the run's
    finally:
        scraper.close()
    assert [sorted(r["pods"]) for r in (first, second, third)] == [["p-a"], ["p-a"], ["p-a", "p-b"]]
    assert [r["deltas"][RECEIVED] for r in (first, second, third)] == [0, 2, 3]
    # no serving pod at all at the start: one line, and the run goes on without server metrics
    empty = PodsScraper(dict, "the serving pods app=none", tmp_path / "n.jsonl")
    assert empty.try_scrape() is None
    err = capsys.readouterr().err
    assert "no server metrics from the serving pods app=none (none of them is running); the run goes on" in err
    assert not (tmp_path / "n.jsonl").exists()
