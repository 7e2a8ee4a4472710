"""Worker heartbeats from their own OS thread, so a busy worker is never taken for a dead one.

Locust sends a worker's heartbeats from a greenlet: when the worker's event loop is saturated (thousands of streams
in flight, each pass of the loop taking seconds), the heartbeat waits its turn, the master marks the worker missing
after ~4 s, and when every worker is "missing" Locust stops the test. This thread sends the same heartbeat message
(same node id, the worker's current state) once a second over its own ZeroMQ connection to the master: it needs only
the GIL, which a busy interpreter hands over every few milliseconds. Only a dead process (or a frozen one) stops it.
The master answers each heartbeat on the worker's main connection, as it does Locust's own.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import zmq  # plain pyzmq: this runs in a real thread, outside gevent's event loop
from gevent import monkey
from locust.rpc.protocol import Message

INTERVAL_S = 1.0
_sleep = monkey.get_original("time", "sleep")
_start_thread = monkey.get_original("_thread", "start_new_thread")


class HeartbeatThread:
    def __init__(self, host: str, port: int, node_id: str, state: Callable[[], dict[str, Any]]) -> None:
        self.address = f"tcp://[{host}]:{port}" if ":" in host else f"tcp://{host}:{port}"
        self.node_id = node_id
        self.state = state
        self.sent = 0
        self.stopped = False
        _start_thread(self._run, ())

    def _run(self) -> None:
        ctx = zmq.Context()
        sock = ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.IDENTITY, f"{self.node_id}/heartbeat".encode())
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.IPV6, 1)  # dual stack: IPv4 addresses work too
        sock.connect(self.address)
        try:
            while not self.stopped:
                _sleep(INTERVAL_S)
                with contextlib.suppress(zmq.Again):  # not connected (yet, or any more): the next one may go
                    sock.send(Message("heartbeat", self.state(), self.node_id).serialize(), zmq.NOBLOCK)
                    self.sent += 1
        finally:
            sock.close()
            ctx.term()

    def stop(self) -> None:
        self.stopped = True


def worker_state(runner: Any) -> Callable[[], dict[str, Any]]:
    """What Locust's own worker heartbeat carries (`WorkerRunner.heartbeat`)."""

    def state() -> dict[str, Any]:
        return {
            "state": runner.worker_state,
            "current_cpu_usage": runner.current_cpu_usage,
            "current_memory_usage": runner.current_memory_usage,
        }

    return state
