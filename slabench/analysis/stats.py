"""Small, exact statistics for the aggregator. Pure functions, no I/O.

- Percentiles are exact over the values given: numpy's ``method="linear"`` (Hyndman & Fan type 7, the default of
  numpy, R and Excel's PERCENTILE.INC): with the values sorted, the p-th percentile sits at rank h = (n − 1)·p/100
  and is interpolated linearly between the two neighbouring order statistics.
- Across repeats: mean, sample standard deviation (n − 1), coefficient of variation (std / mean) and an interval
  that stays in the figure's domain. Every run's value above zero (latencies, rates, costs): a Student-t interval
  on the log scale for the mean of a log-normal (the modified Cox method: exp(ȳ + s²/2 ± t(1 − α/2, n − 1) ·
  √(s²/n + s⁴/(2(n − 1)))) over y = ln x), never below zero. A run at exactly 0 (nothing answered): the plain
  Student-t interval mean ± t · std / √n, its lower bound floored at 0. One value gives n = 1 and no std, CV or
  interval (None), never a made-up one. An interval whose upper bound is more than WIDE_RATIO times its lower one
  is marked too wide to mean anything (its bounds are kept, and grade conservatively).
- Zero variance is not certainty: n ≥ 2 identical per-run values give no interval ("cannot estimate"), not a
  zero-width one.
- Proportions (error rate, accuracy, recall, agreement, parse rate, goodput share) get an interval made for them:
  Clopper–Pearson on the pooled counts, widened by the between-run overdispersion (the counts are divided by the
  Pearson dispersion φ ≥ 1 of the per-run proportions, as a quasi-binomial model does). Bounds stay in [0, 1] and
  4 of 4 gives a lower bound of ~40 %, not 100 %. docs/analysis.md says why this method.
- The Student-t and beta quantiles are computed here (regularised incomplete beta, continued fraction, then
  bisection) so the numbers do not depend on whether SciPy happens to be installed; tests check them against SciPy
  where it is.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np
from numpy.typing import NDArray

PERCENTILE_METHOD: Final = "linear"  # Hyndman & Fan type 7 (Final: numpy's stubs take the method as a Literal)
CONFIDENCE = 0.95
MIN_SAMPLES = 30  # fewer requests than this behind any figure: flagged as resting on too few samples


def percentile(values: NDArray[np.float64] | Sequence[float], q: float) -> float | None:
    """The q-th percentile (0..100) of `values`, exactly (type 7). None for no values."""
    arr = np.asarray(values, dtype=np.float64)
    if arr.size == 0:
        return None
    return float(np.percentile(arr, q, method=PERCENTILE_METHOD))


def percentiles(values: NDArray[np.float64], qs: Sequence[float], overwrite: bool = False) -> list[float | None]:
    """Several percentiles of one array with one partial sort. `overwrite`: the caller owns `values` and does not
    mind their order changing (saves a copy of a possibly large array)."""
    arr = np.asarray(values, dtype=np.float64)
    if arr.size == 0:
        return [None] * len(qs)
    return [float(x) for x in np.percentile(arr, list(qs), method=PERCENTILE_METHOD, overwrite_input=overwrite)]


def min_samples_for(q: float | None) -> int:
    """Requests a figure needs before it is trusted: MIN_SAMPLES, and for a percentile enough that at least one
    request lies beyond it (p99 needs 100, p99.9 needs 1000)."""
    if q is None or q <= 50:
        return MIN_SAMPLES
    return max(MIN_SAMPLES, math.ceil(100.0 / (100.0 - q) - 1e-9))


# -- Student t ---------------------------------------------------------------------------------------------------
def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz; Numerical Recipes §6.4)."""
    tiny, eps = 1e-300, 1e-15
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 400):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < eps:
            break
    return h


def betainc(a: float, b: float, x: float) -> float:
    """Regularised incomplete beta I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    ln_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    front = math.exp(ln_front)
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """P(T ≤ t) for Student's t with `df` degrees of freedom."""
    tail = 0.5 * betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


@functools.lru_cache(maxsize=256)  # the same few (p, df) pairs come up for every metric of every level
def t_ppf(p: float, df: float) -> float:
    """The p-quantile of Student's t (0 < p < 1), by bisection on t_cdf to ~1e-12."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must be in (0, 1), got {p}")
    if df <= 0:
        raise ValueError(f"df must be > 0, got {df}")
    if p < 0.5:
        return -t_ppf(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        lo, hi = hi, hi * 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-12 * max(1.0, hi):
            break
    return 0.5 * (lo + hi)


def beta_ppf(p: float, a: float, b: float) -> float:
    """The p-quantile of the Beta(a, b) distribution (a, b > 0), by bisection on `betainc` to ~1e-12."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"p must be in [0, 1], got {p}")
    lo, hi = 0.0, 1.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if betainc(a, b, mid) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-12:
            break
    return 0.5 * (lo + hi)


# -- across repeats ----------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Spread:
    """One metric across the repeats of a level."""

    mean: float | None
    std: float | None  # sample standard deviation (n − 1); None for n < 2
    n: int
    ci_low: float | None  # Student-t interval at CONFIDENCE; None for n < 2
    ci_high: float | None
    cv: float | None  # std / |mean|; None for n < 2 or a zero mean
    interval: str  # how ci95_* were found, or why there is none


T_INTERVAL = "student-t across runs"
LOG_INTERVAL = "student-t on the log scale across runs"
T_INTERVAL_FLOORED = "student-t across runs, floored at 0 (a run measured 0)"
WIDE_RATIO = 10.0  # an upper bound more than 10× the lower one: an order of magnitude says nothing
TOO_WIDE = "too wide to mean anything"
NO_INTERVAL_SINGLE = "none: a single run"
NO_INTERVAL_ZERO_VARIANCE = "none: identical values in every run (zero variance cannot be estimated from n runs)"


def spread(values: Sequence[float | None], confidence: float = CONFIDENCE) -> Spread:
    """Mean, std, n, t-interval and CV of the per-repeat values; None entries (a run with no data) are left out."""
    xs = [float(v) for v in values if v is not None and not math.isnan(v)]
    n = len(xs)
    if n == 0:
        return Spread(None, None, 0, None, None, None, "none: no data")
    mean = math.fsum(xs) / n
    if n < 2:
        return Spread(mean, None, 1, None, None, None, NO_INTERVAL_SINGLE)
    var = math.fsum((x - mean) ** 2 for x in xs) / (n - 1)
    std = math.sqrt(var)
    cv = std / abs(mean) if mean != 0 else None
    if std == 0.0:
        return Spread(mean, std, n, None, None, cv, NO_INTERVAL_ZERO_VARIANCE)
    t = t_ppf(0.5 + confidence / 2.0, n - 1)
    half = t * std / math.sqrt(n)
    if min(xs) > 0:
        low, high, how = (*_log_normal_mean_interval(xs, t), LOG_INTERVAL)
    elif min(xs) == 0:
        low, high, how = max(0.0, mean - half), mean + half, T_INTERVAL_FLOORED
    else:  # a figure that can be negative has no floor
        return Spread(mean, std, n, mean - half, mean + half, cv, T_INTERVAL)
    if high > WIDE_RATIO * low:
        ratio = f"upper ÷ lower = {high / low:,.0f}" if low > 0 else "lower bound 0"
        how += f"; {TOO_WIDE} ({ratio})"
    return Spread(mean, std, n, low, high, cv, how)


def _log_normal_mean_interval(xs: Sequence[float], t: float) -> tuple[float, float]:
    """The modified Cox interval (Olsson 2005) for the mean of positive values taken as log-normal."""
    ys = [math.log(x) for x in xs]
    n = len(ys)
    y_mean = math.fsum(ys) / n
    s2 = math.fsum((y - y_mean) ** 2 for y in ys) / (n - 1)
    centre = y_mean + s2 / 2.0
    half = t * math.sqrt(s2 / n + s2 * s2 / (2.0 * (n - 1)))
    return math.exp(centre - half), math.exp(centre + half)


@dataclass(frozen=True, slots=True)
class ProportionInterval:
    """A proportion over pooled counts, with its interval (see the module docstring)."""

    value: float | None  # successes / trials
    low: float | None
    high: float | None
    dispersion: float  # φ ≥ 1: how much more the runs disagree than binomial sampling explains
    interval: str


def dispersion(counts: Sequence[tuple[float, float]]) -> float:
    """Pearson's φ = χ² / (R − 1) of per-run (successes, trials) around the pooled proportion, at least 1.
    One run, or a pooled proportion of exactly 0 or 1, gives 1 (nothing to estimate it from)."""
    runs = [(k, n) for k, n in counts if n > 0]
    k_all, n_all = math.fsum(k for k, _ in runs), math.fsum(n for _, n in runs)
    if len(runs) < 2 or n_all == 0 or k_all in (0.0, n_all):
        return 1.0
    p = k_all / n_all
    chi2 = math.fsum((k - n * p) ** 2 / (n * p * (1.0 - p)) for k, n in runs)
    return max(1.0, chi2 / (len(runs) - 1))


def proportion_interval(counts: Sequence[tuple[float, float]], confidence: float = CONFIDENCE) -> ProportionInterval:
    """Clopper–Pearson interval of the pooled proportion of per-run (successes, trials), with the counts divided by
    the between-run dispersion φ (an effective sample size): wider when runs disagree, never outside [0, 1]."""
    k = math.fsum(s for s, _ in counts)
    n = math.fsum(t for _, t in counts)
    if n <= 0:
        return ProportionInterval(None, None, None, 1.0, "none: no data")
    phi = dispersion(counts)
    ke, ne = k / phi, n / phi
    alpha = 1.0 - confidence
    low = 0.0 if ke <= 0 else beta_ppf(alpha / 2.0, ke, ne - ke + 1.0)
    high = 1.0 if ke >= ne else beta_ppf(1.0 - alpha / 2.0, ke + 1.0, ne - ke)
    widened = f", widened by overdispersion φ = {phi:.3g}" if phi >= 1.005 else ""  # (the counts are divided anyway)
    method = "clopper-pearson on pooled counts" + widened
    return ProportionInterval(k / n, low, high, phi, method)


def intervals_overlap(a_low: float, a_high: float, b_low: float, b_high: float) -> bool:
    return a_low <= b_high and b_low <= a_high
