"""A test locustfile whose users note, per request, what the process's garbage collector holds (objects frozen,
thresholds), and once more after the test stopped: one JSON line each in $SLABENCH_TEST_HEAP_LOG."""

from __future__ import annotations

import gc
import json
import os
from typing import Any

from locust import events, task

from slabench.locust.plugin import LLMUser, install

install()


def note(when: str) -> None:
    with open(os.environ["SLABENCH_TEST_HEAP_LOG"], "a") as f:
        f.write(json.dumps({"when": when, "frozen": gc.get_freeze_count(), "threshold": gc.get_threshold()}) + "\n")


@events.test_stop.add_listener  # after slabench's own listeners (install() registered them first)
def _after_stop(**_: Any) -> None:
    note("stopped")


class HeapUser(LLMUser):
    @task
    def chat(self) -> None:
        self.request(self.body(messages=[{"role": "user", "content": "hello"}], max_tokens=4))
        note("running")
