"""Ctrl+C (SIGINT) during a run: every request the server saw still ends as exactly one record, even when the
signal arrives while a user is busy with a request (between sending it and recording it)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter

import pytest

from slabench.core.record import Outcome
from slabench.core.sinks import read_records
from tests.helpers.locust_run import ROOT, scrape
from tests.helpers.ports import free_port
from tests.integration.test_shapes_burst import small_queue

USER = "tests/locustfiles/busy_grader_user.py"


@pytest.mark.parametrize(
    "shape",
    [
        pytest.param(("-u", "4", "-r", "100"), id="closed-loop"),
        pytest.param(("-u", "4", "-r", "100", "--processes", "2"), id="closed-loop-2-workers"),
        pytest.param(("--burst-queue", "{queue}", "--open-loop-start-delay", "0.5"), id="open-loop-burst"),
    ],
)
def test_ctrl_c_while_users_are_busy_loses_no_request(simulator, tmp_path, shape):
    url = simulator("--ttft", "0.005", "--itl", "0.001", "--output-tokens", "4")
    queue = small_queue(tmp_path / "q.csv", [i * 0.02 for i in range(1000)])  # 50/s for 20 s
    files = USER + (",shapes/burst.py" if "--burst-queue" in shape else "")
    records_path = tmp_path / "records.jsonl"
    argv = [sys.executable, "-m", "locust", "--headless", "--only-summary", "-f", files, "--host", url]
    argv += [a.format(queue=queue) for a in shape] + ["--records", str(records_path)]
    argv += ["--spool-dir", str(tmp_path / "spool")]
    if "--processes" in shape:
        port = free_port()
        argv += ["--master-bind-host", "127.0.0.1", "--master-bind-port", port, "--master-port", port]
    # its own process group, signalled as a whole: what Ctrl+C in a terminal does (workers get it too)
    proc = subprocess.Popen(
        argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    deadline = time.monotonic() + 60
    while scrape(url).get("slabench_sim_requests_received_total", 0) < 30 and time.monotonic() < deadline:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert "Traceback" not in stderr, stderr[-3000:]
    records = read_records(records_path)
    sent = [r for r in records if r.sent is not None]
    answered = [r for r in records if r.outcome is Outcome.OK]
    # every request the server received has a record (one cancelled at the stop may not have reached it)
    assert len(answered) <= scrape(url)["slabench_sim_requests_received_total"] <= len(sent), stderr[-3000:]
    assert len(answered) >= 30
    assert len({r.request_id for r in records}) == len(records)
    assert not list((tmp_path / "spool").rglob("*.jsonl"))  # the master has the records: no second copy left
    if "--burst-queue" in shape:
        assert Counter(r.item_id for r in records) == Counter(f"queue-{i:05d}" for i in range(1000))


def test_a_run_killed_with_sigkill_cannot_pass(simulator, tmp_path):
    """kill -9 leaves no chance to write the final status: the run's records are a part of it, which must never
    grade PASS (it used to: exit 0 on the first seconds of a 30 s run)."""
    url = simulator("--ttft", "0.005", "--itl", "0.001", "--output-tokens", "4")
    records_path = tmp_path / "records.jsonl"
    argv = [sys.executable, "-m", "locust", "--headless", "--only-summary", "-f", "locustfiles/chat_replay.py"]
    argv += ["--host", url, "-u", "2", "-t", "120s", "--records", str(records_path)]
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 90
        while not (records_path.exists() and records_path.read_text().count("\n") >= 20):
            assert time.monotonic() < deadline and proc.poll() is None, "the run wrote no records"
            time.sleep(0.2)
    finally:
        proc.kill()
        proc.wait()
    sla = tmp_path / "sla.yaml"
    sla.write_text("name: s\nload: {concurrency: 2}\ndeployment: {instance_type: g6e.xlarge}\n"
                   "targets:\n  ttft_p95_s: {max: 9}\n")  # fmt: skip
    res = subprocess.run([sys.executable, "-m", "slabench", "grade", str(records_path), "--sla", str(sla)],
                         cwd=ROOT, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert res.returncode == 4, res.stdout + res.stderr
    assert "the run did not finish" in res.stdout
