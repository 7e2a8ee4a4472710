"""Real Locust runs (the `locust` command, local and distributed) against the simulator."""

import csv
import json
import os
import re
import subprocess
import sys
import time
from collections import Counter

import psutil
import pytest

from slabench.core.record import ErrorCategory, Outcome
from slabench.core.sinks import read_records
from slabench.sim.cli import EMBEDDED_NICE
from tests.helpers.locust_run import ROOT, assert_exit, run_locust, run_users, scrape

LOCUSTFILE = str(ROOT / "locustfiles" / "chat_replay.py")
# A run that must make requests is bounded by a request count, not a short -t: on a busy machine a 1-second run may
# not get a request in (the time bound is only a safety net).
WITH_STOP = f"{LOCUSTFILE},slabench/sweep/locust_stage.py"
UNTIL_3_RECORDS = ("-u", "1", "--stop-after-requests", "3", "-t", "60s")
FAST = ("--ttft", "0.02", "--itl", "0.002", "--output-tokens", "20")


def answered(records):
    """Leave out requests cut short by the end of the run (cancelled while in flight)."""
    return [r for r in records if r.outcome is not Outcome.DROPPED]


def assert_one_record_per_request(records, sim_url):
    ids = Counter(r.request_id for r in records)
    assert not [i for i, n in ids.items() if n > 1], "duplicate records"
    received = scrape(sim_url)["slabench_sim_requests_received_total"]
    assert len(records) == received


@pytest.mark.parametrize("processes", [None, 2], ids=["local", "2-workers"])
def test_every_request_becomes_exactly_one_record(simulator, tmp_path, processes):
    url = simulator(*FAST)
    records_path = tmp_path / "records.jsonl"
    extra = ["--processes", str(processes)] if processes else []
    res = run_users(
        LOCUSTFILE,
        url,
        records_path,
        "--csv",
        str(tmp_path / "stats"),
        "--json-file",
        str(tmp_path / "stats"),
        "--prompt-tokens",
        "64",
        *extra,
        users=6,
        run_time="3s",
        stop_timeout=5,
    )
    assert_exit(res.returncode, tmp_path, 0, output=res.stderr)  # 4 only for a machine too busy to measure (it says so)
    records = read_records(records_path)
    assert len(records) > 50
    assert all(r.outcome is Outcome.OK for r in records)  # --stop-timeout lets in-flight requests finish
    assert_one_record_per_request(records, url)
    assert scrape(url)["vllm:request_success_total"] == len(records)
    assert len({r.run_id for r in records}) == 1
    workers = {r.worker_id for r in records}
    assert len(workers) == (processes or 1)
    assert all(r.prompt_tokens == 64 and r.completion_tokens == 20 and r.token_source == "server" for r in records)
    # The live view: TTFT/ITL/TPOT/E2E rows in Locust's CSV (written periodically, so it may lag a little) and
    # its final stats, with one E2E entry per record.
    with open(tmp_path / "stats_stats.csv") as f:
        rows = {row["Name"]: row for row in csv.DictReader(f)}
    assert {"TTFT", "ITL", "TPOT", "E2E"} <= rows.keys()
    assert 15 <= float(rows["TTFT"]["Median Response Time"]) <= 200
    final = {e["name"]: e for e in json.loads((tmp_path / "stats.json").read_text())}
    assert final["E2E"]["num_requests"] == len(records)


@pytest.mark.parametrize("processes", [None, 2], ids=["local", "2-workers"])
def test_locusts_own_table_counts_each_request_once(simulator, tmp_path, processes):
    """The Aggregated row (and so the header's RPS and failure %) is the requests, not four metrics per request:
    its count is the records', its failures the failed records'; TTFT/ITL/TPOT rows stay, one per answered request."""
    url = simulator(*FAST, "--fault", "http_503=0.3")
    extra = ["--processes", str(processes)] if processes else []
    argv = ["-f", WITH_STOP, "--host", url, "-u", "4", "-r", "4", "-t", "120s", "--stop-after-requests", "40"]
    res = run_locust(*argv, "--records", str(tmp_path / "records.jsonl"), *extra)
    rows = {}  # Locust's final table: name → (requests, failures)
    for line in (res.stdout + res.stderr).splitlines():
        if m := re.match(r"^(?:LLM)?\s+(\w+)\s+(\d+)\s+(\d+)\(", line):
            rows.setdefault(m[1], (int(m[2]), int(m[3])))
    records = answered(read_records(tmp_path / "records.jsonl"))
    failed = [r for r in records if r.outcome is not Outcome.OK]
    ok = [r for r in records if r.outcome is Outcome.OK]
    assert failed and ok, Counter(r.outcome for r in records)
    assert rows["Aggregated"] == rows["E2E"] == (len(records), len(failed)), rows
    assert all(rows[name] == (len(ok), 0) for name in ("TTFT", "ITL", "TPOT")), rows


def test_users_stopped_mid_stream_leave_cancelled_records(simulator, tmp_path):
    url = simulator("--ttft", "0.05", "--itl", "0.05", "--output-tokens", "200")  # 10 s per request
    records_path = tmp_path / "records.parquet"
    res = run_users(LOCUSTFILE, url, records_path, "--processes", "2", users=4, run_time="2s")
    # no request was answered before the stop: the run measured nothing complete, and says so (exit 4)
    assert res.returncode == 4, res.stderr[-2000:]
    assert "the run is incomplete (exit 4): no request was answered" in res.stderr
    records = read_records(records_path)
    assert_one_record_per_request(records, url)
    assert len(records) == 4
    assert all((r.outcome, r.error_category) == (Outcome.DROPPED, ErrorCategory.CANCELLED) for r in records)
    assert all(r.first_token is not None and len(r.chunk_times) > 5 for r in records)  # timings kept


def test_no_host_starts_the_embedded_simulator_and_stops_it(tmp_path):
    records_path = tmp_path / "records.jsonl"
    argv = [sys.executable, "-m", "locust", "--headless", "--only-summary", "-f", LOCUSTFILE, "-u", "2", "-r", "2"]
    argv += ["-t", "3s", "--sim-ttft", "0.01", "--sim-itl", "0.001", "--records", str(records_path)]
    locust = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    sims: list[psutil.Process] = []
    deadline = time.monotonic() + 30
    while not sims and time.monotonic() < deadline:
        time.sleep(0.1)
        sims = [c for c in psutil.Process(locust.pid).children() if "simulate" in c.cmdline()]
    assert sims, "no embedded simulator process"
    # it yields the CPU to the load generator it shares the machine with (once it has started)
    while sims[0].nice() == os.nice(0) < 19 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sims[0].nice() == min(19, os.nice(0) + EMBEDDED_NICE)
    _, stderr = locust.communicate(timeout=60)
    assert_exit(locust.returncode, tmp_path, 0, output=stderr)
    assert "embedded simulator at http://127.0.0.1:" in stderr
    assert len(read_records(records_path)) > 10
    time.sleep(0.5)
    assert not sims[0].is_running(), "the embedded simulator outlived locust"


def test_malformed_host_is_one_clear_line(tmp_path):
    res = run_locust(
        "-f", LOCUSTFILE, "--host", "notaurl", "-u", "1", "-t", "1s", "--records", str(tmp_path / "r.jsonl")
    )
    assert res.returncode == 3
    assert "expected an http:// or https:// URL" in res.stderr
    assert "Traceback" not in res.stderr


def test_unreachable_host_gives_error_records_not_a_traceback(tmp_path):
    records_path = tmp_path / "r.jsonl"
    res = run_users(LOCUSTFILE, "http://127.0.0.1:9", records_path, users=2, run_time="2s")
    assert res.returncode == 4  # no request was answered: nothing measured
    assert "the run is incomplete (exit 4): no request was answered" in res.stderr
    assert "Traceback" not in res.stderr
    assert "cannot list models at http://127.0.0.1:9" in res.stderr
    records = read_records(records_path)
    assert records and all(r.error_category is ErrorCategory.CONNECT for r in records)
    assert len(records) <= 2 * 4  # backoff (0.25 + 0.5 + 1 s at least before a 4th) keeps a dead host unhammered


def test_wrong_api_key_is_classified(simulator, tmp_path):
    url = simulator(*FAST, "--api-key-env", "SIM_KEY", env={**os.environ, "SIM_KEY": "right"})
    records_path = tmp_path / "r.jsonl"
    res = run_locust(
        "-f",
        WITH_STOP,
        "--host",
        url,
        *UNTIL_3_RECORDS,
        "--model",
        "slabench-sim",
        "--records",
        str(records_path),
        env={**os.environ, "OPENAI_API_KEY": "wrong"},
    )
    assert "Traceback" not in res.stderr
    records = answered(read_records(records_path))
    assert records and all(r.http_status == 401 and "check the API key" in r.error_message for r in records)
    assert "wrong" not in records_path.read_text()  # the key is never written


def test_a_server_that_is_not_openai_compatible(tmp_path):
    srv = subprocess.Popen(
        [sys.executable, "-m", "http.server", "0", "--bind", "127.0.0.1"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        port = srv.stdout.readline().split("port ")[1].split()[0]
        records_path = tmp_path / "r.jsonl"
        res = run_locust(
            "-f",
            WITH_STOP,
            "--host",
            f"http://127.0.0.1:{port}",
            *UNTIL_3_RECORDS,
            "--records",
            str(records_path),
        )
        assert "Traceback" not in res.stderr
        assert "answered HTTP 404" in res.stderr
        records = answered(read_records(records_path))
        assert records and all(r.outcome is Outcome.ERROR and r.http_status == 501 for r in records)
    finally:
        srv.kill()
