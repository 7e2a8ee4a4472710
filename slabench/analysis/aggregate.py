"""Repeated runs → per level: mean ± std, n, 95 % Student-t interval, CV, beside the pooled view.

    from slabench.analysis.aggregate import aggregate
    summary = aggregate("runs/default-20250101-120000")       # a `slabench sweep` directory
    summary.level(8).metrics["ttft_p95"].ci95_high

Input layouts:
- a sweep tree: ``RUN_DIR/<level>/<repeat>/records.jsonl`` (or ``records.parquet``), each run with the
  ``manifest.json`` `slabench sweep` writes (warm-up seconds, status); ``RUN_DIR/sweep.json`` when present;
- one records file (or a directory holding ``records.jsonl``/``records.parquet``) from a stepped load shape, whose
  records carry ``stage_level`` / ``stage_unit`` / ``stage_repeat``: each (level, repeat) is one run, and the levels
  are users or requests/s as the records' unit says.

Two views per figure, always labelled: *across repeats* (the figure computed per run, then mean/std/CI over the
runs: how much a run-to-run result moves) and *pooled* (every counted request of the level together, rates over
the summed measured windows). The schema is written out in docs/analysis.md.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from slabench.analysis import cliff as cliff_mod
from slabench.analysis.columns import RunArrays, read_table, records_sha256, run_arrays
from slabench.analysis.figures import Figure, Slo, load_held, metric_values, quantile_of
from slabench.analysis.stats import (
    CONFIDENCE,
    MIN_SAMPLES,
    PERCENTILE_METHOD,
    min_samples_for,
    proportion_interval,
    spread,
)
from slabench.analysis.summary import (
    Estimate,
    LevelSummary,
    LevelUnit,
    RunSummary,
    SweepSummary,
    load_summary,
    not_reached_line,
    summary_json,
)
from slabench.core.errors import UserError
from slabench.core.record import StageUnit
from slabench.core.schema import SWEEP, SWEEP_RUN
from slabench.evidence.run_status import run_evidence, run_stalls

__all__ = ["SweepSummary", "aggregate", "load_summary", "require_ci", "summary_json"]

RECORD_FILES = ("records.jsonl", "records.parquet")


METHOD = {
    "percentiles": f"exact over records: numpy method={PERCENTILE_METHOD!r} (Hyndman-Fan type 7)",
    "latencies_over": "OK requests only (TTFT = first_token - sent; ITL per token; TPOT; E2E = end - sent)",
    "rates_over": "error/incomplete rate: non-dropped requests; throughput and tokens/s: OK requests per second "
    "of the measured window (first counted send to last counted end)",
    "across_repeats": "mean, sample std (n-1), n, Student-t 95% interval and CV of the per-run values; "
    "n = 1 gives null std/CI/CV, and identical values in every run give no interval (cannot estimate)",
    "proportions": "error/incomplete rate, goodput ratio, quality shares: the pooled proportion as the mean, with a "
    "Clopper-Pearson interval on the pooled counts divided by the between-run Pearson dispersion phi >= 1",
    "open_loop_ttft": "records with `scheduled` (open loop): ttft_* from scheduled (user-visible), "
    "ttft_sent_* from sent",
    "pooled": "all counted requests of the level together; rates over the summed windows of its runs",
    "confidence": CONFIDENCE,
    "stalls": "requests in flight while their load generator was frozen (run_status.json's stalls) are counted and "
    "left out of every latency figure (and of goodput)",
    "warmup": "records with stage_phase warmup/cooldown when the run has phases, else those sent in the run's "
    "first warmup_s seconds",
    "low_samples": f"a run's value rests on fewer than max({MIN_SAMPLES}, 100/(100-q)) requests (p99: 100)",
}


# -- discovery ---------------------------------------------------------------------------------------------------
@dataclass
class RunSource:
    level: int | float  # users, or requests/s (`unit`)
    repeat: int
    path: Path
    warmup_s: float
    run_id: str | None = None
    table: pa.Table | None = None  # already read (stepped single-file layout)
    unit: LevelUnit = "users"
    sha256: str | None = None  # of the records file, once read


def _int_dirs(p: Path) -> list[tuple[int, Path]]:
    out = []
    for d in p.iterdir():
        if d.is_dir() and d.name.isdigit():
            out.append((int(d.name), d))
    return sorted(out)


def _records_file(d: Path) -> Path | None:
    for name in RECORD_FILES:
        if (d / name).exists():
            return d / name
    return None


def discover(
    run_dir: Path, warmup_s: float | None, warnings: list[str]
) -> tuple[list[RunSource], dict[str, Any] | None]:
    if run_dir.is_file():
        return _stepped(run_dir, warmup_s), None
    if not run_dir.is_dir():
        raise UserError(f"{run_dir}: no such directory; pass a sweep directory (runs/<sweep-id>) or a records file")
    sweep = SWEEP.read_json(run_dir / "sweep.json", missing_ok=True)
    if sweep is not None:
        _checked(sweep, run_dir / "sweep.json", SWEEP_FIELDS)
    sources = sweep_runs(run_dir, warmup_s, warnings)
    if not sources and (single := _records_file(run_dir)) is not None:
        return _stepped(single, warmup_s), sweep
    if not sources and sweep is None:
        raise UserError(
            f"{run_dir}: no runs found (expected <level>/<repeat>/records.jsonl from `slabench sweep`, "
            "or a records file from a stepped shape)"
        )
    return sources, sweep


def sweep_runs(run_dir: Path, warmup_s: float | None, warnings: list[str]) -> list[RunSource]:
    """The finished runs of a sweep tree (<level>/<repeat>/ with a complete manifest and a records file), read from
    their manifests alone; what is left out, and why, goes to `warnings`."""
    sources = []
    for level, ldir in _int_dirs(run_dir):
        for repeat, rdir in _int_dirs(ldir):
            manifest = SWEEP_RUN.read_json(rdir / "manifest.json", missing_ok=True)
            if manifest is None and _records_file(rdir) is not None:
                raise UserError(
                    f"{rdir / 'manifest.json'}: missing, so whether run {level}/{repeat} finished is unknown; re-run "
                    f"it with `slabench sweep --config <its config> --resume {run_dir}`, or remove {rdir}"
                )
            manifest = _checked(manifest or {}, rdir / "manifest.json", MANIFEST_FIELDS)
            status = manifest.get("status", "complete")
            where = f"{level}/{repeat}"
            if status != "complete":
                warnings.append(f"run {where} left out: its manifest says {status!r} (re-run with --resume)")
                continue
            path = _records_file(rdir)
            if path is None:
                warnings.append(f"run {where} left out: no records file")
                continue
            w = warmup_s if warmup_s is not None else float(manifest.get("warmup_s", 0.0))
            sources.append(RunSource(level, repeat, path, w, manifest.get("run_id")))
    return sources


def _is_count(v: Any) -> bool:
    return type(v) is int and v >= 0


# The fields of sweep.json and a run's manifest.json the summary is built from, as `slabench sweep` writes them.
SWEEP_FIELDS = (("levels", lambda v: isinstance(v, list) and all(map(_is_count, v)), "a list of user counts"),)
MANIFEST_FIELDS = (
    ("status", lambda v: isinstance(v, str), "text"),
    ("run_id", lambda v: v is None or isinstance(v, str), "text"),
    ("warmup_s", lambda v: type(v) in (int, float) and v >= 0, "a non-negative number of seconds"),
)


def _checked(doc: dict[str, Any], path: Path, fields: tuple[tuple[str, Any, str], ...]) -> dict[str, Any]:
    """`doc`, when its `fields` are of the types `slabench sweep` writes; else one line naming the field."""
    for key, ok, what in fields:
        if key in doc and not ok(doc[key]):
            raise UserError(f"{path}: {key} is {doc[key]!r}; it is {what} — was the file edited?")
    return doc


def _stepped(path: Path, warmup_s: float | None) -> list[RunSource]:
    """One records file of a stepped shape: a run per (stage_level, stage_repeat), in the records' stage_unit."""
    table = read_table(path)
    if table.num_rows == 0:
        raise UserError(f"{path}: no records")
    levels = table.column("stage_level")
    if levels.null_count == table.num_rows:
        raise UserError(
            f"{path}: the records carry no stage_level; aggregate a sweep directory (slabench sweep) or records "
            "from a stepped load shape"
        )
    staged = table.filter(pc.is_valid(levels))
    units = {StageUnit(u) for u in staged.column("stage_unit").unique().to_pylist()}
    if len(units) > 1:
        raise UserError(
            f"{path}: the records mix levels in users (closed loop) and in requests/s (open loop); aggregate the "
            "runs of each kind of load apart"
        )
    (unit,) = units
    sha = records_sha256(path)
    load_unit: LevelUnit = "req/s" if unit.load_unit == "req/s" else "users"  # unit.load_unit, as a LevelUnit
    repeats = pc.fill_null(table.column("stage_repeat"), 1)
    pairs = sorted(
        {(int(a), int(b)) for a, b in zip(levels.to_pylist(), repeats.to_pylist(), strict=True) if a is not None}
    )
    out = []
    for level, repeat in pairs:
        mask = pc.and_(pc.equal(levels, level), pc.equal(repeats, repeat))
        sub = table.filter(pc.fill_null(mask, False))
        run_ids = sub.column("run_id").unique().to_pylist()
        run_id = run_ids[0] if run_ids else None
        out.append(RunSource(unit.load(level), repeat, path, warmup_s or 0.0, run_id, sub, load_unit, sha))
    return out


# -- aggregation -------------------------------------------------------------------------------------------------
def _run_arrays(src: RunSource) -> RunArrays:
    table = src.table if src.table is not None else read_table(src.path)
    if src.sha256 is None:
        src.sha256 = records_sha256(src.path)
    src.table = None  # free the raw columns; only the per-request arrays are kept
    return run_arrays(table, src.warmup_s, run_stalls(src.path.parent))


def estimate(key: str, per_run: list[Figure], pooled: Figure) -> Estimate:
    """One metric at one level from its per-run figures and the pooled one. Proportions: the pooled share with its
    proportion interval; everything else: the across-run mean with a Student-t interval."""
    s = spread([f.value for f in per_run])
    need = min_samples_for(quantile_of(key))
    low = pooled.samples < need or any(f.samples < need for f in per_run)
    if pooled.counts is not None:
        p = proportion_interval([f.counts for f in per_run if f.counts is not None])
        return Estimate(
            mean=p.value, std=s.std, n=s.n, ci95_low=p.low, ci95_high=p.high, cv=s.cv, pooled=pooled.value,
            samples=pooled.samples, low_samples=low, interval=p.interval,
        )  # fmt: skip
    return Estimate(
        mean=s.mean, std=s.std, n=s.n, ci95_low=s.ci_low, ci95_high=s.ci_high, cv=s.cv, pooled=pooled.value,
        samples=pooled.samples, low_samples=low, interval=s.interval,
    )  # fmt: skip


def _level(
    level: int | float, runs: list[tuple[RunSource, RunArrays]], slo: Slo | None, unit: LevelUnit
) -> LevelSummary:
    per_run = [metric_values([a], slo) for _, a in runs]
    pooled = metric_values([a for _, a in runs], slo) if runs else {}
    keys = list(pooled)
    for m in per_run:
        keys += [k for k in m if k not in keys]
    none = Figure(None, 0)
    metrics = {k: estimate(k, [m.get(k, none) for m in per_run], pooled.get(k, none)) for k in keys}
    errors: dict[str, int] = {}
    for _, a in runs:
        for k, v in a.error_counts.items():
            errors[k] = errors.get(k, 0) + v
    durations = [a.duration_s for _, a in runs if a.duration_s is not None]
    evidence = [run_evidence(src.path.parent) for src, _ in runs]  # run_status.json and the scrapes, once per run
    run_summaries = [
        RunSummary(
            repeat=src.repeat,
            run_id=src.run_id,
            path=str(src.path),
            records=a.records,
            excluded_warmup=a.excluded_warmup,
            warmup_rule=a.warmup_rule,
            counted=a.counted,
            stalled=a.stalled,
            duration_s=a.duration_s,
            error_counts=a.error_counts,
            metrics={k: f.value for k, f in m.items()},
            samples={k: f.samples for k, f in m.items()},
            incomplete=incomplete,
            saturation=saturation,
            records_sha256=src.sha256,
            measured_level=load_held([a], level, unit).measured,
        )
        for (src, a), m, (incomplete, saturation) in zip(runs, per_run, evidence, strict=True)
    ]
    held = load_held([a for _, a in runs], level, unit)
    return LevelSummary(
        level=level,
        measured_level=held.measured,
        level_reached=held.reached,
        n_runs=len(runs),
        requests=sum(a.counted for _, a in runs),
        duration_s=math.fsum(durations) if durations else None,
        error_counts=dict(sorted(errors.items(), key=lambda kv: -kv[1])),
        metrics=metrics,
        runs=run_summaries,
    )


def aggregate(
    run_dir: str | Path,
    slo: Slo | Mapping[str, float] | None = None,
    warmup_s: float | None = None,
    cliff_options: cliff_mod.CliffOptions | None = None,
) -> SweepSummary:
    """Aggregate a sweep directory (or a stepped records file) into a `SweepSummary`.

    `slo`: per-request SLOs for goodput (None: no goodput figures). `warmup_s`: override the run manifests'
    warm-up seconds (None: the manifests', or 0 without one)."""
    root = Path(run_dir)
    warnings: list[str] = []
    sources, sweep = discover(root, warmup_s, warnings)
    slo_obj = slo if isinstance(slo, Slo) or slo is None else Slo.from_mapping(slo)
    unit = sources[0].unit if sources else "users"
    by_level: dict[int | float, list[tuple[RunSource, RunArrays]]] = {}
    for level in (sweep or {}).get("levels", []) if unit == "users" else ():  # a sweep's levels are users
        by_level.setdefault(int(level), [])
    # Arrow reads and numpy's partitions release the GIL: threads use every core for the big steps.
    with ThreadPoolExecutor(max_workers=min(4, os.cpu_count() or 1)) as pool:
        for src, arrays in zip(sources, pool.map(_run_arrays, sources), strict=True):
            by_level.setdefault(src.level, []).append((src, arrays))
        order = sorted(by_level)
        for level in order:
            if not by_level[level] or all(a.counted == 0 for _, a in by_level[level]):
                warnings.append(f"level {level:g}: no counted requests")
        jobs = [sorted(by_level[lv], key=lambda ra: ra[0].repeat) for lv in order]
        levels = list(
            pool.map(lambda lv_runs: _level(lv_runs[0], lv_runs[1], slo_obj, unit), zip(order, jobs, strict=True))
        )
    short = [lv for lv in levels if lv.level_reached is False]
    warnings += [not_reached_line(f"{lv.level:g} {unit}", lv.measured_level, unit) for lv in short]
    opts = cliff_options or cliff_mod.CliffOptions()
    cliff = cliff_mod.find_cliff([(lv.level, lv.metrics) for lv in levels], opts, unit)
    return SweepSummary(
        source=str(root),
        method=METHOD,
        level_unit=unit,
        levels=levels,
        cliff=cliff,
        sweep=sweep,
        slo=slo_obj.to_dict() if slo_obj else None,
        warmup_s=warmup_s,
        warnings=warnings,
    )


def require_ci(summary: SweepSummary) -> None:
    """Raise when a confidence interval was asked for but some level has fewer than two repeats."""
    thin = [f"{summary.label(lv.level)} (n={lv.n_runs})" for lv in summary.levels if lv.n_runs < 2]
    if thin:
        raise UserError(
            f"confidence intervals need at least 2 repeats per level; level(s) {', '.join(thin)} have fewer — "
            "run the sweep with repeats ≥ 2 (or drop --require-ci)"
        )
