"""A record's stage level says what it counts (`stage_unit`): users for closed loop, thousandths of a request per
second for open-loop rates. Read without its unit, a 2.5 req/s level was a 2,500-user one: aggregated, reported and
graded as concurrency 2500, and graded against a `concurrency: 2500` contract."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from slabench.analysis.aggregate import aggregate
from slabench.analysis.columns import read_table
from slabench.core.errors import UserError
from slabench.core.record import StageUnit, stage_fields
from slabench.core.sinks import ARROW_SCHEMA, read_records
from slabench.shapes.schedules import parse_rates
from slabench.sla.estimates import Level, levels_from_summary
from slabench.sla.grade import grade
from slabench.sla.single_run import levels_from_records
from tests.helpers.analysis_helpers import rec
from tests.helpers.sla_helpers import contract, replica

TARGETS = {"ttft_p95_s": {"max": 1.0}}


def _rate_run(rates=(2.5, 5.0), repeats=(1, 2)) -> list:
    """Records of a rate shape: per rate and repeat, three requests whose TTFT is rate / 10 s."""
    return [
        rec(float(i), rate / 10, **stage_fields(rate, StageUnit.MILLI_RPS, repeat, "hold"))
        for rate in rates
        for repeat in repeats
        for i in range(3)
    ]


def _jsonl(path, records) -> None:
    path.write_text("".join(json.dumps(r.to_dict()) + "\n" for r in records))


def test_a_rate_shapes_records_aggregate_to_rates_and_grade_against_a_rate_contract(tmp_path):
    path = tmp_path / "records.jsonl"
    _jsonl(path, _rate_run())
    summary = aggregate(path)
    assert summary.level_unit == "req/s"
    assert [lv.level for lv in summary.levels] == [2.5, 5.0]
    assert summary.level(2.5).metrics["ttft_p50"].mean == pytest.approx(0.25)
    levels = levels_from_summary(summary)
    assert [lv.level for lv in levels] == [Level(rate_rps=2.5), Level(rate_rps=5.0)]

    by_rate = grade(contract(targets=TARGETS, load={"request_rate_rps": 2.5}), replica(), levels)
    assert by_rate.graded_level == "2.5 req/s"
    # 2,500 users were never tested: the rate level must not stand for them
    by_users = grade(contract(targets=TARGETS, load={"concurrency": 2500}), replica(), levels)
    assert by_users.graded_level is None


def test_one_run_groups_its_records_by_level_and_unit():
    users = [rec(float(i), 0.1, **stage_fields(4, StageUnit.USERS, 1, "hold")) for i in range(3)]
    got = {lv.level for lv in levels_from_records(_rate_run(repeats=(1,)) + users)}
    assert got == {Level(rate_rps=2.5), Level(rate_rps=5.0), Level(concurrency=4)}


def test_a_file_mixing_users_and_rates_is_refused(tmp_path):
    path = tmp_path / "records.jsonl"
    users = [rec(float(i), 0.1, **stage_fields(4, StageUnit.USERS, 1, "hold")) for i in range(3)]
    _jsonl(path, _rate_run() + users)
    with pytest.raises(UserError, match=r"mix levels in users .* and in requests/s"):
        aggregate(path)


def _minor_1(records, tmp_path, name):
    """`records` as a file written before stage_unit: JSON lines, or Parquet without the column."""
    rows = [r.to_dict() for r in records]
    for row in rows:
        del row["stage_unit"]
        row["schema_minor"] = 1
    path = tmp_path / name
    if name.endswith(".jsonl"):
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    else:
        old_schema = pa.schema([f for f in ARROW_SCHEMA if f.name != "stage_unit"])
        pq.write_table(pa.Table.from_pylist(rows, schema=old_schema), path)
    return path


@pytest.mark.parametrize("name", ["old.jsonl", "old.parquet"])
def test_records_written_before_stage_unit_read_by_their_shape(tmp_path, name):
    """Before stage_unit, only the open-loop rate and diurnal shapes set `scheduled`, and their levels were rates in
    thousandths: such files read as req/s, every other staged file as users — by the aggregator and the single-run
    grader alike."""
    closed = [rec(float(i), 0.1, stage_level=8, stage_repeat=1) for i in range(3)]
    summary = aggregate(_minor_1(closed, tmp_path, "closed-" + name))
    assert (summary.level_unit, [lv.level for lv in summary.levels]) == ("users", [8])

    rate = [r.replace(stage_unit=None, scheduled=r.sent) for r in _rate_run()]
    path = _minor_1(rate, tmp_path, name)
    assert set(read_table(path).column("stage_unit").to_pylist()) == {"milli_rps"}
    summary = aggregate(path)
    assert (summary.level_unit, [lv.level for lv in summary.levels]) == ("req/s", [2.5, 5.0])
    by_rate = grade(contract(targets=TARGETS, load={"request_rate_rps": 2.5}), replica(), levels_from_summary(summary))
    assert by_rate.graded_level == "2.5 req/s"
    assert {lv.level for lv in levels_from_records(read_records(path))} == {Level(rate_rps=2.5), Level(rate_rps=5.0)}


def test_a_unit_this_slabench_does_not_know_is_refused_with_its_line(tmp_path):
    rows = [r.to_dict() for r in _rate_run()]
    rows[4]["stage_unit"] = "Users"
    path = tmp_path / "records.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(UserError, match=r"records.jsonl:5: .*'Users'"):
        aggregate(path)


def test_rates_finer_than_recorded_are_refused():
    with pytest.raises(UserError, match=r"below 0\.001 requests per second"):
        parse_rates("0.0004,2")
