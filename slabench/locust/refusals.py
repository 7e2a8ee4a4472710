"""A run whose requests are all refused from the start — a wrong API key, model name or URL — measures nothing:
after `REFUSALS_TO_STOP` answers of 401/403/404 in a row, the watch names the cause in one line, once. Anything
else coming back first ends the watch for the run (the key, model and URL can work)."""

from __future__ import annotations

import os
from collections.abc import Callable

from slabench.core.record import ErrorCategory, Outcome, RequestRecord

REFUSALS_TO_STOP = 10


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
