"""What every slabench load shape shares: the plan, a common start, stage stamping and open-loop dispatch.

A shape runs on the master (or the local runner) only, so at test start the master fixes one wall-clock start time
and sends each worker what it needs to act on its own: the stage table (closed loop: each worker stamps records with
the stage at the time the request starts) or its share of the scheduled items (open loop: each worker's dispatcher
sends them at their offsets from the common start). Partitioning happens on the master, once.

Shapes are picked like any Locust shape (`-f locustfiles/chat_replay.py,shapes/burst.py`, or the web UI's class
picker) or by name with ``--shape steps|burst|rate|diurnal`` when several shape files are loaded.
"""

from __future__ import annotations

import inspect
import logging
import math
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, TypedDict

from locust import LoadTestShape, TaskSet, events
from locust.runners import LocalRunner, MasterRunner, WorkerRunner

from slabench.core.errors import UserError
from slabench.core.record import ErrorCategory, RequestRecord, StageUnit, stage_fields
from slabench.locust.distributed import fail_at_start
from slabench.locust.hooks import install_once
from slabench.locust.hub import find_hub, hub_of
from slabench.locust.openloop import Dispatcher, OpenLoopItem, item_meta, merge_reports, summary_line
from slabench.locust.plugin import LLMUser, refresh_loop_clock
from slabench.locust.plugin import install as install_plugin
from slabench.locust.state import first_install
from slabench.shapes.schedules import Span, partition, span_at, step_plan

log = logging.getLogger("slabench")

MSG_SHAPE = "slabench:shape"  # master → each worker: common start, stage table, the worker's items
MSG_REPORT = "slabench:openloop-report"  # worker → master: its dispatcher's counts and lateness
MISSING_REPORT_WAIT_S = 30.0  # an open-loop shape stops waiting for a worker missing heartbeats this long


@dataclass(frozen=True)
class Plan:
    """What a shape will do in this run. `spans` stamp stages (closed loop); `items` are sent open loop."""

    spans: tuple[Span, ...]
    level_unit: StageUnit | None  # what the spans' levels count: users, or requests/s (MILLI_RPS); None: no level
    items: tuple[OpenLoopItem, ...] | None = None
    user_class: str | None = None  # open loop: the User class whose task sends each item
    end: float = 0.0  # seconds after the start: plan end (closed loop) or last due time (open loop)
    text: str = ""  # one line for the log
    source: str = ""  # where the items come from (a queue file, the dataset), for messages about them


class ShapeMessage(TypedDict):
    """What the master sends each worker at test start (and what the local runner hands itself)."""

    t0_wall: float  # the common start, wall clock
    spans: list[list[Any]]  # `_span_wire` rows
    unit: StageUnit | None
    user_class: str | None
    max_in_flight: int
    prepare_ahead: float
    lead: float
    items: list[list[Any]] | None  # `OpenLoopItem.to_wire` rows; None: closed loop
    host: str | None


def span_stage(span: Span | None, unit: StageUnit | None) -> dict[str, Any]:
    """The record's stage fields for a span."""
    return stage_fields(span.level, unit, span.repeat, span.phase) if span is not None else {}


class StageClock:
    """`RecordHub.stage_fn` for closed-loop shapes: the stage at the moment a request starts."""

    def __init__(
        self, spans: tuple[Span, ...], unit: StageUnit | None, t0: float, clock: Callable[[], float] = time.perf_counter
    ):
        self.spans, self.unit, self.t0, self.clock = spans, unit, t0, clock
        self.last = span_stage(spans[-1], unit) if spans else {}

    def __call__(self) -> dict[str, Any]:
        span = span_at(self.spans, self.clock() - self.t0)
        return span_stage(span, self.unit) if span is not None else self.last


# Locust's headless defaults for -u/-r, set after the init event; shapes do not read them, and counting them would
# build the plan (parse a 20k-row queue) a second time at the first tick.
_FILLED_IN_AFTER_INIT = frozenset({"num_users", "spawn_rate"})


# -- option helpers --------------------------------------------------------------------------------------------------
def opt_float(opts: Any, name: str) -> float:
    """A float option (the web UI hands values back as text)."""
    raw = getattr(opts, name)
    try:
        return float(raw)
    except (TypeError, ValueError):
        raise UserError(f"--{name.replace('_', '-')} {raw!r}: not a number") from None


def opt_int(opts: Any, name: str) -> int:
    v = opt_float(opts, name)
    if not math.isfinite(v) or v != int(v):
        raise UserError(f"--{name.replace('_', '-')} {getattr(opts, name)!r}: not a whole number")
    return int(v)


def add_step_options(g: Any, prefix: str, per: str, warmup: float, hold: float, cooldown: float) -> None:
    """The timing options every stepped shape has, as --<prefix>-warmup … --<prefix>-repeat-start."""
    g.add_argument(f"--{prefix}-warmup", type=float, default=warmup, help=f"seconds of warm-up per {per} and repeat")
    g.add_argument(f"--{prefix}-hold", type=float, default=hold, help=f"seconds measured per {per} and repeat")
    g.add_argument(f"--{prefix}-cooldown", type=float, default=cooldown, help=f"seconds at the {per} after the hold")
    g.add_argument(f"--{prefix}-idle", type=float, default=0.0, help="seconds with no load after each cool-down")
    g.add_argument(f"--{prefix}-repeats", type=int, default=1, help=f"repeats of every {per} in this run")
    g.add_argument(
        f"--{prefix}-order",
        choices=["sweep", "level"],
        default="sweep",
        help="sweep: 1,2,4,1,2,4 (repeats far apart in time); level: 1,1,2,2,4,4",
    )
    g.add_argument(
        f"--{prefix}-repeat-start",
        type=int,
        default=0,
        help="number of the first repeat (for repeats spread over several runs: run k uses k × repeats)",
    )


def stepped_spans(opts: Any, prefix: str, levels: Sequence[float]) -> tuple[Span, ...]:
    """The spans of `levels` as the options `add_step_options(…, prefix, …)` added ask."""
    return step_plan(
        levels,
        warmup=opt_float(opts, f"{prefix}_warmup"),
        hold=opt_float(opts, f"{prefix}_hold"),
        cooldown=opt_float(opts, f"{prefix}_cooldown"),
        idle=opt_float(opts, f"{prefix}_idle"),
        repeats=opt_int(opts, f"{prefix}_repeats"),
        order=str(getattr(opts, f"{prefix}_order")),
        repeat_start=opt_int(opts, f"{prefix}_repeat_start"),
    )


# -- the shapes ------------------------------------------------------------------------------------------------------
class SlabenchShape(LoadTestShape):
    """Base for slabench shapes. Subclasses define `alias`, `add_options(parser)` and `build(opts, env) -> Plan`."""

    abstract = True
    alias: ClassVar[str] = ""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]  # locust's LoadTestShape.__init__ is unannotated
        self.plan: Plan | None = None
        self.t0: float | None = None  # perf_counter at the common start; set at test start
        self._cache: tuple[tuple[tuple[str, str], ...], Plan] | None = None

    @classmethod
    def add_options(cls, parser: Any) -> None:
        raise NotImplementedError

    def build(self, opts: Any, environment: Any) -> Plan:
        raise NotImplementedError

    def plan_for(self, environment: Any) -> Plan:
        """The plan for the current options (built once per distinct set of options)."""
        opts = environment.parsed_options
        key = tuple(sorted((k, repr(v)) for k, v in vars(opts).items() if k not in _FILLED_IN_AFTER_INIT))
        if self._cache is None or self._cache[0] != key:
            plan = self.build(opts, environment)
            if plan.items:  # the user class's own rules for what it is handed, before any load
                user_class = next(c for c in environment.user_classes if c.__name__ == plan.user_class)
                try:
                    user_class.check_items(plan.items)
                except UserError as e:
                    raise UserError(f"{plan.source}: {e}" if plan.source else str(e)) from None
            self._cache = (key, plan)
        return self._cache[1]

    # Locust resets the shape clock at start_shape and again inside the first runner.start (after test_start
    # fired); once the common start is fixed it must stay put.
    def reset_time(self) -> None:
        if self.t0 is None:
            super().reset_time()  # type: ignore[no-untyped-call]  # locust's reset_time is unannotated

    def elapsed(self) -> float:
        return time.perf_counter() - (self.t0 if self.t0 is not None else self.start_time)

    def tick(self) -> tuple[int, float] | None:
        if self.runner is None:  # Locust attaches the runner before its first tick
            return None
        env = self.runner.environment
        if self.plan is None:
            try:
                self.plan = self.plan_for(env)
            except UserError as e:
                fail(env, e)
                return None
            log.info("slabench: shape %s: %s", self.alias, self.plan.text)
        return self.step(self.plan, self.elapsed(), env)

    def step(self, plan: Plan, t: float, environment: Any) -> tuple[int, float] | None:
        raise NotImplementedError

    def finish_run(self) -> None:
        self.plan, self.t0 = None, None


class ClosedLoopShape(SlabenchShape):
    """Users follow the plan's spans (users = level; none while idle)."""

    abstract = True
    spawn_rate_option: ClassVar[str] = ""

    def step(self, plan: Plan, t: float, environment: Any) -> tuple[int, float] | None:
        span = span_at(plan.spans, t)
        if span is None:
            return None
        rate = opt_float(environment.parsed_options, self.spawn_rate_option) if self.spawn_rate_option else 0.0
        return span.users, rate if rate > 0 else max(span.users, 1)


class OpenLoopShape(SlabenchShape):
    """No Locust-spawned users: workers' dispatchers send the items. Ends when every dispatcher has finished (all
    items sent and answered), or when, after the last due time, no request has finished for
    `--open-loop-drain-timeout` seconds (a saturated machine or server still finishing requests is waited for: each
    one ends within --request-timeout anyway)."""

    abstract = True

    def step(self, plan: Plan, t: float, environment: Any) -> tuple[int, float] | None:
        rt = hub_of(environment).parts.get(ShapeRuntime)
        assert rt is not None  # put at init, before the shape's first tick
        if self.t0 is not None and rt.all_reported():
            return None
        opts = environment.parsed_options
        last_due = plan.end + opt_float(opts, "open_loop_start_delay")
        drain = opt_float(opts, "open_loop_drain_timeout")
        if self.t0 is not None and drain_expired(t, last_due, drain, rt.since_last_record()):
            log.warning(
                "slabench: open loop: no request finished for %.0f s, %.0f s after the last due time; stopping",
                drain,
                t - last_due,
            )
            return None
        return 0, 1


def drain_expired(t: float, last_due: float, drain_timeout: float, since_last_record: float) -> bool:
    """After the last due time, wait for the requests in flight while they keep finishing; give up once none has
    finished for `drain_timeout` seconds (counted from the last due time at the earliest)."""
    return t - last_due > drain_timeout and since_last_record > drain_timeout


def fail(environment: Any, e: UserError) -> None:
    """A bad option found when a test starts (web UI): one line in the log; a headless run exits 3."""
    log.error("slabench: %s", e)
    if environment.parsed_options is not None and environment.parsed_options.headless:
        environment.process_exit_code = UserError.exit_code


# -- the per-process runtime -------------------------------------------------------------------------------------
class ShapeRuntime:
    """Per process (one of the hub's parts): starts the shape's stage clock / dispatchers, and on the
    master (or local runner) checks that every scheduled item ends as exactly one record."""

    def __init__(self, environment: Any) -> None:
        self.env = environment
        self.runner = environment.runner
        self.hub = hub_of(environment)
        self.is_master = isinstance(self.runner, MasterRunner)
        self.is_worker = isinstance(self.runner, WorkerRunner)
        self.shape: SlabenchShape | None = None
        self.dispatcher: Dispatcher | None = None
        self.expected: set[str] = set()
        self.reports: dict[str, dict[str, Any]] = {}  # per worker: its dispatcher's report
        self.pending: dict[str, dict[str, OpenLoopItem]] = {}  # per worker: items without a record yet
        self.t0_wall = 0.0
        if self.is_worker:
            self.runner.register_message(MSG_SHAPE, self._on_shape)
            return
        if self.is_master:
            self.runner.register_message(MSG_REPORT, self._on_report)
        self.missing: dict[str, float] = {}  # master: workers missing heartbeats now → since (monotonic)
        self.last_record = time.monotonic()  # master / local: when the latest record was stored
        # the record hub calls these on the master / local runner
        self.hub.run_started.append(self.on_run_started)  # after the hub announced the run id to the workers
        self.hub.store.listeners.append(self._on_record)
        self.hub.workers.listeners.append(self._on_worker_missing)
        if self.hub.intake is not None:
            self.hub.intake.lost_listeners.append(self._on_worker_lost)

    # master / local -------------------------------------------------------------------------------------------
    def on_run_started(self) -> None:
        shape = self.env.shape_class
        if not isinstance(shape, SlabenchShape):
            return
        if shape.plan is None:  # started without a tick (not expected, but never start without a plan)
            shape.plan = shape.plan_for(self.env)
        plan = shape.plan
        self.shape, self.reports, self.pending = shape, {}, {}
        self.last_record = time.monotonic()
        shape.t0 = time.perf_counter()
        opts = self.env.parsed_options
        start_delay = opt_float(opts, "open_loop_start_delay") if plan.items is not None else 0.0
        self.t0_wall = time.time() + start_delay
        msg: ShapeMessage = {
            "t0_wall": self.t0_wall,
            "spans": [_span_wire(s) for s in plan.spans],
            "unit": plan.level_unit,
            "user_class": plan.user_class,
            "max_in_flight": opt_int(opts, "open_loop_max_in_flight"),
            "prepare_ahead": opt_float(opts, "open_loop_prepare_ahead"),
            "lead": opt_float(opts, "open_loop_lead"),
            "items": None,
            "host": self.env.host,
        }
        if not self.is_master:
            self.expected = {"local"} if plan.items is not None else set()
            if plan.items is not None:
                self.pending["local"] = _by_id(plan.items)
                msg["items"] = [it.to_wire() for it in plan.items]
            self._start(msg)
            return
        workers = sorted(c.id for c in self.runner.clients.ready + self.runner.clients.running)
        workers += sorted(c.id for c in self.runner.clients.spawning if c.id not in workers)
        self.expected = set(workers) if plan.items is not None else set()
        n = len(workers)
        for i, worker in enumerate(workers):
            data = msg.copy()
            if plan.items is not None:
                share = [plan.items[k] for k in partition(len(plan.items), i, n)]
                self.pending[worker] = _by_id(share)
                data["items"] = [it.to_wire() for it in share]
                data["max_in_flight"] = -(-msg["max_in_flight"] // n)  # the cap is for the run: each worker's share
            self.runner.send_message(MSG_SHAPE, data, client_id=worker)

    def all_reported(self) -> bool:
        """Every worker's dispatcher reported — not waiting for one that has missed its heartbeats for a while (a
        dead worker never reports; the record hub accounts for its items at the end)."""
        if not self.expected:
            return False
        waited = [w for w, since in self.missing.items() if time.monotonic() - since > MISSING_REPORT_WAIT_S]
        return self.expected - set(waited) <= set(self.reports)

    def _on_worker_missing(self, worker_id: str, missing: bool) -> None:
        """A worker missed its heartbeats (busy or dead) or is back: the shape goes on either way."""
        if missing:
            self.missing[worker_id] = time.monotonic()
        else:
            self.missing.pop(worker_id, None)

    def _on_report(self, msg: Any, **_: Any) -> None:
        self.reports[msg.node_id] = msg.data

    def since_last_record(self) -> float:
        return time.monotonic() - self.last_record

    def _on_record(self, record: RequestRecord) -> None:
        self.last_record = time.monotonic()
        pending = self.pending.get(record.worker_id)
        if pending is not None and record.item_id is not None:
            pending.pop(record.item_id, None)

    def _on_worker_lost(self, worker_id: str, when_wall: float, exact: bool = False) -> None:
        """Master, at the end of the run: a worker was lost and the record hub has stored what it recovered. Its
        items that still have no record get one each: not sent — or, when the hub had only the worker's last report
        (`exact` false), lost with the worker if they were due before it went missing (they may have gone out).
        Its items are not handed to other workers: they would go out late and from elsewhere, which is not the
        schedule."""
        pending = self.pending.get(worker_id)
        self.expected.discard(worker_id)
        if not pending:
            return
        noticed = when_wall - self.t0_wall
        for item in list(pending.values()):
            lost = not exact and item.due <= noticed
            self.hub.emit(
                RequestRecord.dropped(
                    ErrorCategory.LOST_WITH_WORKER if lost else ErrorCategory.NOT_SENT,
                    "its worker was lost; not known to have been sent"
                    if lost
                    else "its worker was lost before it sent this item",
                    run_id=self.hub.run.run_id,
                    request_id=f"lost-{uuid.uuid4().hex}",
                    worker_id=worker_id,
                    account=item.account,
                    item_id=item.item_id,
                    **item.stage,
                )
            )
        log.error(
            "slabench: open loop: %d item(s) of lost worker %s recorded as not sent/lost", len(pending), worker_id
        )

    def on_test_stop(self) -> None:
        self.hub.stage_fn = None  # a later run without a slabench shape must not inherit this one's stages
        if self.is_worker or self.shape is None:
            return
        if self.shape.plan is not None and self.shape.plan.items is not None:
            missing = self.expected - set(self.reports)
            if missing:
                log.error("slabench: open loop: no dispatcher report from %s", ", ".join(sorted(missing)))
            unrecorded = sum(len(p) for p in self.pending.values())
            if unrecorded:
                log.error("slabench: open loop: %d scheduled item(s) have no record", unrecorded)
            log.info("slabench: %s", summary_line(self.shape.alias, merge_reports(list(self.reports.values()))))
        self.shape.finish_run()
        self.shape = None

    # every process that sends requests --------------------------------------------------------------------------
    def _on_shape(self, msg: Any, **_: Any) -> None:
        self._start(msg.data)

    def _start(self, data: ShapeMessage) -> None:
        t0 = time.perf_counter() + (data["t0_wall"] - time.time())
        spans = tuple(_span_unwire(s) for s in data["spans"])
        clock = StageClock(spans, data["unit"], t0) if data["items"] is None and spans else None
        self.hub.stage_fn = _stage_fn(clock)
        if self.dispatcher is not None and not self.dispatcher.finished:
            self.dispatcher.stop()
        self.dispatcher = None
        if data["items"] is None:
            return
        user_class = self.env.user_classes_by_name[data["user_class"]]
        self.dispatcher = Dispatcher(
            self.env,
            user_class,
            [OpenLoopItem.from_wire(r) for r in data["items"]],
            t0,
            max_in_flight=data["max_in_flight"],
            prepare_ahead=data["prepare_ahead"],
            lead=data["lead"],
            host=data["host"],
            on_done=self._dispatcher_done,
        )
        if self.is_worker and data["t0_wall"] < time.time():
            log.warning("slabench: open loop: the start message arrived %.3f s late", time.time() - data["t0_wall"])
        self.dispatcher.start()

    def _dispatcher_done(self, d: Dispatcher) -> None:
        report = d.report()
        if self.is_worker:
            self.runner.send_message(MSG_REPORT, report)
        else:
            self.reports["local"] = report

    def on_test_stopping(self) -> None:
        """Worker / local: cancel what is left, before the record hub ships its last batch (at test_stop)."""
        if self.dispatcher is not None:
            self.dispatcher.stop()


def _stage_fn(clock: StageClock | None) -> Callable[[], dict[str, Any]]:
    """Open-loop item fields inside a dispatched item, else the closed-loop stage at this moment."""

    def fn() -> dict[str, Any]:
        fields = item_meta()
        if fields is not None:
            return fields
        return clock() if clock is not None else {}

    return fn


def _by_id(items: Sequence[OpenLoopItem]) -> dict[str, OpenLoopItem]:
    """Scheduled items by id, each waiting for its record (queue rows and generated arrivals all carry one)."""
    return {it.item_id: it for it in items if it.item_id is not None}


def _span_wire(s: Span) -> list[Any]:
    return [s.start, s.end, s.level, s.repeat, s.phase]


def _span_unwire(row: list[Any]) -> Span:
    return Span(*row)


# -- wiring into Locust ------------------------------------------------------------------------------------------
def add_common_options(parser: Any) -> None:
    g = parser.add_argument_group("slabench load shapes")
    g.add_argument(
        "--shape",
        default="",
        help="with several shape files loaded: the shape to run (steps, burst, rate, diurnal)",
    )
    g.add_argument(
        "--open-loop-max-in-flight",
        type=int,
        default=0,
        help="open-loop shapes: cap on requests in flight across all workers (0 = none); waits show as lateness",
    )
    g.add_argument(
        "--open-loop-start-delay",
        type=float,
        default=2.0,
        help="open-loop shapes: seconds between test start and the first due time (lets workers get their items)",
    )
    g.add_argument(
        "--open-loop-drain-timeout",
        type=float,
        default=300.0,
        help="open-loop shapes: after the last due time, stop waiting for requests in flight once none has "
        "finished for this many seconds",
    )
    g.add_argument(
        "--open-loop-lead",
        type=float,
        default=0.25,
        help="open-loop shapes: seconds before its due time that a request is built (it is sent at the due time)",
    )
    g.add_argument(
        "--open-loop-prepare-ahead",
        type=float,
        default=2.0,
        help="open-loop shapes: seconds ahead of its due time that a user class's prepare_item(item) runs",
    )


def _select_shape(environment: Any) -> None:
    """--shape NAME picks among the loaded shapes (class name or alias, any case)."""
    name = (getattr(environment.parsed_options, "shape", "") or "").strip().lower()
    if not name:
        return
    available = environment.available_shape_classes or {}
    for cls_name, inst in available.items():
        if name in (cls_name.lower(), getattr(inst, "alias", "").lower()):
            environment.shape_class = inst
            inst.runner = environment.runner
            return
    known = ", ".join(sorted(getattr(i, "alias", "") or n for n, i in available.items())) or "none loaded"
    raise UserError(f"--shape {name}: no such shape among the loaded files ({known}); add e.g. -f shapes/{name}.py")


def _on_init(environment: Any, runner: Any, **_: Any) -> None:
    if runner is None or not isinstance(runner, LocalRunner | MasterRunner | WorkerRunner):
        return
    hub_of(environment).parts.put(ShapeRuntime(environment))
    if isinstance(runner, WorkerRunner) or environment.parsed_options is None:
        return
    try:
        _select_shape(environment)
        shape = environment.shape_class
        if isinstance(shape, SlabenchShape) and environment.parsed_options.headless:
            shape.plan_for(environment)  # bad options fail here, before any load
            refresh_loop_clock()  # building the plan took a while
    except UserError as e:
        fail_at_start(environment, e)


def _runtime(environment: Any, method: str) -> None:
    hub = find_hub(environment)
    rt = hub.parts.get(ShapeRuntime) if hub is not None else None
    if rt is not None:
        getattr(rt, method)()


def install(shape_class: type[SlabenchShape], hooks: Any = events) -> None:
    """Register the shape machinery once per event hooks, and `shape_class`'s options once per alias."""
    install_plugin(hooks)  # the record hub exists from its init on; the runtime rides on its run_started
    if install_once(hooks, "shapes", add_common_options, _on_init):
        hooks.test_stopping.add_listener(lambda environment, **_: _runtime(environment, "on_test_stopping"))
        hooks.test_stop.add_listener(lambda environment, **_: _runtime(environment, "on_test_stop"))
    if first_install(hooks, f"{__name__}:{shape_class.alias}"):
        hooks.init_command_line_parser.add_listener(shape_class.add_options)


def check_user_class(user_class: type) -> None:
    """The dispatcher calls task functions of an LLMUser subclass directly; TaskSets need Locust's scheduler."""
    if not (inspect.isclass(user_class) and issubclass(user_class, LLMUser)):
        raise UserError(f"open-loop shapes drive slabench LLMUser subclasses; {user_class.__name__} is not one")
    tasks = getattr(user_class, "tasks", None) or []
    if not tasks:
        raise UserError(f"{user_class.__name__} has no @task to run for each scheduled item")
    if any(inspect.isclass(t) and issubclass(t, TaskSet) for t in tasks):
        raise UserError(f"{user_class.__name__}: open-loop shapes run @task methods, not TaskSets")


def open_loop_user_class(environment: Any) -> str:
    """The one User class an open-loop shape drives."""
    classes: list[type] = environment.user_classes
    if len(classes) != 1:
        names = ", ".join(c.__name__ for c in classes) or "none"
        raise UserError(
            f"open-loop shapes drive exactly one User class; the run has {names} — name one on the command line"
        )
    check_user_class(classes[0])
    return classes[0].__name__
