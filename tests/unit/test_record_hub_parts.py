"""The record hub's small parts on their own: the store keeps each request once and tells the listeners of new ones
only; the refusal watch stops a run whose requests are all refused from the start, and only such a run."""

from __future__ import annotations

import json

import pytest

from slabench.core.record import ErrorCategory, Outcome, RecordError, RequestRecord
from slabench.core.sinks import read_records
from slabench.locust.record_store import RecordStore
from slabench.locust.refusals import REFUSALS_TO_STOP, RefusalWatch
from tests.helpers.analysis_helpers import rec


def test_the_store_keeps_each_request_once_and_tells_the_listeners_of_new_ones(tmp_path):
    store, heard = RecordStore(), []
    store.listeners.append(lambda r: heard.append(r.request_id))
    store.open(tmp_path / "records.jsonl")
    a, b = rec(1.0), rec(2.0)
    store.store([a, b])
    store.store([b])  # a batch shipped twice, a record recovered from a spool
    store.close()
    lines = (tmp_path / "records.jsonl").read_text().splitlines()
    assert [json.loads(x)["request_id"] for x in lines] == [a.request_id, b.request_id] == heard
    assert (store.tally.records, store.duplicates, store.sink) == (2, 1, None)
    store.open(tmp_path / "next.jsonl")  # a new run: its own count
    assert (store.tally.records, store.duplicates, store.path) == (0, 0, tmp_path / "next.jsonl")


@pytest.mark.parametrize("name", ["records.jsonl", "records.parquet"])
def test_shipped_rows_become_records_once_and_are_written_as_they_came(tmp_path, monkeypatch, name):
    """The master's path for a worker's batch: each row is made a record once (through the record boundary), and
    the sink writes the row itself, not a record turned back into a dict."""
    a, b = rec(1.0), rec(2.0)
    rows = [a.to_dict(), b.to_dict()]
    old = {k: v for k, v in b.to_dict().items() if k != "cached_tokens"}  # an older worker's row: normalised
    old["request_id"] = "old"
    store, heard = RecordStore(), []
    store.listeners.append(heard.append)
    store.open(tmp_path / name)
    calls = []
    to_dict = RequestRecord.to_dict
    monkeypatch.setattr(RequestRecord, "to_dict", lambda self: calls.append(self.request_id) or to_dict(self))
    store.store_rows([*rows, rows[0], old])  # a row shipped twice is stored once
    assert calls == ["old"]  # only the row that is not this schema's own is re-made
    bad = {**a.to_dict(), "request_id": "bad", "sent": 5.0, "end": 4.0}
    with pytest.raises(RecordError, match="is before sent"):
        store.store_rows([bad])  # the record boundary holds here as before
    store.close()
    monkeypatch.undo()
    assert [r.request_id for r in heard] == [a.request_id, b.request_id, "old"]
    assert read_records(tmp_path / name) == [a, b, RequestRecord.from_dict(old)]
    assert (store.tally.records, store.duplicates) == (3, 1)


def refused(sent: float, status: int, message: str = "") -> object:
    return rec(sent, ttft=None, outcome=Outcome.ERROR, category=ErrorCategory.HTTP_4XX, http_status=status,
               error_message=message)  # fmt: skip


@pytest.mark.parametrize(
    ("status", "key", "message", "cause"),
    [
        (401, "", "", "no API key ($SLABENCH_TEST_KEY is empty)"),
        (403, "sk-x", "", "the API key from $SLABENCH_TEST_KEY was refused"),
        (404, "", "the server does not serve this model", "the server does not know model"),
        (404, "", "Not Found", "the API path was not found"),
    ],
)
def test_requests_all_refused_from_the_start_stop_the_run_once_naming_the_cause(
    monkeypatch, status, key, message, cause
):
    monkeypatch.setenv("SLABENCH_TEST_KEY", key)
    lines: list[str] = []
    watch = RefusalWatch("SLABENCH_TEST_KEY", lines.append)
    watch.observe(rec(0.0, outcome=Outcome.DROPPED))  # a request the run never sent says nothing of the server
    for i in range(REFUSALS_TO_STOP + 5):
        watch.observe(refused(float(i), status, message))
    assert len(lines) == 1 and f"the first {REFUSALS_TO_STOP} requests all answered HTTP {status}" in lines[0]
    assert cause in lines[0]


def test_one_other_answer_first_ends_the_watch_for_the_run():
    lines: list[str] = []
    watch = RefusalWatch("SLABENCH_TEST_KEY", lines.append)
    for i in range(REFUSALS_TO_STOP - 1):
        watch.observe(refused(float(i), 401))
    watch.observe(rec(100.0))  # the key, model and URL can work: later refusals are the server's answers
    for i in range(3 * REFUSALS_TO_STOP):
        watch.observe(refused(200.0 + i, 401))
    assert lines == []
    watch.reset()  # a new run watches afresh
    for i in range(REFUSALS_TO_STOP):
        watch.observe(refused(300.0 + i, 401))
    assert len(lines) == 1


def test_slabench_keeps_its_state_off_locusts_objects(tmp_path, monkeypatch):
    """The hub, its run state and the parts riding on it (here the SLA hook) are slabench's own objects, found with
    `hub_of`: Locust's environment, runner and event hooks carry no attribute of slabench's."""
    import argparse

    from locust.env import Environment
    from locust.event import Events

    from slabench.locust.hub import hub_of
    from slabench.locust.options import add_options
    from slabench.locust.plugin import install
    from slabench.locust.sla import SlaHook
    from slabench.locust.sla import add_options as add_sla_options
    from tests.helpers.sla_helpers import write

    monkeypatch.setenv("OPENAI_API_KEY", "")
    parser = argparse.ArgumentParser()
    add_options(parser)
    add_sla_options(parser)
    contract = write(
        tmp_path,
        "name: t\nload: {concurrency: 1}\ndeployment: {instance_type: g6e.xlarge}\ntargets: {ttft_p95_s: {max: 1}}\n",
    )
    opts = parser.parse_args(["--records", str(tmp_path / "r.jsonl"), "--model", "m", "--sla", str(contract)])
    opts.headless, opts.num_users, opts.run_time = True, 1, None
    events = Events()
    install(events)
    install(events)  # a second locustfile's install registers nothing twice
    env = Environment(user_classes=[], events=events, parsed_options=opts, host="http://127.0.0.1:9")
    runner = env.create_local_runner()
    events.init.fire(environment=env, runner=runner, web_ui=None)
    hub = hub_of(env)
    assert (
        hub.run.run_id == ""
        and isinstance(hub.parts.get(SlaHook), SlaHook)
        and hub.stop_policy.contract_judges_saturation
    )
    assert len(events.init._handlers) == len(set(events.init._handlers))
    for obj in (env, runner, events):
        assert not [k for k in vars(obj) if "slabench" in k.lower()], type(obj).__name__
