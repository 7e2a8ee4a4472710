"""`slabench deploy --kind burst` end to end: the seed's open-loop queue replayed by distributed Locust workers.

No cluster here (see test_platform_deploy.py for what the fake API server plays). What stands in for the pods is the
real thing run as local processes: when helm writes the master Job, its own run-job.sh runs the master container's
own command line (`locust -f locustfiles/qa_grading.py,shapes/burst.py --master ...`); when helm writes the workers
Job, as many `locust --worker` processes as its `parallelism` start with the worker container's command line. Only
what a pod network would provide is translated: the Service names become 127.0.0.1 and a free port, the target Service
becomes the simulator (in grading mode, requiring the API key the workers read from the Secret), and the pod's
volumes become directories. The queue is the dataset's own 20,000-request burst queue, time-scaled by the deploy's
`--burst-time-scale` and thinned by a values file's `--burst-stride`, so the run lasts ~10 s.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from slabench.core.record import Outcome
from slabench.core.sinks import read_records
from slabench.shapes.items import burst_items
from slabench.workload import load_queue
from tests.helpers.locust_run import scrape
from tests.helpers.platform_fake_kube import FakeKube
from tests.helpers.platform_helpers import ROOT
from tests.helpers.ports import free_port
from tests.integration import test_platform_deploy as base

# The fake API server, S3 and the deploy command of test_platform_deploy.py.
kube, s3, deploy = base.kube, base.s3, base.deploy

SCALE, STRIDE = 20, 200  # every 200th item, 20× faster: 100 requests at ~10/s over ~10 s
WORKERS = 2
SLA = """\
name: qa-grading-burst
load: {scenario: burst}
deployment: {instance_type: g6e.xlarge, replicas: 1}
targets:
  error_rate: {max: 0.05}
  e2e_p95_s: {max: 60.0}
"""


def _swap(args: list[str], flag: str, value: str) -> list[str]:
    out = list(args)
    out[out.index(flag) + 1] = value
    return out


class LocustPods(base.Cluster):
    """The cluster of test_platform_deploy.py, whose Locust Jobs run real Locust processes on this machine."""

    def __init__(self, api: FakeKube, s3_server, work: Path, target: str):  # type: ignore[no-untyped-def]
        super().__init__(api, s3_server, work)
        self.target = target
        self.port = free_port()  # the master Service's worker port, free on this machine
        self.workers: list[subprocess.Popen] = []
        self.master_args: list[str] = []
        self.worker_args: list[str] = []
        api.on_write.append(self._workers_started)

    def _volume_paths(self, args: list[str], results: Path, config: Path) -> list[str]:
        return [a.replace("/results", str(results)).replace("/config", str(config)) for a in args]

    def _env(self, container: dict, ns: str) -> dict[str, str]:
        # The API server as a pod reaches it (here through a kubeconfig instead of the pod's service account).
        kubeconfig = self.work / "kubeconfig"
        kubeconfig.write_text(self.kube.kubeconfig())
        env = {**os.environ, "PYTHONPATH": str(ROOT), "KUBECONFIG": str(kubeconfig)}
        env.pop("KUBERNETES_SERVICE_HOST", None)
        for e in container.get("env", []):
            if "value" in e:
                env[e["name"]] = e["value"]
            elif ref := (e.get("valueFrom") or {}).get("secretKeyRef"):
                secret = self.kube.get("Secret", ns, ref["name"])
                env[e["name"]] = base64.b64decode(secret["data"][ref["key"]]).decode()
            elif (e.get("valueFrom") or {}).get("fieldRef", {}).get("fieldPath") == "metadata.namespace":
                env[e["name"]] = ns  # the downward API
        return env

    def _replicaset_controller(self, kube: FakeKube, obj: dict) -> None:
        """The serving pods start running on the pod network: their IP is this machine, their http port the
        simulator's (so a scrape of each pod's own /metrics reaches the simulator standing in for it)."""
        created = len(self.pods_created)
        super()._replicaset_controller(kube, obj)
        for pod in self.pods_created[created:]:
            for c in pod["spec"]["containers"]:
                for port in c.get("ports", []):
                    if port.get("name") == "http":
                        port["containerPort"] = urlsplit(self.target).port
            pod["status"].update({"phase": "Running", "podIP": "127.0.0.1"})
            kube.put(pod)

    def _workers_started(self, _: FakeKube, obj: dict) -> None:
        labels = obj["metadata"].get("labels") or {}
        if obj["kind"] != "Job" or labels.get("app.kubernetes.io/component") != "worker" or obj.get("status"):
            return
        ns = obj["metadata"]["namespace"]
        worker = obj["spec"]["template"]["spec"]["containers"][0]
        args = _swap(_swap(worker["args"], "--master-host", "127.0.0.1"), "--master-port", self.port)
        self.worker_args = worker["args"]
        assert args[0] == "locust"
        for i in range(obj["spec"]["parallelism"]):
            log = open(self.work / f"worker-{i}.log", "w")  # noqa: SIM115  (closed with the process)
            argv = [sys.executable, "-m", *args]
            env = self._env(worker, ns)
            self.workers.append(subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT))

    def _run_master(self, job: dict) -> None:
        ns, name = job["metadata"]["namespace"], job["metadata"]["name"]
        spec = job["spec"]["template"]["spec"]
        master = next(c for c in spec["containers"] if c["name"] == "master")
        self.master_args = master["args"]
        volumes = {v["name"]: v for v in spec["volumes"]}
        script = self.kube.get("ConfigMap", ns, volumes["scripts"]["configMap"]["name"])["data"]["run-job.sh"]
        config = self.work / "config"
        config.mkdir()
        for key, text in self.kube.get("ConfigMap", ns, volumes["config"]["configMap"]["name"])["data"].items():
            (config / key).write_text(text)
        results = self.work / f"results-{name}"
        results.mkdir()
        service = master["args"][master["args"].index("--host") + 1]  # the vLLM Service, played by the simulator
        args = self._volume_paths([a.replace(service, self.target) for a in master["args"]], results, config)
        assert args[0] == "locust"
        args = [sys.executable, "-m", *args, "--master-bind-host", "127.0.0.1", "--master-bind-port", self.port]
        env = {**self._env(master, ns), **self.s3.env(), "RESULTS_DIR": str(results),
               "PATH": f"{self.work / 'bin'}{os.pathsep}{os.environ['PATH']}"}  # fmt: skip
        proc = subprocess.run(["sh", "-c", script, "run-job.sh", *args], cwd=ROOT, env=env, capture_output=True,
                              text=True, timeout=240)  # fmt: skip
        self.job_runs.append(proc)
        self.finish_master(ns, name, spec, master, proc)

    def stop(self) -> None:
        for w in self.workers:
            if w.poll() is None:
                w.kill()
            w.wait(10)


def test_the_burst_replays_the_queue_across_workers_and_prints_the_verdict(kube, s3, tmp_path, simulator, deploy):
    url = simulator("--ttft", "0.05", "--itl", "0.002", "--output-tokens", "24", "--grading-accuracy", "0.95",
                    "--api-key-env", "SIM_KEY", env={**os.environ, "SIM_KEY": "secret"})  # fmt: skip
    cluster = LocustPods(kube, s3, tmp_path, url)
    sla = tmp_path / "sla.yaml"
    sla.write_text(SLA)
    values = tmp_path / "locust.yaml"
    values.write_text(f"headless:\n  extraArgs: [--burst-stride, '{STRIDE}']\n")
    try:
        r = deploy(kube, tmp_path, "--workers", str(WORKERS), "--burst-time-scale", str(SCALE),
                   "--locust-values", str(values), sla=sla)  # fmt: skip
    finally:
        cluster.stop()
    (job,) = cluster.job_runs
    assert r.returncode != 5, r.stderr + job.stderr[-4000:]

    # The chart ran the shape: queue replay on master and workers, no closed-loop -u/-r/-t.
    assert cluster.master_args[:3] == ["locust", "-f", "locustfiles/qa_grading.py,shapes/burst.py"]
    assert cluster.worker_args[:3] == cluster.master_args[:3]
    assert not {"-u", "-r", "-t"} & set(cluster.master_args)
    # Each serving pod's own /metrics, found by the serving pods' labels: not the ALB's (it routes only /v1), nor the
    # Service's (a random replica per scrape).
    metrics = cluster.master_args[-1]
    assert metrics.startswith("pods:app.kubernetes.io/")
    assert cluster.master_args[-8:] == ["--run-id", "run-1", "--burst-stride", str(STRIDE), "--burst-time-scale",
                                        str(SCALE), "--server-metrics", metrics]  # fmt: skip

    # The results came back under runs/<run-id>/ and hold every scheduled item exactly once, split across the workers.
    local = tmp_path / "runs" / "run-1"
    records = read_records(local / "records.jsonl")
    items = burst_items(load_queue(str(ROOT / "datasets"), "burst"), SCALE, STRIDE, 0)
    assert Counter(r.item_id for r in records) == Counter(it.item_id for it in items)
    assert len(items) == 100
    shares = Counter(r.worker_id for r in records)
    assert len(shares) == WORKERS and sum(shares.values()) == 100 and max(shares.values()) - min(shares.values()) <= 1
    # Loss and lateness accounted as on one machine: what the server received is what was recorded.
    status = json.loads((local / "run_status.json").read_text())
    scrapes = [json.loads(line) for line in (local / "server_metrics.jsonl").read_text().splitlines()]
    (serving_pod,) = {p["metadata"]["name"] for p in cluster.pods_created}
    assert scrapes and all(set(row["pods"]) == {serving_pod} for row in scrapes)
    assert status["accounting"]["unrecorded"] == 0
    assert status["accounting"]["server_received"] == scrape(url)["slabench_sim_requests_received_total"]
    sent = sum(1 for r in records if r.sent is not None)
    assert sent + sum(1 for r in records if r.error_category == "not_sent") == 100
    summary = next(ln for ln in job.stderr.splitlines() if "open loop burst:" in ln)
    assert f"100 scheduled on {WORKERS} process(es), {sent} sent, {100 - sent} not sent; lateness p50" in summary

    # The verdict: the master's own exit code, the graded summary printed by the deploy.
    verdict = json.loads((local / "verdict.json").read_text())
    assert (local / "exit-code").read_text() == f"{r.returncode}\n"
    assert r.returncode == job.returncode
    assert f"deploy: verdict: {verdict['summary']}" in r.stderr
    if verdict.get("measurement") != "incomplete":  # a machine too busy to measure says so, and exits 4
        assert all(r.outcome is Outcome.OK for r in records)
        assert r.returncode == {"PASS": 0, "CONDITIONAL": 1, "FAIL": 2}[verdict["verdict"]] == 0, r.stderr
    # Both releases were removed, and the workers quit with the master.
    assert not [k for k in kube.kinds() if k.startswith(("Deployment/", "Job/", "Secret/sh.helm"))]
    assert all(w.returncode == 0 for w in cluster.workers), [w.returncode for w in cluster.workers]


@pytest.mark.parametrize("flag", [("--users", "8"), ("--run-time", "60s"), ("--spawn-rate", "2")])
def test_the_burst_refuses_closed_loop_flags(kube, s3, tmp_path, deploy, flag):
    sla = tmp_path / "sla.yaml"
    sla.write_text(SLA)
    r = deploy(kube, tmp_path, *flag, sla=sla)
    assert r.returncode == 3
    assert f"slabench: {flag[0]}: --kind burst sets its own load" in r.stderr and "--kind users" in r.stderr
    assert not [c for c in kube.calls if c.client == "helm"]
