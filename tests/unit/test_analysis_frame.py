"""records_frame: one DataFrame row per record, its derived times equal to `slabench.core.metrics` record by record."""

import json
import math

import pytest

from slabench.analysis.frame import records_frame
from slabench.core import metrics
from slabench.core.errors import UserError
from slabench.core.record import ErrorCategory, Outcome, StageUnit, stage_fields
from slabench.core.sinks import open_sink
from tests.helpers.analysis_helpers import rec

RECORDS = [
    rec(0.0, 0.1, gaps=(0.01, 0.03)).replace(request_id="ok"),
    rec(1.0, 0.2, gaps=(0.02, 0.02), tokens=(1, 2, 3)).replace(request_id="chunked"),
    rec(2.0, 0.3, gaps=(0.01,), scheduled=1.5).replace(request_id="open-loop"),  # went out 0.5 s late
    rec(3.0, None, outcome=Outcome.ERROR, category=ErrorCategory.HTTP_5XX).replace(request_id="error"),
    rec(4.0, 0.1, gaps=(), **stage_fields(2.5, StageUnit.MILLI_RPS, 1, "hold")).replace(request_id="one-chunk"),
]
DERIVED = {
    "ttft_sent_s": metrics.ttft,
    "e2e_s": metrics.e2e,
    "tpot_s": metrics.tpot,
    "itl_mean_s": metrics.mean_itl,
    "lateness_s": metrics.lateness,
}


def _same(got: float, want: float | None) -> bool:
    return math.isnan(got) if want is None else got == pytest.approx(want)


@pytest.mark.parametrize("name", ["records.jsonl", "records.parquet"])
def test_each_row_is_its_record_with_the_metrics_derived_times(tmp_path, name):
    sink = open_sink(tmp_path / name)
    sink.write(RECORDS)
    sink.close()
    df = records_frame(tmp_path / name).set_index("request_id")
    assert list(df.index) == [r.request_id for r in RECORDS]
    for r in RECORDS:
        row = df.loc[r.request_id]
        assert row.outcome == str(r.outcome)
        for column, fn in DERIVED.items():
            assert _same(row[column], fn(r)), (r.request_id, column)
        # what the user waited: from the schedule in open loop, else from the send
        want = metrics.ttft_scheduled(r) if r.scheduled is not None else metrics.ttft(r)
        assert _same(row.ttft_s, want)
    assert df.loc["open-loop"].ttft_s == pytest.approx(0.8) and df.loc["open-loop"].lateness_s == pytest.approx(0.5)
    assert (df.loc["one-chunk"].stage_level, df.loc["one-chunk"].stage_unit) == (2500, "milli_rps")
    assert "chunk_times" not in df.columns


def test_a_file_that_is_not_records_is_refused_by_name(tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_text(json.dumps({**RECORDS[0].to_dict(), "schema_version": 9}) + "\n")
    with pytest.raises(UserError, match=r"x.jsonl:1: .*schema_version 9"):
        records_frame(path)
