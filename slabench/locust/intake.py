"""Master: the workers' record batches, stored in arrival order by one greenlet that yields between slices (so
Locust's message loop goes straight on to the next message: a heartbeat is never stuck behind records being stored),
and their final batches, each confirmed. At the stop, every worker without a final batch is accounted for: its
spool, when this host can read it, has every record it made and every request it started; else its last report says
what it had in flight. Either way each request it started ends as one record: its own, or a `lost_with_worker`
stand-in with its request id."""

from __future__ import annotations

import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import gevent
import gevent.event
import gevent.lock
from locust.exception import RPCError

from slabench.core.errors import UserError
from slabench.evidence.starvation import Starvation
from slabench.locust.record_store import RecordStore
from slabench.locust.shipping import MSG_ACK, MSG_FINAL, MSG_RECORDS
from slabench.locust.spool import Journal, journal_path, read_journal, stand_in, unaccounted
from slabench.locust.worker_watch import WorkerWatch

log = logging.getLogger("slabench")

MSG_STOP = "slabench:stop"  # master → workers: stop users now and ship everything
INTAKE_SLICE = 200  # records stored between yields to the event loop
FINAL_WAIT_S = 30.0  # at the end: how long a worker gets to send its final batch
MISSING_WAIT_S = 10.0  # ... and a worker that is missing heartbeats (busy, or dead)
LOST_MESSAGE = "its worker was lost while this request was in flight"


class MasterIntake:
    def __init__(self, runner: Any, store: RecordStore, workers: WorkerWatch, spool_dir: str) -> None:
        self.runner, self.store, self.workers, self.spool_dir = runner, store, workers, spool_dir
        self.run_id = ""
        self.finals: dict[str, int] = {}  # worker → the record count its final batch announced
        self.starvation: dict[str, Starvation] = {}  # worker → how late its event loop ran (with its final batch)
        self.inflight_seen: dict[str, list[dict[str, Any]]] = {}  # worker → what it last reported in flight
        self.lost_workers: dict[str, dict[str, Any]] = {}  # worker → how its records were accounted for
        self.missing_finals: list[str] = []
        self.accounted = False  # workers without a final batch have been accounted for (this run)
        # called with (worker_id, missing_since_wall, exact) for each lost worker, after its records are stored;
        # `exact`: from its spool, so any item without a record was never sent
        self.lost_listeners: list[Callable[[str, float, bool], None]] = []
        self._queue: deque[tuple[str, Any, bool]] = deque()
        self._ready = gevent.event.Event()
        self._lock = gevent.lock.Semaphore()
        self._loop: gevent.Greenlet | None = None
        runner.register_message(MSG_RECORDS, lambda msg, **_: self._arrived(msg.node_id, msg.data, False))
        runner.register_message(MSG_FINAL, lambda msg, **_: self._arrived(msg.node_id, msg.data, True))

    def new_run(self, run_id: str) -> None:
        self.run_id = run_id
        self.finals, self.inflight_seen, self.lost_workers, self.missing_finals = {}, {}, {}, []
        self.starvation = {}
        self.accounted = False
        if self._loop is None or self._loop.dead:
            self._loop = gevent.spawn(self._run)

    def _arrived(self, node: str, data: Any, final: bool) -> None:
        self._queue.append((node, data, final))
        self._ready.set()

    def _run(self) -> None:
        while True:
            self._ready.wait()
            self._ready.clear()
            self.drain(INTAKE_SLICE)

    def drain(self, slice_size: int = 0) -> None:
        """Store every queued message, in order (`slice_size`: yield to the event loop after that many records)."""
        while self._queue:
            with self._lock:
                if not self._queue:
                    break
                node, data, final = self._queue.popleft()
                if final:
                    self._take_final(node, data)
                    continue
                rows = data["records"]
                if "inflight" in data:  # the last slice of a batch says what is in flight
                    self.inflight_seen[node] = data["inflight"]
                step = slice_size or len(rows) or 1
                for i in range(0, len(rows), step):
                    self.store.store_rows(rows[i : i + step])
                    if slice_size:
                        gevent.sleep(0)

    def _take_final(self, node: str, data: Any) -> None:
        self.finals[node] = data["count"]
        if data.get("starvation"):  # (a worker of an older slabench sends none)
            self.starvation[node] = Starvation(**data["starvation"])
        if self.store.sink is None:
            return  # too late for this run's file: the worker keeps its spool
        self.store.flush()
        self.runner.send_message(MSG_ACK, None, client_id=node)

    def stop_workers(self, stop_timeout: float) -> None:
        """Ask every worker to stop its users and ship what it holds; wait for the final batches (a worker missing
        heartbeats gets less time), then account for the workers that sent none."""
        workers = {c.id for c in self.runner.clients.all} | set(self.workers.missing)
        for worker in workers:
            with contextlib.suppress(RPCError):
                self.runner.send_message(MSG_STOP, None, client_id=worker)
        start = time.monotonic()
        deadline = start + FINAL_WAIT_S + stop_timeout
        while time.monotonic() < deadline:
            pending = workers - set(self.finals)
            if not pending or (pending <= set(self.workers.missing) and time.monotonic() - start > MISSING_WAIT_S):
                break
            gevent.sleep(0.05)
        self.account_for_workers_without_final()

    def account_for_workers_without_final(self) -> None:
        self.drain()
        workers = {c.id for c in self.runner.clients.all} | set(self.workers.missing) | set(self.inflight_seen)
        self.missing_finals = sorted(workers - set(self.finals))
        for worker in self.missing_finals:
            self._account_for_lost_worker(worker)
        self.accounted = True

    def _account_for_lost_worker(self, worker_id: str) -> None:
        since = self.workers.missing.get(worker_id)
        path = journal_path(self.spool_dir, self.run_id, worker_id)
        contents = None
        if path.exists():
            try:
                contents = read_journal(path)
            except UserError as e:
                log.warning("slabench: cannot read the spool of lost worker %s: %s", worker_id, e)
        if contents is not None:
            recovered, lost = unaccounted(contents, self.store.ids, LOST_MESSAGE)
        else:
            recovered = []
            lost = [stand_in(m, LOST_MESSAGE) for m in self.inflight_seen.get(worker_id, [])]
            lost = [r for r in lost if r.request_id not in self.store.ids]
        self.store.store(recovered + lost)
        self.lost_workers[worker_id] = {
            "missing_since_wall": since,
            "records_from": "spool" if contents is not None else "last report",
            "recovered_records": len(recovered),
            "lost_in_flight": len(lost),
        }
        log.error(
            "slabench: worker %s was lost; %s: %d record(s) recovered, %d in-flight request(s) recorded as "
            "lost_with_worker; the run is degraded",
            worker_id,
            f"read its spool {path}" if contents is not None else "its spool is not on this host, used its last report",
            len(recovered),
            len(lost),
        )
        if contents is not None and self.store.sink is not None:
            self.store.flush()
            Journal.remove_file(path)
        for listener in self.lost_listeners:
            listener(worker_id, since if since is not None else time.time(), contents is not None)
