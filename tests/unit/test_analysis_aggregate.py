"""aggregate_runs on fixed record sets, against answers worked out by hand in the comments."""

import json
import math

import pytest

from slabench.analysis.aggregate import aggregate, require_ci
from slabench.analysis.summary import SCHEMA_VERSION, SweepSummary, load_summary, summary_json
from slabench.core.errors import UserError
from slabench.core.record import ErrorCategory, Outcome
from slabench.core.schema import SWEEP
from tests.helpers.analysis_helpers import rec, write_run

T2 = 4.302652729749464  # t(0.975, 2): three repeats


def _ok(sent, ttft, **kw):
    # end exactly 1 s after sent: 3 chunks (ttft, +0.01, +0.01), then a tail up to sent + 1
    return rec(sent, ttft=ttft, gaps=(0.01, 0.01), tail=1.0 - ttft - 0.02, **kw)


@pytest.fixture
def tree(tmp_path):
    root = tmp_path / "sweep"
    # level 1, three repeats of 4 OK requests sent at 0,1,2,3 s, each ending 1 s later: window 0..4 s
    ttfts = {1: [0.1, 0.2, 0.3, 0.4], 2: [0.2, 0.3, 0.4, 0.5], 3: [0.3, 0.4, 0.5, 0.6]}
    for repeat, ts in ttfts.items():
        recs = [_ok(float(i), t) for i, t in enumerate(ts)]
        if repeat == 1:  # one server error inside the window
            recs.append(rec(1.5, ttft=None, outcome=Outcome.ERROR, category=ErrorCategory.HTTP_5XX))
        if repeat == 2:  # one request cancelled by the end of the run: ours, not an error
            recs.append(rec(3.5, ttft=None, outcome=Outcome.DROPPED, category=ErrorCategory.CANCELLED))
        write_run(root, 1, repeat, recs)
    # level 2: a single repeat
    write_run(root, 2, 1, [_ok(float(i), 0.2) for i in range(4)])
    # level 4 is planned but has no runs
    (root / "sweep.json").write_text(json.dumps({**SWEEP.stamp(), "sweep_id": "t", "levels": [1, 2, 4], "config": {}}))
    return root


def test_percentile_across_repeats_and_pooled(tree):
    s = aggregate(tree, slo={"ttft_s": 0.35})
    e = s.level(1).metrics["ttft_p50"]
    # per run p50 (type 7 on 4 values): 0.25, 0.35, 0.45 → mean 0.35, std 0.1
    assert [r.metrics["ttft_p50"] for r in s.level(1).runs] == pytest.approx([0.25, 0.35, 0.45])
    assert (e.mean, e.std, e.n) == (pytest.approx(0.35), pytest.approx(0.1), 3)
    ys = [math.log(v) for v in (0.25, 0.35, 0.45)]  # a latency: the interval on the log scale (modified Cox)
    y, s2 = sum(ys) / 3, sum((v - sum(ys) / 3) ** 2 for v in ys) / 2
    half = T2 * math.sqrt(s2 / 3 + s2 * s2 / 4)
    assert e.ci95_low == pytest.approx(math.exp(y + s2 / 2 - half))
    assert e.ci95_high == pytest.approx(math.exp(y + s2 / 2 + half))
    assert e.cv == pytest.approx(0.1 / 0.35)
    # pooled: the 12 values 0.1 0.2 0.2 0.3 0.3 0.3 0.4 0.4 0.4 0.5 0.5 0.6 → rank 5.5 → (0.3 + 0.4) / 2
    assert e.pooled == pytest.approx(0.35)
    assert e.samples == 12 and e.low_samples  # 12 requests < 30
    # p90 of run 1: rank 2.7 → 0.3 + 0.7 · 0.1
    assert s.level(1).runs[0].metrics["ttft_p90"] == pytest.approx(0.37)


def test_rates_errors_and_goodput(tree):
    s = aggregate(tree, slo={"ttft_s": 0.35})
    lv = s.level(1)
    m = lv.metrics
    # 4 OK requests over a 4 s window in every run
    assert m["throughput_rps"].mean == pytest.approx(1.0) and m["throughput_rps"].std == pytest.approx(0.0)
    assert m["output_tokens_per_s"].pooled == pytest.approx(12 * 3 / 12.0)  # 3 tokens each, 36 over 12 s
    assert m["total_tokens_per_s"].pooled == pytest.approx(12 * 103 / 12.0)
    # error rate: run 1 has 1 error out of 5 answered; runs 2 and 3 none (the dropped one is not counted)
    assert [r.metrics["error_rate"] for r in lv.runs] == pytest.approx([0.2, 0.0, 0.0])
    # a proportion: the pooled share (1 of 13) with a Clopper-Pearson interval; the runs (1/5, 0/4, 0/4) disagree
    # no more than binomial sampling explains (φ = χ² / 2 ≈ 0.87 → 1). For k = 1 the lower bound has a closed form:
    # the 2.5 % quantile of Beta(1, 13) = 1 − 0.975^(1/13).
    assert m["error_rate"].mean == m["error_rate"].pooled == pytest.approx(1 / 13)
    assert m["error_rate"].ci95_low == pytest.approx(1 - 0.975 ** (1 / 13))
    assert 1 / 13 < m["error_rate"].ci95_high < 1.0
    assert m["error_rate"].interval.startswith("clopper-pearson")
    assert lv.error_counts == {"http_5xx": 1, "cancelled": 1}
    # goodput (TTFT ≤ 0.35 s): 3, 2 and 1 requests over 4 s → 0.75, 0.5, 0.25 req/s
    assert [r.metrics["goodput_rps"] for r in lv.runs] == pytest.approx([0.75, 0.5, 0.25])
    assert m["goodput_rps"].mean == pytest.approx(0.5)
    assert m["goodput_ratio"].pooled == pytest.approx(6 / 13)
    assert lv.duration_s == pytest.approx(12.0) and lv.requests == 14


def test_one_repeat_has_no_interval_and_an_empty_level_has_no_values(tree):
    s = aggregate(tree)
    one = s.level(2).metrics["ttft_p95"]
    assert one.n == 1 and one.mean == pytest.approx(0.2)
    assert one.std is None and one.ci95_low is None and one.ci95_high is None and one.cv is None
    empty = s.level(4)
    assert empty.n_runs == 0 and empty.requests == 0 and empty.duration_s is None
    assert all(e.mean is None and e.n == 0 and e.low_samples for e in empty.metrics.values())
    assert "level 4: no counted requests" in s.warnings
    assert "goodput_rps" not in s.level(1).metrics  # no SLOs given: no goodput figures
    with pytest.raises(UserError, match=r"level\(s\) 2 users \(n=1\), 4 users \(n=0\)"):
        require_ci(s)


def test_warmup_from_the_manifest_or_the_caller(tmp_path):
    root = tmp_path / "w"
    # sent at 0..9 s; TTFT 1 s during the first 2 s (a cold server), then 0.1 s
    write_run(root, 1, 1, [_ok(float(i), 0.9 if i < 2 else 0.1) for i in range(10)], warmup_s=2.0)
    s = aggregate(root)
    run = s.level(1).runs[0]
    assert (run.excluded_warmup, run.counted, run.warmup_rule) == (2, 8, "time:2")
    assert s.level(1).metrics["ttft_p99"].mean == pytest.approx(0.1)
    s0 = aggregate(root, warmup_s=0.0)
    assert s0.level(1).metrics["ttft_p99"].mean > 0.8


def test_quality_per_task(tmp_path):
    root = tmp_path / "q"
    q = dict(quality_task="qa_full")
    recs = [
        _ok(
            0.0,
            0.1,
            parse_ok=True,
            items_expected=10,
            items_correct=8,
            autofail_tp=1,
            autofail_fn=0,
            pass_agree=True,
            **q,
        ),
        _ok(
            1.0,
            0.1,
            parse_ok=True,
            items_expected=10,
            items_correct=6,
            autofail_tp=0,
            autofail_fn=1,
            pass_agree=False,
            **q,
        ),
        _ok(2.0, 0.1, parse_ok=False, **q),
        _ok(3.0, 0.1, parse_ok=True, item_accuracy=0.5, quality_task="qa_terse"),
    ]
    write_run(root, 1, 1, recs)
    m = aggregate(root).level(1).metrics
    assert m["quality.qa_full.parse_rate"].mean == pytest.approx(2 / 3)
    assert m["quality.qa_full.item_accuracy"].mean == pytest.approx(14 / 20)  # micro-average over items
    assert m["quality.qa_full.autofail_recall"].mean == pytest.approx(1 / 2)
    assert m["quality.qa_full.pass_agreement"].mean == pytest.approx(1 / 2)
    assert m["quality.qa_terse.item_accuracy"].mean == pytest.approx(0.5)  # no item counts: mean item_accuracy
    assert m["quality.qa_terse.autofail_recall"].mean is None


def test_interrupted_runs_are_left_out_with_a_warning(tmp_path):
    root = tmp_path / "i"
    write_run(root, 1, 1, [_ok(0.0, 0.1)])
    write_run(root, 1, 2, [_ok(0.0, 0.5)], status="interrupted")
    s = aggregate(root)
    assert s.level(1).n_runs == 1
    assert any("1/2 left out" in w and "interrupted" in w for w in s.warnings)


def test_stepped_records_file(tmp_path):
    path = tmp_path / "records.jsonl"
    recs = [
        _ok(float(i), 0.1 * level, stage_level=level, stage_repeat=rep)
        for level in (1, 2)
        for rep in (1, 2)
        for i in range(3)
    ]
    path.write_text("".join(json.dumps(r.to_dict()) + "\n" for r in recs))
    s = aggregate(path)
    assert [lv.level for lv in s.levels] == [1, 2]
    assert s.level(2).metrics["ttft_p50"].mean == pytest.approx(0.2) and s.level(2).n_runs == 2


def test_bad_input(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match="no runs found"):
        aggregate(tmp_path / "empty")
    with pytest.raises(UserError, match="no such directory"):
        aggregate(tmp_path / "missing")
    flat = tmp_path / "flat.jsonl"
    flat.write_text(json.dumps(rec(0.0).to_dict()) + "\n")
    with pytest.raises(UserError, match="no stage_level"):
        aggregate(flat)
    bad = tmp_path / "bad"
    write_run(bad, 1, 1, [rec(0.0)])
    good = json.dumps(rec(0.0).to_dict())
    (bad / "1" / "1" / "records.jsonl").write_text(f"{good}\nnot json\n{good}\n")
    with pytest.raises(UserError, match=r"records.jsonl:2: not a valid record"):
        aggregate(bad)


def test_summary_json_round_trip_and_schema(tree):
    s = aggregate(tree, slo={"ttft_s": 0.35})
    text = summary_json(s)
    d = json.loads(text)
    assert d["schema_version"] == SCHEMA_VERSION and d["kind"] == "slabench.sweep_summary"
    est = d["levels"][0]["metrics"]["ttft_p95"]
    assert set(est) == {
        "mean",
        "std",
        "n",
        "ci95_low",
        "ci95_high",
        "cv",
        "pooled",
        "samples",
        "low_samples",
        "interval",
    }
    for key in ("ttft", "itl", "tpot", "e2e"):
        for stat in ("p50", "p90", "p95", "p99", "mean"):
            assert f"{key}_{stat}" in d["levels"][0]["metrics"]
    lv = d["levels"][0]
    assert {"level", "n_runs", "requests", "duration_s", "error_counts", "metrics", "runs"} <= set(lv)
    assert d["levels"][1]["metrics"]["ttft_p95"]["ci95_low"] is None  # n = 1: null, not a made-up interval
    (tree / "summary.json").write_text(text)
    back = load_summary(tree / "summary.json")
    assert isinstance(back, SweepSummary)
    assert back.level(1).metrics["ttft_p50"] == s.level(1).metrics["ttft_p50"]
    assert back.cliff == json.loads(text)["cliff"]
