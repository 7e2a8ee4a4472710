"""Dataset statistics: pure functions over queue items and built calls (no printing, no I/O).

Percentiles use numpy's default linear interpolation between order statistics. Token counts are
`slabench.core.tokens.estimate_tokens` (words + punctuation marks), the project's one estimator: the server's `usage`
is the truth for any real model, and differs by tokenizer.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from slabench.core.queue import QueueItem
from slabench.workload.accounts import WorkloadSettings
from slabench.workload.prompts import TASKS, prompt_tokens
from slabench.workload.transcripts import ESTIMATOR, GradingItem

PCTS = (10, 50, 90, 99)
__all__ = ["ESTIMATOR", "arrival_stats", "length_stats", "peak_window_count", "per_second_counts", "percentiles"]


def percentiles(values: Iterable[float], pcts: Sequence[float] = PCTS) -> dict[str, float] | None:
    """{"p10": ..., ...}, or None for no data."""
    a = np.asarray(list(values), dtype=float)
    if a.size == 0:
        return None
    return {f"p{p:g}": float(v) for p, v in zip(pcts, np.percentile(a, pcts), strict=True)}


def per_second_counts(
    offsets: Sequence[float] | NDArray[np.float64], duration_s: float, bin_s: float = 1.0
) -> np.ndarray:
    """Arrivals in each [k·bin, (k+1)·bin) bin of the window."""
    bins = int(np.ceil(duration_s / bin_s))
    idx = np.floor(np.asarray(offsets, dtype=float) / bin_s).astype(int)
    return np.bincount(np.clip(idx, 0, bins - 1), minlength=bins)


def peak_window_count(offsets: Sequence[float] | NDArray[np.float64], window_s: float) -> int:
    """The most arrivals in any window [t, t + window_s) (sliding, starting at an arrival)."""
    t = np.sort(np.asarray(offsets, dtype=float))
    if t.size == 0:
        return 0
    ends = np.searchsorted(t, t + window_s, side="left")
    return int((ends - np.arange(t.size)).max())


@dataclass(frozen=True, slots=True)
class ArrivalStats:
    count: int
    min_offset_s: float | None
    max_offset_s: float | None
    mean_rate: float | None  # arrivals / window
    per_second_p50: float | None
    per_second_p99: float | None
    per_second_max: int | None
    peak_100ms_rate: float | None  # the busiest 100 ms, as req/s
    interarrival_cv: float | None
    account_shares: dict[str, float]


def arrival_stats(items: Sequence[QueueItem], duration_s: float) -> ArrivalStats:
    off = np.asarray([it.offset_s for it in items], dtype=float)
    if off.size == 0:
        return ArrivalStats(0, None, None, None, None, None, None, None, None, {})
    counts = per_second_counts(off, duration_s)
    gaps = np.diff(np.sort(off))
    shares: dict[str, int] = {}
    for it in items:
        account = it.account if it.account is not None else "(no account)"  # a queue file's row may name none
        shares[account] = shares.get(account, 0) + 1
    return ArrivalStats(
        count=int(off.size),
        min_offset_s=float(off.min()),
        max_offset_s=float(off.max()),
        mean_rate=float(off.size / duration_s),
        per_second_p50=float(np.percentile(counts, 50)),
        per_second_p99=float(np.percentile(counts, 99)),
        per_second_max=int(counts.max()),
        peak_100ms_rate=peak_window_count(off, 0.1) / 0.1,
        interarrival_cv=float(gaps.std() / gaps.mean()) if gaps.size > 1 and gaps.mean() > 0 else None,
        account_shares={k: v / off.size for k, v in sorted(shares.items())},
    )


@dataclass(frozen=True, slots=True)
class LengthStats:
    """Per-account token-length percentiles (None where an account has no items)."""

    account: str
    items: int
    transcript_tokens: dict[str, float] | None
    prompt_tokens: dict[str, dict[str, float] | None]  # by task
    output_tokens: dict[str, dict[str, float] | None]  # by task: the answer-length targets
    pass_rate: float | None
    autofail_rate: float | None


def length_stats(calls: Sequence[GradingItem], settings: WorkloadSettings) -> list[LengthStats]:
    """Per account (in settings order) and then "all"."""
    groups: dict[str, list[GradingItem]] = {k: [] for k in settings.accounts}
    for c in calls:
        groups.setdefault(c.account, []).append(c)
    groups["all"] = list(calls)
    out = []
    for key, cs in groups.items():
        verdicts = [c.passed for c in cs if c.passed is not None]
        out.append(
            LengthStats(
                account=key,
                items=len(cs),
                transcript_tokens=percentiles(c.transcript_tokens for c in cs),
                prompt_tokens={t: percentiles(prompt_tokens(c, t, settings) for c in cs) for t in TASKS},
                output_tokens={t: percentiles(c.output_tokens(t) for c in cs) for t in TASKS},
                pass_rate=sum(verdicts) / len(verdicts) if verdicts else None,
                autofail_rate=sum(bool(c.autofail) for c in cs) / len(cs) if cs else None,
            )
        )
    return out
