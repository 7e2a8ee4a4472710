"""Grade what a run left on disk: the glue between files and the pure grader (used by `slabench grade`, the
Locust-side hook, and `slabench sweep --sla`).

What a RUN_DIR may hold, in the order they are tried:
1. ``summary.json`` — the aggregator's per-level summary of a sweep (repeats, intervals);
2. a records file (``records.jsonl`` / ``records.parquet``), or RUN_DIR *is* one — a single plain run, estimated
   directly from the records (n = 1, "single run" in every verdict);
3. a sweep tree of runs without a summary — aggregated on the spot with `analysis.aggregate_runs.aggregate`.
"""

from __future__ import annotations

import importlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

from sla.contract import LoadedContract, load_contract
from sla.estimates import Level, LevelEstimates, levels_from_summary
from sla.grade import EXIT_CODES, Verdict, grade
from sla.render import verdict_markdown
from sla.single_run import levels_from_records
from slabench.errors import UserError
from slabench.sinks import read_records

RECORD_NAMES = ("records.jsonl", "records.parquet", "records.ndjson")


@dataclass(frozen=True)
class RunInput:
    source: str  # what was read, for the verdict
    levels: list[LevelEstimates]
    single_run: bool
    caveat: str | None = None  # why the evidence is incomplete (caps a PASS at CONDITIONAL)


def _degraded(records_path: Path) -> str | None:
    """The Locust bridge writes run_status.json beside the records; a lost worker means lost records."""
    status_path = records_path.parent / "run_status.json"
    try:
        status = json.loads(status_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(status, dict) or not status.get("degraded"):
        return None
    reasons = list(status.get("incomplete_reasons") or [])
    if reasons:  # what the run says about itself, and how its records compare with the server's count
        accounting = status.get("accounting") or {}
        if accounting.get("unrecorded"):
            reasons.append(accounting["note"])
        return f"the run is degraded ({status_path}): {'; '.join(reasons)}"
    lost = status.get("lost_workers") or status.get("workers_without_final_batch") or []
    return f"the run is degraded ({status_path}): records of lost worker(s) {lost} are missing"


def _is_records(p: Path) -> bool:
    return p.suffix in (".jsonl", ".ndjson", ".parquet") and p.exists()


def read_single_run(path: Path, unstaged_level: Level | None = None) -> RunInput:
    records = read_records(path)
    if not records:
        raise UserError(f"{path}: no records; nothing to grade (did the run send any request?)")
    return RunInput(str(path), levels_from_records(records, unstaged_level), True, _degraded(path))


def _aggregate(run_dir: Path) -> RunInput:
    try:
        mod = importlib.import_module("analysis.aggregate_runs")
    except ImportError:
        mod = None
    if mod is None or not hasattr(mod, "aggregate"):
        raise UserError(
            f"{run_dir}: no summary.json and no records file here; point at a run directory (records.jsonl) or a "
            "sweep directory with its summary.json (`slabench aggregate RUN_DIR` writes it)"
        )
    summary = mod.aggregate(run_dir)
    return RunInput(f"{run_dir} (aggregated)", levels_from_summary(summary, str(run_dir)), False)


def read_run(run_dir: str | Path, unstaged_level: Level | None = None) -> RunInput:
    p = Path(run_dir)
    if not p.exists():
        raise UserError(f"{p}: no such run directory")
    if _is_records(p) and not (p / "summary.json").exists():
        return read_single_run(p, unstaged_level)
    summary = p / "summary.json"
    if summary.is_file():
        try:
            data = json.loads(summary.read_text(encoding="utf-8"))
        except json.JSONDecodeError as e:
            raise UserError(f"{summary}:{e.lineno}: not valid JSON ({e.msg})") from None
        return RunInput(str(summary), levels_from_summary(data, str(summary)), False)
    for name in RECORD_NAMES:
        if (p / name).exists():
            return read_single_run(p / name, unstaged_level)
    return _aggregate(p)


def grade_input(loaded: LoadedContract, run: RunInput) -> Verdict:
    loaded.check_tasks_ran(run.levels)
    return grade(
        loaded.contract, loaded.replica, run.levels, source=run.source, sla_file=str(loaded.path), caveat=run.caveat
    )


def grade_run_dir(run_dir: str | Path, sla: str | Path | LoadedContract, instance_type: str | None = None) -> Verdict:
    """Load the contract (unless given loaded) and the run, and grade. Raises UserError on bad input."""
    loaded = sla if isinstance(sla, LoadedContract) else load_contract(sla)
    if instance_type:
        loaded = loaded.with_instance_type(instance_type)
    return grade_input(loaded, read_run(run_dir))


def exit_code(verdict: Verdict) -> int:
    """0 PASS, 1 CONDITIONAL, 2 FAIL (3 is for invalid input, raised as UserError)."""
    return EXIT_CODES[verdict.status]


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def write_verdict(verdict: Verdict, directory: str | Path) -> Path:
    """Write ``verdict.json`` (and ``verdict.md`` for the report) into `directory`; return the JSON path."""
    d = Path(directory)
    if d.is_file() or d.suffix == ".parquet":  # graded a records file: write beside it
        d = d.parent
    d.mkdir(parents=True, exist_ok=True)
    out = d / "verdict.json"
    _atomic_write(out, json.dumps(verdict.to_dict(), indent=2, ensure_ascii=False) + "\n")
    _atomic_write(d / "verdict.md", verdict_markdown(verdict))
    return out
