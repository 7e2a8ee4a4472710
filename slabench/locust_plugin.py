"""The Locust bridge: options, the LLM user base class, record collection and shipping, and the embedded simulator.

`install()` (called by each locustfile) registers everything on Locust's event hooks once. Per process, a `RecordHub`
(at `environment.slabench`) turns every record into Locust request events (TTFT / ITL / TPOT / E2E rows in the web UI
and `--csv`) and routes it: local runner → the run's sink; worker → batches shipped to the master as Locust custom
messages; master → the one sink. On stop, the master asks every worker to stop its users and ship what it holds, and
waits for each worker's final batch, so the record count equals the count of requests issued across all workers.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import gevent
import gevent.lock
from geventhttpclient import HTTPClient
from locust import User, constant, events
from locust.env import Environment
from locust.runners import STATE_MISSING, STATE_RUNNING, STATE_SPAWNING, MasterRunner, WorkerRunner

from slabench import metrics
from slabench.client import RecordMeta, StreamingClient, Target, chat_body, completions_body, parse_base_url
from slabench.errors import UserError
from slabench.record import ErrorCategory, Outcome, RequestRecord
from slabench.sim.cli import EMBEDDED_NICE, add_sim_options, sim_args_to_argv
from slabench.sinks import JsonlSink, RecordSink, open_sink

log = logging.getLogger("slabench")

MSG_RUN = "slabench:run"  # master → workers: the run id
MSG_STOP = "slabench:stop"  # master → workers: stop users now and ship everything
MSG_RECORDS = "slabench:records"  # worker → master: a batch of records
MSG_FINAL = "slabench:final"  # worker → master: nothing more will come (with the worker's total)
MSG_ACK = "slabench:ack"  # master → worker: final batch received; the worker may drop its spool
SHIP_INTERVAL_S = 0.5
FINAL_WAIT_S = 30.0


def add_options(parser: Any) -> None:
    g = parser.add_argument_group("slabench (LLM endpoint)")
    g.add_argument(
        "--records", default="", help="record file (.jsonl or .parquet); default runs/<run-id>/records.jsonl"
    )
    g.add_argument("--run-id", default="", help="run id (default: time-based, new for every test start)")
    g.add_argument("--model", default="", help="model name (default: the first one the server lists at /v1/models)")
    g.add_argument("--endpoint", choices=["chat", "completions"], default="chat", help="OpenAI API to call")
    g.add_argument("--max-tokens", type=int, default=256, help="max_tokens per request")
    g.add_argument("--ignore-eos", action="store_true", default=False, help="ask vLLM to always produce max_tokens")
    g.add_argument("--prompt-tokens", type=int, default=512, help="synthetic prompt length (chat replay user)")
    g.add_argument("--prompts", default="", help="JSONL file of chat requests to replay instead of synthetic ones")
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
    g.add_argument("--stall-timeout", type=float, default=120.0, help="seconds without a byte before giving up")
    g.add_argument("--request-timeout", type=float, default=900.0, help="seconds for a whole request")
    g.add_argument(
        "--spool-dir",
        default=".slabench-spool",
        help="workers keep a copy of every shipped batch here until the master confirms the run's end",
    )
    s = parser.add_argument_group("slabench embedded simulator (used when no --host is given)")
    add_sim_options(s, prefix="sim-")


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + uuid.uuid4().hex[:4]


class RecordHub:
    """Per-process record routing; see the module docstring."""

    def __init__(self, environment: Environment) -> None:
        self.env = environment
        self.opts = environment.parsed_options
        self.runner = environment.runner
        self.is_worker = isinstance(self.runner, WorkerRunner)
        self.is_master = isinstance(self.runner, MasterRunner)
        self.worker_id = self.runner.client_id if self.is_worker else "local" if not self.is_master else "master"
        self.run_id = ""
        self.records_path: Path | None = None  # master/local: the current (or last) run's record file
        self.sink: RecordSink | None = None
        self.batch: list[dict] = []
        self.emitted = 0
        self.outcomes: Counter[str] = Counter()
        self.finals: dict[str, int] = {}
        self.received = 0
        # Master/local: called with every record as it is stored (the live web view subscribes here).
        self.listeners: list[Callable[[RequestRecord], None]] = []
        # Master: called with (worker_id, last_seen_wall) when a worker stops answering (e.g. the burst shape
        # accounts its unsent share).
        self.lost_listeners: list[Callable[[str, float], None]] = []
        # Worker: requests in flight now (shipped with every batch); master: the last such list per worker.
        self.inflight: dict[int, dict[str, Any]] = {}
        self.inflight_seen: dict[str, list[dict[str, Any]]] = {}
        self.lost_workers: dict[str, dict[str, Any]] = {}
        self.missing_finals: list[str] = []
        self._inflight_seq = 0
        self._spool: JsonlSink | None = None
        self._user_seq = 0
        self._model: str | None = self.opts.model or None
        self._model_lock = gevent.lock.Semaphore()
        self._pump: gevent.Greenlet | None = None
        self.simulator: subprocess.Popen | None = None
        # Set by a load shape: returns the current stage as RecordMeta fields (stage_level, stage_repeat,
        # stage_phase), so every record says where in the shape it was issued.
        self.stage_fn: Callable[[], dict[str, Any]] | None = None
        if self.is_worker:
            self.runner.register_message(MSG_RUN, self._on_run)
            self.runner.register_message(MSG_STOP, self._on_stop_request)
            self.runner.register_message(MSG_ACK, self._on_ack)
        if self.is_master:
            self.runner.register_message(MSG_RECORDS, self._on_records)
            self.runner.register_message(MSG_FINAL, self._on_final)

    # -- identity --------------------------------------------------------------------------------------------
    def next_user_id(self) -> str:
        self._user_seq += 1
        return f"{self.worker_id}/{self._user_seq}"

    def meta(self, user_id: str, **kw: Any) -> RecordMeta:
        stage = self.stage_fn() if self.stage_fn is not None else {}
        given = {k: v for k, v in kw.items() if v is not None}  # an unset item_id must not hide the shape's
        return RecordMeta(run_id=self.run_id, worker_id=self.worker_id, user_id=user_id, **{**stage, **given})

    def target(self, host: str) -> Target:
        o = self.opts
        return Target(
            base_url=host,
            api_key=os.environ.get(o.api_key_env) or None,
            verify_tls=not o.insecure,
            connect_timeout=o.connect_timeout,
            stall_timeout=o.stall_timeout,
            request_timeout=o.request_timeout,
        )

    def model(self, host: str) -> str:
        """--model, else the first model the server lists (asked once per process)."""
        with self._model_lock:
            if self._model is None:
                self._model = discover_model(self.target(host)) or "default"
            return self._model

    # -- lifecycle -------------------------------------------------------------------------------------------
    def start_run(self) -> None:
        """Master or local runner, at test start: a new run id and sink, announced to the workers."""
        self.run_id = self.opts.run_id or new_run_id()
        self.emitted, self.received, self.outcomes, self.finals = 0, 0, Counter(), {}
        self.inflight_seen, self.lost_workers, self.missing_finals = {}, {}, []
        self.records_path = Path(self.opts.records or f"runs/{self.run_id}/records.jsonl")
        self.sink = open_sink(self.records_path)
        if self.is_master:
            self.runner.send_message(MSG_RUN, {"run_id": self.run_id})
        self._start_pump()

    def _on_run(self, msg: Any, **_: Any) -> None:
        self.run_id = msg.data["run_id"]
        self.emitted, self.batch = 0, []
        spool = Path(self.opts.spool_dir) / self.run_id / f"{self.worker_id}.jsonl"
        self._spool = JsonlSink(spool)
        self._start_pump()

    def _start_pump(self) -> None:
        if self._pump is None or self._pump.dead:
            self._pump = gevent.spawn(self._pump_loop)

    def _pump_loop(self) -> None:
        """Worker: ship batches; master/local: flush the sink (≥ once a second) and watch for lost workers."""
        while True:
            gevent.sleep(SHIP_INTERVAL_S)
            if self.is_worker:
                self.ship()
                continue
            if self.sink is not None:
                self.sink.flush()
            if self.is_master:
                for c in self.runner.clients.all:
                    if c.state == STATE_MISSING and c.id not in self.lost_workers:
                        self._worker_lost(c.id)

    def ship(self) -> None:
        """Worker: send the records made since the last ship, with what is in flight now; spool them first, so a
        dead master loses nothing measured."""
        if self.batch or self.inflight:
            batch, self.batch = self.batch, []
            if self._spool is not None and batch:
                self._spool.write_dicts(batch)
                self._spool.flush()
            self.runner.send_message(MSG_RECORDS, {"records": batch, "inflight": list(self.inflight.values())})

    def _on_ack(self, msg: Any, **_: Any) -> None:
        if self._spool is not None:
            self._spool.close()
            self._spool.path.unlink(missing_ok=True)
            with contextlib.suppress(OSError):  # leave the folders tidy when this was the last spool in them
                self._spool.path.parent.rmdir()
                self._spool.path.parent.parent.rmdir()
            self._spool = None

    def begin(self, meta: RecordMeta) -> int:
        """A request is about to go out (worker: reported to the master with the next batch)."""
        self._inflight_seq += 1
        self.inflight[self._inflight_seq] = {"started_wall": time.time(), **asdict(meta)}
        return self._inflight_seq

    def end(self, token: int) -> None:
        self.inflight.pop(token, None)

    # -- records ---------------------------------------------------------------------------------------------
    def emit(self, record: RequestRecord) -> None:
        """Exactly once per request, in the process that made it."""
        self.emitted += 1
        self.outcomes[record.error_category or record.outcome] += 1
        fire_locust_events(self.env, record)
        if self.is_worker:
            self.batch.append(record.to_dict())
        else:
            self._store([record], counted=True)

    def _store(self, records: list[RequestRecord], counted: bool = False) -> None:
        """Master/local: into the sink, to the listeners."""
        if not counted:
            for r in records:
                self.outcomes[r.error_category or r.outcome] += 1
        if self.sink is not None:
            self.sink.write(records)
        for listener in self.listeners:
            for r in records:
                listener(r)

    def _on_records(self, msg: Any, **_: Any) -> None:
        records = [RequestRecord.from_dict(d) for d in msg.data["records"]]
        self.received += len(records)
        self.inflight_seen[msg.node_id] = msg.data.get("inflight", [])
        self._store(records)

    def _on_final(self, msg: Any, **_: Any) -> None:
        self.finals[msg.node_id] = msg.data["count"]
        self.runner.send_message(MSG_ACK, None, client_id=msg.node_id)

    def _worker_lost(self, worker_id: str) -> None:
        """A worker stopped answering: what it had in flight (as of its last batch) is recorded as lost with it,
        so it is accounted for, not silently missing. Its shipped records are already in the sink."""
        inflight = self.inflight_seen.pop(worker_id, [])
        lost = [
            RequestRecord(
                request_id=f"lost-{uuid.uuid4().hex}",
                wall_sent=m.pop("started_wall"),
                outcome=Outcome.DROPPED,
                error_category=ErrorCategory.LOST_WITH_WORKER,
                error_message="the worker stopped answering while this request was in flight",
                **m,
            )
            for m in inflight
        ]
        self._store(lost)
        self.lost_workers[worker_id] = {"lost_at_wall": time.time(), "lost_in_flight": len(lost)}
        log.error(
            "slabench: worker %s stopped answering; %d in-flight request(s) recorded as lost_with_worker; "
            "the run is degraded",
            worker_id,
            len(lost),
        )
        for listener in self.lost_listeners:
            listener(worker_id, time.time())

    # -- stopping --------------------------------------------------------------------------------------------
    def on_test_stopping(self) -> None:
        if not self.is_master:
            return
        waiting = {c.id for c in self.runner.clients.all if c.state != STATE_MISSING}
        for worker in waiting:
            self.runner.send_message(MSG_STOP, None, client_id=worker)
        deadline = time.monotonic() + FINAL_WAIT_S + (self.env.stop_timeout or 0)
        while not waiting <= set(self.finals) and time.monotonic() < deadline:
            gevent.sleep(0.05)
        self.missing_finals = sorted(waiting - set(self.finals))
        if self.missing_finals:
            log.error(
                "slabench: no final record batch from worker(s) %s; their unshipped records are lost",
                self.missing_finals,
            )

    def _on_stop_request(self, msg: Any, **_: Any) -> None:
        self.runner.stop()  # kills users (in-flight requests become `dropped` records), fires test_stop → finish

    def on_test_stop(self) -> None:
        if self.is_worker:
            self.ship()
            self.runner.send_message(MSG_FINAL, {"count": self.emitted})
            return
        if self._pump is not None:
            self._pump.kill()
        if self.sink is not None:
            self.sink.close()
            self.write_status()
            log.info("slabench: %s", summary_line(self.sink.count, self.sink.path, self.outcomes))
            self.sink = None

    def write_status(self) -> None:
        """`run_status.json` beside the records: counts, and whether the run is degraded (a worker was lost)."""
        missing = self.missing_finals
        status = {
            "schema_version": 1,
            "run_id": self.run_id,
            "records": self.sink.count,
            "outcomes": {str(k): v for k, v in self.outcomes.items()},
            "degraded": bool(self.lost_workers or missing),
            "lost_workers": self.lost_workers,
            "workers_without_final_batch": missing,
        }
        path = self.sink.path.parent / "run_status.json"
        path.write_text(json.dumps(status, indent=2) + "\n")


def summary_line(count: int, path: Path, outcomes: Counter) -> str:
    parts = ", ".join(f"{k} {v}" for k, v in sorted(outcomes.items(), key=lambda kv: -kv[1]))
    return f"{count} records → {path} ({parts or 'none'})"


def fire_locust_events(env: Environment, r: RequestRecord) -> None:
    """The live view: one Locust request entry per metric, in milliseconds. Never used for grading."""
    if r.outcome is Outcome.DROPPED:
        return  # cancelled at stop or lost: ours, not the server's; counted in the records and the summary
    fire = env.events.request.fire
    ok = r.outcome is Outcome.OK
    length = r.completion_tokens or 0
    for name, value in (("TTFT", metrics.ttft(r)), ("ITL", metrics.mean_itl(r)), ("TPOT", metrics.tpot(r))):
        if value is not None and ok:
            fire(
                request_type="LLM", name=name, response_time=value * 1000, response_length=0, exception=None, context={}
            )
    e2e = metrics.e2e(r)
    exc = None if ok else Exception(f"{r.error_category}: {r.error_message}")
    fire(
        request_type="LLM",
        name="E2E",
        response_time=(e2e or 0) * 1000,
        response_length=length,
        exception=exc,
        context={},
    )


def discover_model(target: Target) -> str | None:
    """The first model id at GET /v1/models, or None (the requests will then fail with classified errors)."""
    scheme, host, port, prefix = parse_base_url(target.base_url)
    client = HTTPClient(
        host,
        port,
        ssl=scheme == "https",
        insecure=not target.verify_tls,
        connection_timeout=target.connect_timeout,
        network_timeout=target.connect_timeout,
    )
    headers = {"Authorization": f"Bearer {target.api_key}"} if target.api_key else {}
    try:
        resp = client.get(prefix + "/v1/models", headers=headers)
        body = resp.read()
        if resp.status_code != 200:
            log.error(
                "slabench: GET %s/v1/models answered HTTP %s%s",
                target.base_url,
                resp.status_code,
                " (check the API key)" if resp.status_code in (401, 403) else "",
            )
            return None
        data = json.loads(body).get("data") or []
        return data[0]["id"] if data else None
    except Exception as e:  # any failure here is reported once; each request then records its own error
        log.error("slabench: cannot list models at %s/v1/models: %s", target.base_url, e or type(e).__name__)
        return None
    finally:
        client.close()


# -- the embedded simulator --------------------------------------------------------------------------------------
def start_simulator(opts: Any) -> tuple[subprocess.Popen, str]:
    argv = [sys.executable, "-m", "slabench", "simulate", "--port", "0", "--parent-pid", str(os.getpid())]
    argv += ["--nice", str(EMBEDDED_NICE), *sim_args_to_argv(vars(opts), prefix="sim_")]
    # stderr is inherited: the simulator's own complaints (e.g. a bad --sim-* value) reach the user directly. Its own
    # session: a Ctrl+C in the terminal stops Locust, which cancels its requests, and then the simulator (on quit);
    # the simulator taking the signal too would cut the streams still in flight into errors.
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, start_new_session=True)
    line = ""
    with gevent.Timeout(60, False):
        line = proc.stdout.readline()
    if not line.startswith("slabench simulator listening on "):
        proc.kill()
        raise UserError("the embedded simulator did not start (see its message above); check the --sim-* options")
    return proc, line.rsplit(" ", 1)[-1].strip()


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
    environment.slabench = hub
    if isinstance(runner, WorkerRunner):
        return
    if environment.host:
        try:
            parse_base_url(environment.host)
        except UserError as e:
            log.error("slabench: %s", e)
            raise SystemExit(UserError.exit_code) from None
        return
    if any(getattr(u, "host", None) for u in environment.user_classes):
        return
    try:
        hub.simulator, environment.host = start_simulator(environment.parsed_options)
    except UserError as e:
        log.error("slabench: %s", e)
        raise SystemExit(UserError.exit_code) from None
    log.info("slabench: no --host given; embedded simulator at %s", environment.host)


def _stop_run_before_quitting(environment: Environment, **_: Any) -> None:
    """On a quit mid-run (Ctrl+C reaches every process of a terminal's process group), stop the run before Locust's
    own quitting: users' requests become cancelled records, and a worker ships its last batch before it tells the
    master it is leaving (else the master stops listening to it and those records are lost)."""
    runner = environment.runner
    if runner is not None and runner.state in (STATE_SPAWNING, STATE_RUNNING):
        runner.stop()


def _on_quitting(environment: Environment, **_: Any) -> None:
    hub: RecordHub | None = getattr(environment, "slabench", None)
    if hub is not None and hub.simulator is not None:
        hub.simulator.terminate()
        hub.simulator.wait(5)


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
    hooks.quitting.add_listener(_on_quitting)
    # The parts that ride on the hub, each in its own module: grading against --sla at the end, the server's
    # /metrics scraped beside the records, and the LLM tab in the web UI.
    from slabench import locust_scrape, locust_sla, webui

    locust_sla.install(hooks)
    locust_scrape.install(hooks)
    webui.install(hooks)


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
    error_backoff_s = 1.0  # after a connect error, so a dead host is not hammered in a tight loop

    def on_start(self) -> None:
        self.hub: RecordHub = self.environment.slabench
        self.llm = StreamingClient(self.hub.target(self.host))
        self.user_id = self.hub.next_user_id()
        self.rng = random.Random(f"{self.hub.run_id}/{self.user_id}")

    def on_stop(self) -> None:
        self.llm.close()

    @property
    def model(self) -> str:
        return self.hub.model(self.host)

    def body(
        self,
        messages: list[dict] | None = None,
        prompt: str | None = None,
        max_tokens: int | None = None,
        **params: Any,
    ) -> dict:
        o = self.hub.opts
        params.setdefault("max_tokens", max_tokens or o.max_tokens)
        if o.ignore_eos:
            params["ignore_eos"] = True
        params["stream_options"] = {
            "include_usage": True,
            **({"continuous_usage_stats": True} if o.per_chunk_usage == "on" else {}),
        }
        if messages is not None:
            return chat_body(self.model, messages, **params)
        return completions_body(self.model, prompt or "", **params)

    def request(
        self, body: dict, grade: Callable[[str], dict] | None = None, headers: dict[str, str] | None = None, **meta: Any
    ) -> RequestRecord:
        """Send one request and emit its record (exactly once, even if the user is stopped mid-stream).
        `grade(text) -> dict` adds quality fields to the record."""
        endpoint = "chat" if "messages" in body else "completions"
        meta_ = self.hub.meta(self.user_id, **meta)
        token = self.hub.begin(meta_)
        try:
            reply = self.llm.send(endpoint, body, meta_, on_cancel=self.hub.emit, headers=headers)
            record = reply.record
            if grade is not None and record.outcome is not Outcome.ERROR:
                record = record.replace(**grade(reply.text))
            self.hub.emit(record)
        finally:
            self.hub.end(token)
        if record.error_category == "connect":
            gevent.sleep(self.error_backoff_s)
        return record
