"""Do the harness and the server agree? Client-measured TTFT/E2E and token counts against the server's own
histograms and counters over the same window of wall-clock time. Pure functions over records and scrapes
(`slabench.evidence.scrape.read_scrapes`); the report shows the dicts they return.

What to expect when they agree:
- tokens: the records' server-reported usage sums equal the server's counter deltas exactly, when this run was the
  server's only traffic in the window and every request finished (a cancelled request's prompt was counted by the
  server at prefill, but its record has no usage);
- TTFT and E2E: the client's mean is at or above the server's (the client's clock starts before the server sees the
  request and stops after the server sent the token: HTTP, chat templating, tokenization and the network lie between),
  and within the tolerance; when the request counts match, the client's distribution lies at or right of the
  server's at every histogram bucket bound (each request's client time ≥ its server time).

Server quantiles are estimated from histogram buckets by linear interpolation inside the bucket (as Prometheus'
`histogram_quantile`), so they are as coarse as the buckets; means are exact (sum / count).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from slabench.core import metrics
from slabench.core.record import Outcome, RequestRecord, StageUnit, unit_before_stage_unit

SCHEMA_VERSION = 1
LATENCIES = {"ttft": ("time_to_first_token_seconds", metrics.ttft), "e2e": ("e2e_request_latency_seconds", metrics.e2e)}
TOKENS = {"prompt_tokens": "prompt_tokens_total", "generation_tokens": "generation_tokens_total"}


@dataclass(frozen=True)
class Tolerance:
    """How far the client's mean may sit above the server's: abs_s + rel × server mean. The client overhead is
    roughly a constant (HTTP, templating, tokenization), so a small absolute part dominates for short latencies."""

    abs_s: float = 0.25
    rel: float = 0.25

    def allows(self, client_mean: float, server_mean: float) -> bool:
        return abs(client_mean - server_mean) <= self.abs_s + self.rel * server_mean


def wall_end(r: RequestRecord) -> float | None:
    """Wall-clock time the request ended (its wall anchor plus its monotonic duration)."""
    if r.wall_sent is None or r.end is None or r.sent is None:
        return None
    return r.wall_sent + (r.end - r.sent)


def span(records: Iterable[RequestRecord]) -> tuple[float, float] | None:
    """Wall-clock window covering every record that went out: (first sent, last ended)."""
    starts, ends = [], []
    for r in records:
        if r.wall_sent is not None:
            starts.append(r.wall_sent)
            ends.append(wall_end(r) or r.wall_sent)
    return (min(starts), max(ends)) if starts else None


def bracket(
    scrapes: Sequence[dict[str, Any]], start: float, end: float
) -> tuple[dict[str, Any], dict[str, Any], bool] | None:
    """The last scrape read before `start` and the first one sent after `end`, and whether both exist (a clean
    bracket: the counter deltas cover the whole window). Falls back to the first/last scrape."""
    if len(scrapes) < 2:
        return None
    before = [s for s in scrapes if s.get("t_recv", s["t"]) <= start]
    after = [s for s in scrapes if s["t"] >= end]
    first = before[-1] if before else scrapes[0]
    last = after[0] if after else scrapes[-1]
    if last["t"] <= first["t"]:
        return None
    return first, last, bool(before and after)


def _reset(a: float, b: float) -> bool:
    return b < a


def counter_delta(first: dict[str, Any], last: dict[str, Any], name: str) -> float | None:
    a: float | None = first.get("counters", {}).get(name)
    b: float | None = last.get("counters", {}).get(name)
    if a is None or b is None:
        return None
    return b if _reset(a, b) else b - a


def histogram_delta(first: dict[str, Any], last: dict[str, Any], name: str) -> dict[str, Any] | None:
    """count, sum and cumulative buckets of what the server observed between two scrapes."""
    a, b = first.get("histograms", {}).get(name), last.get("histograms", {}).get(name)
    if a is None or b is None:
        return None
    if _reset(a["count"], b["count"]):
        a = {"count": 0.0, "sum": 0.0, "buckets": {}}
    buckets = {le: v - a["buckets"].get(le, 0.0) for le, v in b.get("buckets", {}).items()}
    return {"count": b["count"] - a["count"], "sum": b["sum"] - a["sum"], "buckets": buckets}


def _le(key: str) -> float:
    return math.inf if key == "+Inf" else float(key)


def bucket_quantile(buckets: dict[str, float], q: float) -> float | None:
    """Quantile q of a cumulative histogram, interpolating linearly inside the bucket (lower edge 0 for the first).
    None without observations; the highest finite bound when the quantile falls in +Inf."""
    items = sorted(((_le(k), v) for k, v in buckets.items()), key=lambda kv: kv[0])
    if not items or items[-1][1] <= 0:
        return None
    rank = q * items[-1][1]
    prev_le, prev_c = 0.0, 0.0
    for le, c in items:
        if c >= rank and c > prev_c:
            if math.isinf(le):
                return prev_le
            return prev_le + (le - prev_le) * (rank - prev_c) / (c - prev_c)
        if not math.isinf(le):
            prev_le = le
        prev_c = c
    return prev_le


def dominates(client: Sequence[float], buckets: dict[str, float]) -> bool:
    """At every finite bucket bound, no more client values at or below it than server observations: what per-request
    client ≥ server implies when both count the same requests."""
    values = np.sort(np.asarray(client, dtype=float))
    for k, c in buckets.items():
        le = _le(k)
        if math.isinf(le):
            continue
        if int(np.searchsorted(values, le, side="right")) > c + 1e-9:
            return False
    return True


def _latency(values: list[float], h: dict[str, Any] | None, tol: Tolerance) -> dict[str, Any]:
    out: dict[str, Any] = {"client_n": len(values), "server_n": None if h is None else h["count"]}
    cm = float(np.mean(values)) if values else None
    sm = h["sum"] / h["count"] if h and h["count"] > 0 else None
    out.update(
        client_mean=cm,
        server_mean=sm,
        client_p50=float(np.quantile(values, 0.5)) if values else None,
        server_p50_est=bucket_quantile(h["buckets"], 0.5) if h and h["count"] > 0 else None,
        client_p95=float(np.quantile(values, 0.95)) if values else None,
        server_p95_est=bucket_quantile(h["buckets"], 0.95) if h and h["count"] > 0 else None,
    )
    if cm is None or sm is None or h is None:
        out.update(client_minus_server=None, client_ge_server=None, within_tolerance=None, dominates=None)
        return out
    same_requests = h["count"] == len(values)
    out.update(
        client_minus_server=cm - sm,
        client_ge_server=cm >= sm,
        within_tolerance=tol.allows(cm, sm),
        dominates=dominates(values, h["buckets"]) if same_requests else None,
    )
    return out


def crosscheck(
    records: Iterable[RequestRecord],
    scrapes: Sequence[dict[str, Any]],
    window: tuple[float, float] | None = None,
    tolerance: Tolerance | None = None,
) -> dict[str, Any] | None:
    """Client vs server over `window` (default: the records' span). None when the scrapes cannot bracket it.

    Client side: records that went out inside the window; latencies from OK records, token sums from records whose
    counts the server reported (`token_source == "server"`)."""
    tol = tolerance or Tolerance()
    recs = list(records)
    window = window or span(recs)
    if window is None:
        return None
    start, end = window
    b = bracket(scrapes, start, end)
    if b is None:
        return None
    first, last, clean = b
    inside = [r for r in recs if r.wall_sent is not None and start <= r.wall_sent <= end]
    ok = [r for r in inside if r.outcome is Outcome.OK]
    served = [r for r in inside if r.token_source == "server"]
    out: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "window": {
            "start": start,
            "end": end,
            "from_scrape": first["t"],
            "to_scrape": last["t"],
            "clean": clean,
        },
        "tolerance": {"abs_s": tol.abs_s, "rel": tol.rel},
        "requests": {
            "client": len(inside),
            "client_ok": len(ok),
            "client_without_server_usage": len(inside) - len(served),
            "server_success": counter_delta(first, last, "request_success_total"),
        },
    }
    for key, (hist, fn) in LATENCIES.items():
        values = [v for v in (fn(r) for r in ok) if v is not None]
        out[key] = _latency(values, histogram_delta(first, last, hist), tol)
    for key, counter in TOKENS.items():
        client = sum((r.prompt_tokens if key == "prompt_tokens" else r.completion_tokens) or 0 for r in served)
        server = counter_delta(first, last, counter)
        out[key] = {"client": client, "server": server, "equal": None if server is None else client == server}
    out["agree"] = _agree(out)
    return out


def _agree(c: dict[str, Any]) -> bool | None:
    """One verdict: every check that could be made passed. None when nothing could be checked."""
    checks = [c[k]["equal"] for k in TOKENS] + [
        c[k][f] for k in LATENCIES for f in ("client_ge_server", "within_tolerance", "dominates")
    ]
    made = [x for x in checks if x is not None]
    return all(made) if made else None


def by_stage(
    records: Iterable[RequestRecord], scrapes: Sequence[dict[str, Any]], tolerance: Tolerance | None = None
) -> list[dict[str, Any]]:
    """One cross-check per (stage level, repeat), each over its records' span. Stages back to back share the
    boundary scrape, so a stage's window may include the tail of the previous one: `window.clean` and the
    request counts say how exact each comparison is."""
    groups: dict[tuple[int | float | None, str, int | None], list[RequestRecord]] = {}
    for r in records:
        unit = StageUnit(r.stage_unit or unit_before_stage_unit(r.scheduled))
        load = None if r.stage_level is None else unit.load(r.stage_level)
        groups.setdefault((load, unit.load_unit, r.stage_repeat), []).append(r)
    out = []
    for (load, level_unit, repeat), recs in sorted(groups.items(), key=lambda kv: (kv[0][0] or -1, kv[0][2] or -1)):
        c = crosscheck(recs, scrapes, tolerance=tolerance)
        if c is not None:  # the level in its unit (users, or req/s for the rate shapes' thousandths)
            out.append({"stage_level": load, "level_unit": level_unit, "stage_repeat": repeat, **c})
    return out
