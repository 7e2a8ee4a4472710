"""The LLM view's HTTP side in a real `locust` run (local runner, web UI under a base path, Parquet records), without
a browser: the tab's table rows in /stats/requests, the script tag in the index page, the snapshot and its chart
points, and the records download equal to the records written."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from slabench.core.record import Outcome
from slabench.core.sinks import read_records
from tests.helpers.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
BASE = "/lt"


def get(url: str) -> bytes:
    return urllib.request.urlopen(url, timeout=5).read()


def wait_for(cond, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            got = cond()
            if got:
                return got
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


@contextlib.contextmanager
def locust_ui(host: str, records: Path, log: Path, seconds: int = 5) -> Iterator[str]:
    """A local `locust` run with its web UI under a base path, against `host`; yields the UI's URL."""
    port = free_port()
    argv = [
        sys.executable, "-m", "locust", "-f", "tests/locustfiles/webui_locustfile.py", "--host", host,
        "--web-host", "127.0.0.1", "--web-port", str(port), "--web-base-path", BASE, "--autostart",
        "-u", "3", "-r", "3", "-t", f"{seconds}s", "--autoquit", "120", "--records", str(records),
        "--server-metrics", "off", "--live-window-s", "3",
    ]  # fmt: skip
    with log.open("w") as out:
        proc = subprocess.Popen(argv, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            yield f"http://127.0.0.1:{port}{BASE}"
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(15)


@pytest.fixture
def run(simulator, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    sim = simulator("--ttft", "0.02", "--itl", "0.004", "--output-tokens", "12", "--fault", "http_500=0.2")
    records = tmp_path / "records.parquet"
    with locust_ui(sim, records, tmp_path / "locust.log") as url:
        yield url, records


def test_routes_during_and_after_a_local_run(run: tuple[str, Path]) -> None:
    url, records_path = run
    live = lambda since=0: json.loads(get(f"{url}/slabench/live.json?since={since}"))  # noqa: E731

    index = wait_for(lambda: get(url + "/"), 60, "the web UI")
    assert b'<script src="./slabench/embed.js"></script></body>' in index
    assert b'"extended_tabs": [{"key": "llm", "title": "LLM"}]' in index or b'"title": "LLM"' in index
    assert b"./slabench/records.jsonl" in index

    running = wait_for(lambda: (s := live())["window"]["records"] > 0 and s["state"] == "running" and s, 30, "records")
    assert isinstance(running["in_flight"], int) and 0 <= running["in_flight"] <= 3
    assert running["server"] is None and running["sla"] is None  # --server-metrics off; no --sla
    assert isinstance(running["saturation"], list)  # the load generator's saturation, shown in the tab's banner
    stats = json.loads(get(url + "/stats/requests"))
    (ext,) = [e for e in stats["extended_stats"] if e["key"] == "llm"]
    rows = {r["metric"]: r for r in ext["data"]}
    assert int(rows["requests finished"]["total"]) > 0
    assert "server queue: waiting" not in rows

    wait_for(lambda: live()["series_seq"] >= 2, 10, "two chart points")
    seq = live()["series_seq"]
    assert [p["seq"] for p in live(seq - 1)["series"]] == [seq]  # ?since= pages the points

    final = wait_for(lambda: (s := live())["stopped"] and s, 30, "the run to stop (-t 5s)")
    records = read_records(records_path)
    assert final["total"]["records"] == len(records) > 10
    assert final["total"]["errors"]["http_5xx"]["count"] == sum(r.error_category == "http_5xx" for r in records)
    assert final["now"] == live()["now"]  # frozen at the stop
    stats = json.loads(get(url + "/stats/requests"))
    rows = {r["metric"]: r for e in stats["extended_stats"] if e["key"] == "llm" for r in e["data"]}
    assert int(rows["requests finished"]["total"]) == len(records)
    n_5xx = sum(r.error_category == "http_5xx" for r in records)
    counted = sum(r.outcome is not Outcome.DROPPED for r in records)  # cancelled at stop: outside the rates
    if n_5xx:  # the simulator fails a random 20%
        assert rows["failed % http_5xx"]["total"] == f"{100 * n_5xx / counted:.2f}"
    lines = get(f"{url}/slabench/records.jsonl").decode().splitlines()
    assert sorted(json.loads(x)["request_id"] for x in lines) == sorted(r.request_id for r in records)
    page = get(f"{url}/slabench")  # redirected to the trailing slash
    assert b"LLM live view" in page and b"live.json" in page
    assert b"EMBED" not in get(f"{url}/slabench/embed.js") and b"slabench-llm-frame" in get(f"{url}/slabench/embed.js")


def test_a_reasoning_run_shows_ttfat_beside_ttft(simulator, tmp_path: Path) -> None:
    """Against a simulated reasoning model (a reasoning phase before each answer) the snapshot, its chart points and
    Locust's LLM table carry TTFAT (to the first answer token) beside TTFT, equal to what the records say."""
    sim = simulator("--ttft", "0.02", "--itl", "0.004", "--output-tokens", "4", "--reasoning-tokens", "20")
    records_path = tmp_path / "records.parquet"
    with locust_ui(sim, records_path, tmp_path / "locust.log", seconds=3) as url:
        live = lambda: json.loads(get(f"{url}/slabench/live.json?since=0"))  # noqa: E731
        final = wait_for(lambda: (s := live())["stopped"] and s, 90, "the run to stop (-t 3s)")
        stats = json.loads(get(url + "/stats/requests"))
    records = read_records(records_path)
    ok = [r for r in records if r.outcome is Outcome.OK]
    assert ok and all(r.reasoning_tokens for r in ok)
    assert final["total"]["reasoning"] is True
    ttfat = final["total"]["latency"]["ttfat"]
    assert ttfat["n"] == len(ok)
    want = np.percentile([r.first_answer_token - r.sent for r in ok], 50, method="linear")
    assert ttfat["p50"] == pytest.approx(want)
    assert ttfat["p50"] > final["total"]["latency"]["ttft"]["p50"]  # the reasoning comes first
    assert any(p["ttfat_p50"] is not None for p in final["series"])  # the chart's points
    rows = {r["metric"]: r for e in stats["extended_stats"] if e["key"] == "llm" for r in e["data"]}
    assert rows["TTFAT p50 (ms)"]["total"] == f"{want * 1000:.1f}"
