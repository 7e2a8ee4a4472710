"""Is every request accounted for? Pure functions over a run's records, what it knows about lost workers, and the
server's own request counter (scraped /metrics), for `run_status.json`, the log and the exit code.

Each record says whether its request reached the server: surely (the server answered something), maybe (sent, but
nothing came back: a timeout, a cancel mid-request, lost with its worker) or not (a connection refused, never sent).
When this run was the server's only traffic, the server's count of requests received between the run's first and
last scrape lies between the sure count and the sure + maybe count; above it, the server saw requests that have no
record (a lost worker's last requests, when its journal could not be read) — or other clients of the same server.
A record stands for one request plus the redirects it followed (each hop is a request the server counts): a
redirect loop given up after 5 hops is one record and 6 requests, not 5 "unrecorded" ones.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from slabench.core.record import ErrorCategory, Outcome, RequestRecord
from slabench.evidence.scrape import RECEIVED

SURE, MAYBE, NO = "sure", "maybe", "no"


def reached_server(r: RequestRecord) -> str:
    """Whether this record's request reached the server: SURE, MAYBE or NO."""
    cat = r.error_category
    if r.outcome in (Outcome.OK, Outcome.INCOMPLETE):
        return SURE
    if r.outcome is Outcome.ERROR:
        if cat is ErrorCategory.CONNECT:
            return NO
        if cat is ErrorCategory.TIMEOUT and r.http_status is None and r.first_byte is None:
            return MAYBE
        return SURE
    if cat is ErrorCategory.LOST_WITH_WORKER:
        return MAYBE
    if cat is ErrorCategory.NOT_SENT or r.sent is None:
        return NO
    return SURE if r.first_byte is not None else MAYBE


@dataclass
class Tally:
    """Running counts over the records a run stores (kept by the master / local runner as records arrive)."""

    records: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    reach: Counter[str] = field(default_factory=Counter)  # requests (hops included) by whether they reached the server
    hops: int = 0  # redirects followed: requests the server received beyond one per record
    responded: int = 0  # requests the server answered to the end: OK, an HTTP error, a cut stream (not ours, dropped)

    def add(self, records: Iterable[RequestRecord]) -> None:
        for r in records:
            self.records += 1
            self.outcomes[str(r.error_category or r.outcome)] += 1
            reach = reached_server(r)
            hops = r.redirects or 0
            self.hops += hops
            self.reach[reach] += 1 + hops
            self.responded += reach == SURE and r.outcome is not Outcome.DROPPED

    @property
    def answered(self) -> int:
        return self.outcomes[str(Outcome.OK)]


def server_received(scrapes: Sequence[dict[str, Any]]) -> float | None:
    """Requests the server counted between the first and the last scrape (None without the counter). A counter that
    went down (server restart) counts from zero."""
    values = [s["counters"][RECEIVED] for s in scrapes if RECEIVED in s.get("counters", {})]
    if len(values) < 2:
        return None
    total = 0.0
    for a, b in itertools.pairwise(values):
        total += b - a if b >= a else b
    return total


def reconcile(tally: Tally, server: float | None) -> dict[str, Any]:
    """The records against the server's count."""
    sure, maybe = tally.reach[SURE], tally.reach[MAYBE]
    out: dict[str, Any] = {
        "records": tally.records,
        "reached_server_surely": sure,
        "reached_server_maybe": maybe,
        "redirects_followed": tally.hops,
        "server_received": None if server is None else int(server),
    }
    if server is None:
        out["unrecorded"] = None
        out["note"] = "the server's request counter was not scraped; records are not reconciled with the server"
        return out
    unrecorded = max(0, int(server) - sure - maybe)
    out["unrecorded"] = unrecorded
    if unrecorded:
        out["note"] = (
            f"the server received {int(server)} requests, {unrecorded} more than the records account for "
            "(requests a lost worker sent after its last report, or another client of the same server)"
        )
    elif server < sure:
        out["note"] = (
            f"the server counted {int(server)} requests, fewer than the {sure} requests it answered "
            "(its counter counts a request when the response ends, or it was restarted)"
        )
    else:
        out["note"] = "every request the server received has a record"
    return out


def incomplete_reasons(tally: Tally, status: dict[str, Any]) -> list[str]:
    """Why a run did not measure what it claims (empty: complete). `status` is the run_status.json being built."""
    reasons = []
    if tally.responded == 0:  # not even an error came back (an HTTP error is an answer: the contract judges it)
        reasons.append("no request was answered" if tally.records else "no request was made")
    lost = status.get("lost_workers") or {}
    if lost:
        reasons.append(f"{len(lost)} worker(s) lost: {', '.join(sorted(lost))}")
    if status.get("workers_without_final_batch"):
        reasons.append(f"no final batch from worker(s) {', '.join(status['workers_without_final_batch'])}")
    if status.get("master_lost"):
        reasons.append("the master was lost; records recovered from the workers' spools")
    for cat in (ErrorCategory.LOST_WITH_WORKER, ErrorCategory.NOT_SENT):
        n = tally.outcomes[str(cat)]
        if n:
            what = "lost with their worker" if cat is ErrorCategory.LOST_WITH_WORKER else "not sent"
            reasons.append(f"{n} request(s) {what}")
    # The server counting more requests than the records is not a reason by itself: without a lost worker every
    # request has a record by construction, and the excess is another client of the same server.
    return reasons
