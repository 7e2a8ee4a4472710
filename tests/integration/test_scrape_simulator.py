"""The server-metrics scraper in real Locust runs (local and distributed) against the simulator, which serves
vLLM's metric names; and the poller process on its own."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from slabench.core.record import Outcome
from slabench.core.sinks import read_records
from slabench.evidence import crosscheck
from slabench.evidence.scrape import COUNTERS, FILE_NAME, read_scrapes
from tests.helpers.locust_run import ROOT, assert_exit, run_users, scrape
from tests.helpers.ports import free_port

FAST = ("--ttft", "0.03", "--itl", "0.003", "--output-tokens", "24")
# The vLLM capacity engine (an L4 GPU profile) also models the KV cache, so it serves every tracked gauge.
PROFILE = ("--profile", "l4", "--output-tokens", "24")
ALL_GAUGES = {"num_requests_running", "num_requests_waiting", "kv_cache_usage_perc"}
FIXED_GAUGES = {"num_requests_running", "num_requests_waiting"}
# Until the plugin's install() calls slabench.locust.scrape.install() itself, a locustfile does (idempotent).
LOCUSTFILE = """\
from locustfiles.chat_replay import ChatReplayUser  # noqa: F401
from slabench.locust import scrape as locust_scrape

locust_scrape.install()
"""


def locustfile(tmp_path: Path) -> str:
    path = tmp_path / "scrape_locustfile.py"
    path.write_text(LOCUSTFILE)
    return str(path)


def run(tmp_path: Path, url: str, *extra: str, seconds: str = "3s"):
    records = tmp_path / "run" / "records.jsonl"
    # --stop-timeout: in-flight requests finish, so every record has the server's usage
    res = run_users(
        locustfile(tmp_path), url, records, "--prompt-tokens", "40", *extra, users=4, run_time=seconds, stop_timeout=5
    )
    return res, records


def assert_series_sound(scrapes: list[dict], run_id: str, gauges: set[str]) -> None:
    assert {s["run_id"] for s in scrapes} == {run_id}
    assert [s["t"] for s in scrapes] == sorted(s["t"] for s in scrapes)
    for name in COUNTERS:
        values = [s["counters"][name] for s in scrapes]
        assert values == sorted(values), f"{name} went down: {values}"
    # The simulator sets its gauges from its first request on (vLLM from startup).
    served = [s for s in scrapes if s["counters"]["request_success_total"] > 0]
    assert served
    for s in served:
        assert set(s["gauges"]) == gauges


def test_local_run_scrapes_before_during_and_after(simulator, tmp_path):
    url = simulator(*PROFILE)
    res, records_path = run(tmp_path, url, "--server-metrics-interval", "0.5")
    assert_exit(res.returncode, records_path.parent, 0, output=res.stderr)
    records = read_records(records_path)
    assert records and all(r.outcome is Outcome.OK for r in records)
    scrapes = read_scrapes(records_path.parent / FILE_NAME)
    assert len(scrapes) >= 4  # baseline, ≥2 during a 3 s run at 0.5 s, closing
    assert_series_sound(scrapes, records[0].run_id, ALL_GAUGES)
    assert max(s["gauges"]["kv_cache_usage_perc"] for s in scrapes[1:]) > 0
    # The baseline is taken before the first request, the closing scrape after the last one ended.
    assert scrapes[0]["counters"]["request_success_total"] == 0
    assert scrapes[-1]["counters"]["request_success_total"] == len(records)
    assert max(s["gauges"]["num_requests_running"] for s in scrapes[1:]) >= 1
    # The simulator's own counters and the records agree exactly, and the client's latencies sit above the server's.
    c = crosscheck.crosscheck(records, scrapes)
    assert c["window"]["clean"]
    assert c["prompt_tokens"] == {"client": 40 * len(records), "server": 40.0 * len(records), "equal": True}
    assert c["generation_tokens"]["equal"] and c["generation_tokens"]["client"] == 24 * len(records)
    for key in ("ttft", "e2e"):
        assert c[key]["client_ge_server"] and c[key]["dominates"] and c[key]["within_tolerance"], c[key]
    assert c["agree"] is True
    assert scrape(url)["vllm:prompt_tokens_total"] == c["prompt_tokens"]["server"]
    assert res.stderr.count("slabench: server metrics: ") == 1


def test_distributed_run_scrapes_once_on_the_master(simulator, tmp_path):
    url = simulator(*FAST)
    port = free_port()
    res, records_path = run(
        tmp_path,
        url,
        "--processes",
        "2",
        "--master-bind-host",
        "127.0.0.1",
        "--master-bind-port",
        port,
        "--master-port",
        port,
        "--server-metrics-interval",
        "0.5",
    )
    assert_exit(res.returncode, records_path.parent, 0, output=res.stderr)
    records = read_records(records_path)
    assert len({r.worker_id for r in records}) == 2
    # One poller (the master's): one summary line, one run id, tokens that add up across both workers.
    assert res.stderr.count("slabench: server metrics: ") == 1
    scrapes = read_scrapes(records_path.parent)
    assert_series_sound(scrapes, records[0].run_id, FIXED_GAUGES)
    c = crosscheck.crosscheck(records, scrapes)
    assert c["prompt_tokens"]["equal"] and c["generation_tokens"]["equal"]
    assert c["requests"]["server_success"] == len(records)


def test_missing_metrics_is_one_warning_and_the_run_goes_on(simulator, tmp_path):
    url = simulator(*FAST)
    res, records_path = run(tmp_path, url, "--server-metrics", f"{url}/no-metrics-here", seconds="2s")
    assert_exit(res.returncode, records_path.parent, 0, output=res.stderr)
    assert read_records(records_path)
    warnings = [line for line in res.stderr.splitlines() if "no server metrics from" in line]
    assert len(warnings) == 1 and "HTTP 404" in warnings[0], res.stderr[-2000:]
    assert not (records_path.parent / FILE_NAME).exists()


def test_unreachable_metrics_host_warns_once(tmp_path):
    # The embedded simulator serves the requests; the metrics URL points at a closed port.
    res, records_path = run(
        tmp_path, "", "--server-metrics", "http://127.0.0.1:9/metrics", "--server-metrics-interval", "0.2"
    )
    assert_exit(res.returncode, records_path.parent, 0, output=res.stderr)
    assert read_records(records_path)
    warnings = [line for line in res.stderr.splitlines() if "no server metrics from" in line]
    assert len(warnings) == 1 and "retrying" in warnings[0]
    assert not (records_path.parent / FILE_NAME).exists()


def test_scraping_can_be_turned_off(simulator, tmp_path):
    url = simulator(*FAST)
    res, records_path = run(tmp_path, url, "--server-metrics", "off", seconds="2s")
    assert_exit(res.returncode, records_path.parent, 0, output=res.stderr)
    assert read_records(records_path)
    assert not (records_path.parent / FILE_NAME).exists()
    assert "server metrics" not in res.stderr


# `slabench scrape` by hand, through the module's add_parser (as the CLI wires it), stopped with Ctrl-C.
CLI = """\
import argparse, sys
from slabench.evidence import scrape
p = argparse.ArgumentParser()
scrape.add_parser(p.add_subparsers())
a = p.parse_args(sys.argv[1:])
sys.exit(a.func(a))
"""


@pytest.mark.parametrize(
    ("how", "sig"),
    [("python -m slabench.evidence.scrape", signal.SIGTERM), ("slabench scrape", signal.SIGINT)],
)
def test_poller_stops_on_a_signal_with_a_closing_scrape(simulator, tmp_path, how, sig):
    url = simulator(*FAST)
    out = tmp_path / FILE_NAME
    args = ["--url", f"{url}/metrics", "--out", str(out), "--interval", "0.2"]
    by_module = how.startswith("python")
    head = [sys.executable, "-m", "slabench.evidence.scrape"] if by_module else [sys.executable, "-c", CLI, "scrape"]
    # stdin is a pipe nobody writes to: without --stdin-control only a signal stops the poller.
    proc = subprocess.Popen([*head, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert proc.stdout.readline().startswith("slabench-scrape ready")
        time.sleep(1.0)
        proc.send_signal(sig)
        rest = proc.communicate(timeout=20)[0]
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0
    n = len(read_scrapes(out))
    assert n >= 3
    assert f"done {n} scrapes, 0 failed" in rest


def test_poller_under_stdin_control_stops_on_end_of_input(simulator, tmp_path):
    url = simulator(*FAST)
    out = tmp_path / FILE_NAME
    args = ["--url", f"{url}/metrics", "--out", str(out), "--interval", "60", "--stdin-control"]
    argv = [sys.executable, "-m", "slabench.evidence.scrape", *args]
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert proc.stdout.readline().startswith("slabench-scrape ready")
        rest = proc.communicate("", timeout=20)[0]  # closes stdin: the parent went away
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0
    assert "done 2 scrapes, 0 failed" in rest  # the baseline and the closing scrape
    assert len(read_scrapes(out)) == 2


@pytest.mark.parametrize("interval", ["0", "-1"])
def test_poller_refuses_a_bad_interval(interval, tmp_path):
    argv = [
        sys.executable,
        "-m",
        "slabench.evidence.scrape",
        "--url",
        "http://127.0.0.1:9/metrics",
        "--out",
        str(tmp_path / "x"),
    ]
    p = subprocess.run([*argv, "--interval", interval], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert p.returncode == 3 and "must be > 0 seconds" in p.stderr and "Traceback" not in p.stderr


def test_a_malformed_server_metrics_url_is_one_clear_line(tmp_path):
    res, _ = run(tmp_path, "http://127.0.0.1:9", "--server-metrics", "127.0.0.1:8000/metrics", seconds="1s")
    assert res.returncode == 3
    assert "--server-metrics '127.0.0.1:8000/metrics': expected 'off', 'pods' or a URL like" in res.stderr
    assert "Traceback" not in res.stderr
