"""Distributed runs that lose a worker (kill -9) or their master."""

import json
import signal
import socket
import subprocess
import sys
import time
from collections import Counter

from slabench.record import ErrorCategory, Outcome
from slabench.sinks import read_records
from tests.locust_run import ROOT, scrape

LOCUSTFILE = str(ROOT / "locustfiles" / "chat_replay.py")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_cluster(url, tmp_path, workers, run_time, spool):
    port = free_port()
    common = ["-f", LOCUSTFILE, "--spool-dir", str(spool)]
    master = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "locust",
            *common,
            "--master",
            "--headless",
            "--expect-workers",
            str(workers),
            "--master-bind-host",
            "127.0.0.1",
            "--master-bind-port",
            str(port),
            "--host",
            url,
            "-u",
            str(2 * workers),
            "-r",
            str(2 * workers),
            "-t",
            run_time,
            "--records",
            str(tmp_path / "records.jsonl"),
            "--only-summary",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "locust",
                *common,
                "--worker",
                "--master-host",
                "127.0.0.1",
                "--master-port",
                str(port),
            ],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(workers)
    ]
    return master, procs


def wait_for_records(path, n, timeout=60):
    """Until the run is really going (workers start slowly on a busy machine)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if path.exists() and path.read_text().count("\n") >= n:
            return
        time.sleep(0.2)
    raise AssertionError(f"no {n} records in {path} after {timeout} s")


def test_a_killed_worker_is_accounted_and_the_run_marked_degraded(simulator, tmp_path):
    url = simulator("--ttft", "0.05", "--itl", "0.02", "--output-tokens", "50")  # ~1 s per request
    master, workers = start_cluster(url, tmp_path, 3, "14s", tmp_path / "spool")
    try:
        wait_for_records(tmp_path / "records.jsonl", 12)
        time.sleep(1)
        workers[0].send_signal(signal.SIGKILL)
        _, err = master.communicate(timeout=90)
    finally:
        for w in workers:
            w.kill()
    assert "stopped answering" in err
    status = json.loads((tmp_path / "run_status.json").read_text())
    assert status["degraded"] and len(status["lost_workers"]) == 1
    ((dead, info),) = status["lost_workers"].items()
    records = read_records(tmp_path / "records.jsonl")
    assert len({r.request_id for r in records}) == len(records)  # no duplicates
    lost = [r for r in records if r.error_category is ErrorCategory.LOST_WITH_WORKER]
    assert len(lost) == info["lost_in_flight"] >= 1
    assert all(r.worker_id == dead and r.outcome is Outcome.DROPPED for r in lost)
    from_dead = Counter(r.outcome for r in records if r.worker_id == dead)
    assert from_dead[Outcome.OK] > 0  # what it shipped before dying is kept
    # Every request the server saw has a record, except ones the dead worker started after its last batch
    # (at most one per user of that worker: closed-loop users have one request in flight each).
    received = scrape(url)["slabench_sim_requests_received_total"]
    assert 0 <= received - len(records) <= 2
    assert status["records"] == len(records)


def test_a_dead_master_leaves_the_workers_records_in_their_spool(simulator, tmp_path):
    url = simulator("--ttft", "0.01", "--itl", "0.002", "--output-tokens", "20")
    spool = tmp_path / "spool"
    master, workers = start_cluster(url, tmp_path, 1, "30s", spool)
    try:
        wait_for_records(tmp_path / "records.jsonl", 20)
        time.sleep(1)
        master.send_signal(signal.SIGKILL)
        master.wait()
        time.sleep(1)
    finally:
        for w in workers:
            w.kill()
            w.wait()
    spooled = list(spool.rglob("*.jsonl"))
    assert len(spooled) == 1
    records = read_records(spooled[0])
    assert len(records) > 20 and all(r.outcome is Outcome.OK for r in records)


def test_a_clean_run_leaves_no_spool(simulator, tmp_path):
    url = simulator("--ttft", "0.01", "--itl", "0.002", "--output-tokens", "10")
    spool = tmp_path / "spool"
    master, workers = start_cluster(url, tmp_path, 2, "3s", spool)
    try:
        master.communicate(timeout=60)
    finally:
        for w in workers:
            w.kill()
    assert not list(spool.rglob("*.jsonl"))
    status = json.loads((tmp_path / "run_status.json").read_text())
    assert not status["degraded"]
