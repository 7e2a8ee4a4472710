"""Public production traces read as replay queues (`slabench.core.queue`): Mooncake, the Azure LLM inference traces
and BurstGPT, each from a small fixture in its published layout; offsets, lengths and shared prefix blocks as the
trace says; a window; one line naming file:line for a bad row."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

from slabench.core.errors import UserError
from slabench.core.prompts import SyntheticPrompts
from slabench.core.queue import parse_window, read_queue_file
from slabench.core.tokens import estimate_tokens
from slabench.plan.workload import queue_file_load, shared_prefixes
from slabench.shapes.items import burst_items

TRACES = Path(__file__).resolve().parents[1] / "data" / "traces"
MOONCAKE, AZURE, BURSTGPT = TRACES / "mooncake.jsonl", TRACES / "azure_llm_2023.csv", TRACES / "burstgpt.csv"


def test_mooncake_rows_keep_lengths_offsets_and_their_full_shared_blocks():
    rows = read_queue_file(MOONCAKE)
    assert [r.offset_s for r in rows] == [0.0, 0.0, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0]  # ms → s
    assert [(r.prompt_tokens, r.output_tokens) for r in rows[:3]] == [(1200, 20), (1300, 12), (600, 16)]
    # 1,200 tokens in blocks of 512: two full blocks shared by id, the last 176 tokens the request's own
    assert rows[0].prefix_blocks == (0, 1) and rows[2].prefix_blocks == (4,)
    # exactly three blocks of 512: the third is full but the request keeps at least one token of its own
    assert rows[5].prompt_tokens == 1536 and rows[5].prefix_blocks == (0, 1)
    assert rows[4].prefix_blocks == ()  # 300 tokens: no full block
    assert {r.kind for r in rows} == {"mooncake"} and rows[3].item_id == "mooncake-00003"


def test_azure_timestamps_become_offsets_and_empty_answers_are_left_out(caplog):
    rows = read_queue_file(AZURE)
    assert len(rows) == 6  # the row with 0 generated tokens is left out, and a warning says so
    assert "1 rows with 0 prompt or output tokens left out" in caplog.text
    assert rows[0].offset_s == 0.0
    assert rows[1].offset_s == pytest.approx(50.9951690 - 46.6805900, abs=1e-6)
    assert [(r.prompt_tokens, r.output_tokens) for r in rows[:2]] == [(374, 44), (396, 109)]
    assert all(r.prefix_blocks == () for r in rows)


def test_burstgpt_seconds_and_failed_requests():
    rows = read_queue_file(BURSTGPT)
    assert [r.offset_s for r in rows] == [0.0, 113.0, 120.0, 124.0, 135.0]  # from the first row; the failure gone
    assert rows[1].prompt_tokens == 417 and rows[1].output_tokens == 294


def test_the_format_is_detected_named_or_refused(tmp_path):
    assert read_queue_file(MOONCAKE, "mooncake") == read_queue_file(MOONCAKE)
    with pytest.raises(UserError, match="no TIMESTAMP, ContextTokens, GeneratedTokens"):
        read_queue_file(BURSTGPT, "azure")
    with pytest.raises(UserError, match="needs an offset_s column"):
        read_queue_file(AZURE, "queue")  # slabench's own format asked for
    with pytest.raises(UserError, match="--queue-format 'sharegpt': use auto, queue or one of"):
        read_queue_file(MOONCAKE, "sharegpt")
    own = tmp_path / "q.csv"
    own.write_text("offset_s,prompt_tokens,output_tokens\n0,10,5\n1.5,20,5\n")
    assert [r.prompt_tokens for r in read_queue_file(own)] == [10, 20]  # slabench's own queues are unchanged


def test_a_window_keeps_its_rows_and_counts_from_its_start():
    rows = read_queue_file(MOONCAKE, window=parse_window("0.5:1.5"))
    assert [r.offset_s for r in rows] == [0.0, 0.25, 0.5]
    assert [r.index for r in rows] == [3, 4, 5]  # rows keep their index in the trace
    assert [r.offset_s for r in read_queue_file(MOONCAKE, window=parse_window("1.5:"))] == [0.0, 0.5]
    with pytest.raises(UserError, match=r"--queue-window 100:200: no request of .*mooncake.jsonl in it"):
        read_queue_file(MOONCAKE, window=parse_window("100:200"))


@pytest.mark.parametrize("value", ["5", "2:1", "-1:4", "a:b", "nan:", ":nan", "inf:", "1:1"])
def test_a_bad_window_is_one_line(value):
    with pytest.raises(UserError, match=r"--queue-window .*: use START:END in seconds"):
        parse_window(value)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"timestamp": NaN, "input_length": 5, "output_length": 1}', "timestamp: 'NaN' is not a finite time"),
        ('{"timestamp": -5, "input_length": 5, "output_length": 1}', "is not a finite time ≥ 0"),
        ('{"timestamp": 0, "input_length": "5x", "output_length": 1}', "input_length: '5x' is not a whole number"),
        ('{"timestamp": 0, "input_length": 0, "output_length": 1}', "input_length: 0 is not a whole number ≥ 1"),
        ('{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": "0,1"}', "hash_ids: '0,1' is not a"),
        ('{"timestamp": 0, "input_length": 5}', "no output_length"),
        ('{"timestamp": 0, "input_length": 9' + "9" * 5000 + ', "output_length": 1}', "mooncake.jsonl:1: not a JSON"),
        ("[1, 2]", "not a JSON object"),
        (
            '{"timestamp": 900, "input_length": 5, "output_length": 1}\n'
            '{"timestamp": 100, "input_length": 5, "output_length": 1}',
            "mooncake.jsonl:2: offset -0.8 is negative",
        ),
    ],
)
def test_a_bad_mooncake_row_names_its_line(tmp_path, text, message):
    path = tmp_path / "mooncake.jsonl"
    path.write_text(text + "\n")
    with pytest.raises(UserError, match=message.replace("(", r"\(").replace("[", r"\[")):
        read_queue_file(path, "mooncake")


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ("yesterday,10,5", "azure.csv:3: TIMESTAMP: 'yesterday' is not a date and time"),
        ("2023-11-16 18:15:47+00:00,10,5", "mixes times with and without a time zone"),
        ("2023-11-16 18:15:45,10,5", "azure.csv:3: offset -1.0 is negative"),
        ("2023-11-16 18:15:47,ten,5", "ContextTokens: 'ten' is not a whole number"),
        ("2023-11-16 18:15:47," + "9" * 5000 + ",5", "ContextTokens: '9999"),
        ("2023-11-16 18:15:47,10", "GeneratedTokens: None is not a whole number"),
    ],
)
def test_a_bad_azure_row_names_its_line(tmp_path, row, message):
    path = tmp_path / "azure.csv"
    path.write_text(f"TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,10,5\n{row}\n")
    with pytest.raises(UserError, match=message):
        read_queue_file(path, "azure")


def test_a_trace_with_no_usable_row_says_so(tmp_path):
    path = tmp_path / "b.csv"
    path.write_text("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n1,ChatGPT,10,0,10,API log\n")
    with pytest.raises(UserError, match="no request with prompt and output tokens ≥ 1 in this burstgpt trace"):
        read_queue_file(path)
    with pytest.raises(UserError, match="Timestamp: 'inf' is not a finite time"):
        path.write_text("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\ninf,x,10,1,11,API log\n")
        read_queue_file(path)


def test_a_trace_item_carries_its_lengths_and_blocks_into_the_open_loop():
    items = burst_items(read_queue_file(MOONCAKE))
    assert (items[0].prompt_tokens, items[0].output_tokens, items[0].prefix_blocks) == (1200, 20, (0, 1))
    wire = items[0].to_wire()
    wire[-1] = list(wire[-1])  # what msgpack gives back
    assert type(items[0]).from_wire(wire) == items[0]


def test_shared_blocks_are_the_same_text_wherever_they_are_and_lengths_add_up():
    prompts = SyntheticPrompts()  # the estimator's count: what the embedded simulator counts
    a = prompts.for_item(1200, 20, (0, 1), 512, random.Random(1))
    b = prompts.for_item(1300, 12, (0, 1), 512, random.Random(2))
    c = prompts.for_item(600, 16, (4,), 512, random.Random(3))
    assert a.messages[0] == b.messages[0] != c.messages[0]  # the shared blocks: one system message
    assert a.messages[0]["role"] == "system" and a.messages[1]["role"] == "user"
    assert a.messages[1] != b.messages[1]  # each request's own part is its own
    assert [sum(estimate_tokens(m["content"]) for m in p.messages) for p in (a, b, c)] == [1200, 1300, 600]
    assert (a.max_tokens, a.estimate_tokens) == (20, 1200)
    alone = prompts.for_item(300, 24, (), 512, random.Random(4))
    assert [m["role"] for m in alone.messages] == ["user"] and estimate_tokens(alone.messages[0]["content"]) == 300


def test_the_planner_keys_each_request_by_its_longest_run_of_blocks_another_shares():
    rows = read_queue_file(MOONCAKE)
    tokens, keys = shared_prefixes(rows, 512)
    # (0, 1) is shared by rows 0, 1, 3, 5, 7; (4,) by rows 2 and 6; (7,) is row 4's alone (and not a full block)
    assert tokens.tolist() == [1024, 1024, 512, 1024, 0, 1024, 512, 1024]
    assert len({keys[i] for i in (0, 1, 3, 5, 7)}) == 1 and keys[2] == keys[6] != keys[0] and keys[4] == ""
    load = queue_file_load(MOONCAKE, "qa", burst_mix=None)
    assert np.array_equal(load.mix.prefix_tokens, tokens) and load.mix.prompt_tokens[0] == 1200
    assert load.offsets.tolist() == [r.offset_s for r in rows]
