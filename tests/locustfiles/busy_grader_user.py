"""A test locustfile whose users spend most of their time in Python code while a request is theirs (a slow
`grade`), so a Ctrl+C almost always arrives while some request is between being sent and being recorded."""

from __future__ import annotations

import os
import time

from locust import task

from slabench.locust.plugin import LLMUser, install

install()

BUSY_S = float(os.environ.get("SLABENCH_TEST_BUSY_S", "0.03"))


def slow_grade(text: str) -> dict:
    end = time.perf_counter() + BUSY_S
    while time.perf_counter() < end:  # pure-Python work: signals are handled between its bytecodes
        pass
    return {}


class BusyGraderUser(LLMUser):
    @task
    def chat(self) -> None:
        self.request(self.body(messages=[{"role": "user", "content": "hello"}], max_tokens=4), grade=slow_grade)
