"""The fuzz registry: every reader and entry point through which slabench takes in a user's file or form, each with
a valid input to mutate, the way slabench reads it, and the invariants a result it accepts must hold
(docs/inputs.md). `test_readers.py` fuzzes each entry; `test_registry_complete.py` fails when a module of slabench
reads a file, a form or the environment and is neither covered by an entry here nor exempt with its reason — so a
new reader joins this list from its first commit.

An entry:
- `build(folder)` writes a valid input under `folder` (by slabench's own writers where it has them) and returns the
  file the fuzzer mutates;
- `read(path)` reads it as slabench does: in-process, through the command line (`cli`) where there is one;
- `check(result, path)` asserts what any accepted input must give (records within the boundary, no negative or NaN
  figure behind a verdict);
- `fmt` says how the file is parsed for structural mutation: "jsonl", "json", "yaml", "parquet", "text";
- `xfail`: the part of issue 30 that hardens this reader elsewhere; the test is expected to fail until it lands.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Entry:
    name: str
    modules: tuple[str, ...]  # the slabench modules (paths from the repository root) whose reading this exercises
    fmt: str
    build: Callable[[Path], Path]
    read: Callable[[Path], Any]
    check: Callable[[Any, Path], None] = lambda result, path: None
    xfail: str = ""
    weight: float = 1.0  # share of the example budget: a slow entry point (a whole `plan`) tries fewer
    seeds: tuple[tuple[tuple[Any, ...], Any], ...] = ()  # (path in the parsed input, value): known hostile inputs


# -- helpers -----------------------------------------------------------------------------------------------------
def cli(argv: list[str]) -> tuple[int, str]:
    """`slabench ARGV` in-process: (exit code, stderr). An exception other than the CLI's own escapes: a traceback."""
    from slabench.commands import cli as slabench

    err, out = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        code = slabench.main(argv)
    return code, err.getvalue()


def exit_ok(result: tuple[int, str], path: Path) -> None:
    """A documented exit code; a refusal (3, 4) says why in one line."""
    code, err = result
    assert code in (0, 1, 2, 3, 4), f"exit {code}: {err[-500:]}"
    if code in (3, 4):
        lines = [line for line in err.splitlines() if line.startswith("slabench: ")]
        assert len(lines) == 1 and "Traceback" not in err, err[-500:]


def records_within_boundary(records: list[Any], path: Path) -> None:
    from slabench.core.boundary import row_problem
    from slabench.core.record import FIELD_TYPES

    ids = [r.request_id for r in records]
    assert len(ids) == len(set(ids)), "a request twice"
    for r in records:
        assert row_problem(r.to_dict(), FIELD_TYPES) is None, row_problem(r.to_dict(), FIELD_TYPES)


def sample_records() -> list[Any]:
    """Closed-loop OK requests, an open-loop one, an error and a dropped one: each kind of row a run holds."""
    from slabench.core.record import ErrorCategory, Outcome
    from tests.helpers.sla_helpers import record

    rows = [record(i, sent=0.5 * i, stage_level=4, stage_phase="steady", stage_repeat=1) for i in range(6)]
    rows.append(record(6, sent=3.0, outcome=Outcome.ERROR).replace(http_status=503, retry_after=1.0))
    rows.append(record(7, sent=3.5, outcome=Outcome.DROPPED))
    rows.append(record(8, sent=4.0).replace(scheduled=3.99, stage_unit="milli_rps", stage_level=2500))
    rows[1] = rows[1].replace(chunk_tokens=(1, 2, 1, 1), cached_tokens=10, parse_ok=True, item_accuracy=0.5)
    assert rows[6].error_category is not None and rows[7].error_category is ErrorCategory.CANCELLED
    return rows


def write_records(path: Path) -> Path:
    from slabench.core.sinks import open_sink

    sink = open_sink(path)
    sink.write(sample_records())
    sink.close()
    return path


CONTRACT = """\
name: fuzz
load: {concurrency: 4}
deployment: {instance_type: g5.xlarge}
targets:
  ttft_p95_s: &limit {max: 0.5}
  e2e_p95_s: {<<: *limit, max: 5}
  error_rate: {max: 0.5}
"""
MANIFESTS = """\
apiVersion: v1
kind: Service
metadata: {name: vllm, labels: {app: vllm}}
spec: {selector: {app: vllm}, ports: [{port: 8000, targetPort: 8000}]}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: vllm}
spec:
  replicas: 1
  selector: {matchLabels: {app: vllm}}
  template:
    metadata: {labels: {app: vllm}}
    spec: {containers: [{name: vllm, image: "vllm/vllm-openai:v0.11.0", args: [--port, "8000"]}]}
"""


def copy_repo_file(rel: str) -> Callable[[Path], Path]:
    def build(folder: Path) -> Path:
        dst = folder / Path(rel).name
        shutil.copy(ROOT / rel, dst)
        return dst

    return build


# -- records and what a run writes -------------------------------------------------------------------------------
def _read_records(path: Path) -> Any:
    from slabench.core.sinks import read_records

    return read_records(path)


def _read_columns(path: Path) -> Any:
    from slabench.analysis.columns import read_table, run_arrays

    table = read_table(path)
    return table, run_arrays(table)


def _columns_hold(result: Any, path: Path) -> None:
    import numpy as np

    from slabench.core.boundary import table_problem
    from slabench.core.record import FIELD_TYPES

    table, arrays = result
    assert table_problem(table, FIELD_TYPES) is None
    for name in ("ttft", "e2e", "tpot", "itl_mean", "itl_tokens"):
        values = getattr(arrays, name)
        assert not (values[~np.isnan(values)] < 0).any(), f"a negative {name}"
    assert math.isfinite(arrays.output_tokens) and arrays.output_tokens >= 0


def _parquet_dir(folder: Path) -> Path:
    write_records(folder / "r.parquet")
    return folder / "r.parquet" / "part-00000.parquet"


def _run_dir(folder: Path) -> Path:
    write_records(folder / "run" / "records.jsonl")
    (folder / "sla.yaml").write_text(CONTRACT)
    return folder / "run" / "records.jsonl"


def _grade_run(path: Path) -> tuple[int, str]:
    folder = path.parent if path.name == "sla.yaml" else path.parent.parent
    return cli(["grade", str(folder / "run"), "--sla", str(folder / "sla.yaml"), "--no-write"])


def _graded_on_valid_records(result: tuple[int, str], path: Path) -> None:
    """A verdict (exit 0, 1, 2) only on records that hold the boundary: never one built on a NaN, negative or
    out-of-order figure."""
    exit_ok(result, path)
    if result[0] in (0, 1, 2):
        folder = path.parent if path.name == "sla.yaml" else path.parent.parent
        records_within_boundary(_read_records(folder / "run" / "records.jsonl"), path)


def _spool(folder: Path) -> Path:
    from slabench.locust.spool import Journal, journal_path

    j = Journal(journal_path(folder / "spool", "r", "w1"))
    for r in sample_records():
        j.began({"request_id": r.request_id, "run_id": r.run_id, "scheduled": r.scheduled, "started_wall": 1.7e9})
        if r.request_id != "q5":  # in flight when the worker died: a stand-in
            j.record(r.to_dict())
    j.close()
    return j.path


def _read_spool(path: Path) -> Any:
    from slabench.locust.spool import read_journal, unaccounted

    contents = read_journal(path)
    records, lost = unaccounted(contents, set(), "lost")
    return records + lost


def _spool_holds(result: Any, path: Path) -> None:
    records_within_boundary(result, path)


def _recover(path: Path) -> tuple[int, str]:
    out = path.parents[2] / "out" / "records.jsonl"
    return cli(["recover", str(path), "--out", str(out), "--keep-spools"])


def _recovered(result: tuple[int, str], path: Path) -> None:
    exit_ok(result, path)
    out = path.parents[2] / "out" / "records.jsonl"
    if result[0] == 0:
        records_within_boundary(_read_records(out), path)


def _sweep_tree(folder: Path) -> Path:
    from slabench.core.schema import SWEEP
    from tests.helpers.analysis_helpers import write_run

    root = folder / "sweep"
    for level in (1, 2):
        for repeat in (1, 2):
            write_run(root, level, repeat, [r.replace(stage_level=level) for r in sample_records()[:6]])
    (root / "sweep.json").write_text(json.dumps({**SWEEP.stamp(), "sweep_id": "t", "levels": [1, 2], "config": {}}))
    return root


def _summary(folder: Path) -> Path:
    from slabench.analysis.aggregate import aggregate
    from slabench.analysis.summary import summary_json

    root = _sweep_tree(folder)
    (root / "summary.json").write_text(summary_json(aggregate(root, slo={"ttft_s": 0.35})))
    return root / "summary.json"


def _load_summary(path: Path) -> Any:
    from slabench.analysis.summary import load_summary

    return load_summary(path)


def _summary_holds(summary: Any, path: Path) -> None:
    """Every figure a summary accepted is a finite number (the verdict is computed from them)."""
    doc = json.loads(summary.model_dump_json())

    def walk(v: Any) -> None:
        if isinstance(v, float):
            assert math.isfinite(v)
        elif isinstance(v, dict):
            for x in v.values():
                walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)

    walk(doc)


def _aggregate(path: Path) -> Any:
    from slabench.analysis.aggregate import aggregate

    root = path.parent if path.name == "sweep.json" else path.parents[2]
    return aggregate(root, slo={"ttft_s": 0.35})


def _verdict(folder: Path) -> Path:
    run = _run_dir(folder)
    code, err = cli(["grade", str(run.parent), "--sla", str(folder / "sla.yaml")])
    assert code in (0, 1, 2), err
    return run.parent / "verdict.json"


def _load_verdict(path: Path) -> Any:
    from slabench.sla.verdict_file import load_verdict

    return load_verdict(path)


def _run_status(folder: Path) -> Path:
    from slabench.evidence.run_status import RunStatus, write_run_status

    status = RunStatus(run_id="r", records=9, outcomes={"ok": 7, "error": 1, "dropped": 1}, degraded=False)
    write_run_status(folder, status)
    return folder / "run_status.json"


def _read_run_status(path: Path) -> Any:
    from slabench.evidence.run_status import read_run_status

    return read_run_status(path.parent)


def _scrapes(folder: Path) -> Path:
    gauges = {"num_requests_running": 2.0, "num_requests_waiting": 0.0, "kv_cache_usage_perc": 0.1}
    rows = [
        {"schema_version": 1, "run_id": "r", "t": 1.7e9 + i, "t_recv": 1.7e9 + i + 0.01, "gauges": gauges,
         "counters": {"request_success_total": 5.0 * i, "prompt_tokens_total": 100.0 * i},
         "histograms": {"time_to_first_token_seconds": {"count": 5.0 * i, "sum": 0.5 * i,
                                                        "buckets": {"+Inf": 5.0 * i}}},
         "deltas": {"prompt_tokens_total": 100.0, "time_to_first_token_seconds": {"count": 5.0, "sum": 0.5}}}
        for i in range(3)
    ]  # fmt: skip
    p = folder / "server_metrics.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return p


def _read_scrapes(path: Path) -> Any:
    """The scrapes as the report and the accounting use them."""
    from slabench.evidence.accounting import server_received
    from slabench.evidence.scrape import read_scrapes, series, summarize

    rows = read_scrapes(path, "r")
    return series(rows), summarize(rows), server_received(rows)


# -- configs -----------------------------------------------------------------------------------------------------
def _contract(folder: Path) -> Path:
    p = folder / "sla.yaml"
    p.write_text(CONTRACT)
    return p


def _load(dotted: str) -> Callable[[Path], Any]:
    def read(path: Path) -> Any:
        module, name = dotted.rsplit(".", 1)
        return getattr(__import__(module, fromlist=[name]), name)(path)

    return read


def _load_model(dotted: str) -> Callable[[Path], Any]:
    def read(path: Path) -> Any:
        from slabench.core.config import load_model

        module, name = dotted.rsplit(".", 1)
        return load_model(path, getattr(__import__(module, fromlist=[name]), name))

    return read


def _queue(folder: Path) -> Path:
    p = folder / "queue.jsonl"
    rows = [
        {"offset_s": 0.25 * i, "account": "A", "seed": i, "prompt_tokens": 100, "output_tokens": 20} for i in range(5)
    ]
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return p


def _trace(name: str) -> Callable[[Path], Path]:
    """A public trace fixture (tests/data/traces): Mooncake JSONL, Azure or BurstGPT CSV."""
    return copy_repo_file(f"tests/data/traces/{name}")


def _queue_holds(rows: Any, path: Path) -> None:
    """A queue slabench accepts: offsets finite, ≥ 0 and in order; lengths, where given, whole numbers ≥ 1."""
    offsets = [r.offset_s for r in rows]
    assert rows and all(math.isfinite(o) and o >= 0 for o in offsets) and offsets == sorted(offsets), offsets
    for r in rows:
        for n in (r.prompt_tokens, r.output_tokens):
            assert n is None or (isinstance(n, int) and n >= 1), r


def _serving_flags(path: Path) -> Any:
    """`slabench plan --serving-values FILE`: the chart's values over its defaults, checked as the plan checks."""
    from slabench.core.config import validate_data
    from slabench.plan.serving import chart_flags
    from slabench.sim.profiles import EngineOptions

    return validate_data(chart_flags([str(path)]), EngineOptions, "serving flags")


def _autoscale_rule(path: Path) -> Any:
    """`slabench plan --autoscale --serving-values FILE`: the chart's autoscaling rule over its defaults."""
    from slabench.plan.chart_rule import chart_rule

    return chart_rule([str(path)])


def _rule_holds(rule: Any, path: Path) -> None:
    """A rule the replay can run: a positive target, bounds in order, finite periods."""
    assert rule.target >= 1 and 0 <= rule.min_replicas <= rule.max_replicas, rule
    for x in (rule.poll_s, rule.cooldown_s, rule.up_period_s, rule.down_window_s, rule.down_period_s):
        assert math.isfinite(x) and x >= 0, rule


def _summary_tree(folder: Path) -> Path:
    """A sweep aggregated by `slabench aggregate`: its summary.json is what `grade` checks against the records."""
    root = _sweep_tree(folder)
    code, err = cli(["aggregate", str(root)])
    assert code == 0, err
    _contract(folder)
    return root / "summary.json"


def _grade_summary(path: Path) -> tuple[int, str]:
    return cli(["grade", str(path.parent), "--sla", str(path.parents[1] / "sla.yaml"), "--no-write"])


def _run_cap_env(folder: Path) -> Path:
    p = folder / "env.json"
    p.write_text(json.dumps({"SLABENCH_MAX_RUN_S": "5"}))
    return p


def _run_cap(path: Path) -> Any:
    """SLABENCH_MAX_RUN_S as slabench reads it from the environment."""
    from slabench.core.runcap import ENV, max_run_s

    old = os.environ.get(ENV)
    os.environ[ENV] = _env_value(path, ENV)
    try:
        return max_run_s()
    finally:
        if old is None:
            del os.environ[ENV]
        else:
            os.environ[ENV] = old


def _cap_holds(cap: Any, path: Path) -> None:
    assert cap is None or (isinstance(cap, float) and 0 < cap < math.inf), cap


def _prompts(folder: Path) -> Path:
    p = folder / "prompts.jsonl"
    rows = [{"messages": [{"role": "user", "content": f"q{i}"}], "id": f"p{i}", "max_tokens": 16} for i in range(3)]
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return p


def _file_prompts(path: Path) -> Any:
    from slabench.core.prompts import FilePrompts

    return FilePrompts(path)


def _prompts_hold(result: Any, path: Path) -> None:
    for p in result.prompts:
        assert p.max_tokens is None or (isinstance(p.max_tokens, int) and p.max_tokens > 0), p.max_tokens


def _tokenizer(folder: Path) -> Path:
    from tests.helpers.tokenizer_helpers import build_coarse_tokenizer

    (folder / "tok").mkdir()
    d = build_coarse_tokenizer(folder / "tok")
    config = {"chat_template": "{% for m in messages %}{{ m['content'] }}{% endfor %}", "eos_token": "</s>"}
    (d / "tokenizer_config.json").write_text(json.dumps(config))
    return d / "tokenizer_config.json"


def _load_tokenizer(path: Path) -> Any:
    from slabench.core.tokens import ChatTokenizer

    tok = ChatTokenizer(path.parent)
    return tok.count([{"role": "user", "content": "hello there"}])


def _plan(path: Path) -> tuple[int, str]:
    return cli(
        [
            "plan",
            "--profiles",
            str(path),
            "--load",
            "rate",
            "--rate-rps",
            "1",
            "--duration",
            "20",
            "--jobs",
            "1",
            "--out",
            str(path.parent / "plan"),
        ]
    )


def _calibrate(path: Path) -> tuple[int, str]:
    out = path.parent.parent / "profile.yaml"
    return cli(["calibrate", str(path.parent), "--out", str(out), "--model", "llama-3.1-8b-fp8"])


SEARCH_SWEEP = {"name": "search", "levels": [1, 2], "repeats": 1, "run": {"requests": 6}}


def _search_tree(folder: Path) -> Path:
    """A `sweep --search` directory: its sweep.json with a config, closed-loop runs at levels 1 and 2, search.json."""
    from slabench.core.schema import SWEEP
    from slabench.sla.grade import Status
    from slabench.sweep.search import Search, write_search
    from tests.helpers.analysis_helpers import write_run

    root = folder / "search"
    closed = [r for r in sample_records() if r.scheduled is None and r.outcome == "ok"]
    for level in (1, 2):
        write_run(root, level, 1, [r.replace(stage_level=level) for r in closed])
    (root / "sweep.json").write_text(
        json.dumps({**SWEEP.stamp(), "sweep_id": "search", "levels": [1, 2], "config": SEARCH_SWEEP})
    )
    search = Search(1, 2, 1)
    search.record(1, Status.PASS, "every capacity check passed")
    search.record(2, Status.FAIL, "ttft_p95_s FAIL")
    write_search(search, root / "search.json")
    (folder / "sla.yaml").write_text(CONTRACT)
    return root / "search.json"


def _compare_search(path: Path) -> tuple[int, str]:
    return cli(["plan", "--compare-search", str(path.parent), "--profiles", "l4", "--model", "llama-3.2-3b",
                "--sla", str(path.parents[1] / "sla.yaml"), "--out", str(path.parents[1] / "compare")])  # fmt: skip


def _values(path: Path) -> Any:
    from slabench.deploy.plan import load_values_files

    return load_values_files((path,))


def _manifest_text(folder: Path) -> Path:
    p = folder / "rendered.yaml"
    p.write_text(MANIFESTS)
    return p


def _manifests(path: Path) -> Any:
    from slabench.deploy.validate import iter_documents

    return list(iter_documents(path.read_text(encoding="utf-8", errors="replace"), str(path)))


def _web_form(folder: Path) -> Path:
    p = folder / "form.json"
    p.write_text(json.dumps({"host": "http://127.0.0.1:9", "run_id": "fuzz-run", "records": "", "user_count": "2"}))
    return p


def _post_form(path: Path) -> Any:
    """The web UI's start form, posted to the check slabench puts before Locust's /swarm."""
    from types import SimpleNamespace

    from flask import Blueprint, Flask

    from slabench.webui.routes import _before_swarm

    try:
        form = json.loads(path.read_bytes().decode("utf-8", "replace"))
    except ValueError:
        form = path.read_bytes().decode("utf-8", "replace")  # a form field is any text
    if not isinstance(form, dict):
        form = {"run_id": form}
    app = Flask("fuzz")
    bp = Blueprint("locust", "fuzz")
    bp.add_url_rule("/swarm", "swarm", lambda: "started", methods=["POST"])
    app.register_blueprint(bp)
    opts = SimpleNamespace(records="", run_id="", append=False)
    web_ui = SimpleNamespace(auth_required_if_enabled=lambda f: f)
    app.before_request(_before_swarm(SimpleNamespace(parsed_options=opts, host=""), web_ui))
    cwd = os.getcwd()
    os.chdir(path.parent)
    try:
        data = {str(k): str(v) for k, v in form.items()}
        return form, app.test_client().post("/swarm", data=data).get_data(as_text=True)
    finally:
        os.chdir(cwd)


def _form_started_inside_runs(result: Any, path: Path) -> None:
    """A start the form let through writes its records inside runs/ (or where --records names)."""
    form, answer = result
    if answer == "started" and not str(form.get("records") or "").strip():
        run_id = str(form.get("run_id") or "")
        target = (path.parent / "runs" / run_id / "records.jsonl").resolve()
        assert target.is_relative_to((path.parent / "runs").resolve()), f"run_id {run_id!r} writes to {target}"


def _api_key_env(folder: Path) -> Path:
    p = folder / "env.json"
    p.write_text(json.dumps({"SLABENCH_FUZZ_API_KEY": "sk-abc123"}))
    return p


def _env_value(path: Path, name: str) -> str:
    """The value of environment variable `name` the fuzzed file stands for: any text without NUL (the file is a JSON
    object of variables, or the value itself when it is not one)."""
    text = path.read_bytes().decode("utf-8", "replace").replace("\0", "")
    try:
        env = json.loads(text)
    except ValueError:
        env = text
    value = env.get(name) if isinstance(env, dict) else env
    return (value if isinstance(value, str) else json.dumps(value)).replace("\0", "")


def _client_with_env_key(path: Path) -> Any:
    """The API key as slabench takes it from the environment (--api-key-env, `slabench.core.api_key`) into the
    request headers."""
    from slabench.core.api_key import api_key_from_env
    from slabench.core.client import StreamingClient, Target

    name = "SLABENCH_FUZZ_API_KEY"
    old = os.environ.get(name)
    os.environ[name] = _env_value(path, name)
    try:
        key = api_key_from_env(name)
    finally:
        if old is None:
            del os.environ[name]
        else:
            os.environ[name] = old
    return key or "", StreamingClient(Target(base_url="http://127.0.0.1:9", api_key=key))


def _key_has_no_control_characters(result: Any, path: Path) -> None:
    key, _ = result
    assert not any(ord(c) < 32 or ord(c) == 127 for c in key), "a key with a control character was accepted"


# The issue's own hostile records: NaN and infinite times, an open-loop schedule after the first token (a negative
# graded TTFT that passed), a quoted count, a request twice.
RECORD_SEEDS: tuple[tuple[tuple[Any, ...], Any], ...] = (
    ((2, "first_token"), math.nan),
    ((2, "end"), math.inf),
    ((3, "scheduled"), 5.0),
    ((8, "scheduled"), 4.5),
    ((1, "prompt_tokens"), "12"),
    ((4, "request_id"), "q0"),
)

ENTRIES: list[Entry] = [
    # records, spools and the run's JSON files: the record boundary
    Entry("records-jsonl",
          ("slabench/core/sinks.py", "slabench/core/jsonl.py", "slabench/core/boundary.py", "slabench/core/record.py"),
          "jsonl", lambda d: write_records(d / "r.jsonl"), _read_records,
          lambda r, p: records_within_boundary(r, p), seeds=RECORD_SEEDS),
    Entry("records-jsonl-columns", ("slabench/analysis/columns.py", "slabench/analysis/frame.py"),
          "jsonl", lambda d: write_records(d / "r.jsonl"), _read_columns, _columns_hold, seeds=RECORD_SEEDS),
    Entry("records-parquet", ("slabench/core/sinks.py",), "parquet", _parquet_dir,
          lambda p: _read_records(p.parent), lambda r, p: records_within_boundary(r, p)),
    Entry("records-parquet-columns", ("slabench/analysis/columns.py",), "parquet", _parquet_dir,
          lambda p: _read_columns(p.parent), _columns_hold),
    Entry("grade-records",
          ("slabench/commands/grade.py", "slabench/sla/grade_run.py", "slabench/analysis/server_side.py"), "jsonl",
          _run_dir, _grade_run, _graded_on_valid_records, weight=0.5, seeds=RECORD_SEEDS),
    Entry("spool", ("slabench/locust/spool.py", "slabench/core/jsonl.py", "slabench/locust/intake.py"), "jsonl",
          _spool, _read_spool, _spool_holds),
    Entry("recover", ("slabench/commands/recover.py",), "jsonl", _spool, _recover, _recovered, weight=0.5),
    Entry("summary", ("slabench/analysis/summary.py", "slabench/core/schema.py"), "json", _summary, _load_summary,
          _summary_holds),
    Entry("sweep-json", ("slabench/analysis/aggregate.py", "slabench/sweep/runner.py", "slabench/sweep/cli.py"),
          "json", lambda d: _sweep_tree(d) / "sweep.json", _aggregate, weight=0.5),
    Entry("run-manifest", ("slabench/analysis/aggregate.py",), "json",
          lambda d: _sweep_tree(d) / "1" / "1" / "manifest.json", _aggregate, weight=0.5),
    Entry("verdict", ("slabench/sla/verdict_file.py",), "json", _verdict, _load_verdict),
    Entry("run-status", ("slabench/evidence/run_status.py",), "json", _run_status, _read_run_status),
    Entry("scrapes", ("slabench/evidence/scrape.py", "slabench/core/jsonl.py", "slabench/evidence/crosscheck.py",
                      "slabench/locust/status_writer.py"), "jsonl", _scrapes, _read_scrapes),
    # configs: the one YAML loader and strict models
    Entry("contract", ("slabench/sla/contract.py", "slabench/core/yamlio.py", "slabench/core/config.py"), "yaml",
          _contract, _load("slabench.sla.contract.load_contract")),
    Entry("grade-contract", ("slabench/commands/grade.py",), "yaml", lambda d: _run_dir(d).parents[1] / "sla.yaml",
          _grade_run, _graded_on_valid_records, weight=0.5),
    Entry("sweep-config", ("slabench/sweep/config.py",), "yaml", copy_repo_file("sweeps/default.yaml"),
          _load("slabench.sweep.config.load_sweep")),
    Entry("fleet-nodes", ("slabench/fleet/nodes.py", "slabench/fleet/cli.py"), "yaml",
          copy_repo_file("examples/fleet/nodes.yaml"), _load_model("slabench.fleet.nodes.NodesFile")),
    Entry("fleet-facts", ("slabench/fleet/facts.py",), "yaml", copy_repo_file("slabench/fleet/data/gpu_facts.yaml"),
          _load("slabench.fleet.facts.load_facts")),
    Entry("gpu-profile", ("slabench/sim/profiles.py",), "yaml", copy_repo_file("slabench/sim/profiles/l4.yaml"),
          _load("slabench.sim.profiles.load_gpu_profile"),
          seeds=((("uncertainty",), {"levels": [4, 2]}), (("uncertainty",), {"levels": [math.nan, 1]}))),
    Entry("model-profile", ("slabench/sim/profiles.py",), "yaml",
          copy_repo_file("slabench/sim/profiles/llama-3.1-8b-fp8.yaml"),
          _load("slabench.sim.profiles.load_model_profile")),
    Entry("prices", ("slabench/sla/prices.py",), "yaml", copy_repo_file("slabench/sla/instance_prices.yaml"),
          _load("slabench.sla.prices.load_prices")),
    Entry("workload-settings", ("slabench/workload/accounts.py",), "yaml",
          copy_repo_file("slabench/workload/assumptions.yaml"), _load("slabench.workload.accounts.load_settings")),
    Entry("deploy-values", ("slabench/deploy/plan.py", "slabench/deploy/values_keys.py"), "yaml",
          copy_repo_file("helm/vllm-serving/values.yaml"), _values),
    Entry("deploy-manifests", ("slabench/deploy/validate.py", "slabench/deploy/manifests.py"), "text",
          _manifest_text, _manifests),
    # workload inputs
    Entry("queue", ("slabench/core/queue.py", "slabench/workload/queue.py", "slabench/shapes/burst.py"), "jsonl",
          _queue, _load("slabench.core.queue.read_queue_file")),
    Entry("prompts", ("slabench/core/prompts.py",), "jsonl", _prompts, _file_prompts, _prompts_hold),
    Entry("trace-mooncake", ("slabench/core/queue.py",), "jsonl", _trace("mooncake.jsonl"),
          _load("slabench.core.queue.read_queue_file"), _queue_holds,
          seeds=(((0, "timestamp"), math.nan), ((1, "input_length"), "9" * 5000), ((2, "hash_ids"), "0,1"))),
    Entry("trace-azure", ("slabench/core/queue.py",), "text", _trace("azure_llm_2023.csv"),
          _load("slabench.core.queue.read_queue_file"), _queue_holds),
    Entry("trace-burstgpt", ("slabench/core/queue.py",), "text", _trace("burstgpt.csv"),
          _load("slabench.core.queue.read_queue_file"), _queue_holds),
    Entry("serving-values", ("slabench/plan/serving.py",), "yaml",
          copy_repo_file("helm/vllm-serving/ci/whole-card-values.yaml"), _serving_flags,
          seeds=((("model", "maxNumSeqs"), -1), (("model", "gpuMemoryUtilization"), math.nan))),
    Entry("autoscale-values", ("slabench/plan/chart_rule.py",), "yaml",
          copy_repo_file("helm/vllm-serving/ci/autoscaling-values.yaml"), _autoscale_rule, _rule_holds,
          seeds=((("autoscaling", "targetUtilization"), math.inf), (("autoscaling", "schedule", "start"), "7 * * *"))),
    Entry("env-run-cap", ("slabench/core/runcap.py",), "json", _run_cap_env, _run_cap, _cap_holds,
          seeds=((("SLABENCH_MAX_RUN_S",), "inf"), (("SLABENCH_MAX_RUN_S",), "nan"), (("SLABENCH_MAX_RUN_S",), "-3"))),
    Entry("grade-summary", ("slabench/analysis/recheck.py",), "json", _summary_tree, _grade_summary, exit_ok,
          weight=0.5),
    # tokenizer folders, the planner's profiles, calibration, the web form, the API key
    Entry("tokenizer-config", ("slabench/core/tokens.py",), "json", _tokenizer, _load_tokenizer,
          seeds=(((), [1, 2]), (("chat_template",), "{{ raise_exception('no') }}"))),
    Entry("plan-profile", ("slabench/plan/cli.py", "slabench/plan/workload.py"), "yaml",
          copy_repo_file("slabench/sim/profiles/l4.yaml"), _plan, exit_ok, weight=0.3,
          seeds=((("step_overhead_ms",), math.inf), (("dense_bf16_tflops",), 1e-300))),
    Entry("search-result", ("slabench/plan/versus_search.py",), "json", _search_tree, _compare_search, exit_ok,
          weight=0.3, seeds=((("range",), [2, 1]), (("highest_passing",), 7), (("tolerance",), True))),
    Entry("calibrate-records", ("slabench/plan/calibrate.py", "slabench/plan/calibrate_cli.py"), "jsonl",
          lambda d: write_records(d / "run" / "records.jsonl"), _calibrate, exit_ok, weight=0.5),
    Entry("web-form", ("slabench/webui/routes.py",), "json", _web_form, _post_form, _form_started_inside_runs,
          seeds=((("run_id",), "../../x"),)),
    Entry("env-api-key", ("slabench/core/api_key.py", "slabench/locust/options.py", "slabench/locust/refusals.py",
                          "slabench/sim/cli.py"),
          "json", _api_key_env, _client_with_env_key, _key_has_no_control_characters,
          seeds=((("SLABENCH_FUZZ_API_KEY",), "sk-abc123\n"),)),
]  # fmt: skip

# Modules that read, but nothing a user hands them: each with why it needs no fuzz entry. Keep this short.
EXEMPT: dict[str, str] = {
    "slabench/core/files.py": "read_text itself: every entry above goes through it",
    "slabench/core/client.py": "parses server responses, fuzzed by tests/servers/hostile_server.py and the SSE tests",
    "slabench/core/protocols.py": "the wire formats' events (server responses), fuzzed by the hostile server",
    "slabench/sim/server.py": "the simulator's request bodies: a test server, not a reader of user files",
    "slabench/sim/embedded.py": "reads the embedded simulator's own log and port file",
    "slabench/evidence/provenance.py": "server and Kubernetes API answers, each field optional and never graded",
    "slabench/evidence/starvation.py": "the kernel's /proc files",
    "slabench/locust/hub.py": "opens the run's record sink to write it (RecordStore.open); reads nothing",
    "slabench/locust/model_lookup.py": "the server's /v1/models answer (the API key env is the env-api-key entry)",
    "slabench/webui/server_metrics.py": "the run's own scrape file as the scraper writes it, shown live only",
    "slabench/commands/published_schemas.py": "the repository's own JSON Schemas",
    "slabench/deploy/cli.py": "HELM_BIN names a binary the user runs",
    "slabench/sweep/runner.py": "sweep.json and manifest.json are the sweep-json and run-manifest entries",
    "slabench/fleet/cluster.py": "the Kubernetes API's node list, checked by fleet's rules",
    "slabench/weights/local.py": "slabench's own state files under the weights folder, written atomically",
    "slabench/weights/hydrate.py": "slabench's own verification journal (weights/local.py)",
    "slabench/weights/manifest.py": "a published weights manifest, validated by its pydantic model",
    "slabench/weights/status.py": "slabench's own state files (weights/local.py)",
    "slabench/weights/source.py": "lists a model folder's files to upload them; their contents are not parsed",
    "slabench/weights/s3.py": "AWS_REGION, handed to boto3 as is",
    "slabench/workload/dataset.py": "the workload dataset shipped with slabench (datasets/)",
    "slabench/workload/golden.py": "the dataset's golden answers shipped with slabench",
    "slabench/workload/quality.py": "a model's answer, graded; every failure is a quality result, not an error",
    "slabench/deploy/flow.py": "the in-cluster run's verdict.json, only its summary line printed (unreadable: a line)",
    "slabench/deploy/context.py": "the --sweep file, validated by load_sweep before (the sweep-config entry)",
}
