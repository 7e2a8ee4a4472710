"""Public production traces read as replay queues: each row one `QueueItem` with its offset and lengths.

    mooncake  JSON Lines: {"timestamp": ms since the first request, "input_length": N, "output_length": M,
              "hash_ids": [block ids]} — equal ids are equal blocks of `block_tokens` prompt tokens (512 in the
              published traces), so requests that start with the same ids share that prompt prefix
    azure     CSV `TIMESTAMP,ContextTokens,GeneratedTokens` (the Azure LLM inference traces, 2023 and 2024): an ISO
              date and time per request
    burstgpt  CSV `Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type`: seconds from the start;
              a row with 0 response tokens is a request that failed in the original service and is left out

Offsets count from the first row kept; lengths are prompt and output tokens as the trace's own service counted
them, and a replay aims at them as the served model counts them (`slabench.core.prompts`). `window` keeps the rows
whose offset lies in [start, end) seconds and counts offsets from `start` (`slabench.core.queue.in_window`).
Errors name ``file:line``.
"""

from __future__ import annotations

import csv
import io
import json
import logging
import math
from collections.abc import Iterator
from datetime import datetime
from typing import NamedTuple

from slabench.core.errors import UserError
from slabench.core.queue import QueueItem, check_offsets

FORMATS = ("mooncake", "azure", "burstgpt")
log = logging.getLogger("slabench")

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


def _csv_rows(text: str, source: str, columns: tuple[str, ...], name: str) -> Iterator[tuple[str, dict]]:
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
    reader = {
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
