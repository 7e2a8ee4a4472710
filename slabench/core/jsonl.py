"""One JSON Lines line, as every records file, spool and download writes it."""

from __future__ import annotations

import json
from typing import Any

import orjson


def json_line(obj: dict[str, Any]) -> bytes:
    """Compact UTF-8 JSON and a newline. orjson (a record is written once per request, on the hot path); what it
    refuses and Python's json writes (a lone surrogate a server sent escaped, numpy numbers a grader returned,
    integers past 64 bits) falls back to the stdlib, so no record is lost to its encoder. orjson writes NaN and
    ±Infinity, which JSON has not, as null."""
    try:
        return orjson.dumps(obj) + b"\n"
    except orjson.JSONEncodeError:
        return (json.dumps(obj, separators=(",", ":"), default=_number) + "\n").encode()


def _number(value: Any) -> Any:
    """numpy scalars and the like: their Python value."""
    if hasattr(value, "item"):
        return value.item()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")
