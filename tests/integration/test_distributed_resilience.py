"""Distributed runs that lose a worker (kill -9), pause one (SIGSTOP: a busy worker), or lose their master — every
request the server received ends as exactly one record, checked against the server's own counter."""

import json
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import psutil

from slabench.core.record import ErrorCategory, Outcome
from slabench.core.sinks import read_records
from slabench.locust.spool import read_journal
from tests.helpers.locust_run import ROOT, exit_for, scrape
from tests.helpers.ports import free_port
from tests.integration.test_shapes_burst import small_queue

LOCUSTFILE = str(ROOT / "locustfiles" / "chat_replay.py")
RECEIVED = "slabench_sim_requests_received_total"
MISSING_SOON = ("--worker-missing-after", "4")  # Locust's own allowance: these tests freeze or kill a worker


def start_cluster(url, tmp_path, workers, run_time, spool, worker_spools=None, extra=()):
    """A master and `workers` worker processes on a free port. `worker_spools`: each worker's own --spool-dir (a
    spool the master cannot read, as on another host)."""
    port = free_port()
    argv = [sys.executable, "-m", "locust", "-f", LOCUSTFILE, "--spool-dir", str(spool), "--master", "--headless"]
    argv += ["--expect-workers", str(workers), "--master-bind-host", "127.0.0.1", "--master-bind-port", port]
    argv += ["--host", url, "-u", str(2 * workers), "-r", str(2 * workers), "-t", run_time]
    argv += ["--records", str(tmp_path / "records.jsonl"), "--only-summary", *extra]
    master = subprocess.Popen(
        argv,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    procs = []
    for i in range(workers):
        own = str(worker_spools[i]) if worker_spools else str(spool)
        argv = [sys.executable, "-m", "locust", "-f", LOCUSTFILE, "--spool-dir", own, "--worker"]
        argv += ["--master-host", "127.0.0.1", "--master-port", port]
        procs.append(subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    return master, procs


def wait_for_requests(url, n, timeout=60):
    """Until the run is really going (workers start slowly on a busy machine)."""
    end = time.monotonic() + timeout
    while scrape(url).get(RECEIVED, 0) < n:
        assert time.monotonic() < end, f"the server got no {n} requests in {timeout} s"
        time.sleep(0.1)


def wait_for_each_worker(spool, workers, timeout=60):
    """Until each worker's journal names a request it sent: its users are running."""
    end = time.monotonic() + timeout
    while sum('"began"' in p.read_text() for p in spool.rglob("*.jsonl")) < workers:
        assert time.monotonic() < end, f"not every one of {workers} workers sent a request in {timeout} s"
        time.sleep(0.1)


def status_of(tmp_path):
    return json.loads((tmp_path / "run_status.json").read_text())


def test_a_killed_worker_is_accounted_exactly_from_its_spool(simulator, tmp_path):
    url = simulator("--ttft", "0.05", "--itl", "0.02", "--output-tokens", "50")  # ~1 s per request
    master, workers = start_cluster(url, tmp_path, 3, "14s", tmp_path / "spool", extra=MISSING_SOON)
    try:
        wait_for_requests(url, 12)
        time.sleep(1)
        workers[0].send_signal(signal.SIGKILL)
        _, err = master.communicate(timeout=120)
    finally:
        for w in workers:
            w.kill()
            w.wait()
    assert master.returncode == 4, err[-3000:]  # degraded: never 0
    assert "stopped answering" in err and "was lost" in err and "the run is incomplete" in err
    assert "Traceback" not in err
    status = status_of(tmp_path)
    assert status["degraded"] and len(status["lost_workers"]) == 1
    ((dead, info),) = status["lost_workers"].items()
    assert info["records_from"] == "spool"
    records = read_records(tmp_path / "records.jsonl")
    assert len({r.request_id for r in records}) == len(records) == status["records"]
    lost = [r for r in records if r.error_category is ErrorCategory.LOST_WITH_WORKER]
    assert len(lost) == info["lost_in_flight"] >= 1
    assert all(r.worker_id == dead and r.outcome is Outcome.DROPPED and r.wall_sent for r in lost)
    assert all(len(r.request_id) == 32 and r.user_id for r in lost)  # the real request ids and users
    assert Counter(r.outcome for r in records if r.worker_id == dead)[Outcome.OK] > 0  # what it made is kept
    # Exact: every request the server received has a record (a stand-in's request may not have reached it).
    received = scrape(url)[RECEIVED]
    answered = sum(1 for r in records if r.outcome is not Outcome.DROPPED)
    assert answered <= received <= answered + len(lost) + sum(1 for r in records if r.outcome is Outcome.DROPPED)
    acc = status["accounting"]
    assert acc["server_received"] == received and acc["unrecorded"] == 0
    assert not list((tmp_path / "spool").rglob("*.jsonl"))  # read, stored, removed


def test_a_killed_worker_on_another_host_is_reconciled_with_the_servers_count(simulator, tmp_path):
    """The master cannot read the dead worker's spool: stand-ins for what its last report had in flight (real ids),
    and the rest of the gap stated from the server's request counter."""
    url = simulator("--ttft", "0.02", "--itl", "0.01", "--output-tokens", "30")  # ~0.3 s per request
    spools = [tmp_path / "w0", tmp_path / "w1"]
    master, workers = start_cluster(
        url, tmp_path, 2, "10s", tmp_path / "spool", worker_spools=spools, extra=MISSING_SOON
    )
    try:
        wait_for_requests(url, 12)
        time.sleep(1)
        workers[0].send_signal(signal.SIGKILL)
        _, err = master.communicate(timeout=120)
    finally:
        for w in workers:
            w.kill()
            w.wait()
    assert master.returncode == 4, err[-3000:]
    status = status_of(tmp_path)
    (info,) = status["lost_workers"].values()
    assert info["records_from"] == "last report"
    records = read_records(tmp_path / "records.jsonl")
    assert len({r.request_id for r in records}) == len(records)
    (journal,) = list(spools[0].rglob("*.jsonl"))  # the dead worker's own spool, left where it was
    began = read_journal(journal).began
    lost = [r for r in records if r.error_category is ErrorCategory.LOST_WITH_WORKER]
    assert lost and all(r.request_id in began for r in lost)  # stand-ins carry the ids the worker really used
    acc = status["accounting"]
    received = scrape(url)[RECEIVED]
    assert acc["server_received"] == received
    may = acc["reached_server_surely"] + acc["reached_server_maybe"]
    assert acc["unrecorded"] == max(0, received - may)
    # the gap is what the dead worker started after its last report: at most one per user of it (2), plus one
    # each for users whose in-flight request its last report already listed as ended
    assert 0 <= acc["unrecorded"] <= 4
    assert "server: " in err


def test_a_paused_worker_that_comes_back_is_not_double_counted(simulator, tmp_path):
    """SIGSTOP for longer than Locust's heartbeat allowance stands in for a worker too busy to send heartbeats:
    the master marks it missing; when it comes back, its requests are counted once and the run is complete."""
    url = simulator("--ttft", "0.02", "--itl", "0.01", "--output-tokens", "30")
    master, workers = start_cluster(url, tmp_path, 2, "16s", tmp_path / "spool", extra=MISSING_SOON)
    try:
        wait_for_requests(url, 12)
        workers[0].send_signal(signal.SIGSTOP)
        time.sleep(7)
        workers[0].send_signal(signal.SIGCONT)
        _, err = master.communicate(timeout=120)
    finally:
        for w in workers:
            w.kill()
            w.wait()
    assert "stopped answering" in err and "is back after" in err, err[-3000:]
    assert master.returncode == 4, err[-3000:]  # every request accounted for, but the freeze is in its latencies
    status = status_of(tmp_path)
    assert status["incomplete_reasons"] == [] and not status["lost_workers"], status
    assert status["saturated"] and any(s["end"] - s["start"] > 5 for s in status["stalls"]), status
    assert len(status["workers_missing_then_back"]) == 1
    records = read_records(tmp_path / "records.jsonl")
    assert not [r for r in records if r.error_category is ErrorCategory.LOST_WITH_WORKER]
    assert len({r.request_id for r in records}) == len(records)
    received = scrape(url)[RECEIVED]
    sent = [r for r in records if r.sent is not None]
    answered = [r for r in records if r.outcome is Outcome.OK]
    assert len(answered) <= received <= len(sent)  # each request once (a cancelled one may not have reached it)
    assert status["accounting"]["unrecorded"] == 0


def test_a_paused_open_loop_worker_keeps_its_items_once_each(simulator, tmp_path):
    url = simulator("--ttft", "0.02", "--itl", "0.01", "--output-tokens", "10")
    queue = small_queue(tmp_path / "q.csv", [i * 0.05 for i in range(300)])  # 20/s for 15 s
    port = free_port()
    argv = [sys.executable, "-m", "locust", "-f", "locustfiles/chat_replay.py,shapes/burst.py", "--headless"]
    argv += ["--only-summary", "--host", url, "--burst-queue", str(queue), "--records", str(tmp_path / "r.jsonl")]
    argv += ["--processes", "2", "--master-bind-host", "127.0.0.1", "--master-bind-port", port]
    argv += ["--spool-dir", str(tmp_path / "spool"), "--prompt-tokens", "16", *MISSING_SOON]
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for_requests(url, 40)
        me = psutil.Process(proc.pid)
        worker = next(c for c in me.children() if c.cmdline() == me.cmdline())  # a forked worker, not the poller
        worker.suspend()
        time.sleep(7)
        worker.resume()
        _, err = proc.communicate(timeout=180)
    finally:
        proc.kill()
    assert "stopped answering" in err and "is back after" in err, err[-3000:]
    assert proc.returncode == 4, err[-3000:]  # each item once, but late: the freeze is in their latencies
    records = read_records(tmp_path / "r.jsonl")
    assert Counter(r.item_id for r in records) == Counter(f"queue-{i:05d}" for i in range(300))
    assert all(r.outcome is Outcome.OK for r in records)  # late, but sent and answered
    assert scrape(url)[RECEIVED] == 300
    assert not list((tmp_path / "spool").rglob("*.jsonl"))


def test_workers_stop_soon_after_the_master_dies_and_recover_merges_their_spools(simulator, tmp_path):
    url = simulator("--ttft", "0.01", "--itl", "0.002", "--output-tokens", "20")
    spool = tmp_path / "spool"
    master, workers = start_cluster(url, tmp_path, 2, "60s", spool)
    try:
        wait_for_requests(url, 40)
        time.sleep(1)
        master.send_signal(signal.SIGKILL)
        master.wait()
        killed = time.monotonic()
        errs = [w.communicate(timeout=30)[1] for w in workers]  # they stop on their own
        stopped_after = time.monotonic() - killed
    finally:
        for w in workers:
            w.kill()
            w.wait()
    assert stopped_after < 20, stopped_after  # 5 s by default, plus quitting on a busy machine
    assert all(w.returncode == 4 for w in workers), errs[0][-2000:]
    assert all("lost the master" in e and "slabench recover" in e and "Traceback" not in e for e in errs)
    received = scrape(url)[RECEIVED]
    time.sleep(1)
    assert scrape(url)[RECEIVED] == received  # no more load

    (run_dir,) = [p for p in spool.iterdir() if p.is_dir()]
    out = tmp_path / "recovered" / "records.jsonl"
    res = subprocess.run(
        [sys.executable, "-m", "slabench", "recover", str(run_dir), "--out", str(out), "--remove-spools"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0, res.stderr
    assert "slabench recover:" in res.stdout and "degraded (master lost)" in res.stdout
    records = read_records(out)
    assert len({r.request_id for r in records}) == len(records)  # no duplicates
    answered = sum(1 for r in records if r.outcome is Outcome.OK)
    assert answered <= received <= len(records)  # every request the server received has a record
    assert len({r.worker_id for r in records}) == 2
    status = json.loads((out.parent / "run_status.json").read_text())
    assert status["degraded"] and status["master_lost"] and status["records"] == len(records)
    assert not list(spool.rglob("*.jsonl"))  # merged, verified, then removed (--remove-spools)


def test_recover_merges_the_masters_partial_file_without_duplicates(simulator, tmp_path):
    url = simulator("--ttft", "0.01", "--itl", "0.002", "--output-tokens", "20")
    spool = tmp_path / "spool"
    master, workers = start_cluster(url, tmp_path, 1, "60s", spool)
    try:
        wait_for_requests(url, 40)
        time.sleep(2)
        master.send_signal(signal.SIGKILL)
        master.wait()
        for w in workers:
            w.communicate(timeout=30)
    finally:
        for w in workers:
            w.kill()
            w.wait()
    partial = read_records(tmp_path / "records.jsonl")
    assert partial  # the master had stored some before it died
    res = subprocess.run(
        [sys.executable, "-m", "slabench", "recover", str(spool), "--out", str(tmp_path / "records.jsonl")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0, res.stderr
    records = read_records(tmp_path / "records.jsonl")
    assert len({r.request_id for r in records}) == len(records)
    assert {r.request_id for r in partial} <= {r.request_id for r in records}
    assert scrape(url)[RECEIVED] <= len(records)


def test_a_clean_run_leaves_no_spool_and_matches_the_servers_count(simulator, tmp_path):
    url = simulator("--ttft", "0.01", "--itl", "0.002", "--output-tokens", "10")
    spool = tmp_path / "spool"
    master, workers = start_cluster(url, tmp_path, 2, "3s", spool)
    try:
        _, err = master.communicate(timeout=60)
    finally:
        for w in workers:
            w.kill()
            w.wait()
    assert master.returncode == exit_for(tmp_path), err[-3000:]  # 0, or 4 when a busy machine saturated or froze it
    assert not list(spool.rglob("*.jsonl"))
    status = status_of(tmp_path)
    assert status["degraded"] == bool(status["saturated"] or status["stalls"]) and status["incomplete_reasons"] == []
    assert status["accounting"]["unrecorded"] == 0
    assert status["accounting"]["server_received"] == scrape(url)[RECEIVED]
    sat = status["saturation"]  # each worker's event-loop figures came with its final batch
    assert sat["loop_span_s"] > 0 and sat["loop_where"] in {
        r.worker_id for r in read_records(tmp_path / "records.jsonl")
    }


def test_processes_with_only_a_bind_port_use_it_for_the_workers(simulator, tmp_path):
    url = simulator("--ttft", "0.01", "--itl", "0.002", "--output-tokens", "10")
    argv = [sys.executable, "-m", "locust", "-f", LOCUSTFILE, "--headless", "--only-summary", "--host", url]
    argv += ["-u", "2", "-r", "2", "-t", "3s", "--processes", "2", "--master-bind-port", free_port()]
    argv += ["--records", str(tmp_path / "r.jsonl"), "--worker-join-timeout", "40"]
    res = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert res.returncode == exit_for(tmp_path), res.stderr[-3000:]
    assert len({r.worker_id for r in read_records(tmp_path / "r.jsonl")}) == 2


def test_a_master_without_workers_gives_up_in_one_line(tmp_path):
    argv = [sys.executable, "-m", "locust", "-f", LOCUSTFILE, "--headless", "--only-summary", "--master"]
    argv += ["--expect-workers", "2", "--master-bind-host", "127.0.0.1", "--master-bind-port", free_port()]
    argv += ["--host", "http://127.0.0.1:9", "-u", "2", "-t", "5s", "--worker-join-timeout", "2"]
    argv += ["--records", str(tmp_path / "r.jsonl")]
    t0 = time.monotonic()
    res = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert res.returncode == 4, res.stderr[-3000:]
    assert time.monotonic() - t0 < 40
    assert "0 of 2 worker(s) joined the master" in res.stderr and "--worker-join-timeout" in res.stderr
    assert "Traceback" not in res.stderr
    assert not Path(tmp_path / "r.jsonl").exists()


def test_a_frozen_worker_makes_the_run_incomplete_and_its_requests_leave_the_latencies(simulator, tmp_path):
    """A worker frozen for a few seconds (SIGSTOP: what a CPU-throttled pod does) holds its in-flight requests with
    it: they end `ok` with the freeze in their latency. The run says so — run_status.json degraded with the reason and
    the stall's window, exit 4 — and the grader leaves those requests out of every latency figure, saying how many."""
    # The loop's clock: each event stamped when the worker read it, so whatever was in flight at the stop ends after
    # the resume. (With the kernel's, a response that arrived whole while the worker was stopped keeps the kernel's
    # receive stamps, its true times, and has no freeze in it: nothing for the grader to leave out.) The master sends
    # its options to the workers.
    url = simulator("--ttft", "0.02", "--itl", "0.01", "--output-tokens", "30")
    spool = tmp_path / "spool"
    master, workers = start_cluster(url, tmp_path, 2, "12s", spool, extra=("--arrival-clock", "loop"))
    try:
        wait_for_each_worker(spool, 2)
        wait_for_requests(url, 12)
        workers[0].send_signal(signal.SIGSTOP)
        time.sleep(3)
        workers[0].send_signal(signal.SIGCONT)
        _, err = master.communicate(timeout=120)
    finally:
        for w in workers:
            w.kill()
            w.wait()
    assert master.returncode == 4, err[-3000:]
    assert "the load generator was frozen" in err and "the run is incomplete (exit 4)" in err, err[-3000:]
    status = status_of(tmp_path)
    assert status["degraded"] and any("event loop" in r for r in status["saturated"]), status
    (frozen,) = [s for s in status["stalls"] if s["end"] - s["start"] > 2.5]  # the freeze, in the worker's clock
    records = read_records(tmp_path / "records.jsonl")
    held = [
        r
        for r in records
        if r.worker_id == frozen["worker"] and r.sent is not None and r.end is not None
        and r.sent < frozen["end"] and r.end > frozen["start"]
    ]  # fmt: skip
    # The window's edges are the ticker's wake-ups, not the signals: a request may end just before the stop, or be
    # sent just after the resume, before the ticker runs. Those in flight at the freeze's middle waited through it all.
    middle = (frozen["start"] + frozen["end"]) / 2
    through = [r for r in held if r.sent < middle < r.end]
    near = [(round(r.sent - middle, 3), round(r.end - middle, 3)) for r in held]
    assert through, f"no request of the frozen worker in flight through {frozen}; near it (sent, end): {near}"
    assert all(r.end - r.sent > 2.5 for r in through if r.outcome is Outcome.OK)  # the freeze is in them
    # Graded, those requests are counted and left out of every latency figure: E2E p99 under 2 s holds.
    sla = tmp_path / "sla.yaml"
    sla.write_text(
        "name: c\nload: {concurrency: 4}\ndeployment: {instance_type: g5.xlarge}\ntargets:\n  e2e_p99_s: {max: 2}\n"
    )
    graded = subprocess.run(
        [sys.executable, "-m", "slabench", "grade", str(tmp_path / "records.jsonl"), "--sla", str(sla)],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert graded.returncode == 4, graded.stdout[-3000:] + graded.stderr[-3000:]
    verdict = json.loads((tmp_path / "verdict.json").read_text())
    assert verdict["checks"][0]["status"] == "PASS", verdict["checks"]
    assert verdict["measurement"] == "incomplete" and any("event loop" in r for r in verdict["incomplete"])
    (note,) = [n for n in verdict["notes"] if "were in flight while the load generator was frozen" in n]
    assert int(note.split(" request(s)")[0].split()[-1]) >= len(held)  # (and any shorter stall's)
