"""A hostile OpenAI-compatible server for the streaming client's tests: raw sockets, every byte, close and reset under
its control (a real server in its own process).

A request to ``/<behaviour>/v1/...`` plays that behaviour (``BEHAVIOURS`` below; ``docs/client.md`` lists them with
the class the client gives each); ``/v1/...`` plays the one its ``X-Hostile`` header names; ``/mix/v1/...`` plays the
behaviours named by ``--mix`` in turn, one per request.
Every request is logged as a JSON line *before* it is answered: behaviour, method, path, X-Request-Id, connection
and its request number on that connection, whether it carried the API key, its Accept-Encoding, the arrival time
(perf_counter, comparable across processes on Linux). Behaviours that send at scripted times log a second line
``{"sent": [...]}`` with the times their bytes really left.

    python tests/servers/hostile_server.py LOG.jsonl [--mix ok,cut_mid_stream,...]   # prints the port, then serves
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import itertools
import json
import socket
import ssl
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

HOLD_S = 60.0  # how long a connection is held open by the behaviours that never finish
MODEL = "hostile-model"


def event(
    content: str | None = None,
    *,
    role: str | None = None,
    reasoning: str | None = None,
    finish: str | None = None,
    usage: int | None = None,
    choices: bool = True,
    reasoning_key: str = "reasoning_content",
    reasoning_tokens: int | None = None,
) -> dict:
    """One chat.completion.chunk; `usage` = completion tokens so far (prompt 5), of which `reasoning_tokens` (in
    usage.completion_tokens_details) were reasoning."""
    delta: dict = {}
    if role is not None:
        delta["role"] = role
    if content is not None:
        delta["content"] = content
    if reasoning is not None:
        delta[reasoning_key] = reasoning
    obj: dict = {"id": "chatcmpl-h", "object": "chat.completion.chunk", "model": MODEL, "choices": []}
    if choices:
        obj["choices"] = [{"index": 0, "delta": delta, "finish_reason": finish}]
    if usage is not None:
        obj["usage"] = {"prompt_tokens": 5, "completion_tokens": usage, "total_tokens": 5 + usage}
        if reasoning_tokens is not None:
            obj["usage"]["completion_tokens_details"] = {"reasoning_tokens": reasoning_tokens}
    return obj


def sse(obj: dict | str, sep: bytes = b"\n") -> bytes:
    data = obj if isinstance(obj, str) else json.dumps(obj)
    return b"data: " + data.encode() + sep + sep


# The answer every well-behaved behaviour streams: 3 content chunks of 1 token, then usage, then [DONE].
GOOD = [
    event(role="assistant", content="", usage=0),
    event("Hello", usage=1),
    event(" there", usage=2),
    event(" friend", finish="stop", usage=3),
    event(choices=False, usage=3),
]


def good_stream(sep: bytes = b"\n", done: bool = True, request_id: str = "") -> bytes:
    """The good answer; with `request_id`, its chunk ids are vLLM's `chatcmpl-<X-Request-Id>`."""
    body = b"".join(sse(e, sep) for e in GOOD) + (sse("[DONE]", sep) if done else b"")
    return body.replace(b'"chatcmpl-h"', f'"chatcmpl-{request_id}"'.encode()) if request_id else body


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    behaviour: str
    conn_id: int
    seq: int  # its number on this connection (1 = the connection's first)
    received: float

    @property
    def request_id(self) -> str:
        return self.headers.get("x-request-id", "")

    @property
    def token(self) -> str:
        return self.headers.get("authorization", "").removeprefix("Bearer ").strip()


@dataclass
class Conn:
    sock: socket.socket
    conn_id: int
    buf: bytes = b""
    seq: int = 0
    sent: list[float] = field(default_factory=list)
    previous: tuple[str, bytes] = ("", b"")  # the last request's id and answer (the stale behaviours replay it)

    # -- the wire ----------------------------------------------------------------------------------------------
    def raw(self, data: bytes) -> None:
        self.sock.sendall(data)
        self.sent.append(time.perf_counter())

    def head(self, status: int = 200, ctype: str = "text/event-stream", chunked: bool = True, **extra: str) -> None:
        lines = [f"HTTP/1.1 {status} X", f"Content-Type: {ctype}"]
        if chunked:
            lines.append("Transfer-Encoding: chunked")
        lines += [f"{k.replace('_', '-')}: {v}" for k, v in extra.items()]
        self.raw(("\r\n".join(lines) + "\r\n\r\n").encode())

    def chunk(self, data: bytes) -> None:
        self.raw(b"%x\r\n%s\r\n" % (len(data), data))

    def end(self) -> None:
        self.raw(b"0\r\n\r\n")

    def whole(self, status: int, body: bytes | str, ctype: str = "application/json", **extra: str) -> None:
        """A complete response with a Content-Length body."""
        body = body.encode() if isinstance(body, str) else body
        self.head(status, ctype, chunked=False, Content_Length=str(len(body)), **extra)
        if body:
            self.raw(body)

    def cut(self) -> None:
        """Close cleanly (FIN), wherever the response is."""
        self.sock.shutdown(socket.SHUT_RDWR)

    def reset(self) -> None:
        """Close with a TCP reset (RST): SO_LINGER 0."""
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.sock.close()

    def hold(self, seconds: float = HOLD_S) -> None:
        """Keep the connection open, answering nothing, until the client closes it (or `seconds`)."""
        self.sock.settimeout(seconds)
        try:
            while self.sock.recv(65536):
                pass
        except OSError:
            pass

    def at(self, t0: float, offset: float) -> None:
        """Sleep until `offset` seconds after `t0` (spinning the last millisecond, for exact send times)."""
        while (left := t0 + offset - time.perf_counter()) > 0:
            time.sleep(left - 0.001 if left > 0.002 else 0)

    # -- reading requests --------------------------------------------------------------------------------------
    def read_request(self) -> tuple[str, str, dict[str, str], bytes] | None:
        while b"\r\n\r\n" not in self.buf:
            data = self.sock.recv(65536)
            if not data:
                return None
            self.buf += data
        head, _, rest = self.buf.partition(b"\r\n\r\n")
        first, *lines = head.decode("latin-1").split("\r\n")
        method, path, _ = first.split(" ", 2)
        headers = {}
        for line in lines:
            k, _, v = line.partition(":")
            headers[k.strip().lower()] = v.strip()
        length = int(headers.get("content-length", "0"))
        while len(rest) < length:
            data = self.sock.recv(65536)
            if not data:
                return None
            rest += data
        self.buf = rest[length:]
        return method, path, headers, rest[:length]


Behaviour = Callable[[Conn, Request], bool]  # returns whether the connection may serve another request
BEHAVIOURS: dict[str, Behaviour] = {}


def behaviour(name: str) -> Callable[[Behaviour], Behaviour]:
    def register(fn: Behaviour) -> Behaviour:
        BEHAVIOURS[name] = fn
        return fn

    return register


def stream(c: Conn, body: bytes, piece: int = 0) -> None:
    """`body` as HTTP chunks of `piece` bytes (0: one chunk per event)."""
    if piece:
        for i in range(0, len(body), piece):
            c.chunk(body[i : i + piece])
    else:
        for ev in body.split(b"\n\n")[:-1]:
            c.chunk(ev + b"\n\n")


# -- streams the client must accept -------------------------------------------------------------------------------
@behaviour("ok")
def _ok(c: Conn, r: Request) -> bool:
    """A well-formed stream: role-only prelude, three content chunks with usage, a usage chunk, [DONE]."""
    c.head()
    stream(c, good_stream())
    c.end()
    return True


@behaviour("crlf")
def _crlf(c: Conn, r: Request) -> bool:
    c.head()
    c.chunk(good_stream(b"\r\n"))
    c.end()
    return True


@behaviour("cr_only")
def _cr_only(c: Conn, r: Request) -> bool:
    """CR-only line endings (legal SSE), one event per HTTP chunk, the response held open after [DONE] a while:
    a client splitting on LF only would see nothing until the end."""
    c.head()
    for e in good_stream(b"\r").split(b"\r\r")[:-1]:
        c.chunk(e + b"\r\r")
    time.sleep(1.0)
    c.end()
    return True


@behaviour("data_no_space")
def _no_space(c: Conn, r: Request) -> bool:
    c.head()
    c.chunk(good_stream().replace(b"data: ", b"data:"))
    c.end()
    return True


@behaviour("comments_and_fields")
def _fields(c: Conn, r: Request) -> bool:
    """Keep-alive comments, and `event:`, `id:` and `retry:` lines around every event."""
    c.head()
    c.chunk(b": ping\n\nretry: 1000\n\n")
    for i, e in enumerate(GOOD):
        c.chunk(b": keep-alive\n" + f"id: {i}\nevent: chunk\n".encode() + sse(e))
    c.chunk(b"retry: 5\nid: x\n" + sse("[DONE]"))
    c.end()
    return True


@behaviour("one_byte_chunks")
def _bytes(c: Conn, r: Request) -> bool:
    """Every byte its own HTTP chunk and its own TCP segment."""
    c.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    c.head()
    stream(c, good_stream(), piece=1)
    c.end()
    return True


@behaviour("empty_choices_prelude")
def _prelude(c: Conn, r: Request) -> bool:
    """`choices: []` and `usage: null` preludes before the answer (vLLM's shape without continuous usage)."""
    c.head()
    for _ in range(3):
        c.chunk(sse({"id": "x", "choices": [], "usage": None}))
    stream(c, good_stream())
    c.end()
    return True


@behaviour("reasoning_first")
def _reasoning(c: Conn, r: Request) -> bool:
    """A reasoning delta (the first token), then, 50 ms later, two content deltas; usage counts all three."""
    c.head()
    c.chunk(sse(event(role="assistant")))
    c.chunk(sse(event(reasoning="thinking", usage=1)))
    time.sleep(0.05)  # the answer after the thinking: two clocks apart
    c.chunk(sse(event("Hello", usage=2)))
    c.chunk(sse(event(" there", finish="stop", usage=3)))
    c.chunk(sse(event(choices=False, usage=3)) + sse("[DONE]"))
    c.end()
    return True


@behaviour("reasoning_named_reasoning")
def _reasoning_named(c: Conn, r: Request) -> bool:
    """Two deltas under `reasoning` (vLLM's newer name, OpenRouter, Ollama), then, 50 ms later, one content delta;
    the usage says 2 of the 3 completion tokens were reasoning."""
    c.head()
    c.chunk(sse(event(role="assistant")))
    c.chunk(sse(event(reasoning="let me", reasoning_key="reasoning", usage=1)))
    c.chunk(sse(event(reasoning=" think", reasoning_key="reasoning", usage=2)))
    time.sleep(0.05)
    c.chunk(sse(event("Hello", finish="stop", usage=3)))
    c.chunk(sse(event(choices=False, usage=3, reasoning_tokens=2)) + sse("[DONE]"))
    c.end()
    return True


@behaviour("invalid_utf8")
def _utf8(c: Conn, r: Request) -> bool:
    """Invalid UTF-8 bytes inside a content string."""
    c.head()
    body = good_stream().replace(b"there", b"th\xff\xfere")
    stream(c, body)
    c.end()
    return True


@behaviour("content_length_body")
def _content_length(c: Conn, r: Request) -> bool:
    """The stream framed by Content-Length instead of chunked encoding."""
    body = good_stream()
    c.head(chunked=False, Content_Length=str(len(body)))
    c.raw(body)
    return True


@behaviour("close_delimited")
def _close_delimited(c: Conn, r: Request) -> bool:
    """HTTP/1.0 style: neither length nor chunks; the body ends when the server closes."""
    c.head(chunked=False, Connection="close")
    c.raw(good_stream())
    c.cut()
    return False


@behaviour("interim_100")
def _interim(c: Conn, r: Request) -> bool:
    """An interim `100 Continue` before the real response."""
    c.raw(b"HTTP/1.1 100 Continue\r\n\r\n")
    return _ok(c, r)


@behaviour("done_then_hold")
def _done_hold(c: Conn, r: Request) -> bool:
    """[DONE], then the response stays open: no terminating chunk until the client gives up."""
    c.head()
    stream(c, good_stream())
    c.hold()
    return False


@behaviour("done_then_junk")
def _done_junk(c: Conn, r: Request) -> bool:
    """[DONE], then more events (ignored: [DONE] ends the answer), then the terminating chunk."""
    c.head()
    stream(c, good_stream())
    c.chunk(sse(event("late", usage=9)) * 20)
    c.end()
    return True


@behaviour("redirect_307")
def _redirect(c: Conn, r: Request) -> bool:
    """307 to the same server's `ok` behaviour (same method and body)."""
    c.whole(307, b"", Location="/ok/v1/chat/completions")
    return True


@behaviour("slow_trickle")
def _trickle(c: Conn, r: Request) -> bool:
    """Each event 0.1 s after the previous one, split in two TCP segments mid-line."""
    c.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    c.head()
    for ev in good_stream().split(b"\n\n")[:-1]:
        time.sleep(0.1)
        half = len(ev) // 2
        c.chunk(ev[:half])
        time.sleep(0.01)
        c.chunk(ev[half:] + b"\n\n")
    c.end()
    return True


# -- streams that must become classified failures ------------------------------------------------------------------
@behaviour("error_event")
def _error_event(c: Conn, r: Request) -> bool:
    c.head()
    c.chunk(sse(event("Hi", usage=1)))
    c.chunk(sse({"error": {"message": "engine overloaded", "type": "InternalServerError", "code": 500}}))
    c.end()
    return True


@behaviour("error_event_echoes_key")
def _error_echo(c: Conn, r: Request) -> bool:
    """An error event that quotes the Authorization header it received."""
    c.head()
    c.chunk(sse({"error": {"message": f"rejected Authorization: Bearer {r.token} for this model"}}))
    c.end()
    return True


@behaviour("bad_json")
def _bad_json(c: Conn, r: Request) -> bool:
    c.head()
    c.chunk(sse(event("Hi", usage=1)))
    c.chunk(b"data: {not json\n\n")
    c.end()
    return True


def _shape(payload: str) -> Behaviour:
    def play(c: Conn, r: Request) -> bool:
        c.head()
        c.chunk(sse(event("Hi", usage=1)))
        c.chunk(b"data: " + payload.encode() + b"\n\n")
        stream(c, good_stream())
        c.end()
        return True

    play.__doc__ = f"A chunk shaped `{payload}`."
    return play


for _name, _payload in {
    "delta_is_string": '{"choices": [{"index": 0, "delta": "Hello"}]}',
    "content_is_number": '{"choices": [{"index": 0, "delta": {"content": 42}}]}',
    "choices_not_a_list": '{"choices": {"index": 0, "delta": {"content": "x"}}}',
    "usage_not_an_object": '{"choices": [], "usage": "12 tokens"}',
    "tokens_not_numbers": '{"choices": [], "usage": {"prompt_tokens": "5", "completion_tokens": [3]}}',
    "choice_is_null": '{"choices": [null]}',
    "event_is_array": "[1, 2, 3]",
}.items():
    behaviour(_name)(_shape(_payload))


@behaviour("html_200")
def _html(c: Conn, r: Request) -> bool:
    c.whole(200, "<html><body>Welcome</body></html>", ctype="text/html")
    return True


@behaviour("gzip_stream")
def _gzip(c: Conn, r: Request) -> bool:
    """A gzip-encoded event stream, though the client asked for identity."""
    body = gzip.compress(good_stream())
    c.head(Content_Encoding="gzip")
    c.chunk(body)
    c.end()
    return True


@behaviour("huge_line")
def _huge_line(c: Conn, r: Request) -> bool:
    """A 40 MB line without a newline, as fast as the socket takes it."""
    c.head()
    c.chunk(b'data: {"choices": [{"delta": {"content": "')
    block = b"x" * 65536
    try:
        for _ in range(40 * 16):
            c.chunk(block)
    except OSError:
        return False
    c.end()
    return True


@behaviour("huge_event")
def _huge_event(c: Conn, r: Request) -> bool:
    """Short `data:` lines that never end their event (no blank line): 40 MB of one event."""
    c.head()
    line = b"data: " + b"y" * 1000 + b"\n"
    try:
        for _ in range(640):
            c.chunk(line * 64)
    except OSError:
        return False
    c.end()
    return True


@behaviour("cut_mid_stream")
def _cut(c: Conn, r: Request) -> bool:
    c.head()
    c.chunk(sse(event("Hi", usage=1)))
    c.cut()
    return False


@behaviour("reset_mid_stream")
def _reset(c: Conn, r: Request) -> bool:
    c.head()
    c.chunk(sse(event("Hi", usage=1)))
    time.sleep(0.05)
    c.reset()
    return False


@behaviour("cut_mid_line")
def _cut_line(c: Conn, r: Request) -> bool:
    c.head()
    c.chunk(sse(event("Hi", usage=1)) + b'data: {"choices": [{"delta": {"con')
    c.cut()
    return False


@behaviour("stall_mid_stream")
def _stall(c: Conn, r: Request) -> bool:
    c.head()
    c.chunk(sse(event("Hi", usage=1)))
    c.hold()
    return False


@behaviour("no_answer")
def _no_answer(c: Conn, r: Request) -> bool:
    """Accepts, reads the request, never answers (on every path: /v1/models and /metrics too)."""
    c.hold()
    return False


@behaviour("closed_on_reuse")
def _closed_on_reuse(c: Conn, r: Request) -> bool:
    """Answers a connection's first request; closes (FIN) after reading its second, without a byte."""
    if c.seq >= 2:
        c.cut()
        return False
    return _ok(c, r)


@behaviour("closed_when_idle")
def _closed_when_idle(c: Conn, r: Request) -> bool:
    """Answers, then closes the kept-alive connection (FIN) while it is idle, as a server's keep-alive timeout does."""
    _ok(c, r)
    c.cut()
    return False


@behaviour("reset_on_reuse")
def _reset_on_reuse(c: Conn, r: Request) -> bool:
    """Answers a connection's first request; resets after reading its second."""
    if c.seq >= 2:
        c.reset()
        return False
    return _ok(c, r)


@behaviour("no_done_clean_end")
def _no_done(c: Conn, r: Request) -> bool:
    """finish_reason and usage, then the body ends properly, without `data: [DONE]`."""
    c.head()
    stream(c, good_stream(done=False))
    c.end()
    return True


@behaviour("no_done_cut")
def _no_done_cut(c: Conn, r: Request) -> bool:
    """finish_reason and usage, then the connection is closed without ending the body."""
    c.head()
    stream(c, good_stream(done=False))
    c.cut()
    return False


@behaviour("no_usage")
def _no_usage(c: Conn, r: Request) -> bool:
    c.head()
    c.chunk(sse(event("two words", finish="stop")))
    c.chunk(sse("[DONE]"))
    c.end()
    return True


@behaviour("usage_over_max_tokens")
def _usage_over_max_tokens(c: Conn, r: Request) -> bool:
    """The good answer, but its usage claims 100,000 completion tokens (the client asked for at most 16)."""
    c.head()
    stream(c, good_stream().replace(b'"completion_tokens": 3', b'"completion_tokens": 100000'))
    c.end()
    return True


@behaviour("empty_200")
def _empty(c: Conn, r: Request) -> bool:
    """200 text/event-stream with an empty body."""
    c.head()
    c.end()
    return True


# -- HTTP-level refusals -------------------------------------------------------------------------------------------
def _json_error(status: int, message: str, **extra: str) -> Behaviour:
    def play(c: Conn, r: Request) -> bool:
        c.whole(status, json.dumps({"error": {"message": message.format(token=r.token), "code": status}}), **extra)
        return True

    play.__doc__ = f"HTTP {status}: {message}"
    return play


BEHAVIOURS["rate_limited_429"] = _json_error(429, "Rate limit reached", Retry_After="1")
BEHAVIOURS["busy_503"] = _json_error(503, "Server busy, retry later", Retry_After="2")
BEHAVIOURS["http_500"] = _json_error(500, "boom")
BEHAVIOURS["unauthorized_401"] = _json_error(401, "Incorrect API key provided: {token}. Bearer {token} is invalid.")
BEHAVIOURS["forbidden_403"] = _json_error(403, "This key may not use this model")
BEHAVIOURS["unknown_model_404"] = _json_error(404, f"The model `{MODEL}-missing` does not exist.")


@behaviour("path_404")
def _path_404(c: Conn, r: Request) -> bool:
    c.whole(404, "<html><title>404 Not Found</title></html>", ctype="text/html")
    return True


@behaviour("redirect_loop_308")
def _redirect_loop(c: Conn, r: Request) -> bool:
    c.whole(308, b"", Location=r.path)
    return True


@behaviour("redirect_other_host")
def _redirect_away(c: Conn, r: Request) -> bool:
    c.whole(307, b"", Location="http://other.invalid:9/v1/chat/completions")
    return True


@behaviour("redirect_302")
def _redirect_302(c: Conn, r: Request) -> bool:
    c.whole(302, b"", Location="/login")
    return True


@behaviour("timed")
def _timed(c: Conn, r: Request) -> bool:
    """Content chunks at 0.1, 0.15, 0.2, ... 0.6 s after the request arrived (their real send times are logged)."""
    c.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    c.head()
    c.sent.clear()
    for i in range(11):
        c.at(r.received, 0.1 + 0.05 * i)
        c.chunk(sse(event(f" w{i}", usage=i + 1)))
    c.chunk(sse(event(choices=False, usage=11)) + sse("[DONE]"))
    c.end()
    return True


@behaviour("echo_events")
def _echo(c: Conn, r: Request) -> bool:
    """Streams the raw event payloads listed in the request body's `hostile_events`, then [DONE] (property tests)."""
    c.head()
    for data in json.loads(r.body).get("hostile_events", []):
        c.chunk(b"data: " + data.encode() + b"\n\n")
    c.chunk(sse("[DONE]"))
    c.end()
    return True


# -- round 3: wrong numbers recorded as right, a load generator turned into a denial of service ---------------------
@behaviour("bom_first")
def _bom_first(c: Conn, r: Request) -> bool:
    """A UTF-8 byte-order mark before the first event, the first content (legal: SSE drops it at the stream's
    start)."""
    c.head()
    stream(c, b"\xef\xbb\xbf" + good_stream().split(b"\n\n", 1)[1])
    c.end()
    return True


@behaviour("bom_one_byte_chunks")
def _bom_bytes(c: Conn, r: Request) -> bool:
    """The BOM and the stream after it, every byte its own HTTP chunk and TCP segment."""
    c.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    c.head()
    stream(c, b"\xef\xbb\xbf" + good_stream(), piece=1)
    c.end()
    return True


@behaviour("bom_mid_stream")
def _bom_mid(c: Conn, r: Request) -> bool:
    """A BOM before the second content event (a proxy gluing streams): that line is no SSE field."""
    c.head()
    events = good_stream().split(b"\n\n")[:-1]
    events[2] = b"\xef\xbb\xbf" + events[2]
    stream(c, b"".join(e + b"\n\n" for e in events))
    c.end()
    return True


@behaviour("field_name_cased")
def _cased(c: Conn, r: Request) -> bool:
    """One content event as `Data: {...}` (SSE field names are case-sensitive: the line is skipped)."""
    c.head()
    events = good_stream().split(b"\n\n")[:-1]
    events[1] = events[1].replace(b"data: ", b"Data: ", 1)
    stream(c, b"".join(e + b"\n\n" for e in events))
    c.end()
    return True


def _replay(header: bool) -> Behaviour:
    def play(c: Conn, r: Request) -> bool:
        stale_id, stale = c.previous
        mine = good_stream(request_id=r.request_id)
        c.previous = (r.request_id, mine)
        rid, body = (stale_id, stale) if c.seq >= 2 else (r.request_id, mine)
        c.head(**({"X_Request_Id": rid} if header else {}))
        stream(c, body)
        c.end()
        return True

    how = "echoing its X-Request-Id" if header else "its chunk ids vLLM's chatcmpl-<X-Request-Id>"
    play.__doc__ = f"On a reused connection, answers with the previous request's stream ({how})."
    return play


BEHAVIOURS["stale_echo_header"] = _replay(header=True)
BEHAVIOURS["stale_chunk_id"] = _replay(header=False)


@behaviour("echo_request_id")
def _echo_id(c: Conn, r: Request) -> bool:
    """vLLM with request-id headers: the request's own X-Request-Id in the head and in every chunk id."""
    c.head(X_Request_Id=r.request_id)
    stream(c, good_stream(request_id=r.request_id))
    c.end()
    return True


@behaviour("proxy_request_id")
def _proxy_id(c: Conn, r: Request) -> bool:
    """A proxy's own X-Request-Id in the response (an id the client never sent)."""
    c.head(X_Request_Id=f"proxy-{c.conn_id}-{c.seq}")
    stream(c, good_stream())
    c.end()
    return True


def _usage(old: bytes, new: bytes, doc: str) -> Behaviour:
    def play(c: Conn, r: Request) -> bool:
        c.head()
        stream(c, good_stream().replace(old, new))
        c.end()
        return True

    play.__doc__ = doc
    return play


BEHAVIOURS["usage_negative"] = _usage(
    b'"completion_tokens": 3', b'"completion_tokens": -3', "The good answer, its completion tokens -3."
)
BEHAVIOURS["usage_all_zero"] = _usage(
    b'"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8',
    b'"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0',
    "The good answer, its final usage all zero.",
)
BEHAVIOURS["usage_under_chunks"] = _usage(
    b'"completion_tokens": 3', b'"completion_tokens": 1', "The good answer, its usage 1 token for 3 chunks."
)
BEHAVIOURS["cached_tokens_negative"] = _usage(
    b'"total_tokens": 8}',
    b'"total_tokens": 8, "prompt_tokens_details": {"cached_tokens": -1}}',
    "The good answer, its usage claiming -1 cached tokens.",
)


@behaviour("done_trailing_space")
def _done_space(c: Conn, r: Request) -> bool:
    c.head()
    stream(c, good_stream().replace(b"data: [DONE]", b"data: [DONE] "))
    c.end()
    return True


@behaviour("done_trailing_text")
def _done_text(c: Conn, r: Request) -> bool:
    c.head()
    stream(c, good_stream().replace(b"data: [DONE]", b"data: [DONE] stream ends"))
    c.end()
    return True


def tool_event(args: str, usage: int, first: bool = False, finish: str | None = None) -> dict:
    call: dict = {"index": 0, "function": {"arguments": args}}
    if first:
        call.update(id="call_1", type="function", function={"name": "lookup", "arguments": args})
    obj = event(finish=finish, usage=usage)
    obj["choices"][0]["delta"]["tool_calls"] = [call]
    return obj


@behaviour("tool_calls_only")
def _tools(c: Conn, r: Request) -> bool:
    """An answer that is one tool call, streamed as three tool_calls deltas, no content."""
    c.head()
    c.chunk(sse(event(role="assistant", usage=0)))
    c.chunk(sse(tool_event('{"q": ', 1, first=True)))
    c.chunk(sse(tool_event('"x"', 2)))
    c.chunk(sse(tool_event("}", 3, finish="tool_calls")))
    c.chunk(sse(event(choices=False, usage=3)) + sse("[DONE]"))
    c.end()
    return True


@behaviour("tool_calls_then_content")
def _tools_content(c: Conn, r: Request) -> bool:
    """A tool call's delta, then two content deltas."""
    c.head()
    c.chunk(sse(tool_event("{}", 1, first=True)))
    c.chunk(sse(event("Hello", usage=2)))
    c.chunk(sse(event(" there", finish="stop", usage=3)))
    c.chunk(sse(event(choices=False, usage=3)) + sse("[DONE]"))
    c.end()
    return True


@behaviour("tool_calls_not_a_list")
def _tools_bad(c: Conn, r: Request) -> bool:
    c.head()
    c.chunk(b'data: {"choices": [{"index": 0, "delta": {"tool_calls": {"index": 0}}}]}\n\n')
    stream(c, good_stream())
    c.end()
    return True


BEHAVIOURS["retry_after_zero"] = _json_error(429, "Rate limit reached", Retry_After="0")
BEHAVIOURS["retry_after_past_date"] = _json_error(
    429, "Rate limit reached", Retry_After="Wed, 21 Oct 2015 07:28:00 GMT"
)
BEHAVIOURS["retry_after_huge"] = _json_error(429, "Rate limit reached", Retry_After="86400")
BEHAVIOURS["retry_after_garbage"] = _json_error(503, "Server busy", Retry_After="soon")


@behaviour("html_502")
def _html_502(c: Conn, r: Request) -> bool:
    """A gateway's HTML error page, no Retry-After."""
    c.whole(502, "<html><body><h1>502 Bad Gateway</h1></body></html>", ctype="text/html")
    return True


@behaviour("unasked_answer_while_idle")
def _unasked(c: Conn, r: Request) -> bool:
    """Answers, then 0.1 s later sends an unasked copy of the answer while the connection is idle."""
    _ok(c, r)
    time.sleep(0.1)
    c.head()
    stream(c, good_stream())
    c.end()
    return True


_revoked_turn = itertools.count()


@behaviour("revoked_key_401")
def _revoked(c: Conn, r: Request) -> bool:
    """The server's first request of this behaviour is answered; every later one is 401 (the key was revoked)."""
    if next(_revoked_turn):
        return BEHAVIOURS["unauthorized_401"](c, r)
    return _ok(c, r)


@behaviour("reset_after_head")
def _reset_head(c: Conn, r: Request) -> bool:
    c.head()
    time.sleep(0.2)  # the head has been read
    c.reset()
    return False


@behaviour("bad_chunk_size")
def _bad_chunk(c: Conn, r: Request) -> bool:
    """One good event, then a chunk whose size line is not hexadecimal."""
    c.head()
    c.chunk(sse(event("Hi", usage=1)))
    time.sleep(0.3)  # the head has been read: the broken framing is the body's
    c.raw(b"zz\r\nnot a chunk\r\n")
    c.hold(2.0)
    return False


@behaviour("redirect_307_chain")
def _redirect_chain(c: Conn, r: Request) -> bool:
    """307 to 307 to the same server's `ok`."""
    c.whole(307, b"", Location="/redirect_307/v1/chat/completions")
    return True


def _trickle_head(head: bytes, every: float) -> Behaviour:
    def play(c: Conn, r: Request) -> bool:
        c.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        end = time.monotonic() + HOLD_S
        for i in itertools.count():
            if time.monotonic() > end:
                return False
            c.raw(head[i : i + 1] if i < len(head) else b"X-Pad: %d\r\n" % i)
            time.sleep(every)

    return play


BEHAVIOURS["head_trickle"] = _trickle_head(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n", 0.1)
BEHAVIOURS["head_trickle"].__doc__ = "The response head one byte every 0.1 s."
BEHAVIOURS["head_never_ends"] = _trickle_head(b"HTTP/1.1 200 OK\r\n", 0.05)
BEHAVIOURS["head_never_ends"].__doc__ = "A status line, then a header line after another, never the blank line."


# -- the server ----------------------------------------------------------------------------------------------------
# -- the Responses API (/v1/responses): typed events, `response.completed` as the end ------------------------------
def typed(kind: str, seq: int, **fields: object) -> bytes:
    """One Responses API event: `event: <type>` and its JSON data with the same `type` and a `sequence_number`."""
    data = json.dumps({"type": kind, "sequence_number": seq, **fields})
    return f"event: {kind}\ndata: {data}\n\n".encode()


def response_obj(status: str, usage: dict | None, request_id: str = "h") -> dict:
    return {"id": f"resp_{request_id}", "object": "response", "status": status, "model": MODEL, "usage": usage}


RESPONSES_USAGE = {
    "input_tokens": 5,
    "input_tokens_details": {"cached_tokens": 2},
    "output_tokens": 3,
    "output_tokens_details": {"reasoning_tokens": 0},
    "total_tokens": 8,
}


def responses_stream(
    deltas: tuple[tuple[str, str], ...] = (("text", "Hello"), ("text", " there"), ("text", " friend")),
    end: str = "response.completed",
    usage: dict | None = RESPONSES_USAGE,
) -> bytes:
    """A Responses stream of `deltas` ((kind, text): kind "text" or "reasoning"), ended by the `end` event ("" for
    none) whose response carries `usage`."""
    where = {"item_id": "msg_h", "output_index": 0, "content_index": 0}
    out = [typed("response.created", 0, response=response_obj("in_progress", None))]
    out.append(typed("response.in_progress", 1, response=response_obj("in_progress", None)))
    for kind, text in deltas:
        name = "response.output_text.delta" if kind == "text" else "response.reasoning_text.delta"
        out.append(typed(name, len(out), **where, delta=text))
    text = "".join(t for k, t in deltas if k == "text")
    out.append(typed("response.output_text.done", len(out), **where, text=text))
    if end:
        out.append(typed(end, len(out), response=response_obj(end.split(".")[1], usage)))
    return b"".join(out)


def _responses(body: bytes, piece: int = 0, cut: bool = False, pause: bool = False) -> Behaviour:
    """Play a Responses stream; with `pause`, 50 ms before the first answer delta."""

    def play(c: Conn, r: Request) -> bool:
        if piece:
            c.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        c.head()
        first, answer = body, b""
        if pause:
            at = body.index(b"event: response.output_text.delta")
            first, answer = body[:at], body[at:]
        stream(c, first, piece)
        if answer:
            time.sleep(0.05)
            stream(c, answer, piece)
        if cut:
            c.cut()
            return False
        c.end()
        return True

    return play


_FAILED = {"error": {"code": "server_error", "message": "engine overloaded"}}
BEHAVIOURS.update(
    {
        "responses_ok": _responses(responses_stream()),
        "responses_split_reads": _responses(responses_stream(), piece=7),  # every delta spread over several reads
        "responses_bom_first": _responses(b"\xef\xbb\xbf" + responses_stream()),
        "responses_reasoning_first": _responses(
            responses_stream(
                (("reasoning", "thinking"), ("text", "Hello"), ("text", " there")),
                usage={**RESPONSES_USAGE, "output_tokens_details": {"reasoning_tokens": 1}},
            ),
            pause=True,
        ),
        "responses_incomplete": _responses(responses_stream(end="response.incomplete")),
        "responses_no_completed": _responses(responses_stream(end="")),
        "responses_cut": _responses(responses_stream(end="").split(b"event: response.output_text.done")[0], cut=True),
        "responses_no_usage": _responses(responses_stream(usage=None)),
        "responses_failed": _responses(
            responses_stream(end="").replace(
                b"event: response.output_text.done",
                typed("response.failed", 9, response={**response_obj("failed", None), **_FAILED})
                + b"event: response.output_text.done",
            )
        ),
        "responses_error_event": _responses(
            responses_stream(end="") + typed("error", 9, code="server_error", message="engine overloaded", param=None)
        ),
        "responses_error_event_text": _responses(
            responses_stream(end="").split(b"event: response.output_text.done")[0]
            + b"event: error\ndata: upstream overloaded\n\n"
        ),
        "responses_untyped_event": _responses(responses_stream().replace(b'"type": "response.in_progress", ', b"")),
        "responses_usage_not_counts": _responses(responses_stream(usage={**RESPONSES_USAGE, "output_tokens": "3"})),
    }
)


class Server:
    def __init__(self, log_path: str, mix: list[str], tls: ssl.SSLContext | None = None) -> None:
        self.log_path = log_path
        self.mix = mix
        self.tls = tls
        self.lock = threading.Lock()
        self.conn_ids = itertools.count(1)
        self.mix_turn = itertools.count()

    def log(self, row: dict) -> None:
        with self.lock, open(self.log_path, "a") as f:
            f.write(json.dumps(row) + "\n")

    def pick(self, method: str, path: str, headers: dict[str, str]) -> str:
        name = path.strip("/").split("/")[0]
        if name == "mix" and method == "GET":
            return "ok"  # model discovery and /metrics do not take a turn of the mix
        if name == "mix":
            with self.lock:
                return self.mix[next(self.mix_turn) % len(self.mix)]
        if name == "v1":  # no behaviour in the path: the X-Hostile header names it (one client, many behaviours)
            return headers.get("x-hostile", "ok")
        return name

    def handle(self, sock: socket.socket) -> None:
        try:
            if self.tls is not None:
                sock = self.tls.wrap_socket(sock, server_side=True)  # a client that refuses the certificate: OSError
        except OSError:
            sock.close()
            return
        c = Conn(sock, next(self.conn_ids))
        try:
            while True:
                got = c.read_request()
                if got is None:
                    return
                method, path, headers, body = got
                c.seq += 1
                r = Request(
                    method, path, headers, body, self.pick(method, path, headers), c.conn_id, c.seq, time.perf_counter()
                )
                self.log(
                    {
                        "behaviour": r.behaviour,
                        "method": method,
                        "path": path,
                        "request_id": r.request_id,
                        "conn": c.conn_id,
                        "seq": c.seq,
                        "received": r.received,
                        "accept_encoding": headers.get("accept-encoding"),
                        "has_key": bool(r.token),
                    }
                )
                c.sent = []
                if method == "GET" and r.behaviour not in ("no_answer",):
                    keep = self.get(c, r)
                else:
                    keep = BEHAVIOURS.get(r.behaviour, _path_404)(c, r)
                if c.sent and r.behaviour == "timed":
                    self.log({"request_id": r.request_id, "sent": c.sent})
                if not keep:
                    return
        except OSError:
            return  # the client went away (or was reset): that is its business
        finally:
            with contextlib.suppress(OSError):
                sock.close()

    def get(self, c: Conn, r: Request) -> bool:
        if r.path.endswith("/v1/models"):
            c.whole(200, json.dumps({"object": "list", "data": [{"id": MODEL, "object": "model"}]}))
        else:
            c.whole(404, "not found", ctype="text/plain")
        return True

    def serve(self) -> None:
        srv = socket.create_server(("127.0.0.1", 0))
        srv.listen(512)
        print(srv.getsockname()[1], flush=True)
        while True:
            sock, _ = srv.accept()
            threading.Thread(target=self.handle, args=(sock,), daemon=True).start()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("log")
    ap.add_argument("--mix", default="ok")
    ap.add_argument("--tls", nargs=2, metavar=("CERT", "KEY"), help="serve https with this certificate")
    a = ap.parse_args()
    unknown = [m for m in a.mix.split(",") if m not in BEHAVIOURS]
    if unknown:
        raise SystemExit(f"unknown behaviour(s) {unknown}")
    tls = None
    if a.tls:
        tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        tls.load_cert_chain(*a.tls)
    Server(a.log, a.mix.split(","), tls).serve()


if __name__ == "__main__":
    main()
