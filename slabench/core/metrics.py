"""Per-request metrics derived from a `RequestRecord` (docs/architecture.md, "Derived metrics"). Pure functions.

Every function returns None when the record lacks what it needs ("no data", never a silent 0). Seconds throughout.
"""

from __future__ import annotations

from slabench.core.record import Outcome, RequestRecord


def _diff(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a - b


def ttft(r: RequestRecord) -> float | None:
    """Time to first token from when the request was sent."""
    return _diff(r.first_token, r.sent)


def ttft_answer(r: RequestRecord) -> float | None:
    """Time to the first answer token (visible content or a tool call, after any reasoning) from when the request
    was sent; equal to `ttft` when the model does not reason first."""
    return _diff(r.first_answer_token, r.sent)


def ttft_scheduled(r: RequestRecord) -> float | None:
    """Open loop: time to first token from when the shape scheduled the request (free of coordinated omission)."""
    return _diff(r.first_token, r.scheduled)


def ttft_answer_scheduled(r: RequestRecord) -> float | None:
    """Open loop: time to the first answer token from when the shape scheduled the request."""
    return _diff(r.first_answer_token, r.scheduled)


def e2e(r: RequestRecord) -> float | None:
    return _diff(r.end, r.sent)


def lateness(r: RequestRecord) -> float | None:
    """How late the request went out against its schedule (open loop only)."""
    return _diff(r.sent, r.scheduled)


def itl(r: RequestRecord) -> list[float]:
    """Inter-token latencies: each gap between consecutive content chunks after the first, spread evenly over the
    tokens that chunk carried when the server said how many (else one token per chunk). One value per token."""
    times = r.chunk_times
    out: list[float] = []
    for i in range(1, len(times)):
        gap = times[i] - times[i - 1]
        k = r.chunk_tokens[i] if r.chunk_tokens is not None and i < len(r.chunk_tokens) else 1
        k = max(k, 1)
        out.extend([gap / k] * k)
    return out


def mean_itl(r: RequestRecord) -> float | None:
    """The mean of `itl(r)`, without building it: each gap is shared by its chunk's tokens, so the mean is the span
    from the first to the last chunk over the tokens after the first chunk (the live view asks for it per record)."""
    times = r.chunk_times
    if len(times) < 2:
        return None
    counts = r.chunk_tokens[1 : len(times)] if r.chunk_tokens is not None else ()
    tokens = sum(counts) if min(counts, default=1) >= 1 else sum(max(k, 1) for k in counts)
    tokens += len(times) - 1 - len(counts)  # chunks without a count carry one token each
    return (times[-1] - times[0]) / tokens


def tpot(r: RequestRecord) -> float | None:
    """Time per output token after the first: (last_token − first_token) / (completion_tokens − 1)."""
    span = _diff(r.last_token, r.first_token)
    n = r.completion_tokens
    if span is None or n is None or n < 2:
        return None
    return span / (n - 1)


def output_tokens_per_s(r: RequestRecord) -> float | None:
    """Per-request output rate over the request's whole life (completion tokens / E2E)."""
    t = e2e(r)
    if t is None or t <= 0 or r.completion_tokens is None:
        return None
    return r.completion_tokens / t


def is_ok(r: RequestRecord) -> bool:
    return r.outcome is Outcome.OK
