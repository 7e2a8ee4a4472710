"""The column-wise metrics agree with `slabench.core.metrics`, record by record; JSONL and Parquet read the same."""

import json
import re

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slabench.analysis.columns import itl_arrays, read_table, run_arrays
from slabench.analysis.figures import metric_values
from slabench.core import metrics
from slabench.core.errors import UserError
from slabench.core.record import ErrorCategory, Outcome, RequestRecord
from slabench.core.sinks import ARROW_SCHEMA, open_sink
from tests.helpers.analysis_helpers import WALL0, rec


@st.composite
def records(draw):
    out = []
    for i in range(draw(st.integers(0, 8))):
        n = draw(st.integers(0, 6))
        gaps = draw(st.lists(st.floats(0.0, 0.5), min_size=max(n - 1, 0), max_size=max(n - 1, 0)))
        # chunk_tokens: absent, complete, or shorter than the chunks (the metrics treat missing counts as 1)
        tok_len = draw(st.sampled_from([None, n, max(n - 2, 0)]))
        tokens = None if tok_len is None else draw(st.lists(st.integers(0, 4), min_size=tok_len, max_size=tok_len))
        if n == 0:
            r = rec(float(i), ttft=None, gaps=())
        else:
            r = rec(float(i), ttft=draw(st.floats(0.0, 2.0)), gaps=gaps, tokens=tokens)
        r = r.replace(completion_tokens=draw(st.one_of(st.none(), st.integers(0, 50))))
        out.append(r)
    return out


def _table(recs):
    return pa.Table.from_pylist([r.to_dict() for r in recs], schema=ARROW_SCHEMA)


@settings(max_examples=150, deadline=None)  # a loaded 2-core CI machine: no per-example deadline
@given(records())
def test_columnwise_metrics_equal_slabench_metrics(recs):
    t = _table(recs)
    per_token, mean = itl_arrays(t.column("chunk_times"), t.column("chunk_tokens"))
    expected_tokens = [x for r in recs for x in metrics.itl(r)]
    assert per_token.tolist() == pytest.approx(expected_tokens)
    for r, m in zip(recs, mean, strict=True):
        e = metrics.mean_itl(r)
        assert (np.isnan(m) and e is None) or m == pytest.approx(e)
    a = run_arrays(t)
    for name, fn in (("ttft", metrics.ttft), ("e2e", metrics.e2e), ("tpot", metrics.tpot)):
        got = getattr(a, name)
        want = [fn(r) for r in recs]
        assert len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            assert (np.isnan(g) and w is None) or g == pytest.approx(w)


def test_errors_are_counted_by_category_and_latency_uses_ok_only():
    recs = [
        rec(0.0, ttft=0.1),
        rec(1.0, ttft=0.5, outcome=Outcome.INCOMPLETE, category=ErrorCategory.STREAM_CUT),
        rec(2.0, ttft=None, outcome=Outcome.ERROR, category=ErrorCategory.HTTP_5XX),
        rec(3.0, ttft=None, outcome=Outcome.ERROR, category=ErrorCategory.HTTP_5XX),
        rec(4.0, ttft=None, outcome=Outcome.DROPPED, category=ErrorCategory.CANCELLED),
    ]
    a = run_arrays(_table(recs))
    assert a.error_counts == {"http_5xx": 2, "stream_cut": 1, "cancelled": 1}
    assert (a.ok, a.errors, a.incomplete, a.dropped) == (1, 2, 1, 1)
    assert a.ttft.tolist() == pytest.approx([0.1])


def test_warmup_by_time_and_by_phase():
    recs = [rec(float(s)) for s in range(10)]  # sent at 0..9 s
    a = run_arrays(_table(recs), warmup_s=3.0)
    assert (a.excluded_warmup, a.counted, a.warmup_rule) == (3, 7, "time:3")
    assert a.window_start == pytest.approx(1_700_000_000.0 + 3.0)
    phased = [r.replace(stage_phase="warmup" if i < 2 else "hold") for i, r in enumerate(recs)]
    phased[-1] = phased[-1].replace(stage_phase="cooldown")
    b = run_arrays(_table(phased), warmup_s=5.0)  # phases win over the time rule
    assert (b.excluded_warmup, b.counted, b.warmup_rule) == (3, 7, "phase")


def test_jsonl_and_parquet_read_the_same(tmp_path):
    recs = [rec(float(i), tokens=(1, 2, 1)) for i in range(5)]
    for path in (tmp_path / "r.jsonl", tmp_path / "r.parquet"):
        sink = open_sink(path)
        sink.write(recs)
        sink.close()
    a, b = read_table(tmp_path / "r.jsonl"), read_table(tmp_path / "r.parquet")
    assert a.to_pylist() == b.to_pylist()
    assert a.num_rows == 5
    for path in (tmp_path / "none.jsonl", tmp_path / "none.parquet"):  # a run that made no request
        open_sink(path).close()
        assert read_table(path).num_rows == 0


@pytest.mark.parametrize("name", ["r.jsonl", "r.parquet", "cut.jsonl"])
def test_a_file_holding_a_request_twice_is_refused_naming_it(tmp_path, name):
    """Concatenated or twice-appended records would count requests twice: more samples than were measured."""
    recs = [rec(float(i)) for i in range(4)]
    path = tmp_path / name
    sink = open_sink(path)
    sink.write(recs)
    sink.write(recs[2:3])  # what `cat a.jsonl a.jsonl` or an append of the same run does to one request
    sink.close()
    if name == "cut.jsonl":  # a killed run's partial last line: read through the record-by-record reader
        path.write_text(path.read_text() + '{"run_id": "r", "req')
    unit = "records" if name.endswith(".parquet") else "lines"
    with pytest.raises(UserError, match=rf"request {re.escape(recs[2].request_id)} has 2 records \({unit} 3, 5\)"):
        read_table(path)


@pytest.mark.parametrize(
    ("change", "says"),
    [
        (lambda d: d.update(first_token=d["sent"] - 5), r"first_token \(-?[\d.]+\) is before first_byte"),
        (lambda d: d.update(first_token=None, last_token=None, chunk_times=[], end=d["sent"] - 0.5),
         r"end \(-?[\d.]+\) is before first_byte"),
        (lambda d: d.update(last_token=d["first_token"] - 0.01), r"last_token \([\d.]+\) is before first_token"),
        (lambda d: d.update(end=d["last_token"] - 0.01), r"end \([\d.]+\) is before last_token"),
        (lambda d: d.update(chunk_times=[d["chunk_times"][1], d["chunk_times"][0], d["chunk_times"][2]]),
         r"chunk_times\[1\] is before chunk_times\[0\]"),
        (lambda d: d.update(completion_tokens=-3), "completion_tokens is -3; a count is never negative"),
        (lambda d: d.update(prompt_tokens=-1), "prompt_tokens is -1; a count is never negative"),
    ],
)  # fmt: skip
@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_a_record_whose_times_run_backwards_is_refused_naming_it(tmp_path, change, says, suffix):
    """Negative latencies would pass any latency check: a record that says time ran backwards was edited. The
    column reader and the record-by-record reader refuse it alike, naming the line (JSONL) or record (Parquet)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from slabench.core.sinks import ARROW_SCHEMA, read_records

    rows = [rec(float(i)).to_dict() for i in range(4)]
    change(rows[2])
    path = tmp_path / f"r{suffix}"
    if suffix == ".jsonl":
        path.write_text("".join(json.dumps(d) + "\n" for d in rows))
        where = r"r\.jsonl:3"
    else:
        path.mkdir()
        pq.write_table(pa.Table.from_pylist(rows, schema=ARROW_SCHEMA), path / "part-00000.parquet")
        where = r"r\.parquet: record 3"
    for read in (read_table, read_records):
        with pytest.raises(UserError, match=rf"{where}: {says}") as e:
            read(path)
        assert "\n" not in str(e.value)


def test_chunks_of_consecutive_records_may_start_earlier_than_the_previous_ones_end(tmp_path):
    """Only a record's own times must move forward: records of several workers interleave in a file."""
    rows = [rec(10.0).to_dict(), rec(1.0).to_dict()]
    path = tmp_path / "r.jsonl"
    path.write_text("".join(json.dumps(d) + "\n" for d in rows))
    assert read_table(path).num_rows == 2


def test_a_partial_last_line_is_skipped_and_newer_fields_ignored(tmp_path):
    p = tmp_path / "records.jsonl"
    d = rec(0.0).to_dict()
    d["a_field_from_a_newer_schema"] = 1
    p.write_text(json.dumps(d) + "\n" + json.dumps(rec(1.0).to_dict())[:40])
    t = read_table(p)
    assert t.num_rows == 1
    (tmp_path / "empty.jsonl").write_text("")
    assert read_table(tmp_path / "empty.jsonl").num_rows == 0


def test_empty_run_gives_no_values():
    a = run_arrays(_table([]), warmup_s=2.0)
    assert a.counted == 0 and a.duration_s is None and a.ttft.size == 0


def test_an_unfinished_record_is_never_silently_zero():
    r = RequestRecord(run_id="x", request_id="1", sent=1.0, outcome=Outcome.OK)
    a = run_arrays(_table([r]))
    assert np.isnan(a.ttft).all() and np.isnan(a.e2e).all()


# -- clocks across hosts, and the open loop's user-visible TTFT ---------------------------------------------------
def _worker(records, worker, mono_offset, anchored=True):
    """The same requests as seen by a worker whose monotonic clock reads `mono_offset` more than the wall's."""
    out = []
    for r in records:
        shift = {k: getattr(r, k) + mono_offset for k in ("sent", "first_token", "last_token", "end", "first_byte")
                 if getattr(r, k) is not None}  # fmt: skip
        shifted = r.replace(worker_id=worker, chunk_times=tuple(t + mono_offset for t in r.chunk_times), **shift)
        out.append(shifted if anchored else shifted.replace(wall_sent=None))
    return out


def test_workers_whose_monotonic_clocks_differ_by_hours_share_one_window():
    a = _worker([rec(float(i)) for i in range(5)], "w1", 0.0)  # sent 0 … 4 s on the wall clock
    b = _worker([rec(float(i) + 0.5) for i in range(5)], "w2", 7 * 3600.0)  # 0.5 … 4.5 s, its clock 7 h ahead
    # A record without a wall anchor (a lost-with-worker stand-in) is placed by its own worker's offset.
    lost = _worker([rec(6.0, ttft=None, outcome=Outcome.DROPPED, category=ErrorCategory.LOST_WITH_WORKER)], "w2",
                   7 * 3600.0, anchored=False)  # fmt: skip
    arrays = run_arrays(_table(a + b + lost))
    assert arrays.window_start == pytest.approx(WALL0)
    assert arrays.window_end == pytest.approx(WALL0 + 6.05)  # the stand-in's end, on w2's clock converted
    assert arrays.duration_s == pytest.approx(6.05)  # not 7 hours


def test_a_single_process_without_anchors_uses_its_one_monotonic_clock():
    recs = [r.replace(wall_sent=None) for r in (rec(0.0), rec(2.0))]
    assert run_arrays(_table(recs)).duration_s == pytest.approx(2.0 + 0.1 + 0.02)


def test_open_loop_ttft_counts_from_the_schedule_and_keeps_the_sent_figure_beside_it():
    # scheduled at 0 and 1 s, but the generator was late: sent 0.3 s after the schedule
    recs = [rec(0.3, ttft=0.1, scheduled=0.0), rec(1.3, ttft=0.1, scheduled=1.0)]
    arrays = run_arrays(_table(recs))
    assert arrays.ttft == pytest.approx([0.4, 0.4])  # what the user waited: from the schedule
    assert arrays.ttft_sent == pytest.approx([0.1, 0.1])
    figures = metric_values([arrays])
    assert figures["ttft_p50"].value == pytest.approx(0.4) and figures["ttft_sent_p50"].value == pytest.approx(0.1)
    closed = run_arrays(_table([rec(0.3, ttft=0.1)]))
    assert closed.ttft_sent is None and "ttft_sent_p50" not in metric_values([closed])
