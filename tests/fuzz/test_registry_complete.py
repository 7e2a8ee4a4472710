"""A module of slabench that reads a file, a form or the environment is in the fuzz registry (`registry.ENTRIES`) or
exempt with its reason (`registry.EXEMPT`): a new reader joins the fuzz suite from its first commit. Found by the
calls in its syntax tree, not by hand-kept lists."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.fuzz.registry import ENTRIES, EXEMPT, ROOT

# Calls that take input in, by name: slabench's own readers and the parsers under them.
READER_CALLS = frozenset(
    {
        "read_text", "read_bytes", "load_file", "load_data", "parse_all", "load_model", "read_records",
        "read_journal", "read_parquet", "read_table", "read_json", "read_scrapes", "read_queue_file",
        "read_run_status", "load_summary", "load_verdict", "get_json",
    }
)  # fmt: skip
PARSER_MODULES = frozenset({"json", "orjson", "yaml", "yamlio", "pq", "pj", "csv"})  # json.loads(...), pq.read_table
PARSER_FUNCTIONS = frozenset({"load", "loads", "parse", "safe_load", "read_table", "read_json", "reader", "DictReader"})
REQUEST_PARTS = frozenset({"form", "args", "files", "data", "values", "get_json"})  # Flask's request.<part>


def _name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _opens_for_reading(call: ast.Call) -> bool:
    """open(path) / path.open(): reading unless its mode writes or appends."""
    mode = None
    if isinstance(call.func, ast.Name) and len(call.args) > 1:  # open(path, mode)
        mode = call.args[1]
    elif isinstance(call.func, ast.Attribute) and call.args:  # path.open(mode)
        mode = call.args[0]
    for kw in call.keywords:
        if kw.arg == "mode":
            mode = kw.value
    if mode is None:
        return True
    return not (isinstance(mode, ast.Constant) and isinstance(mode.value, str) and set(mode.value) & set("wax"))


def reads_input(source: str) -> list[str]:
    """What in this module's source takes input in (empty: nothing)."""
    found = []
    imported_loads = False
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module in ("slabench.core.boundary", "json", "orjson"):
            imported_loads |= any(a.name in ("loads", "load") for a in node.names)
        if isinstance(node, ast.Call):
            name = _name(node.func)
            owner = _name(node.func.value) if isinstance(node.func, ast.Attribute) else None
            if name in PARSER_FUNCTIONS and owner in PARSER_MODULES:
                found.append(f"{owner}.{name}")
            elif name in READER_CALLS:
                found.append(name)
            elif name == "open" and _opens_for_reading(node):
                found.append("open")
            elif name in ("loads", "load") and owner is None and imported_loads:
                found.append(name)
            elif name == "getenv":
                found.append("getenv")
        elif isinstance(node, ast.Attribute):
            owner = _name(node.value)
            if node.attr == "environ" and owner == "os":
                found.append("os.environ")
            elif node.attr in REQUEST_PARTS and owner == "request":
                found.append(f"request.{node.attr}")
    return found


def readers() -> dict[str, list[str]]:
    out = {}
    for py in sorted((ROOT / "slabench").rglob("*.py")):
        calls = reads_input(py.read_text(encoding="utf-8"))
        if calls:
            out[str(py.relative_to(ROOT))] = calls
    return out


def test_every_module_that_reads_input_is_registered_or_exempt():
    covered = {m for e in ENTRIES for m in e.modules} | EXEMPT.keys()
    missing = {m: calls for m, calls in readers().items() if m not in covered}
    assert not missing, (
        f"modules that read input but are not in tests/fuzz/registry.py: {missing} — add an Entry (a valid input, "
        "how slabench reads it, what a result must hold), or an EXEMPT line saying why nothing a user gives reaches it"
    )


def test_the_registry_names_real_modules_and_no_stale_exemptions():
    named = {m for e in ENTRIES for m in e.modules} | EXEMPT.keys()
    assert sorted(m for m in named if not (ROOT / m).is_file()) == []
    stale = sorted(EXEMPT.keys() - readers().keys())
    assert stale == [], f"exempt but no longer reading anything: {stale} — drop them from EXEMPT"
    names = [e.name for e in ENTRIES]
    assert len(names) == len(set(names))


def test_the_scan_sees_each_way_of_reading():
    """The scan itself: each kind of read is found, and a file opened for writing is not a read."""
    assert reads_input("import json\ndef f(p):\n    return json.loads(p.read_text())\n") == ["json.loads", "read_text"]
    assert reads_input("from slabench.core.boundary import loads\nx = loads(b)\n") == ["loads"]
    assert reads_input("import os\nkey = os.environ.get('K')\n") == ["os.environ"]
    assert reads_input("from flask import request\nv = request.form['run_id']\n") == ["request.form"]
    assert reads_input("import pyarrow.parquet as pq\nt = pq.read_table(p)\n") == ["pq.read_table"]
    assert reads_input("with open(p) as f:\n    f.read()\n") == ["open"]
    assert reads_input("with open(p, 'w') as f:\n    f.write(x)\nq = Path(p).open('ab')\n") == []
    assert reads_input("from slabench.core.yamlio import load_data\nd = load_data(p)\n") == ["load_data"]
    assert Path(ROOT / "slabench").is_dir()
