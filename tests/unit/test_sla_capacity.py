"""Capacity: the highest level that passes every check, and replicas + $/h for a target load, per instance type."""

import math

import pytest

from slabench.sla.capacity import capacity_report
from slabench.sla.estimates import Level, LevelEstimates
from slabench.sla.grade import grade
from tests.helpers.sla_helpers import contract, est, level, replica


def graded(*rows):
    """rows: (concurrency, verdict, throughput estimate)."""
    return [(LevelEstimates(Level(concurrency=c), {"throughput_rps": thr}), v) for c, v, thr in rows]


def test_replicas_and_cost_for_the_burst_rate_by_hand():
    rows = graded((4, "PASS", est(5.0, 0.5)), (8, "PASS", est(12.5, 1.0)), (16, "FAIL", est(14.0, 1.0)))
    r = capacity_report(rows, replica("g6e.xlarge"), 103.0)
    assert r.highest_passing == "concurrency 8"
    # conservative: the CI lower bound 11.5 req/s per replica; 103 / 11.5 = 8.96 → 9 replicas × $1.861 = $16.749/h
    assert r.per_replica_rps == pytest.approx(11.5)
    assert r.replicas_needed == 9 and r.usd_per_hour == pytest.approx(9 * 1.861)
    assert "CI lower bound" in r.rps_basis and "103 req/s ÷ 11.5" in r.arithmetic and "linearly" in r.arithmetic
    assert r.tested == [("concurrency 4", "PASS"), ("concurrency 8", "PASS"), ("concurrency 16", "FAIL")]


def test_per_replica_throughput_divides_by_the_replicas_that_served_it():
    r = capacity_report(graded((8, "PASS", est(20.0))), replica("g7e.2xlarge", 2, mig_profile="2g.48gb"), 103.0)
    # single run: 20 req/s over 2 slices = 10 per slice; 103 / 10 → 11 slices × $1.68156 = $18.49716/h
    assert r.per_replica_rps == 10.0 and r.rps_basis == "single run"
    assert r.replicas_needed == 11 and r.usd_per_hour == pytest.approx(11 * 3.36312 / 2)


def test_an_exact_fit_is_not_rounded_up():
    r = capacity_report(graded((8, "PASS", est(10.3))), replica("g5.xlarge"), 103.0)
    assert r.replicas_needed == 10


def test_no_passing_level_no_sizing():
    r = capacity_report(graded((4, "CONDITIONAL", est(5.0)), (8, "FAIL", est(9.0))), replica(), 103.0)
    assert r.highest_passing is None and r.replicas_needed is None
    assert "no tested level passes every check" in r.notes


def test_a_gap_below_the_highest_passing_level_is_pointed_out():
    rows = graded((4, "PASS", est(5.0)), (8, "FAIL", est(9.0)), (16, "PASS", est(15.0)))
    r = capacity_report(rows, replica(), None)
    assert r.highest_passing == "concurrency 16" and r.replicas_needed is None
    assert any("concurrency 8" in n for n in r.notes)
    assert r.per_replica_rps == 15.0


def test_scenarios_are_not_on_the_load_axis():
    rows = [(LevelEstimates(Level(scenario="burst"), {"throughput_rps": est(100.0)}), "PASS")]
    r = capacity_report(rows, replica(), 103.0)
    assert r.highest_passing is None and "no concurrency or rate levels" in r.notes[0]


def test_throughput_ci_reaching_zero_cannot_size():
    rows = graded((8, "PASS", est(1.0, 1.5)))
    r = capacity_report(rows, replica(), 103.0)
    assert r.replicas_needed is None and any("cannot size" in n for n in r.notes)


def test_grading_a_sweep_answers_capacity_per_instance_type():
    targets = {"ttft_p95_s": {"max": 2.0}, "throughput_rps": {"min": 1.0}}
    levels = [
        level(8, ttft_p95=est(0.8, 0.1), throughput_rps=est(6.0, 0.2)),
        level(16, ttft_p95=est(1.5, 0.2), throughput_rps=est(10.0, 0.4)),
        level(32, ttft_p95=est(4.0, 0.5), throughput_rps=est(11.0, 0.4)),
    ]
    c = contract(targets=targets, capacity={"target_load_rps": 103})
    answers = {}
    for itype in ("g5.xlarge", "g6e.xlarge"):
        v = grade(c, replica(itype), levels)
        answers[itype] = (v.capacity.highest_passing, v.capacity.replicas_needed, v.capacity.usd_per_hour)
    n = math.ceil(103 / 9.6)
    assert answers == {
        "g5.xlarge": ("concurrency 16", n, pytest.approx(n * 1.006)),
        "g6e.xlarge": ("concurrency 16", n, pytest.approx(n * 1.861)),
    }


def _sweep_with_a_weak_low_level(low: dict):
    """4 users measured as `low` (ttft_p95, output tok/s), 8 users passing everything; graded by one contract."""
    targets = {"ttft_p95_s": {"max": 2.0}, "output_tokens_per_s": {"min": 500}}
    ttft, tok = low
    levels = [
        level(4, ttft_p95=est(ttft, 0.1), output_tokens_per_s=est(tok, 10.0), throughput_rps=est(1.0, 0.1)),
        level(8, ttft_p95=est(0.5, 0.1), output_tokens_per_s=est(600.0, 10.0), throughput_rps=est(2.0, 0.1)),
    ]
    return grade(contract(load={"concurrency": 8}, targets=targets), replica(), levels).capacity


def test_an_under_used_lower_level_is_not_called_a_failure():
    c = _sweep_with_a_weak_low_level((0.3, 360.0))  # fast, but too few output tokens/s for the floor
    assert c.highest_passing == "concurrency 8"
    (note,) = c.notes
    assert "under-use the replica (concurrency 4: output_tokens_per_s FAIL)" in note
    assert "not a capacity limit" in note and "look at those runs" not in note


def test_a_latency_failure_below_the_passing_level_is_a_warning():
    c = _sweep_with_a_weak_low_level((3.0, 600.0))
    (note,) = c.notes
    assert "failed on latency, errors or quality (concurrency 4: ttft_p95_s FAIL)" in note
    assert "look at those runs before trusting this" in note


def test_a_lower_level_only_short_of_evidence_is_unproven():
    c = _sweep_with_a_weak_low_level((1.95, 600.0))  # CI upper 2.05 crosses 2.0: CONDITIONAL, not FAIL
    (note,) = c.notes
    assert "not proven (concurrency 4: ttft_p95_s CONDITIONAL)" in note and "nothing failed" in note
