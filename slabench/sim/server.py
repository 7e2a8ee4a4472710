"""The embedded simulator: an OpenAI-compatible HTTP server in front of an `Engine`.

gevent StreamServer + h11 (the HTTP/1.1 state machine): one greenlet per connection, one greenlet that runs the
engine's step loop. The step loop writes the chunks of plain streams to their sockets itself (`_DirectStream`: no
greenlet switch per token, the hot path) and queues the emissions of other replies (unary, faults, HTTP/1.0) to
their connection's greenlet. Routes: POST /v1/chat/completions, /v1/completions and /v1/responses (the Responses
API's typed events; streaming or not), GET /v1/models, /health, /metrics (vLLM's metric names).
"""

from __future__ import annotations

import json
import os
import random
import socket
import struct
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, final

import gevent
import gevent.event
import gevent.queue
import gevent.server
import h11
from gevent import monkey

from slabench.core.tokens import estimate_tokens
from slabench.evidence.starvation import StarvationMeter
from slabench.sim.engine import Emission, Engine, SimRequest
from slabench.sim.faults import HEADER as FAULT_HEADER
from slabench.sim.faults import Fault, FaultPlan
from slabench.sim.metrics import SimMetrics

_WORDS = (
    "the",
    "customer",
    "called",
    "about",
    "an",
    "order",
    "that",
    "arrived",
    "late",
    "and",
    "the",
    "agent",
    "checked",
    "the",
    "status",
    "offered",
    "a",
    "refund",
    "explained",
    "the",
    "return",
    "policy",
    "and",
    "confirmed",
    "the",
    "shipping",
    "address",
    "before",
    "closing",
    "the",
    "call",
    "politely",
)


@dataclass(frozen=True)
class SimConfig:
    model: str = "slabench-sim"
    output_tokens: int = 128  # what the "model" wants to say before EOS (capped by max_tokens)
    output_jitter: float = 0.0  # ± fraction on output_tokens
    reasoning_tokens: int = 0  # chat and Responses: a reasoning phase this long before the answer (beside it)
    max_model_len: int = 32768
    api_key: str | None = None  # when set, requests must carry "Authorization: Bearer <key>"
    load_time: float = 0.0  # /health answers 503 for this long after start (model loading)
    seed: int = 0
    faults: FaultPlan | None = None
    # What the "model" says: (request params, request headers) → its answer split into tokens, or None for filler
    # words. The grading mode plugs in here.
    respond: Callable[[dict[str, Any], dict[bytes, bytes]], list[str] | None] | None = None
    dev_mode: bool = False  # vLLM's development endpoints (VLLM_SERVER_DEV_MODE=1): POST /reset_prefix_cache


STEP_SLACK_S = 0.0002
LATE_STEP_S = 0.005  # a step this late after it was due: the simulator was starved of CPU (exported on /metrics)
TIMER_FLOOR_S = 0.0012
NAP_S = 0.0002
_nap = monkey.get_original("time", "sleep")  # a real sleep of the whole process, even when time is patched


class SimServer:
    def __init__(self, engine: Engine, config: SimConfig = SimConfig(), host: str = "127.0.0.1", port: int = 0):
        self.engine = engine
        self.config = config
        self.metrics = SimMetrics(config.model)
        self._rng = random.Random(config.seed)
        # request id → where the engine loop delivers its emissions: a stream it writes itself, or a queue for the
        # request's own greenlet (replies that are not plain streams: unary, faults, HTTP/1.0)
        self._streams: dict[str, _DirectStream | gevent.queue.Queue] = {}
        self._wake = gevent.event.Event()
        self._started = time.perf_counter()
        self.steps = self.late_steps = 0  # engine steps run, and those run more than LATE_STEP_S after due
        self.late_s = 0.0  # how late those were, in all
        # What late steps cannot show: a process frozen or starved while idle (arriving requests wait in the
        # kernel, and no step was due to run late). Its event loop's late wake-ups while no request is in flight.
        self.idle_lateness = StarvationMeter(only_while=lambda: not self._streams)
        self._server = gevent.server.StreamServer((host, port), self._handle, backlog=2048)
        self._loop: gevent.Greenlet | None = None

    # -- lifecycle -------------------------------------------------------------------------------------------
    def start(self) -> SimServer:
        self._server.start()
        self._loop = gevent.spawn(self._engine_loop)
        self.idle_lateness.start()
        self.idle_lateness.run_ticker()
        return self

    def stop(self) -> None:
        self._server.stop(timeout=1)
        if self._loop is not None:
            self._loop.kill()

    def wait(self) -> None:
        """Serve until interrupted, or until the engine loop fails (then raise its error); stop either way. Were a
        failed loop left serving, every request would wait for tokens forever; stopped, clients see cut streams and
        refused connections (classified errors) instead."""
        assert self._loop is not None, "start() first"
        try:
            self._loop.get()
        finally:
            self.stop()

    @property
    def port(self) -> int:
        port: int = self._server.server_port
        return port

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # -- engine loop -----------------------------------------------------------------------------------------
    def _engine_loop(self) -> None:
        engine, streams, wake = self.engine, self._streams, self._wake
        pop_finished = getattr(engine, "pop_finished", None)  # engines that model vLLM's request phases
        while True:
            due = engine.next_event_time()
            if due is None:
                wake.wait()
                wake.clear()
                continue
            delay = due - time.perf_counter()
            if delay > TIMER_FLOOR_S:
                wake.wait(delay - TIMER_FLOOR_S)  # an arriving request wakes us early
                wake.clear()
                continue
            if delay > STEP_SLACK_S:
                # epoll sleeps in whole milliseconds, so a timer can fire up to 1 ms late. The last stretch goes
                # to the stream writers (one pass of the event loop), then to short real naps: the step comes on
                # time without spinning a core (the load generator often shares the machine). What arrives during
                # a nap waits at most NAP_S.
                gevent.sleep(0)
                delay = due - time.perf_counter()
                if delay > STEP_SLACK_S:
                    _nap(min(delay - STEP_SLACK_S, NAP_S))
                continue
            # Due within the slack: step now, at the engine's own time, instead of arming a timer for it. Thousands
            # of streams make tens of thousands of events a second; a timer each would cost more than the tokens.
            # Chunks leave at most STEP_SLACK_S early.
            real = time.perf_counter()
            now = max(due, real)
            self.steps += 1
            if real - due > LATE_STEP_S:
                self.late_steps += 1
                self.late_s += real - due
            to_flush: list[_DirectStream] = []
            for em in engine.step(now).emissions:
                out = streams.get(em.request_id)
                if out is None:
                    continue
                if type(out) is _DirectStream:  # not isinstance: the hot loop; the class is final
                    if not out.pending:  # else its greenlet is already due to send what is pending
                        to_flush.append(out)
                    out.take(em, now)
                else:
                    out.put(em)
            for out in to_flush:  # one write per stream per step, even when a step gives it several chunks
                out.flush()
            if pop_finished is not None:
                self.metrics.observe_phases(pop_finished())

    def _submit(self, req: SimRequest, out: _DirectStream | gevent.queue.Queue) -> None:
        self.engine.add(req, time.perf_counter())  # may raise ValueError (too long for the KV cache)
        self._streams[req.request_id] = out
        self._wake.set()

    def _release(self, request_id: str, finished: bool) -> None:
        """The engine loop stops delivering to the request (and the engine drops it, unless it finished). Once."""
        if self._streams.pop(request_id, None) is not None and not finished:
            self.engine.abort(request_id, time.perf_counter())

    # -- HTTP ------------------------------------------------------------------------------------------------
    def _handle(self, sock: Any, addr: Any) -> None:
        conn = h11.Connection(h11.SERVER)
        try:
            while True:
                request, body = self._read_request(sock, conn)
                if request is None:
                    return
                self._route(sock, conn, request, body)
                if conn.our_state is h11.MUST_CLOSE or conn.their_state is h11.MUST_CLOSE:
                    return
                conn.start_next_cycle()
        except (OSError, h11.ProtocolError):
            return
        finally:
            sock.close()

    @staticmethod
    def _read_request(sock: Any, conn: h11.Connection) -> tuple[h11.Request | None, bytes]:
        request, body = None, bytearray()
        while True:
            ev = conn.next_event()
            if ev is h11.NEED_DATA:
                data = sock.recv(65536)
                conn.receive_data(data)
                if not data and request is None:
                    return None, b""
            elif isinstance(ev, h11.Request):
                request = ev
            elif isinstance(ev, h11.Data):
                body += ev.data
            elif isinstance(ev, h11.EndOfMessage):
                return request, bytes(body)
            elif isinstance(ev, h11.ConnectionClosed):
                return None, b""

    def _route(self, sock: Any, conn: h11.Connection, req: h11.Request, body: bytes) -> None:
        method, path = req.method.decode(), req.target.decode().split("?")[0]
        if method == "GET" and path == "/health":
            ready = time.perf_counter() - self._started >= self.config.load_time
            return _send_json(sock, conn, 200 if ready else 503, {} if ready else {"status": "loading"})
        if method == "GET" and path == "/v1/models":
            return _send_json(sock, conn, 200, self._models())
        if method == "GET" and path == "/metrics":
            self.metrics.set_gauges(self.engine.stats())  # gauges are read when scraped, not on every step
            idle_late_s = self.idle_lateness.read().loop_late_s
            self.metrics.set_step_counts(self.steps, self.late_steps, self.late_s, idle_late_s)
            data = self.metrics.render()
            return _send(sock, conn, 200, data, "text/plain; version=0.0.4; charset=utf-8")
        if method == "POST" and path == "/reset_prefix_cache" and self.config.dev_mode:
            if self.engine.reset_prefix_cache():
                return _send(sock, conn, 200, b"", "text/plain")
            return _send_json(sock, conn, 409, _error("requests in flight hold cached blocks", "ConflictError", 409))
        if method == "POST" and path in _APIS:
            return self._completion(sock, conn, req, body, _APIS[path])
        return _send_json(sock, conn, 404, _error(f"no route for {method} {path}", "NotFoundError", 404))

    def _models(self) -> dict[str, Any]:
        c = self.config
        card = {"id": c.model, "object": "model", "owned_by": "slabench", "max_model_len": c.max_model_len}
        return {"object": "list", "data": [card]}

    def _completion(self, sock: Any, conn: h11.Connection, req: h11.Request, body: bytes, api: str) -> None:
        c = self.config
        chat = api != "completions"  # a Responses request is read as the chat request it amounts to
        self.metrics.received.inc()
        if c.api_key is not None:
            auth = dict(req.headers).get(b"authorization", b"").decode()
            if auth != f"Bearer {c.api_key}":
                return _send_json(sock, conn, 401, _error("Unauthorized", "AuthenticationError", 401))
        try:
            params = json.loads(body)
            if not isinstance(params, dict):
                raise ValueError("body is not a JSON object")
            if api == "responses":
                params = _responses_as_chat(params)
            prompt_text = _prompt_text(params, chat)
        except (ValueError, TypeError, KeyError) as e:
            return _send_json(sock, conn, 400, _error(f"invalid request: {e}", "BadRequestError", 400))
        if params.get("model") != c.model:
            msg = f"The model `{params.get('model')}` does not exist."
            return _send_json(sock, conn, 404, _error(msg, "NotFoundError", 404))
        prompt_tokens = estimate_tokens(prompt_text)
        max_tokens = int(params.get("max_completion_tokens") or params.get("max_tokens") or 16)
        if prompt_tokens + max_tokens > c.max_model_len:
            msg = (
                f"This model's maximum context length is {c.max_model_len} tokens. However, you requested "
                f"{prompt_tokens + max_tokens} tokens ({prompt_tokens} in the messages, "
                f"{max_tokens} in the completion)."
            )
            return _send_json(sock, conn, 400, _error(msg, "BadRequestError", 400))
        headers = dict(req.headers)
        answer = c.respond(params, headers) if c.respond is not None else None
        target = len(answer) if answer else c.output_tokens
        if c.output_jitter and not answer:
            target = max(1, round(target * (1 + self._rng.uniform(-c.output_jitter, c.output_jitter))))
        reasoning = c.reasoning_tokens if api != "completions" else 0
        target += reasoning  # the reasoning comes before the answer, and max_tokens caps both
        prefix = _shared_prefix(params) if chat else ""
        sim = SimRequest(
            request_id=uuid.uuid4().hex,
            prompt_tokens=prompt_tokens,
            max_tokens=max_tokens,
            target_tokens=target,
            ignore_eos=bool(params.get("ignore_eos", False)),
            prefix_key=str(hash(prefix)) if prefix else None,
            prefix_tokens=estimate_tokens(prefix) if prefix else 0,
        )
        fault = c.faults.choose(headers.get(FAULT_HEADER)) if c.faults else None
        if fault is not None and fault.http_status:
            status = fault.http_status
            extra = [(b"retry-after", b"1")] if status == 429 else []
            return _send_json(sock, conn, status, _error(f"injected fault {fault.kind}", "ServerError", status), extra)
        if fault is not None and fault.kind == "slow_start":
            gevent.sleep(fault.seconds)
        stream = bool(params.get("stream", False))
        opts = params.get("stream_options") or {}
        usage_ok = not (fault and fault.kind == "no_usage")  # the fault drops per-chunk usage too
        include_usage, continuous = (
            usage_ok and bool(opts.get(k)) for k in ("include_usage", "continuous_usage_stats")
        )
        if api == "responses":
            call: _Call = _ResponsesCall(sim, True, c.model, usage_ok, False, answer, reasoning)
        else:
            call = _Call(sim, chat, c.model, include_usage, continuous, answer, reasoning)
        start = time.perf_counter()
        direct = stream and fault is None and conn.their_http_version == b"1.1"
        out = _DirectStream(sock.fileno(), call, self.metrics, start) if direct else gevent.queue.Queue()
        try:
            self._submit(sim, out)
        except ValueError as e:  # e.g. longer than the whole KV cache: vLLM rejects it up front
            return _send_json(sock, conn, 400, _error(str(e), "BadRequestError", 400))
        try:
            if direct:
                self._stream_direct(sock, conn, out)
            elif stream:
                self._stream(sock, conn, call, self._run(call, out, start), fault)
            else:
                self._unary(sock, conn, call, self._run(call, out, start))
        finally:
            # However the reply ended (the client may have gone before the head went out), the engine loop must stop
            # writing to this socket: once it is closed, a new connection can get the same fd number.
            self._release(sim.request_id, finished=False)

    def _run(self, call: _Call, q: gevent.queue.Queue, start: float) -> Iterator[tuple[Emission, bool]]:
        """Yield (emission, more_ready) for one request until it finishes; abort it in the engine if the caller
        goes away. `more_ready` lets a writer that fell behind send what is waiting in one go."""
        finished = False
        last: float | None = None
        try:
            while not finished:
                em: Emission = q.get()
                now = time.perf_counter()
                self.metrics.observe_token(call, now, start, last)
                last = now
                finished = em.finished
                yield em, q.qsize() > 0
            self.metrics.observe_finished(call, time.perf_counter() - start)
        finally:
            self._release(call.req.request_id, finished)

    def _stream_direct(self, sock: Any, conn: h11.Connection, out: _DirectStream) -> None:
        """A plain stream: the engine loop writes the chunks (see `_DirectStream`); this greenlet sends the
        response head, whatever the socket did not take at once, and the end of the stream. (No content-length and
        an HTTP/1.1 client: h11 frames the body as chunked, as the engine loop does by hand.)"""
        sock.sendall(conn.send(h11.Response(status_code=200, headers=_SSE_HEADERS)))
        while True:
            while out.pending and out.broken is None:
                data = bytes(out.pending)
                out.pending.clear()
                out.sending = True
                try:
                    sock.sendall(data)
                finally:
                    out.sending = False
            out.sending = False  # the head is out: the engine loop may write
            if out.broken is not None:
                raise out.broken
            if out.finished:
                break
            out.wake.wait()
            out.wake.clear()
        call = out.call
        self._release(call.req.request_id, finished=True)
        self.metrics.observe_finished(call, time.perf_counter() - out.start)
        sock.sendall(conn.send(h11.Data(data=call.final_events())) + conn.send(h11.EndOfMessage()))

    def _stream(
        self,
        sock: Any,
        conn: h11.Connection,
        call: _Call,
        emissions: Iterator[tuple[Emission, bool]],
        fault: Fault | None,
    ) -> None:
        sock.sendall(conn.send(h11.Response(status_code=200, headers=_SSE_HEADERS)))
        # Mid-stream faults strike once half of the expected tokens are out.
        strike = max(1, min(call.req.target_tokens, call.req.max_tokens) // 2) if fault else None
        pending: list[bytes] = []
        for em, more_ready in emissions:
            pending.append(call.chunk_events(em))
            if more_ready and strike is None:
                continue  # behind schedule: these events go out together, one send instead of many
            sock.sendall(conn.send(h11.Data(data=b"".join(pending))))
            pending.clear()
            if fault is not None and strike is not None and call.completion >= strike:
                strike = None
                if fault.kind == "reset":
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    raise ConnectionResetError("injected reset")
                if fault.kind == "stall":
                    gevent.sleep(fault.seconds)
                elif fault.kind == "malformed":
                    sock.sendall(conn.send(h11.Data(data=b'data: {"id": "broken\n\n')))
        sock.sendall(conn.send(h11.Data(data=call.final_events())))
        sock.sendall(conn.send(h11.EndOfMessage()))

    def _unary(self, sock: Any, conn: h11.Connection, call: _Call, emissions: Iterator[tuple[Emission, bool]]) -> None:
        for em, _ in emissions:
            call.account(em)
        _send_json(sock, conn, 200, call.unary_body())


_SSE_HEADERS = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]


@final
class _DirectStream:
    """A streaming reply written by the engine loop itself: each step's chunks go straight to the socket with one
    non-blocking write, with no greenlet switch per token (the simulator's hot path). Bytes the socket does not
    take at once, the end of the stream and a broken connection are left to the request's greenlet (`wake`)."""

    __slots__ = ("broken", "call", "fd", "finished", "last", "metrics", "pending", "sending", "start", "wake")

    def __init__(self, fd: int, call: _Call, metrics: SimMetrics, start: float) -> None:
        self.fd, self.call, self.metrics, self.start = fd, call, metrics, start
        self.last: float | None = None
        self.pending = bytearray()  # chunked-framed bytes not yet written, in order
        self.finished = False
        self.broken: OSError | None = None
        # the greenlet owns the socket (sending the head, or in a blocking send): a write now would interleave bytes
        self.sending = True
        self.wake = gevent.event.Event()

    def take(self, em: Emission, now: float) -> None:
        # TTFT/ITL histograms at the engine's step time (what vLLM's own histograms measure), not at delivery
        self.metrics.observe_token(self.call, now, self.start, self.last)
        self.last = now
        data = self.call.chunk_events(em)
        self.pending += b"%x\r\n%b\r\n" % (len(data), data)
        self.finished = em.finished

    def flush(self) -> None:
        if not self.sending and self.broken is None:
            try:
                del self.pending[: os.write(self.fd, self.pending)]
            except BlockingIOError:
                pass
            except OSError as e:  # the client went away: the greenlet aborts the request
                self.broken = e
        if self.pending or self.finished or self.broken is not None:
            self.wake.set()


class _Call:
    """One completion's wire format: turns emissions into OpenAI-shaped chunks. The chunk JSON is assembled from
    pre-encoded pieces because this runs once per token on the simulator's hot path."""

    __slots__ = (
        "_answer",
        "_head",
        "cached",
        "chat",
        "completion",
        "continuous",
        "created",
        "finish_reason",
        "id",
        "include_usage",
        "model",
        "reasoned",
        "reasoning",
        "req",
        "texts",
    )

    def __init__(
        self,
        req: SimRequest,
        chat: bool,
        model: str,
        include_usage: bool,
        continuous: bool,
        answer: list[str] | None = None,
        reasoning: int = 0,
    ):
        self.req, self.chat, self.model, self._answer = req, chat, model, answer
        self.reasoning = reasoning  # the first tokens of the output are reasoning, not answer
        self.reasoned = 0  # reasoning tokens emitted
        self.cached = 0  # prompt tokens the engine found in its prefix cache
        self.include_usage, self.continuous = include_usage, continuous
        self.id = ("chatcmpl-" if chat else "cmpl-") + req.request_id
        self.created = int(time.time())
        self.completion = 0
        self.finish_reason: str | None = None
        self.texts: list[str] = []
        obj = "chat.completion.chunk" if chat else "text_completion"
        self._head = (
            f'data: {{"id":"{self.id}","object":"{obj}","created":{self.created},"model":{json.dumps(model)},'
            '"choices":['
        ).encode()

    def thinking(self) -> bool:
        """Whether the next emission is reasoning (each emission is one or the other, by its first token)."""
        return self.completion < self.reasoning

    def account(self, em: Emission) -> str:
        n = self.completion
        self.cached = em.cached_prompt_tokens
        if self.thinking():
            text = "".join(" " + _WORDS[(n + i) % len(_WORDS)] for i in range(em.tokens))
            self.reasoned += em.tokens
        else:
            n -= self.reasoned
            if self._answer:
                text = "".join(self._answer[n : n + em.tokens])
            else:
                text = "".join(" " + _WORDS[(n + i) % len(_WORDS)] for i in range(em.tokens))
            self.texts.append(text)
        self.completion += em.tokens
        if em.finished:
            self.finish_reason = em.finish_reason or "stop"
        return text

    def usage(self) -> dict[str, Any]:
        usage: dict[str, Any] = {
            "prompt_tokens": self.req.prompt_tokens,
            "completion_tokens": self.completion,
            "total_tokens": self.req.prompt_tokens + self.completion,
            "prompt_tokens_details": {"cached_tokens": self.cached},  # vLLM's --enable-prompt-tokens-details
        }
        if self.reasoning:
            usage["completion_tokens_details"] = {"reasoning_tokens": self.reasoned}
        return usage

    def _chunk(self, choice: bytes, with_usage: bool) -> bytes:
        tail = b"]"
        if with_usage:
            tail += b',"usage":' + json.dumps(self.usage(), separators=(",", ":")).encode()
        return self._head + choice + tail + b"}\n\n"

    def chunk_events(self, em: Emission) -> bytes:
        out = b""
        if self.chat and self.completion == 0:  # vLLM opens with a role-only delta: not a token
            role = b'{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}'
            out = self._chunk(role, self.continuous)
        field = b'"reasoning_content":' if self.thinking() else b'"content":'
        text = json.dumps(self.account(em)).encode()
        finish = b"null" if self.finish_reason is None else b'"' + self.finish_reason.encode() + b'"'
        if self.chat:
            choice = b'{"index":0,"delta":{' + field + text + b'},"logprobs":null,"finish_reason":' + finish + b"}"
        else:
            choice = b'{"index":0,"text":' + text + b',"logprobs":null,"finish_reason":' + finish + b"}"
        return out + self._chunk(choice, self.continuous)

    def final_events(self) -> bytes:
        out = self._chunk(b"", True) if self.include_usage else b""
        return out + b"data: [DONE]\n\n"

    def unary_body(self) -> dict[str, Any]:
        text = "".join(self.texts)
        if self.chat:
            choice = {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": self.finish_reason,
            }
        else:
            choice = {"index": 0, "text": text, "finish_reason": self.finish_reason}
        return {
            "id": self.id,
            "object": "chat.completion" if self.chat else "text_completion",
            "created": self.created,
            "model": self.model,
            "choices": [choice],
            "usage": self.usage(),
        }


class _ResponsesCall(_Call):
    """The OpenAI Responses API's stream: typed events (`event: <type>` and a JSON `data:` with the same `type` and
    a rising `sequence_number`), the text as `response.output_text.delta` events, and `response.completed` with the
    whole response and its usage as the end (no `[DONE]`)."""

    __slots__ = ("item", "seq")

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.id = "resp_" + self.req.request_id
        self.item = "msg_" + self.req.request_id
        self.seq = 0

    def _event(self, kind: str, **fields: Any) -> bytes:
        data = json.dumps({"type": kind, "sequence_number": self.seq, **fields}, separators=(",", ":"))
        self.seq += 1
        return b"event: %b\ndata: %b\n\n" % (kind.encode(), data.encode())

    def _response(self, status: str) -> dict[str, Any]:
        done = status == "completed"
        text = {"type": "output_text", "text": "".join(self.texts), "annotations": []}
        message = {"id": self.item, "type": "message", "role": "assistant", "status": status, "content": [text]}
        usage = {
            "input_tokens": self.req.prompt_tokens,
            "input_tokens_details": {"cached_tokens": self.cached},
            "output_tokens": self.completion,
            "output_tokens_details": {"reasoning_tokens": self.reasoned},
            "total_tokens": self.req.prompt_tokens + self.completion,
        }
        return {
            "id": self.id,
            "object": "response",
            "created_at": self.created,
            "status": status,
            "model": self.model,
            "output": [message] if done else [],
            "usage": usage if done and self.include_usage else None,
        }

    def chunk_events(self, em: Emission) -> bytes:
        out = b""
        where = {"item_id": self.item, "output_index": 0, "content_index": 0}
        if self.completion == 0:
            item = {"id": self.item, "type": "message", "role": "assistant", "status": "in_progress", "content": []}
            out = (
                self._event("response.created", response=self._response("in_progress"))
                + self._event("response.output_item.added", output_index=0, item=item)
                + self._event("response.content_part.added", **where, part={"type": "output_text", "text": ""})
            )
        if self.thinking():  # reasoning text, its own item's (a summary-less reasoning item, as gpt-oss streams it)
            rs = {"item_id": "rs_" + self.req.request_id, "output_index": 0, "content_index": 0}
            return out + self._event("response.reasoning_text.delta", **rs, delta=self.account(em))
        return out + self._event("response.output_text.delta", **where, delta=self.account(em))

    def final_events(self) -> bytes:
        where = {"item_id": self.item, "output_index": 0, "content_index": 0}
        text = "".join(self.texts)
        response = self._response("completed")
        return (
            self._event("response.output_text.done", **where, text=text)
            + self._event("response.content_part.done", **where, part={"type": "output_text", "text": text})
            + self._event("response.output_item.done", output_index=0, item=response["output"][0])
            + self._event("response.completed", response=response)
        )

    def unary_body(self) -> dict[str, Any]:
        return self._response("completed")


_APIS = {"/v1/chat/completions": "chat", "/v1/completions": "completions", "/v1/responses": "responses"}


def _responses_as_chat(params: dict[str, Any]) -> dict[str, Any]:
    """A Responses request as the chat request it amounts to: `instructions` the system message, `input` (a string
    or a list of {role, content} messages) the rest, `max_output_tokens` the cap."""
    given = params.get("input")
    if isinstance(given, str):
        messages = [{"role": "user", "content": given}]
    elif isinstance(given, list) and given and all(isinstance(m, dict) for m in given):
        messages = list(given)
    else:
        raise ValueError("`input` must be a string or a non-empty list of messages")
    if params.get("instructions"):
        messages.insert(0, {"role": "system", "content": str(params["instructions"])})
    return {**params, "messages": messages, "max_tokens": params.get("max_output_tokens")}


def _shared_prefix(params: dict[str, Any]) -> str:
    """The system message: what requests of one tenant share, so a prefix cache can hit on it."""
    first = params["messages"][0]
    return str(first.get("content", "")) if first.get("role") == "system" else ""


def _prompt_text(params: dict[str, Any], chat: bool) -> str:
    if chat:
        messages = params["messages"]
        if not isinstance(messages, list) or not messages:
            raise ValueError("`messages` must be a non-empty list")
        parts = []
        for m in messages:
            content = m.get("content", "")
            if isinstance(content, list):  # content parts
                content = " ".join(p.get("text", "") for p in content if isinstance(p, dict))
            parts.append(str(content))
        return "\n".join(parts)
    prompt = params["prompt"]
    return prompt if isinstance(prompt, str) else " ".join(map(str, prompt))


def _error(message: str, kind: str, code: int) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


def _send_json(
    sock: Any, conn: h11.Connection, status: int, obj: Any, extra: list[tuple[bytes, bytes]] | None = None
) -> None:
    _send(sock, conn, status, json.dumps(obj).encode(), "application/json", extra)


def _send(
    sock: Any,
    conn: h11.Connection,
    status: int,
    data: bytes,
    ctype: str,
    extra: list[tuple[bytes, bytes]] | None = None,
) -> None:
    headers = [(b"content-type", ctype.encode()), (b"content-length", str(len(data)).encode()), *(extra or [])]
    sock.sendall(
        conn.send(h11.Response(status_code=status, headers=headers))
        + conn.send(h11.Data(data=data))
        + conn.send(h11.EndOfMessage())
    )


def watch_parent(pid: int, interval: float = 1.0) -> None:
    """Exit when the process that started us is gone (a killed Locust must not leave a simulator behind)."""
    while True:
        gevent.sleep(interval)
        if os.getppid() != pid:
            os._exit(0)
