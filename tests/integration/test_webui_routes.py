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

import pytest

from slabench.core.record import Outcome
from slabench.core.sinks import read_records
from tests.ports import free_port

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


@pytest.fixture
def run(simulator, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    sim = simulator("--ttft", "0.02", "--itl", "0.004", "--output-tokens", "12", "--fault", "http_500=0.2")
    port = free_port()
    records = tmp_path / "records.parquet"
    argv = [
        sys.executable, "-m", "locust", "-f", "tests/webui_locustfile.py", "--host", sim,
        "--web-host", "127.0.0.1", "--web-port", str(port), "--web-base-path", BASE, "--autostart",
        "-u", "3", "-r", "3", "-t", "5s", "--autoquit", "120", "--records", str(records),
        "--server-metrics", "off", "--live-window-s", "3",
    ]  # fmt: skip
    log = (tmp_path / "locust.log").open("w")
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        yield f"http://127.0.0.1:{port}{BASE}", records
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(15)
        log.close()


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
