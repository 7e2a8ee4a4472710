"""The one streaming client for OpenAI-compatible servers: `/v1/chat/completions`, `/v1/completions` and the
Responses API's `/v1/responses`. This module is the transport (connection, SSE loop, deadlines, the record); what
differs between the APIs is a `Protocol` handler in `slabench.core.protocols`.

Built on geventhttpclient (what Locust's FastHttpUser uses): its connection pool, TLS and response parser. The body
is read with one `recv` at a time and fed straight to the SSE parser, so every event is stamped with
`perf_counter()` the moment its bytes arrive (`iter_content` would wait for ~1 KiB and merge events, corrupting TTFT
and ITL), a line ending in CR alone ends the line as SSE says, and a long line costs linear time up to its cap. Over
plain HTTP on Linux, up to the first answer token (TTFT and a reasoning model's TTFAT), "arrive" is the kernel's
receive timestamp of the bytes (`slabench.core.arrival`, with a watcher thread that keeps each packet's own stamp
when the loop is late), not the moment the loop read them: a stream's first token does not wait behind the other
streams' work in the same loop wake-up. The later events are stamped as read (a
stamped read costs ~2 µs more; inter-token gaps are differences of two reads, whose waits mostly cancel).

Every request the server receives becomes exactly one classified `RequestRecord`; nothing but `GreenletExit`
(a stopping user) leaves `send`, and even then the record is handed to `on_cancel` first. In particular:
- a request is never sent twice: the pool only reuses an idle connection that is not at EOF, and once the bytes
  are written, a connection closed without an answer is the record's `closed` error, not a silent resend;
- the protocol's end (chat, completions: `data: [DONE]`, or any data starting with it, as the OpenAI SDK reads it;
  Responses: `response.completed`) ends the request (its record ends there); the connection is reused only when
  the body then ends cleanly within a short grace;
- an answer is this request's own: one that names another request of this client (an echoed `X-Request-Id`, or a
  vLLM-style chunk id `chatcmpl-<request id>`) is a `stale_response` error and its connection is closed;
- 307/308 to the same server are followed with the same method, body and X-Request-Id (bounded); other redirects
  are recorded naming their Location;
- API keys and bearer tokens are redacted from every message a record keeps (docs/client.md lists every case).
"""

from __future__ import annotations

import email.utils
import errno
import json
import math
import socket
import ssl
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urljoin, urlsplit

import gevent
import gevent.monkey
import gevent.socket
from geventhttpclient import HTTPClient
from geventhttpclient.response import HTTPConnectionClosed, HTTPParseError, HTTPSocketPoolResponse

from slabench.core import arrival
from slabench.core.errors import UserError
from slabench.core.protocols import (
    PROTOCOLS,
    Failure,
    Protocol,
    Stream,
    error_text,
    excerpt,
    redact,
    responses_body,
)
from slabench.core.record import ErrorCategory, Outcome, RecordMeta, RequestRecord
from slabench.core.sse import DEFAULT_MAX_EVENT_BYTES, EventTooLong, SSEParser
from slabench.core.tokens import estimate_tokens

_MAX_ERROR_BODY = 4096
MAX_REDIRECTS = 5
DONE_GRACE_S = 0.25  # after [DONE], how long the body may take to end before the connection is dropped instead
_RECV_BYTES = 16384
_REDIRECTS = frozenset((301, 302, 303, 307, 308))
_PLAIN_SOCKET = gevent.socket.socket  # what geventhttpclient connects with over http (https wraps it in SSLSocket)
_RECENT_IDS = 16  # this client's last request ids, by which an answer to another of its requests is recognised


@dataclass(frozen=True)
class Target:
    """Where requests go and how patient to be."""

    base_url: str
    api_key: str | None = field(default=None, repr=False)  # never printed
    verify_tls: bool = True
    connect_timeout: float = 10.0
    stall_timeout: float = 120.0  # the response head's deadline (from the write), then no bytes mid-stream this long
    request_timeout: float = 900.0  # whole request, first byte to [DONE]
    max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES  # a longer SSE line or event is not an OpenAI stream
    kernel_stamps: bool = True  # stamp body bytes with the kernel's receive time (plain HTTP, Linux), not the read's

    def __post_init__(self) -> None:
        parse_base_url(self.base_url)


def tls_options(verify: bool) -> dict[str, Any]:
    """geventhttpclient's TLS settings. Its `insecure=True` only stops the hostname check, and the certificate is
    still verified: a server with a self-signed one stayed unreachable with `--insecure`. Not verifying takes a
    context that does not."""
    return {} if verify else {"insecure": True, "ssl_context_factory": _unverified_context}


def _unverified_context(cafile: str | None = None) -> ssl.SSLContext:
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


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
class Reply:
    record: RequestRecord
    text: str  # the generated content (reasoning excluded), for quality scoring


def chat_body(model: str, messages: list[dict[str, Any]], max_tokens: int, **params: Any) -> dict[str, Any]:
    return {"model": model, "messages": messages, "max_tokens": max_tokens, **params}


def completions_body(model: str, prompt: str, max_tokens: int, **params: Any) -> dict[str, Any]:
    return {"model": model, "prompt": prompt, "max_tokens": max_tokens, **params}


__all__ = ["Reply", "StreamingClient", "Target", "chat_body", "completions_body", "redact", "responses_body"]


class StreamingClient:
    """One keep-alive connection to the target; one request at a time (a Locust user owns one)."""

    def __init__(self, target: Target, clock: Callable[[], float] = time.perf_counter) -> None:
        self.target = target
        self._clock = clock
        scheme, self._host, self._port, self._prefix = parse_base_url(target.base_url)
        self._origin = (scheme, self._host, self._port)
        self._tls = scheme == "https"
        self._http: HTTPClient | None = None
        self._recent: deque[str] = deque(maxlen=_RECENT_IDS)  # this client's last request ids
        self._stamped: Any = None  # the connection the kernel stamps received bytes on
        self._watched: arrival.Watched | None = None  # that connection, for the watcher thread (arrival.Watcher)
        self._head_stamp: int | None = None  # the kernel's stamp of the latest response head's read

    def _connection(self) -> HTTPClient:
        if self._http is None:
            t = self.target
            self._http = HTTPClient(
                self._host,
                self._port,
                ssl=self._tls,
                **tls_options(t.verify_tls),
                connection_timeout=t.connect_timeout,
                network_timeout=t.stall_timeout,
                concurrency=1,
            )
            # Its idle-connection check (is the socket readable?) runs between our `sent` stamp and the write, and
            # through gevent's select, which yields to every other ready greenlet even with timeout 0: each request's
            # TTFT then held the other streams' work. The same check, without the yield.
            self._http._connection_pool._is_socket_alive = _idle_socket_alive  # type: ignore[method-assign]
        return self._http

    def close(self) -> None:
        if self._http is not None:
            self._http.close()
            self._http = None

    def headers(self, request_id: str) -> dict[str, str]:
        h = {
            "Content-Type": "application/json",
            "Accept": "text/event-stream",
            "Accept-Encoding": "identity",  # timestamps need each event as it arrives, not a compressed block
            "X-Request-Id": request_id,
        }
        if self.target.api_key:
            h["Authorization"] = f"Bearer {self.target.api_key}"
        return h

    def send(
        self,
        endpoint: str,
        body: dict[str, Any],
        meta: RecordMeta,
        on_cancel: Callable[[RequestRecord], None] | None = None,
        headers: dict[str, str] | None = None,
    ) -> Reply:
        """Stream one request over `endpoint`'s protocol (a name in PROTOCOLS). Always returns a Reply with a
        classified record (GreenletExit aside)."""
        proto = PROTOCOLS[endpoint]
        body = proto.stream_body(body)
        request_id = meta.request_id or uuid.uuid4().hex
        payload = json.dumps(body).encode()
        s = Stream(request_id)
        failure: Failure | None = None
        limit = self.target.request_timeout
        try:
            with gevent.Timeout(limit, Failure(Outcome.ERROR, ErrorCategory.TIMEOUT, f"request exceeded {limit:g} s")):
                self._stream(proto, payload, {**self.headers(request_id), **(headers or {})}, s)
        except Failure as f:
            failure = f
            self.close()  # the connection is in an unknown state
        except gevent.GreenletExit:
            self.close()
            rec = self._record(
                proto, s, meta, body, request_id, Failure(Outcome.DROPPED, ErrorCategory.CANCELLED, "user stopped")
            )
            if on_cancel is not None:
                on_cancel(rec)
            raise
        except Exception as e:  # a bug of ours must still leave the request's record, not a lost request
            self.close()
            failure = Failure(
                Outcome.ERROR, ErrorCategory.CLIENT, f"slabench failed on this response ({type(e).__name__}: {e})"
            )
        failure = failure or _implausible_usage(s, proto.max_tokens(body))
        self._recent.append(request_id)
        return Reply(self._record(proto, s, meta, body, request_id, failure), "".join(s.text))

    # -- the request -----------------------------------------------------------------------------------------
    def _stream(self, proto: Protocol, payload: bytes, headers: dict[str, str], s: Stream) -> None:
        try:
            self._answer(proto, payload, headers, s)
        finally:
            if self._watched is not None:
                arrival.watcher().disarm(self._watched)  # (_read_events does at the first answer token)

    def _answer(self, proto: Protocol, payload: bytes, headers: dict[str, str], s: Stream) -> None:
        path = self._prefix + proto.path
        resp = self._open(path, payload, headers, s)
        now = self._clock()
        floor = s.sent if s.sent is not None else -math.inf
        stamp = self._head_stamp
        s.first_byte = arrival.arrival(now, time.time_ns(), stamp, floor) if stamp else now
        s.status = status = resp.status_code
        self._check_own(_header(resp, "x-request-id").strip(), s.request_id, "carries X-Request-Id")
        if status >= 400:
            s.retry_after = _retry_after(_header(resp, "retry-after"))
            raise self._http_error(status, _read_upto(resp, _MAX_ERROR_BODY)[0], path)
        ctype = _header(resp, "content-type").split(";")[0].strip().lower()
        if ctype != "text/event-stream":
            raise Failure(
                Outcome.ERROR,
                ErrorCategory.NOT_OPENAI,
                f"POST {path} answered {status} with {ctype or 'no content type'}, not text/event-stream "
                "(is this an OpenAI-compatible server with streaming?)",
                status,
            )
        encoding = _header(resp, "content-encoding").strip().lower()
        if encoding not in ("", "identity"):
            raise Failure(
                Outcome.ERROR,
                ErrorCategory.NOT_OPENAI,
                f"POST {path} answered with Content-Encoding: {encoding} although the request asked for identity "
                "(a proxy compressing the event stream? it would merge events and corrupt TTFT/ITL)",
                status,
            )
        self._read_events(proto, resp, s)

    def _open(self, path: str, payload: bytes, headers: dict[str, str], s: Stream) -> Any:
        """Send the request (following 307/308 to the same server) and return the response to it."""
        s.wall_sent = time.time()
        s.sent = self._clock()
        for hop in range(MAX_REDIRECTS + 1):
            resp = self._request(path, payload, headers)
            if resp.status_code not in _REDIRECTS:
                return resp
            status, location = resp.status_code, _header(resp, "location")
            s.status = status
            if not _read_upto(resp, _MAX_ERROR_BODY)[1]:
                resp.release()  # its body did not end: the connection goes, so the next hop gets a fresh one
            target = urljoin(f"{self._origin[0]}://{self._host}:{self._port}{path}", location) if location else ""
            try:
                parts = urlsplit(target)
                same_server = (parts.scheme, parts.hostname, parts.port or _default_port(parts.scheme)) == self._origin
            except ValueError:
                same_server = False
            why = ""
            if not location:
                why = "without a Location"
            elif status not in (307, 308):
                why = "not followed: a POST must not turn into a GET"
            elif not same_server:
                why = "not followed: another server (point --host at it; the API key is not sent elsewhere)"
            elif hop == MAX_REDIRECTS:
                why = f"not followed: more than {MAX_REDIRECTS} redirects"
            if why:
                raise Failure(
                    Outcome.ERROR, ErrorCategory.REDIRECT, f"HTTP {status} redirect to {location!r} {why}", status
                )
            path = parts.path + (f"?{parts.query}" if parts.query else "")
            s.redirects += 1
        raise AssertionError("unreachable")

    def _request(self, path: str, payload: bytes, headers: dict[str, str]) -> Any:
        """One POST, never resent. geventhttpclient's pool reuses an idle connection only when it is not at EOF and
        holds no bytes (a connection the server closed while idle, or one where unasked bytes wait, is replaced before
        anything is written); once written, the request is never resent: if the connection then closes without an
        answer, the server may have seen it, so it is this request's `closed` record. The response head has a
        deadline of its own (`stall_timeout` from the write), so a head trickled a byte at a time cannot outlast it."""
        try:
            http = self._connection()
            pool = http._connection_pool
            sock = pool.get_socket()  # connects (under connect_timeout) when no idle connection is alive
        except (OSError, ssl.SSLError) as e:
            self.close()
            raise Failure(Outcome.ERROR, ErrorCategory.CONNECT, _describe(e, self.target.base_url)) from None
        if sock is not self._stamped and self.target.kernel_stamps and type(sock) is _PLAIN_SOCKET:
            if self._watched is not None:
                arrival.watcher().disarm(self._watched)  # the connection it watched is gone (a redirect's, say)
            self._stamped = sock if arrival.enable(sock) else None
            self._watched = arrival.Watched(sock._sock) if self._stamped is not None else None
        head = http._build_request("POST", path, body=payload, headers=headers, chunked=False).encode("latin-1")
        limit = self.target.stall_timeout
        self._head_stamp = None
        if sock is self._stamped and self._watched is not None:
            arrival.watcher().arm(self._watched)  # until the first answer token (_read_events)
        try:
            sock.sendall(head + payload)
            with gevent.Timeout(limit, TimeoutError):
                watched = self._watched if sock is self._stamped else None
                early = self._read_head_stamped(sock, watched, http.block_size) if watched is not None else b""
                resp = HTTPSocketPoolResponse(
                    sock,
                    pool,
                    block_size=http.block_size,
                    method="POST",
                    headers_type=http.headers_type,
                    pre_buffered=early,
                )
            if watched is not None and (self._head_stamp is None or resp._sock is None):
                # The head came in pieces, or after an interim 1xx: the parser read them itself, past the watcher
                arrival.watcher().forget(watched)
            return _reclaim_after_interim(resp, http)
        except TimeoutError:
            self.close()
            raise Failure(Outcome.ERROR, ErrorCategory.TIMEOUT, f"no response head within {limit:g} s") from None
        except (HTTPConnectionClosed, OSError) as e:
            self.close()
            raise Failure(
                Outcome.ERROR,
                ErrorCategory.CLOSED,
                f"the server closed the connection without answering ({_describe(e)}); the request was sent, "
                "so it is not resent",
            ) from None
        except HTTPParseError as e:  # the answer's head is not HTTP, or ended half-way
            self.close()
            raise Failure(
                Outcome.ERROR,
                ErrorCategory.NOT_OPENAI,
                f"the server's answer is not a valid HTTP response ({_describe(e)})",
            ) from None

    def _read_head_stamped(self, sock: Any, watched: arrival.Watched, size: int) -> bytes:
        """The response's first bytes, as they arrive, and the kernel's stamp of them, which body bytes read with the
        head share: the head's packets the watcher saw one by one are read on to the head's end. A head that did not
        come whole gets none: the parser reads the rest, unstamped."""
        data = b""
        while True:
            if not data:  # (the pieces the watcher saw are there: read on without a turn of the loop)
                sock.hub.wait(sock._read_event)
            try:
                more, stamp = arrival.watcher().read(watched, size)
            except BlockingIOError:  # woken without data after all
                if data:  # what the watcher saw was read past it: the parser reads the rest, unstamped
                    arrival.watcher().forget(watched)
                    self._head_stamp = None
                    return data
                continue
            data += more
            # (blank lines before the status line do not end a head: a parser skips them)
            whole = b"\r\n\r\n" in data.lstrip(b"\r\n")
            if whole or not more or not watched.seen:
                self._head_stamp = stamp if whole else None
                return data

    def _check_own(self, named: str, own: str, how: str) -> None:
        """An answer that names another request of this client (one of its last few: as an echoed X-Request-Id, or
        inside a vLLM-style chunk id `chatcmpl-<request id>`) is that request's answer, late: a stale response on a
        reused connection. An id this client never sent (a proxy's own) proves nothing."""
        if not named or own in named:
            return
        for earlier in self._recent:
            if earlier in named:
                raise Failure(
                    Outcome.ERROR,
                    ErrorCategory.STALE_RESPONSE,
                    f"the answer {how} {self._excerpt(named)}, which names an earlier request of this client, not "
                    f"this one ({own}): another request's answer (a stale response on a reused connection); the "
                    "connection is closed",
                )

    # -- the body --------------------------------------------------------------------------------------------
    def _read_events(self, proto: Protocol, resp: Any, s: Stream) -> None:
        parser = SSEParser(self.target.max_event_bytes)
        clock = self._clock
        fold = proto.fold
        secret = self.target.api_key
        end = proto.end
        # A record's times run sent ≤ first_byte ≤ first_token: the body arrived after the head was read
        floor = s.first_byte if s.first_byte is not None else s.sent if s.sent is not None else -math.inf
        watch = _StallWatch(self.target.stall_timeout, clock, floor)
        if self._stamped is not None and resp._sock is self._stamped:
            watch.watched, watch.buffered = self._watched, self._head_stamp
        try:
            while data := _read_some(resp, watch):
                for ev in parser.feed(data, watch.arrived):
                    if fold(ev, s, secret):
                        return self._finish(proto, resp, s, parser, ev.time)
                if watch.watched is not None and s.answer_first is not None:
                    # The two clocks are stamped: the rest as read, at recv's cost (ITL as before) — once the bytes
                    # the watcher saw arrive while the loop was busy are read, each with its own stamp.
                    arrival.watcher().disarm(watch.watched)
                    if not watch.watched.seen:
                        watch.watched = None
        except EventTooLong as e:
            raise Failure(
                Outcome.ERROR,
                ErrorCategory.NOT_OPENAI,
                f"{e} in the event stream (--max-event-bytes {self.target.max_event_bytes}); not an OpenAI stream",
                s.status,
            ) from None
        except TimeoutError:
            raise Failure(
                Outcome.INCOMPLETE, ErrorCategory.STALL, f"no bytes for {self.target.stall_timeout:g} s mid-stream"
            ) from None
        except HTTPConnectionClosed as e:
            raise Failure(
                Outcome.INCOMPLETE, ErrorCategory.STREAM_CUT, f"connection closed before {end} ({_describe(e)})"
            ) from None
        except HTTPParseError as e:  # the parser's "Incomplete response" for a cut body, or broken chunked framing
            raise Failure(Outcome.INCOMPLETE, ErrorCategory.STREAM_CUT, _body_broken(e, end)) from None
        except OSError as e:  # reset
            raise Failure(
                Outcome.INCOMPLETE, ErrorCategory.STREAM_CUT, f"connection cut before {end} ({_describe(e)})"
            ) from None
        finally:
            watch.stop()
        s.end = clock()
        if s.finish_reason and s.completion_tokens is not None:
            raise Failure(
                Outcome.INCOMPLETE,
                ErrorCategory.NO_DONE,
                f"the response ended cleanly after finish_reason {s.finish_reason!r} and usage, without {end}",
            )
        raise Failure(Outcome.INCOMPLETE, ErrorCategory.STREAM_CUT, f"the response ended before {end}")

    def _finish(self, proto: Protocol, resp: Any, s: Stream, parser: SSEParser, end: float) -> None:
        """After the stream's end ([DONE], response.completed): keep the connection only if the body ends cleanly
        within a short grace."""
        s.done = True
        s.end = end
        self._check_own(s.stream_id or "", s.request_id, "has the chunk id")
        if not resp.message_complete:
            clean = False
            with gevent.Timeout(DONE_GRACE_S, False):
                clean = _read_upto(resp, _MAX_ERROR_BODY)[1]
            if not clean:
                resp.release()  # closes its connection (the body did not end)
                self.close()
        if parser.skipped:
            usage = "no usage" if s.completion_tokens is None else f"usage says {s.completion_tokens} completion tokens"
            raise Failure(
                Outcome.INCOMPLETE,
                ErrorCategory.LOST_EVENTS,
                f"{parser.skipped} line(s) of the stream have no SSE field name and were skipped (the first: "
                f"{self._excerpt(parser.first_skipped.decode('utf-8', 'replace'), 60)}): events may be lost; "
                f"{usage}, {len(s.chunk_times)} output chunks arrived",
            )
        if s.completion_tokens is None and s.bad_usage is None:  # a count that is no count: bad_usage, below
            raise Failure(
                Outcome.INCOMPLETE,
                ErrorCategory.NO_USAGE,
                "stream finished without a usage chunk; token counts are estimates",
            )

    # -- records ---------------------------------------------------------------------------------------------
    def _excerpt(self, text: str, n: int = 120) -> str:
        return excerpt(text, self.target.api_key, n)

    def _http_error(self, status: int, raw: bytes, path: str) -> Failure:
        text = raw.decode("utf-8", "replace").strip()
        obj: Any = None
        try:
            obj = json.loads(text)
            text = error_text(obj)
        except (ValueError, RecursionError):
            text = " ".join(text.split())
        text = redact(text, self.target.api_key)[:200]
        hint = ""
        if status in (401, 403):
            hint = " (check the API key: --api-key-env names the environment variable that holds it)"
        elif status == 404 and _unknown_model(obj, text):
            hint = " (the server does not serve this model: --model names one it lists at /v1/models)"
        elif status == 404:
            hint = f" (POST {path} not found: is --host the server's root URL, and does it serve the OpenAI API?)"
        elif status in (429, 503):
            hint = " (the server asks to slow down)"
        category = ErrorCategory.HTTP_4XX if status < 500 else ErrorCategory.HTTP_5XX
        return Failure(Outcome.ERROR, category, f"HTTP {status}: {text}{hint}", status)

    def _record(
        self,
        proto: Protocol,
        s: Stream,
        meta: RecordMeta,
        body: dict[str, Any],
        request_id: str,
        failure: Failure | None,
    ) -> RequestRecord:
        end = s.end if s.end is not None else self._clock() if s.sent is not None else None
        prompt, completion, source = s.prompt_tokens, s.completion_tokens, None
        if completion is not None:
            source = "server"
        elif s.chunk_times:
            source = "estimate"
            completion = len(s.chunk_times) if s.bad_usage else estimate_tokens("".join(s.text))
            prompt = proto.prompt_estimate(body)
        chunk_tokens = tuple(s.chunk_tokens) if s.chunk_tokens and len(s.chunk_tokens) == len(s.chunk_times) else None
        reasoning, reasoning_source = s.reasoning_tokens, "server" if s.reasoning_tokens is not None else None
        if reasoning is None and s.reasoning_chunks:  # the server does not say: each reasoning chunk is ≥ 1 token
            reasoning, reasoning_source = s.reasoning_chunks, "chunks"
        return RequestRecord(
            **meta.record_fields(request_id),
            endpoint=proto.name,
            model=str(body.get("model", "")),
            wall_sent=s.wall_sent,
            sent=s.sent,
            first_byte=s.first_byte,
            first_token=s.chunk_times[0] if s.chunk_times else None,
            first_answer_token=s.answer_first,
            last_token=s.chunk_times[-1] if s.chunk_times else None,
            end=end,
            chunk_times=tuple(s.chunk_times),
            chunk_tokens=chunk_tokens,
            prompt_tokens=prompt,
            completion_tokens=completion,
            cached_tokens=s.cached,
            reasoning_tokens=reasoning,
            reasoning_source=reasoning_source,
            token_source=source,
            max_tokens=proto.max_tokens(body),
            finish_reason=_storable(s.finish_reason),
            outcome=failure.outcome if failure else Outcome.OK,
            error_category=failure.category if failure else None,
            http_status=s.status if failure is None or failure.status is None else failure.status,
            error_message=_storable(redact(str(failure), self.target.api_key)[:300]) if failure else None,
            retry_after=s.retry_after,
            redirects=s.redirects or None,
        )


_select = gevent.monkey.get_original("select", "select")


def _idle_socket_alive(sock: Any) -> bool:
    """An idle keep-alive socket is alive when it is open and not readable (readable: the server closed it, or sent
    something unasked). geventhttpclient's check, minus gevent's yield."""
    if sock is None:
        return False
    try:
        return sock.fileno() >= 0 and not _select([sock], [], [], 0)[0]
    except (OSError, ValueError):
        return False


def _storable(text: str | None) -> str | None:
    """A server's string as a records file can hold it: a lone surrogate (sent escaped, e.g. by a gateway that cut a
    string by UTF-16 length) is not UTF-8, and would fail the record's write; it becomes '?'."""
    if text is None or text.isascii():
        return text
    return text.encode("utf-8", "replace").decode("utf-8")


def _implausible_usage(s: Stream, max_tokens: Any) -> Failure | None:
    """Usage the answer cannot have: a count that is no count (a string, negative), more completion tokens than
    max_tokens allows (a proxy summing a batch, a server that lies) or fewer than the output chunks that arrived (0
    after 8 chunks). Believed, it would skew tokens/s and $ per token; not believed, the record is `bad_usage`, its
    timings stand and its counts are flagged estimates: completion = the output chunks counted (each carries at
    least one token), prompt from the request's text."""
    n, chunks = s.completion_tokens, len(s.chunk_times)
    why = s.bad_usage
    if why is None and n is not None:
        if type(max_tokens) is int and n > max_tokens:
            why = f"usage says {n} completion tokens, more than max_tokens {max_tokens}"
        elif n < chunks:
            why = f"usage says {n} completion tokens for {chunks} output chunks"
    if why is None:
        return None
    s.bad_usage = why
    s.prompt_tokens = s.completion_tokens = s.chunk_tokens = s.cached = s.reasoning_tokens = None
    return Failure(
        Outcome.INCOMPLETE,
        ErrorCategory.BAD_USAGE,
        f"{why}: not believed; token counts are estimates (completion: the {chunks} output chunks counted)",
    )


def _reclaim_after_interim(resp: Any, http: HTTPClient) -> Any:
    """geventhttpclient hands the connection back to its pool when an interim 1xx response (`100 Continue`, which a
    server may send unasked) completes, while the final response is still arriving on it: take it back. One request
    at a time per client, and nothing ran in between: it is the pool's only idle socket."""
    if resp._sock is None and not resp.message_complete:
        pool = http._connection_pool
        resp._sock, resp._pool = pool._socket_queue.get_nowait(), pool
        pool._semaphore.acquire()
    return resp


class _StallWatch:
    """A stream's reads: its stall timeout, and when its latest bytes arrived.

    The stall timeout: no bytes for `limit` seconds. A timer checks every min(limit / 4, 1 s) when bytes last came
    and throws TimeoutError into the reading greenlet, so each read waits on the socket alone: gevent's socket timeout
    makes, starts and cancels a Timeout around every wait (that, with the recv that fails first, was a quarter to a
    third of a streamed token's cost).

    `arrived`: on the record's clock, when the bytes of the latest read arrived — the kernel's receive stamp when
    `watched` (a stamped plain socket), else when they were read; never before `floor` (the response's first byte, then
    the previous arrival), so a record's times stay in order."""

    __slots__ = ("_clock", "_reader", "_timer", "arrived", "buffered", "floor", "last", "limit", "watched")

    def __init__(self, limit: float, clock: Callable[[], float] = time.perf_counter, floor: float = -math.inf) -> None:
        self.limit = limit
        self._clock = clock
        self.floor = floor
        self.watched: arrival.Watched | None = None  # a stamped plain socket: read through the watcher
        self.buffered: int | None = None  # the kernel's stamp of body bytes the head's read took
        self.arrived = floor
        self.last = time.monotonic()
        self._reader = gevent.getcurrent()
        period = min(limit / 4, 1.0)
        self._timer = gevent.get_hub().loop.timer(period, period)
        self._timer.start(self._check)

    def _check(self) -> None:  # in the hub, while the reader waits
        if time.monotonic() - self.last >= self.limit:
            self.stop()
            self._reader.throw(TimeoutError())

    def stop(self) -> None:
        self._timer.close()

    def note(self, stamp_ns: int | None) -> None:
        """The latest read's bytes are here: `stamp_ns` is the kernel's stamp for them (None: none, or no read)."""
        now = self._clock()
        if stamp_ns is not None:
            now = arrival.arrival(now, time.time_ns(), stamp_ns, self.floor)
        self.arrived = self.floor = now


def _read_some(resp: Any, watch: _StallWatch | None = None) -> bytes:
    """The body bytes that have arrived (waiting for at least one), or b"" at the body's end.

    geventhttpclient's response offers `readline` (which rescans its whole buffer after every read: quadratic in a
    long line, and blind to CR line ends) and `read(n)` (which waits for n bytes); this reads what is there,
    through the response's own parser (chunked framing, Content-Length, close-delimited bodies). With a `watch`, a
    plain socket is read by waiting for it to be readable and then one `recv` (a stream's next event is nearly always
    still on its way: gevent's `recv` would try, fail with EAGAIN, then wait and try again) under the watch's stall
    timeout; TLS goes through gevent's socket, whose buffered bytes a readable check cannot see."""
    buf = resp._body_buffer
    stamp: int | None = None
    if watch is not None:
        stamp, watch.buffered = watch.buffered, None
    while not buf:
        if resp.message_complete:
            return b""
        sock = resp._sock
        if sock is None:
            raise HTTPConnectionClosed("connection closed")
        try:
            if watch is not None and type(sock) is _PLAIN_SOCKET:
                if watch.watched is None or not watch.watched.seen:  # else bytes the watcher saw are there
                    sock.hub.wait(sock._read_event)
                try:
                    if watch.watched is not None:
                        data, stamp = arrival.watcher().read(watch.watched, _RECV_BYTES)
                    else:
                        data = sock._sock.recv(_RECV_BYTES)
                except BlockingIOError:  # woken without data after all
                    if watch.watched is not None:
                        arrival.watcher().forget(watch.watched)  # (so the next try waits for the socket)
                    continue
            else:
                data = sock.recv(_RECV_BYTES)
            if watch is not None:
                watch.last = time.monotonic()
            resp.feed(data)  # b"" at EOF: ends a close-delimited body, raises "Incomplete response" otherwise
        except BaseException:
            resp.release()
            raise
        if len(data) == _RECV_BYTES:
            gevent.sleep(0)  # a flood: let the other streams of this process read (and stamp) theirs meanwhile
    if watch is not None:
        watch.note(stamp)
    data = bytes(buf)
    del buf[:]
    return data


def _read_upto(resp: Any, limit: int) -> tuple[bytes, bool]:
    """The rest of a body, up to about `limit` bytes, and whether the body ended cleanly there (a cut, a stall or a
    longer body leave what arrived and False)."""
    parts: list[bytes] = []
    seen = 0
    try:
        while data := _read_some(resp):
            parts.append(data)
            seen += len(data)
            if seen > limit:
                return b"".join(parts), False
    except (OSError, HTTPParseError):
        return b"".join(parts), False
    return b"".join(parts), True


def _header(resp: Any, name: str) -> str:
    value = resp.get(name)
    if isinstance(value, list):  # a duplicated header
        value = value[0] if value else None
    return value or ""


def _default_port(scheme: str) -> int | None:
    return {"http": 80, "https": 443}.get(scheme)


def _retry_after(value: str) -> float | None:
    """Seconds from a Retry-After header (delta-seconds or an HTTP date), or None."""
    value = value.strip()
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when is None or when.tzinfo is None:
            return None
        seconds = when.timestamp() - time.time()
    if not math.isfinite(seconds):
        return None
    return max(0.0, seconds)


def _body_broken(e: HTTPParseError, end: str) -> str:
    """What an HTTP parse error mid-body says happened: a body cut short, or framing that is not HTTP."""
    what = _describe(e)
    if "incomplete" in what.lower():
        return f"connection cut before {end} (the HTTP body ended early: {what})"
    return f"the response's HTTP framing broke before {end} ({what}): not a valid HTTP/1.1 body"


def _unknown_model(obj: Any, text: str) -> bool:
    """A 404 that says the model is unknown (vLLM: "The model `x` does not exist."; OpenAI: model_not_found)."""
    err = obj.get("error") if isinstance(obj, dict) else None
    if isinstance(err, dict) and err.get("code") == "model_not_found":
        return True
    return "model" in text.lower()


def _describe(e: BaseException, url: str | None = None) -> str:
    if isinstance(e, ConnectionRefusedError) or getattr(e, "errno", None) == errno.ECONNREFUSED:
        what = "connection refused"
    elif isinstance(e, socket.gaierror):
        what = "host name not found"
    elif isinstance(e, ssl.SSLError):
        what = f"TLS error: {getattr(e, 'reason', None) or e}"
    elif isinstance(e, ConnectionResetError):
        what = "connection reset"
    elif isinstance(e, HTTPConnectionClosed):
        what = "connection closed"
    elif isinstance(e, HTTPParseError):  # its str() is the tuple of its args
        what = str(e.args[0]) if e.args else type(e).__name__
    else:
        what = str(e) or type(e).__name__
    return f"{what} ({url})" if url else what
