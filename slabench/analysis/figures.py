"""The figures of one run, or of several runs pooled: `RunArrays` → {metric key: (value, samples)}. Pure.

Keys (seconds, rates per second, ratios 0..1): ``ttft_*``, ``itl_*``, ``tpot_*``, ``e2e_*`` with ``*`` in p50, p90,
p95, p99, mean; ``error_rate``, ``incomplete_rate``, ``throughput_rps``, ``output_tokens_per_s``,
``total_tokens_per_s``; ``cache_hit_ratio`` (prefix-cached prompt tokens / prompt tokens, over OK requests whose
server's usage says: ``prompt_tokens_details.cached_tokens``); ``goodput_rps`` and ``goodput_ratio`` when per-request
SLOs are given; and per quality task ``quality.<task>.item_accuracy``, ``.autofail_recall``, ``.pass_agreement``,
``.parse_rate``.

`samples` is the number of requests behind a value (for ITL: OK requests with at least one inter-token gap).
Proportions also carry their counts (successes, trials), from which their interval is made.

``ttft_answer_*`` is the time to the first answer token (visible content or a tool call, after any reasoning: a
reasoning model's second clock; equal to TTFT for a model that does not reason), over OK requests that have one.

Open loop (records with `scheduled`): ``ttft_*`` is the user-visible TTFT, from when the request was scheduled
(free of coordinated omission, as MLPerf LoadGen measures); ``ttft_sent_*`` beside it counts from when it went out.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from slabench.analysis.columns import Floats, RunArrays
from slabench.analysis.stats import percentiles

LATENCIES = ("ttft", "itl", "tpot", "e2e")
STATS = ("p50", "p90", "p95", "p99", "mean")
QUANTILE = {"p50": 50.0, "p90": 90.0, "p95": 95.0, "p99": 99.0, "mean": None}
RATES = ("error_rate", "incomplete_rate", "throughput_rps", "output_tokens_per_s", "total_tokens_per_s")
QUALITY = ("item_accuracy", "autofail_recall", "pass_agreement", "parse_rate")


@dataclass(frozen=True, slots=True)
class Figure:
    value: float | None
    samples: int  # requests behind the value
    counts: tuple[float, float] | None = None  # a proportion's (successes, trials)


def _proportion(successes: float, trials: float, samples: int) -> Figure:
    return Figure(successes / trials if trials > 0 else None, samples, (successes, trials))


@dataclass(frozen=True)
class Slo:
    """Per-request service-level objectives; a request meets them when it is OK and under every one that is set.
    A request with no inter-token gap (one output token) has no ITL/TPOT and meets those two."""

    ttft_s: float | None = None
    itl_s: float | None = None  # the request's mean ITL
    tpot_s: float | None = None
    e2e_s: float | None = None

    @classmethod
    def from_mapping(cls, m: Mapping[str, float] | None) -> Slo | None:
        if not m:
            return None
        unknown = set(m) - {"ttft_s", "itl_s", "tpot_s", "e2e_s"}
        if unknown:
            raise ValueError(f"unknown SLO key(s) {sorted(unknown)}; use ttft_s, itl_s, tpot_s, e2e_s")
        return cls(**{k: float(v) for k, v in m.items() if v is not None})

    def to_dict(self) -> dict[str, float]:
        return {k: v for k, v in self.__dict__.items() if v is not None}


@dataclass(frozen=True, slots=True)
class LoadHeld:
    """The load a level's runs held against the one configured: `measured` in the level's unit (the weakest run's),
    `reached` False when some run did not hold it for most of its window (None: not measured)."""

    measured: float | None
    reached: bool | None


def load_held(parts: Sequence[RunArrays], configured: float | None, unit: Literal["users", "req/s"]) -> LoadHeld:
    """Users: each run's users active over at least half its window (`RunArrays.users_held`) against the level.
    Requests/s: each run's requests sent per second from its first send to its last, reached when the count is
    within three Poisson standard deviations of the configured rate's (an open-loop schedule is random)."""
    if not parts:
        return LoadHeld(None, None)
    if unit == "users":
        held = [p.users_held for p in parts]
        if any(h is None for h in held):
            return LoadHeld(None, None)
        low = float(min(h for h in held if h is not None))
        return LoadHeld(low, None if configured is None else low >= configured)
    rates, reached = [], []
    for p in parts:
        if p.sends < 2 or p.send_span_s <= 0:
            return LoadHeld(None, None)
        rates.append((p.sends - 1) / p.send_span_s)
        if configured is not None:
            expected = configured * p.send_span_s
            reached.append(p.sends - 1 >= expected - 3 * math.sqrt(expected))
    return LoadHeld(min(rates), all(reached) if configured is not None else None)


def quantile_of(key: str) -> float | None:
    """The percentile a metric key stands for (ttft_p99 → 99), None for means and rates."""
    return QUANTILE.get(key.rsplit("_", 1)[-1]) if key.split("_")[0] in LATENCIES else None


def _cat(parts: Sequence[RunArrays], name: str) -> Floats:
    arrays: list[Floats] = [getattr(p, name) for p in parts]
    return np.concatenate(arrays) if len(arrays) > 1 else arrays[0]


def _latency(values: Floats, prefix: str, requests: int, out: dict[str, Figure]) -> None:
    v = values[~np.isnan(values)]  # a fresh copy: its order may change
    mean = float(v.mean()) if v.size else None
    for stat, value in zip(STATS[:4], percentiles(v, [50, 90, 95, 99], overwrite=True), strict=True):
        out[f"{prefix}_{stat}"] = Figure(value, requests)
    out[f"{prefix}_mean"] = Figure(mean, requests)


def _ratio(num: float, den: float) -> float | None:
    return num / den if den > 0 else None


def _quality(parts: Sequence[RunArrays], out: dict[str, Figure]) -> None:
    tasks = sorted({t for p in parts for t in p.quality})
    for task in tasks:
        cols = {c: np.concatenate([p.quality[task][c] for p in parts if task in p.quality]) for c in _QCOLS}
        parse = cols["parse_ok"][~np.isnan(cols["parse_ok"])]
        out[f"quality.{task}.parse_rate"] = _proportion(float(parse.sum()), float(parse.size), int(parse.size))
        exp, cor = cols["items_expected"], cols["items_correct"]
        has_items = ~np.isnan(exp) & ~np.isnan(cor) & (exp > 0)
        if has_items.any():  # micro-average: every rubric item counts once
            acc = _proportion(float(cor[has_items].sum()), float(exp[has_items].sum()), int(has_items.sum()))
        else:  # only per-answer accuracies: their mean, not a count
            ia = cols["item_accuracy"][~np.isnan(cols["item_accuracy"])]
            acc = Figure(float(ia.mean()) if ia.size else None, int(ia.size))
        out[f"quality.{task}.item_accuracy"] = acc
        tp, fn = cols["autofail_tp"], cols["autofail_fn"]
        has_af = ~np.isnan(tp) & ~np.isnan(fn)
        caught, missed = float(tp[has_af].sum()), float(fn[has_af].sum())
        out[f"quality.{task}.autofail_recall"] = _proportion(
            caught, caught + missed, int(((tp + fn)[has_af] > 0).sum())
        )
        pa_ = cols["pass_agree"][~np.isnan(cols["pass_agree"])]
        out[f"quality.{task}.pass_agreement"] = _proportion(float(pa_.sum()), float(pa_.size), int(pa_.size))


_QCOLS = ("parse_ok", "items_expected", "items_correct", "item_accuracy", "autofail_tp", "autofail_fn", "pass_agree")


def meets_slo(parts: Sequence[RunArrays], slo: Slo) -> int:
    """How many OK requests meet every SLO that is set (NaN ITL/TPOT: no gap, meets). A stalled request's latencies
    are not known: it does not count as meeting them."""
    ok = np.ones(sum(p.ttft.size for p in parts), dtype=bool)
    with np.errstate(invalid="ignore"):
        for name, limit, nan_meets in (
            ("ttft", slo.ttft_s, False),
            ("itl_mean", slo.itl_s, True),
            ("tpot", slo.tpot_s, True),
            ("e2e", slo.e2e_s, False),
        ):
            if limit is None:
                continue
            v = _cat(parts, name)
            ok &= (v <= limit) | (np.isnan(v) & nan_meets)
    return int(ok.sum())


def metric_values(parts: Sequence[RunArrays], slo: Slo | None = None) -> dict[str, Figure]:
    """Figures over the requests of `parts` together (one run, or a level pooled). Rates divide by the summed
    measured windows of the parts."""
    out: dict[str, Figure] = {}
    ok = sum(p.ok for p in parts)
    measured = sum(p.ttft.size for p in parts)  # OK requests not stalled: what the latencies are made of
    _latency(_cat(parts, "ttft"), "ttft", measured, out)
    answers = [p.ttft_answer for p in parts if p.ttft_answer is not None]
    answer = np.concatenate(answers) if answers else np.empty(0)
    if (~np.isnan(answer)).any():  # records that carry it (minor ≥ 5) and an answer
        _latency(answer, "ttft_answer", int((~np.isnan(answer)).sum()), out)
    sent = [p.ttft_sent for p in parts if p.ttft_sent is not None]
    if len(sent) == len(parts):  # every part is open loop
        _latency(np.concatenate(sent), "ttft_sent", measured, out)
    itl_requests = int(sum(int((~np.isnan(p.itl_mean)).sum()) for p in parts))
    _latency(_cat(parts, "itl_tokens"), "itl", itl_requests, out)
    tpot = _cat(parts, "tpot")
    _latency(tpot, "tpot", int((~np.isnan(tpot)).sum()), out)
    _latency(_cat(parts, "e2e"), "e2e", measured, out)
    answered = sum(p.counted - p.dropped for p in parts)  # dropped requests are ours, not the server's
    out["error_rate"] = _proportion(sum(p.errors for p in parts), answered, answered)
    out["incomplete_rate"] = _proportion(sum(p.incomplete for p in parts), answered, answered)
    durations = [p.duration_s for p in parts]
    duration = sum(d for d in durations if d is not None) if any(d is not None for d in durations) else 0.0
    out["throughput_rps"] = Figure(_ratio(ok, duration), ok)
    if ok and not any(p.ok_without_tokens for p in parts):  # a partial sum would undercount: no figure at all
        out["output_tokens_per_s"] = Figure(_ratio(sum(p.output_tokens for p in parts), duration), ok)
        out["total_tokens_per_s"] = Figure(_ratio(sum(p.total_tokens for p in parts), duration), ok)
    of_prompt = sum(p.cached_of_prompt for p in parts)
    if of_prompt > 0:  # the server said how much of the prompts its prefix cache held
        out["cache_hit_ratio"] = Figure(sum(p.cached_tokens for p in parts) / of_prompt, ok)
    if slo is not None:
        good = meets_slo(parts, slo)
        out["goodput_rps"] = Figure(_ratio(good, duration), ok)
        out["goodput_ratio"] = _proportion(good, answered, answered)
    _quality(parts, out)
    return out
