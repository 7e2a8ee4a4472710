"""A test locustfile for the open-loop shapes: the retail grading queue's calls as prompts, built ahead of their due
time through `prepare_item` — the way a QA-grading user plugs into the burst replay."""

from __future__ import annotations

import time
from typing import Any

from locust import task

from slabench.locust.openloop import OpenLoopItem, current_item, current_prepared, item_meta
from slabench.locust.plugin import LLMUser, install

install()


class PreparedQueueUser(LLMUser):
    @classmethod
    def prepare_item(cls, item: OpenLoopItem, environment: Any) -> dict:
        from slabench.workload import build_item, build_messages

        call = build_item(item)
        return {"messages": build_messages(call, "terse"), "at": time.perf_counter()}

    @task
    def grade(self) -> None:
        item, prepared = current_item(), current_prepared()
        if item is None or prepared is None:
            raise RuntimeError("this test user only runs under an open-loop shape with prepare_item")
        ahead = item_meta()["scheduled"] - prepared["at"]
        # the account field carries what the test checks: the payload was built well before the due time
        self.request(self.body(messages=prepared["messages"]), account=f"{item.account}:{ahead >= 0.5}")
