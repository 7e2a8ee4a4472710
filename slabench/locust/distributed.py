"""Distributed-mode defaults that keep runs on one machine apart, and a bound on waiting for workers.

- Ports: ``--processes N`` without ``--master-bind-port`` binds the master to a free port (not Locust's 5557, which
  another run on the machine may hold) and the forked workers connect to it; ``--master-bind-port P`` without
  ``--master-port`` makes the forked workers use P. Explicit ports, and plain ``--master`` / ``--worker``, keep
  Locust's defaults (5557).
- Joining: a headless master that has fewer workers than it expects (``--expect-workers``, or N with
  ``--processes``) after ``--worker-join-timeout`` seconds says so in one line and exits 4 (nothing was measured).
"""

from __future__ import annotations

import contextlib
import logging
import signal
import socket
import time
from typing import Any, NoReturn

import gevent
import locust.runners
import psutil
from locust.runners import STATE_INIT, MasterRunner

from slabench.core.errors import ExitCode, UserError

log = logging.getLogger("slabench")
LOCUST_DEFAULT_PORT = 5557


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
        return port


def resolve_ports(opts: Any) -> None:
    """Fill in `master_bind_port` / `master_port` left unset (None) on the command line; see the module doc."""
    forking_master = bool(getattr(opts, "processes", None)) and not getattr(opts, "worker", False)
    if getattr(opts, "master_bind_port", LOCUST_DEFAULT_PORT) is None:
        opts.master_bind_port = free_port() if forking_master else LOCUST_DEFAULT_PORT
    if getattr(opts, "master_port", LOCUST_DEFAULT_PORT) is None:
        opts.master_port = opts.master_bind_port if forking_master else LOCUST_DEFAULT_PORT


def install_port_defaults(parser: Any) -> None:
    """Make the two port options tell "not given" apart from 5557, and resolve them right after parsing (before
    Locust forks the workers, which connect to `master_port`)."""
    parser.set_defaults(master_port=None, master_bind_port=None)
    parse_args = parser.parse_args

    def parse_and_resolve(*args: Any, **kwargs: Any) -> Any:
        opts = parse_args(*args, **kwargs)
        resolve_ports(opts)
        return opts

    parser.parse_args = parse_and_resolve


def watch_worker_join(environment: Any, timeout: float) -> None:
    """Headless master: exit 4 with one line if the expected workers have not joined within `timeout` seconds."""
    opts = environment.parsed_options
    runner = environment.runner
    if not isinstance(runner, MasterRunner) or opts is None or not opts.headless or timeout <= 0:
        return

    def watch() -> None:
        expected = opts.expect_workers
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if runner.state != STATE_INIT or len(runner.clients.ready) >= expected:
                return
            gevent.sleep(0.5)
        joined = len(runner.clients.ready)
        log.error(
            "slabench: %d of %d worker(s) joined the master on port %s within %g s (--worker-join-timeout): check "
            "that the workers start and reach it (--master-host/--master-port on each worker); exit %d",
            joined,
            expected,
            opts.master_bind_port,
            timeout,
            ExitCode.INCOMPLETE,
        )
        environment.process_exit_code = ExitCode.INCOMPLETE
        # Locust's main greenlet is still waiting for workers: end it there (as a Ctrl+C would, without the noise)
        gevent.get_hub().handle_system_error(SystemExit, SystemExit(int(ExitCode.INCOMPLETE)))

    gevent.spawn(watch)


def fail_at_start(environment: Any, error: UserError) -> NoReturn:
    """Bad input found while Locust starts (init, before any load): one line, the forked workers stopped, exit 3."""
    log.error("slabench: %s", error)
    stop_forked_workers(environment)
    raise SystemExit(error.exit_code)


def stop_forked_workers(environment: Any) -> None:
    """With --processes, Locust has already forked the workers when init runs, and does not stop them when the
    master exits early (they would wait for it): terminate them. They are this process's children running the same
    command line (the embedded simulator is a child too, with another command line)."""
    if not getattr(environment.parsed_options, "processes", None):
        return
    me = psutil.Process()
    argv = me.cmdline()
    for child in me.children():
        with contextlib.suppress(psutil.Error):
            if child.cmdline() == argv:
                child.send_signal(signal.SIGTERM)


def set_missing_after(seconds: float) -> None:
    """Locust's master counts down a worker's liveness once a second from HEARTBEAT_LIVENESS and marks it missing
    below zero (after ~LIVENESS + 1 s without a heartbeat). Locust has no option for it; the module value is read
    each time a worker joins or sends a heartbeat."""
    locust.runners.HEARTBEAT_LIVENESS = max(1, round(seconds) - 1)
