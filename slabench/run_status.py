"""`run_status.json`: what the Locust process knows about a run beyond its records — lost workers, requests not
sent, a saturated load generator — and the one reader that turns it (and the server's own saturation signals in
`server_metrics.jsonl`) into the reasons a run's evidence is incomplete.

A run with any such reason never PASSes and exits 4 (`ExitCode.INCOMPLETE`): latencies measured on a saturated
machine measure the machine, and a run with lost records cannot stand for the load it claims.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from slabench.errors import UserError
from slabench.scrape import FILE_NAME as SCRAPES
from slabench.scrape import read_scrapes

FILE_NAME = "run_status.json"
KIND = "slabench.run_status"
SCHEMA_VERSION = 1
# The embedded simulator adds up how late its engine steps ran (each more than 5 ms after it was due: its CPU was
# starved). Late by more than this share of the run's time in all → its latencies measured the machine.
SIM_LATE_SHARE = 0.02


class Saturation(BaseModel):
    """Signs, seen by the Locust process, that the load generator ran out of CPU."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    cpu_samples_over_90: int = 0  # Locust's own 5-second CPU samples above 90 % (local or master process)
    worker_cpu_over_90: bool = False  # a worker reported > 90 % (Locust's own flag on the master)
    late_sends: int = 0  # open loop: requests sent later than `late_bound_s` after they were scheduled
    open_loop_sends: int = 0
    late_bound_s: float = 0.0

    def reasons(self, late_share: float) -> list[str]:
        out = []
        if self.cpu_samples_over_90 >= 2:
            out.append(f"the load generator's CPU was above 90 % in {self.cpu_samples_over_90} samples (5 s each)")
        if self.worker_cpu_over_90:
            out.append("a Locust worker's CPU was above 90 %")
        if self.open_loop_sends and self.late_sends > late_share * self.open_loop_sends:
            out.append(
                f"{self.late_sends} of {self.open_loop_sends} open-loop requests went out more than "
                f"{self.late_bound_s:g} s after their schedule"
            )
        return out


class RunStatus(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    kind: str = KIND
    schema_version: int = SCHEMA_VERSION
    run_id: str
    records: int
    outcomes: dict[str, int] = Field(default_factory=dict)
    degraded: bool = False
    lost_workers: dict[str, Any] | list[str] = Field(default_factory=list)  # id → when and what was in flight
    workers_without_final_batch: list[str] = Field(default_factory=list)
    saturation: Saturation = Field(default_factory=Saturation)

    def reasons(self, late_share: float = 0.01) -> list[str]:
        out = []
        if self.degraded:
            lost = sorted({*self.lost_workers, *self.workers_without_final_batch})
            out.append(f"lost worker(s) {', '.join(lost) or '?'}: their in-flight requests have no measurement")
        not_sent = self.outcomes.get("not_sent", 0)
        if not_sent:
            out.append(f"{not_sent} scheduled requests were never sent")
        if self.records == 0:
            out.append("the run answered no request (0 records)")
        saturated = self.saturation.reasons(late_share)
        if saturated:
            out.append("saturated: " + "; ".join(saturated) + " — latencies measure the machine, not the model")
        return out


def write_run_status(directory: Path, status: RunStatus) -> Path:
    path = directory / FILE_NAME
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(status.model_dump_json(indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)
    return path


def read_run_status(directory: Path) -> RunStatus | None:
    """The run's status, None when the run left none (a run of an older slabench, or not a Locust run)."""
    path = directory / FILE_NAME
    try:
        data: Any = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (UnicodeDecodeError, ValueError) as e:
        raise UserError(f"{path}: not valid JSON ({e}); was it edited by hand?") from None
    kind = data.get("kind", KIND) if isinstance(data, dict) else None  # files of before `kind` was written
    if kind != KIND or data.get("schema_version") != SCHEMA_VERSION:
        raise UserError(
            f"{path}: not a {KIND} file of schema_version {SCHEMA_VERSION} "
            f"(kind {kind!r}, schema_version {data.get('schema_version') if isinstance(data, dict) else None!r})"
        )
    try:
        return RunStatus.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        raise UserError(f"{path}: {'.'.join(map(str, err['loc']))}: {err['msg']}") from None


def simulator_reasons(directory: Path) -> list[str]:
    """The embedded simulator's own sign of a starved CPU: engine steps that ran late (its /metrics, as scraped
    into server_metrics.jsonl). A real vLLM does not export these, so this says nothing about one."""
    path = directory / SCRAPES
    if not path.exists():
        return []
    scrapes = read_scrapes(path)
    if len(scrapes) < 2:
        return []

    def rise(name: str) -> float:
        return scrapes[-1].get("counters", {}).get(name, 0.0) - scrapes[0].get("counters", {}).get(name, 0.0)

    span = scrapes[-1]["t"] - scrapes[0]["t"]
    late_s, late_steps = rise("slabench_sim_engine_late_seconds_total"), rise("slabench_sim_engine_late_steps_total")
    if span > 0 and late_s > SIM_LATE_SHARE * span:
        return [
            f"saturated: the simulator's engine steps ran {late_s:.2f} s late in all over {span:.1f} s "
            f"({late_steps:.0f} late steps: its CPU was starved) — latencies measure the machine, not the model"
        ]
    return []


def incomplete_reasons(directory: Path) -> list[str]:
    """Every reason the run in `directory` did not measure what it claims (empty: complete)."""
    status = read_run_status(directory)
    return [*(status.reasons() if status else []), *simulator_reasons(directory)]
