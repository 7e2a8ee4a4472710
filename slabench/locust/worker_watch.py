"""Master: which workers miss their heartbeats now, which came back and after how long, and the longest gap between
each worker's heartbeats — what run_status.json reports and the open-loop shapes wait on. No records here."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from locust.runners import STATE_MISSING

log = logging.getLogger("slabench")


class WorkerWatch:
    def __init__(self, runner: Any) -> None:
        self.runner = runner
        self.missing: dict[str, float] = {}  # worker → wall time it was first seen missing (this run)
        self.came_back: dict[str, float] = {}  # worker → longest time it was missing before coming back (s)
        self.heartbeat_gap: dict[str, float] = {}  # worker → longest gap between its heartbeats while measuring (s)
        # called with (worker_id, missing) when a worker misses its heartbeats, and when it comes back
        self.listeners: list[Callable[[str, bool], None]] = []
        self._last_heartbeat: dict[str, float] = {}

    def new_run(self) -> None:
        """A run starts: workers still missing stay so (from when they went), the rest is this run's to learn."""
        self.missing = {w: t for w, t in self.missing.items() if self.is_missing(w)}
        self.came_back = {}

    def is_missing(self, worker_id: str) -> bool:
        node = self.runner.clients.get(worker_id)
        return node is None or node.state == STATE_MISSING

    def on_heartbeat(self, client_id: str, timestamp: float, measuring: bool) -> None:
        last = self._last_heartbeat.get(client_id)
        if last is not None and measuring:
            self.heartbeat_gap[client_id] = max(self.heartbeat_gap.get(client_id, 0.0), timestamp - last)
        self._last_heartbeat[client_id] = timestamp

    def check(self) -> None:
        """A worker that misses its heartbeats may be busy or dead: note it, and leave the decision to the run's end
        (its records keep counting if it comes back; if not, its spool or last report accounts for it)."""
        now = time.time()
        for c in self.runner.clients.all:
            if c.state == STATE_MISSING and c.id not in self.missing:
                self.missing[c.id] = now
                log.warning(
                    "slabench: worker %s stopped answering (no heartbeat for a few seconds): busy or dead; "
                    "its requests are accounted for at the end of the run",
                    c.id,
                )
                self._tell(c.id, True)
            elif c.state != STATE_MISSING and c.id in self.missing:
                gone = now - self.missing.pop(c.id)
                self.came_back[c.id] = max(self.came_back.get(c.id, 0.0), round(gone, 1))
                log.warning("slabench: worker %s is back after %.0f s without heartbeats", c.id, gone)
                self._tell(c.id, False)

    def _tell(self, worker_id: str, missing: bool) -> None:
        for listener in self.listeners:
            listener(worker_id, missing)
