"""A test locustfile whose workers count the spawn messages they handle and the times Locust builds its option
parser while handling them: one JSON line per worker as its test stops, in $SLABENCH_TEST_SPAWN_LOG."""

from __future__ import annotations

import json
import os
from typing import Any

from locust import argument_parser, events, task
from locust.runners import WorkerRunner

from slabench.locust.plugin import LLMUser, install

install()

counts = {"spawn_messages": 0, "parser_builds": 0}
handling_spawn = [False]
_setup_parser_arguments = argument_parser.setup_parser_arguments
_handle_message = WorkerRunner.handle_message


def _counted_setup(parser: Any) -> Any:
    counts["parser_builds"] += handling_spawn[0]
    return _setup_parser_arguments(parser)


def _counted_handle(self: WorkerRunner, msg: Any) -> Any:
    if msg.type != "spawn":
        return _handle_message(self, msg)
    counts["spawn_messages"] += 1
    handling_spawn[0] = True
    try:
        return _handle_message(self, msg)
    finally:
        handling_spawn[0] = False


argument_parser.setup_parser_arguments = _counted_setup
WorkerRunner.handle_message = _counted_handle


@events.test_stop.add_listener
def _note(environment: Any, **_: Any) -> None:
    if isinstance(environment.runner, WorkerRunner):
        with open(os.environ["SLABENCH_TEST_SPAWN_LOG"], "a") as f:
            f.write(json.dumps({"worker": environment.runner.client_id, **counts}) + "\n")


class ChatUser(LLMUser):
    @task
    def chat(self) -> None:
        self.request(self.body(messages=[{"role": "user", "content": "hello"}], max_tokens=8))
