"""The LLM tab's table rows, the server gauges parser, and the SLA's provisional status."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from slabench.core.record import ErrorCategory, Outcome, RequestRecord
from slabench.webui import server_metrics, tab
from slabench.webui.live import LiveAggregator
from slabench.webui.sla_live import provisional_status

T0 = 1000.0


def ok(n: int, sent: float, ttft: float, e2e: float, tokens: int = 4, **kw) -> RequestRecord:
    chunks = tuple(sent + ttft + i * 0.01 for i in range(tokens))
    return RequestRecord(
        run_id="r",
        request_id=f"q{n}",
        wall_sent=T0 + sent,
        sent=sent,
        first_token=chunks[0],
        last_token=chunks[-1],
        chunk_times=chunks,
        end=sent + e2e,
        completion_tokens=tokens,
        prompt_tokens=10,
        **kw,
    )


def failed(n: int, sent: float, cat: ErrorCategory, outcome: Outcome = Outcome.ERROR) -> RequestRecord:
    return RequestRecord(
        run_id="r", request_id=f"f{n}", wall_sent=T0 + sent, sent=sent, end=sent + 0.1, outcome=outcome,
        error_category=cat,
    )  # fmt: skip


def snapshot(records: list[RequestRecord], now: float = T0 + 10, **kw) -> dict:
    a = LiveAggregator(window_s=5.0)
    a.reset(started=T0)
    for r in records:
        a.add(r, arrived=now)
    return a.snapshot(now=now, **kw)


def by_metric(rows: list[dict]) -> dict[str, tuple[str, str]]:
    return {r["metric"]: (r["window"], r["total"]) for r in rows}


def test_rows_show_units_in_names_and_one_number_per_cell() -> None:
    recs = [ok(1, 1.0, 0.2, 0.5), ok(2, 6.0, 0.3, 1.0), failed(3, 7.0, ErrorCategory.HTTP_5XX)]
    recs.append(failed(4, 8.0, ErrorCategory.LOST_WITH_WORKER, Outcome.DROPPED))
    stage = {"level": 2.5, "unit": "req/s", "repeat": 1, "phase": "hold"}
    rows = by_metric(tab.rows(snapshot(recs, in_flight=5, stage=stage)))
    assert rows["stage (level · repeat · phase)"] == ("level 2.5 req/s · repeat 1 · hold", "")
    assert rows["requests in flight"] == ("5", "")
    assert rows["requests finished"] == ("3", "4")  # window (1005, 1010]: q2, f3, f4
    assert rows["TTFT p50 (ms)"] == ("300.0", "250.0")
    assert rows["E2E p99 (ms)"] == ("1000.0", "995.0")  # [.5 1.0]: rank .99 → .5 + .99·.5
    assert rows["output tokens/s"] == ("0.8", "0.8")  # 4 tokens / 5 s; 8 / 10 s
    assert rows["failed % (error + incomplete)"] == ("50.00", "33.33")
    assert rows["failed % http_5xx"] == ("50.00", "33.33")
    assert rows["dropped lost_with_worker (count)"] == ("1", "1")
    assert "lateness p50 (ms)" not in rows  # closed loop
    assert "server queue: waiting" not in rows  # no reading asked for


def test_no_data_is_a_dash_and_server_and_sla_rows_appear_when_given() -> None:
    server = {"waiting": 3.0, "running": 8.0, "kv_usage": 0.4215}
    sla = {"checks": [{"check": "ttft_p95_s", "status": "PASS", "observed": "120 ms", "target": "≤ 2 s"}]}
    rows = by_metric(tab.rows(snapshot([]), server=server, sla=sla))
    assert rows["TTFT p95 (ms)"] == ("—", "—")
    assert rows["requests in flight"] == ("—", "")
    assert rows["server queue: waiting"] == ("3", "")
    assert rows["server KV cache usage %"] == ("42.15", "")
    assert rows["SLA (provisional) ttft_p95_s"] == ("PASS: 120 ms vs ≤ 2 s", "")


def test_open_loop_rows_show_lateness() -> None:
    r = ok(1, 2.25, 0.1, 0.5, scheduled=2.0)
    rows = by_metric(tab.rows(snapshot([r], now=T0 + 5)))
    assert rows["lateness p50 (ms)"] == ("250.0", "250.0")


def test_reasoning_rows_show_ttfat_beside_ttft() -> None:
    r = ok(1, 2.0, 0.1, 0.5, first_answer_token=2.35, reasoning_tokens=3, reasoning_source="chunks")
    rows = by_metric(tab.rows(snapshot([r], now=T0 + 5)))
    assert rows["TTFT p50 (ms)"] == ("100.0", "100.0")
    assert rows["TTFAT p50 (ms)"] == ("350.0", "350.0")
    metrics = [m for m in rows if m.startswith("TT")]
    assert metrics[:4] == ["TTFT p50 (ms)", "TTFT p95 (ms)", "TTFT p99 (ms)", "TTFAT p50 (ms)"]
    plain = by_metric(tab.rows(snapshot([ok(1, 2.0, 0.1, 0.5, first_answer_token=2.1)], now=T0 + 5)))
    assert "TTFAT p50 (ms)" not in plain  # no model reasoned: TTFAT would repeat TTFT


def scrape_line(t: float, waiting: float, kv: float) -> str:
    gauges = {"num_requests_running": 8.0, "num_requests_waiting": waiting, "kv_cache_usage_perc": kv}
    row = {"schema_version": 1, "run_id": "r", "t": t, "gauges": gauges, "counters": {}, "histograms": {}}
    return json.dumps(row) + "\n"


def test_server_reading_is_the_pollers_last_whole_line(tmp_path: Path) -> None:
    path = tmp_path / "server_metrics.jsonl"
    assert server_metrics.last_line(path) is None
    assert server_metrics.reading(None, "x") == {"source": "x", "at": None, "error": "no scrape yet"}
    path.write_text(scrape_line(1.0, 2.0, 0.1) + scrape_line(2.0, 5.0, 0.25) + '{"t": 3.0, "gau')  # mid-write
    got = server_metrics.reading(server_metrics.last_line(path), str(path))
    assert got == {"source": str(path), "at": 2.0, "error": None, "waiting": 5.0, "running": 8.0, "kv_usage": 0.25}


def test_server_reading_from_a_long_file_reads_only_its_tail(tmp_path: Path) -> None:
    path = tmp_path / "server_metrics.jsonl"
    path.write_text("".join(scrape_line(float(i), float(i), 0.5) for i in range(5000)))
    assert path.stat().st_size > server_metrics.TAIL_BYTES
    assert server_metrics.reading(server_metrics.last_line(path), "f")["waiting"] == 4999.0


CONTRACT = """\
schema_version: 1
name: live-test
load: {concurrency: 4}
deployment: {instance_type: g6e.xlarge, replicas: 1, gpus_per_replica: 1}
targets:
  ttft_p95_s: {max: 0.25}
  error_rate: {max: 0.5}
"""


def test_provisional_sla_status_grades_the_records_so_far(tmp_path: Path) -> None:
    from slabench.sla.contract import load_contract
    from slabench.sla.estimates import Level

    path = tmp_path / "sla.yaml"
    path.write_text(CONTRACT)
    loaded = load_contract(path)
    recs = [ok(i, float(i), 0.1 + 0.01 * i, 0.5) for i in range(40)]  # TTFT .10 … .49: p95 ≈ .47 > .25
    got = provisional_status(loaded, recs, Level(concurrency=4))
    assert got["provisional"] is True and got["records"] == 40
    checks = {c["check"]: c for c in got["checks"]}
    assert set(checks) == {"ttft_p95_s", "error_rate"}
    assert checks["ttft_p95_s"]["status"] == "FAIL" and checks["ttft_p95_s"]["target"] == "≤ 250 ms"
    assert checks["error_rate"]["status"] == "PASS"
    assert got["verdict"] == "FAIL"
    fast = [ok(i, float(i), 0.1, 0.5) for i in range(40)]
    assert provisional_status(loaded, fast, Level(concurrency=4))["verdict"] == "PASS"


@pytest.mark.parametrize("stage", [None, {}, {"phase": "warmup"}])
def test_stage_text(stage: dict | None) -> None:
    assert tab.stage_text(stage) == ("warmup" if stage else "—")


def test_provisional_sla_status_grades_time_to_first_answer_token(tmp_path: Path) -> None:
    """A reasoning model's contract: the live panel grades `ttfat_*` on the first answer token, not the first token."""
    from slabench.sla.contract import load_contract
    from slabench.sla.estimates import Level

    path = tmp_path / "sla.yaml"
    path.write_text(CONTRACT.replace("ttft_p95_s: {max: 0.25}", "ttfat_p95_s: {max: 0.25}"))
    loaded = load_contract(path)

    def reasoning(i: int, answer_after: float) -> RequestRecord:
        return ok(i, float(i), 0.1, 1.0, first_answer_token=i + answer_after, reasoning_tokens=8,
                  reasoning_source="server")  # fmt: skip

    slow = provisional_status(loaded, [reasoning(i, 0.6) for i in range(40)], Level(concurrency=4))
    checks = {c["check"]: c for c in slow["checks"]}
    assert checks["ttfat_p95_s"]["status"] == "FAIL" and checks["ttfat_p95_s"]["observed"] == "600 ms"
    fast = provisional_status(loaded, [reasoning(i, 0.15) for i in range(40)], Level(concurrency=4))
    assert {c["check"]: c["status"] for c in fast["checks"]}["ttfat_p95_s"] == "PASS"
