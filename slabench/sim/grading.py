"""The simulator's grading mode: a request that names its call (the OpenAI `user` field, set by the QA-grading
user as ``slabench:<task>:<item ref>``) gets a JSON grading answer whose items are right with a set probability, so
the whole quality path (parse → score → record → SLA floors) runs without a real model."""

from __future__ import annotations

import random
from typing import Any

from slabench.core.errors import UserError
from slabench.core.tokens import split_tokens

USER_TAG = "slabench"


def user_tag(task: str, ref: str) -> str:
    return f"{USER_TAG}:{task}:{ref}"


class GradingResponder:
    def __init__(self, accuracy: float, seed: int = 0) -> None:
        if not 0 <= accuracy <= 1:
            raise UserError(f"--grading-accuracy {accuracy}: must be between 0 and 1")
        self.accuracy = accuracy
        self._rng = random.Random(seed)

    def __call__(self, params: dict[str, Any], headers: dict[bytes, bytes]) -> list[str] | None:
        tag = params.get("user")
        if not isinstance(tag, str) or not tag.startswith(USER_TAG + ":"):
            return None
        _, task, ref = tag.split(":", 2)
        from slabench.workload import item_from_ref, simulated_answer  # only when grading is used

        try:
            item = item_from_ref(ref)
        except (UserError, KeyError, ValueError):
            return None  # not one of ours: answer with filler like any other request
        return split_tokens(simulated_answer(item, self.accuracy, self._rng, task))
