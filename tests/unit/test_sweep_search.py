"""The bisection of `slabench sweep --search` (`slabench.sweep.search`) on hand-checked cases: which levels it runs,
in which order, and the answer; which checks decide; and one line for what it cannot search."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from slabench.core.errors import UserError
from slabench.sla.contract import CheckSpec
from slabench.sla.grade import Status
from slabench.sweep.search import Search, capacity_checks, run_search


def bisect(low: int, high: int, tolerance: int, fits: int) -> Search:
    """Run the search's own loop with levels up to `fits` passing."""
    s = Search(low, high, tolerance)
    while (level := s.next_level()) is not None:
        s.record(level, Status.PASS if level <= fits else Status.FAIL, "")
    return s


def test_bisection_runs_the_ends_then_halves_the_bracket():
    s = bisect(1, 16, 1, fits=5)
    assert [st.level for st in s.steps] == [1, 16, 8, 4, 6, 5]
    assert (s.passed, s.failed) == (5, 6) and s.answer().startswith("5 concurrent users is the highest")


def test_a_coarser_tolerance_stops_sooner():
    s = bisect(1, 64, 8, fits=20)
    assert [st.level for st in s.steps] == [1, 64, 32, 16, 24]
    assert (s.passed, s.failed) == (16, 24)


def test_the_range_ends_answer_without_bisecting():
    none = bisect(4, 32, 1, fits=2)
    assert [st.level for st in none.steps] == [4] and none.answer().startswith("no level passes")
    every = bisect(4, 32, 1, fits=100)
    assert [st.level for st in every.steps] == [4, 32] and every.answer().startswith("every level passes up to")


def test_a_conditional_level_does_not_pass():
    s = Search(1, 4, 1)
    s.record(1, Status.PASS, "")
    s.record(4, Status.CONDITIONAL, "")
    assert (s.passed, s.failed, s.next_level()) == (1, 4, 2)


def spec(name: str, metric: str, **bound: float) -> CheckSpec:
    return CheckSpec(name, metric, "s", SimpleNamespace(max=bound.get("max"), min=bound.get("min")), ("targets",))


def test_only_ceilings_that_rise_with_load_decide():
    specs = [
        spec("ttft_p95_s", "ttft_p95", max=2.0),
        spec("itl_p95_s", "itl_p95", max=0.1),
        spec("error_rate", "error_rate", max=0.01),
        spec("throughput_rps", "throughput_rps", min=1.0),  # a floor: fails at low load
        spec("cost", "cost_per_million_output_tokens_usd", max=2.5),  # falls as load rises
        spec("acc", "quality.terse.item_accuracy", min=0.85),
    ]
    assert [s.name for s in capacity_checks(specs)] == ["ttft_p95_s", "itl_p95_s", "error_rate"]


def test_what_cannot_be_searched_is_one_line():
    floors_only = SimpleNamespace(
        contract=SimpleNamespace(checks=lambda: [spec("throughput_rps", "throughput_rps", min=1.0)]), path="c.yaml"
    )
    with pytest.raises(UserError, match=r"c.yaml: --search needs a latency ceiling or an error-rate ceiling"):
        run_search([1, 8], 1, floors_only, lambda _: None, print)
    ok = SimpleNamespace(contract=SimpleNamespace(checks=lambda: [spec("t", "ttft_p95", max=1.0)]), path="c.yaml")
    with pytest.raises(UserError, match="--search needs a range"):
        run_search([4], 1, ok, lambda _: None, print)
    with pytest.raises(UserError, match="--search-tolerance 0: must be at least 1"):
        run_search([1, 4], 0, ok, lambda _: None, print)
