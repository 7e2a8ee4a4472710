"""The grader's inputs: the adapter from the aggregator's summary.json shape, and single-run estimates computed
straight from records (hand-computed answers)."""

import pytest

from slabench.analysis.summary import SCHEMA_VERSION, parse_summary
from slabench.core.errors import UserError
from slabench.core.record import Outcome
from slabench.sla.estimates import Estimate, Level, levels_from_summary
from slabench.sla.single_run import levels_from_records
from tests.helpers.sla_helpers import record


def e(mean, n=3, half=0.1, samples=200):
    return {"mean": mean, "std": half, "n": n, "ci95_low": mean - half, "ci95_high": mean + half, "cv": 0.1,
            "pooled": mean, "samples": samples, "low_samples": False, "interval": "student-t across runs"}  # fmt: skip


def summary(levels, **top):
    lv = {"n_runs": 3, "requests": 600, "duration_s": 90.0, "error_counts": {}, "runs": []}
    doc = {"kind": "slabench.sweep_summary", "schema_version": SCHEMA_VERSION, "source": "s", "cliff": {}}
    return {**doc, "levels": [{**lv, **x} if isinstance(x, dict) else x for x in levels], **top}


def test_the_aggregator_summary_shape():
    doc = summary(
        [
            {"level": 8, "error_counts": {"http_5xx": 2},
             "metrics": {"ttft_p95": e(1.2), "quality.verbose.item_accuracy": e(0.9)}},
            {"level": 16, "duration_s": None, "metrics": {"ttft_p95": e(2.0)}},
        ]
    )  # fmt: skip
    levels = levels_from_summary(parse_summary(doc, "s.json"))
    assert [lv.level for lv in levels] == [Level(concurrency=8), Level(concurrency=16)]
    first = levels[0]
    assert first.metrics["ttft_p95"] == Estimate(
        1.2, 0.1, 3, 1.2 - 0.1, 1.2 + 0.1, cv=0.1, pooled=1.2, samples=200, interval="student-t across runs"
    )
    assert first.get("quality.verbose.item_accuracy").mean == 0.9
    assert first.quality_tasks() == {"verbose"}
    assert first.duration_s == 90.0 and first.error_counts == {"http_5xx": 2}
    assert levels[1].duration_s is None


def test_a_newer_minor_version_is_read_and_its_new_fields_ignored():
    doc = summary([{"level": 4, "metrics": {"ttft_p95": {**e(1.0), "new_field": 1}}, "added": "x"}], schema_minor=7)
    (lv,) = levels_from_summary(parse_summary(doc, "s.json"))
    assert lv.get("ttft_p95").mean == 1.0


@pytest.mark.parametrize(
    ("doc", "says"),
    [
        ({"nothing": 1}, "no kind; a slabench sweep summary (summary.json) says kind: slabench.sweep_summary"),
        (summary([], kind="slabench.verdict"), "kind 'slabench.verdict' is not a slabench sweep summary"),
        (summary([], schema_version=1), "schema_version 1, but this slabench reads version 2 only"),
        (summary([], schema_version=3), "schema_version 3"),
        (summary([{"level": 1, "metrics": {"ttft_p95": {"mean": "fast"}}}]), "levels.0.metrics.ttft_p95.mean"),
        (summary([{"metrics": {}}]), "levels.0.level"),
        (summary([3]), "levels.0"),
    ],
)
def test_a_summary_of_another_kind_version_or_shape_is_refused_with_one_line(doc, says):
    with pytest.raises(UserError) as err:
        parse_summary(doc, "s.json")
    assert says in str(err.value) and str(err.value).startswith("s.json") and "\n" not in str(err.value)


def test_a_summary_without_levels_has_nothing_to_grade():
    with pytest.raises(UserError, match="no levels"):
        levels_from_summary(parse_summary(summary([]), "s.json"))


# -- single runs from records ------------------------------------------------------------------------------------
def run_records():
    recs = [record(i, sent=float(i), ttft=0.1 * (i + 1)) for i in range(5)]  # TTFT 0.1 … 0.5 s, 4 tokens each
    recs.append(record(5, sent=5.0, ttft=0.1, gaps=(), outcome=Outcome.ERROR))  # ends at 5.1 s
    recs.append(record(6, sent=2.0, ttft=0.1, gaps=(), outcome=Outcome.DROPPED))  # ours: not in the rates
    recs.append(record(7, sent=-10.0, ttft=9.0, stage_phase="warmup"))  # warm-up: left out entirely
    return recs


def test_single_run_latencies_rates_and_window_by_hand():
    (lv,) = levels_from_records(run_records())
    m = lv.metrics
    assert lv.level.unstaged
    # exact type-7 percentiles of 0.1 … 0.5: rank (n − 1)·p
    assert m["ttft_p50"].mean == pytest.approx(0.3)
    assert m["ttft_p90"].mean == pytest.approx(0.46)
    assert m["ttft_p95"].mean == pytest.approx(0.48)
    assert m["ttft_p99"].mean == pytest.approx(0.496)
    assert m["ttft_mean"].mean == pytest.approx(0.3)
    assert m["e2e_p50"].mean == pytest.approx(0.33)
    assert m["itl_p99"].mean == pytest.approx(0.01) and m["itl_p99"].samples == 5
    assert m["tpot_mean"].mean == pytest.approx(0.01)  # 0.03 s over 4 − 1 tokens
    # one run: no interval for a latency; a proportion's comes from its counts (binomial, inside [0, 1])
    assert all(x.n == 1 and x.ci95_low is None for k, x in m.items() if k.split("_")[0] in ("ttft", "e2e", "itl"))
    assert 0.0 <= m["error_rate"].ci95_low < m["error_rate"].mean < m["error_rate"].ci95_high <= 1.0
    assert m["ttft_p95"].low_samples and m["ttft_p95"].samples == 5
    # 1 error of 6 answered requests (the dropped one is ours); the window runs from the first send (0 s) to the
    # last end (5.1 s) of the measured records
    assert m["error_rate"].mean == pytest.approx(1 / 6) and m["incomplete_rate"].mean == 0.0
    assert lv.duration_s == pytest.approx(5.1)
    assert m["throughput_rps"].mean == pytest.approx(5 / 5.1)
    assert m["output_tokens_per_s"].mean == pytest.approx(20 / 5.1)
    assert m["total_tokens_per_s"].mean == pytest.approx((20 + 500) / 5.1)
    assert lv.error_counts == {"http_5xx": 1, "cancelled": 1}  # the dropped one is counted here, not in the rates


def test_single_run_quality_by_hand():
    q = dict(quality_task="verbose", parse_ok=True)
    recs = [
        record(0, items_expected=10, items_correct=9, autofail_tp=1, autofail_fn=1, pass_agree=True, **q),
        record(1, sent=1.0, items_expected=10, items_correct=7, autofail_tp=1, autofail_fn=0, pass_agree=False, **q),
        record(2, sent=2.0, quality_task="verbose", parse_ok=False, items_expected=10, items_correct=0),
    ]
    (lv,) = levels_from_records(recs)
    m = lv.metrics
    assert m["quality.verbose.item_accuracy"].mean == pytest.approx(16 / 30)
    assert m["quality.verbose.autofail_recall"].mean == pytest.approx(2 / 3)
    assert m["quality.verbose.pass_agreement"].mean == pytest.approx(0.5)
    assert m["quality.verbose.parse_rate"].mean == pytest.approx(2 / 3)
    assert lv.quality_tasks() == {"verbose"}


def test_records_group_by_stage_and_repeats_are_pooled_with_a_note():
    recs = [record(i, sent=float(i), stage_level=4, stage_repeat=i % 2) for i in range(4)]
    recs += [record(10 + i, sent=float(i), stage_level=8, stage_repeat=0) for i in range(3)]
    four, eight = levels_from_records(recs)
    assert (four.level, eight.level) == (Level(concurrency=4), Level(concurrency=8))  # no unit: closed loop
    assert four.metrics["throughput_rps"].samples == 4 and eight.metrics["throughput_rps"].samples == 3
    assert any("2 repeats in one run were pooled" in n for n in four.notes)
    assert not eight.notes


def test_an_unstaged_run_can_be_told_its_level():
    (lv,) = levels_from_records(run_records(), Level(concurrency=6))
    assert lv.level == Level(concurrency=6)


def test_without_wall_clock_anchors_the_monotonic_window_is_used():
    recs = [record(i, sent=float(i), wall=None) for i in range(3)]
    (lv,) = levels_from_records(recs)
    assert lv.duration_s == pytest.approx(2.0 + 0.1 + 0.03)


def test_a_run_of_errors_has_no_latency_and_no_throughput_data():
    (lv,) = levels_from_records([record(i, sent=float(i), outcome=Outcome.ERROR, gaps=()) for i in range(3)])
    assert lv.get("ttft_p95") is None
    assert lv.get("error_rate").mean == 1.0
    assert lv.get("throughput_rps").mean == 0.0
    assert lv.get("output_tokens_per_s") is None
