"""Since-start percentiles: exact while small, within the stated relative error once folded into buckets."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slabench.webui.quantiles import MIN_ABS, Quantiles

QS = (0.0, 1.0, 50.0, 90.0, 95.0, 99.0, 100.0)


def test_exact_below_the_cap_matches_numpy_type_7() -> None:
    q = Quantiles(exact_cap=10)
    q.add([3.0, 1.0])
    q.add(np.array([2.0, 4.0]))
    assert q.exact and q.count == 4
    assert q.percentiles([50, 95]) == pytest.approx([2.5, 3.85])  # ranks 1.5 and 2.85 of [1 2 3 4]


def test_empty_is_none() -> None:
    assert Quantiles().percentiles([50, 99]) == [None, None]


def test_past_the_cap_it_is_a_sketch() -> None:
    q = Quantiles(exact_cap=3, rel_err=0.01)
    q.add([0.1, 0.2, 0.3, 0.4])
    assert not q.exact and q.count == 4
    p50 = q.percentiles([50])[0]
    assert abs(p50 - 0.25) <= 0.01 * 0.25


def _bound(exact_sorted: np.ndarray, pct: float, rel: float) -> float:
    """The error allowed at one percentile: rel × the interpolated |order statistics| (+ what counts as zero)."""
    h = (len(exact_sorted) - 1) * pct / 100
    lo, hi = math.floor(h), math.ceil(h)
    f = h - lo
    mag = (1 - f) * abs(exact_sorted[lo]) + f * abs(exact_sorted[hi])
    return rel * mag * (1 + 1e-9) + MIN_ABS


values = st.lists(
    st.one_of(
        st.floats(min_value=1e-5, max_value=1e4),
        st.floats(min_value=-50, max_value=-1e-5),
        st.just(0.0),
    ),
    min_size=3,
    max_size=300,
)


@settings(max_examples=200, deadline=None)
@given(values, st.integers(min_value=0, max_value=2))
def test_sketch_within_relative_error_of_exact(xs: list[float], cap: int) -> None:
    rel = 0.005
    q = Quantiles(exact_cap=cap, rel_err=rel)
    for i in range(0, len(xs), 7):  # in batches, as records arrive
        q.add(xs[i : i + 7])
    assert not q.exact
    exact = np.sort(np.asarray(xs))
    for pct, est in zip(QS, q.percentiles(QS), strict=True):
        want = float(np.percentile(exact, pct, method="linear"))
        assert abs(est - want) <= _bound(exact, pct, rel), (pct, est, want)


@settings(max_examples=50, deadline=None)
@given(values)
def test_percentiles_are_ordered(xs: list[float]) -> None:
    q = Quantiles(exact_cap=1)
    q.add(xs)
    got = q.percentiles(QS)
    assert all(a <= b for a, b in itertools.pairwise(got))
