"""The open-loop dispatcher in-process: a real Locust Environment and record hub (on their own event hooks, so
nothing leaks into other tests), a real simulator, real greenlets."""

from __future__ import annotations

import argparse
import time
from collections import Counter

import gevent
from locust import task
from locust.env import Environment
from locust.event import Events

from slabench.core.record import ErrorCategory, Outcome
from slabench.core.sinks import read_records
from slabench.locust.hub import hub_of
from slabench.locust.openloop import Dispatcher, OpenLoopItem, current_item
from slabench.locust.options import add_options
from slabench.locust.plugin import LLMUser
from slabench.locust.plugin import install as install_plugin
from tests.helpers.locust_run import scrape


class ItemUser(LLMUser):
    """Sends a tiny prompt naming its item."""

    @task
    def send(self) -> None:
        item = current_item()
        self.request(self.body(messages=[{"role": "user", "content": f"item {item.index}"}], max_tokens=4))


class BrokenUser(LLMUser):
    @task
    def send(self) -> None:
        raise ValueError("no payload")


def environment(tmp_path, user_class: type, host: str) -> Environment:
    parser = argparse.ArgumentParser()
    add_options(parser)
    opts = parser.parse_args(["--records", str(tmp_path / "records.jsonl"), "--model", "slabench-sim"])
    opts.headless = True
    events = Events()
    install_plugin(events)
    env = Environment(user_classes=[user_class], events=events, parsed_options=opts, host=host)
    runner = env.create_local_runner()
    events.init.fire(environment=env, runner=runner, web_ui=None)
    hub_of(env).start_run()
    return env


def items(n: int, gap: float) -> list[OpenLoopItem]:
    return [
        OpenLoopItem(i, 0.05 + i * gap, i * gap, "A", f"t-{i:03d}", None, "t", stage_repeat=0, stage_phase="hold")
        for i in range(n)
    ]


def finish(env: Environment) -> list:
    hub_of(env).on_test_stop()
    return read_records(env.parsed_options.records)


def test_items_go_out_at_their_times_on_pooled_users(simulator, tmp_path):
    url = simulator("--ttft", "0.05", "--itl", "0.002", "--output-tokens", "4")
    env = environment(tmp_path, ItemUser, url)
    done = []
    d = Dispatcher(env, ItemUser, items(40, 0.01), t0=time.perf_counter(), lead=0.02, on_done=done.append)
    d.start()
    gevent.wait([d._loop], timeout=30)
    records = finish(env)
    assert done == [d] and d.finished
    assert Counter(r.item_id for r in records) == Counter(f"t-{i:03d}" for i in range(40))
    assert all(r.outcome is Outcome.OK and r.sent >= r.scheduled for r in records)
    assert scrape(url)["slabench_sim_requests_received_total"] == 40
    # 40 items 10 ms apart, each held 0.02 s before its due time and ~0.06 s in flight: a handful of users, reused
    assert len(d.all_users) < 20
    report = d.report()
    assert (report["scheduled"], report["requests"], report["not_sent"]) == (40, 40, 0)
    assert len(report["lateness"]) == 40


def test_stopping_accounts_for_items_whose_greenlet_never_ran(tmp_path):
    env = environment(tmp_path, ItemUser, "http://127.0.0.1:9")  # nothing is sent: no server needed
    d = Dispatcher(env, ItemUser, items(30, 0.0), t0=time.perf_counter() - 10)  # all overdue: spawned at once
    d.start()
    gevent.sleep(0)  # the dispatcher spawns every item's greenlet; none of them has run yet
    assert d.next_pos == 30 and not d.started
    d.stop()
    records = finish(env)
    assert Counter(r.item_id for r in records) == Counter(f"t-{i:03d}" for i in range(30))
    assert all((r.outcome, r.error_category) == (Outcome.DROPPED, ErrorCategory.NOT_SENT) for r in records)
    assert all(r.scheduled is not None and r.sent is None for r in records)


def test_a_failing_task_still_leaves_one_record_per_item(tmp_path):
    env = environment(tmp_path, BrokenUser, "http://127.0.0.1:9")
    errors = []
    env.events.user_error.add_listener(lambda user_instance, exception, tb, **_: errors.append(exception))
    d = Dispatcher(env, BrokenUser, items(5, 0.001), t0=time.perf_counter())
    d.start()
    gevent.wait([d._loop], timeout=10)
    records = finish(env)
    assert len(records) == 5 and len(errors) == 5
    assert all(r.error_category is ErrorCategory.NOT_SENT and "no payload" in r.error_message for r in records)
    assert d.report()["task_errors"] == 5
