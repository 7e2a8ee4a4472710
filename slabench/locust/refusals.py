"""Runs that measure nothing stop early, with one line that says why.

- Refused from the start (`RefusalWatch`, exit 3): a wrong API key, model name or URL. After `REFUSALS_TO_STOP`
  answers of 401/403/404 in a row, the watch names the cause, once. Anything else coming back first ends the watch
  for the run (the key, model and URL can work).
- Failures dominate (`FailureWatch`, exit 4): a closed loop whose last `FAILURES_TO_STOP` requests all failed
  (`slabench.locust.backoff.failed`: any error, a cut or stalled stream), at any point of the run — a server that
  went down, a key revoked mid-run. Backoff already keeps such a loop from hammering; this stops measuring errors.
  An open loop's records (those with a `scheduled` time) are left out: its schedule is the experiment.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable

from slabench.core.record import ErrorCategory, Outcome, RequestRecord
from slabench.locust.backoff import failed

REFUSALS_TO_STOP = 10
FAILURES_TO_STOP = 20


class RefusalWatch:
    def __init__(self, api_key_env: str, on_refused: Callable[[str], None]) -> None:
        self.api_key_env = api_key_env
        self.on_refused = on_refused  # called with the line that says why the run stops
        self.count: int | None = 0  # refusals in a row since the start; None once the watch is over

    def reset(self) -> None:
        self.count = 0

    def observe(self, r: RequestRecord) -> None:
        if self.count is None or r.outcome is Outcome.DROPPED:
            return
        if r.error_category != ErrorCategory.HTTP_4XX or r.http_status not in (401, 403, 404):
            self.count = None
            return
        self.count += 1
        if self.count >= REFUSALS_TO_STOP:
            self.count = None
            self.on_refused(self._why(r))

    def _why(self, r: RequestRecord) -> str:
        if r.http_status in (401, 403):
            env = self.api_key_env
            cause = f"the API key from ${env} was refused" if os.environ.get(env) else f"no API key (${env} is empty)"
        elif "does not serve this model" in (r.error_message or ""):
            cause = f"the server does not know model {r.model!r}"
        else:
            cause = "the API path was not found"
        return (
            f"stopping the run: the first {REFUSALS_TO_STOP} requests all answered HTTP {r.http_status}: {cause}. "
            f"{r.error_message}"
        )


class FailureWatch:
    def __init__(self, on_failing: Callable[[str], None]) -> None:
        self.on_failing = on_failing  # called with the line that says why the run stops
        self.kinds: Counter[str] = Counter()  # the failures in a row, by category
        self.fired = False

    def reset(self) -> None:
        self.kinds.clear()
        self.fired = False

    def observe(self, r: RequestRecord) -> None:
        if self.fired or r.outcome is Outcome.DROPPED or r.scheduled is not None:
            return
        if not failed(r):
            self.kinds.clear()
            return
        self.kinds[str(r.error_category)] += 1
        if self.kinds.total() >= FAILURES_TO_STOP:
            self.fired = True
            kinds = ", ".join(f"{k} {n}" for k, n in self.kinds.most_common())
            self.on_failing(
                f"stopping the run: the last {FAILURES_TO_STOP} requests all failed ({kinds}): the server is failing "
                f"and the run would measure only its errors. The last: {r.error_message}"
            )
