"""The record boundary (`slabench.core.boundary`): every records file (JSON Lines, Parquet), every spool and every
JSON file slabench reads back refuses, with one line naming the file, the line (or record), the field and the rule,
what no measurement can be — NaN or infinite numbers, times out of order, negative or quoted counts, a request twice.
Before it, each of these was read, and some turned a FAIL into a PASS."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from slabench.core.errors import UserError
from slabench.core.record import RequestRecord
from slabench.core.sinks import ARROW_SCHEMA, read_records
from tests.helpers.sla_helpers import record, slabench_cli, write

# Fails at TTFT p95 ≤ 0.05 s: every request waited 0.1 s for its first token.
CONTRACT = (
    "name: c\nload: {concurrency: 4}\ndeployment: {instance_type: g5.xlarge}\ntargets:\n  ttft_p95_s: {max: 0.05}\n"
)


def rows(n: int = 40) -> list[dict]:
    return [record(i, sent=0.5 * i).to_dict() for i in range(n)]


def write_jsonl(path: Path, data: list[dict], raw: dict[int, str] | None = None) -> Path:
    """`data` as JSON Lines; `raw` replaces line i (0-based) with text as another tool might have written it."""
    lines = [json.dumps(d) for d in data]
    for i, text in (raw or {}).items():
        lines[i] = text
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line + "\n" for line in lines))
    return path


def grade(monkeypatch, capsys, run_dir: Path, tmp_path: Path) -> tuple[int, str]:
    slabench = slabench_cli(monkeypatch)
    code = slabench(["grade", str(run_dir), "--sla", str(write(tmp_path, CONTRACT)), "--no-write"])
    return code, capsys.readouterr().err


def test_the_contract_fails_on_honest_records(monkeypatch, capsys, tmp_path):
    write_jsonl(tmp_path / "run" / "records.jsonl", rows())
    assert grade(monkeypatch, capsys, tmp_path / "run", tmp_path)[0] == 2


@pytest.mark.parametrize(
    ("edit", "says"),
    [
        # Python's json reads NaN and Infinity; the NaN requests left the TTFT sample while the count kept them
        (lambda line: line.replace('"first_token": 16.1,', '"first_token": NaN,'), "NaN is not a JSON number"),
        (lambda line: line.replace('"wall_sent": 1700000016.0', '"wall_sent": Infinity'), "Infinity is not a JSON"),
        (lambda line: line.replace('"wall_sent": 1700000016.0', '"wall_sent": 1e999'), "too large for a number"),
        (lambda line: line.replace('"prompt_tokens": 100', '"prompt_tokens": ' + "9" * 5000), "5000 digits"),
    ],
    ids=["nan-time", "infinity", "1e999", "5000-digit-count"],
)
def test_numbers_json_has_not_are_refused_at_grade(monkeypatch, capsys, tmp_path, edit, says):
    data = rows()
    line = json.dumps(data[32])
    assert edit(line) != line
    write_jsonl(tmp_path / "run" / "records.jsonl", data, {32: edit(line)})
    code, err = grade(monkeypatch, capsys, tmp_path / "run", tmp_path)
    assert code == 3 and "records.jsonl:33: " in err and says in err and err.count("\n") == 1


def test_an_open_loop_schedule_after_the_first_token_is_refused_not_a_pass(monkeypatch, capsys, tmp_path):
    """A stepped or skewed worker clock: `scheduled` after `first_token` made the graded TTFT negative, and it
    passed every TTFT target (exit 0 where the requests waited 0.1 s)."""
    data = [{**d, "scheduled": d["sent"] + 0.5} for d in rows()]
    write_jsonl(tmp_path / "run" / "records.jsonl", data)
    code, err = grade(monkeypatch, capsys, tmp_path / "run", tmp_path)
    assert code == 3 and err.count("\n") == 1
    assert "records.jsonl:1: sent (0.0) is before scheduled (0.5); a record's times run scheduled ≤ sent" in err


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"prompt_tokens": "12"}, "prompt_tokens is '12' (str); the schema says a non-negative integer"),
        ({"completion_tokens": 3.0}, "completion_tokens is 3.0 (float); the schema says a non-negative integer"),
        ({"cached_tokens": -1}, "cached_tokens is -1; a count is never negative"),
        ({"chunk_tokens": [1, -2, 1, 1]}, "chunk_tokens[1] is -2; a count is never negative"),
        ({"sent": "0.5"}, "sent is '0.5' (str); the schema says a number"),
        ({"parse_ok": "yes"}, "parse_ok is 'yes' (str); the schema says true/false"),
        ({"backoff": -3.0}, "backoff is -3.0; it is never negative"),
        ({"chunk_times": [0.1, 0.11, 5.0, 0.13]}, "chunk_times[3] is before chunk_times[2]"),
        ({"chunk_times": [0.05, 0.11, 0.12, 0.13]}, "chunk_times[0] (0.05) is before first_token (0.1)"),
        ({"end": 0.125}, "end (0.125) is before last_token (0.13)"),
        ({"first_byte": 0.11}, "first_token (0.1) is before first_byte (0.11)"),
        ({"run_id": 7}, "run_id is 7 (int); the schema says text"),
    ],
)
@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_every_records_reader_refuses_what_no_measurement_is(tmp_path, change, says, suffix):
    """read_records and the column reader, JSON Lines and Parquet alike: one line, the place, the field, the rule.
    (Parquet's own types refuse what is not a number; its values are checked like JSON's.)"""
    from slabench.analysis.columns import read_table

    data = rows(4)
    data[0] = {**data[0], **change}
    path = tmp_path / f"r{suffix}"
    if suffix == ".jsonl":
        write_jsonl(path, data)
        where = "r.jsonl:1: "
    else:
        try:
            table = pa.Table.from_pylist(data, schema=ARROW_SCHEMA)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError):
            pytest.skip("Parquet's column types cannot hold this value")
        if any(repr(table.to_pylist()[0][k]) != repr(v) for k, v in change.items()):
            pytest.skip("Parquet's column types store this value as a valid one (3.0 as the integer 3)")
        path.mkdir()
        pq.write_table(table, path / "part-00000.parquet")
        where = "r.parquet: record 1: "
    for read in (read_records, read_table):
        with pytest.raises(UserError) as e:
            read(path)
        assert f"{where}{says}" in str(e.value) and "\n" not in str(e.value)


def test_nan_in_a_parquet_file_is_refused_by_both_readers(tmp_path):
    data = rows(4)
    data[2]["first_token"] = float("nan")
    path = tmp_path / "r.parquet"
    path.mkdir()
    pq.write_table(pa.Table.from_pylist(data, schema=ARROW_SCHEMA), path / "part-00000.parquet")
    from slabench.analysis.columns import read_table

    for read in (read_records, read_table):
        with pytest.raises(UserError, match=r"r\.parquet: record 3: first_token is nan; times and figures are finite"):
            read(path)


def test_a_request_twice_is_refused_by_the_record_reader_too(tmp_path):
    data = rows(4)
    data.append(dict(data[1]))
    with pytest.raises(UserError, match=r"request q1 has 2 records \(lines 2, 5\)"):
        read_records(write_jsonl(tmp_path / "r.jsonl", data))


# -- spools ------------------------------------------------------------------------------------------------------
def _spool(tmp_path: Path, lines: list[str]) -> Path:
    d = tmp_path / "spool" / "r"
    d.mkdir(parents=True, exist_ok=True)
    p = d / "w1.jsonl"
    p.write_text("".join(line + "\n" for line in lines))
    return p


@pytest.mark.parametrize(
    ("line", "says"),
    [
        (json.dumps(rows(1)[0]).replace('"sent": 0.0', '"sent": NaN'), "w1.jsonl:2: not a spool or records line (NaN"),
        (json.dumps({**rows(1)[0], "prompt_tokens": "100"}), "w1.jsonl:2: not a spool or records line (prompt_tokens"),
        (json.dumps({"began": {"run_id": "r", "request_id": "x", "started_wall": float("inf")}}).replace(
            "Infinity", "1e999"), "w1.jsonl:2: not a spool or records line (1e999 is too large"),
        (json.dumps({"began": {"run_id": "r", "request_id": "x", "scheduled": "soon"}}), "w1.jsonl:2: not a spool or "
         "records line (scheduled is 'soon' (str); the schema says a number)"),
        (json.dumps({"began": {"run_id": "r", "request_id": ["x"]}}), "w1.jsonl:2: not a spool or records line "
         "(began request_id is ['x']; it is text)"),
        (json.dumps({"began": {"request_id": "x"}}), "w1.jsonl:2: not a spool or records line (began run_id is None"),
        (json.dumps({"began": "x"}), "w1.jsonl:2: not a spool or records line (began is not a JSON object)"),
        (json.dumps(rows(1)[0]), "w1.jsonl: request q0 has 2 records (lines 1, 2)"),
    ],
    ids=["nan", "quoted-count", "began-inf", "began-type", "began-id", "began-no-run", "began-not-object", "twice"],
)  # fmt: skip
def test_recover_refuses_a_spool_line_that_breaks_the_boundary(tmp_path, capsys, line, says):
    """`slabench recover` (and the master reading a lost worker's spool) read spools through the same boundary:
    one line, exit 3, and nothing written."""
    from slabench.commands import cli

    spool = _spool(tmp_path, [json.dumps(rows(1)[0]), line, json.dumps(rows(3)[2])])
    out = tmp_path / "out" / "records.jsonl"
    assert cli.main(["recover", str(spool), "--out", str(out), "--keep-spools"]) == 3
    err = capsys.readouterr().err
    assert says in err and err.count("\n") == 1
    assert not out.exists() and spool.exists()


def test_a_spool_with_valid_lines_and_a_cut_tail_is_read(tmp_path):
    from slabench.locust.spool import read_journal

    began = json.dumps({"began": {"request_id": "q9", "run_id": "r", "scheduled": 1.5, "started_wall": 1.7e9}})
    spool = _spool(tmp_path, [json.dumps(d) for d in rows(3)] + [began])
    spool.write_text(spool.read_text() + '{"run_id": "r", "requ')  # the kill cut the last line
    got = read_journal(spool)
    assert [r["request_id"] for r in got.records] == ["q0", "q1", "q2"] and list(got.began) == ["q9"]


# -- the run's JSON files ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_summary_verdict_and_run_status_refuse_non_finite_numbers(tmp_path, constant):
    from slabench.analysis.summary import load_summary
    from slabench.evidence.run_status import read_run_status
    from slabench.sla.verdict_file import load_verdict

    for name, read in (
        ("summary.json", load_summary),
        ("verdict.json", load_verdict),
        ("run_status.json", lambda p: read_run_status(p.parent)),
    ):
        p = tmp_path / name
        p.write_text('{"kind": "x", "schema_version": 1, "figure": ' + constant + "}\n")
        with pytest.raises(UserError) as e:
            read(p)
        assert str(e.value).startswith(f"{p}: not valid JSON (") and "finite" in str(e.value)


# -- the rules, per row and column-wise, agree --------------------------------------------------------------------
def test_a_good_record_passes_and_loads_reads_standard_json():
    from slabench.core.boundary import loads, row_problem, table_problem
    from slabench.core.record import FIELD_TYPES

    row = rows(1)[0]
    assert row_problem(row, FIELD_TYPES) is None and RequestRecord.from_dict(row) == record(0)
    assert loads('{"a": [1, 2.5, -3e-2, "NaN"]}') == {"a": [1, 2.5, -0.03, "NaN"]}
    assert table_problem(pa.Table.from_pylist(rows(5), schema=ARROW_SCHEMA), FIELD_TYPES) is None


def test_server_metrics_prompts_and_manifests_refuse_what_they_cannot_use(tmp_path):
    """Found by the fuzz suite: a scrape line without its maps, a prompt's NaN max_tokens and a manifest's quoted
    warm-up were tracebacks (or, for the prompt, a NaN request limit); each is one line now."""
    from slabench.analysis.aggregate import aggregate
    from slabench.core.prompts import FilePrompts
    from slabench.evidence.scrape import read_scrapes
    from tests.helpers.analysis_helpers import write_run

    scrapes = tmp_path / "server_metrics.jsonl"
    scrapes.write_text('{"run_id": "r", "t": 1.0, "gauges": {}}\n{"run_id": "r", "t": 2.0, "gauges": 5}\n')
    with pytest.raises(UserError, match=r"server_metrics\.jsonl:2: not a server-metrics scrape \(gauges is 5"):
        read_scrapes(scrapes, "r")
    # A server may observe negative values (a histogram's sum then falls): that reads; a negative count does not.
    scrapes.write_text(
        '{"run_id": "r", "t": 1.0, "deltas": {"request_queue_time_seconds": {"count": 1.0, "sum": -0.02}}}\n'
        '{"run_id": "r", "t": 2.0, "deltas": {"request_queue_time_seconds": {"count": -1.0, "sum": 0.0}}}\n'
    )
    with pytest.raises(UserError, match=r":2: .*deltas\.request_queue_time_seconds\.count is -1\.0; a count is never"):
        read_scrapes(scrapes, "r")
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"messages": [{"role": "user", "content": "hi"}], "max_tokens": NaN}\n')
    with pytest.raises(UserError, match=r"p\.jsonl:1: NaN is not a JSON number"):
        FilePrompts(prompts)
    root = tmp_path / "sweep"
    run = write_run(root, 1, 1, [record(i, sent=0.5 * i) for i in range(4)])
    manifest = json.loads((run / "manifest.json").read_text())
    (run / "manifest.json").write_text(json.dumps({**manifest, "warmup_s": "10"}))
    with pytest.raises(UserError, match=r"manifest\.json: warmup_s is '10'; it is a non-negative number of seconds"):
        aggregate(root)
