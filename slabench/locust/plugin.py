"""The Locust bridge's entry point: `install()` (called by each locustfile) registers slabench on Locust's event hooks
once, and at init gives each process its record hub (`slabench.locust.hub`), checks the options before any load
(`slabench.locust.options`) and, without --host, starts the embedded simulator. The parts, each a module of its own:
the hub's wiring, the user base class (`slabench.locust.user.LLMUser`, re-exported here for locustfiles), grading
against --sla, the server's /metrics scrape, the web UI's LLM tab and the quitting order (`slabench.locust.quitting`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import gevent
from locust import events
from locust.env import Environment
from locust.runners import WorkerRunner

from slabench import webui
from slabench.core.api_key import api_key_from_env
from slabench.core.client import parse_base_url
from slabench.core.errors import UserError
from slabench.core.sinks import check_records_path
from slabench.locust import heap
from slabench.locust import scrape as locust_scrape
from slabench.locust import sla as locust_sla
from slabench.locust.distributed import fail_at_start, set_missing_after, watch_worker_join
from slabench.locust.hooks import install_once
from slabench.locust.hub import RecordHub, attach, find_hub
from slabench.locust.options import add_options, cap_run_time, check_options, options
from slabench.locust.quitting import handle_interrupts, stop_run_before_quitting, stop_simulator
from slabench.locust.spawn_messages import compute_default_options_once
from slabench.locust.user import LLMUser
from slabench.sim.cli import sim_args_to_argv
from slabench.sim.embedded import EmbeddedSimulator

__all__ = ["LLMUser", "install", "refresh_loop_clock"]  # LLMUser: what locustfiles import from here

log = logging.getLogger("slabench")


def _on_init(environment: Environment, runner: Any, **_: Any) -> None:
    if runner is None:
        return
    handle_interrupts()
    environment.events.quitting.add_listener(stop_run_before_quitting)  # after the runner's own: runs first
    hub = RecordHub(environment)
    attach(environment, hub)
    opts = options(environment)
    if isinstance(runner, WorkerRunner):  # its own environment holds its key
        compute_default_options_once()  # before the first spawn message
        try:
            api_key_from_env(opts.api_key_env)
        except UserError as e:
            fail_at_start(environment, e)
        return
    try:  # every option and input file now, once, before any load (workers get the master's options)
        check_options(environment)
        check_records_path(opts.records, opts.run_id, opts.append)
        cap_run_time(environment)
    except UserError as e:
        fail_at_start(environment, e)
    watch_worker_join(environment, opts.worker_join_timeout)
    set_missing_after(opts.worker_missing_after)
    if environment.host:
        try:
            parse_base_url(environment.host)
        except UserError as e:
            fail_at_start(environment, e)
        return
    if any(getattr(u, "host", None) for u in environment.user_classes):
        return
    try:
        hub.simulator = EmbeddedSimulator(sim_args_to_argv(vars(opts), prefix="sim_"))
        environment.host = hub.simulator.url
    except UserError as e:
        fail_at_start(environment, e)
    log.info("slabench: no --host given; embedded simulator at %s", environment.host)


def install(hooks: Any = events) -> None:
    """Register slabench on Locust's event hooks (idempotent: several locustfiles may call it)."""
    if not install_once(hooks, "plugin", add_options, _on_init):
        return
    hooks.test_start.add_listener(_on_test_start)
    hooks.test_stopping.add_listener(lambda environment, **_: _each_hub(environment, RecordHub.on_test_stopping))
    hooks.test_stop.add_listener(lambda environment, **_: _each_hub(environment, RecordHub.on_test_stop))
    hooks.test_stop.add_listener(heap.settle)  # after the hub's: the run is over, its lateness no longer measured
    hooks.quitting.add_listener(stop_simulator)
    # The parts that ride on the hub, each in its own module: grading against --sla at the end, the server's
    # /metrics scraped beside the records, and the LLM tab in the web UI.
    locust_sla.install(hooks)
    locust_scrape.install(hooks)
    webui.install(hooks)
    hooks.init.add_listener(heap.settle)  # Locust's and the locustfile's start-up done, before any run
    hooks.init.add_listener(refresh_loop_clock)


def refresh_loop_clock(**_: Any) -> None:
    """The event loop's clock is read once per loop pass, and Locust's start-up (imports, parsing, init listeners)
    runs without one: the clock can be a second or more stale when Locust arms the ``-t`` timer right after init,
    so on a busy machine ``-t 1s`` ended a run before it sent anything. Refresh it as init ends."""
    gevent.get_hub().loop.update_now()


def _on_test_start(environment: Environment, **_: Any) -> None:
    hub = find_hub(environment)
    if hub is not None and not hub.is_worker:  # workers learn the run id from the master
        hub.start_run()


def _each_hub(environment: Environment, method: Callable[[RecordHub], None]) -> None:
    hub = find_hub(environment)
    if hub is not None:
        method(hub)
