"""Replay queues (CSV/JSONL files, the workload dataset's), the items a replay sends, stage stamping helpers and
the open-loop summaries. Pure functions; no Locust run."""

from __future__ import annotations

import json

import numpy as np
import pytest
from locust import HttpUser, TaskSet, task

from slabench.core.errors import UserError
from slabench.core.queue import QueueItem, parse_queue_text, read_queue_file
from slabench.core.record import StageUnit
from slabench.locust.openloop import OpenLoopItem, lateness_summary, merge_reports, per_second, summary_line
from slabench.locust.plugin import LLMUser
from slabench.shapes.base import StageClock, check_user_class, span_stage
from slabench.shapes.items import arrival_items, burst_items
from slabench.shapes.schedules import Arrival, Span, partition, step_plan


# -- queue files -----------------------------------------------------------------------------------------------------
def test_dataset_style_csv():
    rows = parse_queue_text("index,account,offset_s,seed\n0,A,0.0,11\n1,B,0.5,12\n2,A,0.5,13\n", "q.csv")
    assert rows == [QueueItem(0, 0.0, "A", 11), QueueItem(1, 0.5, "B", 12), QueueItem(2, 0.5, "A", 13)]
    assert [r.item_id for r in rows] == ["queue-00000", "queue-00001", "queue-00002"]
    assert parse_queue_text("offset_s\n0\n", "q.csv", kind="burst")[0].item_id == "burst-00000"


def test_minimal_csv_and_jsonl():
    assert [r.offset_s for r in parse_queue_text("offset\n0\n1.25\n", "q.csv")] == [0.0, 1.25]
    text = '{"offset_s": 0.1, "item_id": "x"}\n\n{"offset_s": 0.2, "account": "C", "seed": 5}\n'
    rows = parse_queue_text(text, "q.jsonl")
    assert rows == [QueueItem(0, 0.1, own_id="x"), QueueItem(1, 0.2, "C", 5)]
    assert [r.item_id for r in rows] == ["x", "queue-00001"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("offset_s\n0.5\n0.2\n", r"q:3: offset 0\.2 is earlier than the previous one"),
        ("offset_s\n-1\n", r"q:2: offset -1\.0 is negative"),
        ("offset_s\nabc\n", r"q:2: offset_s: 'abc' is not a number"),
        ("offset_s\ninf\n", r"q:2: offset_s: 'inf' is not a finite number"),
        ("account,seed\nA,1\n", r"q:1: header: needs an offset_s column"),
        ("offset_s,seed\n0,-3\n", r"q:2: seed: '-3' is not a non-negative integer"),
        ("index,offset_s\n0,0\n0,1\n", r"q:3: index 0 repeats q:2"),
        ("index,offset_s\n1.9,0\n", r"q:2: index: '1.9' is not a whole number ≥ 0"),
        ('{"offset_s": 1}\n{"offset_s": 0}\n', r"q:2: offset 0 is earlier"),
        ('{"offset_s": 1}\n[1]\n', r"q:2: not a JSON object"),
        ('{"offset_s": 1}\n{"offset_s": 1' + "0" * 5000 + "}\n", r"q:2: not a JSON object \(Exceeds the limit"),
        ('{"offset_s": 1}\n{"account": "A"}\n', r"q:2: no offset_s"),
        ("offset_s\n", r"the queue is empty"),
    ],
)
def test_bad_queues_name_the_line(text, message):
    with pytest.raises(UserError, match=message):
        parse_queue_text(text, "q")


def test_read_queue_file_errors(tmp_path):
    with pytest.raises(UserError, match="cannot read"):
        read_queue_file(tmp_path / "missing.csv")
    (tmp_path / "empty.csv").write_text("\n")
    with pytest.raises(UserError, match="empty"):
        read_queue_file(tmp_path / "empty.csv")
    (tmp_path / "ok.jsonl").write_text(json.dumps({"offset_s": 3}) + "\n")
    assert read_queue_file(tmp_path / "ok.jsonl")[0].offset_s == 3


# -- items -----------------------------------------------------------------------------------------------------------
def _rows(n: int) -> list[QueueItem]:
    return [QueueItem(i, i * 0.1, "A", 100 + i, kind="burst") for i in range(n)]


def test_burst_items_time_scale_and_stride():
    items = burst_items(_rows(100), time_scale=10)
    assert [it.index for it in items] == list(range(0, 100, 10))
    assert items[3].due == pytest.approx(3.0 / 10)  # offset 3.0 s, ten times faster
    assert items[3].offset_s == pytest.approx(3.0)
    assert items[3].item_id == "burst-00030"
    assert (items[3].stage_level, items[3].stage_repeat, items[3].stage_phase) == (None, 0, "hold")
    slow = burst_items(_rows(10), time_scale=0.5, repeat=2)
    assert len(slow) == 10 and slow[1].due == pytest.approx(0.2) and slow[0].stage_repeat == 2
    with pytest.raises(UserError, match="time-scale"):
        burst_items(_rows(3), time_scale=0)
    with pytest.raises(UserError, match="time-scale"):
        burst_items(_rows(3), time_scale=-2)


def test_a_strided_replay_keeps_the_request_rate():
    offsets = np.cumsum(np.random.default_rng(0).exponential(0.01, 20000))  # ~100 req/s
    rows = [QueueItem(i, float(t)) for i, t in enumerate(offsets)]
    full = burst_items(rows)
    fast = burst_items(rows, time_scale=20)
    rate = lambda items: len(items) / items[-1].due  # noqa: E731
    assert rate(fast) == pytest.approx(rate(full), rel=0.05)
    assert fast[-1].due == pytest.approx(full[-1].due / 20, rel=0.01)


def test_arrival_items_carry_their_stage():
    span = Span(0, 10, 2.5, 1, "warmup")
    items = arrival_items([Arrival(0.5, span), Arrival(0.7, span)], "rate")
    assert [it.item_id for it in items] == ["rate-000000", "rate-000001"]
    assert items[1].stage == {
        "stage_level": 2500,
        "stage_unit": "milli_rps",
        "stage_repeat": 1,
        "stage_phase": "warmup",
    }


def test_item_wire_round_trip():
    it = OpenLoopItem(7, 0.25, 2.5, "B", "burst-00007", 2**47 + 3, "burst", stage_repeat=0, stage_phase="hold")
    assert OpenLoopItem.from_wire(json.loads(json.dumps(it.to_wire()))) == it


def test_partitioned_items_are_each_sent_by_one_worker():
    items = burst_items(_rows(1001), time_scale=1)
    for n in range(1, 9):
        ids = [items[k].item_id for w in range(n) for k in partition(len(items), w, n)]
        assert sorted(ids) == sorted(it.item_id for it in items)


# -- stages ----------------------------------------------------------------------------------------------------------
def test_span_stage_by_unit():
    span = Span(0, 1, 4.0, 2, "hold")
    assert span_stage(span, StageUnit.USERS) == {
        "stage_level": 4,
        "stage_unit": "users",
        "stage_repeat": 2,
        "stage_phase": "hold",
    }
    rate = span_stage(Span(0, 1, 0.25, 0, "hold"), StageUnit.MILLI_RPS)
    assert (rate["stage_level"], rate["stage_unit"]) == (250, "milli_rps")
    assert StageUnit.MILLI_RPS.load(250) == 0.25 and StageUnit.USERS.load(4) == 4
    assert span_stage(Span(0, 1, None, 3, "hold"), None) == {
        "stage_level": None,
        "stage_unit": None,
        "stage_repeat": 3,
        "stage_phase": "hold",
    }
    assert span_stage(None, StageUnit.USERS) == {}


def test_stage_clock_follows_the_plan():
    now = [100.0]
    plan = step_plan([1, 4], warmup=1, hold=2, cooldown=1)
    clock = StageClock(plan, "users", t0=100.0, clock=lambda: now[0])
    seen = []
    for t in (0.0, 0.99, 1.0, 3.5, 4.0, 5.0, 7.9, 8.0, 50.0):
        now[0] = 100.0 + t
        f = clock()
        seen.append((f["stage_level"], f["stage_phase"]))
    assert seen == [
        (1, "warmup"),
        (1, "warmup"),
        (1, "hold"),
        (1, "cooldown"),
        (4, "warmup"),
        (4, "hold"),
        (4, "cooldown"),
        (4, "cooldown"),  # after the plan: the last stage (requests still finishing)
        (4, "cooldown"),
    ]


# -- summaries -------------------------------------------------------------------------------------------------------
def test_lateness_summary_is_exact_and_none_without_data():
    assert lateness_summary([]) is None
    s = lateness_summary([0.001 * i for i in range(101)])
    assert s["p50"] == pytest.approx(0.05) and s["p99"] == pytest.approx(0.099) and s["max"] == pytest.approx(0.1)
    assert s["p50"] <= s["p90"] <= s["p99"] <= s["max"]


def test_merge_reports_and_summary_line():
    a = {"scheduled": 3, "requests": 3, "not_sent": 0, "task_errors": 0, "slot_waits": 1, "peak_in_flight": 2}
    b = {"scheduled": 2, "requests": 1, "not_sent": 1, "task_errors": 0, "slot_waits": 0, "peak_in_flight": 1}
    merged = merge_reports([a | {"lateness": [0.001, 0.002, 0.003]}, b | {"lateness": [0.010]}])
    assert (merged["scheduled"], merged["requests"], merged["not_sent"], merged["workers"]) == (5, 4, 1, 2)
    assert merged["lateness"]["max"] == pytest.approx(0.010) and merged["lateness"]["n"] == 4
    line = summary_line("burst", merged)
    assert "5 scheduled on 2 process(es), 4 sent, 1 not sent" in line
    assert "max 10.0 ms" in line and "1 waited for the in-flight cap" in line
    empty = merge_reports([])
    assert empty["lateness"] is None and "lateness: no data" in summary_line("burst", empty)


def test_per_second_counts():
    assert per_second([0.1, 0.2, 1.5, 2.99], 3).tolist() == [2, 1, 1]
    assert per_second([], 2).tolist() == [0, 0]


# -- plan caching ----------------------------------------------------------------------------------------------------
def test_a_plan_is_rebuilt_for_new_shape_options_but_not_for_locusts_headless_defaults():
    import argparse
    from types import SimpleNamespace

    from slabench.shapes.base import Plan, SlabenchShape

    builds = []

    class CountingShape(SlabenchShape):
        def build(self, opts, environment):
            builds.append(opts.burst_time_scale)
            return Plan(spans=(), level_unit="none")

    opts = argparse.Namespace(num_users=None, spawn_rate=None, burst_time_scale=1.0)
    env = SimpleNamespace(parsed_options=opts)
    shape = CountingShape()
    first = shape.plan_for(env)
    opts.num_users, opts.spawn_rate = 1, 1  # what Locust fills in for a headless run after the init event
    assert shape.plan_for(env) is first and builds == [1.0]
    opts.burst_time_scale = 10.0  # e.g. changed in the web UI before the next run
    shape.plan_for(env)
    assert builds == [1.0, 10.0]


# -- the user class an open-loop shape drives ------------------------------------------------------------------------


class _Grader(LLMUser):
    @task
    def grade(self):
        pass


class _NoTask(LLMUser):
    pass


class _Browse(TaskSet):
    @task
    def page(self):
        pass


class _WithTaskSet(LLMUser):
    tasks = [_Browse]  # noqa: RUF012 (Locust reads the class attribute)


class _PlainHttp(HttpUser):
    @task
    def get(self):
        pass


def test_an_llm_user_with_a_task_is_driven():
    check_user_class(_Grader)


@pytest.mark.parametrize(
    "user_class, message",
    [
        (_PlainHttp, "open-loop shapes drive slabench LLMUser subclasses; _PlainHttp is not one"),
        (_NoTask, "_NoTask has no @task to run for each scheduled item"),
        (_WithTaskSet, "_WithTaskSet: open-loop shapes run @task methods, not TaskSets"),
    ],
)
def test_open_loop_shapes_refuse_a_user_class_they_cannot_drive(user_class, message):
    with pytest.raises(UserError, match=message):
        check_user_class(user_class)
