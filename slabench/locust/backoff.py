"""How long a closed-loop user waits after a failed request, so a failing server is never hammered.

Every failure class counts — an HTTP error with or without Retry-After, a reset, a cut stream, a stall, a timeout, a
redirect not followed, an answer that is not an OpenAI stream — not only 429/503: against a server that fails fast, a
user that does not wait sends hundreds of requests a second. The wait after the n-th failure in a row is a random
point in [d/2, d] with d = first_s · 2^(n-1), at most max_s ("equal jitter": users that failed together do not come
back together, and no wait is under half its step). A server's Retry-After is a floor on that wait, never a
permission: `Retry-After: 0` or a date in the past (clock skew) does not shorten it. Nothing is waited for more than
max_s. An answer (even an incomplete one: no usage, usage not believed, lines skipped) ends the run of failures.
"""

from __future__ import annotations

import random

from slabench.core.record import ErrorCategory, Outcome, RequestRecord

FIRST_S = 0.5
MAX_S = 30.0
_INCOMPLETE_FAILURES = frozenset((ErrorCategory.STREAM_CUT, ErrorCategory.STALL))  # the server stopped mid-answer


def failed(r: RequestRecord) -> bool:
    """The server failed this request: an error, or a stream cut or stalled mid-way. Not: an answer (complete or
    flagged), nor a request of ours (dropped)."""
    return r.outcome is Outcome.ERROR or (r.outcome is Outcome.INCOMPLETE and r.error_category in _INCOMPLETE_FAILURES)


class Backoff:
    """One user's failures in a row and the wait each calls for."""

    def __init__(self, rng: random.Random, first_s: float = FIRST_S, max_s: float = MAX_S) -> None:
        self.rng = rng
        self.first_s = first_s
        self.max_s = max_s
        self.failures = 0

    def after(self, r: RequestRecord) -> float | None:
        """Seconds to wait before the next request after `r`, or None (not a failure)."""
        if r.outcome is Outcome.DROPPED:
            return None
        if not failed(r):
            self.failures = 0
            return None
        self.failures += 1
        step = min(self.first_s * 2 ** min(self.failures - 1, 30), self.max_s)
        wait = self.rng.uniform(step / 2, step)
        if r.retry_after is not None:
            wait = max(wait, r.retry_after)
        return min(wait, self.max_s)
