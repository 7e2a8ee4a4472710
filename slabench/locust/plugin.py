"""The Locust bridge: options, the LLM user base class, the record hub and the embedded simulator.

`install()` (called by each locustfile) registers everything on Locust's event hooks once. Per process, a `RecordHub`
(at `environment.slabench`) turns every record into one Locust request event (its own table and header count each
request once; TTFT / ITL / TPOT rows beside it) and routes it; each job is a small part of its own:
- local runner and master: `slabench.locust.record_store.RecordStore` stores each request once and hands it to the
  listeners (the saturation watch, `slabench.locust.refusals.RefusalWatch`, the live web view, the open-loop shapes);
- worker: `slabench.locust.shipping.Shipper` spools every record and ships batches to the master;
- master: `slabench.locust.intake.MasterIntake` stores the workers' batches; on stop it asks every worker to stop its
  users and ship what it holds, waits for each final batch (workers missing heartbeats: `slabench.locust.worker_watch`)
  and accounts for the workers that sent none, so the record count equals the count of requests issued.
The hub itself keeps the run's identity and lifecycle and writes `run_status.json`.
"""

from __future__ import annotations

import json
import logging
import random
import signal
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import gevent
import gevent.lock
from geventhttpclient import HTTPClient
from locust import User, constant, events
from locust.env import Environment
from locust.runners import STATE_RUNNING, STATE_SPAWNING, MasterRunner, WorkerRunner

from slabench import webui
from slabench.core import metrics
from slabench.core.api_key import api_key_from_env
from slabench.core.client import (
    StreamingClient,
    Target,
    chat_body,
    completions_body,
    parse_base_url,
    redact,
    responses_body,
    tls_options,
)
from slabench.core.errors import ExitCode, UserError
from slabench.core.files import check_output
from slabench.core.protocols import PROTOCOLS, prompt_of
from slabench.core.record import Outcome, RecordMeta, RequestRecord
from slabench.core.run_id import check_run_id
from slabench.core.runcap import ENV as RUNCAP_ENV
from slabench.core.runcap import capped
from slabench.core.sinks import check_records_path
from slabench.core.sse import DEFAULT_MAX_EVENT_BYTES
from slabench.evidence import provenance
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
from slabench.locust import heap
from slabench.locust import scrape as locust_scrape
from slabench.locust import sla as locust_sla
from slabench.locust.backoff import FIRST_S, MAX_S, Backoff
from slabench.locust.distributed import fail_at_start, install_port_defaults, set_missing_after, watch_worker_join
from slabench.locust.env_state import HUB, options, set_hub
from slabench.locust.heartbeat import HeartbeatThread, worker_state
from slabench.locust.intake import MSG_STOP, MasterIntake
from slabench.locust.master_watch import MasterWatch
from slabench.locust.openloop import OpenLoopItem, current_item
from slabench.locust.record_store import RecordStore
from slabench.locust.refusals import FailureWatch, RefusalWatch
from slabench.locust.scrape import stop_scrape
from slabench.locust.shipping import Shipper
from slabench.locust.worker_watch import WorkerWatch
from slabench.sim.cli import add_sim_options, sim_args_to_argv
from slabench.sim.embedded import EmbeddedSimulator

log = logging.getLogger("slabench")

MSG_RUN = "slabench:run"  # master → workers: the run id
SHIP_INTERVAL_S = 0.5
ACK_WAIT_S = 10.0  # a quitting worker: how long it waits for the master to confirm its records
DISCOVERY_TIMEOUT_S = 5.0  # GET /v1/models as a whole: a server that accepts and never answers must not hold users


def usage_errors_exit_3(parser: Any) -> None:
    """Locust's argparse exits 2 on a usage error (a misspelt option, a bad value), and 2 is an SLA FAIL to CI: with
    slabench loaded such a mistake exits 3, bad input, with Locust's own message and spelling hint."""
    locust_error = parser.error

    def error(message: str) -> None:
        try:
            locust_error(message)
        except SystemExit as e:
            if e.code == 2:
                raise SystemExit(UserError.exit_code) from None
            raise

    parser.error = error


def add_options(parser: Any) -> None:
    usage_errors_exit_3(parser)
    g = parser.add_argument_group("slabench (LLM endpoint)")
    records = g.add_argument(
        "--records", default="", help="record file (.jsonl or .parquet); default runs/<run-id>/records.jsonl"
    )
    run_id = g.add_argument("--run-id", default="", help="run id (default: time-based, new for every test start)")
    append = g.add_argument(
        "--append",
        action="store_true",
        default=False,
        help="add this run to a --records file that already holds records (default: refuse it; grading several runs "
        "as one then needs --merge-runs)",
    )
    for action in (records, run_id, append):  # in the web UI's start form too (a group's options are not, by default)
        action.include_in_web_ui = True
    g.add_argument("--model", default="", help="model name (default: the first one the server lists at /v1/models)")
    g.add_argument(
        "--endpoint",
        choices=list(PROTOCOLS),
        default="chat",
        help="OpenAI API to call: chat (/v1/chat/completions), completions (/v1/completions: a chat request's "
        "messages sent as one prompt, without a chat template), or responses (the Responses API, /v1/responses: chat "
        "requests sent as its input)",
    )
    g.add_argument("--max-tokens", type=int, default=256, help="max_tokens per request")
    g.add_argument("--ignore-eos", action="store_true", default=False, help="ask vLLM to always produce max_tokens")
    g.add_argument("--prompt-tokens", type=int, default=512, help="synthetic prompt length (chat replay user)")
    g.add_argument("--prompts", default="", help="JSONL file of chat requests to replay instead of synthetic ones")
    g.add_argument(
        "--prompt-salt",
        default="",
        help="put [SALT] before every prompt, so a server's prefix cache cannot carry over from another run (a "
        "sweep sets it per repeat when the server cannot reset its cache)",
    )
    g.add_argument(
        "--tokenizer",
        default="",
        help="the served model's folder (tokenizer.json, chat template): size prompts as the server counts them "
        "(needs the `tokenizers` package); without it, synthetic sizes are calibrated from the server's usage",
    )
    g.add_argument("--api-key-env", default="OPENAI_API_KEY", help="environment variable holding the API key")
    g.add_argument("--insecure", action="store_true", default=False, help="skip TLS certificate verification")
    g.add_argument(
        "--per-chunk-usage",
        choices=["on", "off"],
        default="on",
        help="ask for usage on every chunk (vLLM's continuous_usage_stats) to count tokens per chunk",
    )
    g.add_argument("--connect-timeout", type=float, default=10.0, help="seconds to connect")
    g.add_argument(
        "--stall-timeout",
        type=float,
        default=120.0,
        help="seconds for the whole response head, then without a byte mid-stream, before giving up",
    )
    g.add_argument("--request-timeout", type=float, default=900.0, help="seconds for a whole request")
    g.add_argument(
        "--max-event-bytes",
        type=int,
        default=DEFAULT_MAX_EVENT_BYTES,
        help="longest SSE line or event accepted; a longer one makes the request a not_openai error",
    )
    g.add_argument(
        "--arrival-clock",
        choices=["kernel", "loop"],
        default="kernel",
        help="when a streamed event arrived: the kernel's receive timestamp of its bytes (plain HTTP on Linux; "
        "elsewhere the loop's), or when this process's event loop read them (what it was before; a busy process "
        "counts its own wait as the server's)",
    )
    g.add_argument(
        "--spool-dir",
        default=".slabench-spool",
        help="workers journal every request and record here until the master confirms it holds them "
        "(`slabench recover` merges spools after a lost master)",
    )
    g.add_argument(
        "--master-lost-timeout",
        type=float,
        default=5.0,
        help="worker: stop the load when the connection to the master has been down this many seconds",
    )
    g.add_argument(
        "--worker-missing-after",
        type=float,
        default=10.0,
        help="master: mark a worker missing after this many seconds without a heartbeat (Locust's own is ~4 s; "
        "workers send heartbeats from their own thread, so a longer silence is a dead or frozen process)",
    )
    g.add_argument(
        "--worker-join-timeout",
        type=float,
        default=60.0,
        help="headless master: give up (exit 4) when fewer workers than expected joined within this many seconds",
    )
    s = parser.add_argument_group("slabench embedded simulator (used when no --host is given)")
    add_sim_options(s, prefix="sim-")
    install_port_defaults(parser)


def check_options(environment: Environment) -> None:
    """The slabench options' ranges, the run id, the API key, the --records path and the --prompts file; raises
    UserError naming the option."""
    o = options(environment)
    for name, value, least in (
        ("--max-tokens", o.max_tokens, 1),
        ("--prompt-tokens", o.prompt_tokens, 1),
    ):
        if value < least:
            raise UserError(f"{name} {value}: must be at least {least}")
    for name, value in (
        ("--connect-timeout", o.connect_timeout),
        ("--stall-timeout", o.stall_timeout),
        ("--request-timeout", o.request_timeout),
        ("--master-lost-timeout", o.master_lost_timeout),
        ("--worker-missing-after", o.worker_missing_after),
    ):
        if not value > 0:
            raise UserError(f"{name} {value:g}: must be more than 0 seconds")
    if o.run_id:
        check_run_id(o.run_id)
    api_key_from_env(o.api_key_env)
    users = getattr(o, "num_users", None)
    if o.headless and environment.shape_class is None and users is not None and users < 1:
        raise UserError(f"-u {users}: a run needs at least 1 user (-u 1 or more), or a load shape")
    if o.records:
        p = Path(o.records)
        if p.suffix not in (".jsonl", ".ndjson", ".parquet"):
            raise UserError(f"--records {p}: use a .jsonl or .parquet path")
        check_output(p, "--records", is_dir=p.suffix == ".parquet")
    else:
        check_output(Path("runs"), "--records (default runs/<run-id>/records.jsonl)", is_dir=True)


def cap_run_time(environment: Environment) -> None:
    """SLABENCH_MAX_RUN_S (a smoke run of a printed command) shortens -t, and ends a shape's or an untimed run."""
    opts = options(environment)
    limit = capped(opts.run_time or None)
    if limit is None or limit == opts.run_time:
        return
    log.info("slabench: %s caps this run at %g s", RUNCAP_ENV, limit)
    opts.run_time = limit
    if environment.shape_class is not None:  # Locust starts its -t timer only once a headless shape has finished
        runner = environment.runner

        def stop_later(**_: Any) -> None:
            if runner is not None:
                gevent.spawn_later(limit, runner.stop)

        environment.events.test_start.add_listener(stop_later)


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
        self.run_id = ""
        self.emitted = 0
        self.status: RunStatus | None = None  # master/local: the last run's run_status.json
        self.stop_reason: str | None = None  # master/local: the one line that stopped the run (refusals, failures)
        self.stop_code: int | None = None  # and the exit code it set
        # Worker: requests in flight now, by request id (shipped with every batch).
        self.inflight: dict[str, dict[str, Any]] = {}
        self.workers = WorkerWatch(self.runner)  # master: workers missing heartbeats (empty elsewhere)
        self._user_seq = 0
        self._model: str | None = self.opts.model or None
        self._model_known = self._model is not None
        self._model_lock = gevent.lock.Semaphore()
        self._pump: gevent.Greenlet | None = None
        self.simulator: EmbeddedSimulator | None = None
        self._provenance: gevent.Greenlet | None = None
        # Set by a load shape: returns the current stage as RecordMeta fields (stage_level, stage_repeat,
        # stage_phase), so every record says where in the shape it was issued.
        self.stage_fn: Callable[[], dict[str, Any]] | None = None
        self.saturation = SaturationWatch(environment)
        self.store = RecordStore()  # master/local: the run's records, each request once; listeners subscribe here
        self.refusals = RefusalWatch(self.opts.api_key_env, lambda why: self._stop_for(why, ExitCode.BAD_INPUT))
        self.failures = FailureWatch(lambda why: self._stop_for(why, ExitCode.INCOMPLETE))
        self.intake: MasterIntake | None = None
        self.shipper: Shipper | None = None
        # The hub's own events (master/local), so the parts that ride on a run never depend on the order in which
        # Locust calls its listeners: run_started once the run's id and sink exist (before any user starts),
        # run_ended once its records are closed and run_status.json written.
        self.run_started: list[Callable[[], None]] = []
        self.run_ended: list[Callable[[], None]] = []
        self.run_open = False  # master/local: from start_run until the whole finish (status, run_ended) is done
        if isinstance(runner, WorkerRunner):
            self.runner.register_message(MSG_RUN, self._on_run)
            self.runner.register_message(MSG_STOP, self._on_stop_request)
            self.shipper = Shipper(self.runner, self.opts.spool_dir, self.worker_id, self._exit_code)
            self.master_watch = MasterWatch(self.runner, self.opts.master_lost_timeout, self.shipper.on_master_lost)
            self.heartbeats = HeartbeatThread(
                runner.master_host, runner.master_port, self.worker_id, worker_state(self.runner)
            )
        else:
            self.store.listeners += [self.saturation.observe, self.refusals.observe, self.failures.observe]
        if self.is_master:
            self.intake = MasterIntake(self.runner, self.store, self.workers, self.opts.spool_dir)
            environment.events.heartbeat_sent.add_listener(
                lambda client_id, timestamp, **_: self.workers.on_heartbeat(
                    client_id, timestamp, self.store.sink is not None
                )
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
        return RecordMeta(run_id=self.run_id, worker_id=self.worker_id, user_id=user_id, **fields)

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
        """--model, else the first model the server lists (asked once per process and run; a run that could not
        ask uses "default", and the next run asks again)."""
        with self._model_lock:
            if self._model is None:
                found = discover_model(self.target(host))
                self._model, self._model_known = found or "default", found is not None
            return self._model

    def _forget_unknown_model(self) -> None:
        """At each start: a model that could not be discovered (the server was not up at the first Start in the web
        UI) is asked for again, rather than refusing every later run with "default"."""
        with self._model_lock:
            if not self._model_known:
                self._model = None

    # -- lifecycle -------------------------------------------------------------------------------------------
    def start_run(self) -> None:
        """Master or local runner, at test start: a new run id and sink, announced to the workers."""
        self.run_id = self.opts.run_id or new_run_id()
        self._forget_unknown_model()
        if self.stop_reason is not None and self.env.process_exit_code == self.stop_code:
            self.env.process_exit_code = None  # a new run from the web UI after a stopped one
        self.stop_reason = None
        self.refusals.reset()
        self.failures.reset()
        self.workers.new_run()
        self.saturation.reset()
        records = Path(self.opts.records or f"runs/{self.run_id}/records.jsonl")
        self.store.open(records)
        self.run_open = True
        # Until the final status replaces it: a process killed mid-run leaves a run that says it did not finish.
        write_run_status(records.parent, RunStatus(run_id=self.run_id, finished=False))
        if self.env.process_exit_code == ExitCode.INCOMPLETE:  # a previous run's (web UI): this run decides anew
            self.env.process_exit_code = None
        if self.intake is not None:
            self.runner.send_message(MSG_RUN, {"run_id": self.run_id})
            self.intake.new_run(self.run_id)
        self._start_pump()
        # What serves the run (slabench.evidence.provenance), read beside the load: into run_status.json.
        if self.env.host:
            o = self.opts
            self._provenance = gevent.spawn(provenance.collect, self.env.host, o.api_key_env, o.insecure)
        for listener in self.run_started:
            listener()

    def _on_run(self, msg: Any, **_: Any) -> None:
        self.run_id = msg.data["run_id"]
        self._forget_unknown_model()
        self.emitted = 0
        self.saturation.reset()
        assert self.shipper is not None  # registered on workers only
        self.shipper.new_run(self.run_id)
        self._start_pump()

    def _start_pump(self) -> None:
        if self._pump is None or self._pump.dead:
            self._pump = gevent.spawn(self._pump_loop)

    def _pump_loop(self) -> None:
        """Worker: ship batches; master/local: flush the sink (≥ once a second) and watch for missing workers."""
        while True:
            gevent.sleep(SHIP_INTERVAL_S)
            if self.shipper is not None:
                self.shipper.ship(list(self.inflight.values()))
                continue
            self.store.flush()
            if self.is_master:
                self.workers.check()

    def begin(self, meta: RecordMeta) -> str:
        """A request is about to go out (worker: in the spool now, and reported to the master with the next batch)."""
        entry = {"started_wall": time.time(), **meta.record_fields(meta.request_id)}  # not asdict: it deep-copies
        self.inflight[meta.request_id] = entry
        if self.shipper is not None:
            self.shipper.began(entry)
        return meta.request_id

    def end(self, token: str) -> None:
        self.inflight.pop(token, None)

    # -- records ---------------------------------------------------------------------------------------------
    def emit(self, record: RequestRecord) -> None:
        """Exactly once per request, in the process that made it."""
        self.emitted += 1
        fire_locust_events(self.env, record)
        if self.shipper is not None:
            self.shipper.record(record.to_dict())
        else:
            self.store.store([record])

    def _stop_for(self, reason: str, code: int) -> None:
        """Every request refused from the start (exit 3), or the server failing every request (exit 4): stop the run
        with that one line."""
        if self.stop_reason is not None:
            return  # one line: the first watch to fire says why
        self.stop_reason, self.stop_code = reason, code
        log.error("slabench: %s", reason)
        self.env.process_exit_code = code
        gevent.spawn(self._stop_runner)  # not from inside a user's greenlet (stopping kills the users)

    def _exit_code(self, code: int) -> None:
        self.env.process_exit_code = code

    def _stop_runner(self) -> None:
        if getattr(self.opts, "headless", False):
            self.runner.quit()
        else:
            self.runner.stop()  # the web UI stays up, showing the error

    # -- stopping --------------------------------------------------------------------------------------------
    def on_test_stopping(self) -> None:
        self.saturation.starvation.freeze()  # the load ends here; stopping and finishing are not measured
        if self.intake is not None:
            self.intake.stop_workers(self.env.stop_timeout or 0)

    def _on_stop_request(self, msg: Any, **_: Any) -> None:
        self.runner.stop()  # kills users (in-flight requests become `dropped` records), fires test_stop → finish

    def on_test_stop(self) -> None:
        self.saturation.starvation.freeze()  # (a worker stopped by its master: no test_stopping of its own)
        if self.shipper is not None:
            self.shipper.final(list(self.inflight.values()), self.emitted, self.saturation.starvation.read())
            return
        if self._pump is not None:
            self._pump.kill()
        if not self.run_open or self.store.path is None:
            return
        if self.intake is not None:
            if not self.intake.accounted:  # Locust quit in the middle of stopping
                self.intake.account_for_workers_without_final()
            self.intake.drain()
        path, tally = self.store.path, self.store.tally
        self.store.close()  # (already closed when a finish cut short by quitting is done again)
        stop_scrape(self.env)  # the closing scrape, for the server's request count
        self.status = self.write_status(path.parent)
        log.info("slabench: %s", summary_line(tally.records, path, tally.outcomes))
        accounting = self.status.accounting or {}
        if accounting.get("server_received") is not None:
            log.info("slabench: server: %s", accounting["note"])
        # What the run lacks (lost workers, requests not sent, nothing answered), a load generator frozen mid-run
        # (its requests then left the latency figures) and saturation by the default measurement policy (its
        # latencies measure the machine) make it incomplete: exit 4, as run_status.json says. With --sla the
        # contract's policy judges saturation anew (the verdict's code is the run's, slabench.locust.sla); no policy
        # judges a freeze, so it makes the run exit 4 either way.
        frozen = []
        if self.status.stalls:
            worst = max(self.status.stalls, key=lambda st: st.seconds)
            frozen.append(
                f"the load generator was frozen {len(self.status.stalls)} time(s), "
                f"{sum(st.seconds for st in self.status.stalls):.2f} s in all (up to {worst.seconds:.2f} s, "
                f"{worst.worker}): the requests in flight then are left out of the latency figures"
            )
            log.warning("slabench: %s", frozen[0])
        graded = getattr(self.env, "slabench_sla", None) is not None  # --sla: the contract's policy judges these
        for reason in self.status.saturated:
            judged = " (the contract's measurement policy judges it)" if graded else ""
            log.warning("slabench: measurement doubtful: %s%s", reason, judged)
        own = [r for r in self.status.reasons() if not (self.stop_reason and self.stop_reason in r)]
        doubtful = [*frozen, *([] if graded else (f"measurement doubtful: {r}" for r in self.status.saturated))]
        reasons = [*own, *doubtful]
        if reasons:
            log.error("slabench: the run is incomplete (exit %d): %s", ExitCode.INCOMPLETE, "; ".join(reasons))
            if self.env.process_exit_code in (None, 0, 1, 2):
                self.env.process_exit_code = ExitCode.INCOMPLETE
        for listener in self.run_ended:
            listener()
        self.run_open = False  # only now: a finish cut short by quitting (grading included) is done again

    def _provenance_value(self) -> dict[str, Any] | None:
        if self._provenance is None:
            return None
        self._provenance.join(timeout=0.5)  # collected since the start; never hold the stop for it
        value: dict[str, Any] | None = self._provenance.value
        return value

    def write_status(self, directory: Path) -> RunStatus:
        """`run_status.json` beside the records: counts, the server's count, whether the run is complete, the signs of
        a saturated load generator and what served the run. Its reasons are logged: a run with any never passes
        (exit 4)."""
        scrapes = read_scrapes(directory / SCRAPE_FILE, self.run_id)
        tally, intake = self.store.tally, self.intake
        facts: dict[str, Any] = {
            "run_id": self.run_id,
            "records": tally.records,
            "outcomes": dict(tally.outcomes),
            "lost_workers": intake.lost_workers if intake else {},
            "workers_without_final_batch": intake.missing_finals if intake else [],
            "workers_missing_then_back": self.workers.came_back,
            "max_heartbeat_gap_s": {k: round(v, 2) for k, v in self.workers.heartbeat_gap.items()},
            "duplicates_dropped": self.store.duplicates,
            "accounting": reconcile(tally, server_received(scrapes)),
        }
        reasons = incomplete_reasons(tally, facts)
        saturation = self.saturation.snapshot(intake.starvation if intake else None).model_copy(
            update=simulator_figures(scrapes)
        )
        saturated = saturation_reasons(saturation, MeasurementPolicy())
        starvation = intake.starvation if intake else {self.worker_id: self.saturation.starvation.read()}
        stalls = [Stall(worker=w, start=a, end=b) for w, s in starvation.items() for a, b in s.stalls]
        status = RunStatus(
            **facts,
            incomplete_reasons=reasons,
            degraded=bool(reasons or saturated or stalls),  # whatever makes the run exit 4
            stopped=self.stop_reason,
            saturation=saturation,
            saturated=saturated,
            stalls=stalls,
            provenance=self._provenance_value(),
        )
        write_run_status(directory, status)
        return status


def salted(
    messages: list[dict[str, Any]] | None, prompt: str | None, salt: str
) -> tuple[list[dict[str, Any]] | None, str | None]:
    """The request with `[salt] ` before its first words (the first message, or the prompt): copies, never the
    prompt source's own objects, which other requests reuse."""
    tag = f"[{salt}] "
    if messages is None:
        return None, tag + (prompt or "")
    if not messages:
        return messages, prompt
    first = dict(messages[0])
    content = first.get("content")
    if isinstance(content, list):  # content parts
        first["content"] = [{"type": "text", "text": tag}, *content]
    else:
        first["content"] = tag + str(content or "")
    return [first, *messages[1:]], prompt


def summary_line(count: int, path: Path, outcomes: Counter[str]) -> str:
    parts = ", ".join(f"{k} {v}" for k, v in sorted(outcomes.items(), key=lambda kv: -kv[1]))
    return f"{count} records → {path} ({parts or 'none'})"


def fire_locust_events(env: Environment, r: RequestRecord) -> None:
    """The live view, never used for grading: one Locust request event per request (the E2E row, failures
    included), so the Aggregated row, the header's RPS and the failure % count each request once. TTFT, ITL and
    TPOT of answered requests are rows of their own, logged into their stats entries directly: shown (and shipped to
    the master) like any row, but not added to the Aggregated row and not fired as requests."""
    if r.outcome is Outcome.DROPPED:
        return  # cancelled at stop or lost: ours, not the server's; counted in the records and the summary
    ok = r.outcome is Outcome.OK
    if ok:
        entries = env.stats.entries
        for name, value in (("TTFT", metrics.ttft(r)), ("ITL", metrics.mean_itl(r)), ("TPOT", metrics.tpot(r))):
            if value is not None:
                entries[(name, "LLM")].log(value * 1000, 0)  # type: ignore[arg-type]  # float ms, as Locust's own
    e2e = metrics.e2e(r)
    env.events.request.fire(
        request_type="LLM",
        name="E2E",
        response_time=(e2e or 0) * 1000,
        response_length=r.completion_tokens or 0,
        exception=None if ok else Exception(f"{r.error_category}: {r.error_message}"),
        context={},
    )


def discover_model(target: Target, timeout: float = DISCOVERY_TIMEOUT_S) -> str | None:
    """The first model id at GET /v1/models, or None (the requests will then fail with classified errors). The
    whole exchange has `timeout` seconds: users wait on it before their first request."""
    scheme, host, port, prefix = parse_base_url(target.base_url)
    limit = min(timeout, target.connect_timeout)
    client = HTTPClient(
        host,
        port,
        ssl=scheme == "https",
        **tls_options(target.verify_tls),
        connection_timeout=limit,
        network_timeout=limit,
    )
    headers = {"Authorization": f"Bearer {target.api_key}"} if target.api_key else {}
    try:
        with gevent.Timeout(limit, TimeoutError(f"no answer within {limit:g} s; pass --model to skip the lookup")):
            resp = client.get(prefix + "/v1/models", headers=headers)
            body = resp.read(1 << 20)
        if resp.status_code != 200:
            log.error(
                "slabench: GET %s/v1/models answered HTTP %s%s",
                target.base_url,
                resp.status_code,
                " (check the API key)" if resp.status_code in (401, 403) else "",
            )
            return None
        data = json.loads(body).get("data") or []
        return str(data[0]["id"]) if data else None
    except Exception as e:  # any failure here is reported once; each request then records its own error
        why = redact(str(e) or type(e).__name__, target.api_key)
        log.error("slabench: cannot list models at %s/v1/models: %s", target.base_url, why)
        return None
    finally:
        client.close()


_sigint_watcher: Any = None  # one per process (tests may create several environments)


def _is_locust_command() -> bool:
    """This process is the `locust` command (console script or `python -m locust`), not e.g. pytest hosting Locust
    objects: the SIGINT handler is for the command's whole life only."""
    argv0 = Path(sys.argv[0])
    return argv0.name == "locust" or argv0.parent.name == "locust"


def _interrupt_from_event_loop() -> None:
    """KeyboardInterrupt in the main greenlet, thrown from the event loop (gevent's own route, minus the traceback
    it would print for an exception raised in a handler)."""
    gevent.get_hub().handle_system_error(KeyboardInterrupt, KeyboardInterrupt())


def _on_init(environment: Environment, runner: Any, **_: Any) -> None:
    if runner is None:
        return
    # Python raises KeyboardInterrupt in whichever greenlet runs when SIGINT arrives: inside a user between sending
    # a request and recording it, the record would be lost. Handled by the event loop, Ctrl+C reaches Locust's
    # main greenlet (which stops the run in order) while every user is parked at a yield.
    global _sigint_watcher
    if _sigint_watcher is None and _is_locust_command():
        _sigint_watcher = gevent.signal_handler(signal.SIGINT, _interrupt_from_event_loop)
    # Registered after the runner's own: Locust fires `quitting` in reverse, so this runs first.
    environment.events.quitting.add_listener(_stop_run_before_quitting)
    hub = RecordHub(environment)
    set_hub(environment, hub)
    opts = options(environment)
    if isinstance(runner, WorkerRunner):  # its own environment holds its key
        try:
            api_key_from_env(opts.api_key_env)
        except UserError as e:
            fail_at_start(environment, e)
        return
    try:  # every option and input file now, once, before any load (workers get the master's options)
        check_options(environment)
        check_records_path(opts.records, opts.run_id, opts.append)
        cap_run_time(environment)
    except UserError as e:
        fail_at_start(environment, e)
    watch_worker_join(environment, opts.worker_join_timeout)
    set_missing_after(opts.worker_missing_after)
    if environment.host:
        try:
            parse_base_url(environment.host)
        except UserError as e:
            fail_at_start(environment, e)
        return
    if any(getattr(u, "host", None) for u in environment.user_classes):
        return
    try:
        hub.simulator = EmbeddedSimulator(sim_args_to_argv(vars(opts), prefix="sim_"))
        environment.host = hub.simulator.url
    except UserError as e:
        fail_at_start(environment, e)
    log.info("slabench: no --host given; embedded simulator at %s", environment.host)


def _stop_run_before_quitting(environment: Environment, **_: Any) -> None:
    """On a quit mid-run (Ctrl+C reaches every process of a terminal's process group), stop the run before Locust's
    own quitting: users' requests become cancelled records, and a worker ships its last batch before it tells the
    master it is leaving (else the master stops listening to it and those records are lost)."""
    runner = environment.runner
    if isinstance(runner, WorkerRunner):
        # When another worker leaves first, the master hands its users to the ones still there: a worker that is
        # quitting must not start them (their requests would come after its final batch, and have no record).
        runner.start_worker = _start_no_users  # type: ignore[method-assign]
    if runner is not None and runner.state in (STATE_SPAWNING, STATE_RUNNING):
        runner.stop()
    hub: RecordHub | None = getattr(environment, "slabench", None)
    if hub is not None and hub.shipper is not None:
        hub.shipper.wait_for_ack(ACK_WAIT_S)  # else the spool stays behind as a second copy of records the master has
    elif hub is not None and hub.run_open:
        # Locust quit in the middle of stopping the run (its stop was running in a greenlet that quitting kills,
        # e.g. after "the last worker went missing"): test_stop never fired. Finish the run: records, status, grade.
        environment.events.test_stop.fire(environment=environment)


def _start_no_users(*_: Any, **__: Any) -> None:
    """A quitting worker's answer to a spawn message."""


def _on_quitting(environment: Environment, **_: Any) -> None:
    hub: RecordHub | None = getattr(environment, "slabench", None)
    if hub is not None and hub.simulator is not None:
        hub.simulator.stop()


def install(hooks: Any = events) -> None:
    """Register slabench on Locust's event hooks (idempotent: several locustfiles may call it)."""
    if getattr(hooks, "_slabench_installed", False):
        return
    hooks._slabench_installed = True
    hooks.init_command_line_parser.add_listener(add_options)
    hooks.init.add_listener(_on_init)
    hooks.test_start.add_listener(lambda environment, **_: _hub(environment, "start_run"))
    hooks.test_stopping.add_listener(lambda environment, **_: _hub(environment, "on_test_stopping"))
    hooks.test_stop.add_listener(lambda environment, **_: _hub(environment, "on_test_stop"))
    hooks.test_stop.add_listener(heap.settle)  # after the hub's: the run is over, its lateness no longer measured
    hooks.quitting.add_listener(_on_quitting)
    # The parts that ride on the hub, each in its own module: grading against --sla at the end, the server's
    # /metrics scraped beside the records, and the LLM tab in the web UI.
    locust_sla.install(hooks)
    locust_scrape.install(hooks)
    webui.install(hooks)
    hooks.init.add_listener(heap.settle)  # Locust's and the locustfile's start-up done, before any run
    hooks.init.add_listener(refresh_loop_clock)


def refresh_loop_clock(**_: Any) -> None:
    """The event loop's clock is read once per loop pass, and Locust's start-up (imports, parsing, init listeners)
    runs without one: the clock can be a second or more stale when Locust arms the ``-t`` timer right after init,
    so on a busy machine ``-t 1s`` ended a run before it sent anything. Refresh it as init ends."""
    gevent.get_hub().loop.update_now()


def _hub(environment: Environment, method: str) -> None:
    hub = getattr(environment, "slabench", None)
    if hub is None:
        return
    if method == "start_run" and hub.is_worker:
        return  # workers learn the run id from the master
    getattr(hub, method)()


class LLMUser(User):
    """Base class for users that call an OpenAI-compatible endpoint. Subclasses build requests and call `request`."""

    abstract = True
    wait_time = constant(0)
    first_backoff_s = FIRST_S  # closed loop, after a failure: 0.25–0.5 s, then twice that per failure in a row
    max_backoff_s = MAX_S  # the longest wait, Retry-After included (slabench.locust.backoff)

    @classmethod
    def check_items(cls, items: Sequence[OpenLoopItem]) -> None:
        """Open loop, when the shape has planned its items and before any load: raise UserError for items this user
        cannot send (a subclass's rules; every item is fine here)."""

    def on_start(self) -> None:
        assert self.host is not None  # --host, the user class's own, or the embedded simulator's (set at init)
        self.base_url: str = self.host
        self.hub: RecordHub = getattr(self.environment, HUB)
        self.llm = StreamingClient(self.hub.target(self.base_url))
        self.user_id = self.hub.next_user_id()
        self.rng = random.Random(f"{self.hub.run_id}/{self.user_id}")
        self.backoff = Backoff(
            random.Random(f"{self.hub.run_id}/{self.user_id}/backoff"), self.first_backoff_s, self.max_backoff_s
        )

    def on_stop(self) -> None:
        self.llm.close()

    @property
    def model(self) -> str:
        return self.hub.model(self.base_url)

    def body(
        self,
        messages: list[dict[str, Any]] | None = None,
        prompt: str | None = None,
        max_tokens: int | None = None,
        **params: Any,
    ) -> dict[str, Any]:
        o = self.hub.opts
        if o.prompt_salt:
            messages, prompt = salted(messages, prompt, o.prompt_salt)
        if o.ignore_eos:
            params["ignore_eos"] = True
        if messages is not None and o.endpoint == "responses":  # no stream_options: usage always ends the stream
            return responses_body(self.model, messages, max_tokens or o.max_tokens, **params)
        if messages is not None and o.endpoint == "completions":
            prompt = prompt_of(messages)
            messages = None
        params.setdefault("max_tokens", max_tokens or o.max_tokens)
        params["stream_options"] = {
            "include_usage": True,
            **({"continuous_usage_stats": True} if o.per_chunk_usage == "on" else {}),
        }
        if messages is not None:
            return chat_body(self.model, messages, **params)
        return completions_body(self.model, prompt or "", **params)

    def request(
        self,
        body: dict[str, Any],
        grade: Callable[[str], dict[str, Any]] | None = None,
        headers: dict[str, str] | None = None,
        **meta: Any,
    ) -> RequestRecord:
        """Send one request and emit its record (exactly once, even if the user is stopped mid-stream).
        `grade(text) -> dict` adds quality fields to the record."""
        endpoint = "responses" if "input" in body else "chat" if "messages" in body else "completions"
        meta_ = self.hub.meta(self.user_id, request_id=uuid.uuid4().hex, **meta)
        token = self.hub.begin(meta_)
        try:
            reply = self.llm.send(endpoint, body, meta_, on_cancel=self.hub.emit, headers=headers)
            record = reply.record
            backoff = self.backoff_after(record)
            if backoff is not None:
                record = record.replace(backoff=backoff)
            try:
                if grade is not None and record.outcome is not Outcome.ERROR:
                    record = record.replace(**grade(reply.text))
            finally:  # a grader that fails still leaves the request's record (ungraded)
                self.hub.emit(record)
        finally:
            self.hub.end(token)
        if backoff:
            gevent.sleep(backoff)
        return record

    def backoff_after(self, record: RequestRecord) -> float | None:
        """Closed loop: how long to wait after a failed request before the next one (bounded exponential backoff
        with jitter, Retry-After as its floor: `slabench.locust.backoff`), or None. Open loop: None — the schedule
        decides when requests go, and a failure is only recorded."""
        wait = self.backoff.after(record)
        return None if current_item() is not None else wait
