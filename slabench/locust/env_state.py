"""slabench's state on Locust's `Environment`, typed: Locust's parsed command line, and the process's record hub
(`slabench.locust.plugin.RecordHub`, set on the environment at init). Locust declares neither as always there: the
options are None in an Environment built without a command line, and the hub is an attribute of slabench's own."""

from __future__ import annotations

from argparse import Namespace
from collections.abc import Callable
from typing import Protocol

from locust.env import Environment

from slabench.evidence.run_status import RunStatus
from slabench.locust.record_store import RecordStore

HUB = "slabench"  # environment.slabench: the hub


class Hub(Protocol):
    """What the parts riding on a run (grading against --sla) read of the record hub; the plugin, which imports
    them, holds the hub itself."""

    store: RecordStore
    run_ended: list[Callable[[], None]]
    stop_reason: str | None
    status: RunStatus | None


def options(environment: Environment) -> Namespace:
    """The parsed command line; every slabench hook runs in a Locust started with one (the locust command, or a test
    that passes `parsed_options`)."""
    opts: Namespace | None = environment.parsed_options
    if opts is None:
        raise RuntimeError("slabench runs under Locust's command line: the environment has no parsed_options")
    return opts


def hub_of(environment: Environment) -> Hub:
    """The process's record hub (set by the plugin's init listener, before any other slabench hook runs)."""
    hub: Hub = getattr(environment, HUB)
    return hub


def set_hub(environment: Environment, hub: Hub) -> None:
    setattr(environment, HUB, hub)
