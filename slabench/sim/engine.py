"""The simulator's engine interface, and the first engine: fixed latencies with jitter.

An engine is pure and clock-free: the server owns the clock and calls `add` when a request arrives and `step(now)`
when `next_event_time()` is due. That keeps engines unit-testable with a virtual clock (no sleeps) and lets a
capacity model of vLLM replace this one without touching the HTTP layer.
"""

from __future__ import annotations

import heapq
import random
from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True, slots=True)
class SimRequest:
    """What the engine needs to know about one request."""

    request_id: str
    prompt_tokens: int
    max_tokens: int
    # How many tokens the "model" wants to say before EOS; the engine stops at min(target, max_tokens)
    # unless ignore_eos, in which case it always produces max_tokens.
    target_tokens: int
    ignore_eos: bool = False
    # Tokens of the prompt that are a shared prefix (for prefix-cache models); 0 when unknown.
    prefix_key: str | None = None
    prefix_tokens: int = 0


@dataclass(slots=True)  # not frozen: built once per token, and frozen construction costs 3x
class Emission:
    """Tokens produced for one request by one step."""

    request_id: str
    tokens: int  # new completion tokens in this chunk (≥ 1)
    finished: bool  # the request is done after this chunk
    finish_reason: str | None = None  # "stop" | "length" when finished
    cached_prompt_tokens: int = 0


@dataclass(slots=True)
class StepResult:
    emissions: list[Emission] = field(default_factory=list)


class Engine(Protocol):
    def add(self, req: SimRequest, now: float) -> None: ...

    def abort(self, request_id: str, now: float) -> None:
        """The client went away: free what the request holds."""

    def step(self, now: float) -> StepResult: ...

    def next_event_time(self) -> float | None:
        """When `step` next has something to do (None: idle until the next `add`)."""

    def stats(self) -> dict[str, float]:
        """Gauges for /metrics: num_requests_running, num_requests_waiting, kv_cache_usage_perc, ..."""

    def reset_prefix_cache(self) -> bool:
        """Forget every cached prefix (vLLM's POST /reset_prefix_cache); False while a request still holds one."""


def output_length(req: SimRequest) -> int:
    return req.max_tokens if req.ignore_eos else max(1, min(req.target_tokens, req.max_tokens))


@dataclass
class FixedLatencyEngine:
    """Every request gets its first token `ttft` after arrival and the next ones every `itl`, each with
    multiplicative jitter (uniform ±jitter). No batching effects: the simple, predictable target for
    measuring the harness itself. `stream_interval` coalesces that many tokens per chunk, like vLLM's."""

    ttft: float = 0.1
    itl: float = 0.01
    jitter: float = 0.0
    seed: int = 0
    stream_interval: int = 1
    _rng: random.Random = field(init=False)
    _heap: list[tuple[float, int, str]] = field(init=False, default_factory=list)
    _left: dict[str, int] = field(init=False, default_factory=dict)
    _produced: dict[str, int] = field(init=False, default_factory=dict)
    _limit: dict[str, int] = field(init=False, default_factory=dict)
    _seq: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)

    def _jittered(self, base: float) -> float:
        if not self.jitter:
            return base
        return max(0.0, base * (1.0 + self._rng.uniform(-self.jitter, self.jitter)))

    def _push(self, t: float, request_id: str) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (t, self._seq, request_id))

    def add(self, req: SimRequest, now: float) -> None:
        self._left[req.request_id] = output_length(req)
        self._produced[req.request_id] = 0
        self._limit[req.request_id] = req.max_tokens
        self._push(now + self._jittered(self.ttft), req.request_id)

    def abort(self, request_id: str, now: float) -> None:
        for d in (self._left, self._produced, self._limit):
            d.pop(request_id, None)

    def step(self, now: float) -> StepResult:
        out = StepResult()
        while self._heap and self._heap[0][0] <= now:
            due, _, rid = heapq.heappop(self._heap)
            left = self._left.get(rid)
            if left is None:  # aborted
                continue
            first = self._produced[rid] == 0
            n = 1 if first else min(self.stream_interval, left)
            # A coalesced chunk is sent when its last token is ready.
            left -= n
            self._produced[rid] += n
            done = left == 0
            reason = None
            if done:
                reason = "length" if self._produced[rid] >= self._limit.pop(rid) else "stop"
                del self._left[rid], self._produced[rid]
            else:
                self._left[rid] = left
                k = min(self.stream_interval, left)
                gap = sum(self._jittered(self.itl) for _ in range(k)) if self.jitter else self.itl * k
                self._push(due + gap, rid)
            out.emissions.append(Emission(rid, n, done, reason))
        return out

    def next_event_time(self) -> float | None:
        while self._heap and self._heap[0][2] not in self._left:
            heapq.heappop(self._heap)
        return self._heap[0][0] if self._heap else None

    def stats(self) -> dict[str, float]:
        return {"num_requests_running": float(len(self._left)), "num_requests_waiting": 0.0}

    def reset_prefix_cache(self) -> bool:
        return True  # it caches nothing
