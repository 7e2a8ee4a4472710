"""Real Locust runs (the `locust` command, and the open-loop dispatcher in-process) against the hostile server:
records = requests the server received, each classified as the client table says, no traceback, the run goes on;
refusals from the start stop the run (exit 3); 429/503 slow a closed loop down but not an open one; a server that
never answers does not hold the start; the API key is in no file and no output."""

from __future__ import annotations

import itertools
import json
import os
import time
from collections import Counter

import gevent
import pytest
from locust import task

from slabench.core.errors import ExitCode
from slabench.core.sinks import read_records
from slabench.locust.backoff import failed
from slabench.locust.openloop import Dispatcher
from slabench.locust.plugin import LLMUser
from slabench.locust.refusals import FAILURES_TO_STOP, REFUSALS_TO_STOP
from tests.helpers.locust_run import ROOT, assert_exit, machine_doubtful, run_locust
from tests.integration.test_client_hostile import CASES, KEY
from tests.integration.test_shapes_dispatcher import ItemUser, environment, finish, items

LOCUSTFILE = str(ROOT / "locustfiles" / "chat_replay.py")
EXPECTED = {c.behaviour: c.expect for c in CASES}
# Behaviours whose requests take long (a stall, a hold, a redirect loop's hops) are in the client table; the mix
# keeps one of each kind so a short run goes round it several times.
SLOW = {
    *("no_answer", "cr_only", "done_then_hold", "slow_trickle", "redirect_loop_308", "busy_503", "huge_event"),
    *("head_trickle", "head_never_ends", "bad_chunk_size", "retry_after_huge"),
}
# Their class depends on what came before on the connection or the server, which a mix does not keep.
STATEFUL = {"stale_echo_header", "stale_chunk_id", "revoked_key_401"}
ANSWERED = {"ok", "no_usage", "bad_usage", "lost_events", "no_done"}  # not failures (slabench.locust.backoff)
_MIXED = [c for c in CASES if c.behaviour not in SLOW | STATEFUL and c.endpoint == "chat"]  # a chat run
_answers = [c.behaviour for c in _MIXED if c.expect[0] in ANSWERED]
_failures = [c.behaviour for c in _MIXED if c.expect[0] not in ANSWERED]
# Answers and failures alternate, as on a server that fails often but not always: a run of FAILURES_TO_STOP failures
# in a row would stop the run (test_a_run_whose_requests_all_fail_stops_with_one_line).
MIX = [b for pair in itertools.zip_longest(_answers, _failures) for b in pair if b] + ["no_answer", "done_then_hold"]


def locust(*args: str, env_key: str | None = KEY, timeout: float = 120):
    env = {**os.environ, "OPENAI_API_KEY": env_key or ""}
    return run_locust("-f", LOCUSTFILE, "--prompt-tokens", "16", "--max-tokens", "8", *args, timeout=timeout, env=env)


def assert_joined(records: list, rows: list[dict]) -> None:
    """Joined by X-Request-Id: every request the server received has exactly one record (a followed redirect keeps
    its id); a record the server never saw can only be one cancelled by the stop before its bytes went out."""
    ids = Counter(r.request_id for r in records)
    received = {row["request_id"] for row in rows}
    assert all(n == 1 for n in ids.values())
    assert received <= ids.keys()
    assert all(r.error_category == "cancelled" for r in records if r.request_id not in received)


def expected_class(row: dict) -> str:
    behaviour = row["behaviour"]
    expect = EXPECTED[behaviour]
    if behaviour in ("closed_on_reuse", "reset_on_reuse"):  # a connection's first request is answered
        return expect[0] if row["seq"] == 1 else expect[1]
    return expect[0]


def test_a_locust_run_against_every_hostile_behaviour(hostile_server, tmp_path):
    server = hostile_server(MIX)
    records_path = tmp_path / "records.jsonl"
    res = locust(
        "--host",
        f"{server.url}/mix",
        "-u",
        "6",
        "-r",
        "6",
        "-t",
        "8s",
        "--stall-timeout",
        "1",
        "--request-timeout",
        "10",
        "--stop-timeout",
        "10",
        "--records",
        str(records_path),
        "--csv",
        str(tmp_path / "locust"),
        "--html",
        str(tmp_path / "report.html"),
    )
    assert_exit(res.returncode, records_path.parent, 0, 1, output=res.stderr)  # 1: Locust's own, requests failed
    assert "Traceback" not in res.stderr
    records = read_records(records_path)
    rows = server.requests()
    first_row = {}
    for row in rows:
        first_row.setdefault(row["request_id"], row)
    assert_joined(records, rows)
    assert len(rows) == len(first_row) + sum(r.redirects or 0 for r in records)
    wrong = []
    for r in records:
        if r.request_id not in first_row:
            continue
        got = str(r.error_category or r.outcome)
        if got != expected_class(first_row[r.request_id]) and got != "cancelled":  # cancelled: in flight at stop
            wrong.append((first_row[r.request_id]["behaviour"], got, r.error_message))
    assert not wrong
    assert len({first_row[r.request_id]["behaviour"] for r in records}) >= 25  # went round the mix
    status = json.loads((records_path.parent / "run_status.json").read_text())
    assert status["records"] == len(records) and status["stopped"] is None and not status["incomplete_reasons"]
    assert status["degraded"] == machine_doubtful(records_path.parent)  # degraded only by a busy machine
    # The key the server echoed back is in no file of the run and in no output.
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert KEY not in path.read_text(errors="replace"), path
    assert KEY not in res.stdout + res.stderr
    assert "[redacted]" in (tmp_path / "locust_failures.csv").read_text()


@pytest.mark.parametrize(
    "behaviour,cause",
    [
        ("unauthorized_401", "the API key from $OPENAI_API_KEY was refused"),
        ("unknown_model_404", "the server does not know model 'hostile-model'"),
        ("path_404", "the API path was not found"),
    ],
)
def test_refusals_from_the_start_stop_the_run_with_one_line(hostile_server, tmp_path, behaviour, cause):
    server = hostile_server()
    records_path = tmp_path / "records.jsonl"
    t0 = time.monotonic()
    res = locust(
        "--host",
        f"{server.url}/{behaviour}",
        "-u",
        "2",
        "-r",
        "2",
        "-t",
        "60s",
        "--records",
        str(records_path),
        "--sla",
        str(ROOT / "sla" / "config_sla_example.yaml"),
    )
    assert res.returncode == ExitCode.BAD_INPUT, res.stderr[-3000:]
    assert time.monotonic() - t0 < 50  # stopped, not run to its 60 s
    lines = [x for x in res.stderr.splitlines() if "stopping the run" in x]
    assert len(lines) == 1 and cause in lines[0], res.stderr[-3000:]
    assert "OpenAI-compatible" not in lines[0] or behaviour == "path_404"
    assert KEY not in res.stderr
    records = read_records(records_path)
    assert_joined(records, server.requests())
    assert REFUSALS_TO_STOP <= len(records) < 100  # not the thousands a tight loop sends in a few seconds
    status = json.loads((records_path.parent / "run_status.json").read_text())
    assert status["stopped"].startswith("stopping the run")
    assert "Traceback" not in res.stderr


def test_refusals_after_a_success_do_not_stop_the_run(hostile_server, tmp_path):
    server = hostile_server(["ok", *["forbidden_403"] * 30])
    records = str(tmp_path / "r.jsonl")
    res = locust("--host", f"{server.url}/mix", "-u", "1", "-r", "1", "-t", "3s", "--records", records)
    assert_exit(res.returncode, tmp_path, 1, output=res.stderr)  # Locust's own 1: requests failed
    assert "stopping the run" not in res.stderr, res.stderr[-3000:]


def test_a_closed_loop_backs_off_on_retry_after(hostile_server, tmp_path):
    """429 with Retry-After: 1 — two users send at most one request a second each, not thousands: Retry-After is
    the floor of each wait, which backoff lengthens while the rejections go on."""
    server = hostile_server()
    records_path = tmp_path / "records.jsonl"
    res = locust(
        "--host", f"{server.url}/rate_limited_429", "-u", "2", "-r", "2", "-t", "4s", "--records", str(records_path)
    )
    assert_exit(res.returncode, records_path.parent, 1, output=res.stderr)
    records = read_records(records_path)
    assert_joined(records, server.requests())
    answered = [r for r in records if r.outcome != "dropped"]  # not those cancelled in flight at the stop
    assert 2 <= len(answered) <= 2 * (4 + 2)
    assert all((r.http_status, r.retry_after) == (429, 1.0) and 1.0 <= r.backoff <= 30 for r in answered)


def test_an_open_loop_keeps_its_schedule_and_records_the_rejections(hostile_server, tmp_path):
    server = hostile_server()
    env = environment(tmp_path, ItemUser, f"{server.url}/rate_limited_429")
    d = Dispatcher(env, ItemUser, items(20, 0.02), t0=time.perf_counter(), lead=0.02)
    d.start()
    gevent.wait([d._loop], timeout=30)
    records = finish(env)
    assert len(records) == len(server.requests()) == 20  # no extra requests, none held back
    assert all((r.http_status, r.retry_after, r.backoff) == (429, 1.0, None) for r in records)


def test_a_server_that_never_answers_does_not_hold_the_start(hostile_server, tmp_path):
    """Model discovery and the metrics baseline have short timeouts of their own; the requests then go out and
    time out as records."""
    server = hostile_server()
    records_path = tmp_path / "records.jsonl"
    res = locust(
        "--host",
        f"{server.url}/no_answer",
        "-u",
        "2",
        "-r",
        "2",
        "-t",
        "15s",
        "--stall-timeout",
        "1",
        "--records",
        str(records_path),
        "--stop-timeout",
        "3",
    )
    assert res.returncode == ExitCode.INCOMPLETE, res.stderr[-3000:]  # nothing was answered: not a measurement
    assert "no request was answered" in res.stderr
    records = read_records(records_path)
    assert_joined(records, server.requests())
    assert {str(r.error_category) for r in records} <= {"timeout", "cancelled"}
    assert sum(r.error_category == "timeout" for r in records) >= 2
    assert "Traceback" not in res.stderr


class ChatUser(LLMUser):
    @task
    def chat(self) -> None:
        self.request(self.body(messages=[{"role": "user", "content": "hi"}], max_tokens=4))


# What sent 500–2,346 requests/s per user before every failure class backed off.
HAMMERED = [
    *("retry_after_zero", "retry_after_past_date", "http_500", "html_502", "reset_after_head", "revoked_key_401"),
    *("redirect_loop_308", "cut_mid_stream", "bad_json", "tool_calls_not_a_list", "not_a_behaviour"),
]


@pytest.mark.parametrize("behaviour", HAMMERED)
def test_a_closed_loop_user_never_hammers_a_failing_server(hostile_server, tmp_path, behaviour):
    """One closed-loop user for 3 s: after the n-th failure in a row it waits at least 0.25 · 2^(n-1) s, so at most 4
    failed requests fit in 3 s (0.25 + 0.5 + 1 + 2 s of waits come before a fifth), whatever Retry-After says."""
    server = hostile_server()
    env = environment(tmp_path, ChatUser, f"{server.url}/{behaviour}")
    user = ChatUser(env)
    user.host = env.host
    user.on_start()

    def loop() -> None:
        while True:
            user.chat()

    running = gevent.spawn(loop)
    gevent.sleep(3.0)
    running.kill()
    user.on_stop()
    records = finish(env)
    assert_joined(records, server.requests())
    failures = [r for r in records if failed(r)]
    assert 1 <= len(failures) <= 4, [r.error_category for r in records]
    assert len(records) - len(failures) <= 2  # an answer before (revoked key), one cancelled at the stop
    assert all(r.backoff >= 0.25 for r in failures)


def test_a_run_whose_requests_all_fail_stops_with_one_line(hostile_server, tmp_path):
    server = hostile_server()
    records_path = tmp_path / "records.jsonl"
    t0 = time.monotonic()
    res = locust(
        "--host", f"{server.url}/html_502", "-u", "10", "-r", "10", "-t", "60s", "--records", str(records_path),
        "--sla", str(ROOT / "sla" / "config_sla_example.yaml"),
    )  # fmt: skip
    assert res.returncode == ExitCode.INCOMPLETE, res.stderr[-3000:]
    assert time.monotonic() - t0 < 50  # stopped, not run to its 60 s
    lines = [x for x in res.stderr.splitlines() if "stopping the run" in x]
    assert len(lines) == 1, res.stderr[-3000:]
    assert f"the last {FAILURES_TO_STOP} requests all failed (http_5xx {FAILURES_TO_STOP})" in lines[0]
    assert "HTTP 502" in lines[0] and "Traceback" not in res.stderr
    records = read_records(records_path)
    assert_joined(records, server.requests())
    assert FAILURES_TO_STOP <= len(records) < 100
    status = json.loads((records_path.parent / "run_status.json").read_text())
    assert lines[0].endswith(f"slabench: {status['stopped']}")


class FailingGraderUser(LLMUser):
    @task
    def send(self) -> None:
        self.request(self.body(messages=[{"role": "user", "content": "hi"}], max_tokens=4), grade=lambda text: 1 / 0)


def test_a_grader_that_fails_still_leaves_the_record(hostile_server, tmp_path):
    server = hostile_server()
    env = environment(tmp_path, FailingGraderUser, f"{server.url}/ok")
    user = FailingGraderUser(env)
    user.host = env.host  # what Locust's runner sets when it spawns users
    user.on_start()
    with pytest.raises(ZeroDivisionError):
        user.send()
    user.on_stop()
    records = finish(env)
    assert_joined(records, server.requests())
    assert [(r.outcome, r.quality_task) for r in records] == [("ok", None)]
