"""JSON Lines as every records file, spool, scrape log and download writes it, and reads it back."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import orjson

from slabench.core.boundary import loads
from slabench.core.errors import UserError
from slabench.core.files import read_text

T = TypeVar("T")


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


def read_json_lines(path: Path, parse: Callable[[Any], T], what: str, hint: str) -> Iterator[tuple[int, T]]:
    """(line number, `parse` of its JSON value) for each non-blank line of a file a killed writer may have cut: the
    last line, when it does not load or `parse` refuses it (ValueError, TypeError, KeyError), is the one cut
    mid-write and is dropped; any other such line is a UserError `PATH:LINE: what (why); hint`."""
    lines = read_text(path, cut_tail=True).split("\n")
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            value = parse(loads(line))
        except (ValueError, TypeError, KeyError) as e:
            if n == len(lines):  # the last line, without its newline: the writer died mid-line
                return
            raise UserError(f"{path}:{n}: {what} ({e}); {hint}") from None
        yield n, value
