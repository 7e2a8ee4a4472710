"""The wire formats the streaming client speaks: one small handler per protocol behind one transport.

The transport (`slabench.core.client`) owns the connection, the SSE loop, the head and stall deadlines and the record;
a `Protocol` owns what differs between APIs: the request path, the streaming body, how one SSE event is folded into
the stream's state (output times and counts, usage, finish reason, the end of the stream) and how an error event
reads. Chat and completions share their chunk folding; the Responses API has typed events and ends with
`response.completed` instead of `data: [DONE]`. A new protocol is one subclass here and one entry in `PROTOCOLS`.
"""

from __future__ import annotations

import json
import re
from typing import Any, ClassVar

import orjson

from slabench.core.record import ErrorCategory, Outcome
from slabench.core.sse import SSEEvent
from slabench.core.tokens import estimate_tokens

_BEARER = re.compile(r"(?i)\b(bearer)\s+[A-Za-z0-9._~+/=-]{8,}")


def redact(text: str, secret: str | None = None) -> str:
    """`text` without `secret` (the API key) and without any `Bearer <token>`: for every message a record keeps."""
    if secret and len(secret) >= 4:
        text = text.replace(secret, "[redacted]")
    return _BEARER.sub(r"\1 [redacted]", text)


def excerpt(text: str, secret: str | None, n: int = 120) -> str:
    """The start of `text` for a message: redacted before it is cut, so no part of a key survives."""
    return repr(redact(text, secret)[:n])


class Failure(Exception):
    """What ends a request other than success: the record's outcome, category, message and HTTP status."""

    def __init__(self, outcome: Outcome, category: ErrorCategory, message: str, status: int | None = None):
        super().__init__(message)
        self.outcome, self.category, self.status = outcome, category, status


class Shape(Exception):
    """A stream event that is JSON, but not shaped like the protocol's events."""


class Stream:
    """Mutable timings and counts of one request while it runs; frozen into a record at the end."""

    __slots__ = (
        "answer_first",
        "bad_usage",
        "cached",
        "chunk_times",
        "chunk_tokens",
        "completion_tokens",
        "done",
        "end",
        "finish_reason",
        "first_byte",
        "last_usage_completion",
        "prompt_tokens",
        "reasoning_chunks",
        "reasoning_tokens",
        "redirects",
        "request_id",
        "retry_after",
        "sent",
        "status",
        "stream_id",
        "text",
        "wall_sent",
    )

    def __init__(self, request_id: str) -> None:
        self.request_id = request_id
        self.sent: float | None = None
        self.first_byte: float | None = None
        self.wall_sent: float | None = None
        self.end: float | None = None
        self.status: int | None = None
        self.chunk_times: list[float] = []  # every output chunk: answer, reasoning or tool call
        self.chunk_tokens: list[int] | None = []
        self.answer_first: float | None = None  # the first chunk with visible answer text or a tool call
        self.reasoning_chunks = 0  # chunks that carried reasoning text
        self.reasoning_tokens: int | None = None  # as the server's usage says
        self.text: list[str] = []
        self.prompt_tokens: int | None = None
        self.completion_tokens: int | None = None
        self.cached: int | None = None
        self.last_usage_completion = 0
        self.finish_reason: str | None = None
        self.done = False
        self.redirects = 0
        self.retry_after: float | None = None
        self.stream_id: str | None = None  # the id the answer gives itself ("" when it has none)
        self.bad_usage: str | None = None  # why the server's usage is not believed


def loads(data: str) -> Any:
    """JSON of a stream event: orjson (a third of the stdlib's time, and this runs for every event), with the stdlib
    deciding what orjson refuses but Python's json reads (NaN, Infinity, lone surrogates), so what is accepted does
    not depend on the parser. One difference stays: orjson reads an integer past 64 bits as a float, so such a
    token count is refused (`count`) where it would have been believed."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return json.loads(data)


def count(value: Any, name: str, s: Stream) -> int | None:
    """A usage count, or None (and the stream's `bad_usage` says why) for one that is not a token count."""
    if type(value) is int and 0 <= value < 1 << 63:  # a count a records file (int64) can hold
        return value
    if s.bad_usage is None:
        shown = repr(value) if type(value) is not str else repr(value[:20])
        s.bad_usage = f"usage.{name} is {shown[:40]}, not a token count"
    return None


def error_text(obj: Any) -> str:
    """The human part of an OpenAI/vLLM/FastAPI error body."""
    if isinstance(obj, dict):
        err = obj.get("error", obj)
        if isinstance(err, dict):
            for key in ("message", "detail", "msg"):
                if err.get(key):
                    return str(err[key])
        elif err:
            return str(err)
        if obj.get("detail"):
            return str(obj["detail"])
    return json.dumps(obj)[:200]


def _details(usage: dict[str, Any], key: str, name: str, s: Stream) -> int | None:
    """`usage[key][name]` as a count, or None when the server does not say."""
    details = usage.get(key)
    if details is None:
        return None
    if type(details) is not dict:
        raise Shape(f"{key} is not an object")
    value = details.get(name)
    return None if value is None else count(value, name, s)


def _event_json(ev: SSEEvent, secret: str | None) -> dict[str, Any]:
    """A data event's JSON object, or the Failure that says why it is not one (an `event: error` whose data is no
    JSON object is the server's error all the same)."""
    data = ev.data
    try:
        obj = loads(data)
    except (ValueError, RecursionError):
        obj = None
        category, why = ErrorCategory.BAD_JSON, "invalid JSON in a stream event"
    else:
        if type(obj) is dict:
            return obj
        category, why = ErrorCategory.NOT_OPENAI, "stream event is not a JSON object"
    if ev.event == "error":
        category, why = ErrorCategory.STREAM_ERROR, "error event mid-stream"
    raise Failure(Outcome.ERROR, category, f"{why}: {excerpt(data, secret)}")


class Protocol:
    """One wire format. `fold` runs for every event of every stream: keep it lean."""

    name: ClassVar[str]  # the record's `endpoint`, and `--endpoint`'s value
    path: ClassVar[str]  # under the server's root
    end: ClassVar[str]  # what ends a stream, as messages name it
    limit_key: ClassVar[str] = "max_tokens"  # the body's cap on output tokens

    def stream_body(self, body: dict[str, Any]) -> dict[str, Any]:
        """The body as sent: streaming on."""
        return {**body, "stream": True}

    def fold(self, ev: SSEEvent, s: Stream, secret: str | None) -> bool:
        """Fold one event into `s`; True when it ends the stream. Raises Failure for an error or a malformed event."""
        raise NotImplementedError

    def prompt_estimate(self, body: dict[str, Any]) -> int:
        """The prompt's tokens estimated from the request, for a record whose server did not say."""
        raise NotImplementedError

    def max_tokens(self, body: dict[str, Any]) -> Any:
        return body.get(self.limit_key)


class _Chunks(Protocol):
    """OpenAI chat and completions: `data:` chunks with `choices` and `usage`, ended by `data: [DONE]`."""

    end = "[DONE]"

    def stream_body(self, body: dict[str, Any]) -> dict[str, Any]:
        body = {**body, "stream": True}
        body.setdefault("stream_options", {"include_usage": True})
        return body

    def fold(self, ev: SSEEvent, s: Stream, secret: str | None) -> bool:
        data = ev.data
        if data == "[DONE]":
            return True
        if ev.event == "error":
            raise Failure(Outcome.ERROR, ErrorCategory.STREAM_ERROR, f"error event mid-stream: {excerpt(data, secret)}")
        try:
            obj = loads(data)
        except (ValueError, RecursionError):
            if data.startswith("[DONE]"):  # `[DONE] `: the end, as the OpenAI SDK reads it
                return True
            raise Failure(
                Outcome.ERROR, ErrorCategory.BAD_JSON, f"invalid JSON in a stream event: {excerpt(data, secret)}"
            ) from None
        if type(obj) is not dict:
            raise Failure(
                Outcome.ERROR, ErrorCategory.NOT_OPENAI, f"stream event is not a JSON object: {excerpt(data, secret)}"
            )
        if s.stream_id is None:  # the first event: its id may name the request it answers
            sid = obj.get("id")
            s.stream_id = sid if type(sid) is str else ""
        if obj.get("error"):
            raise Failure(
                Outcome.ERROR,
                ErrorCategory.STREAM_ERROR,
                f"error event mid-stream: {redact(error_text(obj), secret)}",
            )
        try:
            apply_chunk(obj, ev.time, s)
        except Shape as e:
            raise Failure(
                Outcome.ERROR,
                ErrorCategory.NOT_OPENAI,
                f"stream event is not an OpenAI chunk ({e}): {excerpt(data, secret)}",
            ) from None
        return False


class Chat(_Chunks):
    name = "chat"
    path = "/v1/chat/completions"

    def prompt_estimate(self, body: dict[str, Any]) -> int:
        return sum(estimate_tokens(str(m.get("content", ""))) for m in body.get("messages") or ())


class Completions(_Chunks):
    name = "completions"
    path = "/v1/completions"

    def prompt_estimate(self, body: dict[str, Any]) -> int:
        return estimate_tokens(str(body.get("prompt", "")))


def apply_chunk(obj: dict[str, Any], now: float, s: Stream) -> None:
    """Fold one chat or completions chunk into the stream's state; raises Shape for anything not shaped like an
    OpenAI chunk (checked with `type() is`, the cheapest test, since this runs for every chunk). Reasoning comes as
    `reasoning_content` (vLLM, DeepSeek) or `reasoning` (vLLM's newer name, OpenRouter, Ollama)."""
    choices = obj.get("choices")
    output_here = answer_here = reasoning_here = False
    if choices is not None:
        if type(choices) is not list:
            raise Shape("choices is not a list")
        for choice in choices:
            if type(choice) is not dict:
                raise Shape("a choice is not an object")
            delta = choice.get("delta")
            if delta is not None:  # chat
                if type(delta) is not dict:
                    raise Shape("delta is not an object")
                piece = delta.get("content")
                reasoning = delta.get("reasoning_content") or delta.get("reasoning")
                tools = delta.get("tool_calls")
                if tools:  # a tool call's name or arguments: output, timed and counted like content
                    if type(tools) is not list:
                        raise Shape("tool_calls is not a list")
                    answer_here = True
            else:  # completions
                piece, reasoning = choice.get("text"), None
            if piece is not None:
                if type(piece) is not str:
                    raise Shape("content is not a string")
                if piece:
                    answer_here = True
                    s.text.append(piece)
            if reasoning:
                if type(reasoning) is not str:
                    raise Shape("reasoning_content is not a string")
                reasoning_here = True
            finish = choice.get("finish_reason")
            if finish:
                if type(finish) is not str:
                    raise Shape("finish_reason is not a string")
                s.finish_reason = finish
        output_here = answer_here or reasoning_here
        if output_here:
            s.chunk_times.append(now)
            if answer_here and s.answer_first is None:
                s.answer_first = now
            if reasoning_here:
                s.reasoning_chunks += 1
    usage = obj.get("usage")
    if usage is None:
        if output_here:
            s.chunk_tokens = None  # this server does not say how many tokens each chunk carries
        return
    if type(usage) is not dict:
        raise Shape("usage is not an object")
    prompt = usage.get("prompt_tokens")
    if prompt is not None:
        s.prompt_tokens = count(prompt, "prompt_tokens", s)
    cached = _details(usage, "prompt_tokens_details", "cached_tokens", s)
    if cached is not None:
        s.cached = cached
    reasoning_tokens = _details(usage, "completion_tokens_details", "reasoning_tokens", s)
    if reasoning_tokens is not None:
        s.reasoning_tokens = reasoning_tokens
    completion = usage.get("completion_tokens")
    if completion is not None and (completion := count(completion, "completion_tokens", s)) is not None:
        if output_here and s.chunk_tokens is not None:
            # a running count that goes down says nothing per chunk (and a negative count is no record's)
            step = completion - s.last_usage_completion
            if step >= 0:
                s.chunk_tokens.append(step)
            else:
                s.chunk_tokens = None
        s.last_usage_completion = completion
        s.completion_tokens = completion
    elif output_here:
        s.chunk_tokens = None


_REASONING_DELTAS = frozenset(("response.reasoning_text.delta", "response.reasoning_summary_text.delta"))
_ENDS = frozenset(("response.completed", "response.incomplete"))


class Responses(Protocol):
    """The OpenAI Responses API: typed events (`event: <type>`, and the same `type` in the JSON data), the answer as
    `response.output_text.delta`, reasoning as `response.reasoning_text.delta` or its summary's deltas, the end as
    `response.completed` (or `response.incomplete`, cut short by a cap) carrying the whole response and its usage;
    `response.failed` and `error` events are the server's errors. No per-chunk token counts."""

    name = "responses"
    path = "/v1/responses"
    end = "response.completed"
    limit_key = "max_output_tokens"

    def fold(self, ev: SSEEvent, s: Stream, secret: str | None) -> bool:
        obj = _event_json(ev, secret)
        kind = obj.get("type")
        if kind == "response.output_text.delta" or kind in _REASONING_DELTAS:
            delta = obj.get("delta")
            if type(delta) is not str:
                raise self._shape(f"{kind} has no string delta", ev.data, secret)
            if delta:
                s.chunk_times.append(ev.time)
                if kind == "response.output_text.delta":
                    s.text.append(delta)
                    if s.answer_first is None:
                        s.answer_first = ev.time
                else:
                    s.reasoning_chunks += 1
            return False
        if type(kind) is not str:
            if ev.event == "error":
                raise Failure(
                    Outcome.ERROR, ErrorCategory.STREAM_ERROR, f"error event mid-stream: {excerpt(ev.data, secret)}"
                )
            raise self._shape("an event without a type", ev.data, secret)
        if kind == "response.created":
            if s.stream_id is None:
                rid = obj.get("response", {}).get("id") if type(obj.get("response")) is dict else None
                s.stream_id = rid if type(rid) is str else ""
        elif kind in _ENDS:
            self._finish(obj, kind, s, ev.data, secret)
            return True
        elif kind == "response.failed" or kind == "error" or ev.event == "error":
            raise Failure(
                Outcome.ERROR,
                ErrorCategory.STREAM_ERROR,
                f"{kind} event mid-stream: {redact(_response_error(obj), secret)[:200]}",
            )
        elif kind == "response.function_call_arguments.delta":  # a tool call: output, like chat's tool_calls
            s.chunk_times.append(ev.time)
            if s.answer_first is None:
                s.answer_first = ev.time
        if s.stream_id is None:
            s.stream_id = ""
        return False

    def _finish(self, obj: dict[str, Any], kind: str, s: Stream, data: str, secret: str | None) -> None:
        """The last event: the response's status as the finish reason, and its usage."""
        response = obj.get("response")
        if type(response) is not dict:
            raise self._shape(f"{kind} carries no response object", data, secret)
        s.chunk_tokens = None  # the stream never says how many tokens each delta holds
        if kind == "response.incomplete":
            details = response.get("incomplete_details")
            reason = details.get("reason") if type(details) is dict else None
            s.finish_reason = "length" if reason == "max_output_tokens" else str(reason or "incomplete")
        else:
            s.finish_reason = "stop"
        usage = response.get("usage")
        if usage is None:
            return
        try:
            if type(usage) is not dict:
                raise Shape("usage is not an object")
            prompt, completion = usage.get("input_tokens"), usage.get("output_tokens")
            if prompt is not None:
                s.prompt_tokens = count(prompt, "input_tokens", s)
            s.cached = _details(usage, "input_tokens_details", "cached_tokens", s)
            s.reasoning_tokens = _details(usage, "output_tokens_details", "reasoning_tokens", s)
            if completion is not None:
                s.completion_tokens = count(completion, "output_tokens", s)
        except Shape as e:
            raise self._shape(str(e), data, secret) from None

    def _shape(self, why: str, data: str, secret: str | None) -> Failure:
        return Failure(
            Outcome.ERROR,
            ErrorCategory.NOT_OPENAI,
            f"stream event is not a Responses API event ({why}): {excerpt(data, secret)}",
        )

    def prompt_estimate(self, body: dict[str, Any]) -> int:
        given = body.get("input")
        texts = [str(body.get("instructions") or "")]
        if isinstance(given, list):
            texts += [str(m.get("content", "")) if isinstance(m, dict) else str(m) for m in given]
        else:
            texts.append(str(given or ""))
        return sum(estimate_tokens(t) for t in texts if t)


def _response_error(obj: dict[str, Any]) -> str:
    """What a `response.failed` (its response's `error`) or an `error` event (its own fields) says."""
    response = obj.get("response")
    if type(response) is dict and response.get("error"):
        return error_text(response)
    if obj.get("message"):
        code = obj.get("code")
        return f"{obj['message']}" + (f" ({code})" if code else "")
    return error_text(obj)


PROTOCOLS: dict[str, Protocol] = {p.name: p for p in (Chat(), Completions(), Responses())}


def prompt_of(messages: list[dict[str, Any]]) -> str:
    """A chat conversation as one completions prompt: the messages' text, in order, a blank line apart (no chat
    template: the server counts these tokens only)."""
    texts = []
    for m in messages:
        content = m.get("content") or ""
        if isinstance(content, list):  # content parts: their text
            content = "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        texts.append(str(content))
    return "\n\n".join(texts)


def responses_body(model: str, messages: list[dict[str, Any]], max_output_tokens: int, **params: Any) -> dict[str, Any]:
    """A Responses request for a chat conversation: a leading system message becomes `instructions`, the rest the
    `input` (one user turn as a plain string)."""
    instructions = None
    if messages and messages[0].get("role") == "system":
        instructions, messages = str(messages[0].get("content", "")), messages[1:]
    given: str | list[dict[str, Any]] = messages
    if len(messages) == 1 and messages[0].get("role") == "user" and isinstance(messages[0].get("content"), str):
        given = messages[0]["content"]
    body: dict[str, Any] = {"model": model, "input": given, "max_output_tokens": max_output_tokens, **params}
    if instructions is not None:
        body["instructions"] = instructions
    return body
