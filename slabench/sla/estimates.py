"""The grader's input protocol: one `Estimate` per metric per tested level, and adapters that build it.

The grader never reads records or summaries itself. It sees, per level, a mapping of metric key → `Estimate`:

- metric keys (seconds, rates 0..1): ``ttft_p50/p90/p95/p99/mean``, ``itl_*``, ``tpot_*``, ``e2e_*``, ``error_rate``,
  ``incomplete_rate``, ``throughput_rps``, ``output_tokens_per_s``, ``total_tokens_per_s``, ``goodput_rps`` and
  ``quality.<task>.item_accuracy|autofail_recall|pass_agreement|parse_rate``;
- an `Estimate` is the across-repeat view of one figure: mean, std, n (repeats), the 95% CI, and the number of
  requests behind it. A single run has n = 1 and no interval.

`levels_from_summary` reads the aggregator's ``summary.json`` shape (slabench.analysis.aggregate); `sla.single_run`
builds the same from the records of one plain Locust run.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from slabench.errors import UserError


@dataclass(frozen=True, slots=True)
class Estimate:
    mean: float | None
    std: float | None = None
    n: int = 1  # repeats (runs) behind the figure
    ci95_low: float | None = None
    ci95_high: float | None = None
    samples: int | None = None  # requests behind the figure
    low_samples: bool = False  # the figure rests on too few samples (e.g. a p99 from < 100 requests)

    @property
    def has_interval(self) -> bool:
        return self.n >= 2 and self.ci95_low is not None and self.ci95_high is not None


@dataclass(frozen=True, slots=True)
class Level:
    """One tested load. Exactly one of the fields is set, or none (records that carry no stage)."""

    concurrency: int | None = None
    rate_rps: float | None = None
    scenario: str | None = None
    stage: int | None = None  # a record's raw stage_level: concurrency, or rate × 1000 for rate shapes

    @property
    def label(self) -> str:
        if self.concurrency is not None:
            return f"concurrency {self.concurrency}"
        if self.rate_rps is not None:
            return f"{self.rate_rps:g} req/s"
        if self.scenario is not None:
            return f"scenario {self.scenario}"
        if self.stage is not None:
            return f"stage level {self.stage}"
        return "the whole run (no stage recorded)"

    @property
    def unstaged(self) -> bool:
        return all(v is None for v in (self.concurrency, self.rate_rps, self.scenario, self.stage))

    @property
    def order(self) -> float | None:
        """Position on the load axis for capacity answers; None for a scenario or an unstaged run."""
        for v in (self.concurrency, self.rate_rps, self.stage):
            if v is not None:
                return float(v)
        return None


@dataclass(frozen=True, slots=True)
class LevelEstimates:
    level: Level
    metrics: Mapping[str, Estimate]
    duration_s: float | None = None
    error_counts: Mapping[str, int] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    def get(self, key: str) -> Estimate | None:
        est = self.metrics.get(key)
        return est if est is not None and est.mean is not None else None

    def quality_tasks(self) -> set[str]:
        return {k.split(".")[1] for k in self.metrics if k.startswith("quality.") and k.count(".") >= 2}


def with_metrics(level: LevelEstimates, extra: Mapping[str, Estimate]) -> LevelEstimates:
    return dataclasses.replace(level, metrics={**level.metrics, **extra})


# -- the aggregator's summary.json -------------------------------------------------------------------------------
def as_plain(obj: Any) -> Any:
    """A summary object (dataclass, pydantic model, or anything with to_dict) as plain dicts/lists."""
    if hasattr(obj, "to_dict"):
        return obj.to_dict()
    if hasattr(obj, "model_dump"):
        return obj.model_dump(mode="json")
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.asdict(obj)
    return obj


def _number(v: Any, where: str) -> float | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise UserError(f"{where}: expected a number or null (got {v!r}); is this a slabench summary.json?")
    return None if math.isnan(v) else float(v)


def _estimate(d: Mapping[str, Any], where: str) -> Estimate:
    n = d.get("n")
    samples = d.get("samples")
    return Estimate(
        mean=_number(d.get("mean"), f"{where}.mean"),
        std=_number(d.get("std"), f"{where}.std"),
        n=int(n) if isinstance(n, int | float) and not isinstance(n, bool) else 1,
        ci95_low=_number(d.get("ci95_low"), f"{where}.ci95_low"),
        ci95_high=_number(d.get("ci95_high"), f"{where}.ci95_high"),
        samples=int(samples) if isinstance(samples, int | float) and not isinstance(samples, bool) else None,
        low_samples=bool(d.get("low_samples", False)),
    )


def _is_estimate(v: Any) -> bool:
    return isinstance(v, Mapping) and "mean" in v


def _collect(d: Mapping[str, Any], prefix: str, where: str, out: dict[str, Estimate]) -> None:
    """Metrics may sit flat (``"quality.verbose.item_accuracy": {...}``) or nested (``metrics: {...}``,
    ``quality: {verbose: {item_accuracy: {...}}}``); both read the same."""
    for key, value in d.items():
        if not isinstance(value, Mapping):
            continue
        if _is_estimate(value):
            out[prefix + str(key)] = _estimate(value, f"{where}.{key}")
        elif key == "metrics":
            _collect(value, prefix, f"{where}.{key}", out)
        elif key == "quality" or prefix.startswith("quality."):
            _collect(value, f"{prefix}{key}.", f"{where}.{key}", out)


def _level(d: Mapping[str, Any], where: str) -> Level:
    if d.get("concurrency") is not None:
        return Level(concurrency=int(d["concurrency"]))
    rate = d.get("rate_rps", d.get("request_rate_rps"))
    if rate is not None:
        return Level(rate_rps=float(rate))
    if d.get("scenario") is not None:
        return Level(scenario=str(d["scenario"]))
    v = d.get("level")
    kind = d.get("kind", d.get("level_kind"))
    if isinstance(v, Mapping):
        return _level(v, f"{where}.level")
    if isinstance(v, bool) or v is None:
        raise UserError(f"{where}.level: missing; expected a concurrency (number) or a scenario name")
    if kind in ("rate", "request_rate"):
        return Level(rate_rps=float(v))
    if kind == "scenario":
        return Level(scenario=str(v))
    if isinstance(v, int | float):
        return Level(concurrency=int(v))
    if isinstance(v, str) and v.isdigit():
        return Level(concurrency=int(v))
    return Level(scenario=str(v))


def levels_from_summary(summary: Any, source: str = "summary.json") -> list[LevelEstimates]:
    """The aggregator's per-level summary (dict, or the SweepSummary object) → the grader's input."""
    data = as_plain(summary)
    raw = data.get("levels") if isinstance(data, Mapping) else data
    if isinstance(raw, Mapping):
        raw = [{"level": k, **v} if isinstance(v, Mapping) and "level" not in v else v for k, v in raw.items()]
    if not isinstance(raw, list):
        raise UserError(f"{source}: no `levels` list; is this a slabench summary.json?")
    out = []
    for i, d in enumerate(raw):
        where = f"{source}: levels[{i}]"
        if not isinstance(d, Mapping):
            raise UserError(f"{where}: expected a mapping (got {type(d).__name__})")
        metrics: dict[str, Estimate] = {}
        _collect(d, "", where, metrics)
        counts = d.get("error_counts") or {}
        out.append(
            LevelEstimates(
                level=_level(d, where),
                metrics=metrics,
                duration_s=_number(d.get("duration_s"), f"{where}.duration_s")
                if not isinstance(d.get("duration_s"), Mapping)
                else _number(d["duration_s"].get("mean"), f"{where}.duration_s.mean"),
                error_counts={str(k): int(v) for k, v in counts.items()} if isinstance(counts, Mapping) else {},
            )
        )
    if not out:
        raise UserError(f"{source}: the summary has no levels; nothing to grade")
    return out
