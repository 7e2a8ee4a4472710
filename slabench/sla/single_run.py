"""Estimates for one plain Locust run, straight from its records (no repeats, so no intervals: n = 1). Pure.

Used by `slabench grade RUN_DIR` on a directory holding just a records file, and by the Locust-side hook.

- Records are grouped by their stage level (a shape stamps it); records without a stage form one group.
  Warm-up and cool-down records are left out; so are `dropped` ones (cancelled at stop: ours, not the server's).
- Latencies come from `slabench.metrics` over successful requests (TTFT = first_token − sent); percentiles are
  exact (numpy ``linear``, Hyndman & Fan type 7). ITL percentiles are over every token gap.
- error_rate = error / (ok + error + incomplete); incomplete_rate likewise.
- Rates divide by the measured window: first send to last end of the group, on the wall clock when every record
  carries its anchor (workers' monotonic clocks are not comparable), else on the monotonic clock.
- Quality per task: item accuracy = Σ correct / Σ expected (every rubric item counts once), auto-fail recall =
  TP / (TP + FN), pass agreement over answers with a verdict, parse rate over answers.
- A figure is flagged as resting on few samples below 30 requests, or, for a percentile p, below 100 / (100 − p)
  (a p99 needs 100 requests).
These are the definitions of `slabench.analysis.aggregate` for one run; an integration test checks the two agree.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence

import numpy as np

from slabench import metrics
from slabench.record import Outcome, RequestRecord
from slabench.sla.estimates import Estimate, Level, LevelEstimates

PCTS = {"p50": 50.0, "p90": 90.0, "p95": 95.0, "p99": 99.0}
EXCLUDED_PHASES = frozenset({"warmup", "cooldown"})
MIN_SAMPLES = 30


def _few(n: int, pct: float | None) -> bool:
    need = MIN_SAMPLES if pct is None or pct <= 50 else max(MIN_SAMPLES, math.ceil(100.0 / (100.0 - pct) - 1e-9))
    return n < need


def _distribution(prefix: str, values: Sequence[float], requests: int) -> dict[str, Estimate]:
    """Exact percentiles and the mean of `values`; `requests` is how many requests they come from."""
    if not values:
        return {}
    arr = np.asarray(values, dtype=float)
    qs = np.percentile(arr, list(PCTS.values()), method="linear")
    out = {
        f"{prefix}_{name}": Estimate(float(q), n=1, samples=requests, low_samples=_few(requests, pct))
        for (name, pct), q in zip(PCTS.items(), qs, strict=True)
    }
    out[f"{prefix}_mean"] = Estimate(float(arr.mean()), n=1, samples=requests, low_samples=_few(requests, None))
    return out


def _window(records: Sequence[RequestRecord]) -> float | None:
    """First send to last end (see the module docstring for the clock)."""
    wall = bool(records) and all(r.wall_sent is not None for r in records)
    starts, ends = [], []
    for r in records:
        start = r.wall_sent if wall else r.sent
        if start is not None:
            starts.append(start)
        if r.end is not None and r.sent is not None:
            ends.append(r.wall_sent + (r.end - r.sent) if wall else r.end)  # type: ignore[operator]
    if not starts or not ends:
        return None
    span = max(ends) - min(starts)
    return span if span > 0 else None


def _ratio(num: float, den: float, samples: int) -> Estimate | None:
    return Estimate(num / den, n=1, samples=samples, low_samples=samples < MIN_SAMPLES) if den else None


def _quality(records: Sequence[RequestRecord]) -> dict[str, Estimate]:
    out: dict[str, Estimate] = {}
    by_task: dict[str, list[RequestRecord]] = defaultdict(list)
    for r in records:
        if r.quality_task and r.outcome is not Outcome.ERROR:
            by_task[r.quality_task].append(r)
    for task, rs in by_task.items():
        with_autofail = sum(1 for r in rs if (r.autofail_tp or 0) + (r.autofail_fn or 0) > 0)
        tp = sum(r.autofail_tp or 0 for r in rs)
        fn = sum(r.autofail_fn or 0 for r in rs)
        agree = [r.pass_agree for r in rs if r.pass_agree is not None]
        parsed = [r.parse_ok for r in rs if r.parse_ok is not None]
        items = [r for r in rs if r.items_correct is not None and r.items_expected]
        figures = {
            "item_accuracy": _ratio(
                sum(r.items_correct for r in items), sum(r.items_expected for r in items), len(items)
            ),
            "autofail_recall": _ratio(tp, tp + fn, with_autofail),
            "pass_agreement": _ratio(sum(agree), len(agree), len(agree)),
            "parse_rate": _ratio(sum(parsed), len(parsed), len(parsed)),
        }
        out |= {f"quality.{task}.{k}": v for k, v in figures.items() if v is not None}
    return out


def level_estimates(records: Sequence[RequestRecord], level: Level) -> LevelEstimates:
    """One level's estimates from its records (already filtered to the measured phase)."""
    counted = [r for r in records if r.outcome is not Outcome.DROPPED]
    ok = [r for r in counted if r.outcome is Outcome.OK]
    notes: list[str] = []
    m: dict[str, Estimate] = {}

    def values(fn: Callable[[RequestRecord], float | None]) -> list[float]:
        return [v for v in map(fn, ok) if v is not None]

    gaps = [metrics.itl(r) for r in ok]
    tpot = values(metrics.tpot)
    m |= _distribution("ttft", values(metrics.ttft), len(ok))
    m |= _distribution("itl", [g for gs in gaps for g in gs], sum(1 for gs in gaps if gs))
    m |= _distribution("tpot", tpot, len(tpot))
    m |= _distribution("e2e", values(metrics.e2e), len(ok))
    n = len(counted)
    counts = Counter(str(r.error_category or r.outcome) for r in counted if r.outcome is not Outcome.OK)
    if n:
        errors = sum(r.outcome is Outcome.ERROR for r in counted)
        incomplete = sum(r.outcome is Outcome.INCOMPLETE for r in counted)
        m["error_rate"] = Estimate(errors / n, n=1, samples=n, low_samples=n < MIN_SAMPLES)
        m["incomplete_rate"] = Estimate(incomplete / n, n=1, samples=n, low_samples=n < MIN_SAMPLES)
    span = _window(records)
    if span is not None:
        out_tokens = [r.completion_tokens for r in ok]
        prompt_tokens = [r.prompt_tokens for r in ok]
        k = len(ok)
        m["throughput_rps"] = Estimate(k / span, n=1, samples=k, low_samples=k < MIN_SAMPLES)
        if ok and all(t is not None for t in out_tokens):
            m["output_tokens_per_s"] = Estimate(sum(out_tokens) / span, n=1, samples=k)  # type: ignore[arg-type]
            if all(t is not None for t in prompt_tokens):
                total = sum(out_tokens) + sum(prompt_tokens)  # type: ignore[arg-type]
                m["total_tokens_per_s"] = Estimate(total / span, n=1, samples=k)
        elif ok:
            notes.append(f"{level.label}: some successful requests have no token counts; token rates not computed")
    m |= _quality(counted)
    return LevelEstimates(level, m, duration_s=span, error_counts=dict(counts), notes=tuple(notes))


def _measured(r: RequestRecord) -> bool:
    return r.stage_phase not in EXCLUDED_PHASES


def levels_from_records(records: Iterable[RequestRecord], unstaged_level: Level | None = None) -> list[LevelEstimates]:
    """Group by stage level and estimate each; records without a stage become `unstaged_level` (default: an unstaged
    level, which the grader takes as the contract's load, saying so)."""
    groups: dict[int | None, list[RequestRecord]] = defaultdict(list)
    repeats: dict[int | None, set] = defaultdict(set)
    for r in records:
        if _measured(r):
            groups[r.stage_level].append(r)
            repeats[r.stage_level].add(r.stage_repeat)
    out = []
    for key in sorted(groups, key=lambda k: (k is None, k or 0)):
        level = Level(stage=key) if key is not None else (unstaged_level or Level())
        est = level_estimates(groups[key], level)
        reps = repeats[key] - {None}
        if len(reps) > 1:
            note = (
                f"{level.label}: {len(reps)} repeats in one run were pooled into one sample (n = 1); "
                "run `slabench aggregate` for per-repeat intervals"
            )
            est = LevelEstimates(est.level, est.metrics, est.duration_s, est.error_counts, (*est.notes, note))
        out.append(est)
    return out
