"""Master or local runner: where the run's records land — each request once (a batch shipped twice, a record
recovered from a spool, is stored once), counted for the run's accounting, then handed to the listeners (the live
web view, the saturation watch, the refusal watch, the open-loop shapes)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from slabench.core.record import RequestRecord
from slabench.core.sinks import RecordSink, open_sink
from slabench.evidence.accounting import Tally


class RecordStore:
    def __init__(self) -> None:
        self.sink: RecordSink | None = None  # open while a run is measured
        self.path: Path | None = None  # the current (or last) run's record file
        self.tally = Tally()  # what the run's records say
        self.ids: set[str] = set()  # request ids stored this run
        self.duplicates = 0
        self.listeners: list[Callable[[RequestRecord], None]] = []

    def open(self, path: Path) -> None:
        self.path = path
        self.sink = open_sink(path)
        self.tally, self.ids, self.duplicates = Tally(), set(), 0

    def store(self, records: list[RequestRecord]) -> None:
        fresh = self._fresh(records)
        if self.sink is not None:
            self.sink.write(fresh)
        self._hand_on(fresh)

    def store_rows(self, rows: list[dict[str, Any]]) -> None:
        """Records that arrive as rows (a worker's batch): each becomes a record once, through the record boundary
        (`RequestRecord.from_row` raises for a row that breaks it), and is written as the row it came as."""
        pairs = [RequestRecord.from_row(d) for d in rows]
        rows_of = {id(r): row for r, row in pairs}
        fresh = self._fresh([r for r, _ in pairs])
        if self.sink is not None:
            self.sink.write_rows(rows_of[id(r)] for r in fresh)
        self._hand_on(fresh)

    def _fresh(self, records: list[RequestRecord]) -> list[RequestRecord]:
        """The records not stored yet (nor earlier in the same batch), counted for the run."""
        fresh = []
        for r in records:
            if r.request_id not in self.ids:
                self.ids.add(r.request_id)
                fresh.append(r)
        self.duplicates += len(records) - len(fresh)
        self.tally.add(fresh)
        return fresh

    def _hand_on(self, fresh: list[RequestRecord]) -> None:
        for listener in self.listeners:
            for r in fresh:
                listener(r)

    def flush(self) -> None:
        if self.sink is not None:
            self.sink.flush()

    def close(self) -> None:
        if self.sink is not None:
            self.sink.close()
            self.sink = None
