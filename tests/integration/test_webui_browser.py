"""The LLM tab as a user sees it: headless Chromium (Debian's, driven by Playwright) opens Locust's web UI during a
real distributed run (master + 2 worker processes) against the simulator; the tab's figures appear and change, the
charts draw, the SLA shows a provisional status; after Stop, every figure on the page matches the records file."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from slabench.core import metrics
from slabench.core.record import Outcome
from slabench.core.sinks import read_records
from tests.helpers.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]
WINDOW_S = 5.0

playwright_api = pytest.importorskip("playwright.sync_api", reason="needs the playwright package (pip)")
pytestmark = pytest.mark.skipif(
    not os.path.exists(CHROMIUM), reason="no Debian chromium at /usr/bin/chromium (apt-get install chromium)"
)

CONTRACT = """\
schema_version: 1
name: webui-live
load: {concurrency: 4}
deployment: {instance_type: g6e.xlarge, replicas: 1, gpus_per_replica: 1}
targets:
  ttft_p95_s: {max: 30.0}
  error_rate: {max: 0.5}
"""


def get_json(url: str) -> dict:
    return json.loads(urllib.request.urlopen(url, timeout=5).read())


def wait_for(cond, timeout: float, what: str, step: float = 0.25):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            got = cond()
            if got:
                return got
        time.sleep(step)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def locust_ui(simulator, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    sim = simulator("--profile", "l4", "--max-num-seqs", "3", "--fault", "http_500=0.1", "--seed", "7")
    (tmp_path / "sla.yaml").write_text(CONTRACT)
    port = free_port()
    records = tmp_path / "records.jsonl"
    argv = [
        sys.executable, "-m", "locust", "-f", "tests/locustfiles/webui_locustfile.py", "--host", sim,
        "--web-host", "127.0.0.1", "--web-port", str(port), "--autostart", "-u", "4", "-r", "4",
        "--processes", "2", "--max-tokens", "16", "--records", str(records),
        "--live-window-s", str(WINDOW_S), "--sla", str(tmp_path / "sla.yaml"),
    ]  # fmt: skip
    log = (tmp_path / "locust.log").open("w")
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: urllib.request.urlopen(url + "/", timeout=2).status == 200, 60, "the Locust web UI")
        # --autostart starts the run a moment after the UI is up; a page loaded before then shows the start form
        # and stays on it (the UI learns of a run it did not start only on a reload)
        wait_for(lambda: state(url) in ("spawning", "running"), 60, "the autostarted run")
        yield url, records
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)  # the master and the worker processes it forked
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)
        log.close()


def state(url: str) -> str:
    return json.loads(urllib.request.urlopen(url + "/stats/requests", timeout=2).read())["state"]


def number(text: str) -> float:
    m = re.fullmatch(r"\s*(-?\d+(?:\.\d+)?)\s*", text)
    assert m, f"not a number on the page: {text!r}"
    return float(m.group(1))


def pcts(values: list[float]) -> list[float]:
    return [float(x) for x in np.percentile(np.asarray(values), [50, 95, 99], method="linear")]


def test_llm_tab_live_and_matching_the_records(locust_ui: tuple[str, Path], tmp_path: Path) -> None:
    url, records_path = locust_ui
    with playwright_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(url + "/")
        page.get_by_role("tab", name="LLM").click()

        # Locust's own table under the tab: figures appear, then change as records arrive.
        def table_value(metric: str) -> str:
            row = page.locator("tr", has=page.locator("td", has_text=re.compile(f"^{re.escape(metric)}$")))
            return row.locator("td").nth(1).inner_text()

        first = wait_for(lambda: int(number(table_value("requests finished"))), 30, "finished requests in the tab")
        wait_for(lambda: int(number(table_value("requests finished"))) != first, 20, "the tab's figures to change")
        assert number(table_value("TTFT p95 (ms)")) > 0
        # the simulator's own gauges, via the scrape poller's file
        wait_for(lambda: number(table_value("server: running")) >= 1, 10, "the server's running requests")

        # The charts page framed under the table: tiles, charts with points, the provisional SLA status.
        frame = page.frame_locator("#slabench-llm-frame")
        k = lambda key: frame.locator(f'[data-k="{key}"]').first  # noqa: E731
        wait_for(lambda: number(k("window.output_tokens_per_s").inner_text()) > 0, 20, "output tokens/s on the page")
        wait_for(lambda: frame.locator("svg path").count() >= 8, 20, "lines in the charts")
        wait_for(lambda: int(frame.locator("body").get_attribute("data-seq")) >= 4, 20, "four points per chart")
        statuses = ("PASS", "CONDITIONAL", "FAIL")
        wait_for(lambda: k("sla.ttft_p95_s").inner_text() in statuses, 30, "the SLA check's provisional status")
        assert re.search(r"graded on the [1-9]\d* records so far", frame.locator("#sla").inner_text())
        assert "PROVISIONAL" in frame.locator("#sla").inner_text()
        page.screenshot(path=str(tmp_path / "webui-llm-tab.png"), full_page=True)
        if os.environ.get("SLABENCH_UPDATE_DOCS"):  # the docs' screenshot, refreshed on request (not on every run)
            shutil.copy(tmp_path / "webui-llm-tab.png", ROOT / "docs" / "webui-llm-tab.png")

        # Stop as a user does; the view freezes at the stop and holds the run as it ended.
        page.get_by_role("button", name="Stop").click()
        snap = wait_for(
            lambda: (
                (s := get_json(url + "/slabench/live.json"))["stopped"]
                and s["sla"]
                and s["total"]["records"] == len(read_records(records_path))
                and s
            ),
            40,
            "the run to stop and every record to arrive",
        )
        wait_for(lambda: frame.locator("body").get_attribute("data-now") == str(snap["now"]), 10, "the final snapshot")
        frame.locator("#figures-box summary").click()  # the full figures table (folded when framed)
        shown = {key: frame.locator(f'#figures [data-k="{key}"]').inner_text() for key in _figure_keys()}
        download = page.request.get(url + "/slabench/records.jsonl").text()
        browser.close()

    records = read_records(records_path)
    assert len(download.splitlines()) == len(records) == snap["total"]["records"]
    assert len({r.request_id for r in records}) == len(records)
    assert len({r.worker_id for r in records}) == 2  # merged from both worker processes
    now, started = snap["now"], snap["started"]

    def finished(r) -> float:
        return r.wall_sent + (r.end - r.sent)

    scopes = {"total": records, "window": [r for r in records if finished(r) > now - WINDOW_S]}
    spans = {"total": now - started, "window": min(WINDOW_S, now - started)}
    for scope, rs in scopes.items():
        ok = [r for r in rs if r.outcome is Outcome.OK]
        counted = [r for r in rs if r.outcome is not Outcome.DROPPED]
        assert int(shown[f"{scope}.records"]) == len(rs)
        assert int(shown[f"{scope}.ok"]) == len(ok)
        tokens = sum(r.completion_tokens for r in ok)
        assert int(shown[f"{scope}.output_tokens"]) == tokens
        assert number(shown[f"{scope}.output_tokens_per_s"]) == pytest.approx(tokens / spans[scope], abs=0.051)
        if counted:
            failed = sum(r.outcome in (Outcome.ERROR, Outcome.INCOMPLETE) for r in counted) / len(counted)
            assert number(shown[f"{scope}.failed_rate"]) == pytest.approx(100 * failed, abs=0.0051)
        expected = {
            "ttft": [metrics.ttft(r) for r in ok],
            "itl": [g for r in ok for g in metrics.itl(r)],
            "tpot": [v for r in ok if (v := metrics.tpot(r)) is not None],
            "e2e": [metrics.e2e(r) for r in ok],
        }
        for name, values in expected.items():
            if not values:
                continue
            for pct, want in zip(("p50", "p95", "p99"), pcts(values), strict=True):
                got = number(shown[f"{scope}.latency.{name}.{pct}"])
                assert got == pytest.approx(want * 1000, abs=0.051), (scope, name, pct)
    assert snap["total"]["errors"].get("http_5xx", {}).get("count", 0) == sum(
        r.error_category == "http_5xx" for r in records
    )


def _figure_keys() -> list[str]:
    keys = []
    for scope in ("window", "total"):
        keys += [f"{scope}.{k}" for k in ("records", "ok", "output_tokens", "output_tokens_per_s", "failed_rate")]
        keys += [f"{scope}.latency.{m}.{p}" for m in ("ttft", "itl", "tpot", "e2e") for p in ("p50", "p95", "p99")]
    return keys
