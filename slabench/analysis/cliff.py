"""The scaling cliff: the first concurrency level where latency leaves its low-load value or throughput stops
growing — called only when the 95 % intervals say so. Pure.

Method (levels ascending; a level with no data is skipped and its neighbours compared across it):
- Latency (default ``ttft_p95``): the low-load trend is the straight line through the across-repeat means of the
  two lowest levels with data (slope clamped at ≥ 0, so noise cannot make it fall). A higher level k is a
  *candidate* when mean_k ≥ ``latency_ratio`` × trend(level_k). A candidate is *called* only when its interval
  lies wholly above the previous level's (ci95_low_k > ci95_high_{k−1}); otherwise it is reported as
  inconclusive. Needs three levels with data.
- Throughput (default ``throughput_rps``): with r = level_k / level_{k−1}, linear scaling would multiply
  throughput by r. Level k is a candidate when mean_k < mean_{k−1} · (1 + ``scaling_floor`` · (r − 1)) (it got
  less than that share of linear growth), and is called only when even the top of its interval is below that
  bar taken from the bottom of the previous interval: ci95_high_k < ci95_low_{k−1} · (1 + floor · (r − 1)).
- The cliff is the lowest called level of the two; it lies in (last level before it, that level]. Without
  intervals (fewer than two repeats) nothing is called.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Protocol


class _Est(Protocol):
    # Read-only: the summary's estimates are frozen.
    @property
    def mean(self) -> float | None: ...
    @property
    def n(self) -> int: ...
    @property
    def ci95_low(self) -> float | None: ...
    @property
    def ci95_high(self) -> float | None: ...


@dataclass(frozen=True)
class CliffOptions:
    latency_metric: str = "ttft_p95"
    latency_ratio: float = 1.5
    throughput_metric: str = "throughput_rps"
    scaling_floor: float = 0.5


def _brief(level: float, e: _Est) -> dict[str, Any]:
    return {"level": level, "mean": e.mean, "ci95_low": e.ci95_low, "ci95_high": e.ci95_high, "n": e.n}


def _ci(e: _Est) -> tuple[float, float] | None:
    return (e.ci95_low, e.ci95_high) if e.ci95_low is not None and e.ci95_high is not None else None


# (level, mean, estimate) of the levels where the metric has a mean
_Point = tuple[float, float, _Est]


def _series(levels: Sequence[tuple[float, Mapping[str, _Est]]], key: str) -> list[_Point]:
    return [(lv, mean, m[key]) for lv, m in levels if key in m and (mean := m[key].mean) is not None]


_NO_CI = "no confidence interval (fewer than 2 repeats)"
_LATENCY_WHY = ("intervals do not overlap", "intervals of neighbouring levels overlap")  # (called, not called)
_THROUGHPUT_WHY = ("interval wholly below the scaling bar", "interval reaches the scaling bar (overlap)")


def _latency(series: list[_Point], o: CliffOptions) -> dict[str, Any]:
    out: dict[str, Any] = {"metric": o.latency_metric, "status": "none", "level": None, "candidates": []}
    if len(series) < 3:
        out["status"] = "too_few_levels"
        return out
    (l0, m0, _), (l1, m1, _) = series[0], series[1]
    slope = max(0.0, (m1 - m0) / (l1 - l0))
    out["trend"] = {"from_levels": [l0, l1], "intercept_level": l0, "at_intercept": m0, "slope_per_level": slope}
    for (pl, _, pe), (cl, cm, ce) in itertools.pairwise(series[1:]):
        expected = m0 + slope * (cl - l0)
        if cm < o.latency_ratio * expected:
            continue
        figures = {"trend": expected, "ratio_to_trend": cm / expected if expected else None}
        if _candidate(out, (pl, pe), (cl, ce), lambda p, c: c[0] > p[1], _LATENCY_WHY, figures):
            return out
    return _settled(out)


def _throughput(series: list[_Point], o: CliffOptions) -> dict[str, Any]:
    out: dict[str, Any] = {"metric": o.throughput_metric, "status": "none", "level": None, "candidates": []}
    if len(series) < 2:
        out["status"] = "too_few_levels"
        return out
    for (pl, pm, pe), (cl, cm, ce) in itertools.pairwise(series):
        r = cl / pl if pl else float("inf")
        factor = 1.0 + o.scaling_floor * (r - 1.0)
        if cm >= pm * factor:
            continue
        figures = {"gain": cm / pm if pm else None, "linear_gain": r}
        wholly_below = lambda p, c: c[1] < p[0] * factor  # noqa: B023, E731 (called at once, in this iteration)
        if _candidate(out, (pl, pe), (cl, ce), wholly_below, _THROUGHPUT_WHY, figures):
            return out
    return _settled(out)


def _candidate(
    out: dict[str, Any],
    prev: tuple[float, _Est],
    cur: tuple[float, _Est],
    beyond_overlap: Callable[[tuple[float, float], tuple[float, float]], bool],
    why: tuple[str, str],
    figures: dict[str, Any],
) -> bool:
    """Add the step from `prev` to `cur` to the candidates; it is called (True: the search ends there) when both
    levels have an interval and `beyond_overlap(previous interval, current interval)` holds."""
    (pl, pe), (cl, ce) = prev, cur
    pci, cci = _ci(pe), _ci(ce)
    called = pci is not None and cci is not None and beyond_overlap(pci, cci)
    reason = why[0] if called else _NO_CI if pci is None or cci is None else why[1]
    entry = {"level": cl, "previous": _brief(pl, pe), "at": _brief(cl, ce), **figures, "called": called, "why": reason}
    out["candidates"].append(entry)
    if called:
        out.update(status="found", level=cl, last_good_level=pl)
    return called


def _settled(out: dict[str, Any]) -> dict[str, Any]:
    """No candidate was called: inconclusive if there were any."""
    if out["candidates"]:
        out["status"] = "inconclusive"
    return out


def find_cliff(
    levels: Sequence[tuple[int | float, Mapping[str, _Est]]], options: CliffOptions | None = None, unit: str = "users"
) -> dict[str, Any]:
    """The cliff over `levels` [(level, {metric key: estimate})], as a JSON-ready dict (see the module doc); its
    message names the levels in `unit` ("users" or "req/s")."""
    o = options or CliffOptions()
    levels = sorted(levels, key=lambda lm: lm[0])
    lat = _latency(_series(levels, o.latency_metric), o)
    thr = _throughput(_series(levels, o.throughput_metric), o)
    found = [(c["level"], name, c) for name, c in (("latency", lat), ("throughput", thr)) if c["status"] == "found"]
    result: dict[str, Any] = {
        "status": "none",
        "level": None,
        "last_good_level": None,
        "reason": None,
        "latency": lat,
        "throughput": thr,
        "options": asdict(o),
    }
    if found:
        level, reason, c = min(found, key=lambda f: f[0])
        result.update(status="found", level=level, last_good_level=c["last_good_level"], reason=reason)
        result["message"] = (
            f"cliff between {c['last_good_level']:g} and {level:g} {unit} ({reason}: {c['metric']}; "
            f"{c['candidates'][-1]['why']})"
        )
        return result
    statuses = {lat["status"], thr["status"]}
    if statuses == {"too_few_levels"}:
        result["status"] = "too_few_levels"
        result["message"] = "too few levels with data: latency needs 3, throughput 2"
    elif "inconclusive" in statuses:
        cands = [c for part in (lat, thr) for c in part["candidates"]]
        result["status"] = "inconclusive"
        result["message"] = "possible cliff at " + ", ".join(
            f"{c['level']:g} {unit} ({c['why']})" for c in sorted(cands, key=lambda c: c["level"])
        )
    else:
        result["message"] = "no cliff: latency stays near its low-load trend and throughput keeps growing"
    return result
