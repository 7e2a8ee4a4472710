"""The grader's input protocol: one `Estimate` per metric per tested level, and adapters that build it.

The grader never reads records or summaries itself. It sees, per level, a mapping of metric key → `Estimate`:

- metric keys (seconds, rates 0..1): ``ttft_p50/p90/p95/p99/mean``, ``itl_*``, ``tpot_*``, ``e2e_*``, ``error_rate``,
  ``incomplete_rate``, ``throughput_rps``, ``output_tokens_per_s``, ``total_tokens_per_s``, ``goodput_rps`` and
  ``quality.<task>.item_accuracy|autofail_recall|pass_agreement|parse_rate``;
- an `Estimate` is the across-repeat view of one figure: mean, std, n (repeats), the 95% CI, and the number of
  requests behind it. A single run has n = 1: no interval for latencies, a binomial one for proportions.

`levels_from_summary` reads the aggregator's typed summary (slabench.analysis.summary); `slabench.sla.single_run`
builds the same from the records of one plain Locust run, through the same figures pipeline.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field

from slabench.analysis.summary import Estimate, LevelUnit, SweepSummary, not_reached_line
from slabench.core.errors import UserError
from slabench.core.record import StageUnit

__all__ = ["Estimate", "Level", "LevelEstimates", "levels_from_summary", "with_metrics"]


@dataclass(frozen=True, slots=True)
class Level:
    """One tested load. Exactly one of the fields is set, or none (records that carry no stage)."""

    concurrency: int | None = None
    rate_rps: float | None = None
    scenario: str | None = None

    @classmethod
    def of_stage(cls, stored: int, unit: str) -> Level:
        """The load a record's stage_level and stage_unit stand for."""
        load = StageUnit(unit).load(stored)
        return cls(concurrency=int(load)) if unit == StageUnit.USERS else cls(rate_rps=float(load))

    @property
    def label(self) -> str:
        if self.concurrency is not None:
            return f"concurrency {self.concurrency}"
        if self.rate_rps is not None:
            return f"{self.rate_rps:g} req/s"
        if self.scenario is not None:
            return f"scenario {self.scenario}"
        return "the whole run (no stage recorded)"

    @property
    def unstaged(self) -> bool:
        return all(v is None for v in (self.concurrency, self.rate_rps, self.scenario))

    @property
    def order(self) -> float | None:
        """Position on the load axis for capacity answers; None for a scenario or an unstaged run."""
        for v in (self.concurrency, self.rate_rps):
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
    measured_load: float | None = None  # the load the runs held, in the level's unit (None: not measured)
    reached: bool | None = None  # False: not held over most of the window — the level cannot PASS

    def not_reached(self) -> str | None:
        """One line when the level was not reached (None otherwise)."""
        if self.reached is not False:
            return None
        unit: LevelUnit = "req/s" if self.level.rate_rps is not None else "users"
        return not_reached_line(self.level.label, self.measured_load, unit)

    def get(self, key: str) -> Estimate | None:
        est = self.metrics.get(key)
        return est if est is not None and est.mean is not None else None

    def quality_tasks(self) -> set[str]:
        return {k.split(".")[1] for k in self.metrics if k.startswith("quality.") and k.count(".") >= 2}


def stalled_note(level: Level, stalled: int) -> str:
    return (
        f"{level.label}: {stalled} request(s) were in flight while the load generator was frozen (run_status.json's "
        "stalls); their latencies measure the freeze and are left out of every latency figure"
    )


def with_metrics(level: LevelEstimates, extra: Mapping[str, Estimate]) -> LevelEstimates:
    return dataclasses.replace(level, metrics={**level.metrics, **extra})


# -- the aggregator's summary.json -------------------------------------------------------------------------------
def levels_from_summary(summary: SweepSummary) -> list[LevelEstimates]:
    """The aggregator's per-level summary → the grader's input (levels in users or requests/s, as it says)."""

    def level(value: int | float) -> Level:
        return Level(rate_rps=float(value)) if summary.level_unit == "req/s" else Level(concurrency=int(value))

    out = []
    for lv in summary.levels:
        at = level(lv.level)
        stalled = sum(r.stalled for r in lv.runs)
        notes = (stalled_note(at, stalled),) if stalled else ()
        out.append(
            LevelEstimates(
                at, dict(lv.metrics), lv.duration_s, dict(lv.error_counts), notes, lv.measured_level, lv.level_reached
            )
        )
    if not out:
        raise UserError(f"{summary.source}: the summary has no levels; nothing to grade")
    return out
