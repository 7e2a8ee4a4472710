"""A worker's spool: its journal of every request it starts and every record it makes, so a killed process loses
nothing measured.

One JSON Lines file per worker and run (``<spool-dir>/<run-id>/<worker-id>.jsonl``), written as things happen and
flushed at once (a process killed with -9 leaves what it wrote in the OS; only a machine crash loses the tail):

- ``{"began": {"request_id": ..., "started_wall": ..., <RecordMeta fields>}}`` — just before a request goes out;
- a record (`RequestRecord.to_dict()`), when the request ends.

A request that began but has no record is one the worker had in flight when it died: its stand-in record
(`lost_with_worker`) carries the real request id and identity. The master reads a lost worker's journal when it can
(same host); `slabench recover` reads them after a lost master. A clean run's journals are removed once the master
confirms it holds the records.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from slabench.core.boundary import repeat_message, row_problem
from slabench.core.errors import UserError
from slabench.core.jsonl import json_line, read_json_lines
from slabench.core.record import FIELD_TYPES, META_FIELDS, ErrorCategory, RequestRecord

BEGAN = "began"


def journal_path(spool_dir: str | Path, run_id: str, worker_id: str) -> Path:
    return Path(spool_dir) / run_id / f"{worker_id}.jsonl"


class Journal:
    """Append-only; every line reaches the OS before the call returns (one write per line)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._f = self.path.open("ab")

    def began(self, meta: dict[str, Any]) -> None:
        self._line({BEGAN: meta})

    def record(self, row: dict[str, Any]) -> None:
        self._line(row)

    def _line(self, obj: dict[str, Any]) -> None:
        self._f.write(json_line(obj))
        self._f.flush()

    def close(self) -> None:
        if not self._f.closed:
            self._f.close()

    def remove(self) -> None:
        """The master holds the records: drop the journal."""
        self.close()
        self.remove_file(self.path)

    @staticmethod
    def remove_file(path: Path) -> None:
        """Remove a journal, and its run folder and the spool folder when they are left empty."""
        path.unlink(missing_ok=True)
        for folder in (path.parent, path.parent.parent):
            try:
                folder.rmdir()
            except OSError:
                break


@dataclass
class JournalContents:
    records: list[dict[str, Any]] = field(default_factory=list)
    began: dict[str, dict[str, Any]] = field(default_factory=dict)  # request id → its meta


def read_journal(path: str | Path) -> JournalContents:
    """A journal (or a plain records .jsonl, which is a journal without `began` lines), through the record boundary
    (`slabench.core.boundary`): each record line a valid record, each `began` line a request id and valid identity
    fields, each request recorded once. A last line cut by the kill is skipped; any other bad line is an error naming
    the file, the line and the rule."""
    p = Path(path)
    out = JournalContents()
    where: dict[str, int] = {}  # request id → the line of its record
    lines = read_json_lines(p, _journal_line, "not a spool or records line", "is this a slabench spool file?")
    for n, (rid, obj, began) in lines:
        if began:
            out.began[rid] = obj
            continue
        if rid in where:
            raise UserError(f"{p}: {repeat_message(rid, [where[rid], n], 'line')}")
        where[rid] = n
        out.records.append(obj)
    return out


def _journal_line(obj: Any) -> tuple[str, dict[str, Any], bool]:
    """A journal line's request id, then its meta and True (a `began` line) or the line itself and False (a valid
    record)."""
    if not isinstance(obj, dict):
        raise ValueError("not a JSON object")
    if BEGAN in obj:
        return (*_began(obj[BEGAN]), True)
    return RequestRecord.from_dict(obj).request_id, obj, False


def _began(meta: Any) -> tuple[str, dict[str, Any]]:
    """A `began` line's request id and meta, checked as the record fields they become (a stand-in record)."""
    if not isinstance(meta, dict):
        raise ValueError("began is not a JSON object")
    rid, run_id = meta.get("request_id"), meta.get("run_id")
    if not isinstance(rid, str) or not rid:  # a stand-in record needs both
        raise ValueError(f"began request_id is {rid!r}; it is text")
    if not isinstance(run_id, str):
        raise ValueError(f"began run_id is {run_id!r}; it is text")
    fields = [f for f in META_FIELDS if f in meta]
    if (why := row_problem(meta, FIELD_TYPES, fields)) is not None:
        raise ValueError(why)
    if (why := row_problem({"wall_sent": meta.get("started_wall")}, FIELD_TYPES, ["wall_sent"])) is not None:
        raise ValueError(why.replace("wall_sent", "started_wall"))
    return rid, meta


def stand_in(meta: dict[str, Any], message: str) -> RequestRecord:
    """The record of a request that began on a worker that died before recording it (real id and identity)."""
    m = dict(meta)
    started = m.pop("started_wall", None)
    fields = {k: v for k, v in m.items() if k in META_FIELDS}
    return RequestRecord.dropped(ErrorCategory.LOST_WITH_WORKER, message, wall_sent=started, **fields)


def unaccounted(
    contents: JournalContents, known: set[str], message: str
) -> tuple[list[RequestRecord], list[RequestRecord]]:
    """What a journal holds that `known` (request ids already stored) lacks: its records, and stand-ins for the
    requests that began and have no record anywhere."""
    records = []
    for row in contents.records:
        if row["request_id"] not in known:
            records.append(RequestRecord.from_dict(row))
    have = known | {r.request_id for r in records}
    lost = [stand_in(meta, message) for rid, meta in contents.began.items() if rid not in have]
    return records, lost


def spool_files(paths: Iterable[str | Path]) -> list[Path]:
    """Files named on the command line, and the `*.jsonl` files under directories named there."""
    out: list[Path] = []
    for raw in paths:
        p = Path(raw)
        if p.is_dir():
            found = sorted(p.rglob("*.jsonl"))
            if not found:
                raise UserError(f"{p}: no *.jsonl spool files in this directory")
            out += found
        elif p.is_file():
            out.append(p)
        else:
            raise UserError(f"{p}: no such spool file or directory")
    return out
