"""The record boundary: the physical invariants every request record must hold before any figure is computed from
it. Every records file (JSON Lines, Parquet), every worker spool and every records table passes here on the way in,
so nothing downstream re-checks or trusts less (docs/inputs.md):

- each field has its schema type: a count is an integer (a quoted "12" is refused, not guessed at), a time a number,
  a flag a boolean, text a string;
- numbers are finite: Python's `json` reads NaN and Infinity, which JSON has not, and a NaN time silently left its
  request out of the TTFT sample while the count still counted it;
- counts (every integer field, chunk token counts) are non-negative and fit 64 bits; waits and error sizes are
  non-negative;
- times run forward: scheduled ≤ sent ≤ first_byte ≤ first_token ≤ last_token ≤ end, for those present (an open-loop
  `scheduled` after `first_token` made a negative graded TTFT that passed), and the content chunks arrive in order
  within [first_token, end];
- request ids are unique within a run's records.

The rules are written once, per row (`row_problem`; `RequestRecord.from_dict` applies it); `table_problem` finds
the first offending row of an Arrow table column-wise (records files are read that way, hundreds of thousands of
rows) and names it with `row_problem`'s words.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

TIMES = ("scheduled", "sent", "first_byte", "first_token", "last_token", "end")
NON_NEGATIVE_FLOATS = ("retry_after", "backoff", "item_accuracy", "score_abs_error")
INT64_MAX = 2**63 - 1
MAX_JSON_DIGITS = 400  # past a double's range (309 digits): a longer integer is no number of ours, and costly to parse
_ORDER = " ≤ ".join(TIMES)


class BoundaryError(ValueError):
    """A row that breaks an invariant; the message names the field and the rule (the reader adds where)."""


FieldTypes = Mapping[str, tuple[str, bool]]  # field → (its base type, nullable)


def field_types(cls: type) -> dict[str, tuple[str, bool]]:
    """Each field of a dataclass (`RequestRecord`) → (its base type as annotated, nullable)."""
    out = {}
    for name, annotation in cls.__annotations__.items():
        text = str(annotation)
        out[name] = (text.replace(" | None", "").strip(), text.endswith("| None"))
    return out


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _show(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 40 else text[:37] + "..."


def _value_problem(name: str, base: str, v: Any) -> str | None:
    """Why `v` cannot be field `name` of type `base`, or None."""
    if base in ("str", "Outcome", "ErrorCategory"):
        return None if isinstance(v, str) else f"{name} is {_show(v)} ({type(v).__name__}); the schema says text"
    if base == "bool":
        return None if isinstance(v, bool) else f"{name} is {_show(v)} ({type(v).__name__}); the schema says true/false"
    if base == "int":
        return _count_problem(name, v)
    if base == "float":
        return _number_problem(name, v, name in NON_NEGATIVE_FLOATS)
    if base.startswith("tuple["):
        if not isinstance(v, (list, tuple)):
            return f"{name} is {_show(v)} ({type(v).__name__}); the schema says a list"
        each = _count_problem if base == "tuple[int, ...]" else _number_problem
        for i, x in enumerate(v):
            if (why := each(f"{name}[{i}]", x)) is not None:
                return why
        return None
    raise AssertionError(f"no boundary rule for field {name} of type {base}")  # a new field type needs its rule


def _count_problem(name: str, v: Any) -> str | None:
    if not _is_int(v):
        return f"{name} is {_show(v)} ({type(v).__name__}); the schema says a non-negative integer"
    if v < 0:
        return f"{name} is {v}; a count is never negative"
    if v > INT64_MAX:
        return f"{name} is an integer of {len(str(v))} digits; at most 64 bits"
    return None


def _number_problem(name: str, v: Any, non_negative: bool = False) -> str | None:
    if not _is_number(v):
        return f"{name} is {_show(v)} ({type(v).__name__}); the schema says a number"
    if isinstance(v, float) and not math.isfinite(v):
        return f"{name} is {v}; times and figures are finite numbers"
    if isinstance(v, int) and abs(v) > 1e308:  # a double, as Arrow and numpy hold it, cannot
        return f"{name} is a number of {len(str(v))} digits; not a time or figure"
    if non_negative and v < 0:
        return f"{name} is {v}; it is never negative"
    return None


def row_problem(row: Mapping[str, Any], types: FieldTypes, fields: Iterable[str] | None = None) -> str | None:
    """Why this record row (a dict as `RequestRecord.to_dict` writes it; `types` its fields') breaks the boundary,
    as one phrase naming the field and the rule; None when it holds. `fields`: check only these (a spool's `began`
    line holds a few)."""
    for name in types if fields is None else fields:
        v = row.get(name)
        if v is None:
            continue
        base, _ = types[name]
        if (why := _value_problem(name, base, v)) is not None:
            return why
    return _order_problem(row)


def _order_problem(row: Mapping[str, Any]) -> str | None:
    times = [(t, row[t]) for t in TIMES if row.get(t) is not None]
    for (a, va), (b, vb) in itertools.pairwise(times):
        if vb < va:
            return f"{b} ({vb!r}) is before {a} ({va!r}); a record's times run {_ORDER}"
    chunks = row.get("chunk_times") or ()
    for i in range(1, len(chunks)):
        if chunks[i] < chunks[i - 1]:
            return f"chunk_times[{i}] is before chunk_times[{i - 1}]; chunks arrive in order"
    first, end = row.get("first_token"), row.get("end")
    within = "content chunks arrive within first_token..end"
    if chunks and first is not None and chunks[0] < first:
        return f"chunk_times[0] ({chunks[0]!r}) is before first_token ({first!r}); {within}"
    if chunks and end is not None and chunks[-1] > end:
        return f"chunk_times[{len(chunks) - 1}] ({chunks[-1]!r}) is after end ({end!r}); {within}"
    return None


def table_problem(table: pa.Table, types: FieldTypes) -> tuple[int, str] | None:
    """The first row of `table` (0-based) that breaks the boundary, and why (`row_problem`'s words); None when
    every row holds. Types are the Arrow schema's (`slabench.core.sinks.ARROW_SCHEMA`); the values are checked
    here column-wise. Columns the table lacks are not checked."""
    bad = np.zeros(table.num_rows, dtype=bool)
    have = set(table.column_names)
    for name in have & types.keys():
        base, _ = types[name]
        col = table.column(name)
        if base == "int":
            bad |= _mask(pc.less(col, 0))
        elif base == "float":
            bad |= _mask(pc.invert(pc.is_finite(col)))
            if name in NON_NEGATIVE_FLOATS:
                bad |= _mask(pc.less(col, 0))
        elif base.startswith("tuple["):
            bad |= _list_mask(name, col, base)
    present = [t for t in TIMES if t in have]
    for i, a in enumerate(present):  # every pair: a null between two present times must not hide their order
        for b in present[i + 1 :]:
            bad |= _mask(pc.less(table.column(b), table.column(a)))
    if "chunk_times" in have:
        flat, rows = _flat_rows(table.column("chunk_times"))
        if flat.size:
            for bound, after in (("first_token", False), ("end", True)):
                if bound in have:
                    limit = _f64(table.column(bound))[rows]
                    with np.errstate(invalid="ignore"):
                        out = flat > limit if after else flat < limit
                    bad[rows[out]] = True
    hits = np.flatnonzero(bad)
    if not hits.size:
        return None
    row = int(hits[0])
    why = row_problem(table.slice(row, 1).to_pylist()[0], types)
    return row, why or "breaks the record boundary"  # `row_problem` names it; the fuzz suite keeps the two in step


def _mask(arr: pa.ChunkedArray | pa.Array) -> np.ndarray[Any, np.dtype[np.bool_]]:
    out: np.ndarray[Any, np.dtype[np.bool_]] = pc.fill_null(arr, False).to_numpy(zero_copy_only=False).astype(bool)
    return out


def _f64(col: pa.ChunkedArray) -> np.ndarray[Any, np.dtype[np.float64]]:
    out: np.ndarray[Any, np.dtype[np.float64]] = col.cast(pa.float64()).to_numpy(zero_copy_only=False)
    return out


def _flat_rows(
    col: pa.ChunkedArray,
) -> tuple[np.ndarray[Any, np.dtype[Any]], np.ndarray[Any, np.dtype[np.int64]]]:
    """(flat values, the row of each value) of a list column; null lists are empty."""
    arr = col.combine_chunks()
    lengths = pc.fill_null(pc.list_value_length(arr), 0).to_numpy(zero_copy_only=False).astype(np.int64)
    flat = arr.flatten().to_numpy(zero_copy_only=False)
    return flat, np.repeat(np.arange(len(lengths), dtype=np.int64), lengths)


def _list_mask(name: str, col: pa.ChunkedArray, base: str) -> np.ndarray[Any, np.dtype[np.bool_]]:
    flat, rows = _flat_rows(col)
    bad = np.zeros(len(col), dtype=bool)
    if not flat.size:
        return bad
    if base == "tuple[int, ...]":
        bad[rows[flat < 0]] = True
        return bad
    flat = flat.astype(np.float64)
    bad[rows[~np.isfinite(flat)]] = True
    back = np.flatnonzero(np.diff(flat) < 0) + 1  # element j before element j − 1 ...
    back = back[rows[back] == rows[back - 1]]  # ... of the same row
    bad[rows[back]] = True
    return bad


def repeated_id(ids: Sequence[Any]) -> tuple[Any, list[int]] | None:
    """The first request id given more than once, and the (0-based) positions of its rows; None when all differ."""
    seen: dict[Any, int] = {}
    for i, rid in enumerate(ids):
        if rid in seen:
            return rid, [seen[rid], *(j for j in range(seen[rid] + 1, len(ids)) if ids[j] == rid)]
        seen[rid] = i
    return None


def repeat_message(rid: Any, rows: Sequence[int], unit: str = "record") -> str:
    """The one line for a request given twice (`rows` 1-based, in the file's own unit: record or line)."""
    where = ", ".join(str(n) for n in rows[:3])
    return (
        f"request {rid} has {len(rows)} records ({unit}s {where}) — a run's records hold each request once; was a file "
        "concatenated or appended twice?"
    )


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number (times and figures are finite)")


def _finite_float(text: str) -> float:
    v = float(text)
    if not math.isfinite(v):
        raise ValueError(f"{text[:20]} is too large for a number (times and figures are finite)")
    return v


def _bounded_int(text: str) -> int:
    if len(text) > MAX_JSON_DIGITS:
        raise ValueError(f"an integer of {len(text)} digits (at most {MAX_JSON_DIGITS})")
    return int(text)


def loads(text: str | bytes) -> Any:
    """JSON as the standard says it: NaN, Infinity and numbers too large for a double (1e999 → inf) are refused,
    and integers have at most 400 digits (ValueError, like any JSON error). Every JSON file slabench reads back
    (records, spools, summary, verdict, run status, manifests) is parsed by this."""
    return json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float, parse_int=_bounded_int)
