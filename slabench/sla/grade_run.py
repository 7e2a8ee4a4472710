"""Grade what a run left on disk: the glue between files and the pure grader (used by `slabench grade`, the
Locust-side hook, and `slabench sweep --sla`).

What a RUN_DIR may hold, in the order they are tried:
1. ``summary.json`` — the aggregator's per-level summary of a sweep (repeats, intervals);
2. a records file (``records.jsonl`` / ``records.parquet``), or RUN_DIR *is* one — a single plain run, estimated
   directly from the records (n = 1, "single run" in every verdict);
3. a sweep tree of runs without a summary — aggregated on the spot with `slabench.analysis.aggregate.aggregate`.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, replace
from pathlib import Path

from slabench.analysis.aggregate import aggregate
from slabench.analysis.columns import read_table, records_sha256
from slabench.analysis.recheck import recheck
from slabench.analysis.summary import SweepSummary
from slabench.core.errors import ExitCode, UserError
from slabench.evidence.provenance import instance_type_warning, replicas_warning
from slabench.evidence.run_status import Saturation, run_evidence, run_stalls, saturation_reasons
from slabench.sla.contract import LoadedContract, load_contract
from slabench.sla.estimates import Level, LevelEstimates, levels_from_summary
from slabench.sla.grade import EXIT_CODES, Verdict, grade
from slabench.sla.render import verdict_markdown
from slabench.sla.single_run import levels_from_table
from slabench.sla.verdict_file import verdict_document

RECORD_NAMES = ("records.jsonl", "records.parquet", "records.ndjson")


@dataclass(frozen=True)
class RunInput:
    source: str  # what was read, for the verdict
    levels: list[LevelEstimates]
    single_run: bool
    incomplete: tuple[str, ...] = ()  # why the run cannot stand for its load (no PASS, exit 4)
    saturation: tuple[tuple[str, Saturation], ...] = ()  # per run: how starved the machine was (the contract judges)
    records_sha256: tuple[tuple[str, str], ...] = ()  # (records file, its sha256): what the figures come from


def _is_records(p: Path) -> bool:
    return p.suffix in (".jsonl", ".ndjson", ".parquet") and p.exists()


def read_single_run(path: Path, unstaged_level: Level | None = None, merge_runs: bool = False) -> RunInput:
    table = read_table(path)
    if table.num_rows == 0:
        raise UserError(f"{path}: no records; nothing to grade (did the run send any request?)")
    run_ids = sorted(x for x in table.column("run_id").unique().to_pylist() if x is not None)
    if len(run_ids) > 1 and not merge_runs:  # e.g. a --records path reused with --append
        shown = ", ".join(run_ids[:5]) + (f", … ({len(run_ids) - 5} more)" if len(run_ids) > 5 else "")
        raise UserError(
            f"{path}: holds {len(run_ids)} runs ({shown}); a verdict is about one run — grade each run's own records, "
            "or grade them as one with --merge-runs (locust: --sla-merge-runs)"
        )
    levels = levels_from_table(table, unstaged_level, run_stalls(path.parent))
    incomplete, saturation = run_evidence(path.parent)
    sha = records_sha256(path)
    return RunInput(str(path), levels, True, tuple(incomplete), (("the run", saturation),), ((str(path), sha),))


def read_run(run_dir: str | Path, unstaged_level: Level | None = None, merge_runs: bool = False) -> RunInput:
    p = Path(run_dir)
    if not p.exists():
        raise UserError(f"{p}: no such run directory")
    if _is_records(p) and not (p / "summary.json").exists():
        return read_single_run(p, unstaged_level, merge_runs)
    if (p / "summary.json").is_file():  # a cache of the records: checked against them, graded from them
        return _summary_input(str(p / "summary.json"), recheck(p / "summary.json"))
    for name in RECORD_NAMES:
        if (p / name).exists():
            return read_single_run(p / name, unstaged_level, merge_runs)
    return _summary_input(f"{p} (aggregated)", aggregate(p))


def _summary_input(source: str, summary: SweepSummary) -> RunInput:
    hashes = {r.path: r.records_sha256 for lv in summary.levels for r in lv.runs if r.records_sha256 is not None}
    return RunInput(
        source, levels_from_summary(summary), False, tuple(summary.incomplete), tuple(summary.saturation),
        tuple(hashes.items()),
    )  # fmt: skip


def grade_summary(loaded: LoadedContract, summary: SweepSummary, source: str) -> Verdict:
    """Grade an aggregated sweep already in memory."""
    return grade_input(loaded, _summary_input(source, summary))


def grade_input(loaded: LoadedContract, run: RunInput) -> Verdict:
    loaded.check_tasks_ran(run.levels)
    policy = loaded.contract.measurement
    saturated = [f"{where}: {why}" for where, s in run.saturation for why in saturation_reasons(s, policy)]
    verdict = grade(
        loaded.contract, loaded.replica, run.levels, source=run.source, sla_file=str(loaded.path),
        incomplete=[*run.incomplete, *saturated],
    )  # fmt: skip
    return replace(verdict, records_sha256=dict(run.records_sha256))


def grade_run_dir(
    run_dir: str | Path, sla: str | Path | LoadedContract, instance_type: str | None = None, merge_runs: bool = False
) -> Verdict:
    """Load the contract (unless given loaded) and the run, and grade. Raises UserError on bad input; a records file
    holding several runs is graded as one only with `merge_runs`."""
    loaded = sla if isinstance(sla, LoadedContract) else load_contract(sla)
    if instance_type:
        loaded = loaded.with_instance_type(instance_type)
    return with_provenance_notes(grade_input(loaded, read_run(run_dir, merge_runs=merge_runs)), loaded, run_dir)


def with_provenance_notes(verdict: Verdict, loaded: LoadedContract, run_path: str | Path) -> Verdict:
    """The run's recorded hardware and replicas (slabench.evidence.provenance, in its sweep.json or run_status.json
    beside `run_path`) against the contract's: a WARNING note for each that differs."""
    deployment = loaded.contract.deployment
    warnings = [
        w
        for w in (
            instance_type_warning(deployment.instance_type, run_path),
            replicas_warning(deployment.replicas, run_path),
        )
        if w
    ]
    return replace(verdict, notes=[*verdict.notes, *warnings]) if warnings else verdict


def exit_code(verdict: Verdict) -> int:
    """0 PASS, 1 CONDITIONAL, 2 FAIL; 4 when the evidence is incomplete, whatever the checks said (3 is for invalid
    input, raised as UserError). See `slabench.core.errors.ExitCode`."""
    return ExitCode.INCOMPLETE if verdict.incomplete else EXIT_CODES[verdict.status]


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
    _atomic_write(out, json.dumps(verdict_document(verdict), indent=2, ensure_ascii=False) + "\n")
    _atomic_write(d / "verdict.md", verdict_markdown(verdict))
    return out
