"""Worker: every record, and every request as it starts, goes to this run's spool first (`slabench.locust.spool`), then
to the master in batches with what is in flight; the spool is removed once the master confirms it holds the records.
If the master is lost, the load stops and the spool stays for `slabench recover`."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import gevent
from locust.exception import RPCError

from slabench.core.errors import ExitCode
from slabench.evidence.starvation import Starvation
from slabench.locust.spool import Journal, journal_path

log = logging.getLogger("slabench")

MSG_RECORDS = "slabench:records"  # worker → master: a batch of records
MSG_FINAL = "slabench:final"  # worker → master: nothing more will come (with the worker's total)
MSG_ACK = "slabench:ack"  # master → worker: final batch received; the worker may drop its spool
SHIP_SLICE = 200  # records per message: the master decodes a message in one go, its heartbeat handling waits


class Shipper:
    def __init__(self, runner: Any, spool_dir: str, worker_id: str, set_exit_code: Callable[[int], None]) -> None:
        self.runner, self.spool_dir, self.worker_id = runner, spool_dir, worker_id
        self.set_exit_code = set_exit_code
        self.batch: list[dict[str, Any]] = []
        self.journal: Journal | None = None  # this run's spool, until the master confirms it has the records
        self.master_lost = False
        runner.register_message(MSG_ACK, self._on_ack)

    def new_run(self, run_id: str) -> None:
        self.batch = []
        if self.journal is not None:  # the previous run was never confirmed: its spool stays for `slabench recover`
            self.journal.close()
        self.journal = Journal(journal_path(self.spool_dir, run_id, self.worker_id))

    def began(self, entry: dict[str, Any]) -> None:
        if self.journal is not None:
            self.journal.began(entry)

    def record(self, row: dict[str, Any]) -> None:
        if self.journal is not None:
            self.journal.record(row)
        self.batch.append(row)

    def ship(self, inflight: list[dict[str, Any]]) -> None:
        """Send the records made since the last ship, with what is in flight now (all of it in the spool already)."""
        if self.batch or inflight:
            batch, self.batch = self.batch, []
            for i in range(0, len(batch) - SHIP_SLICE, SHIP_SLICE):
                self._send(MSG_RECORDS, {"records": batch[i : i + SHIP_SLICE]})
            tail = batch[(max(0, len(batch) - 1) // SHIP_SLICE) * SHIP_SLICE :]
            self._send(MSG_RECORDS, {"records": tail, "inflight": inflight})

    def final(self, inflight: list[dict[str, Any]], count: int, starvation: Starvation) -> None:
        """The run stopped here: the last records, then the worker's total and how late its event loop ran."""
        self.ship(inflight)
        self._send(MSG_FINAL, {"count": count, "starvation": starvation.as_dict()})

    def _send(self, kind: str, data: Any) -> None:
        try:
            self.runner.send_message(kind, data)
        except RPCError as e:  # the master is gone or unreachable: the spool holds it all
            where = self.journal.path if self.journal is not None else "the spool"
            log.warning("slabench: cannot reach the master (%s); the records stay in %s", e, where)

    def _on_ack(self, msg: Any, **_: Any) -> None:
        if self.journal is not None:
            self.journal.remove()
            self.journal = None

    def on_master_lost(self, down_s: float) -> None:
        self.master_lost = True
        if self.journal is None:
            log.info("slabench: the master is gone (connection down %.0f s); quitting", down_s)
        else:
            spool = self.journal.path
            log.error(
                "slabench: lost the master (connection down %.0f s); stopping the load. This worker's records are "
                "in %s: `slabench recover %s` merges the workers' spools into one records file (exit %d)",
                down_s,
                spool,
                spool.parent,
                ExitCode.INCOMPLETE,
            )
            self.set_exit_code(ExitCode.INCOMPLETE)
        self.runner.quit()

    def wait_for_ack(self, timeout: float) -> None:
        """Quitting: give the master a moment to confirm it holds the records, so the spool can go."""
        end = time.monotonic() + timeout
        while self.journal is not None and not self.master_lost and time.monotonic() < end:
            gevent.sleep(0.05)
        if self.journal is not None and not self.master_lost:
            log.warning(
                "slabench: the master did not confirm this worker's records; they stay in %s "
                "(`slabench recover` merges spools into a records file)",
                self.journal.path,
            )
