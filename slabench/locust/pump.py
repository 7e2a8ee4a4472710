"""The record pump, one greenlet per process while a run goes: a worker ships its batches with what it has in
flight; the master or local runner flushes the sink (at least once a second) and the master looks for workers
missing heartbeats."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gevent

from slabench.locust.record_store import RecordStore
from slabench.locust.shipping import Shipper
from slabench.locust.worker_watch import WorkerWatch

SHIP_INTERVAL_S = 0.5


class RecordPump:
    def __init__(
        self,
        store: RecordStore,
        shipper: Shipper | None,
        workers: WorkerWatch | None,
        inflight: Callable[[], list[dict[str, Any]]],
    ) -> None:
        self.store, self.shipper, self.workers, self.inflight = store, shipper, workers, inflight
        self._greenlet: gevent.Greenlet | None = None

    def start(self) -> None:
        if self._greenlet is None or self._greenlet.dead:
            self._greenlet = gevent.spawn(self._loop)

    def stop(self) -> None:
        if self._greenlet is not None:
            self._greenlet.kill()

    def _loop(self) -> None:
        while True:
            gevent.sleep(SHIP_INTERVAL_S)
            if self.shipper is not None:
                self.shipper.ship(self.inflight())
                continue
            self.store.flush()
            if self.workers is not None:
                self.workers.check()
