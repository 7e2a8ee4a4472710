"""Record sinks: JSON Lines and Parquet, one per run, flushed at least once a second so a killed run loses at most
the last second. And the matching readers.

Parquet needs a footer before it can be read, so a Parquet "file" here is a directory of parts (`part-00000.parquet`,
...): each flush writes one small part atomically (temp name + rename); `close()` compacts them into one part. Any
Parquet reader (pandas, pyarrow.dataset, DuckDB) reads the directory as one table.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.parquet as pq

from slabench.core.boundary import repeat_message, repeated_id
from slabench.core.errors import UserError
from slabench.core.jsonl import json_line, read_json_lines
from slabench.core.record import _FIELDS, RecordError, RequestRecord

FLUSH_INTERVAL_S = 1.0


class RecordSink(Protocol):
    path: Path
    count: int

    def write(self, records: Iterable[RequestRecord]) -> None: ...
    def write_rows(self, rows: Iterable[dict[str, Any]]) -> None: ...
    def flush(self) -> None: ...
    def close(self) -> None: ...


class _RowSink:
    """What both sinks share: records come in as rows and are flushed at most every FLUSH_INTERVAL_S."""

    count: int
    _last_flush: float

    def write(self, records: Iterable[RequestRecord]) -> None:
        self.write_rows(r.to_dict() for r in records)

    def write_rows(self, rows: Iterable[dict[str, Any]]) -> None:
        """Records as `RequestRecord.to_dict` rows (a row checked by `RequestRecord.from_row`)."""
        for row in rows:
            self._put(row)
            self.count += 1
        if time.monotonic() - self._last_flush >= FLUSH_INTERVAL_S:
            self.flush()

    def _put(self, row: dict[str, Any]) -> None:
        raise NotImplementedError

    def flush(self) -> None:
        raise NotImplementedError


class JsonlSink(_RowSink):
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._f = self.path.open("ab")
        self._last_flush = time.monotonic()
        self.count = 0

    def _put(self, row: dict[str, Any]) -> None:
        self._f.write(json_line(row))

    def flush(self) -> None:
        self._f.flush()
        self._last_flush = time.monotonic()

    def close(self) -> None:
        if not self._f.closed:
            self._f.flush()
            os.fsync(self._f.fileno())
            self._f.close()


def _arrow_type(annotation: str) -> pa.DataType:
    base = annotation.replace(" | None", "").strip()
    return {
        "str": pa.string(),
        "int": pa.int64(),
        "float": pa.float64(),
        "bool": pa.bool_(),
        "Outcome": pa.string(),
        "ErrorCategory": pa.string(),
        "tuple[float, ...]": pa.list_(pa.float64()),
        "tuple[int, ...]": pa.list_(pa.int64()),
    }[base]


ARROW_SCHEMA = pa.schema([pa.field(f.name, _arrow_type(str(f.type))) for f in _FIELDS])


class ParquetSink(_RowSink):
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        self._buffer: list[dict[str, Any]] = []
        self._next_part = len(list(self.path.glob("part-*.parquet")))
        self._last_flush = time.monotonic()
        self.count = 0

    def _put(self, row: dict[str, Any]) -> None:
        self._buffer.append(row)

    def _write_part(self, table: pa.Table) -> None:
        final = self.path / f"part-{self._next_part:05d}.parquet"
        tmp = self.path / f"_{final.name}.tmp"  # `_` names are not read: a kill mid-write leaves the records readable
        pq.write_table(table, tmp)
        os.replace(tmp, final)
        self._next_part += 1

    def flush(self) -> None:
        self._last_flush = time.monotonic()
        if self._buffer:
            self._write_part(pa.Table.from_pylist(self._buffer, schema=ARROW_SCHEMA))
            self._buffer = []

    def close(self) -> None:
        self.flush()
        parts = sorted(self.path.glob("part-*.parquet"))
        if len(parts) > 1:  # compact: one part is kinder to readers; write it before removing the small ones
            table = pa.concat_tables(pq.read_table(p, schema=ARROW_SCHEMA) for p in parts)
            merged = self.path / "_merged.tmp"  # not read while it is written
            pq.write_table(table, merged)
            os.replace(merged, parts[0])  # then part-00000 holds every record, and the others go
            for p in parts[1:]:
                p.unlink()
            self._next_part = 1


def open_sink(path: str | Path) -> RecordSink:
    p = Path(path)
    if p.suffix == ".parquet":
        return ParquetSink(p)
    if p.suffix in (".jsonl", ".ndjson"):
        return JsonlSink(p)
    raise UserError(f"--records {p}: use a .jsonl or .parquet path")


def has_records(path: str | Path) -> bool:
    """A records path that already holds something: a non-empty JSON Lines file, or a Parquet directory with parts."""
    p = Path(path)
    if p.is_dir():
        return any(p.glob("part-*.parquet"))
    return p.is_file() and p.stat().st_size > 0


def planned_records_path(records: str, run_id: str) -> Path | None:
    """Where a run will write its records (None: a fresh default path, from a new run id)."""
    if records:
        return Path(records)
    return Path("runs") / run_id / "records.jsonl" if run_id else None


def check_records_path(records: str, run_id: str, append: bool) -> None:
    """Before any load: a records path that already holds records would hold two runs, which `slabench grade` takes
    for one; refused unless appending is asked for."""
    path = planned_records_path(records, run_id)
    if path is not None and not append and has_records(path):
        raise UserError(
            f"--records {path}: already holds records of an earlier run — give a new path, or --append to add this "
            "run to it"
        )


def read_parquet(path: Path, columns: list[str] | None = None) -> pa.Table:
    """A Parquet records file or directory; a damaged one is a UserError naming it."""
    try:
        return pq.read_table(path, columns=columns, schema=ARROW_SCHEMA)
    except (pa.ArrowException, OSError) as e:
        raise UserError(
            f"{path}: not a readable Parquet records file ({str(e).splitlines()[0][:120]}); was it cut short or "
            "overwritten? Re-run, or point at another records file"
        ) from None


def read_records(path: str | Path) -> list[RequestRecord]:
    """Read records from a .jsonl file or a .parquet file/directory, through the record boundary
    (`slabench.core.boundary`): every row a record of this schema with its invariants, each request once. A JSONL
    file cut mid-line by a killed run loses only that last partial line; any other bad line is an error naming the
    file, the line (a Parquet file: the record), the field and the rule."""
    p = Path(path)
    if not p.exists():
        raise UserError(f"{p}: no such records file")
    if p.suffix == ".parquet":
        rows = read_parquet(p).to_pylist()
        out = [_record(r, f"{p}: record {i}") for i, r in enumerate(rows, 1)]
        return _once_each(out, list(range(1, len(out) + 1)), p, "record")
    out, numbers = [], []
    for n, row in read_json_lines(p, lambda row: row, "not a valid record", "was the file edited by hand?"):
        out.append(_record(row, f"{p}:{n}"))
        numbers.append(n)
    return _once_each(out, numbers, p, "line")


def _once_each(records: list[RequestRecord], numbers: list[int], path: Path, unit: str) -> list[RequestRecord]:
    """`records`, refused when a request has two: the file would count it twice (more samples than measured)."""
    if (repeat := repeated_id([r.request_id for r in records])) is not None:
        rid, rows = repeat
        raise UserError(f"{path}: {repeat_message(rid, [numbers[i] for i in rows], unit)}")
    return records


def _record(row: object, where: str) -> RequestRecord:
    try:
        return RequestRecord.from_dict(row)  # type: ignore[arg-type]
    except RecordError as e:
        raise UserError(f"{where}: {e}") from None
    except (ValueError, TypeError, KeyError) as e:
        raise UserError(f"{where}: not a valid record ({e}); was the file edited by hand?") from None
