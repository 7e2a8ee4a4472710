"""The one typed schema of `summary.json`: per level, per metric, an `Estimate` — written by the aggregator, read by
the grader, the report and the capacity answer. Strict pydantic models; the JSON Schema is published in
docs/summary.schema.json (`slabench.commands.published_schemas`).

Versions follow `slabench.core.schema` (`SUMMARY`): another kind or major version is refused with one line; a newer
minor version only adds fields, which this reader ignores.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.dataclasses import dataclass

from slabench.analysis.stats import TOO_WIDE
from slabench.core.errors import UserError
from slabench.core.schema import SUMMARY
from slabench.evidence.run_status import Saturation

KIND = SUMMARY.kind
SCHEMA_VERSION = SUMMARY.major
SCHEMA_MINOR = SUMMARY.minor


class _Model(BaseModel):
    # Newer minor versions only add fields: ignore what this reader does not know, validate the rest strictly.
    model_config = ConfigDict(frozen=True, extra="ignore", strict=False)


@dataclass(frozen=True, slots=True, config=ConfigDict(extra="ignore"))
class Estimate:
    """One figure at one level. mean/std/n/cv: across runs (per-run values); ci95_*: the interval `interval` names
    (None when it cannot be estimated: one run, zero variance, no data); pooled: all requests of the level
    together; samples: requests behind the pooled value; low_samples: some run's value rests on fewer requests
    than the figure needs."""

    mean: float | None
    std: float | None = None
    n: int = 1
    ci95_low: float | None = None
    ci95_high: float | None = None
    cv: float | None = None
    pooled: float | None = None
    samples: int | None = None
    low_samples: bool = False
    interval: str = "none: a single run"

    @property
    def has_interval(self) -> bool:
        return self.ci95_low is not None and self.ci95_high is not None

    @property
    def too_wide(self) -> bool:
        """The interval spans more than an order of magnitude: shown as such, not as bounds."""
        return self.has_interval and TOO_WIDE in self.interval


class RunSummary(_Model):
    repeat: int
    run_id: str | None
    path: str
    records: int
    excluded_warmup: int
    warmup_rule: str
    counted: int
    stalled: int = 0  # counted requests in flight while the load generator was frozen: left out of the latencies
    duration_s: float | None
    error_counts: dict[str, int]
    metrics: dict[str, float | None]
    samples: dict[str, int]
    incomplete: list[str] = Field(default_factory=list)  # why this run cannot stand for its load (run_status.json)
    saturation: Saturation = Field(default_factory=Saturation)  # how starved the machine was: judged by the grader
    measured_level: float | None = None  # the load it held (slabench.analysis.figures.load_held); None: not measured
    records_sha256: str | None = None  # the records file this run's figures come from (None: written before minor 2)


LevelUnit = Literal["users", "req/s"]


class LevelSummary(_Model):
    level: int | float  # in the summary's level_unit
    n_runs: int
    requests: int  # counted requests (after warm-up exclusion), all runs
    duration_s: float | None  # summed measured windows of the runs (the pooled rates' denominator)
    error_counts: dict[str, int]
    metrics: dict[str, Estimate]
    runs: list[RunSummary]
    # The load its runs held, in level_unit (the weakest run's), and whether every run held the level over most of its
    # window: a level not reached cannot PASS. None: not measured (records that name no user).
    measured_level: float | None = None
    level_reached: bool | None = None


class SweepSummary(_Model):
    kind: Literal["slabench.sweep_summary"] = "slabench.sweep_summary"  # KIND, spelled out as its Literal type says
    schema_version: int = SCHEMA_VERSION
    schema_minor: int = SCHEMA_MINOR
    generated_at: str = Field(default_factory=lambda: time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    source: str
    sweep: dict[str, Any] | None = None
    method: dict[str, Any] = Field(default_factory=dict)
    slo: dict[str, float] | None = None
    warmup_s: float | None = None  # the warm-up given at aggregation (None: each run's manifest's): to recompute it
    level_unit: LevelUnit = "users"  # what every level counts: concurrent users, or requests/s (open-loop rates)
    levels: list[LevelSummary]
    cliff: dict[str, Any]
    warnings: list[str] = Field(default_factory=list)

    @property
    def load_name(self) -> str:
        """What the levels are, for titles and axes."""
        return "concurrency" if self.level_unit == "users" else "request rate"

    def label(self, level: int | float) -> str:
        """A level for people: "8 users", "2.5 req/s"."""
        return f"{level:g} {self.level_unit}"

    def level(self, level: int | float) -> LevelSummary:
        for lv in self.levels:
            if lv.level == level:
                return lv
        raise KeyError(level)

    @property
    def incomplete(self) -> list[str]:
        """Every run's reason it cannot stand for its load (a lost worker, requests not sent, nothing answered)."""
        return [
            f"{self.label(lv.level)} run {r.repeat}: {why}"
            for lv in self.levels
            for r in lv.runs
            for why in r.incomplete
        ]

    @property
    def not_reached(self) -> list[str]:
        """One line per level whose runs did not hold it over most of their window."""
        return [not_reached_line(self.label(lv.level), lv.measured_level, self.level_unit) for lv in self.levels
                if lv.level_reached is False]  # fmt: skip

    @property
    def saturation(self) -> list[tuple[str, Saturation]]:
        """Every run's saturation figures, for the grader to judge against its contract's policy."""
        return [(f"{self.label(lv.level)} run {r.repeat}", r.saturation) for lv in self.levels for r in lv.runs]


def not_reached_line(label: str, measured: float | None, unit: LevelUnit) -> str:
    held = (
        f"{measured:g} users were active over at least half of its measured window (spawn rate × run time below the "
        "level?)"
        if unit == "users"
        else f"{measured:.3g} req/s were sent"
    )
    return f"{label}: the load was not reached — {held}; its figures stand for a lighter load"


def _finite(o: Any) -> Any:
    """NaN/inf are not JSON; they only arise from degenerate input and mean "no value"."""
    if isinstance(o, float):
        return o if math.isfinite(o) else None
    if isinstance(o, dict):
        return {k: _finite(v) for k, v in o.items()}
    if isinstance(o, list):
        return [_finite(v) for v in o]
    return o


def summary_json(summary: SweepSummary) -> str:
    return json.dumps(_finite(summary.model_dump(mode="json")), indent=2, allow_nan=False) + "\n"


def parse_summary(data: Any, where: str) -> SweepSummary:
    SUMMARY.check(data, where)
    try:
        return SweepSummary.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        field = ".".join(str(x) for x in err["loc"])
        raise UserError(f"{where}: {field}: {err['msg']} — was the file edited by hand?") from None


def load_summary(path: str | Path) -> SweepSummary:
    return parse_summary(SUMMARY.read_json(path), str(path))
