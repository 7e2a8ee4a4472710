"""Locustfile for the live tier: the project's users, each run for a fixed number of requests.

Locust 2.x has no request-count stop (`-i` belongs to locust-plugins), so `--request-count N` is added here: users
stop issuing after N requests in total, and the run quits once all N records were emitted, so no request is ever
cancelled mid-stream (every request yields a complete record; the server's counters cover exactly these requests).
Pick the user class by name on the command line (`FixedCountChatUser`, `FixedCountQAUser`).
"""

from __future__ import annotations

from typing import Any

import gevent
from locust import events

import locustfiles.chat_replay as chat_replay
import locustfiles.qa_grading as qa_grading
from slabench.locust import scrape as locust_scrape
from slabench.locust.hub import find_hub

locust_scrape.install()  # idempotent; a no-op once the plugin's install() does it


@events.init_command_line_parser.add_listener
def _options(parser: Any) -> None:
    parser.add_argument("--request-count", type=int, default=0, help="stop after this many requests (0: no limit)")


class _Budget:
    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.issued = 0


@events.test_start.add_listener
def _start(environment: Any, **_: Any) -> None:
    limit = environment.parsed_options.request_count
    environment.fixed_count = _Budget(limit)
    hub = find_hub(environment)
    if limit <= 0 or hub is None:
        return

    def watch() -> None:
        while hub.run.emitted < limit:
            gevent.sleep(0.05)
        environment.runner.quit()

    gevent.spawn(watch)


class FixedCountMixin:
    """Wraps LLMUser.request: once the budget is spent, the user idles until the runner quits."""

    def request(self, body: dict, grade: Any = None, headers: Any = None, **meta: Any) -> Any:
        budget: _Budget = self.environment.fixed_count
        if budget.limit > 0 and budget.issued >= budget.limit:
            gevent.sleep(3600)  # killed at quit; no request is in flight
        budget.issued += 1
        return super().request(body, grade=grade, headers=headers, **meta)


class FixedCountChatUser(FixedCountMixin, chat_replay.ChatReplayUser):
    pass


class FixedCountQAUser(FixedCountMixin, qa_grading.QAGradingUser):
    pass
