"""A run that measured the machine is never graded as the model: a load generator whose event loop is held (users
busy in Python) sends open-loop requests late, and a simulator starved of CPU (stopped with SIGSTOP) runs its engine
steps late. Either one is written to run_status.json / seen in server_metrics.jsonl, the verdict cannot PASS, and the
process exits 4 — though no check fails."""

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

import psutil
import pytest

from tests.helpers.locust_run import CHAT, exit_for, run_locust, run_users
from tests.helpers.sla_helpers import write

FAST = ("--ttft", "0.02", "--itl", "0.002", "--output-tokens", "10")
GENEROUS = """\
name: generous
load: {LOAD}
deployment: {instance_type: g6e.xlarge}
targets:
  error_rate: {max: 0.5}
  e2e_p50_s: {max: 60}
"""


BUSY = "tests/locustfiles/busy_grader_user.py,shapes/rate.py"


def contract(tmp_path, load):
    return write(tmp_path, GENEROUS.replace("{LOAD}", "{" + load + "}"))


def test_an_open_loop_run_whose_sends_went_late_is_incomplete_not_a_pass(simulator, tmp_path):
    url = simulator(*FAST)
    records = tmp_path / "run" / "records.jsonl"
    env = {**os.environ, "SLABENCH_TEST_BUSY_S": "0.4"}  # each answer's grading holds the event loop 0.4 s
    res = run_locust(
        "-f", BUSY, "--host", url, "--rate-rps", "10", "--rate-hold", "3",
        "--records", str(records), "--sla", str(contract(tmp_path, "request_rate_rps: 10")), "--stop-timeout", "10",
        env=env,
    )  # fmt: skip
    assert res.returncode == 4, res.stderr[-3000:]
    status = json.loads((records.parent / "run_status.json").read_text())
    sat = status["saturation"]
    assert sat["open_loop_sends"] > 0 and sat["late_sends"] > 0.01 * sat["open_loop_sends"]
    verdict = json.loads((records.parent / "verdict.json").read_text())
    assert all(c["status"] != "FAIL" for c in verdict["checks"])  # nothing fails …
    assert verdict["verdict"] == "CONDITIONAL" and verdict["measurement"] == "incomplete"  # … the run does not
    assert any("saturated" in r and "after their schedule" in r for r in verdict["incomplete"])
    assert "measurement doubtful: saturated" in res.stderr


def test_a_saturated_plain_run_exits_4_and_says_why_in_run_status(simulator, tmp_path):
    """Without a contract the default measurement policy judges: what the run logs about itself (measurement
    doubtful: saturated), it says in run_status.json and its exit code. Each answer's grading holds the event loop
    0.08 s — too short to be a stall (a frozen process, 0.25 s), enough to have it late a third of the run."""
    url = simulator(*FAST)
    records = tmp_path / "run" / "records.jsonl"
    env = {**os.environ, "SLABENCH_TEST_BUSY_S": "0.08"}
    res = run_locust(
        "-f", BUSY, "--host", url, "--rate-rps", "5", "--rate-hold", "4",
        "--records", str(records), "--stop-timeout", "10", env=env,
    )  # fmt: skip
    assert res.returncode == 4, res.stderr[-3000:]
    assert re.search(r"the run is incomplete \(exit 4\):.*measurement doubtful: saturated", res.stderr), res.stderr
    status = json.loads((records.parent / "run_status.json").read_text())
    assert status["degraded"] is True and status["incomplete_reasons"] == [], status  # nothing is missing …
    assert any("event loop" in r and "ran late" in r for r in status["saturated"]), status  # … the machine was slow


def test_with_a_contract_its_own_measurement_policy_judges_the_saturation(simulator, tmp_path):
    """The same saturated run under --sla with a contract that tolerates any saturation: the default policy's
    finding stays in run_status.json and the log, but the verdict's code is the run's — never a line saying exit 4
    for a run that exits 0."""
    url = simulator(*FAST)
    records = tmp_path / "run" / "records.jsonl"
    lenient = contract(tmp_path, "request_rate_rps: 5").read_text() + (
        "measurement: {max_cpu_samples_over_90: 1000, max_late_send_share: 1, max_loop_late_share: 1, "
        "max_simulator_late_share: 1000}\n"
    )
    res = run_locust(
        "-f", BUSY, "--host", url, "--rate-rps", "5", "--rate-hold", "4",
        "--records", str(records), "--stop-timeout", "10", "--sla", str(write(tmp_path, lenient, "lenient.yaml")),
        "--sla-allow-conditional", env={**os.environ, "SLABENCH_TEST_BUSY_S": "0.08"},
    )  # fmt: skip
    status = json.loads((records.parent / "run_status.json").read_text())
    assert status["saturated"] and status["incomplete_reasons"] == [], status  # the default policy's finding …
    assert "measurement doubtful: saturated" in res.stderr, res.stderr[-3000:]
    verdict = json.loads((records.parent / "verdict.json").read_text())
    assert verdict["measurement"] == "complete", verdict  # … the contract's call
    if status["stalls"]:  # a busy machine also froze the load generator: no contract judges a freeze
        assert res.returncode == 4 and "the load generator was frozen" in res.stderr, res.stderr[-3000:]
    else:
        assert res.returncode == 0 and "(exit 4)" not in res.stderr, res.stderr[-3000:]


def test_a_starved_simulator_makes_the_run_incomplete(simulator, tmp_path):
    url = simulator(*FAST)
    pid = simulator.procs[-1].pid
    records = tmp_path / "run" / "records.jsonl"

    scrapes = records.parent / "server_metrics.jsonl"

    def starve() -> None:  # the simulator loses the CPU for a second, mid-run: once records show the run is sending
        # and the scraper has its first reading (a starve before it would be in every scrape: no rise to see) —
        # Locust's start and the scraper's can take seconds on a busy machine (the run lasts 10 s so that the starve,
        # once they have, still falls inside it: with 5 s a busy CI machine once starved it after the run)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not all(p.exists() and p.stat().st_size for p in (records, scrapes)):
            time.sleep(0.05)
        os.kill(pid, signal.SIGSTOP)
        time.sleep(1.0)
        os.kill(pid, signal.SIGCONT)

    thread = threading.Thread(target=starve)
    thread.start()
    res = run_users(
        CHAT, url, records, "--prompt-tokens", "16", "--sla", str(contract(tmp_path, "concurrency: 8")),
        "--server-metrics-interval", "0.5", users=8, run_time="10s", stop_timeout=10,
    )  # fmt: skip
    thread.join()
    assert res.returncode == 4, res.stderr[-3000:]
    verdict = json.loads((records.parent / "verdict.json").read_text())
    assert verdict["verdict"] != "PASS" and verdict["measurement"] == "incomplete"
    assert any("the simulator ran" in r and "late in all" in r for r in verdict["incomplete"])


def _pin(pid: int, cores: set[int]) -> None:
    for tid in os.listdir(f"/proc/{pid}/task"):  # every thread, not only the main one
        os.sched_setaffinity(int(tid), cores)


@pytest.mark.skipif(
    not os.path.exists("/proc/self/schedstat") or len(os.sched_getaffinity(0)) < 2,
    reason="needs Linux scheduler statistics and two cores",
)
def test_a_simulator_frozen_while_idle_is_seen_by_its_event_loop(simulator):
    """Frozen with no request in flight, the simulator has no engine step to run late; requests that came meanwhile
    would wait in the kernel and their latency would measure the freeze. Its event loop woke late while idle: that
    is counted."""
    import urllib.request

    from slabench.evidence.run_status import simulator_figures
    from slabench.evidence.scrape import parse

    url = simulator(*FAST)
    pid = simulator.procs[-1].pid

    def scrape() -> dict:
        with urllib.request.urlopen(f"{url}/metrics", timeout=30) as r:
            return {"t": time.time(), **parse(r.read().decode())}

    before = scrape()
    os.kill(pid, signal.SIGSTOP)
    time.sleep(1.0)
    os.kill(pid, signal.SIGCONT)
    time.sleep(0.2)  # its loop wakes and counts
    after = scrape()
    assert after["counters"]["slabench_sim_engine_late_seconds_total"] == 0  # nothing was due
    assert simulator_figures([before, after])["sim_late_s"] >= 0.9


def test_a_load_generator_starved_by_another_process_is_incomplete(simulator, tmp_path):
    """The case Locust's own CPU check cannot see: its process uses little CPU because another one holds the core
    (a vLLM server on the same machine did this). Once the run is sending, for 3 s, Locust's event-loop thread shares
    one core with a busy process at a lower priority; the simulator has the other core."""
    url = simulator(*FAST)
    server_core, load_core = sorted(os.sched_getaffinity(0))[:2]
    _pin(simulator.procs[-1].pid, {server_core})
    records = tmp_path / "run" / "records.jsonl"

    def starve() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (records.exists() and records.stat().st_size):
            time.sleep(0.05)
        (locust,) = [p for p in psutil.Process().children() if "locust" in " ".join(p.cmdline())]
        hog = subprocess.Popen(
            [sys.executable, "-c", "while True: pass"], preexec_fn=lambda: os.sched_setaffinity(0, {load_core})
        )
        cores = os.sched_getaffinity(locust.pid)
        try:
            os.sched_setaffinity(locust.pid, {load_core})  # its main thread: the event loop's
            os.setpriority(os.PRIO_PROCESS, locust.pid, 19)
            time.sleep(3.0)
        finally:
            hog.kill()
            hog.wait()
            os.sched_setaffinity(locust.pid, cores)
            with contextlib.suppress(PermissionError):  # back to normal where allowed (root), so it stops briskly
                os.setpriority(os.PRIO_PROCESS, locust.pid, 0)

    thread = threading.Thread(target=starve)
    thread.start()
    try:
        res = run_users(
            CHAT, url, records, "--prompt-tokens", "16", "--sla", str(contract(tmp_path, "concurrency: 8")),
            users=8, run_time="6s", stop_timeout=10,
        )  # fmt: skip
    finally:
        thread.join()
    assert res.returncode == 4, res.stderr[-3000:]
    sat = json.loads((records.parent / "run_status.json").read_text())["saturation"]
    assert sat["loop_late_s"] > 0.05 * sat["loop_span_s"] and sat["cpu_wait_s"] > 0.5, sat
    verdict = json.loads((records.parent / "verdict.json").read_text())
    assert all(c["status"] != "FAIL" for c in verdict["checks"])  # nothing fails …
    assert verdict["verdict"] == "CONDITIONAL" and verdict["measurement"] == "incomplete"  # … the run does not stand
    assert any("event loop ran late" in r and "waited for a CPU" in r for r in verdict["incomplete"]), verdict


def test_a_runs_event_loop_is_measured(simulator, tmp_path):
    """The measure itself, without a hog: over the run, in every run (the wait for a CPU on Linux only). On an idle
    machine this run's loop is never late (no wake-up 5 ms late: 0 % against the 5 % a contract allows by default)."""
    url = simulator(*FAST)
    records = tmp_path / "run" / "records.jsonl"
    res = run_users(CHAT, url, records, "--prompt-tokens", "16", users=8, run_time="3s", stop_timeout=10)
    status = json.loads((records.parent / "run_status.json").read_text())
    sat = status["saturation"]
    assert res.returncode == exit_for(records.parent), res.stderr[-3000:]  # what it says, it exits with
    assert sat["loop_span_s"] >= 3 and 0 <= sat["loop_late_s"] <= sat["loop_span_s"], sat
    if os.path.exists("/proc/self/schedstat"):
        assert sat["cpu_wait_runs"] > 0 and 0 <= sat["cpu_wait_s"] <= sat["loop_span_s"], sat
