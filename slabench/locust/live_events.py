"""Locust's own live view of slabench's records (its table, header and charts), never used for grading."""

from __future__ import annotations

from locust.env import Environment

from slabench.core import metrics
from slabench.core.record import Outcome, RequestRecord


def fire_locust_events(env: Environment, r: RequestRecord) -> None:
    """One Locust request event per request (the E2E row, failures included), so the Aggregated row, the header's
    RPS and the failure % count each request once. TTFT, ITL and TPOT of answered requests are rows of their own,
    logged into their stats entries directly: shown (and shipped to the master) like any row, but not added to the
    Aggregated row and not fired as requests."""
    if r.outcome is Outcome.DROPPED:
        return  # cancelled at stop or lost: ours, not the server's; counted in the records and the summary
    ok = r.outcome is Outcome.OK
    if ok:
        entries = env.stats.entries
        for name, value in (("TTFT", metrics.ttft(r)), ("ITL", metrics.mean_itl(r)), ("TPOT", metrics.tpot(r))):
            if value is not None:
                entries[(name, "LLM")].log(value * 1000, 0)  # type: ignore[arg-type]  # float ms, as Locust's own
    e2e = metrics.e2e(r)
    env.events.request.fire(
        request_type="LLM",
        name="E2E",
        response_time=(e2e or 0) * 1000,
        response_length=r.completion_tokens or 0,
        exception=None if ok else Exception(f"{r.error_category}: {r.error_message}"),
        context={},
    )
