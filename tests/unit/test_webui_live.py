"""The live aggregator against figures worked out by hand (type-7 percentiles, window membership by finish time)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slabench.analysis.columns import record_itl
from slabench.core import metrics
from slabench.core.record import ErrorCategory, Outcome, RequestRecord, StageUnit, stage_fields
from slabench.webui.live import LiveAggregator, Series, series_point

T0 = 1000.0  # wall clock of monotonic 0 in these records


def rec(
    n: int,
    sent: float,
    chunks: tuple[float, ...] = (),
    end: float | None = None,
    tokens: int | None = None,
    chunk_tokens: tuple[int, ...] | None = None,
    outcome: Outcome = Outcome.OK,
    category: ErrorCategory | None = None,
    scheduled: float | None = None,
    **kw,
) -> RequestRecord:
    return RequestRecord(
        run_id="r",
        request_id=f"q{n}",
        wall_sent=T0 + sent,
        sent=sent,
        first_token=chunks[0] if chunks else None,
        last_token=chunks[-1] if chunks else None,
        chunk_times=chunks,
        chunk_tokens=chunk_tokens,
        end=end,
        completion_tokens=tokens,
        outcome=outcome,
        error_category=category,
        scheduled=scheduled,
        **kw,
    )


# r1: TTFT .1, ITL [.1 .1 .1], TPOT .3/3 = .1, E2E .5, finishes at wall 1000.5
R1 = rec(1, 0.0, (0.1, 0.2, 0.3, 0.4), end=0.5, tokens=4)
# r2: TTFT .3, ITL [.2 .4], TPOT .6/2 = .3, E2E 1.0, finishes at 1002.0
R2 = rec(2, 1.0, (1.3, 1.5, 1.9), end=2.0, tokens=3)
# r3: the second chunk carries 2 tokens: ITL [.05 .05]; TPOT .1/2 = .05; TTFT .2; E2E .5; finishes at 1011.5
R3 = rec(3, 11.0, (11.2, 11.3), end=11.5, tokens=3, chunk_tokens=(1, 2))
R4 = rec(4, 12.0, end=12.1, outcome=Outcome.ERROR, category=ErrorCategory.HTTP_5XX)  # finishes at 1012.1
R5 = rec(5, 12.5, end=12.6, outcome=Outcome.DROPPED, category=ErrorCategory.CANCELLED)  # finishes at 1012.6


@pytest.fixture
def agg() -> LiveAggregator:
    a = LiveAggregator(window_s=10.0)
    a.reset(started=T0)
    for r in (R1, R2, R3, R4, R5):
        a.add(r, arrived=T0 + 20)  # arrival time is irrelevant when a record carries its times
    return a


def test_window_holds_what_finished_in_the_last_window_s(agg: LiveAggregator) -> None:
    w = agg.snapshot(now=T0 + 13)["window"]  # window (1003, 1013]: r3, r4, r5
    assert (w["records"], w["ok"], w["counted"], w["failed"]) == (3, 1, 2, 1)
    assert w["failed_rate"] == 0.5
    assert w["errors"] == {"http_5xx": {"count": 1, "rate": 0.5}}
    assert w["dropped"] == {"cancelled": 1}
    assert w["span_s"] == 10.0
    assert w["output_tokens"] == 3
    assert w["output_tokens_per_s"] == pytest.approx(0.3)
    assert w["requests_per_s"] == pytest.approx(0.1)
    lat = w["latency"]
    assert lat["ttft"] == pytest.approx({"p50": 0.2, "p95": 0.2, "p99": 0.2, "n": 1})
    assert lat["itl"] == pytest.approx({"p50": 0.05, "p95": 0.05, "p99": 0.05, "n": 2})
    assert lat["tpot"]["p50"] == pytest.approx(0.05)
    assert lat["e2e"]["p99"] == pytest.approx(0.5)
    assert lat["lateness"] == {"p50": None, "p95": None, "p99": None, "n": 0}


def test_since_start_percentiles_are_type_7(agg: LiveAggregator) -> None:
    t = agg.snapshot(now=T0 + 13)["total"]
    assert (t["records"], t["ok"], t["counted"], t["failed"]) == (5, 3, 4, 1)
    assert t["failed_rate"] == 0.25
    assert t["output_tokens"] == 10 and t["span_s"] == 13.0
    assert t["output_tokens_per_s"] == pytest.approx(10 / 13)
    lat = t["latency"]
    # TTFT [.1 .2 .3]: p95 at rank 1.9 → .2 + .9·.1
    assert [lat["ttft"][p] for p in ("p50", "p95", "p99")] == pytest.approx([0.2, 0.29, 0.298])
    # ITL, one value per token: [.05 .05 .1 .1 .1 .2 .4]: p95 at rank 5.7 → .2 + .7·.2; p99 at 5.94
    assert [lat["itl"][p] for p in ("p50", "p95", "p99")] == pytest.approx([0.1, 0.34, 0.388])
    assert lat["itl"]["n"] == 7 and lat["itl"]["exact"] is True
    # TPOT [.05 .1 .3]; E2E [.5 .5 1.0]
    assert [lat["tpot"][p] for p in ("p50", "p95")] == pytest.approx([0.1, 0.28])
    assert [lat["e2e"][p] for p in ("p50", "p95")] == pytest.approx([0.5, 0.95])


def test_early_in_a_run_rates_divide_by_the_time_elapsed() -> None:
    a = LiveAggregator(window_s=30.0)
    a.reset(started=T0)
    a.add(R1, arrived=T0 + 1)
    w = a.snapshot(now=T0 + 2)["window"]
    assert w["span_s"] == 2.0 and w["output_tokens_per_s"] == 2.0


def test_stop_freezes_the_clock(agg: LiveAggregator) -> None:
    agg.stop(T0 + 13)
    later = agg.snapshot(now=T0 + 500)
    assert later["now"] == T0 + 13 and later["window"]["records"] == 3 and later["elapsed_s"] == 13.0


def test_window_empties_as_time_passes(agg: LiveAggregator) -> None:
    w = agg.snapshot(now=T0 + 30)["window"]
    assert w["records"] == 0 and w["failed_rate"] is None and w["latency"]["ttft"]["p50"] is None
    assert agg.snapshot(now=T0 + 30)["total"]["records"] == 5  # since start keeps everything


def test_records_arriving_out_of_order_still_land_in_their_window() -> None:
    a = LiveAggregator(window_s=10.0)
    a.reset(started=T0)
    a.add(R3, arrived=T0 + 12)  # finished at 1011.5
    a.add(R1, arrived=T0 + 12)  # a late batch: finished at 1000.5, outside (1002, 1012]
    a.add(R2, arrived=T0 + 12)  # finished at 1002.0: on the open edge, outside
    assert a.snapshot(now=T0 + 12)["window"]["records"] == 1
    assert a.snapshot(now=T0 + 11.9)["window"]["records"] == 2  # (1001.9, 1011.9]: r2 and r3


def test_a_record_without_times_counts_when_it_arrived() -> None:
    a = LiveAggregator(window_s=10.0)
    a.reset(started=T0)
    lost = RequestRecord(
        run_id="r", request_id="x", outcome=Outcome.DROPPED, error_category=ErrorCategory.LOST_WITH_WORKER
    )
    a.add(lost, arrived=T0 + 5)
    assert a.snapshot(now=T0 + 14)["window"]["dropped"] == {"lost_with_worker": 1}
    assert a.snapshot(now=T0 + 15.5)["window"]["dropped"] == {}


def test_lateness_open_loop() -> None:
    a = LiveAggregator(window_s=10.0)
    a.reset(started=T0)
    for i, late in enumerate((0.0, 0.25, 0.5, 1.0)):
        a.add(rec(i, 2.0 + late, (2.5 + late,), end=3.0 + late, tokens=1, scheduled=2.0), arrived=T0 + 5)
    snap = a.snapshot(now=T0 + 5)
    assert snap["window"]["open_loop"] and snap["total"]["open_loop"]
    # [0 .25 .5 1]: p50 at rank 1.5 → .375; p95 at 2.85 → .5 + .85·.5
    assert snap["window"]["latency"]["lateness"]["p50"] == pytest.approx(0.375)
    assert snap["total"]["latency"]["lateness"]["p95"] == pytest.approx(0.925)
    assert snap["window"]["latency"]["tpot"]["n"] == 0  # one token: no TPOT


def test_stage_is_the_latest_sent_unless_the_runner_knows_better() -> None:
    a = LiveAggregator()
    a.reset(started=T0)
    a.add(rec(1, 5.0, (5.1,), end=5.2, **stage_fields(2.5, StageUnit.MILLI_RPS, 2, "hold")), arrived=T0 + 6)
    a.add(rec(2, 4.0, (4.1,), end=9.0, **stage_fields(4, StageUnit.USERS, 1, "hold")), arrived=T0 + 9)
    # the level as a rate, not the 2500 a record stores
    assert a.snapshot(now=T0 + 9)["stage"] == {"level": 2.5, "unit": "req/s", "repeat": 2, "phase": "hold"}
    shape_says = {"level": 16, "repeat": 0, "phase": "warmup"}
    assert a.snapshot(now=T0 + 9, stage=shape_says, in_flight=7)["stage"] == shape_says
    assert a.snapshot(now=T0 + 9, in_flight=7)["in_flight"] == 7


def test_no_data_is_none_not_zero() -> None:
    a = LiveAggregator()
    snap = a.snapshot(now=T0)
    assert snap["started"] is None and snap["stage"] is None
    assert snap["total"]["failed_rate"] is None and snap["total"]["output_tokens_per_s"] is None
    assert snap["total"]["latency"]["e2e"]["p99"] is None


def test_reset_starts_afresh(agg: LiveAggregator) -> None:
    agg.reset(started=T0 + 100)
    snap = agg.snapshot(now=T0 + 101)
    assert snap["total"]["records"] == 0 and snap["window"]["records"] == 0 and snap["stopped"] is None


def test_since_start_switches_to_the_sketch_past_the_cap() -> None:
    a = LiveAggregator(window_s=10.0, exact_cap=5)
    a.reset(started=T0)
    for r in (R1, R2, R3):
        a.add(r, arrived=T0)
    itl = a.snapshot(now=T0 + 13)["total"]["latency"]["itl"]
    assert itl["exact"] is False and itl["n"] == 7
    assert [itl[p] for p in ("p50", "p95", "p99")] == pytest.approx([0.1, 0.34, 0.388], rel=0.005)


def test_series_points_and_paging() -> None:
    a = LiveAggregator(window_s=10.0)
    a.reset(started=T0)
    a.add(R1, arrived=T0 + 1)
    s = Series(max_points=2)
    for now in (T0 + 1, T0 + 2, T0 + 3):
        s.append(series_point(a.snapshot(now=now, in_flight=3), {"waiting": 2.0, "running": 5.0, "kv_usage": 0.5}))
    assert s.last_seq == 3 and [p["seq"] for p in s.since(0)] == [2, 3]  # bounded: the oldest went
    last = s.since(2)[0]
    assert last["t"] == T0 + 3 and last["ttft_p50"] == pytest.approx(0.1) and last["in_flight"] == 3
    assert (last["queue_waiting"], last["queue_running"], last["kv_usage"]) == (2.0, 5.0, 0.5)
    assert last["output_tokens_per_s"] == pytest.approx(4 / 3)
    assert series_point(a.snapshot(now=T0 + 3))["kv_usage"] is None


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.floats(min_value=0, max_value=1e4), max_size=40).map(sorted),
    st.one_of(st.none(), st.lists(st.integers(min_value=-1, max_value=5), max_size=45)),
)
def test_the_live_views_itl_equals_metrics_itl(times: list[float], chunk_tokens: list[int] | None) -> None:
    r = RequestRecord(
        run_id="r",
        request_id="x",
        chunk_times=tuple(times),
        chunk_tokens=None if chunk_tokens is None else tuple(chunk_tokens),
    )
    assert record_itl(r).tolist() == metrics.itl(r)


def test_open_loop_ttft_is_the_graded_one_from_scheduled_and_from_sent_is_beside_it(tmp_path) -> None:
    """Under an open-loop shape the verdict counts TTFT from `scheduled`: the live view shows that one as TTFT, and
    the TTFT from `sent` under its own name, so the two screens never disagree on the same requests."""
    from slabench.analysis.aggregate import aggregate
    from tests.helpers.analysis_helpers import write_run

    a = LiveAggregator(window_s=100.0)
    a.reset(started=T0)
    # scheduled at 2.0, sent 0 / 0.25 / 0.5 / 1.0 s late, first token 0.5 s after sending
    records = [
        rec(i, 2.0 + late, (2.5 + late, 2.6 + late), end=2.7 + late, tokens=2, scheduled=2.0)
        for i, late in enumerate((0.0, 0.25, 0.5, 1.0))
    ]
    for r in records:
        a.add(r, arrived=T0 + 5)
    lat = a.snapshot(now=T0 + 5)["window"]["latency"]
    # from scheduled: [.5 .75 1.0 1.5] → p50 .875, p95 at rank 2.85 → 1.0 + .85 · .5
    assert lat["ttft"]["p50"] == pytest.approx(0.875) and lat["ttft"]["p95"] == pytest.approx(1.425)
    assert lat["ttft_sent"] == pytest.approx({"p50": 0.5, "p95": 0.5, "p99": 0.5, "n": 4})
    # the aggregator behind the verdict, on the same records, says the same TTFT
    write_run(tmp_path, 1, 1, records)
    assert aggregate(tmp_path).level(1).metrics["ttft_p95"].pooled == pytest.approx(lat["ttft"]["p95"])


def test_closed_loop_has_no_ttft_from_sent() -> None:
    a = LiveAggregator(window_s=100.0)
    a.reset(started=T0)
    a.add(R1, arrived=T0 + 1)
    lat = a.snapshot(now=T0 + 1)["window"]["latency"]
    assert lat["ttft"]["p50"] == pytest.approx(0.1) and lat["ttft_sent"]["n"] == 0


def test_a_reasoning_run_shows_time_to_first_answer_token_beside_ttft(tmp_path) -> None:
    """A reasoning model's second clock: TTFAT counts to the first answer token, from the same start as the graded
    TTFT, and says the same figure as the aggregator behind a `ttfat_*` SLA target."""
    from slabench.analysis.aggregate import aggregate
    from tests.helpers.analysis_helpers import write_run

    a = LiveAggregator(window_s=100.0)
    a.reset(started=T0)
    # first (reasoning) token .1 s after sending; the answer .4 / .6 / .8 / 1.0 s after; the first one 0.2 s late
    records = [
        rec(i, s, (s + 0.1, s + answer), end=s + answer + 0.1, tokens=2, first_answer_token=s + answer,
            reasoning_tokens=1, reasoning_source="server", scheduled=s - late)
        for i, (s, answer, late) in enumerate(((1.0, 0.4, 0.2), (2.0, 0.6, 0), (3.0, 0.8, 0), (4.0, 1.0, 0)))
    ]  # fmt: skip
    for r in records:
        a.add(r, arrived=T0 + 6)
    snap = a.snapshot(now=T0 + 6)
    assert snap["total"]["reasoning"] is True and snap["window"]["reasoning"] is True
    lat = snap["window"]["latency"]
    # from scheduled: [.6 .6 .8 1.0] → p50 .7, p95 at rank 2.85 → .8 + .85 · .2
    assert lat["ttfat"]["p50"] == pytest.approx(0.7) and lat["ttfat"]["p95"] == pytest.approx(0.97)
    assert lat["ttft"]["p50"] == pytest.approx(0.1)
    assert snap["total"]["latency"]["ttfat"]["n"] == 4
    assert series_point(snap)["ttfat_p95"] == pytest.approx(0.97)
    write_run(tmp_path, 1, 1, records)
    assert aggregate(tmp_path).level(1).metrics["ttft_answer_p95"].pooled == pytest.approx(lat["ttfat"]["p95"])


def test_a_run_without_reasoning_does_not_claim_it() -> None:
    a = LiveAggregator(window_s=100.0)
    a.reset(started=T0)
    # a plain model's record: its first answer token is its first token
    a.add(rec(1, 0.0, (0.1, 0.2), end=0.3, tokens=2, first_answer_token=0.1), arrived=T0 + 1)
    snap = a.snapshot(now=T0 + 1)
    assert snap["total"]["reasoning"] is False
    assert snap["window"]["latency"]["ttfat"]["p50"] == pytest.approx(0.1)  # equal to TTFT: nothing to show apart
