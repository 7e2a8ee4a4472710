"""The one streaming client for OpenAI-compatible `/v1/chat/completions` and `/v1/completions`.

Built on geventhttpclient (what Locust's FastHttpUser uses) but reads the body with `readline`, which returns each
line the moment its newline arrives: `iter_content` would wait for ~1 KiB and merge events, corrupting TTFT and ITL.
Every SSE event is stamped with `perf_counter()` as it is parsed. Every outcome becomes a classified
`RequestRecord`; nothing but `GreenletExit` (a stopping user) leaves `send`, and even then the record is handed to
`on_cancel` first.
"""

from __future__ import annotations

import errno
import json
import socket
import ssl
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import gevent
from geventhttpclient import HTTPClient
from geventhttpclient.response import HTTPConnectionClosed, HTTPParseError

from slabench.errors import UserError
from slabench.record import ErrorCategory, Outcome, RequestRecord
from slabench.sse import SSEParser
from slabench.tokens import estimate_tokens

ENDPOINT_PATHS = {"chat": "/v1/chat/completions", "completions": "/v1/completions"}
_MAX_ERROR_BODY = 4096


@dataclass(frozen=True)
class Target:
    """Where requests go and how patient to be."""

    base_url: str
    api_key: str | None = field(default=None, repr=False)  # never printed
    verify_tls: bool = True
    connect_timeout: float = 10.0
    stall_timeout: float = 120.0  # no bytes at all for this long: first-byte timeout, then mid-stream stall
    request_timeout: float = 900.0  # whole request, first byte to [DONE]

    def __post_init__(self) -> None:
        parse_base_url(self.base_url)


def parse_base_url(url: str) -> tuple[str, str, int, str]:
    """(scheme, host, port, path prefix) of a server root like ``http://127.0.0.1:8000`` or ``https://x/v1``."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as e:
        raise UserError(f"--host {url!r}: {e}; expected a URL like http://127.0.0.1:8000") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UserError(f"--host {url!r}: expected an http:// or https:// URL like http://127.0.0.1:8000")
    prefix = parts.path.rstrip("/")
    if prefix.endswith("/v1"):  # accept both the server root and the OpenAI-style base URL
        prefix = prefix[: -len("/v1")]
    return parts.scheme, parts.hostname, port or (443 if parts.scheme == "https" else 80), prefix


@dataclass(frozen=True, slots=True)
class RecordMeta:
    """Identity and schedule of one request, copied onto its record."""

    run_id: str
    worker_id: str = "local"
    user_id: str = ""
    account: str | None = None
    item_id: str | None = None
    stage_level: int | None = None
    stage_repeat: int | None = None
    stage_phase: str | None = None
    scheduled: float | None = None
    request_id: str = ""  # set by the caller when it must name the request before it goes out (else a new one)


@dataclass(frozen=True, slots=True)
class Reply:
    record: RequestRecord
    text: str  # the generated content (reasoning excluded), for quality scoring


def chat_body(model: str, messages: list[dict], max_tokens: int, **params: Any) -> dict:
    return {"model": model, "messages": messages, "max_tokens": max_tokens, **params}


def completions_body(model: str, prompt: str, max_tokens: int, **params: Any) -> dict:
    return {"model": model, "prompt": prompt, "max_tokens": max_tokens, **params}


class _Failure(Exception):
    def __init__(self, outcome: Outcome, category: ErrorCategory, message: str, status: int | None = None):
        super().__init__(message)
        self.outcome, self.category, self.status = outcome, category, status


class _Stream:
    """Mutable timings and counts of one request while it runs; frozen into a record at the end."""

    __slots__ = (
        "cached",
        "chunk_times",
        "chunk_tokens",
        "completion_tokens",
        "done",
        "finish_reason",
        "first_byte",
        "last_usage_completion",
        "prompt_tokens",
        "sent",
        "status",
        "text",
        "wall_sent",
    )

    def __init__(self) -> None:
        self.sent = self.first_byte = self.wall_sent = None
        self.status: int | None = None
        self.chunk_times: list[float] = []
        self.chunk_tokens: list[int] | None = []
        self.text: list[str] = []
        self.prompt_tokens = self.completion_tokens = self.cached = None
        self.last_usage_completion = 0
        self.finish_reason: str | None = None
        self.done = False


class StreamingClient:
    """One keep-alive connection to the target; one request at a time (a Locust user owns one)."""

    def __init__(self, target: Target, clock: Callable[[], float] = time.perf_counter) -> None:
        self.target = target
        self._clock = clock
        scheme, self._host, self._port, self._prefix = parse_base_url(target.base_url)
        self._tls = scheme == "https"
        self._http: HTTPClient | None = None

    def _connection(self) -> HTTPClient:
        if self._http is None:
            t = self.target
            self._http = HTTPClient(
                self._host,
                self._port,
                ssl=self._tls,
                insecure=not t.verify_tls,
                connection_timeout=t.connect_timeout,
                network_timeout=t.stall_timeout,
                concurrency=1,
            )
        return self._http

    def close(self) -> None:
        if self._http is not None:
            self._http.close()
            self._http = None

    def headers(self, request_id: str) -> dict[str, str]:
        h = {"Content-Type": "application/json", "Accept": "text/event-stream", "X-Request-Id": request_id}
        if self.target.api_key:
            h["Authorization"] = f"Bearer {self.target.api_key}"
        return h

    def send(
        self,
        endpoint: str,
        body: dict,
        meta: RecordMeta,
        on_cancel: Callable[[RequestRecord], None] | None = None,
        headers: dict[str, str] | None = None,
    ) -> Reply:
        """Stream one request. Always returns a Reply with a classified record (GreenletExit aside)."""
        body = {**body, "stream": True}
        body.setdefault("stream_options", {"include_usage": True})
        request_id = meta.request_id or uuid.uuid4().hex
        payload = json.dumps(body).encode()
        s = _Stream()
        failure: _Failure | None = None
        limit = self.target.request_timeout
        try:
            with gevent.Timeout(limit, _Failure(Outcome.ERROR, ErrorCategory.TIMEOUT, f"request exceeded {limit:g} s")):
                self._stream(endpoint, payload, {**self.headers(request_id), **(headers or {})}, s)
        except _Failure as f:
            failure = f
            self.close()  # the connection is in an unknown state
        except gevent.GreenletExit:
            self.close()
            rec = self._record(
                s, meta, body, request_id, _Failure(Outcome.DROPPED, ErrorCategory.CANCELLED, "user stopped")
            )
            if on_cancel is not None:
                on_cancel(rec)
            raise
        return Reply(self._record(s, meta, body, request_id, failure), "".join(s.text))

    def _stream(self, endpoint: str, payload: bytes, headers: dict[str, str], s: _Stream) -> None:
        path = self._prefix + ENDPOINT_PATHS[endpoint]
        resp = self._request(path, payload, headers, s)
        s.first_byte = self._clock()
        s.status = resp.status_code
        if s.status >= 400:
            raise _http_error(s.status, resp.read(_MAX_ERROR_BODY), path)
        ctype = (resp.get("content-type") or "").split(";")[0].strip().lower()
        if ctype != "text/event-stream":
            raise _Failure(
                Outcome.ERROR,
                ErrorCategory.NOT_OPENAI,
                f"POST {path} answered {s.status} with {ctype or 'no content type'}, not text/event-stream "
                "(is this an OpenAI-compatible server with streaming?)",
                s.status,
            )
        parser = SSEParser()
        clock = self._clock
        try:
            while True:
                line = resp.readline(b"\n")
                if not line:
                    break
                for ev in parser.feed(line, clock()):
                    if ev.data == "[DONE]":
                        s.done = True
                        return self._finish(resp, s)
                    self._on_event(ev.data, ev.time, s)
        except TimeoutError:
            raise _Failure(
                Outcome.INCOMPLETE, ErrorCategory.STALL, f"no bytes for {self.target.stall_timeout:g} s mid-stream"
            ) from None
        except (OSError, HTTPParseError) as e:  # reset, or the parser's "Incomplete response" for a cut body
            raise _Failure(
                Outcome.INCOMPLETE, ErrorCategory.STREAM_CUT, f"stream cut before [DONE]: {_describe(e)}"
            ) from None
        raise _Failure(Outcome.INCOMPLETE, ErrorCategory.STREAM_CUT, "stream ended before [DONE]")

    def _request(self, path: str, payload: bytes, headers: dict[str, str], s: _Stream) -> Any:
        """Send the request; one retry when a reused keep-alive connection turns out closed by the server
        (uvicorn closes idle connections after 5 s) before any response byte: the server never saw the request."""
        for attempt in (0, 1):
            reused = self._http is not None
            s.wall_sent = time.time()
            s.sent = self._clock()
            try:
                return self._connection().request("POST", path, body=payload, headers=headers)
            except TimeoutError:
                raise _Failure(
                    Outcome.ERROR, ErrorCategory.TIMEOUT, f"no response within {self.target.stall_timeout:g} s"
                ) from None
            except (OSError, HTTPParseError, ssl.SSLError) as e:
                self.close()
                stale = isinstance(e, HTTPConnectionClosed | BrokenPipeError | ConnectionResetError)
                if not (reused and stale and attempt == 0):
                    raise _Failure(Outcome.ERROR, ErrorCategory.CONNECT, _describe(e, self.target.base_url)) from None
        raise AssertionError("unreachable")

    def _finish(self, resp: Any, s: _Stream) -> None:
        # Drain the terminating chunk so the connection can be reused.
        resp.read()
        if s.completion_tokens is None:
            raise _Failure(
                Outcome.INCOMPLETE,
                ErrorCategory.NO_USAGE,
                "stream finished without a usage chunk; token counts are estimates",
            )

    def _on_event(self, data: str, now: float, s: _Stream) -> None:
        try:
            obj = json.loads(data)
        except ValueError:
            raise _Failure(
                Outcome.ERROR, ErrorCategory.BAD_JSON, f"invalid JSON in a stream event: {data[:80]!r}"
            ) from None
        if not isinstance(obj, dict):
            raise _Failure(Outcome.ERROR, ErrorCategory.NOT_OPENAI, f"stream event is not a JSON object: {data[:80]!r}")
        if "error" in obj:
            raise _Failure(Outcome.ERROR, ErrorCategory.STREAM_ERROR, f"error event mid-stream: {_error_text(obj)}")
        usage = obj.get("usage")
        content_here = False
        for choice in obj.get("choices") or ():
            delta = choice.get("delta")
            if delta is not None:  # chat
                piece = delta.get("content") or ""
                reasoning = delta.get("reasoning_content") or delta.get("reasoning") or ""
            else:  # completions
                piece, reasoning = choice.get("text") or "", ""
            if piece or reasoning:
                content_here = True
                if piece:
                    s.text.append(piece)
            if choice.get("finish_reason"):
                s.finish_reason = choice["finish_reason"]
        if content_here:
            s.chunk_times.append(now)
        if usage:
            s.prompt_tokens = usage.get("prompt_tokens", s.prompt_tokens)
            completion = usage.get("completion_tokens")
            details = usage.get("prompt_tokens_details") or {}
            if details.get("cached_tokens") is not None:
                s.cached = details["cached_tokens"]
            if completion is not None:
                if content_here and s.chunk_tokens is not None:
                    s.chunk_tokens.append(completion - s.last_usage_completion)
                s.last_usage_completion = completion
                s.completion_tokens = completion
        elif content_here:
            s.chunk_tokens = None  # this server does not say how many tokens each chunk carries

    def _record(
        self, s: _Stream, meta: RecordMeta, body: dict, request_id: str, failure: _Failure | None
    ) -> RequestRecord:
        end = self._clock() if s.sent is not None else None
        prompt, completion, source = s.prompt_tokens, s.completion_tokens, None
        if completion is not None:
            source = "server"
        elif s.chunk_times:
            source = "estimate"
            completion = estimate_tokens("".join(s.text))
            prompt = _estimate_prompt(body)
        chunk_tokens = tuple(s.chunk_tokens) if s.chunk_tokens and len(s.chunk_tokens) == len(s.chunk_times) else None
        return RequestRecord(
            run_id=meta.run_id,
            request_id=request_id,
            worker_id=meta.worker_id,
            user_id=meta.user_id,
            account=meta.account,
            item_id=meta.item_id,
            stage_level=meta.stage_level,
            stage_repeat=meta.stage_repeat,
            stage_phase=meta.stage_phase,
            endpoint="chat" if "messages" in body else "completions",
            model=str(body.get("model", "")),
            wall_sent=s.wall_sent,
            scheduled=meta.scheduled,
            sent=s.sent,
            first_byte=s.first_byte,
            first_token=s.chunk_times[0] if s.chunk_times else None,
            last_token=s.chunk_times[-1] if s.chunk_times else None,
            end=end,
            chunk_times=tuple(s.chunk_times),
            chunk_tokens=chunk_tokens,
            prompt_tokens=prompt,
            completion_tokens=completion,
            cached_tokens=s.cached,
            token_source=source,
            max_tokens=body.get("max_tokens"),
            finish_reason=s.finish_reason,
            outcome=failure.outcome if failure else Outcome.OK,
            error_category=failure.category if failure else None,
            http_status=s.status if failure is None or failure.status is None else failure.status,
            error_message=str(failure)[:300] if failure else None,
        )


def _estimate_prompt(body: dict) -> int:
    if "messages" in body:
        return sum(estimate_tokens(str(m.get("content", ""))) for m in body["messages"])
    return estimate_tokens(str(body.get("prompt", "")))


def _error_text(obj: Any) -> str:
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


def _http_error(status: int, raw: bytes, path: str) -> _Failure:
    text = raw.decode("utf-8", "replace").strip()
    try:
        text = _error_text(json.loads(text))
    except ValueError:
        text = " ".join(text.split())[:200]
    hint = ""
    if status in (401, 403):
        hint = " (check the API key: --api-key-env names the environment variable that holds it)"
    elif status == 404:
        hint = f" (POST {path} not found: is this an OpenAI-compatible server, and is the model name right?)"
    category = ErrorCategory.HTTP_4XX if status < 500 else ErrorCategory.HTTP_5XX
    return _Failure(Outcome.ERROR, category, f"HTTP {status}: {text}{hint}", status)


def _describe(e: BaseException, url: str | None = None) -> str:
    if isinstance(e, ConnectionRefusedError) or getattr(e, "errno", None) == errno.ECONNREFUSED:
        what = "connection refused"
    elif isinstance(e, socket.gaierror):
        what = "host name not found"
    elif isinstance(e, ssl.SSLError):
        what = f"TLS error: {getattr(e, 'reason', None) or e}"
    else:
        what = str(e) or type(e).__name__
    return f"{what} ({url})" if url else what
