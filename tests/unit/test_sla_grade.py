"""The grader, table-driven: every check type × PASS / CONDITIONAL / FAIL, intervals that cross the target, the
conditional band, single-run wording, hard vs soft, and missing metrics."""

import json
import math

import pytest

from slabench.sla.contract import CheckSpec, CostCeiling, LatencyTarget, QualityFloor, RateCeiling, ThroughputFloor
from slabench.sla.estimates import Estimate, Level, LevelEstimates
from slabench.sla.grade import Status, evaluate, grade, worst
from slabench.sla.grade_run import exit_code
from tests.helpers.sla_helpers import contract, est, level, replica

P, C, F = Status.PASS, Status.CONDITIONAL, Status.FAIL

# One row per check type: its target model and unit, the target, the band, then an estimate for each outcome:
# the CI bound meets the target (PASS), the mean meets it but the CI crosses (CONDITIONAL), the mean misses it by
# less than the band (CONDITIONAL), and the mean misses it by more (FAIL).
CHECK_TYPES = {
    "latency (ttft_p95, lower is better)": (
        LatencyTarget, "s", 2.0, 0.5,
        est(1.7, 0.2), est(1.9, 0.2), est(2.3, 0.1), est(2.7, 0.1),
    ),
    "error rate (ceiling)": (
        RateCeiling, "share", 0.01, 0.005,
        est(0.004, 0.003), est(0.008, 0.004), est(0.013, 0.001), est(0.05, 0.01),
    ),
    "throughput (floor, higher is better)": (
        ThroughputFloor, "req/s", 10.0, 1.0,
        est(11.0, 0.5), est(10.5, 1.0), est(9.5, 0.2), est(8.0, 0.5),
    ),
    "cost (ceiling, USD)": (
        CostCeiling, "USD", 1.0, 0.2,
        est(0.8, 0.1), est(0.95, 0.1), est(1.1, 0.05), est(1.5, 0.1),
    ),
    "quality floor (share)": (
        QualityFloor, "share", 0.85, 0.03,
        est(0.9, 0.02), est(0.86, 0.03), est(0.83, 0.01), est(0.7, 0.02),
    ),
}  # fmt: skip


def spec(model, unit, target, band=0.0, severity="hard", name="x"):
    key = "max" if model.direction == "max" else "min"
    return CheckSpec(name, name, unit, model(**{key: target, "conditional_band": band, "severity": severity}), ())


CASES = []
for kind, (model, unit, target, band, e_pass, e_cross, e_band, e_fail) in CHECK_TYPES.items():
    CASES += [
        pytest.param(model, unit, target, band, e_pass, P, "95% CI", id=f"{kind}: CI bound meets → PASS"),
        pytest.param(model, unit, target, band, e_cross, C, "crosses it", id=f"{kind}: CI crosses → CONDITIONAL"),
        pytest.param(model, unit, target, band, e_band, C, "conditional band", id=f"{kind}: in band → CONDITIONAL"),
        pytest.param(model, unit, target, band, e_fail, F, "", id=f"{kind}: beyond band → FAIL"),
        pytest.param(model, unit, target, 0.0, e_band, F, "", id=f"{kind}: no band → FAIL"),
    ]


@pytest.mark.parametrize(("model", "unit", "target", "band", "estimate", "expected", "says"), CASES)
def test_every_check_type_passes_conditions_and_fails(model, unit, target, band, estimate, expected, says):
    r = evaluate(spec(model, unit, target, band), estimate, "concurrency 16")
    assert r.status is expected, r.reason
    assert says in r.reason
    assert r.n == 3 and r.samples == 500 and not r.single_run
    assert r.observed == estimate.mean and r.target == target
    # the bound compared is the pessimistic end of the interval
    assert r.bound == (estimate.ci95_high if model.direction == "max" else estimate.ci95_low)


@pytest.mark.parametrize(
    ("model", "unit", "target", "band", "value", "expected"),
    [
        (LatencyTarget, "s", 2.0, 0.5, 1.9, P),
        (LatencyTarget, "s", 2.0, 0.5, 2.0, P),  # meeting the target exactly is meeting it
        (LatencyTarget, "s", 2.0, 0.5, 2.4, C),
        (LatencyTarget, "s", 2.0, 0.5, 2.6, F),
        (ThroughputFloor, "req/s", 10.0, 1.0, 10.0, P),
        (ThroughputFloor, "req/s", 10.0, 1.0, 9.2, C),
        (ThroughputFloor, "req/s", 10.0, 1.0, 8.9, F),
        (QualityFloor, "share", 0.85, 0.0, 0.84, F),
    ],
)
def test_a_single_run_is_graded_on_its_value_and_says_so(model, unit, target, band, value, expected):
    r = evaluate(spec(model, unit, target, band), est(value), "concurrency 16")
    assert r.status is expected, r.reason
    assert r.single_run and r.n == 1 and r.bound == value
    assert "single run" in r.reason and "no confidence interval" in r.reason


def test_an_interval_that_reaches_the_target_does_not_rescue_a_mean_that_misses_it():
    r = evaluate(spec(LatencyTarget, "s", 2.0), est(2.1, 0.3), "c")
    assert r.status is F
    assert "interval reaches the target" in r.reason


@pytest.mark.parametrize("estimate", [est(2.7, 0.1), est(2.7)], ids=["repeats", "single run"])
def test_a_soft_check_is_at_worst_conditional(estimate):
    hard = evaluate(spec(LatencyTarget, "s", 2.0, severity="hard"), estimate, "c")
    soft = evaluate(spec(LatencyTarget, "s", 2.0, severity="soft"), estimate, "c")
    assert hard.status is F
    assert soft.status is C and "soft check" in soft.reason


@pytest.mark.parametrize("missing", [None, Estimate(None, n=3, samples=0)], ids=["absent", "mean null"])
@pytest.mark.parametrize(("severity", "expected"), [("hard", F), ("soft", C)])
def test_a_missing_metric_is_no_data_and_never_passes(missing, severity, expected):
    r = evaluate(spec(LatencyTarget, "s", 2.0, severity=severity, name="ttft_p95_s"), missing, "concurrency 16")
    assert r.status is expected
    assert r.no_data and r.observed is None and r.bound is None
    assert r.reason.startswith("no data:") and "concurrency 16" in r.reason and "never a silent pass" in r.reason


def test_repeats_without_an_interval_cannot_pass():
    r = evaluate(spec(LatencyTarget, "s", 2.0), est(1.0, n=3), "c")
    assert r.status is C and "no confidence interval" in r.reason and not r.single_run


def test_min_repeats_caps_a_pass_at_conditional():
    s = spec(LatencyTarget, "s", 2.0)
    assert evaluate(s, est(1.0, 0.1, n=2), "c", min_repeats=3).status is C
    assert evaluate(s, est(1.0, 0.1, n=3), "c", min_repeats=3).status is P
    single = evaluate(s, est(1.0), "c", min_repeats=2)
    assert single.status is C and "≥ 2" in single.reason and "single run" in single.reason


def test_a_figure_on_too_few_samples_says_so_and_cannot_pass():
    r = evaluate(spec(LatencyTarget, "s", 2.0), est(1.0, 0.1, samples=42, low_samples=True), "c")
    assert r.status is C and "few samples" in r.reason and "42" in r.reason and "cannot" not in r.reason
    assert "too few samples behind this figure to PASS" in r.reason
    failing = evaluate(spec(LatencyTarget, "s", 2.0), est(9.0, 0.1, samples=42, low_samples=True), "c")
    assert failing.status is F  # too few samples never turns a miss into a pass either


def test_an_unbounded_cost_cannot_pass():
    cost = Estimate(0.5, None, 3, 0.3, math.inf, samples=100)  # throughput CI reaching 0 → cost unbounded above
    r = evaluate(spec(CostCeiling, "USD", 1.0), cost, "c")
    assert r.status is C and "unbounded" in r.reason


def test_worst_orders_fail_over_conditional_over_pass():
    assert worst([P, C, P]) is C
    assert worst([C, F, P]) is F
    assert worst([]) is P


# -- whole verdicts ----------------------------------------------------------------------------------------------
TARGETS = {
    "ttft_p95_s": {"max": 2.0},
    "error_rate": {"max": 0.01},
    "throughput_rps": {"min": 1.0},
    "cost_per_million_output_tokens_usd": {"max": 2.0, "severity": "soft"},
}


def good_level(c=16, **over):
    m = {
        "ttft_p95": est(1.0, 0.1),
        "error_rate": est(0.001, 0.001),
        "throughput_rps": est(2.0, 0.1),
        "output_tokens_per_s": est(1000.0, 50.0),
        **over,
    }
    return level(c, **m)


def test_the_overall_verdict_is_the_worst_check_and_lists_every_check():
    v = grade(contract(targets=TARGETS), replica(), [good_level(ttft_p95=est(1.9, 0.2))])
    assert v.status is C
    assert [c.check for c in v.checks] == list(TARGETS)
    assert [c.status for c in v.checks] == [C, P, P, P]
    assert v.summary.startswith("CONDITIONAL:") and "1 CONDITIONAL" in v.summary
    assert not v.single_run and "single run" not in v.summary
    assert v.graded_level == "concurrency 16"


def test_cost_checks_are_graded_from_the_measured_throughput():
    # g6e.xlarge $1.861/h ÷ (1000 tok/s × 3600) × 10⁶ = $0.51694 per million output tokens
    v = grade(contract(targets=TARGETS), replica(), [good_level()])
    cost = next(c for c in v.checks if c.check == "cost_per_million_output_tokens_usd")
    assert cost.observed == pytest.approx(1.861 / 3.6)
    assert cost.bound == pytest.approx(1.861 / (950 * 3600) * 1e6)  # the upper bound from the CI's lower rate
    assert cost.status is P


def test_a_single_run_says_so_in_every_verdict():
    lv = level(16, ttft_p95=est(1.0), error_rate=est(0.0), throughput_rps=est(2.0), output_tokens_per_s=est(900.0))
    v = grade(contract(targets=TARGETS), replica(), [lv])
    assert v.single_run
    assert "single run" in v.summary
    assert all("single run" in c.reason for c in v.checks)


def test_the_contract_load_picks_the_level_and_others_feed_capacity():
    levels = [good_level(8), good_level(16, ttft_p95=est(3.0, 0.1)), good_level(32, ttft_p95=est(5.0, 0.1))]
    v = grade(contract(targets=TARGETS, load={"concurrency": 8}), replica(), levels)
    assert v.status is P and v.graded_level == "concurrency 8"
    assert v.levels == [("concurrency 8", P), ("concurrency 16", F), ("concurrency 32", F)]
    assert v.capacity.highest_passing == "concurrency 8"


def test_no_data_at_the_contract_load_fails_every_hard_check():
    v = grade(contract(targets=TARGETS, load={"concurrency": 64}), replica(), [good_level(8), good_level(16)])
    assert v.status is F and v.graded_level is None
    assert all(c.no_data for c in v.checks)
    assert [c.status for c in v.checks] == [F, F, F, C]  # the cost check is soft
    assert "concurrency 8, concurrency 16" in v.checks[0].reason
    assert "no data at concurrency 64" in v.summary


def test_an_unstaged_run_is_taken_as_the_contract_load_with_a_note():
    v = grade(contract(targets=TARGETS), replica(), [good_level(None)])
    assert v.graded_level == "concurrency 16"
    assert any("carry no stage" in n for n in v.notes)


@pytest.mark.parametrize(
    ("load", "lv", "matches"),
    [
        ({"concurrency": 16}, Level(concurrency=16), True),
        ({"concurrency": 2500}, Level(rate_rps=2.5), False),  # 2.5 req/s is not 2,500 users
        ({"concurrency": 16}, Level(concurrency=8), False),
        ({"request_rate_rps": 2.5}, Level(rate_rps=2.5), True),
        ({"request_rate_rps": 0.3333}, Level(rate_rps=0.333), True),  # records keep a rate to 0.001 req/s
        ({"request_rate_rps": 2.5}, Level(concurrency=2500), False),
        ({"scenario": "burst"}, Level(scenario="burst"), True),
        ({"scenario": "burst"}, Level(scenario="diurnal"), False),
    ],
)
def test_load_matching(load, lv, matches):
    assert contract(targets=TARGETS, load=load).load.matches(lv) is matches


def test_quality_checks_read_the_task_metrics():
    c = contract(quality={"verbose": {"item_accuracy": {"min": 0.85}, "parse_rate": {"min": 0.99}}})
    lv = LevelEstimates(
        Level(concurrency=16),
        {"quality.verbose.item_accuracy": est(0.9, 0.02), "quality.verbose.parse_rate": est(0.97, 0.01)},
    )
    v = grade(c, replica(), [lv])
    assert [(r.check, r.status) for r in v.checks] == [
        ("quality.verbose.item_accuracy", P),
        ("quality.verbose.parse_rate", F),
    ]


def test_the_verdict_is_plain_json_with_the_arithmetic():
    # CI reaches 0 → a cost unbounded above
    lv = good_level(throughput_rps=Estimate(2.0, 1.0, 3, 0.0, 4.0, samples=100))
    v = grade(contract(targets={**TARGETS, "cost_per_1000_calls_usd": {"max": 5}}), replica(), [lv])
    d = json.loads(json.dumps(v.to_dict(), allow_nan=False))
    assert d["verdict"] == str(v.status) and d["schema_version"] == 1
    assert {c["check"] for c in d["checks"]} >= set(TARGETS)
    calls = next(c for c in d["checks"] if c["check"] == "cost_per_1000_calls_usd")
    assert calls["ci95_high"] is None and "unbounded" in calls["reason"]
    assert d["deployment"]["total_usd_per_hour"] == pytest.approx(1.861)
    assert any("÷" in c["arithmetic"] and "3600 s/h" in c["arithmetic"] for c in d["cost"])


def test_incomplete_evidence_caps_a_pass_at_conditional():
    v = grade(contract(targets=TARGETS), replica(), [good_level()], incomplete=["a worker was lost"])
    assert all(c.status is P for c in v.checks)
    assert v.status is C and "a worker was lost" in v.summary and "a worker was lost" in v.notes
    assert v.to_dict()["measurement"] == "incomplete" and exit_code(v) == 4
    failing = grade(contract(targets=TARGETS), replica(), [good_level(ttft_p95=est(9.0, 0.1))], incomplete=["lost"])
    assert failing.status is F and exit_code(failing) == 4  # an incomplete run never exits as an SLA result
    complete = grade(contract(targets=TARGETS), replica(), [good_level()])
    assert complete.status is P and exit_code(complete) == 0 and complete.to_dict()["measurement"] == "complete"


def test_saturation_reasons_follow_the_policy():
    from slabench.evidence.run_status import MeasurementPolicy, Saturation, saturation_reasons

    policy = MeasurementPolicy()
    assert saturation_reasons(Saturation(cpu_samples_over_90=1), policy) == []  # one 5 s spike is tolerated
    (why,) = saturation_reasons(Saturation(cpu_samples_over_90=1, worker_cpu_over_90=True), policy)
    assert "2 samples of 5 s (a worker's among them)" in why and why.startswith("saturated: ")
    late = Saturation(open_loop_sends=1000, late_sends=11, late_bound_s=0.25)
    assert (
        "11 of 1000 open-loop requests went out more than 0.25 s after their schedule"
        in saturation_reasons(late, policy)[0]
    )
    assert saturation_reasons(late.model_copy(update={"late_sends": 10}), policy) == []  # 1 % is the bound
    sim = Saturation(sim_late_s=1.0, sim_span_s=19.0, sim_late_steps=40)
    assert (
        saturation_reasons(sim, policy)
        and saturation_reasons(sim, MeasurementPolicy(max_simulator_late_share=0.06)) == []
    )
    # Starved by other processes (a Locust run beside vLLM on two cores): its loop stalled up to 1.25 s at a time
    starved = Saturation(
        loop_late_s=3.12, loop_late_max_s=1.249, loop_span_s=10.1, cpu_wait_s=2.0, cpu_wait_runs=7708, loop_where="w1"
    )
    (why,) = saturation_reasons(starved, policy)
    assert "event loop (w1) ran late 3.12 s in all over 10 s, up to 1249 ms at once" in why
    assert "it waited for a CPU 20% of the time: other processes had the cores" in why
    assert saturation_reasons(starved, MeasurementPolicy(max_loop_late_share=0.4)) == []
    busy = starved.model_copy(update={"cpu_wait_s": 0.1})  # held up, but not for want of a CPU: no cause named
    assert "waited for a CPU" not in saturation_reasons(busy, policy)[0]
    idle = Saturation(loop_late_s=0.02, loop_late_max_s=0.0198, loop_span_s=10.0)  # one 20 ms hiccup in 10 s
    assert saturation_reasons(idle, policy) == []
    loaded = Saturation(loop_late_s=0.39, loop_late_max_s=0.121, loop_span_s=10.1)  # beside stress-ng: 3.9 %
    assert saturation_reasons(loaded, policy) == []
    assert saturation_reasons(loaded, MeasurementPolicy(max_loop_late_share=0.01))  # a stricter contract
    short = Saturation(loop_late_s=0.02, loop_late_max_s=0.016, loop_span_s=0.5)  # 4 % of a half-second run
    assert saturation_reasons(short, MeasurementPolicy(max_loop_late_share=0.01)) == []  # under the 0.25 s floor
    assert saturation_reasons(Saturation(), policy) == []  # not measured (not Linux): nothing said
