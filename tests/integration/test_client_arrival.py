"""A streamed event is stamped when its bytes reached the machine, not when a busy event loop got round to reading
them: a greenlet that holds the loop while the simulator's answer arrives does not make the answer late."""

from __future__ import annotations

import time

import gevent
import pytest

from slabench.core import arrival
from slabench.core.client import StreamingClient, Target, chat_body
from slabench.core.record import Outcome, RecordMeta

BUSY_S = 1.5  # far longer than the whole answer takes (TTFT 20 ms, 3 tokens 5 ms apart)


def _answer_while_the_loop_is_busy(url: str, kernel_stamps: bool) -> tuple[object, float]:
    """Send a request; once its head is in, hold the loop (no yield) for BUSY_S; return the record and when the hold
    ended (the earliest the loop could notice anything)."""
    client = StreamingClient(Target(url, kernel_stamps=kernel_stamps))
    body = chat_body("slabench-sim", [{"role": "user", "content": "hello"}], 3)
    client.send("chat", body, RecordMeta("arrival"))  # a first request: the connection, and the kernel stamping on
    held: dict[str, float] = {}

    def hold() -> None:
        gevent.sleep(0.005)  # the request goes out and the loop waits for its answer
        end = time.perf_counter() + BUSY_S
        while time.perf_counter() < end:
            pass
        held["end"] = end

    busy = gevent.spawn(hold)
    reply = client.send("chat", body, RecordMeta("arrival"))
    busy.join()
    client.close()
    return reply.record, held["end"]


@pytest.mark.skipif(not arrival.SUPPORTED, reason="SO_TIMESTAMPNS is Linux's")
def test_events_that_arrived_while_the_loop_was_busy_are_stamped_when_they_arrived(simulator) -> None:
    url = simulator("--ttft", "0.02", "--itl", "0.005", "--output-tokens", "3", "--jitter", "0")
    r, hold_end = _answer_while_the_loop_is_busy(url, kernel_stamps=True)
    assert r.outcome is Outcome.OK, r.error_message
    assert r.sent is not None and r.first_token is not None and r.end is not None
    # the answer came during the hold: stamped then, never before the request was sent (the record checks the rest
    # of the order: sent ≤ first_byte ≤ first_token ≤ last_token ≤ end)
    assert r.sent <= r.first_token < hold_end
    assert r.end < hold_end


def test_the_loop_clock_stamps_when_the_loop_read_them(simulator) -> None:
    url = simulator("--ttft", "0.02", "--itl", "0.005", "--output-tokens", "3", "--jitter", "0")
    r, hold_end = _answer_while_the_loop_is_busy(url, kernel_stamps=False)
    assert r.outcome is Outcome.OK, r.error_message
    assert r.first_token is not None and r.first_token >= hold_end
