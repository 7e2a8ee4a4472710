"""Files of another schema are refused, never read as this one: every reader checks `kind` and `schema_version`
(records as JSON Lines and Parquet, on the record-by-record and the Arrow path; summary.json; run manifests and
sweep.json; run_status.json). Same major version required; a newer minor (only added fields) is read; a missing
required field is an error, never a default. Records of schema 2 with `outcome` renamed once graded FAIL as PASS."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from slabench.analysis.columns import read_table
from slabench.core.errors import UserError
from slabench.core.record import Outcome, RequestRecord
from slabench.core.schema import RECORD
from slabench.core.sinks import open_sink, read_records
from tests.helpers.analysis_helpers import rec, write_run
from tests.helpers.sla_helpers import record, slabench_cli, write

CONTRACT = """\
name: c
load: {concurrency: 4}
deployment: {instance_type: g5.xlarge}
targets:
  error_rate: {max: 0.1}  # 0 errors in 40 prove ≤ 10 % (Clopper-Pearson upper bound 8.8 %)
"""


def rows(n_ok: int = 20, n_err: int = 20) -> list[dict]:
    """Half OK, half server errors: error_rate 0.5, a FAIL against a 10% ceiling."""
    recs = [record(i, sent=0.5 * i) for i in range(n_ok)]
    recs += [record(n_ok + i, sent=0.5 * (n_ok + i), outcome=Outcome.ERROR) for i in range(n_err)]
    return [r.to_dict() for r in recs]


def v2(row: dict) -> dict:
    """The same request as a hypothetical schema 2 writes it: `outcome` renamed to `status`."""
    out = {k: v for k, v in row.items() if k != "outcome"}
    return {**out, "schema_version": 2, "schema_minor": 0, "status": row["outcome"]}


def write_jsonl(path: Path, data: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in data), encoding="utf-8")
    return path


def write_parquet(path: Path, data: list[dict]) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(data), path / "part-00000.parquet")
    return path


@pytest.fixture
def slabench(monkeypatch):
    return slabench_cli(monkeypatch)


# -- records ----------------------------------------------------------------------------------------------------
def test_schema_2_records_with_outcome_renamed_are_refused_not_graded_pass(slabench, tmp_path, capsys):
    sla = str(write(tmp_path, CONTRACT))
    good = write_jsonl(tmp_path / "v1" / "records.jsonl", rows())
    assert slabench(["grade", str(good), "--sla", sla, "--no-write"]) == 2  # the honest FAIL
    capsys.readouterr()
    bad = write_jsonl(tmp_path / "v2" / "records.jsonl", [v2(r) for r in rows()])
    assert slabench(["grade", str(bad), "--sla", sla, "--no-write"]) == 3
    err = capsys.readouterr().err
    assert f"{bad}:1: slabench.request_record schema_version 2, but this slabench reads version 1" in err
    assert err.count("\n") == 1


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_both_readers_refuse_another_major_version(tmp_path, fmt):
    data = [v2(r) for r in rows()]
    path = write_jsonl(tmp_path / "r.jsonl", data) if fmt == "jsonl" else write_parquet(tmp_path / "r.parquet", data)
    where = f"{path}:1" if fmt == "jsonl" else f"{path}: record 1"
    for reader in (read_records, read_table):  # the record-by-record and the Arrow fast path
        with pytest.raises(UserError, match="schema_version 2") as e:
            reader(path)
        assert str(e.value).startswith(where), reader


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_a_missing_outcome_is_an_error_never_ok(tmp_path, fmt):
    data = rows(2, 2)
    del data[3]["outcome"]
    path = write_jsonl(tmp_path / "r.jsonl", data) if fmt == "jsonl" else write_parquet(tmp_path / "r.parquet", data)
    for reader in (read_records, read_table):
        with pytest.raises(UserError, match=r"(:4|record 4): required field\(s\) outcome missing"):
            reader(path)


def test_a_row_of_another_kind_is_refused(tmp_path):
    scrape_row = {"schema_version": 1, "kind": "slabench.scrape", "run_id": "r", "request_id": "x", "outcome": "ok"}
    path = write_jsonl(tmp_path / "r.jsonl", [*rows(1, 0), scrape_row])
    for reader in (read_records, read_table):
        with pytest.raises(UserError, match=r"r\.jsonl:2: kind 'slabench.scrape' is not a slabench request record"):
            reader(path)


def test_a_string_version_is_refused_on_both_paths(tmp_path):
    data = rows(1, 0)
    data[0]["schema_version"] = "1.1"
    path = write_jsonl(tmp_path / "r.jsonl", data)
    for reader in (read_records, read_table):
        with pytest.raises(UserError, match=r"r\.jsonl:1: schema_version '1.1' is not an integer major version"):
            reader(path)


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_a_newer_minor_version_with_added_fields_is_read(tmp_path, fmt):
    data = [{**r, "schema_minor": 7, "gpu_joules": 1.5} for r in rows(3, 1)]
    path = write_jsonl(tmp_path / "r.jsonl", data) if fmt == "jsonl" else write_parquet(tmp_path / "r.parquet", data)
    recs = read_records(path)
    assert [r.outcome for r in recs] == ["ok"] * 3 + ["error"]
    assert read_table(path).column("outcome").to_pylist() == ["ok"] * 3 + ["error"]


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_records_written_before_kinds_were_stamped_are_still_read(tmp_path, fmt):
    old = [{k: v for k, v in r.items() if k not in ("kind", "schema_minor")} for r in rows(2, 1)]
    path = write_jsonl(tmp_path / "r.jsonl", old) if fmt == "jsonl" else write_parquet(tmp_path / "r.parquet", old)
    assert [r.outcome for r in read_records(path)] == ["ok", "ok", "error"]
    assert read_table(path).num_rows == 3
    # ... but a row that claims minor ≥ 1 must say what it is
    claims = [{**old[0], "schema_minor": 1}]
    with pytest.raises(UserError, match=r"no kind; a slabench request record says kind: slabench\.request_record"):
        read_records(write_jsonl(tmp_path / "c.jsonl", claims))


def test_what_the_sinks_write_carries_kind_and_version(tmp_path):
    for name in ("r.jsonl", "r.parquet"):
        sink = open_sink(tmp_path / name)
        sink.write([record(0)])
        sink.close()
        (back,) = read_records(tmp_path / name)
        assert (back.kind, back.schema_version, back.schema_minor) == ("slabench.request_record", 1, RECORD.minor)
    line = json.loads((tmp_path / "r.jsonl").read_text())
    assert (line["kind"], line["schema_version"], line["schema_minor"]) == ("slabench.request_record", 1, RECORD.minor)


def test_from_dict_normalises_to_this_schema():
    r = RequestRecord.from_dict({**record(0).to_dict(), "schema_minor": 9, "kind": "slabench.request_record"})
    assert r.schema_minor == RECORD.minor  # what this slabench holds, not what the newer file claimed


# -- summaries, manifests, run status -----------------------------------------------------------------------------
def _sweep(tmp_path: Path) -> Path:
    root = tmp_path / "sweep"
    for repeat in (1, 2):
        write_run(root, 4, repeat, [rec(0.1 * i, run_id=f"r{repeat}") for i in range(40)])
    return root


def test_summary_json_of_another_version_or_kind_is_refused(slabench, tmp_path, capsys):
    from slabench.analysis.aggregate import aggregate, load_summary, summary_json

    root = _sweep(tmp_path)
    text = summary_json(aggregate(root))
    sla = str(write(tmp_path, CONTRACT))
    for change, message in (
        ({"schema_version": 1}, "slabench.sweep_summary schema_version 1, but this slabench reads version 2"),
        ({"schema_version": 3}, "slabench.sweep_summary schema_version 3, but this slabench reads version 2"),
        ({"kind": "slabench.verdict"}, "kind 'slabench.verdict' is not a slabench sweep summary"),
        ({"kind": None}, "no kind; a slabench sweep summary (summary.json) says kind: slabench.sweep_summary"),
    ):
        (root / "summary.json").write_text(json.dumps({**json.loads(text), **change}))
        with pytest.raises(UserError, match=message.replace("(", r"\(").replace(")", r"\)")):
            load_summary(root / "summary.json")
        assert slabench(["grade", str(root), "--sla", sla, "--no-write"]) == 3
        assert message in capsys.readouterr().err
    (root / "summary.json").write_text(json.dumps({**json.loads(text), "schema_minor": 3, "new_field": 1}))
    assert load_summary(root / "summary.json").levels[0].level == 4  # a newer minor is read


def test_run_manifest_and_sweep_json_of_another_version_are_refused(slabench, tmp_path, capsys):
    from slabench.analysis.aggregate import aggregate

    root = _sweep(tmp_path)
    manifest = root / "4" / "2" / "manifest.json"
    good = json.loads(manifest.read_text())
    manifest.write_text(json.dumps({**good, "schema_version": 2, "state": "complete"}))
    with pytest.raises(UserError, match=r"4/2/manifest\.json: slabench\.sweep_run schema_version 2"):
        aggregate(root)
    assert slabench(["aggregate", str(root)]) == 3
    manifest.write_text(json.dumps(good))
    (root / "sweep.json").write_text(json.dumps({"kind": "slabench.sweep", "schema_version": 3}))
    with pytest.raises(UserError, match=r"sweep\.json: slabench\.sweep schema_version 3"):
        aggregate(root)
    capsys.readouterr()


def test_run_status_of_another_version_is_refused(slabench, tmp_path, capsys):
    run = tmp_path / "run"
    write_jsonl(run / "records.jsonl", rows(40, 0))
    sla = str(write(tmp_path, CONTRACT))
    # version 2 might say "degraded" differently: reading it as 1 would hide a lost worker
    (run / "run_status.json").write_text(json.dumps({"schema_version": 2, "state": "degraded"}))
    assert slabench(["grade", str(run), "--sla", sla, "--no-write"]) == 3
    assert "run_status.json: slabench.run_status schema_version 2" in capsys.readouterr().err
    legacy = {"schema_version": 1, "degraded": False, "lost_workers": {}, "workers_without_final_batch": []}
    (run / "run_status.json").write_text(json.dumps(legacy))  # written before kinds were stamped: read
    assert slabench(["grade", str(run), "--sla", sla, "--no-write"]) == 0
