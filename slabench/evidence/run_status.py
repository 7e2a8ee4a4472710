"""`run_status.json`: what the Locust process knows about a run beyond its records — lost workers, requests not
sent, the signs of a saturated load generator — plus the embedded simulator's own sign of a starved CPU (its late
engine steps, and its event loop's late wake-ups while idle, scraped into `server_metrics.jsonl`).

Two kinds of evidence come out of a run directory, kept apart on purpose:
- `incomplete_reasons`: facts that make a run unable to stand for its load (a lost worker, requests never sent,
  nothing answered). No policy: any one of them makes the run incomplete.
- `saturation_figures`: how saturated the machine was, as measured numbers. The SLA contract's `measurement` policy
  judges them at grading time (`saturation_reasons`), because how much starvation a measurement tolerates is the
  contract's call.
A run with any reason never PASSes and exits 4 (`ExitCode.INCOMPLETE`); so does a plain run (no contract) whose
load generator was frozen (`stalls`) or that the default policy finds saturated (`saturated`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from slabench.core.errors import UserError
from slabench.core.schema import RUN_STATUS
from slabench.evidence.scrape import FILE_NAME as SCRAPES
from slabench.evidence.scrape import read_scrapes

FILE_NAME = "run_status.json"


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")  # a newer minor version only adds fields


class Saturation(_Model):
    """Signs of saturation, as measured numbers. The client side is written by the Locust process; the simulator's
    figures come from its /metrics."""

    cpu_samples_over_90: int = 0  # Locust's own 5-second CPU samples above 90 % (local or master process)
    worker_cpu_over_90: bool = False  # a worker reported > 90 % (Locust's own flag on the master)
    late_sends: int = 0  # open loop: requests sent later than `late_bound_s` after they were scheduled
    open_loop_sends: int = 0
    late_bound_s: float = 0.0
    sim_late_s: float = 0.0  # the embedded simulator: how late its engine steps (or, idle, its event loop) ran in all
    sim_span_s: float = 0.0  # over this much of the run
    sim_late_steps: int = 0
    # The load generator's event loop (slabench.evidence.starvation): its late wake-ups over the run, and its wait for
    # a CPU (Linux), in the local runner or the worker whose loop ran late the longest. loop_span_s 0: not measured.
    loop_late_s: float = 0.0
    loop_late_max_s: float = 0.0
    loop_span_s: float = 0.0
    cpu_wait_s: float = 0.0
    cpu_wait_runs: int = 0
    loop_where: str = ""  # a worker's id, or "" for the local runner


class Stall(_Model):
    """A stretch in which one load-generator process was frozen (`slabench.evidence.starvation`): the requests it had
    in flight then are left out of the latency figures (their latencies measure the freeze), and counted."""

    worker: str  # the records' worker_id ("local" for a local runner)
    start: float  # that process's time.perf_counter clock, the clock of its records' `sent` and `end`
    end: float

    @property
    def seconds(self) -> float:
        return self.end - self.start


LOOP_LATE_FLOOR_S = 0.25  # less lateness than this in all (a loop's, the simulator's) is a hiccup, in any run


class MeasurementPolicy(BaseModel):
    """How much saturation a measurement tolerates before its latencies are taken to measure the machine (the SLA
    contract's `measurement` block)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    # Defaults by keyword: type checkers only take `Field(default=...)` for one (policies are built with none given).
    max_cpu_samples_over_90: int = Field(
        default=1,
        ge=0,
        description="Locust CPU samples (5 s each) above 90 % a run may have; a worker's flag counts as one",
    )
    max_late_send_share: float = Field(
        default=0.01,
        ge=0,
        le=1,
        description="share of open-loop requests that may go out > 0.25 s after their schedule",
    )
    max_loop_late_share: float = Field(
        default=0.05,
        ge=0,
        le=1,
        description="the load generator's event loop: its wake-ups more than 5 ms late, in all, as a share of the "
        "run's time (judged once they come to more than 0.25 s)",
    )
    max_simulator_late_share: float = Field(
        default=0.05,
        ge=0,
        description="the embedded simulator's lateness, in all, as a share of the run's time: its late engine steps, "
        "and its event loop's late wake-ups while no request was in flight (judged once they come to more than "
        "0.25 s)",
    )


def saturation_reasons(s: Saturation, policy: MeasurementPolicy) -> list[str]:
    out = []
    cpu = s.cpu_samples_over_90 + int(s.worker_cpu_over_90)  # a worker's flag counts as one sample
    if cpu > policy.max_cpu_samples_over_90:
        worker = " (a worker's among them)" if s.worker_cpu_over_90 else ""
        out.append(f"the load generator's CPU was above 90 % in {cpu} samples of 5 s{worker}")
    if s.open_loop_sends and s.late_sends > policy.max_late_send_share * s.open_loop_sends:
        out.append(
            f"{s.late_sends} of {s.open_loop_sends} open-loop requests went out more than {s.late_bound_s:g} s "
            "after their schedule"
        )
    if s.loop_late_s > max(policy.max_loop_late_share * s.loop_span_s, LOOP_LATE_FLOOR_S):
        where = f" ({s.loop_where})" if s.loop_where else ""
        cause = (
            f"; it waited for a CPU {s.cpu_wait_s / s.loop_span_s:.0%} of the time: other processes had the cores"
            if s.cpu_wait_runs and s.cpu_wait_s > s.loop_late_s / 2
            else ""
        )
        out.append(
            f"the load generator's event loop{where} ran late {s.loop_late_s:.2f} s in all over {s.loop_span_s:.0f} s, "
            f"up to {s.loop_late_max_s * 1e3:.0f} ms at once{cause}"
        )
    if s.sim_span_s > 0 and s.sim_late_s > max(policy.max_simulator_late_share * s.sim_span_s, LOOP_LATE_FLOOR_S):
        out.append(
            f"the simulator ran {s.sim_late_s:.2f} s late in all over {s.sim_span_s:.1f} s "
            f"({s.sim_late_steps} late engine steps: its CPU was starved)"
        )
    if not out:
        return []
    return ["saturated: " + "; ".join(out) + " — latencies measure the machine, not the model"]


class RunStatus(BaseModel):
    """Fields a reader relies on are typed; what else a writer adds (recovery details, say) is kept as it is."""

    model_config = ConfigDict(frozen=True, extra="allow")

    kind: str = RUN_STATUS.kind
    schema_version: int = RUN_STATUS.major
    schema_minor: int = RUN_STATUS.minor
    run_id: str = ""
    records: int | None = None  # None: a file of before the count was written
    outcomes: dict[str, int] = Field(default_factory=dict)
    degraded: bool = False  # whatever makes the run exit 4: a reason below, `saturated`, `stalls`
    incomplete_reasons: list[str] | None = None  # the Locust process's own account (slabench.evidence.accounting)
    accounting: dict[str, Any] | None = None  # the records against the server's request counter
    stopped: str | None = None  # why the run was stopped early (e.g. every request refused), None when it was not
    lost_workers: dict[str, Any] | list[str] = Field(default_factory=list)  # id → when, and what was in flight
    workers_without_final_batch: list[str] = Field(default_factory=list)
    saturation: Saturation = Field(default_factory=Saturation)
    # The default measurement policy's judgement of `saturation` at the run's end (exit 4); a contract judges anew.
    saturated: list[str] = Field(default_factory=list)
    stalls: list[Stall] = Field(default_factory=list)  # where a load-generator process was frozen (minor 5)
    provenance: dict[str, Any] | None = (
        None  # what served the run (slabench.evidence.provenance), when it could be found
    )
    # False from the run's start until its final status replaces this one: a process killed mid-run leaves it so
    # (absent in files written before minor 3: those were written at the end, so finished)
    finished: bool = True

    def reasons(self) -> list[str]:
        """Why the run cannot stand for its load. Files of before `incomplete_reasons` was written: from their
        other fields."""
        if self.incomplete_reasons is not None:
            out = list(self.incomplete_reasons)
            if out and self.accounting and self.accounting.get("unrecorded"):
                out.append(self.accounting["note"])
        else:
            out = []
            if self.degraded:
                lost = sorted({*self.lost_workers, *self.workers_without_final_batch})
                out.append(f"lost worker(s) {', '.join(lost) or '?'}: their in-flight requests have no measurement")
            not_sent = self.outcomes.get("not_sent", 0)
            if not_sent:
                out.append(f"{not_sent} scheduled requests were never sent")
            if self.records == 0:
                out.append("the run answered no request (0 records)")
        if self.stopped:
            out.append(f"the run was stopped early: {self.stopped}")
        if not self.finished:
            out.append(
                "the run did not finish: its Locust process stopped before writing the run's final status (killed, "
                "or still running) — the records hold only part of the run"
            )
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
    data = RUN_STATUS.read_json(path, missing_ok=True)
    if data is None:
        return None
    try:
        return RunStatus.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        raise UserError(f"{path}: {'.'.join(map(str, err['loc']))}: {err['msg']}") from None


def run_stalls(directory: Path) -> list[Stall]:
    """The stalls of the run in `directory` (none when it left no status)."""
    status = read_run_status(directory)
    return list(status.stalls) if status is not None else []


def simulator_figures(scrapes: list[dict[str, Any]]) -> dict[str, float]:
    """The embedded simulator's lateness over the run (its /metrics, as scraped). A real vLLM does not
    export these: nothing is said about one."""
    if len(scrapes) < 2:
        return {}

    def rise(name: str) -> float:
        first: float = scrapes[0].get("counters", {}).get(name, 0.0)  # JSON: the scraper writes counters as floats
        last: float = scrapes[-1].get("counters", {}).get(name, 0.0)
        return last - first

    return {  # busy, its late steps; idle, its loop's late wake-ups (a frozen idle simulator has no step due)
        "sim_late_s": rise("slabench_sim_engine_late_seconds_total") + rise("slabench_sim_idle_late_seconds_total"),
        "sim_late_steps": int(rise("slabench_sim_engine_late_steps_total")),
        "sim_span_s": max(0.0, scrapes[-1]["t"] - scrapes[0]["t"]),
    }


def run_evidence(directory: Path) -> tuple[list[str], Saturation]:
    """The run in `directory`, read once: the facts that keep it from standing for its load (empty: none), and its
    saturation figures — the simulator's from `server_metrics.jsonl` when the status does not carry them (a status
    written by a run that did not scrape at its stop)."""
    status = read_run_status(directory)
    if status is None:
        return [], Saturation()
    saturation = status.saturation
    scrapes = directory / SCRAPES
    if not saturation.sim_span_s and scrapes.exists():
        saturation = saturation.model_copy(update=simulator_figures(read_scrapes(scrapes)))
    return status.reasons(), saturation
