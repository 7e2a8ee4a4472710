"""Every registered reader (`registry.ENTRIES`) against mutations of its valid input and random bytes: each input
gives one error line (`UserError`, exit 3 or 4 at the command line) or a result that holds the entry's invariants —
never a traceback, never a figure or verdict from a NaN, negative or out-of-order value.

Examples per entry: `SLABENCH_FUZZ_EXAMPLES` (default 25, the CI budget; `scripts/fuzz.sh` runs 1,000), scaled by
the entry's weight. Hypothesis prints the failing input, shrunk, when an entry breaks."""

from __future__ import annotations

import copy
import functools
import json
import os
import shutil
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slabench.core.errors import UserError
from tests.fuzz import mutate
from tests.fuzz.registry import ENTRIES, Entry

EXAMPLES = int(os.environ.get("SLABENCH_FUZZ_EXAMPLES", "25"))
_BUILT: dict[str, tuple[Path, Path]] = {}  # entry → (its valid folder, the file to mutate), built once per session


def _valid(entry: Entry, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    if entry.name not in _BUILT:
        folder = tmp_path_factory.mktemp(f"fuzz-{entry.name}")
        _BUILT[entry.name] = folder, entry.build(folder).relative_to(folder)
    return _BUILT[entry.name]


@functools.cache
def _parsed(fmt: str, good: bytes) -> object:
    if fmt == "parquet":
        return pq.read_table(pa.BufferReader(good)).to_pylist()
    if fmt == "jsonl":
        return [json.loads(line) for line in good.decode().splitlines() if line.strip()]
    if fmt == "json":
        return json.loads(good)
    if fmt == "yaml":
        return yaml.safe_load(good)
    return None


def _structure(entry: Entry, good: bytes) -> object:
    return _parsed(entry.fmt, good)  # parsed once; `mutated_data` copies before changing it


def _write_parquet(path: Path, rows: object) -> bool:
    """Mutated rows as a Parquet part: with the records' schema where the values fit it, else with the types Arrow
    infers (a string where a number belongs); False when Arrow cannot hold them at all."""
    from slabench.core.sinks import ARROW_SCHEMA

    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        return False
    for schema in (ARROW_SCHEMA, None):
        try:
            table = pa.Table.from_pylist(rows, schema=schema)
        except (pa.ArrowException, TypeError, ValueError, OverflowError):
            continue
        pq.write_table(table, path)
        return True
    return False


@st.composite
def hostile_input(draw: st.DrawFn, entry: Entry, good: bytes) -> tuple[str, object]:
    """("bytes", raw) or ("data", a mutated structure)."""
    structured = entry.fmt in ("jsonl", "json", "yaml", "parquet")
    if structured and draw(st.integers(0, 3)) > 0:  # mostly structure-aware: it gets past the parser
        data = _structure(entry, good)
        return "data", draw(mutate.mutated_data(data, records=entry.fmt in ("jsonl", "parquet")))
    return "bytes", draw(mutate.mutated_bytes(good))


def _serialise(entry: Entry, data: object) -> bytes:
    if entry.fmt in ("jsonl",):
        return mutate.dump_jsonl(data).encode()
    if entry.fmt == "json":
        return mutate.dump_json(data).encode()
    return mutate.dump_yaml(data).encode()


def _says_where(e: UserError, work: Path) -> None:
    """One line; or, for a config with several problems, one line per problem, each naming the file and line."""
    lines = str(e).splitlines()
    assert lines and (len(lines) == 1 or all(line.startswith(str(work)) for line in lines)), f"{str(e)!r}"


@pytest.mark.parametrize(
    "entry",
    [pytest.param(e, marks=pytest.mark.xfail(strict=True, reason=e.xfail)) if e.xfail else e for e in ENTRIES],
    ids=[e.name for e in ENTRIES],
)
def test_any_input_is_one_error_line_or_a_result_that_holds(entry: Entry, tmp_path_factory) -> None:
    folder, target = _valid(entry, tmp_path_factory)
    good = (folder / target).read_bytes()

    for path, value in entry.seeds:  # the known hostile inputs first, every run
        data = copy.deepcopy(_structure(entry, good))
        if path:
            mutate._parent(data, path)[path[-1]] = value
        else:
            data = value
        _attempt(entry, folder, target, "data", data)

    @settings(
        max_examples=max(1, round(EXAMPLES * entry.weight)),
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
        derandomize=EXAMPLES <= 25,  # CI: the same inputs every run; the long mode explores
    )
    @given(hostile_input(entry, good))
    def attempt(hostile: tuple[str, object]) -> None:
        _attempt(entry, folder, target, *hostile)

    attempt()


def _attempt(entry: Entry, folder: Path, target: Path, kind: str, value: object) -> None:
    """Write the hostile input over a copy of the valid one, read it as slabench does, judge the outcome."""
    with tempfile.TemporaryDirectory(prefix=f"fuzz-{entry.name}-") as tmp:
        work = Path(tmp) / "in"
        shutil.copytree(folder, work)
        path = work / target
        if kind == "bytes":
            path.write_bytes(value)  # type: ignore[arg-type]
        elif entry.fmt == "parquet":
            if not _write_parquet(path, value):
                return
        else:
            path.write_bytes(_serialise(entry, value))
        try:
            result = entry.read(path)
        except UserError as e:
            _says_where(e, work)
            return
        entry.check(result, path)
