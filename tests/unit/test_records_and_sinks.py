import json
from pathlib import Path

import pytest

from slabench.core.errors import UserError
from slabench.core.record import SCHEMA_VERSION, ErrorCategory, Outcome, RequestRecord
from slabench.core.sinks import JsonlSink, ParquetSink, open_sink, read_records


def sample(n: int) -> list[RequestRecord]:
    return [
        RequestRecord(
            run_id="run",
            request_id=f"req{i}",
            sent=float(i),
            first_token=i + 0.1,
            chunk_times=(i + 0.1, i + 0.2),
            chunk_tokens=(1, 2) if i % 2 else None,
            completion_tokens=3,
            outcome=Outcome.OK if i % 3 else Outcome.ERROR,
            error_category=None if i % 3 else ErrorCategory.HTTP_5XX,
            parse_ok=bool(i % 2) if i > 5 else None,
        )
        for i in range(n)
    ]


def test_record_is_versioned_and_round_trips_through_dicts():
    r = sample(1)[0]
    d = r.to_dict()
    assert d["schema_version"] == SCHEMA_VERSION
    assert json.loads(json.dumps(d)) == d
    assert RequestRecord.from_dict(d) == r
    assert RequestRecord.from_dict({**d, "a_field_from_a_newer_schema": 1}) == r


@pytest.mark.parametrize("name", ["r.jsonl", "r.parquet"])
def test_sinks_round_trip(tmp_path, name):
    recs = sample(20)
    sink = open_sink(tmp_path / name)
    sink.write(recs[:7])
    sink.flush()
    sink.write(recs[7:])
    sink.close()
    assert read_records(tmp_path / name) == recs
    assert sink.count == 20


@pytest.mark.parametrize("cls,name", [(JsonlSink, "r.jsonl"), (ParquetSink, "r.parquet")])
def test_flushed_records_are_readable_before_close(tmp_path, cls, name):
    """What a killed run leaves behind: everything up to the last flush."""
    sink = cls(tmp_path / name)
    sink.write(sample(5))
    sink.flush()
    sink.write(sample(8)[5:])  # not flushed yet
    assert [r.request_id for r in read_records(tmp_path / name)] == [f"req{i}" for i in range(5)]


def test_a_partial_last_line_from_a_killed_run_is_skipped(tmp_path):
    p = tmp_path / "r.jsonl"
    lines = [json.dumps(r.to_dict()) for r in sample(3)]
    p.write_text("\n".join(lines) + "\n" + lines[0][:40])
    assert len(read_records(p)) == 3


def test_a_corrupt_line_names_the_file_and_line(tmp_path):
    p = tmp_path / "r.jsonl"
    lines = [json.dumps(r.to_dict()) for r in sample(3)]
    assert '"outcome": "ok"' in lines[1]
    lines[1] = lines[1].replace('"outcome": "ok"', '"outcome": "maybe"')
    p.write_text("\n".join(lines) + "\n")
    with pytest.raises(UserError, match=r"r\.jsonl:2: not a valid record"):
        read_records(p)


def test_unknown_sink_suffix_is_a_clear_error(tmp_path):
    with pytest.raises(UserError, match=r"\.jsonl or \.parquet"):
        open_sink(tmp_path / "r.csv")


def test_a_parquet_run_killed_while_writing_a_part_keeps_every_flushed_record(tmp_path, monkeypatch):
    """A process killed mid-write leaves a cut-short temporary part: the parts already written stay readable (the
    temporary was named so that the reader took it for a part, and one cut short made the whole run unreadable)."""
    import slabench.core.sinks

    first, second, third = sample(3)
    sink = ParquetSink(tmp_path / "r.parquet")
    sink.write([first, second])
    sink.flush()

    def killed_mid_write(table, where):
        Path(where).write_bytes(b"PAR1 cut short")
        raise KeyboardInterrupt  # the process dies here

    monkeypatch.setattr(slabench.core.sinks.pq, "write_table", killed_mid_write)
    sink.write([third])
    with pytest.raises(KeyboardInterrupt):
        sink.flush()
    assert [r.request_id for r in read_records(tmp_path / "r.parquet")] == ["req0", "req1"]


def test_a_salt_goes_before_the_first_words_of_a_copy():
    from slabench.locust.user import salted

    messages = [{"role": "system", "content": "rules"}, {"role": "user", "content": "call"}]
    out, _ = salted(messages, None, "s1 L2 r1")
    assert out[0]["content"] == "[s1 L2 r1] rules" and out[1] is messages[1]
    assert messages[0]["content"] == "rules"  # the prompt source's own message is untouched
    parts, _ = salted([{"role": "user", "content": [{"type": "text", "text": "x"}]}], None, "k")
    assert parts[0]["content"][0] == {"type": "text", "text": "[k] "}
    assert salted(None, "complete this", "k") == (None, "[k] complete this")
