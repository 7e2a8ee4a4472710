"""The kernel's receive stamp turned into the record's clock: never later than the loop noticed the bytes, never
before the floor (the request's send, the stream's previous arrival), the notice itself without a stamp."""

from __future__ import annotations

import socket
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slabench.core import arrival

NS = 1_000_000_000


def test_a_stamp_is_the_notice_minus_the_bytes_age() -> None:
    # read at 10.0 s on the record's clock = wall 1000 s; the kernel got the bytes 30 ms before
    assert arrival.arrival(10.0, 1000 * NS, 1000 * NS - 30_000_000, floor=9.0) == pytest.approx(9.97)


def test_without_a_stamp_the_arrival_is_the_notice() -> None:
    assert arrival.arrival(10.0, 1000 * NS, None, floor=9.0) == 10.0


@given(
    now=st.floats(0, 1e6),
    back=st.floats(0, 100),
    wall=st.integers(0, 2**62),
    age=st.integers(-(10**12), 10**12),  # a wall clock stepped either way between the packet and the read
)
def test_an_arrival_is_never_after_its_notice_nor_before_its_floor(now: float, back: float, wall: int, age: int):
    floor = now - back
    got = arrival.arrival(now, wall, wall - age, floor)
    assert floor <= got <= now


@pytest.mark.skipif(not arrival.SUPPORTED, reason="SO_TIMESTAMPNS is Linux's")
def test_the_kernel_stamps_bytes_when_they_arrive_not_when_they_are_read() -> None:
    import time

    with socket.create_server(("127.0.0.1", 0)) as server, socket.create_connection(server.getsockname()) as client:
        peer, _ = server.accept()
        with peer:
            assert arrival.enable(client)
            for _ in range(100):  # the kernel turns stamping on for the machine shortly after it is asked
                peer.sendall(b"warm")
                time.sleep(0.01)
                if arrival.recv_stamped(client, 16)[1] is not None:
                    break
            before = time.time_ns()
            peer.sendall(b"data: x\n\n")
            time.sleep(0.2)  # the bytes wait in the socket, as behind a busy loop
            read = time.time_ns()
            data, stamp = arrival.recv_stamped(client, 1024)
    assert data == b"data: x\n\n"
    assert stamp is not None and before <= stamp < read - 100_000_000


@pytest.mark.skipif(not arrival.SUPPORTED, reason="the watcher's epoll is Linux's")
def test_a_watcher_that_fails_says_so_and_leaves_the_reads_to_the_kernel(monkeypatch, caplog) -> None:
    import time

    def fail(self: arrival.Watcher) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(arrival.Watcher, "_watch", fail)
    switch = sys.getswitchinterval()
    w = arrival.Watcher()
    sys.setswitchinterval(switch)  # (the watcher shortens it for the whole process)
    end = time.monotonic() + 10
    while not w.broken and time.monotonic() < end:
        time.sleep(0.01)
    assert w.broken
    assert "the arrival watcher stopped (RuntimeError: boom)" in caplog.text
    with socket.create_server(("127.0.0.1", 0)) as server, socket.create_connection(server.getsockname()) as client:
        peer, _ = server.accept()
        with peer:
            watched = arrival.Watched(client)
            w.arm(watched)
            assert not watched.armed  # nothing registers with a watcher that has stopped
            peer.sendall(b"data: x\n\n")
            time.sleep(0.05)
            assert w.read(watched, 1024)[0] == b"data: x\n\n"  # read as recv_stamped would


@pytest.mark.skipif(not arrival.SUPPORTED, reason="the watcher's epoll is Linux's")
def test_a_watcher_that_cannot_start_says_so_and_arms_nothing(monkeypatch, caplog) -> None:
    real = arrival.get_original

    def no_more_files(module: str, name: str) -> object:
        if (module, name) == ("select", "epoll"):
            raise OSError(24, "Too many open files")
        return real(module, name)

    monkeypatch.setattr(arrival, "get_original", no_more_files)
    w = arrival.Watcher()
    assert w.broken and "the arrival watcher stopped (OSError: [Errno 24] Too many open files)" in caplog.text
    with socket.create_server(("127.0.0.1", 0)) as server, socket.create_connection(server.getsockname()) as client:
        watched = arrival.Watched(client)
        w.arm(watched)
        assert not watched.armed
