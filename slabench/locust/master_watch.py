"""A worker stops its load soon after its master is gone, instead of Locust's 60 s without a master heartbeat.

The worker watches its own connection to the master (ZeroMQ socket events): when the master process dies, its host's
kernel closes the TCP connection and the worker sees it at once. If the connection stays down for
``--master-lost-timeout`` seconds (default 5; a master that restarts its socket reconnects well within that), the
worker stops its users — in-flight requests become cancelled records, all of it in the worker's spool — and exits
with code 4 (measurement incomplete), naming the spool and the command that turns it into a run
(`slabench recover`). A master host that vanishes without closing connections is still caught by Locust's own
60 s heartbeat timeout.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import gevent
import zmq
from zmq.utils.monitor import recv_monitor_message

log = logging.getLogger("slabench")

_UP = {zmq.EVENT_CONNECTED, zmq.EVENT_HANDSHAKE_SUCCEEDED}
_DOWN = {zmq.EVENT_DISCONNECTED}
CHECK_INTERVAL_S = 0.25


class MasterWatch:
    """Per worker process: calls `on_lost(seconds_down)` once, when the master connection has been down for
    `timeout` seconds."""

    def __init__(self, runner: Any, timeout: float, on_lost: Callable[[float], None]) -> None:
        self.runner = runner
        self.timeout = timeout
        self.on_lost = on_lost
        self.down_since: float | None = None
        self.fired = False
        self._client: Any = None
        self._monitor: gevent.Greenlet | None = None
        self._loop = gevent.spawn(self._run)

    def _attach(self) -> None:
        """Watch the runner's current socket (Locust replaces it when it resets the connection)."""
        client = self.runner.client
        if client is self._client:
            return
        if self._monitor is not None:
            self._monitor.kill(block=False)
        self._client = client
        self._monitor = gevent.spawn(self._events, client.socket.get_monitor_socket())

    def _events(self, monitor: Any) -> None:
        try:
            while True:
                event = recv_monitor_message(monitor)["event"]
                if event in _DOWN and self.down_since is None:
                    self.down_since = time.monotonic()
                elif event in _UP:
                    self.down_since = None
        except zmq.ZMQError:
            return  # the socket was closed (the worker is quitting, or Locust replaced it)
        finally:
            monitor.close(linger=0)

    def _run(self) -> None:
        while not self.fired:
            self._attach()
            gevent.sleep(CHECK_INTERVAL_S)
            if self.down_since is not None and time.monotonic() - self.down_since >= self.timeout:
                self.fired = True
                self.on_lost(time.monotonic() - self.down_since)

    def stop(self) -> None:
        for g in (self._loop, self._monitor):
            if g is not None:
                g.kill(block=False)
