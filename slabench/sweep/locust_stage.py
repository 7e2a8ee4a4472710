"""A locustfile the sweep loads beside the workload's (``-f workload.py,<this file>``): it adds no users, only

- ``--stage-level`` / ``--stage-repeat``: stamped on every record (via the bridge's `stage_fn` hook, unless a load
  shape already set one), so a run's records say which (level, repeat) they belong to;
- ``--stop-after-requests N``: quit the run once N records have been written (a request-count run).

Warm-up is deliberately not stamped here: the aggregator leaves out each run's first `warmup_s` seconds, so the
warm-up can be changed afterwards (`slabench aggregate --warmup-s`) without re-running anything.
"""

from __future__ import annotations

from typing import Any

import gevent
from locust import events
from locust.env import Environment
from locust.runners import Runner, WorkerRunner

from slabench.core.record import StageUnit, stage_fields
from slabench.locust.hub import RecordHub, find_hub

POLL_S = 0.1


@events.init_command_line_parser.add_listener  # type: ignore[untyped-decorator]  # locust's EventHook is unannotated
def _options(parser: Any) -> None:
    g = parser.add_argument_group("slabench sweep")
    g.add_argument("--stage-level", type=int, default=-1, help="concurrency (users) stamped on every record")
    g.add_argument("--stage-repeat", type=int, default=-1, help="repeat number stamped on every record")
    g.add_argument("--stop-after-requests", type=int, default=0, help="quit after this many records (0: no limit)")


def _stage(environment: Environment) -> dict[str, Any]:
    o = environment.parsed_options
    if o is None:  # not started from a command line: no stage options to stamp
        return {}
    fields = stage_fields(
        o.stage_level if o.stage_level >= 0 else None,
        StageUnit.USERS,
        o.stage_repeat if o.stage_repeat >= 0 else None,
        None,
    )
    return {k: v for k, v in fields.items() if v is not None}


@events.init.add_listener  # type: ignore[untyped-decorator]  # locust's EventHook is unannotated
def _on_init(environment: Environment, **_: Any) -> None:
    hub = find_hub(environment)
    if hub is not None and hub.stage_fn is None:
        # Read the options at call time: workers receive the master's values only when the test starts.
        hub.stage_fn = lambda: _stage(environment)


def _watch(runner: Runner, hub: RecordHub, limit: int) -> None:
    while True:
        gevent.sleep(POLL_S)
        sink = hub.store.sink
        if sink is not None and sink.count >= limit:
            runner.quit()
            return


@events.test_start.add_listener  # type: ignore[untyped-decorator]  # locust's EventHook is unannotated
def _on_test_start(environment: Environment, **_: Any) -> None:
    opts, runner = environment.parsed_options, environment.runner
    limit = opts.stop_after_requests if opts is not None else 0
    hub = find_hub(environment)
    if limit > 0 and runner is not None and not isinstance(runner, WorkerRunner) and hub is not None:
        gevent.spawn(_watch, runner, hub, limit)
