"""A streamed event is stamped when its bytes reached the machine, not when a busy event loop got round to reading
them: a greenlet that holds the loop while the simulator's answer arrives does not make the answer late."""

from __future__ import annotations

import json
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


@pytest.mark.skipif(not arrival.SUPPORTED, reason="SO_TIMESTAMPNS is Linux's")
def test_each_packet_that_waited_behind_a_busy_loop_keeps_its_own_arrival(simulator) -> None:
    """TCP merges the packets waiting in a socket's queue and keeps the newest stamp: read after the hold, the first
    token (20 ms) would take the stamp of the last (220 ms). The watcher thread saw each packet come: the first token
    keeps its time, and so does each token after it."""
    url = simulator("--ttft", "0.02", "--itl", "0.1", "--output-tokens", "3", "--jitter", "0")
    r, hold_end = _answer_while_the_loop_is_busy(url, kernel_stamps=True)
    assert r.outcome is Outcome.OK, r.error_message
    assert r.sent is not None and r.first_token is not None and r.end is not None
    assert r.first_token - r.sent < 0.06  # 20 ms, against 120 ms for the next packet, 220 ms for the merged one
    gaps = [b - a for a, b in zip(r.chunk_times, r.chunk_times[1:], strict=False)]
    assert len(gaps) == 2 and all(0.05 < g < 0.15 for g in gaps), gaps  # 100 ms each, not 0
    assert r.end < hold_end


def test_the_loop_clock_stamps_when_the_loop_read_them(simulator) -> None:
    url = simulator("--ttft", "0.02", "--itl", "0.005", "--output-tokens", "3", "--jitter", "0")
    r, hold_end = _answer_while_the_loop_is_busy(url, kernel_stamps=False)
    assert r.outcome is Outcome.OK, r.error_message
    assert r.first_token is not None and r.first_token >= hold_end


def _chunk(delta: dict | None, tokens: int | None = None) -> str:
    obj: dict = {"id": "x", "choices": [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": None}]}
    if tokens is not None:
        obj["usage"] = {"prompt_tokens": 7, "completion_tokens": tokens, "total_tokens": 7 + tokens}
    return "data: " + json.dumps(obj) + "\n\n"


@pytest.mark.skipif(not arrival.SUPPORTED, reason="SO_TIMESTAMPNS is Linux's")
def test_an_event_split_in_two_packets_behind_a_busy_loop_is_stamped_by_its_second(scripted_server) -> None:
    """Every packet comes while the loop is held; each content event is split mid-line in two packets 10 ms apart.
    Each chunk's time is its second packet's arrival (when the event was whole), not the first's, and not the last
    packet's (the merged stamp)."""
    first, second = _chunk({"content": "Hel"}), _chunk({"content": "lo"})
    steps = [
        {"at": 0.05, "send": _chunk({"role": "assistant", "content": ""})},
        {"at": 0.10, "send": first[:20]},
        {"at": 0.11, "send": first[20:]},  # the first token: whole here
        {"at": 0.20, "send": second[:20]},
        {"at": 0.21, "send": second[20:]},
        {"at": 0.30, "send": _chunk(None, 2)},
        {"at": 0.31, "send": "data: [DONE]\n\n"},
        {"end": True},
    ]
    url, log = scripted_server({"split": steps})
    r, hold_end = _answer_while_the_loop_is_busy(url + "/split", kernel_stamps=True)
    assert r.outcome is Outcome.OK, r.error_message
    while len(log()) < 2:  # the server logs a request once its response has ended
        time.sleep(0.01)
    sent = log()[-1]["sent"]  # each step's write, on the same clock
    assert len(r.chunk_times) == 2 and r.chunk_times[-1] < hold_end
    for stamped, whole in zip(r.chunk_times, (sent[2], sent[4]), strict=True):
        assert whole <= stamped < whole + 0.03, (stamped - whole, sent)  # the next packet: 90 ms on


def _framed(event: str) -> str:
    return f"{len(event.encode()):x}\r\n{event}\r\n"


HEAD = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
REST = [{"at": 0.30, "send": _chunk(None, 1)}, {"send": "data: [DONE]\n\n"}, {"end": True}]


@pytest.mark.skipif(not arrival.SUPPORTED, reason="SO_TIMESTAMPNS is Linux's")
@pytest.mark.parametrize(
    "first",
    [
        pytest.param(HEAD[:17], id="a head in two packets"),  # read on to the head's end, through the watcher
        pytest.param("\r\n\r\n", id="blank lines before the head"),  # a parser skips them: no head yet
    ],
)
def test_a_head_that_came_in_pieces_behind_a_busy_loop_keeps_its_stamp(scripted_server, first: str) -> None:
    """The first piece at 50 ms, the rest of the head with the first token at 60 ms, the loop held until ~1.5 s:
    the head and the first token are stamped at 60 ms, neither when the loop got to them nor at the first piece."""
    rest = HEAD.removeprefix(first) if first != "\r\n\r\n" else HEAD
    steps = [
        {"at": 0.05, "raw": first},
        {"at": 0.06, "raw": rest + _framed(_chunk({"role": "assistant", "content": "Hi"}))},
        *REST,
    ]
    url, log = scripted_server({"pieces": steps})
    r, _ = _answer_while_the_loop_is_busy(url + "/pieces", kernel_stamps=True)
    assert r.outcome is Outcome.OK, r.error_message
    while len(log()) < 2:
        time.sleep(0.01)
    whole = log()[-1]["sent"][1]  # the write that completed the head and the first token
    assert r.first_byte is not None and r.first_token is not None
    assert whole <= r.first_byte <= r.first_token < whole + 0.03, (r.first_byte - whole, r.first_token - whole)
