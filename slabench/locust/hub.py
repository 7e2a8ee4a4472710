"""The record hub, one per Locust process (`hub_of(environment)`): it wires the parts that each do one job and keeps
the run's state (`slabench.locust.state.RunState`). Every record becomes one Locust request event
(`slabench.locust.live_events`) and is routed:
- local runner and master: `slabench.locust.record_store.RecordStore` stores each request once and hands it to the
  listeners (the saturation watch, `slabench.locust.refusals`, the live web view, the open-loop shapes);
- worker: `slabench.locust.shipping.Shipper` spools every record and ships batches to the master
  (`slabench.locust.pump` ships them);
- master: `slabench.locust.intake.MasterIntake` stores the workers' batches; on stop it asks every worker to stop its
  users and ship what it holds, waits for each final batch (workers missing heartbeats: `slabench.locust.worker_watch`)
  and accounts for the workers that sent none, so the record count equals the count of requests issued.
At the end the master or local runner writes `run_status.json` (`slabench.locust.status_writer`) and sets the exit
code (`slabench.locust.stop_policy`)."""

from __future__ import annotations

import logging
import time
import uuid
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

from locust.env import Environment
from locust.runners import MasterRunner, WorkerRunner

from slabench.core.api_key import api_key_from_env
from slabench.core.client import Target
from slabench.core.errors import ExitCode
from slabench.core.record import RecordMeta, RequestRecord
from slabench.evidence.run_status import RunStatus, write_run_status
from slabench.evidence.saturation import SaturationWatch
from slabench.locust.heartbeat import HeartbeatThread, worker_state
from slabench.locust.intake import MSG_STOP, MasterIntake
from slabench.locust.live_events import fire_locust_events
from slabench.locust.master_watch import MasterWatch
from slabench.locust.model_lookup import ModelLookup
from slabench.locust.options import options
from slabench.locust.provenance_reader import ProvenanceReader
from slabench.locust.pump import RecordPump
from slabench.locust.record_store import RecordStore
from slabench.locust.refusals import FailureWatch, RefusalWatch
from slabench.locust.shipping import Shipper
from slabench.locust.state import Parts, RunState
from slabench.locust.status_writer import summary_line, write_status
from slabench.locust.stop_policy import StopPolicy
from slabench.locust.worker_watch import WorkerWatch
from slabench.sim.embedded import EmbeddedSimulator

log = logging.getLogger("slabench")

MSG_RUN = "slabench:run"  # master → workers: the run id
ACK_WAIT_S = 10.0  # a quitting worker: how long it waits for the master to confirm its records


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + uuid.uuid4().hex[:4]


class RecordHub:
    """Per-process record routing; see the module docstring."""

    def __init__(self, environment: Environment) -> None:
        runner = environment.runner
        assert runner is not None  # made by the init listener, which runs with the runner
        self.env = environment
        self.opts = options(environment)
        self.runner = runner
        self.is_worker = isinstance(runner, WorkerRunner)
        self.is_master = isinstance(runner, MasterRunner)
        self.worker_id = (
            "master" if self.is_master else runner.client_id if isinstance(runner, WorkerRunner) else "local"
        )
        self.run = RunState()
        self.parts = Parts()  # what rides on a run: the scrape poller, the SLA hook, the live view, the shapes
        self.stop_policy = StopPolicy(environment, runner, bool(getattr(self.opts, "headless", False)))
        self.models = ModelLookup(self.opts.model)
        self.provenance = ProvenanceReader()
        self.simulator: EmbeddedSimulator | None = None
        self._user_seq = 0
        # Set by a load shape: returns the current stage as RecordMeta fields (stage_level, stage_repeat,
        # stage_phase), so every record says where in the shape it was issued.
        self.stage_fn: Callable[[], dict[str, Any]] | None = None
        self.workers = WorkerWatch(runner)  # master: workers missing heartbeats (empty elsewhere)
        self.saturation = SaturationWatch(environment)
        self.store = RecordStore()  # master/local: the run's records, each request once; listeners subscribe here
        self.refusals = RefusalWatch(
            self.opts.api_key_env, lambda why: self.stop_policy.stop_for(why, ExitCode.BAD_INPUT)
        )
        self.failures = FailureWatch(lambda why: self.stop_policy.stop_for(why, ExitCode.INCOMPLETE))
        self.intake: MasterIntake | None = None
        self.shipper: Shipper | None = None
        # The hub's own events (master/local), so the parts that ride on a run never depend on the order in which
        # Locust calls its listeners: run_started once the run's id and sink exist (before any user starts),
        # run_ended once its records are closed and run_status.json written.
        self.run_started: list[Callable[[], None]] = []
        self.run_ended: list[Callable[[], None]] = []
        # before run_status.json is written: the closing scrape, for the server's request count (slabench.locust.scrape)
        self.run_stopping: list[Callable[[], None]] = []
        if isinstance(runner, WorkerRunner):
            runner.register_message(MSG_RUN, self._on_run)
            runner.register_message(MSG_STOP, lambda msg, **_: runner.stop())  # users' requests become records
            self.shipper = Shipper(runner, self.opts.spool_dir, self.worker_id, self.stop_policy.set_exit_code)
            self.master_watch = MasterWatch(runner, self.opts.master_lost_timeout, self.shipper.on_master_lost)
            self.heartbeats = HeartbeatThread(
                runner.master_host, runner.master_port, self.worker_id, worker_state(runner)
            )
        else:
            self.store.listeners += [self.saturation.observe, self.refusals.observe, self.failures.observe]
        if self.is_master:
            self.intake = MasterIntake(runner, self.store, self.workers, self.opts.spool_dir)
            environment.events.heartbeat_sent.add_listener(
                lambda client_id, timestamp, **_: self.workers.on_heartbeat(
                    client_id, timestamp, self.store.sink is not None
                )
            )
        self.pump = RecordPump(
            self.store, self.shipper, self.workers if self.is_master else None, lambda: list(self.run.inflight.values())
        )

    # -- identity --------------------------------------------------------------------------------------------
    def next_user_id(self) -> str:
        self._user_seq += 1
        return f"{self.worker_id}/{self._user_seq}"

    def meta(self, user_id: str, **kw: Any) -> RecordMeta:
        stage = self.stage_fn() if self.stage_fn is not None else {}
        given = {k: v for k, v in kw.items() if v is not None}  # an unset item_id must not hide the shape's
        fields = {**stage, **given}
        if stage.get("item_id") is not None:  # inside an open-loop item its id wins, as on the record (_ItemClient)
            fields["item_id"] = stage["item_id"]
        return RecordMeta(run_id=self.run.run_id, worker_id=self.worker_id, user_id=user_id, **fields)

    def target(self, host: str) -> Target:
        o = self.opts
        return Target(
            base_url=host,
            api_key=api_key_from_env(o.api_key_env),  # checked at init, before any load
            verify_tls=not o.insecure,
            connect_timeout=o.connect_timeout,
            stall_timeout=o.stall_timeout,
            request_timeout=o.request_timeout,
            max_event_bytes=o.max_event_bytes,
            kernel_stamps=o.arrival_clock == "kernel",
        )

    def model(self, host: str) -> str:
        """--model, else the first model the server lists (`slabench.locust.model_lookup`)."""
        return self.models.model(self.target(host))

    # -- lifecycle -------------------------------------------------------------------------------------------
    def start_run(self) -> None:
        """Master or local runner, at test start: a new run id and sink, announced to the workers."""
        self.run.run_id = run_id = self.opts.run_id or new_run_id()
        self.models.new_run()
        self.stop_policy.new_run()
        self.refusals.reset()
        self.failures.reset()
        self.workers.new_run()
        self.saturation.reset()
        records = Path(self.opts.records or f"runs/{run_id}/records.jsonl")
        self.store.open(records)
        self.run.open = True
        # Until the final status replaces it: a process killed mid-run leaves a run that says it did not finish.
        write_run_status(records.parent, RunStatus(run_id=run_id, finished=False))
        if self.intake is not None:
            self.runner.send_message(MSG_RUN, {"run_id": run_id})
            self.intake.new_run(run_id)
        self.pump.start()
        self.provenance.start(self.env.host, self.opts.api_key_env, self.opts.insecure)
        for listener in self.run_started:
            listener()

    def _on_run(self, msg: Any, **_: Any) -> None:
        """Worker: the master started a run."""
        self.run.run_id = msg.data["run_id"]
        self.run.emitted = 0
        self.models.new_run()
        self.saturation.reset()
        assert self.shipper is not None  # registered on workers only
        self.shipper.new_run(self.run.run_id)
        self.pump.start()

    def begin(self, meta: RecordMeta) -> str:
        """A request is about to go out (worker: in the spool now, and reported to the master with the next batch)."""
        entry = {"started_wall": time.time(), **meta.record_fields(meta.request_id)}  # not asdict: it deep-copies
        self.run.inflight[meta.request_id] = entry
        if self.shipper is not None:
            self.shipper.began(entry)
        return meta.request_id

    def end(self, token: str) -> None:
        self.run.inflight.pop(token, None)

    # -- records ---------------------------------------------------------------------------------------------
    def emit(self, record: RequestRecord) -> None:
        """Exactly once per request, in the process that made it."""
        self.run.emitted += 1
        fire_locust_events(self.env, record)
        if self.shipper is not None:
            self.shipper.record(record.to_dict())
        else:
            self.store.store([record])

    # -- stopping --------------------------------------------------------------------------------------------
    def on_test_stopping(self) -> None:
        self.saturation.starvation.freeze()  # the load ends here; stopping and finishing are not measured
        if self.intake is not None:
            self.intake.stop_workers(self.env.stop_timeout or 0)

    def on_test_stop(self) -> None:
        self.saturation.starvation.freeze()  # (a worker stopped by its master: no test_stopping of its own)
        if self.shipper is not None:
            self.shipper.final(list(self.run.inflight.values()), self.run.emitted, self.saturation.starvation.read())
            return
        self.pump.stop()
        if not self.run.open or self.store.path is None:
            return
        if self.intake is not None:
            if not self.intake.accounted:  # Locust quit in the middle of stopping
                self.intake.account_for_workers_without_final()
            self.intake.drain()
        path, tally = self.store.path, self.store.tally
        self.store.close()  # (already closed when a finish cut short by quitting is done again)
        for listener in self.run_stopping:
            listener()
        status = write_status(
            path.parent,
            self.run.run_id,
            self.worker_id,
            self.store,
            self.intake,
            self.workers,
            self.saturation,
            self.stop_policy.reason,
            self.provenance.value(),
        )
        self.run.status = status
        log.info("slabench: %s", summary_line(tally.records, path, tally.outcomes))
        accounting = status.accounting or {}
        if accounting.get("server_received") is not None:
            log.info("slabench: server: %s", accounting["note"])
        self.stop_policy.judge_end(status)
        for listener in self.run_ended:
            listener()
        self.run.open = False  # only now: a finish cut short by quitting (grading included) is done again


_hubs: weakref.WeakKeyDictionary[Environment, RecordHub] = weakref.WeakKeyDictionary()


def attach(environment: Environment, hub: RecordHub) -> None:
    """The process's hub for this environment (the plugin's init listener, before any other slabench hook runs)."""
    _hubs[environment] = hub


def find_hub(environment: Environment) -> RecordHub | None:
    """The environment's hub, or None where slabench is not installed."""
    return _hubs.get(environment)


def hub_of(environment: Environment) -> RecordHub:
    hub = _hubs.get(environment)
    if hub is None:
        raise RuntimeError("slabench is not installed on this environment (slabench.locust.plugin.install)")
    return hub
