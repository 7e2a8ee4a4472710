"""Replay queues, and the one type a queued request is: `QueueItem`.

A queue file has one scheduled request per row, sorted by offset (seconds from the start, ≥ 0):

    CSV   header with `offset_s` (or `offset`), optional `index`, `account`, `seed`, `item_id`, `kind`,
          `prompt_tokens` and `output_tokens` (the request's lengths, for `slabench plan`: both on every row, or none)
    JSONL {"offset_s": 0.25, "account": "A", "seed": 123, "item_id": "x"}   (same keys)

Public production traces (Mooncake, the Azure LLM inference traces, BurstGPT) are read as queues too
(`slabench.core.traces`), detected by their header or named with `--queue-format`.

The workload dataset's `queue_burst.csv` / `queue_gamma.csv` (index,account,offset_s,seed) are such files, read by
the same parser with the dataset's own rules added (`slabench.workload.load_queue`).
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from slabench.core.errors import UserError

OFFSET_KEYS = ("offset_s", "offset")
LENGTH_KEYS = ("prompt_tokens", "output_tokens")


@dataclass(frozen=True, slots=True)
class QueueItem:
    """One queued request, due `offset_s` after the start. With an account and a seed it names a QA-grading call,
    rebuilt from them (`slabench.workload.build_item`); with lengths, what `slabench plan` replays."""

    index: int
    offset_s: float
    account: str | None = None
    seed: int | None = None
    kind: str = "queue"  # "burst" | "gamma" (the dataset's queues), "queue" (a file's), or the file's own
    own_id: str | None = None  # the row's item_id, when the file gives one
    prompt_tokens: int | None = None
    output_tokens: int | None = None
    prefix_blocks: tuple[int, ...] = ()  # a trace's shared prompt blocks (Mooncake hash ids), in prompt order

    @property
    def item_id(self) -> str:
        return self.own_id or f"{self.kind}-{self.index:05d}"


def check_offsets(offsets: Sequence[float], where: Sequence[str] | None = None) -> None:
    """Offsets must be finite, ≥ 0 and non-decreasing. `where[i]` names row i in messages (e.g. ``file:line``)."""
    prev = 0.0
    for i, off in enumerate(offsets):
        loc = where[i] if where is not None else f"item {i}"
        if not math.isfinite(off) or off < 0:
            raise UserError(f"{loc}: offset {off!r} is negative or not a number — offsets are seconds ≥ 0")
        if off < prev:
            raise UserError(
                f"{loc}: offset {off:g} is earlier than the previous one ({prev:g}) — sort the queue by offset"
            )
        prev = off
    if not offsets:
        raise UserError("the queue is empty")


def _number(value: object, where: str, key: str) -> float:
    try:
        v = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise UserError(f"{where}: {key}: {value!r} is not a number") from None
    if not math.isfinite(v):
        raise UserError(f"{where}: {key}: {value!r} is not a finite number")
    return v


def _seed(value: object, where: str) -> int | None:
    if value in (None, ""):
        return None
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    if isinstance(value, str) and value.strip().isdecimal():
        return int(value)
    raise UserError(f"{where}: seed: {value!r} is not a non-negative integer")


def _length(value: object, where: str, key: str) -> int:
    if isinstance(value, str) and value.strip().isdecimal():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise UserError(
            f"{where}: {key}: {value!r} is not a whole number ≥ 1 — a queue with lengths needs prompt_tokens and "
            "output_tokens on every row"
        )
    return value


def _row(d: dict, where: str, position: int, lengths: bool, kind: str) -> QueueItem:
    key = next((k for k in OFFSET_KEYS if k in d and d[k] not in (None, "")), None)
    if key is None:
        raise UserError(f"{where}: no offset_s — every row needs its offset in seconds from the start")
    index = position
    if d.get("index") not in (None, ""):
        number = _number(d["index"], where, "index")
        if number < 0 or number != int(number):
            raise UserError(f"{where}: index: {d['index']!r} is not a whole number ≥ 0")
        index = int(number)
    account = d.get("account")
    item_id = d.get("item_id")
    return QueueItem(
        index=index,
        offset_s=_number(d[key], where, key),
        account=str(account) if account not in (None, "") else None,
        seed=_seed(d.get("seed"), where),
        kind=str(d["kind"]) if d.get("kind") not in (None, "") else kind,
        own_id=str(item_id) if item_id not in (None, "") else None,
        prompt_tokens=_length(d.get("prompt_tokens"), where, "prompt_tokens") if lengths else None,
        output_tokens=_length(d.get("output_tokens"), where, "output_tokens") if lengths else None,
    )


def parse_queue_text(
    text: str, source: str, kind: str = "queue", check: Callable[[QueueItem, str], None] | None = None
) -> list[QueueItem]:
    """Rows of a CSV or JSONL queue (JSONL if the first non-blank character is `{`), validated: offsets finite,
    ≥ 0 and sorted; indexes unique; lengths on every row when the header (CSV) or the first row (JSONL) has them.
    `kind`: the rows' kind where they name none. `check(item, where)`: a caller's own rules for each row (the
    dataset's: known accounts, its time window). Errors name ``source:line``."""
    rows: list[QueueItem] = []
    where: list[str] = []
    lengths: bool | None = None  # does this queue carry lengths? decided by the header or the first row
    if text.lstrip().startswith("{"):
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                d = json.loads(line)
            except ValueError as e:
                raise UserError(f"{source}:{n}: not a JSON object ({e.msg})") from None
            if not isinstance(d, dict):
                raise UserError(f"{source}:{n}: not a JSON object")
            if lengths is None:
                lengths = any(k in d for k in LENGTH_KEYS)
            rows.append(_row(d, f"{source}:{n}", len(rows), lengths, kind))
            where.append(f"{source}:{n}")
    else:
        reader = csv.DictReader(io.StringIO(text))
        if not reader.fieldnames or not any(k in reader.fieldnames for k in OFFSET_KEYS):
            raise UserError(f"{source}:1: header: needs an offset_s column (e.g. index,account,offset_s,seed)")
        lengths = any(k in reader.fieldnames for k in LENGTH_KEYS)
        for d in reader:
            n = reader.line_num
            rows.append(_row(d, f"{source}:{n}", len(rows), lengths, kind))
            where.append(f"{source}:{n}")
    if check is not None:
        for r, w in zip(rows, where, strict=True):
            check(r, w)
    check_offsets([r.offset_s for r in rows], where)
    seen: dict[int, str] = {}
    for r, w in zip(rows, where, strict=True):
        if r.index in seen:
            raise UserError(f"{w}: index {r.index} repeats {seen[r.index]} — every row needs its own index")
        seen[r.index] = w
    return rows


def read_queue_file(
    path: str | Path,
    fmt: str = "auto",
    window: tuple[float, float] | None = None,
    block_tokens: int | None = None,
    flag: str = "--burst-queue",
) -> list[QueueItem]:
    """A queue file's rows: slabench's own CSV/JSONL or a public trace (`fmt`: auto, queue or one of
    `slabench.core.traces.FORMATS`), cut to `window` (`in_window`). `flag` names the option in errors."""
    from slabench.core import traces

    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise UserError(f"{flag} {p}: cannot read ({e.strerror})") from None
    except UnicodeDecodeError as e:
        raise UserError(f"{flag} {p}: not UTF-8 text (byte {e.start})") from None
    if not text.strip():
        raise UserError(f"{flag} {p}: the file is empty")
    if fmt not in ("auto", "queue", *traces.FORMATS):
        raise UserError(f"--queue-format {fmt!r}: use auto, queue or one of {', '.join(traces.FORMATS)}")
    trace = traces.detect(text) if fmt == "auto" else (None if fmt == "queue" else fmt)
    if trace is None:
        rows = parse_queue_text(text, str(p))
    else:
        rows = traces.parse_trace(text, str(p), trace, block_tokens or traces.BLOCK_TOKENS)
    return in_window(rows, window, str(p))


def in_window(rows: list[QueueItem], window: tuple[float, float] | None, source: str) -> list[QueueItem]:
    """The rows due in [start, end) seconds, their offsets counted from `start` (None: all rows as they are)."""
    if window is None:
        return rows
    start, end = window
    kept = [replace(r, offset_s=r.offset_s - start) for r in rows if start <= r.offset_s < end]
    if not kept:
        raise UserError(
            f"--queue-window {start:g}:{end:g}: no request of {source} in it (its offsets run from "
            f"{rows[0].offset_s:g} to {rows[-1].offset_s:g} s)"
        )
    return kept


def parse_window(value: str) -> tuple[float, float] | None:
    """`--queue-window START:END` (seconds of the trace; either side may be empty) → (start, end), or None."""
    if not value:
        return None
    head, sep, tail = value.partition(":")
    try:
        start = float(head) if head.strip() else 0.0
        end = float(tail) if tail.strip() else math.inf
    except ValueError:
        start = end = math.nan
    if not sep or not (math.isfinite(start) and start >= 0 and end > start) or math.isnan(end):
        raise UserError(f"--queue-window {value!r}: use START:END in seconds of the trace, e.g. 0:600 or 3600:")
    return start, end
