"""Percentiles, the Student-t quantile and the across-repeat spread, against hand-computed answers."""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slabench.analysis.stats import (
    beta_ppf,
    betainc,
    min_samples_for,
    percentile,
    percentiles,
    proportion_interval,
    spread,
    t_cdf,
    t_ppf,
)

# Two-sided 95 % critical values t(0.975, df) from the standard table (e.g. NIST/SEMATECH e-Handbook 1.3.6.7.2).
T_TABLE = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 9: 2.262, 10: 2.228, 29: 2.045, 30: 2.042, 100: 1.984}


def test_percentile_type7_by_hand():
    xs = [1.0, 2.0, 3.0, 4.0]
    # rank h = (n-1)·p: p50 → 1.5 → 2.5; p90 → 2.7 → 3 + 0.7·1 = 3.7; p95 → 2.85 → 3.85; p99 → 2.97 → 3.97
    assert percentile(xs, 50) == pytest.approx(2.5)
    assert percentile(xs, 90) == pytest.approx(3.7)
    assert percentiles(xs, [95, 99]) == pytest.approx([3.85, 3.97])
    assert percentile([5.0], 99) == 5.0
    assert percentile([], 50) is None
    assert percentiles([], [50, 90]) == [None, None]
    # order does not matter: exact over the values
    assert percentile([4.0, 1.0, 3.0, 2.0], 90) == pytest.approx(3.7)


@settings(deadline=None)
@given(st.lists(st.floats(0, 1e6, allow_nan=False), min_size=1, max_size=200))
def test_percentiles_are_ordered_and_bounded(xs):
    p50, p90, p95, p99 = percentiles(xs, [50, 90, 95, 99])
    assert min(xs) <= p50 <= p90 <= p95 <= p99 <= max(xs)


@pytest.mark.parametrize(("df", "expected"), sorted(T_TABLE.items()))
def test_t_quantile_matches_the_table(df, expected):
    assert t_ppf(0.975, df) == pytest.approx(expected, abs=5e-4)
    assert t_ppf(0.025, df) == pytest.approx(-expected, abs=5e-4)


def test_t_quantile_against_scipy_where_installed():
    scipy_stats = pytest.importorskip("scipy.stats", reason="SciPy not installed: the table test above covers t_ppf")
    for df in (1, 2, 3, 7, 15, 60, 500):
        for p in (0.9, 0.95, 0.975, 0.995):
            assert t_ppf(p, df) == pytest.approx(scipy_stats.t.ppf(p, df), rel=1e-9)


def test_t_cdf_and_betainc_known_points():
    assert t_cdf(0.0, 5) == pytest.approx(0.5)
    # df = 1 is the Cauchy distribution: F(1) = 3/4
    assert t_cdf(1.0, 1) == pytest.approx(0.75)
    assert betainc(1.0, 1.0, 0.3) == pytest.approx(0.3)  # uniform
    assert betainc(2.0, 1.0, 0.5) == pytest.approx(0.25)  # x²
    with pytest.raises(ValueError):
        t_ppf(1.0, 3)


def test_spread_by_hand():
    """Positive values: the modified Cox interval on the logs, exp(ȳ + s²/2 ± t · √(s²/n + s⁴/(2(n − 1))))."""
    s = spread([1.0, 2.0, 3.0])
    assert (s.mean, s.std, s.n, s.cv) == (2.0, 1.0, 3, 0.5)
    ys = [0.0, math.log(2.0), math.log(3.0)]
    y, s2 = sum(ys) / 3, sum((v - sum(ys) / 3) ** 2 for v in ys) / 2
    half = 4.302652729749464 * math.sqrt(s2 / 3 + s2 * s2 / 4)  # t(0.975, 2)
    assert s.ci_low == pytest.approx(math.exp(y + s2 / 2 - half))
    assert s.ci_high == pytest.approx(math.exp(y + s2 / 2 + half))
    assert s.interval.startswith("student-t on the log scale across runs")


def test_a_positive_figure_never_gets_a_negative_bound():
    """Three runs of TTFT p95 whose plain Student-t interval is [-80.1, 335.1] ms (docs/analysis.md)."""
    s = spread([60.0, 101.5, 221.0])
    assert (s.ci_low, s.ci_high) == (pytest.approx(21.015, abs=1e-3), pytest.approx(891.97, abs=1e-2))
    plain_low = s.mean - 4.302652729749464 * s.std / math.sqrt(3)
    assert plain_low < 0 < s.ci_low < s.mean < s.ci_high
    assert "too wide to mean anything" in s.interval  # upper ÷ lower over 10: an order of magnitude


def test_a_run_at_zero_floors_the_interval_at_zero():
    s = spread([0.0, 1.0, 1.2])  # e.g. a run that answered nothing: no log scale
    half = 4.302652729749464 * s.std / math.sqrt(3)
    assert s.ci_low == 0.0 and s.ci_high == pytest.approx(s.mean + half)
    assert s.interval.startswith("student-t across runs, floored at 0") and "too wide" in s.interval


def test_a_tight_interval_is_not_marked_wide():
    s = spread([100.0, 104.0, 98.0])
    assert s.ci_low > 90 and s.ci_high < 115 and "too wide" not in s.interval


def test_a_figure_that_can_be_negative_keeps_the_plain_interval():
    s = spread([-1.0, 0.5, 2.0])
    half = 4.302652729749464 * s.std / math.sqrt(3)
    assert (s.ci_low, s.ci_high) == (pytest.approx(s.mean - half), pytest.approx(s.mean + half))
    assert s.interval == "student-t across runs"


def test_spread_one_value_has_no_interval_and_none_is_skipped():
    s = spread([0.2, None])
    assert (s.mean, s.n, s.std, s.ci_low, s.ci_high, s.cv) == (0.2, 1, None, None, None, None)
    assert spread([]).n == 0 and spread([]).mean is None
    assert spread([0.0, 0.0]).cv is None  # zero mean: CV undefined, not a division by zero


def test_min_samples_rule():
    assert min_samples_for(99) == 100
    assert min_samples_for(95) == 30
    assert min_samples_for(99.9) == 1000
    assert min_samples_for(None) == 30


# -- small samples: proportions and zero variance ----------------------------------------------------------------
def test_four_of_four_is_not_certainty():
    # Clopper-Pearson for k = n: lower bound = (α/2)^(1/n) = 0.025^(1/4) ≈ 39.8 %, upper bound 1
    p = proportion_interval([(2, 2), (2, 2)])
    assert p.value == 1.0 and p.high == 1.0
    assert p.low == pytest.approx(0.025**0.25, abs=1e-9)


def test_zero_of_n_has_an_upper_bound_above_zero():
    # k = 0: upper bound = 1 − (α/2)^(1/n)
    p = proportion_interval([(0, 50), (0, 50)])
    assert p.value == 0.0 and p.low == 0.0
    assert p.high == pytest.approx(1 - 0.025 ** (1 / 100), abs=1e-9)


def test_runs_that_disagree_widen_the_interval():
    agree = proportion_interval([(14, 20), (14, 20)])
    disagree = proportion_interval([(18, 20), (10, 20)])
    assert agree.value == disagree.value == 0.7 and agree.dispersion == 1.0
    # φ = χ² / (R − 1): each run is 4 away from 14 expected, variance 20·0.7·0.3 = 4.2 → χ² = 2 · 16 / 4.2
    assert disagree.dispersion == pytest.approx(32 / 4.2)
    assert disagree.high - disagree.low > agree.high - agree.low
    assert "overdispersion" in disagree.interval


@given(st.lists(st.tuples(st.integers(0, 40), st.integers(0, 40)), min_size=1, max_size=6))
@settings(max_examples=200, deadline=None)
def test_proportion_bounds_stay_in_the_domain_and_hold_the_value(pairs):
    counts = [(min(k, n), n) for k, n in pairs]
    p = proportion_interval(counts)
    if sum(n for _, n in counts) == 0:
        assert p.value is None and p.low is None and p.high is None
        return
    assert 0.0 <= p.low <= p.value <= p.high <= 1.0


def test_beta_quantile_inverts_the_incomplete_beta():
    for a, b, q in ((1.0, 13.0, 0.025), (4.0, 1.0, 0.975), (2.5, 7.5, 0.5)):
        assert betainc(a, b, beta_ppf(q, a, b)) == pytest.approx(q, abs=1e-9)


def test_identical_values_in_every_run_give_no_interval():
    s = spread([0.5, 0.5, 0.5])
    assert (s.mean, s.std, s.n) == (0.5, 0.0, 3)
    assert s.ci_low is None and s.ci_high is None and "zero variance" in s.interval
    assert spread([0.5]).interval == "none: a single run"
