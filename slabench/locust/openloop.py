"""The open-loop dispatcher: sends each scheduled request at its time, whatever is in flight.

Closed-loop users wait for a reply before the next request, so a slow server silently lowers the offered load
(coordinated omission). Here every scheduled item gets its own greenlet and goes out at its due time whatever is in
flight; it only waits if an in-flight cap (`max_in_flight`) binds, and then the wait shows as lateness
(`sent − scheduled`) in its record.

Timing: an item's greenlet starts `lead` seconds before its due time and runs the user's task, which builds the
request; the wrapped client then holds the request until the due time on a high-priority timer, so at the due time
the send is the first thing the event loop does, ahead of reading the streams in flight. What lateness remains is the
event loop finishing its current pass (and the OS giving the process a CPU).

The requests themselves are made by instances of the run's `LLMUser` class, kept in a pool so connections are
reused: one task call per item, with the item visible to the task through `current_item()` (and, if the user class
defines ``prepare_item(item, environment)``, its result through `current_prepared()`, computed a little ahead of the
due time so expensive payload building stays off the send path). Each instance's client is wrapped so the record
carries the item's `scheduled` time, stage, item id and account.

Every item ends as exactly one record: the request's own (ok, error, or cancelled at stop) or, for an item the run
stopped before sending, a `dropped`/`not_sent` record.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import logging
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import gevent
import gevent.lock
import gevent.pool
import numpy as np

from slabench.core import metrics
from slabench.core.record import ErrorCategory, RequestRecord
from slabench.locust.hub import hub_of

log = logging.getLogger("slabench")

_MISSING = object()


@dataclass(frozen=True, slots=True)
class OpenLoopItem:
    """One scheduled request."""

    index: int  # position in the whole schedule (unique across workers)
    due: float  # seconds after the common start at which it must be sent (time scale applied)
    offset_s: float  # its offset in the queue or schedule as given (before any time scale)
    account: str | None = None
    item_id: str | None = None
    seed: int | None = None  # rebuilds the queue item's call (workload queues)
    kind: str | None = None  # "burst" | "gamma" | "rate" | "diurnal" | a queue file's own kind
    stage_level: int | None = None
    stage_unit: str | None = None
    stage_repeat: int | None = None
    stage_phase: str | None = None
    prompt_tokens: int | None = None  # a trace's lengths: what the request asks for (server tokens)
    output_tokens: int | None = None
    prefix_blocks: tuple[int, ...] = ()  # a trace's shared prompt blocks

    def to_wire(self) -> list[Any]:
        return [getattr(self, f) for f in _ITEM_FIELDS]

    @classmethod
    def from_wire(cls, row: Sequence[Any]) -> OpenLoopItem:
        item = cls(*row)
        return dataclasses.replace(item, prefix_blocks=tuple(item.prefix_blocks))  # a list after msgpack

    @property
    def stage(self) -> dict[str, Any]:
        return {f: getattr(self, f) for f in ("stage_level", "stage_unit", "stage_repeat", "stage_phase")}


_ITEM_FIELDS = tuple(f.name for f in dataclasses.fields(OpenLoopItem))


@dataclass(slots=True)
class _Send:
    """The state of one item while its greenlet runs."""

    item: OpenLoopItem
    scheduled: float  # monotonic due time on this host
    prepared: Any = None
    requests: int = 0  # requests the task made for this item (1 expected)


_CURRENT: contextvars.ContextVar[_Send | None] = contextvars.ContextVar("slabench_openloop_item", default=None)


def current_item() -> OpenLoopItem | None:
    """Inside a task run by the open-loop dispatcher: the item being sent; otherwise None (closed loop)."""
    s = _CURRENT.get()
    return s.item if s is not None else None


def item_meta() -> dict[str, Any] | None:
    """RecordMeta fields of the current item (for `RecordHub.stage_fn`, so in-flight bookkeeping names the item
    before the request goes out), or None outside an item."""
    s = _CURRENT.get()
    if s is None:
        return None
    it = s.item
    return {"scheduled": s.scheduled, "item_id": it.item_id, "account": it.account, **it.stage}


def current_prepared() -> Any:
    """The user class's ``prepare_item`` result for the current item (None without one)."""
    s = _CURRENT.get()
    return s.prepared if s is not None else None


def sleep_until(when: float, clock: Callable[[], float] = time.perf_counter) -> None:
    """Block this greenlet until `clock()` reaches `when`, on a high-priority event-loop timer: when it fires, this
    greenlet runs before the I/O callbacks of the same loop pass. The loop's cached time is refreshed first (a stale
    one makes timers fire early; the loop re-checks anyway)."""
    hub = gevent.get_hub()
    while (delay := when - clock()) > 0:
        hub.loop.update_now()
        timer = hub.loop.timer(delay, 0.0, True, _TIMER_PRIORITY)
        try:
            hub.wait(timer)
        finally:
            timer.close()


_TIMER_PRIORITY = 2  # libev's highest


class _ItemClient:
    """Wraps a user's StreamingClient: stamps the current item's schedule and identity on the record's meta and
    tells the dispatcher each record's lateness. Outside an item it is the plain client."""

    def __init__(self, inner: Any, dispatcher: Dispatcher) -> None:
        self._inner = inner
        self._d = dispatcher

    def send(
        self,
        endpoint: str,
        body: dict[str, Any],
        meta: Any,
        on_cancel: Callable[[RequestRecord], None] | None = None,
        **kw: Any,
    ) -> Any:
        s = _CURRENT.get()
        if s is None:
            return self._inner.send(endpoint, body, meta, on_cancel=on_cancel, **kw)
        it = s.item
        # the schedule's fields win: a user that passes its own item_id (e.g. a prompt file's) still yields a record
        # that names the scheduled item, so every item can be matched to exactly one record
        meta = dataclasses.replace(
            meta, scheduled=s.scheduled, item_id=it.item_id, account=meta.account or it.account, **it.stage
        )
        d = self._d
        sleep_until(s.scheduled, d.clock)
        if d.slots is not None:
            if d.slots.locked():
                d.stats.slot_waits += 1
            d.slots.acquire()
        s.requests += 1
        d.stats.in_flight += 1
        d.stats.peak_in_flight = max(d.stats.peak_in_flight, d.stats.in_flight)

        def cancelled(record: RequestRecord) -> None:
            d.observe(record)
            if on_cancel is not None:
                on_cancel(record)

        try:
            reply = self._inner.send(endpoint, body, meta, on_cancel=cancelled, **kw)
        finally:
            d.stats.in_flight -= 1
            if d.slots is not None:
                d.slots.release()
        d.observe(reply.record)
        return reply

    def close(self) -> None:
        self._inner.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


@dataclass
class DispatchStats:
    scheduled: int = 0
    requests: int = 0
    not_sent: int = 0
    task_errors: int = 0
    slot_waits: int = 0  # items that waited for the in-flight cap
    in_flight: int = 0
    peak_in_flight: int = 0
    lateness: list[float] = field(default_factory=list)


class Dispatcher:
    """Sends `items` (sorted by `due`) at t0 + due on this host's monotonic clock, one greenlet per item."""

    def __init__(
        self,
        environment: Any,
        user_class: type,
        items: Sequence[OpenLoopItem],
        t0: float,
        max_in_flight: int = 0,
        prepare_ahead: float = 2.0,
        lead: float = 0.25,
        host: str | None = None,
        on_done: Callable[[Dispatcher], None] | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.env = environment
        self.hub = hub_of(environment)
        self.user_class = user_class
        self.host = host or environment.host
        self.items = list(items)
        self.t0 = t0
        self.clock = clock
        self.slots = gevent.lock.BoundedSemaphore(max_in_flight) if max_in_flight > 0 else None
        self.prepare: Callable[[OpenLoopItem, Any], Any] | None = getattr(user_class, "prepare_item", None)
        self.prepare_ahead = prepare_ahead
        self.lead = lead
        self.prepared: dict[int, Any] = {}
        self.on_done = on_done
        self.stats = DispatchStats(scheduled=len(self.items))
        self.group = gevent.pool.Group()
        self.free_users: list[Any] = []
        self.all_users: list[Any] = []
        self.next_pos = 0  # items[:next_pos] have their greenlet (started `lead` seconds before due)
        self.started: set[int] = set()  # indexes of items whose greenlet has run
        self.finished = False
        self.stopping = False
        self.warned_multi = False
        self._loop: gevent.Greenlet | None = None
        self._prefetch: gevent.Greenlet | None = None

    # -- running ---------------------------------------------------------------------------------------------
    def start(self) -> None:
        if self.items:
            gevent.spawn(self._prewarm)
        self._loop = gevent.spawn(self._run)
        if self.prepare is not None:
            self._prefetch = gevent.spawn(self._prefetch_loop)

    def _prewarm(self) -> None:
        """Before the first due time: one user, and the model name (asked of the server once), so the first
        requests do not pay for them."""
        user = self._user()
        try:
            _ = user.model
        finally:
            self.free_users.append(user)

    def _run(self) -> None:
        for pos, item in enumerate(self.items):
            sleep_until(self.t0 + item.due - self.lead, self.clock)
            self.group.spawn(self._send, item)
            self.next_pos = pos + 1
        self.group.join()
        self._finish()

    def _prefetch_loop(self) -> None:
        prepare = self.prepare
        if prepare is None:  # (started only for a user class that prepares its items)
            return
        for item in self.items:
            sleep_until(self.t0 + item.due - max(self.prepare_ahead, self.lead), self.clock)
            if item.index not in self.prepared:
                with contextlib.suppress(Exception):  # the send prepares it again and records why it failed
                    self.prepared[item.index] = prepare(item, self.env)
            gevent.sleep(0)  # payload building is CPU work: let due sends go first

    def _user(self) -> Any:
        if self.free_users:
            return self.free_users.pop()
        user = self.user_class(self.env)
        if not user.host:
            user.host = self.host
        user.on_start()
        user.llm = _ItemClient(user.llm, self)
        self.all_users.append(user)
        return user

    def _send(self, item: OpenLoopItem) -> None:
        """Runs `lead` seconds before the due time: the task builds the request, the wrapped client sends it at the
        due time (see `_ItemClient.send`)."""
        self.started.add(item.index)
        s = _Send(item, self.t0 + item.due)
        _CURRENT.set(s)
        reason = None
        user = None
        try:
            if self.prepare is not None:
                s.prepared = self.prepared.pop(item.index, _MISSING)
                if s.prepared is _MISSING:
                    s.prepared = self.prepare(item, self.env)
            user = self._user()
            user.rng.choice(user.tasks)(user)
        except gevent.GreenletExit:
            raise
        except Exception as e:  # a task bug: Locust's error view shows it; the item still gets its record
            self.stats.task_errors += 1
            reason = f"the task failed: {type(e).__name__}: {e}"
            self.env.events.user_error.fire(user_instance=user, exception=e, tb=e.__traceback__)
        finally:
            if user is not None:
                self.free_users.append(user)
            if s.requests == 0:
                if reason is None:
                    reason = "the run stopped before it was sent" if self.stopping else "the task sent no request"
                self._not_sent(item, s.scheduled, reason)
            elif s.requests > 1 and not self.warned_multi:
                self.warned_multi = True
                log.warning("slabench: open loop: a task made %d requests for one scheduled item", s.requests)
            self.stats.requests += s.requests

    def observe(self, record: RequestRecord) -> None:
        late = metrics.lateness(record)
        if late is not None:
            self.stats.lateness.append(late)

    def _not_sent(self, item: OpenLoopItem, scheduled: float, reason: str) -> None:
        self.stats.not_sent += 1
        hub = self.hub
        self.hub.emit(
            RequestRecord.dropped(
                ErrorCategory.NOT_SENT,
                reason,
                run_id=hub.run.run_id,
                request_id=uuid.uuid4().hex,
                worker_id=hub.worker_id,
                account=item.account,
                item_id=item.item_id,
                scheduled=scheduled,
                **item.stage,
            )
        )

    # -- stopping --------------------------------------------------------------------------------------------
    def stop(self) -> None:
        """Cancel: in-flight requests become cancelled records, items not yet sent become not_sent records."""
        if self.finished:
            return
        self.stopping = True
        # no yield before the group is killed: item greenlets that have not run yet must not start now
        loops = [g for g in (self._loop, self._prefetch) if g is not None]
        for g in loops:
            g.kill(block=False)
        self.group.kill(block=True, timeout=30)
        gevent.joinall(loops, timeout=5)
        # a greenlet killed before it first ran never runs its cleanup: its item is accounted here
        for item in self.items[: self.next_pos]:
            if item.index not in self.started:
                self._not_sent(item, self.t0 + item.due, "the run stopped before it was sent")
        for item in self.items[self.next_pos :]:
            self._not_sent(item, self.t0 + item.due, "the run stopped before it was sent")
        self.next_pos = len(self.items)
        self._finish()

    def _finish(self) -> None:
        if self.finished:
            return
        self.finished = True
        for user in self.all_users:
            try:
                user.on_stop()
            except Exception as e:  # closing connections must not hide the report
                log.warning("slabench: open loop: closing a user failed: %s", e)
        if self.on_done is not None:
            self.on_done(self)

    def report(self) -> dict[str, Any]:
        st = self.stats
        return {
            "worker": self.hub.worker_id,
            "scheduled": st.scheduled,
            "requests": st.requests,
            "not_sent": st.not_sent,
            "task_errors": st.task_errors,
            "slot_waits": st.slot_waits,
            "peak_in_flight": st.peak_in_flight,
            "lateness": [round(x, 6) for x in st.lateness],
            "finished": self.finished,
            "stopped": self.stopping,
        }


# -- summaries (pure) ------------------------------------------------------------------------------------------------
def lateness_summary(values: Sequence[float]) -> dict[str, float] | None:
    """p50/p90/p99/max lateness in seconds; percentiles by linear interpolation between order statistics
    (numpy's default). None for no data."""
    if len(values) == 0:
        return None
    a = np.asarray(values, dtype=float)
    p50, p90, p99 = np.percentile(a, [50, 90, 99])
    return {"p50": float(p50), "p90": float(p90), "p99": float(p99), "max": float(a.max()), "n": int(a.size)}


def merge_reports(reports: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One summary over every worker's dispatcher report."""
    late = [x for r in reports for x in r["lateness"]]
    return {
        "workers": len(reports),
        "scheduled": sum(r["scheduled"] for r in reports),
        "requests": sum(r["requests"] for r in reports),
        "not_sent": sum(r["not_sent"] for r in reports),
        "task_errors": sum(r["task_errors"] for r in reports),
        "slot_waits": sum(r["slot_waits"] for r in reports),
        "peak_in_flight": sum(r["peak_in_flight"] for r in reports),  # upper bound: workers peak at different times
        "lateness": lateness_summary(late),
    }


def summary_line(name: str, s: dict[str, Any]) -> str:
    late = s["lateness"]
    late_txt = (
        f"lateness p50 {late['p50'] * 1e3:.1f} ms, p99 {late['p99'] * 1e3:.1f} ms, max {late['max'] * 1e3:.1f} ms"
        if late
        else "lateness: no data"
    )
    extra = f", {s['slot_waits']} waited for the in-flight cap" if s["slot_waits"] else ""
    extra += f", {s['task_errors']} task errors" if s["task_errors"] else ""
    return (
        f"open loop {name}: {s['scheduled']} scheduled on {s['workers']} process(es), {s['requests']} sent, "
        f"{s['not_sent']} not sent; {late_txt}; peak in flight ≤ {s['peak_in_flight']}{extra}"
    )


def per_second(offsets: Sequence[float], duration: float) -> np.ndarray:
    """Counts per whole second of [0, duration) (offsets outside are clipped into the first/last bin)."""
    n = max(1, int(np.ceil(duration)))
    idx = np.clip(np.floor(np.asarray(offsets, dtype=float)).astype(int), 0, n - 1)
    return np.bincount(idx, minlength=n)
