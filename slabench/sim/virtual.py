"""Drive a simulator engine in virtual time: timed arrivals and closed-loop clients, no sleeps, no sockets.

The same loop the HTTP server runs (add on arrival, step at `next_event_time()`), with the clock jumping from event
to event. Used by the engine's unit tests and by `benchmarks/sim_calibration.py` to get a whole sweep in seconds.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from slabench.sim.engine import Engine, SimRequest


@dataclass
class Trace:
    """What one client saw of one request: when it was sent and when each chunk arrived."""

    request: SimRequest
    client: int | None
    arrival: float
    chunk_times: list[float] = field(default_factory=list)
    chunk_tokens: list[int] = field(default_factory=list)
    finish_reason: str | None = None
    cached_prompt_tokens: int = 0

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None

    @property
    def output_tokens(self) -> int:
        return sum(self.chunk_tokens)

    @property
    def ttft(self) -> float | None:
        return self.chunk_times[0] - self.arrival if self.chunk_times else None

    @property
    def e2e(self) -> float | None:
        return self.chunk_times[-1] - self.arrival if self.finished else None

    def itls(self) -> list[float]:
        """Per-token gaps after the first chunk (a chunk's gap spread over the tokens it carried)."""
        out = []
        for k in range(1, len(self.chunk_times)):
            gap = (self.chunk_times[k] - self.chunk_times[k - 1]) / self.chunk_tokens[k]
            out.extend([gap] * self.chunk_tokens[k])
        return out


NextRequest = Callable[[Trace, float], SimRequest | None]


def run(
    engine: Engine,
    arrivals: Iterable[tuple[float, SimRequest]] = (),
    *,
    clients: Iterable[tuple[int, SimRequest]] = (),
    next_request: NextRequest | None = None,
    until: float = math.inf,
) -> dict[str, Trace]:
    """Run until the engine is idle and nothing is left to arrive (or the clock passes `until`).

    `arrivals` are open-loop (time, request) pairs; `clients` are (client id, first request) sent at t=0; when a
    client's request finishes, `next_request(trace, now)` gives its next one (None: the client stops).
    """
    seq = itertools.count()
    heap: list[tuple[float, int, SimRequest, int | None]] = []
    for t, req in arrivals:
        heapq.heappush(heap, (t, next(seq), req, None))
    for c, req in clients:
        heapq.heappush(heap, (0.0, next(seq), req, c))
    traces: dict[str, Trace] = {}
    while True:
        te = engine.next_event_time()
        if heap and (te is None or heap[0][0] <= te):
            t, _, req, client = heapq.heappop(heap)
            if t > until:
                break
            engine.add(req, t)
            traces[req.request_id] = Trace(req, client, t)
            continue
        if te is None or te > until:
            break
        for e in engine.step(te).emissions:
            tr = traces[e.request_id]
            tr.chunk_times.append(te)
            tr.chunk_tokens.append(e.tokens)
            tr.cached_prompt_tokens = e.cached_prompt_tokens
            if e.finished:
                tr.finish_reason = e.finish_reason
                if next_request is not None and tr.client is not None:
                    nxt = next_request(tr, te)
                    if nxt is not None:
                        heapq.heappush(heap, (te, next(seq), nxt, tr.client))
    return traces


def run_closed_loop(
    engine: Engine, make_request: Callable[[int, int], SimRequest], concurrency: int, requests_per_client: int
) -> list[Trace]:
    """`concurrency` clients, each sending its next request the moment the previous one finishes.

    `make_request(client, k)` builds client's k-th request (ids must be unique). Returns traces in arrival order.
    """
    counts = dict.fromkeys(range(concurrency), 1)

    def follow(tr: Trace, now: float) -> SimRequest | None:
        client = tr.client
        if client is None:  # an open-loop arrival: nobody follows it up
            return None
        k = counts[client]
        if k >= requests_per_client:
            return None
        counts[client] = k + 1
        return make_request(client, k)

    traces = run(engine, clients=[(c, make_request(c, 0)) for c in range(concurrency)], next_request=follow)
    return sorted(traces.values(), key=lambda tr: (tr.arrival, tr.request.request_id))
