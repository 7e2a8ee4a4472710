"""Replay queues, and the one type a queued request is: `QueueItem`.

A queue file has one scheduled request per row, sorted by offset (seconds from the start, ≥ 0):

    CSV   header with `offset_s` (or `offset`), optional `index`, `account`, `seed`, `item_id`, `kind`,
          `prompt_tokens` and `output_tokens` (the request's lengths, for `slabench plan`: both on every row, or none)
    JSONL {"offset_s": 0.25, "account": "A", "seed": 123, "item_id": "x"}   (same keys)

Public production traces are read as queues too, detected by their first line or named with `--queue-format`:

    mooncake  JSON Lines: {"timestamp": ms since the first request, "input_length": N, "output_length": M,
              "hash_ids": [block ids]} — equal ids are equal blocks of `block_tokens` prompt tokens (512 in the
              published traces), so requests that start with the same ids share that prompt prefix
    azure     CSV `TIMESTAMP,ContextTokens,GeneratedTokens` (the Azure LLM inference traces, 2023 and 2024): an ISO
              date and time per request
    burstgpt  CSV `Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type`: seconds from the start;
              a row with 0 response tokens is a request that failed in the original service and is left out

A trace's offsets count from its first row kept; its lengths are prompt and output tokens as the trace's own service
counted them, which a replay aims at as the served model counts them (`slabench.core.prompts`).

The workload dataset's `queue_burst.csv` / `queue_gamma.csv` (index,account,offset_s,seed) are such files, read by
the same parser with the dataset's own rules added (`slabench.workload.load_queue`).
"""

from __future__ import annotations

import csv
import io
import json
import logging
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any, NamedTuple

from slabench.core.errors import UserError

log = logging.getLogger("slabench")

OFFSET_KEYS = ("offset_s", "offset")
FORMATS = ("mooncake", "azure", "burstgpt")  # the public traces read
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


def _row(d: dict[str, Any], where: str, position: int, lengths: bool, kind: str) -> QueueItem:
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
            except ValueError as e:  # a JSONDecodeError, or an integer too long for int()
                detail = e.msg if isinstance(e, json.JSONDecodeError) else str(e)
                raise UserError(f"{source}:{n}: not a JSON object ({detail})") from None
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
    `FORMATS`), cut to `window` (`in_window`). `flag` names the option in errors."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise UserError(f"{flag} {p}: cannot read ({e.strerror})") from None
    except UnicodeDecodeError as e:
        raise UserError(f"{flag} {p}: not UTF-8 text (byte {e.start})") from None
    if not text.strip():
        raise UserError(f"{flag} {p}: the file is empty")
    if fmt not in ("auto", "queue", *FORMATS):
        raise UserError(f"--queue-format {fmt!r}: use auto, queue or one of {', '.join(FORMATS)}")
    trace = detect(text) if fmt == "auto" else (None if fmt == "queue" else fmt)
    if trace is None:
        rows = parse_queue_text(text, str(p))
    else:
        rows = parse_trace(text, str(p), trace, block_tokens or BLOCK_TOKENS)
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


def add_queue_file_options(group: Any, file_option: str) -> None:
    """The options that say how to read the queue file `file_option` names (the burst shape's --burst-queue, the
    planner's --queue): its format, the window of it replayed, a Mooncake trace's block size."""
    group.add_argument(
        "--queue-format",
        choices=("auto", "queue", *FORMATS),
        default="auto",
        help=f"the {file_option} file's format (auto: by its header; docs/shapes.md)",
    )
    group.add_argument(
        "--queue-window", default="", metavar="START:END", help="replay only these seconds of the queue, e.g. 0:600"
    )
    group.add_argument(
        "--queue-block-tokens",
        type=int,
        default=BLOCK_TOKENS,
        help=f"prompt tokens per Mooncake hash id (its traces: {BLOCK_TOKENS})",
    )


# -- public traces --------------------------------------------------------------------------------------------------
BLOCK_TOKENS = 512  # the published Mooncake traces' block size
AZURE = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
BURSTGPT = ("Timestamp", "Request tokens", "Response tokens")


class _Row(NamedTuple):
    where: str  # file:line
    time_s: float  # the trace's own time of arrival
    prompt: int
    output: int
    shared: tuple[int, ...]  # full shared blocks


def detect(text: str) -> str | None:
    """The trace format of `text` by its first line, or None for slabench's own queue format."""
    first = text.lstrip("\ufeff").lstrip().split("\n", 1)[0]
    if first.startswith("{"):
        try:
            row = json.loads(first)
        except ValueError:
            return None
        return "mooncake" if isinstance(row, dict) and "input_length" in row and "timestamp" in row else None
    header = [h.strip() for h in first.split(",")]
    if all(k in header for k in AZURE):
        return "azure"
    if all(k in header for k in BURSTGPT):
        return "burstgpt"
    return None


def _count(value: object, where: str, key: str, minimum: int) -> int:
    if isinstance(value, str) and value.strip().isdecimal() and len(value.strip()) <= 12:
        value = int(value)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise UserError(f"{where}: {key}: {value!r} is not a whole number ≥ {minimum}")
    return value


def _seconds(value: object, where: str, key: str) -> float:
    try:
        v = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise UserError(f"{where}: {key}: {value!r} is not a number") from None
    if not math.isfinite(v) or v < 0:
        raise UserError(f"{where}: {key}: {value!r} is not a finite time ≥ 0")
    return v


def _mooncake(text: str, source: str, block_tokens: int) -> Iterator[_Row]:
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        where = f"{source}:{n}"
        try:
            row = json.loads(line, parse_constant=lambda c: c)  # NaN/Infinity stay strings: refused below
        except ValueError as e:
            raise UserError(f"{where}: not a JSON object ({e})") from None
        if not isinstance(row, dict):
            raise UserError(f"{where}: not a JSON object")
        missing = [k for k in ("timestamp", "input_length", "output_length") if k not in row]
        if missing:
            raise UserError(
                f"{where}: no {', '.join(missing)} — a Mooncake trace row has timestamp (ms), input_length, "
                "output_length and hash_ids"
            )
        ids = row.get("hash_ids", [])
        if not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
            raise UserError(f"{where}: hash_ids: {ids!r} is not a list of integers")
        prompt = _count(row["input_length"], where, "input_length", 1)
        # Full blocks only: the last one is usually partial, and at least one prompt token is the request's own.
        shared = tuple(ids[: min(len(ids), (prompt - 1) // block_tokens)])
        output = _count(row["output_length"], where, "output_length", 1)
        yield _Row(where, _seconds(row["timestamp"], where, "timestamp") / 1000, prompt, output, shared)


def _csv_rows(text: str, source: str, columns: tuple[str, ...], name: str) -> Iterator[tuple[str, dict[str, str]]]:
    reader = csv.DictReader(io.StringIO(text.lstrip("\ufeff")), skipinitialspace=True)
    missing = [c for c in columns if c not in (reader.fieldnames or [])]
    if missing:
        raise UserError(f"{source}:1: header: no {', '.join(missing)} — a {name} trace has {', '.join(columns)}")
    for row in reader:
        yield f"{source}:{reader.line_num}", row


def _azure(text: str, source: str) -> Iterator[_Row]:
    first: datetime | None = None
    for where, row in _csv_rows(text, source, AZURE, "Azure LLM inference"):
        stamp = row["TIMESTAMP"]
        try:
            t = datetime.fromisoformat(stamp.strip())
        except (ValueError, AttributeError):
            raise UserError(
                f"{where}: TIMESTAMP: {stamp!r} is not a date and time (e.g. 2023-11-16 18:15:46.68)"
            ) from None
        if first is None:
            first = t
        if (t.tzinfo is None) != (first.tzinfo is None):
            raise UserError(f"{where}: TIMESTAMP: {stamp!r} mixes times with and without a time zone")
        prompt = _count(row["ContextTokens"], where, "ContextTokens", 0)
        yield _Row(
            where, (t - first).total_seconds(), prompt, _count(row["GeneratedTokens"], where, "GeneratedTokens", 0), ()
        )


def _burstgpt(text: str, source: str) -> Iterator[_Row]:
    for where, row in _csv_rows(text, source, BURSTGPT, "BurstGPT"):
        prompt = _count(row["Request tokens"], where, "Request tokens", 0)
        output = _count(row["Response tokens"], where, "Response tokens", 0)
        yield _Row(where, _seconds(row["Timestamp"], where, "Timestamp"), prompt, output, ())


def parse_trace(text: str, source: str, fmt: str, block_tokens: int = BLOCK_TOKENS) -> list[QueueItem]:
    """The trace's rows as queue items, offsets from the first row kept. Rows with 0 prompt or output tokens are
    left out (nothing a replay could ask for), and a warning says how many."""
    if fmt not in FORMATS:
        raise UserError(f"--queue-format {fmt!r}: use one of {', '.join(FORMATS)}, or auto")
    if block_tokens < 1:
        raise UserError(f"--queue-block-tokens {block_tokens}: must be at least 1")
    reader: Callable[[], Iterator[_Row]] = {
        "mooncake": lambda: _mooncake(text, source, block_tokens),
        "azure": lambda: _azure(text, source),
        "burstgpt": lambda: _burstgpt(text, source),
    }[fmt]
    rows = list(reader())
    kept = [r for r in rows if r.prompt >= 1 and r.output >= 1]
    if not kept:
        raise UserError(f"{source}: no request with prompt and output tokens ≥ 1 in this {fmt} trace")
    if len(kept) < len(rows):
        log.warning("slabench: %s: %d rows with 0 prompt or output tokens left out", source, len(rows) - len(kept))
    t0 = kept[0].time_s
    check_offsets([r.time_s - t0 for r in kept], [r.where for r in kept])
    return [
        QueueItem(i, r.time_s - t0, kind=fmt, prompt_tokens=r.prompt, output_tokens=r.output, prefix_blocks=r.shared)
        for i, r in enumerate(kept)
    ]
