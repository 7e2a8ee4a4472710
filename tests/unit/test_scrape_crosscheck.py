"""Client vs server cross-checks (slabench.evidence.crosscheck): bracketing, histogram deltas, bucket quantiles,
verdicts."""

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slabench.core.record import Outcome, RequestRecord
from slabench.evidence import crosscheck as cc

BOUNDS = ("0.05", "0.1", "0.25", "0.5", "1.0", "2.5", "+Inf")


def hist(values):
    """A cumulative Prometheus-style histogram of `values` with BOUNDS."""
    buckets = {b: float(sum(v <= (math.inf if b == "+Inf" else float(b)) for v in values)) for b in BOUNDS}
    return {"count": float(len(values)), "sum": float(sum(values)), "buckets": buckets}


def add(h1, h2):
    return {
        "count": h1["count"] + h2["count"],
        "sum": h1["sum"] + h2["sum"],
        "buckets": {b: h1["buckets"][b] + h2["buckets"][b] for b in BOUNDS},
    }


def scrape(t, prompt, gen, success, ttft, e2e):
    return {
        "t": t,
        "t_recv": t + 0.01,
        "counters": {"prompt_tokens_total": prompt, "generation_tokens_total": gen, "request_success_total": success},
        "histograms": {"time_to_first_token_seconds": ttft, "e2e_request_latency_seconds": e2e},
    }


def rec(i, wall, ttft, e2e, prompt=100, completion=20, outcome=Outcome.OK, **kw):
    return RequestRecord(
        run_id="r",
        request_id=f"q{i}",
        wall_sent=wall,
        sent=50.0 + wall,
        first_token=50.0 + wall + ttft,
        last_token=50.0 + wall + e2e - 0.001,
        end=50.0 + wall + e2e,
        prompt_tokens=prompt,
        completion_tokens=completion,
        token_source="server",
        outcome=outcome,
        **kw,
    )


def run_scrapes(server_ttft, server_e2e, prompt, gen, earlier=(0.2,)):
    """Baseline at t=99 with earlier traffic, closing scrape at t=110 with this run's on top."""
    base_t, base_e = hist(list(earlier)), hist([x * 2 for x in earlier])
    first = scrape(99.0, 500.0, 80.0, float(len(earlier)), base_t, base_e)
    last = scrape(
        110.0,
        500.0 + prompt,
        80.0 + gen,
        float(len(earlier) + len(server_ttft)),
        add(base_t, hist(server_ttft)),
        add(base_e, hist(server_e2e)),
    )
    return [first, last]


def test_agreeing_run_client_slightly_slower_than_server():
    server_ttft, server_e2e = [0.04, 0.08, 0.3], [0.4, 0.6, 1.2]
    pairs = enumerate(zip(server_ttft, server_e2e, strict=True))
    records = [rec(i, 100.0 + i, t + 0.01, e + 0.02) for i, (t, e) in pairs]
    c = cc.crosscheck(records, run_scrapes(server_ttft, server_e2e, prompt=300, gen=60))
    assert c["window"]["clean"] is True
    assert c["requests"] == {"client": 3, "client_ok": 3, "client_without_server_usage": 0, "server_success": 3.0}
    assert c["prompt_tokens"] == {"client": 300, "server": 300.0, "equal": True}
    assert c["generation_tokens"] == {"client": 60, "server": 60.0, "equal": True}
    assert c["ttft"]["server_mean"] == pytest.approx(0.14)
    assert c["ttft"]["client_minus_server"] == pytest.approx(0.01)
    assert c["e2e"]["client_minus_server"] == pytest.approx(0.02)
    for key in ("ttft", "e2e"):
        assert c[key]["client_ge_server"] and c[key]["within_tolerance"] and c[key]["dominates"]
    assert c["agree"] is True


def test_a_harness_that_reports_faster_than_the_server_is_caught():
    server_ttft, server_e2e = [0.3, 0.3], [1.0, 1.0]
    records = [rec(i, 100.0 + i, 0.2, 0.9) for i in range(2)]  # impossible: client below server
    c = cc.crosscheck(records, run_scrapes(server_ttft, server_e2e, prompt=200, gen=40))
    assert c["ttft"]["client_ge_server"] is False
    assert c["ttft"]["dominates"] is False
    assert c["agree"] is False


def test_token_mismatch_and_far_latencies_are_flagged():
    records = [rec(0, 100.0, 2.0, 3.0, prompt=90)]
    c = cc.crosscheck(records, run_scrapes([0.1], [1.0], prompt=100, gen=20), tolerance=cc.Tolerance(0.1, 0.1))
    assert c["prompt_tokens"]["equal"] is False
    assert c["generation_tokens"]["equal"] is True
    assert c["ttft"]["within_tolerance"] is False
    assert c["agree"] is False


def test_records_without_server_usage_are_counted_not_summed():
    records = [rec(0, 100.0, 0.1, 0.5), rec(1, 101.0, 0.1, 0.5).replace(token_source="estimate")]
    c = cc.crosscheck(records, run_scrapes([0.05, 0.05], [0.4, 0.4], prompt=100, gen=20))
    assert c["requests"]["client_without_server_usage"] == 1
    assert c["prompt_tokens"]["client"] == 100


def test_errors_do_not_enter_latency_comparison():
    records = [rec(0, 100.0, 0.1, 0.5), rec(1, 101.0, 0.1, 0.5, outcome=Outcome.ERROR).replace(token_source=None)]
    c = cc.crosscheck(records, run_scrapes([0.05], [0.4], prompt=100, gen=20))
    assert c["ttft"]["client_n"] == 1 and c["ttft"]["server_n"] == 1
    assert c["ttft"]["dominates"] is True


def test_unequal_request_counts_make_no_dominance_claim():
    records = [rec(0, 100.0, 0.1, 0.5)]
    c = cc.crosscheck(records, run_scrapes([0.05, 0.07], [0.4, 0.4], prompt=200, gen=40))
    assert c["ttft"]["dominates"] is None
    assert c["prompt_tokens"]["equal"] is False


def test_window_not_bracketed_falls_back_and_says_so():
    scrapes = run_scrapes([0.05], [0.4], prompt=100, gen=20)
    late = [rec(0, 112.0, 0.1, 0.5)]  # sent after the closing scrape
    c = cc.crosscheck(late, scrapes, window=(99.5, 113.0))
    assert c["window"]["clean"] is False
    assert cc.crosscheck(late, scrapes[:1]) is None
    assert cc.crosscheck([], scrapes) is None


def test_bracket_picks_the_tightest_scrapes_around_the_window():
    scrapes = [{"t": float(t), "t_recv": t + 0.01} for t in range(10)]
    first, last, clean = cc.bracket(scrapes, 3.5, 6.2)
    assert (first["t"], last["t"], clean) == (3.0, 7.0, True)


def test_counter_reset_between_scrapes_counts_from_zero():
    a = {"counters": {"prompt_tokens_total": 1000.0}, "histograms": {"e2e": hist([1.0] * 5)}}
    b = {"counters": {"prompt_tokens_total": 40.0}, "histograms": {"e2e": hist([0.2])}}
    assert cc.counter_delta(a, b, "prompt_tokens_total") == 40.0
    assert cc.histogram_delta(a, b, "e2e")["count"] == 1.0
    assert cc.counter_delta(a, b, "missing") is None


@pytest.mark.parametrize(
    ("q", "expected"),
    [(0.0, 0.0), (0.25, 0.05), (0.5, 0.1), (0.75, 0.25), (1.0, 2.5)],
)
def test_bucket_quantile_interpolates_inside_buckets(q, expected):
    # 1 value in (0, 0.05], 1 in (0.05, 0.1], 1 in (0.1, 0.25], 1 in (1.0, 2.5]
    h = hist([0.04, 0.07, 0.2, 2.0])
    assert cc.bucket_quantile(h["buckets"], q) == pytest.approx(expected)


def test_bucket_quantile_edges():
    assert cc.bucket_quantile(hist([])["buckets"], 0.5) is None
    assert cc.bucket_quantile({}, 0.5) is None
    assert cc.bucket_quantile(hist([9.0, 9.0])["buckets"], 0.5) == 2.5  # in +Inf: the highest finite bound


def test_by_stage_checks_each_level_and_repeat():
    recs = [rec(i, 100.0 + i, 0.1, 0.5, stage_level=lvl, stage_repeat=0) for i, lvl in enumerate([1, 1, 4, 4])]
    scrapes = [scrape(float(t), 0.0, 0.0, 0.0, hist([]), hist([])) for t in range(98, 112)]
    stages = cc.by_stage(recs, scrapes)
    assert [(s["stage_level"], s["level_unit"], s["stage_repeat"]) for s in stages] == [
        (1, "users", 0),
        (4, "users", 0),
    ]
    assert all(s["requests"]["client"] == 2 for s in stages)


def test_by_stage_names_a_rate_shapes_levels_in_requests_per_second():
    recs = [rec(i, 100.0 + i, 0.1, 0.5, stage_level=lvl, stage_unit="milli_rps", stage_repeat=0)
            for i, lvl in enumerate([2500, 2500, 5000])]  # fmt: skip
    scrapes = [scrape(float(t), 0.0, 0.0, 0.0, hist([]), hist([])) for t in range(98, 112)]
    stages = cc.by_stage(recs, scrapes)
    assert [(s["stage_level"], s["level_unit"]) for s in stages] == [(2.5, "req/s"), (5.0, "req/s")]


@given(
    st.lists(
        st.tuples(st.floats(0.001, 3.0), st.floats(0.0, 0.5)),
        min_size=1,
        max_size=40,
    )
)
def test_client_at_or_above_server_per_request_always_dominates(pairs):
    server = [s for s, _ in pairs]
    client = [s + extra for s, extra in pairs]
    h = hist(server)
    assert cc.dominates(client, h["buckets"])
    assert sum(client) / len(client) >= h["sum"] / h["count"] - 1e-12
