"""The master's or local runner's account of a finished run: `run_status.json` beside the records (counts, the
server's count, whether the run is complete, the signs of a saturated load generator and what served the run) and
the summary line."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from slabench.evidence.accounting import incomplete_reasons, reconcile, server_received
from slabench.evidence.run_status import (
    MeasurementPolicy,
    RunStatus,
    Stall,
    saturation_reasons,
    simulator_figures,
    write_run_status,
)
from slabench.evidence.saturation import SaturationWatch
from slabench.evidence.scrape import FILE_NAME as SCRAPE_FILE
from slabench.evidence.scrape import read_scrapes
from slabench.locust.intake import MasterIntake
from slabench.locust.record_store import RecordStore
from slabench.locust.worker_watch import WorkerWatch


def write_status(
    directory: Path,
    run_id: str,
    worker_id: str,
    store: RecordStore,
    intake: MasterIntake | None,
    workers: WorkerWatch,
    saturation: SaturationWatch,
    stopped: str | None,
    provenance: dict[str, Any] | None,
) -> RunStatus:
    """Write `run_status.json` in `directory` and return it. Its reasons make the run exit 4 (never a pass)."""
    scrapes = read_scrapes(directory / SCRAPE_FILE, run_id)
    tally = store.tally
    facts: dict[str, Any] = {
        "run_id": run_id,
        "records": tally.records,
        "outcomes": dict(tally.outcomes),
        "lost_workers": intake.lost_workers if intake else {},
        "workers_without_final_batch": intake.missing_finals if intake else [],
        "workers_missing_then_back": workers.came_back,
        "max_heartbeat_gap_s": {k: round(v, 2) for k, v in workers.heartbeat_gap.items()},
        "duplicates_dropped": store.duplicates,
        "accounting": reconcile(tally, server_received(scrapes)),
    }
    reasons = incomplete_reasons(tally, facts)
    figures = saturation.snapshot(intake.starvation if intake else None).model_copy(update=simulator_figures(scrapes))
    saturated = saturation_reasons(figures, MeasurementPolicy())
    starvation = intake.starvation if intake else {worker_id: saturation.starvation.read()}
    stalls = [Stall(worker=w, start=a, end=b) for w, s in starvation.items() for a, b in s.stalls]
    status = RunStatus(
        **facts,
        incomplete_reasons=reasons,
        degraded=bool(reasons or saturated or stalls),  # whatever makes the run exit 4
        stopped=stopped,
        saturation=figures,
        saturated=saturated,
        stalls=stalls,
        provenance=provenance,
    )
    write_run_status(directory, status)
    return status


def summary_line(count: int, path: Path, outcomes: Counter[str]) -> str:
    parts = ", ".join(f"{k} {v}" for k, v in sorted(outcomes.items(), key=lambda kv: -kv[1]))
    return f"{count} records → {path} ({parts or 'none'})"
