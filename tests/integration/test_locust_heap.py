"""A Locust process keeps its start-up objects out of the garbage collector's walks while it carries load (a full
collection of them froze the event loop for 50–260 ms), and settles again after the run for the next one. What the
run itself creates must then be freed by reference counting: a request leaves no reference cycle behind."""

from __future__ import annotations

import gc
import json
import os

from slabench.core.client import StreamingClient, Target, chat_body
from slabench.core.record import Outcome, RecordMeta
from slabench.locust.heap import FULL_AFTER, MIDDLE_AFTER
from tests.helpers.locust_run import run_locust


def test_start_up_objects_are_frozen_while_the_load_runs(simulator, tmp_path) -> None:
    url = simulator("--ttft", "0.01", "--itl", "0.002", "--output-tokens", "4", "--jitter", "0")
    log = tmp_path / "heap.jsonl"
    env = {**os.environ, "SLABENCH_TEST_HEAP_LOG": str(log)}
    res = run_locust(
        "-f", "tests/locustfiles/heap_user.py", "--host", url, "-u", "2", "-r", "2", "-t", "2s",
        "--records", str(tmp_path / "records.jsonl"), env=env,
    )  # fmt: skip
    assert res.returncode in (0, 4), res.stderr[-2000:]  # 4: a busy machine froze the load generator
    notes = [json.loads(line) for line in log.read_text().splitlines()]
    running = [n for n in notes if n["when"] == "running"]
    stopped = [n for n in notes if n["when"] == "stopped"]
    assert running and len(stopped) == 1
    young = gc.get_threshold()[0]  # this process's: the interpreter's default
    # Locust, gevent, pydantic and slabench's modules: tens of thousands of objects, out of every collection's walk,
    # during the run and after it (settled again for a next one)
    for n in [*running, *stopped]:
        assert n["frozen"] > 10_000, n
        assert n["threshold"] == [young, MIDDLE_AFTER, FULL_AFTER], n


def test_a_request_leaves_no_reference_cycle(simulator) -> None:
    url = simulator("--ttft", "0.005", "--itl", "0.001", "--output-tokens", "8", "--jitter", "0")
    client = StreamingClient(Target(url))
    body = chat_body("slabench-sim", [{"role": "user", "content": "hello"}], 8)
    assert client.send("chat", body, RecordMeta("heap")).record.outcome is Outcome.OK  # the connection, the imports
    records = []
    gc.collect()
    gc.disable()  # what the requests leave is found by the collection below, not by one in between
    try:
        for _ in range(20):
            records.append(client.send("chat", body, RecordMeta("heap")).record)
        outcomes = {r.outcome for r in records}
        del records[:]  # the records, their chunks and everything they held are garbage now
        unreachable = gc.collect()
    finally:
        gc.enable()
        client.close()
    assert outcomes == {Outcome.OK}
    assert unreachable == 0
