"""A closed loop never hammers a failing server: every failure class backs off, exponentially with jitter, Retry-After
only ever lengthening the wait; and a run whose requests all fail stops with one line."""

from __future__ import annotations

import random

import pytest

from slabench.core.record import ErrorCategory, Outcome, RequestRecord
from slabench.locust.backoff import MAX_S, Backoff, failed
from slabench.locust.refusals import FAILURES_TO_STOP, FailureWatch


def rec(outcome=Outcome.ERROR, cat=ErrorCategory.HTTP_5XX, **kw) -> RequestRecord:
    return RequestRecord(run_id="r", request_id="x", outcome=outcome, error_category=cat, **kw)


FAILURES = [
    rec(cat=ErrorCategory.HTTP_4XX, http_status=429, retry_after=0.0),  # Retry-After: 0, or a date in the past
    rec(cat=ErrorCategory.HTTP_5XX, http_status=500),
    rec(cat=ErrorCategory.HTTP_4XX, http_status=401),
    rec(cat=ErrorCategory.REDIRECT, http_status=308, redirects=5),
    rec(cat=ErrorCategory.CONNECT),
    rec(cat=ErrorCategory.CLOSED),
    rec(cat=ErrorCategory.TIMEOUT),
    rec(cat=ErrorCategory.NOT_OPENAI),
    rec(cat=ErrorCategory.STALE_RESPONSE),
    rec(Outcome.INCOMPLETE, ErrorCategory.STREAM_CUT),
    rec(Outcome.INCOMPLETE, ErrorCategory.STALL),
]
ANSWERS = [
    rec(Outcome.OK, None),
    rec(Outcome.INCOMPLETE, ErrorCategory.NO_USAGE),
    rec(Outcome.INCOMPLETE, ErrorCategory.BAD_USAGE),
    rec(Outcome.INCOMPLETE, ErrorCategory.NO_DONE),
    rec(Outcome.INCOMPLETE, ErrorCategory.LOST_EVENTS),
]


@pytest.mark.parametrize("r", FAILURES, ids=lambda r: str(r.error_category))
def test_every_failure_class_backs_off_doubling_within_its_jitter_up_to_the_cap(r):
    b = Backoff(random.Random(1))
    waits = [b.after(r) for _ in range(10)]
    for n, wait in enumerate(waits):
        step = min(0.5 * 2**n, MAX_S)
        assert step / 2 <= wait <= step
    assert waits[-1] >= MAX_S / 2


@pytest.mark.parametrize("r", ANSWERS, ids=lambda r: str(r.error_category or r.outcome))
def test_an_answer_ends_the_failures_in_a_row(r):
    b = Backoff(random.Random(1))
    for _ in range(5):
        b.after(FAILURES[1])
    assert not failed(r) and b.after(r) is None
    assert b.after(FAILURES[1]) <= 0.5  # back to the first step


def test_retry_after_is_a_floor_never_a_permission_and_never_past_the_cap():
    b = Backoff(random.Random(1))
    assert b.after(rec(cat=ErrorCategory.HTTP_4XX, http_status=429, retry_after=0.0)) >= 0.25
    assert b.after(rec(cat=ErrorCategory.HTTP_4XX, http_status=429, retry_after=10.0)) == 10.0
    assert b.after(rec(cat=ErrorCategory.HTTP_4XX, http_status=429, retry_after=86400.0)) == MAX_S


def test_a_request_of_ours_changes_nothing():
    b = Backoff(random.Random(1))
    b.after(FAILURES[1])
    assert b.after(rec(Outcome.DROPPED, ErrorCategory.CANCELLED)) is None and b.failures == 1


def test_users_that_failed_together_do_not_come_back_together():
    waits = {Backoff(random.Random(seed)).after(FAILURES[1]) for seed in range(20)}
    assert len(waits) == 20


def test_a_run_whose_requests_all_fail_stops_once_with_one_line():
    lines: list[str] = []
    w = FailureWatch(lines.append)
    for r in [*FAILURES, ANSWERS[0]]:  # an answer in between: the count starts again
        w.observe(r)
    for _ in range(FAILURES_TO_STOP - 1):
        w.observe(rec(cat=ErrorCategory.HTTP_5XX, http_status=502, error_message="HTTP 502: Bad Gateway"))
        w.observe(rec(Outcome.DROPPED, ErrorCategory.CANCELLED))  # ours: not counted either way
        w.observe(rec(scheduled=1.0))  # an open loop's: its schedule is the experiment
    assert lines == []
    w.observe(rec(Outcome.INCOMPLETE, ErrorCategory.STREAM_CUT, error_message="connection cut before [DONE]"))
    w.observe(rec())
    assert lines == [
        f"stopping the run: the last {FAILURES_TO_STOP} requests all failed (http_5xx 19, stream_cut 1): the server "
        "is failing and the run would measure only its errors. The last: connection cut before [DONE]"
    ]
