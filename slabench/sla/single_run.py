"""Estimates for one plain Locust run, straight from its records: the aggregator's figures pipeline
(`slabench.analysis.columns` → `figures` → `aggregate.estimate`) with one run per level, so n = 1. Pure.

Used by `slabench grade RUN_DIR` on a directory holding just a records file, by the Locust-side hook and the web
UI's live SLA panel. Records are grouped by their stage level (a shape stamps it); records without a stage form one
group. Several repeats of a level in one run are pooled into one sample, and the estimate says so.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from slabench.analysis.aggregate import estimate
from slabench.analysis.columns import EXCLUDED_PHASES, run_arrays, table_from_records
from slabench.analysis.figures import LoadHeld, load_held, metric_values
from slabench.analysis.summary import LevelUnit
from slabench.core.record import RequestRecord
from slabench.evidence.run_status import Stall
from slabench.sla.estimates import Level, LevelEstimates, stalled_note


def level_estimates(table: pa.Table, level: Level, stalls: Sequence[Stall] = ()) -> LevelEstimates:
    """One level's estimates from its rows (warm-up and cool-down rows are left out here)."""
    arrays = run_arrays(table, stalls=stalls)
    figures = metric_values([arrays])
    unit: LevelUnit = "req/s" if level.rate_rps is not None else "users"
    held = load_held([arrays], level.concurrency if unit == "users" else level.rate_rps, unit)
    if level.unstaged and arrays.ttft_sent is not None:  # open loop without a stage: its users say nothing of its load
        held = LoadHeld(None, None)
    metrics = {k: estimate(k, [f], f) for k, f in figures.items() if f.value is not None}
    notes = [stalled_note(level, arrays.stalled)] if arrays.stalled else []
    if arrays.ok_without_tokens:
        notes.append(f"{level.label}: some successful requests have no token counts; token rates not computed")
    return LevelEstimates(
        level, metrics, arrays.duration_s, arrays.error_counts, tuple(notes), held.measured, held.reached
    )


def levels_from_table(
    table: pa.Table, unstaged_level: Level | None = None, stalls: Sequence[Stall] = ()
) -> list[LevelEstimates]:
    """Group by stage level and estimate each; rows without a stage become `unstaged_level` (default: an unstaged
    level, which the grader takes as the contract's load, saying so). `stalls`: the run's (run_status.json)."""
    phase = table.column("stage_phase")
    table = table.filter(pc.invert(pc.fill_null(pc.is_in(phase, pa.array(EXCLUDED_PHASES)), False)))
    stage, unit = table.column("stage_level"), table.column("stage_unit")
    out = []
    keys = set(zip(stage.to_pylist(), unit.to_pylist(), strict=True))
    for key, key_unit in sorted(keys, key=lambda k: (k[0] is None, k[1] or "", k[0] or 0)):
        same_unit = pc.is_null(unit) if key_unit is None else pc.equal(unit, key_unit)
        mask = pc.is_null(stage) if key is None else pc.and_(pc.equal(stage, key), same_unit)
        rows = table.filter(pc.fill_null(mask, False))
        level = Level.of_stage(key, key_unit) if key is not None else (unstaged_level or Level())
        est = level_estimates(rows, level, stalls)
        repeats = {r for r in rows.column("stage_repeat").to_pylist() if r is not None}
        if len(repeats) > 1:
            note = (
                f"{level.label}: {len(repeats)} repeats in one run were pooled into one sample (n = 1); "
                "run `slabench aggregate` for per-repeat intervals"
            )
            est = dataclasses.replace(est, notes=(*est.notes, note))
        out.append(est)
    return out


def levels_from_records(records: Iterable[RequestRecord], unstaged_level: Level | None = None) -> list[LevelEstimates]:
    return levels_from_table(table_from_records(records), unstaged_level)
