"""Replay queues: a queue file (CSV or JSONL of offsets) or the workload dataset's burst/gamma queue.

A queue file has one scheduled request per row, sorted by offset (seconds from the start, ≥ 0):

    CSV   header with `offset_s` (or `offset`), optional `index`, `account`, `seed`, `item_id`, `kind`,
          `prompt_tokens` and `output_tokens` (the request's lengths, for `slabench plan`: both on every row, or none)
    JSONL {"offset_s": 0.25, "account": "A", "seed": 123, "item_id": "x"}   (same keys)

The dataset's own `queue_burst.csv` (index,account,offset_s,seed) is such a file; `dataset_queue` reads it through the
workload's loader, which also checks it against the dataset manifest.
"""

from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import dataclass
from pathlib import Path

from slabench.errors import UserError
from slabench.shapes.schedules import check_offsets

OFFSET_KEYS = ("offset_s", "offset")
LENGTH_KEYS = ("prompt_tokens", "output_tokens")


@dataclass(frozen=True, slots=True)
class QueueRow:
    index: int
    offset_s: float
    account: str | None = None
    seed: int | None = None
    item_id: str | None = None
    kind: str | None = None
    prompt_tokens: int | None = None
    output_tokens: int | None = None


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


def _row(d: dict, where: str, position: int, lengths: bool) -> QueueRow:
    key = next((k for k in OFFSET_KEYS if k in d and d[k] not in (None, "")), None)
    if key is None:
        raise UserError(f"{where}: no offset_s — every row needs its offset in seconds from the start")
    index = position
    if d.get("index") not in (None, ""):
        index = int(_number(d["index"], where, "index"))
    account = d.get("account")
    item_id = d.get("item_id")
    return QueueRow(
        index=index,
        offset_s=_number(d[key], where, key),
        account=str(account) if account not in (None, "") else None,
        seed=_seed(d.get("seed"), where),
        item_id=str(item_id) if item_id not in (None, "") else None,
        kind=str(d["kind"]) if d.get("kind") not in (None, "") else None,
        prompt_tokens=_length(d.get("prompt_tokens"), where, "prompt_tokens") if lengths else None,
        output_tokens=_length(d.get("output_tokens"), where, "output_tokens") if lengths else None,
    )


def parse_queue_text(text: str, source: str) -> list[QueueRow]:
    """Rows of a CSV or JSONL queue (JSONL if the first non-blank character is `{`), validated: offsets finite,
    ≥ 0 and sorted; indexes unique; lengths on every row when the header (CSV) or the first row (JSONL) has them.
    Errors name ``source:line``."""
    rows: list[QueueRow] = []
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
            rows.append(_row(d, f"{source}:{n}", len(rows), lengths))
            where.append(f"{source}:{n}")
    else:
        reader = csv.DictReader(io.StringIO(text))
        if not reader.fieldnames or not any(k in reader.fieldnames for k in OFFSET_KEYS):
            raise UserError(f"{source}:1: header: needs an offset_s column (e.g. index,account,offset_s,seed)")
        lengths = any(k in reader.fieldnames for k in LENGTH_KEYS)
        for d in reader:
            n = reader.line_num
            rows.append(_row(d, f"{source}:{n}", len(rows), lengths))
            where.append(f"{source}:{n}")
    check_offsets([r.offset_s for r in rows], where)
    seen: dict[int, str] = {}
    for r, w in zip(rows, where, strict=True):
        if r.index in seen:
            raise UserError(f"{w}: index {r.index} repeats {seen[r.index]} — every row needs its own index")
        seen[r.index] = w
    return rows


def read_queue_file(path: str | Path) -> list[QueueRow]:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise UserError(f"--burst-queue {p}: cannot read ({e.strerror})") from None
    except UnicodeDecodeError as e:
        raise UserError(f"--burst-queue {p}: not UTF-8 text (byte {e.start})") from None
    if not text.strip():
        raise UserError(f"--burst-queue {p}: the file is empty")
    return parse_queue_text(text, str(p))


def dataset_queue(dataset_dir: str | Path, kind: str) -> list[QueueRow]:
    """The workload dataset's queue (`slabench dataset build` writes it), validated by the workload's loader."""
    from slabench.workload import load_queue

    return [
        QueueRow(q.index, q.offset_s, q.account, q.seed, q.item_id, q.kind)
        for q in load_queue(dataset_dir, kind)  # type: ignore[arg-type]
    ]
