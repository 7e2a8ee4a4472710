"""Hypothesis strategies that turn a valid input into a hostile one, as an editor, another tool, a killed writer or
an adversary would: values replaced by NaN, infinities, negatives, huge or quoted numbers, wrong types; fields and
lines deleted or repeated; a record's times swapped out of order; the text cut short, bytes spliced in, or nothing
but random bytes."""

from __future__ import annotations

import copy
import json
from typing import Any

import yaml
from hypothesis import strategies as st

HOSTILE_VALUES: list[Any] = [
    float("nan"),
    float("inf"),
    float("-inf"),
    -1,
    -1e9,
    0,
    1e308,
    10**30,
    10**400,
    "12",
    "",
    "NaN",
    "../../x",
    "x" * 5000,
    "line\nbreak",
    None,
    True,
    [],
    {},
    [1, "a", None],
    {"nested": {"deeper": [1]}},
]
HOSTILE_NUMBERS: list[Any] = [float("nan"), float("inf"), float("-inf"), 0, 0.0, -1, -0.5, 1e-300, 1e308, 10**30]
TIMES = ("scheduled", "sent", "first_byte", "first_token", "last_token", "end")


def paths(obj: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place in a JSON/YAML structure: (key or index, ...) from the root, containers included."""
    out = [prefix] if prefix else []
    if isinstance(obj, dict):
        for k, v in obj.items():
            out += paths(v, (*prefix, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out += paths(v, (*prefix, i))
    return out


def _parent(obj: Any, path: tuple[Any, ...]) -> Any:
    for k in path[:-1]:
        obj = obj[k]
    return obj


@st.composite
def mutated_data(draw: st.DrawFn, data: Any, records: bool = False) -> Any:
    """`data` with one to three structural mutations."""
    data = copy.deepcopy(data)
    for _ in range(draw(st.integers(1, 3))):
        places = paths(data)
        ops = ["set", "set", "delete", "duplicate"] + (["times"] * 2 if records else [])
        op = draw(st.sampled_from(ops))
        if not places:
            return copy.deepcopy(draw(st.sampled_from(HOSTILE_VALUES)))
        path = draw(st.sampled_from(places))
        parent = _parent(data, path)
        key = path[-1]
        if op == "set":
            number = isinstance(parent[key], (int, float)) and not isinstance(parent[key], bool)
            if number and draw(st.booleans()):  # a number where one belongs, but none a measurement can be
                parent[key] = draw(st.sampled_from(HOSTILE_NUMBERS))
            else:
                anything = st.sampled_from(HOSTILE_VALUES) | st.integers() | st.floats() | st.text()
                parent[key] = copy.deepcopy(draw(anything))
        elif op == "delete":
            del parent[key]
        elif op == "duplicate":
            if isinstance(parent, list):
                parent.insert(key, copy.deepcopy(parent[key]))
            else:
                parent[f"{key}_copy"] = copy.deepcopy(parent[key])
        else:  # a record's times out of order: one time moved before or after another
            rows = [r for r in (data if isinstance(data, list) else [data]) if isinstance(r, dict)]
            if rows:
                row = draw(st.sampled_from(rows))
                a, b = draw(st.sampled_from(TIMES)), draw(st.sampled_from(TIMES))
                base = row.get(b) if isinstance(row.get(b), (int, float)) else 1.0
                row[a] = base + draw(st.sampled_from([-5.0, -0.001, 0.001, 5.0]))
    return data


def dump_json(data: Any) -> str:
    return json.dumps(data, allow_nan=True)  # NaN and Infinity as Python writes them: what the boundary must refuse


def dump_jsonl(rows: Any) -> str:
    if not isinstance(rows, list):
        return dump_json(rows) + "\n"
    return "".join(dump_json(r) + "\n" for r in rows)


def dump_yaml(data: Any) -> str:
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)


@st.composite
def mutated_bytes(draw: st.DrawFn, good: bytes) -> bytes:
    """Text-level damage: cut short, bytes spliced in, a line repeated, or nothing but random bytes."""
    op = draw(st.sampled_from(["truncate", "splice", "repeat_line", "random", "empty"]))
    if op == "truncate":
        return good[: draw(st.integers(0, max(len(good) - 1, 0)))]
    if op == "splice":
        at = draw(st.integers(0, len(good)))
        return good[:at] + draw(st.binary(min_size=1, max_size=16)) + good[at:]
    if op == "repeat_line":
        lines = good.split(b"\n")
        i = draw(st.integers(0, len(lines) - 1))
        return b"\n".join([*lines[: i + 1], lines[i], *lines[i + 1 :]])
    if op == "random":
        return draw(st.binary(max_size=256))
    return b""
