"""Ctrl+C and quitting: the interrupt reaches Locust's main greenlet from the event loop, and a quit mid-run stops
the run in order first, so no request in flight loses its record."""

from __future__ import annotations

import signal
import sys
from pathlib import Path
from typing import Any

import gevent
from locust.env import Environment
from locust.runners import STATE_RUNNING, STATE_SPAWNING, WorkerRunner

from slabench.locust.hub import ACK_WAIT_S, find_hub

_sigint_watcher: Any = None  # one per process (tests may create several environments)


def _is_locust_command() -> bool:
    """This process is the `locust` command (console script or `python -m locust`), not e.g. pytest hosting Locust
    objects: the SIGINT handler is for the command's whole life only."""
    argv0 = Path(sys.argv[0])
    return argv0.name == "locust" or argv0.parent.name == "locust"


def _interrupt_from_event_loop() -> None:
    """KeyboardInterrupt in the main greenlet, thrown from the event loop (gevent's own route, minus the traceback
    it would print for an exception raised in a handler)."""
    gevent.get_hub().handle_system_error(KeyboardInterrupt, KeyboardInterrupt())


def handle_interrupts() -> None:
    """Python raises KeyboardInterrupt in whichever greenlet runs when SIGINT arrives: inside a user between sending
    a request and recording it, the record would be lost. Handled by the event loop, Ctrl+C reaches Locust's main
    greenlet (which stops the run in order) while every user is parked at a yield."""
    global _sigint_watcher
    if _sigint_watcher is None and _is_locust_command():
        _sigint_watcher = gevent.signal_handler(signal.SIGINT, _interrupt_from_event_loop)


def stop_run_before_quitting(environment: Environment, **_: Any) -> None:
    """On a quit mid-run (Ctrl+C reaches every process of a terminal's process group), stop the run before Locust's
    own quitting: users' requests become cancelled records, and a worker ships its last batch before it tells the
    master it is leaving (else the master stops listening to it and those records are lost). Register it after the
    runner's own quitting listener: Locust fires `quitting` in reverse, so this runs first."""
    runner = environment.runner
    if isinstance(runner, WorkerRunner):
        # When another worker leaves first, the master hands its users to the ones still there: a worker that is
        # quitting must not start them (their requests would come after its final batch, and have no record).
        runner.start_worker = _start_no_users  # type: ignore[method-assign]
    if runner is not None and runner.state in (STATE_SPAWNING, STATE_RUNNING):
        runner.stop()
    hub = find_hub(environment)
    if hub is not None and hub.shipper is not None:
        hub.shipper.wait_for_ack(ACK_WAIT_S)  # else the spool stays behind as a second copy of records the master has
    elif hub is not None and hub.run.open:
        # Locust quit in the middle of stopping the run (its stop was running in a greenlet that quitting kills,
        # e.g. after "the last worker went missing"): test_stop never fired. Finish the run: records, status, grade.
        environment.events.test_stop.fire(environment=environment)


def _start_no_users(*_: Any, **__: Any) -> None:
    """A quitting worker's answer to a spawn message."""


def stop_simulator(environment: Environment, **_: Any) -> None:
    hub = find_hub(environment)
    if hub is not None and hub.simulator is not None:
        hub.simulator.stop()
