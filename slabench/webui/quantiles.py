"""Percentiles of a growing set of values in bounded memory, for the live view's "since start" figures. Pure.

Exact (numpy ``linear``, Hyndman & Fan type 7 — the definition the aggregator and the grader use) while the values
fit in `exact_cap`; past that, the values are folded into logarithmic buckets (the DDSketch idea): a value v > 0 falls
in bucket i = ceil(log_γ v) with γ = (1 + α) / (1 − α), and the bucket stands for 2γ^i / (γ + 1), which is within a
relative α of every value in it. Type 7 is then applied to those estimates, so each percentile stays within a
relative α of the exact one. Negative values (lateness can be) mirror the positive buckets; |v| below `MIN_ABS` counts
as 0; |v| above `MAX_ABS` is clamped to the top bucket (an hour-long latency is off the chart either way).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np

MIN_ABS = 1e-6  # one microsecond: below this a latency is 0 for every purpose here
MAX_ABS = 1e5  # about a day, in seconds
DEFAULT_REL_ERR = 0.005
DEFAULT_EXACT_CAP = 100_000


DRAIN_AT = 8192  # values buffered in a list before they go to numpy (one value per request is the common case)


class Quantiles:
    def __init__(self, exact_cap: int = DEFAULT_EXACT_CAP, rel_err: float = DEFAULT_REL_ERR) -> None:
        self.exact_cap = exact_cap
        self.rel_err = rel_err
        self._gamma = (1 + rel_err) / (1 - rel_err)
        self._log_gamma = math.log(self._gamma)
        self._lo = math.ceil(math.log(MIN_ABS) / self._log_gamma)
        self._hi = math.ceil(math.log(MAX_ABS) / self._log_gamma)
        self._pending: list[float] = []
        self._exact: np.ndarray | None = np.empty(0)  # exact mode; None once folded into buckets
        self._pos = np.zeros(self._hi - self._lo + 1, dtype=np.int64)
        self._neg = np.zeros_like(self._pos)
        self._zero = 0
        self.count = 0

    @property
    def exact(self) -> bool:
        self._drain()
        return self._exact is not None

    def add(self, values: Iterable[float] | np.ndarray) -> None:
        before = len(self._pending)
        self._pending.extend(values.tolist() if isinstance(values, np.ndarray) else values)
        self.count += len(self._pending) - before
        if len(self._pending) >= DRAIN_AT:
            self._drain()

    def _drain(self) -> None:
        if not self._pending:
            return
        arr = np.asarray(self._pending, dtype=float)
        self._pending = []
        if self._exact is None:
            self._fold(arr)
            return
        self._exact = np.concatenate([self._exact, arr])
        if self._exact.size > self.exact_cap:
            self._fold(self._exact)
            self._exact = None

    def _index(self, mags: np.ndarray) -> np.ndarray:
        idx = np.ceil(np.log(np.minimum(mags, MAX_ABS)) / self._log_gamma).astype(np.int64)
        out: np.ndarray = np.clip(idx, self._lo, self._hi) - self._lo
        return out

    def _fold(self, arr: np.ndarray) -> None:
        small = np.abs(arr) < MIN_ABS
        self._zero += int(small.sum())
        pos, neg = arr[(arr > 0) & ~small], arr[(arr < 0) & ~small]
        if pos.size:
            np.add.at(self._pos, self._index(pos), 1)
        if neg.size:
            np.add.at(self._neg, self._index(-neg), 1)

    def percentiles(self, qs: Sequence[float]) -> list[float | None]:
        """The qs-th percentiles (0..100); None for each when there are no values."""
        self._drain()
        if self.count == 0:
            return [None] * len(qs)
        if self._exact is not None:
            return [float(x) for x in np.percentile(self._exact, list(qs), method="linear")]
        return [self._sketch_percentile(q) for q in qs]

    def _sketch_percentile(self, q: float) -> float:
        reps = 2 * self._gamma ** (np.arange(self._lo, self._hi + 1, dtype=float)) / (self._gamma + 1)
        counts = np.concatenate([self._neg[::-1], [self._zero], self._pos])
        values = np.concatenate([-reps[::-1], [0.0], reps])
        cum = np.cumsum(counts)

        def at(rank: int) -> float:  # the estimate of the rank-th smallest value (0-based)
            return float(values[int(np.searchsorted(cum, rank, side="right"))])

        h = (self.count - 1) * q / 100.0
        lo, hi = math.floor(h), math.ceil(h)
        a = at(lo)
        return a if hi == lo else a + (h - lo) * (at(hi) - a)
