"""`LLMUser`: the base class of users that call an OpenAI-compatible endpoint. It builds each request's body for
the chosen API (--endpoint), sends it with the streaming client and hands its record to the process's record hub
(`slabench.locust.hub`) exactly once; after a failure in closed loop it backs off (`slabench.locust.backoff`)."""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import gevent
from locust import User, constant

from slabench.core.client import StreamingClient, chat_body, completions_body, responses_body
from slabench.core.protocols import prompt_of
from slabench.core.record import Outcome, RequestRecord
from slabench.locust.backoff import FIRST_S, MAX_S, Backoff
from slabench.locust.hub import hub_of
from slabench.locust.openloop import OpenLoopItem, current_item


def salted(
    messages: list[dict[str, Any]] | None, prompt: str | None, salt: str
) -> tuple[list[dict[str, Any]] | None, str | None]:
    """The request with `[salt] ` before its first words (the first message, or the prompt): copies, never the
    prompt source's own objects, which other requests reuse."""
    tag = f"[{salt}] "
    if messages is None:
        return None, tag + (prompt or "")
    if not messages:
        return messages, prompt
    first = dict(messages[0])
    content = first.get("content")
    if isinstance(content, list):  # content parts
        first["content"] = [{"type": "text", "text": tag}, *content]
    else:
        first["content"] = tag + str(content or "")
    return [first, *messages[1:]], prompt


class LLMUser(User):
    """Base class for users that call an OpenAI-compatible endpoint. Subclasses build requests and call `request`."""

    abstract = True
    wait_time = constant(0)
    first_backoff_s = FIRST_S  # closed loop, after a failure: 0.25–0.5 s, then twice that per failure in a row
    max_backoff_s = MAX_S  # the longest wait, Retry-After included (slabench.locust.backoff)

    @classmethod
    def check_items(cls, items: Sequence[OpenLoopItem]) -> None:
        """Open loop, when the shape has planned its items and before any load: raise UserError for items this user
        cannot send (a subclass's rules; every item is fine here)."""

    def on_start(self) -> None:
        assert self.host is not None  # --host, the user class's own, or the embedded simulator's (set at init)
        self.base_url: str = self.host
        self.hub = hub_of(self.environment)
        self.llm = StreamingClient(self.hub.target(self.base_url))
        self.user_id = self.hub.next_user_id()
        self.rng = random.Random(f"{self.hub.run.run_id}/{self.user_id}")
        self.backoff = Backoff(
            random.Random(f"{self.hub.run.run_id}/{self.user_id}/backoff"), self.first_backoff_s, self.max_backoff_s
        )

    def on_stop(self) -> None:
        self.llm.close()

    @property
    def model(self) -> str:
        return self.hub.model(self.base_url)

    def body(
        self,
        messages: list[dict[str, Any]] | None = None,
        prompt: str | None = None,
        max_tokens: int | None = None,
        **params: Any,
    ) -> dict[str, Any]:
        o = self.hub.opts
        if o.prompt_salt:
            messages, prompt = salted(messages, prompt, o.prompt_salt)
        if o.ignore_eos:
            params["ignore_eos"] = True
        if messages is not None and o.endpoint == "responses":  # no stream_options: usage always ends the stream
            return responses_body(self.model, messages, max_tokens or o.max_tokens, **params)
        if messages is not None and o.endpoint == "completions":
            prompt = prompt_of(messages)
            messages = None
        params.setdefault("max_tokens", max_tokens or o.max_tokens)
        params["stream_options"] = {
            "include_usage": True,
            **({"continuous_usage_stats": True} if o.per_chunk_usage == "on" else {}),
        }
        if messages is not None:
            return chat_body(self.model, messages, **params)
        return completions_body(self.model, prompt or "", **params)

    def request(
        self,
        body: dict[str, Any],
        grade: Callable[[str], dict[str, Any]] | None = None,
        headers: dict[str, str] | None = None,
        **meta: Any,
    ) -> RequestRecord:
        """Send one request and emit its record (exactly once, even if the user is stopped mid-stream).
        `grade(text) -> dict` adds quality fields to the record."""
        endpoint = "responses" if "input" in body else "chat" if "messages" in body else "completions"
        meta_ = self.hub.meta(self.user_id, request_id=uuid.uuid4().hex, **meta)
        token = self.hub.begin(meta_)
        try:
            reply = self.llm.send(endpoint, body, meta_, on_cancel=self.hub.emit, headers=headers)
            record = reply.record
            backoff = self.backoff_after(record)
            if backoff is not None:
                record = record.replace(backoff=backoff)
            try:
                if grade is not None and record.outcome is not Outcome.ERROR:
                    record = record.replace(**grade(reply.text))
            finally:  # a grader that fails still leaves the request's record (ungraded)
                self.hub.emit(record)
        finally:
            self.hub.end(token)
        if backoff:
            gevent.sleep(backoff)
        return record

    def backoff_after(self, record: RequestRecord) -> float | None:
        """Closed loop: how long to wait after a failed request before the next one (bounded exponential backoff
        with jitter, Retry-After as its floor: `slabench.locust.backoff`), or None. Open loop: None — the schedule
        decides when requests go, and a failure is only recorded."""
        wait = self.backoff.after(record)
        return None if current_item() is not None else wait
