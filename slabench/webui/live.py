"""The live view's figures: a sliding window and since-start aggregate over the records that reach the master. Pure:
every clock reading is passed in, nothing here does I/O or knows Locust.

Definitions (the same as `sla.single_run`, so the live figures and the final verdict speak one language):
- latencies (TTFT, ITL per token, TPOT, E2E) from `slabench.core.metrics` (ITL through the
  aggregator's own column-wise formula, `slabench.analysis.columns.record_itl`), over `ok` records;
  percentiles are type 7 (numpy ``linear``); ITL percentiles pool every token gap; TTFT counts from `scheduled`
  under an open-loop shape (what the verdict grades: free of coordinated omission), else from `sent`, and
  `ttft_sent` (open loop only) counts from when the request went out; `ttfat` (a reasoning model's second clock:
  to the first answer token, after the reasoning) counts from the same start as `ttft`; `reasoning` says some `ok`
  record reasoned first (reasoning tokens, or an answer later than its first token), so the view shows TTFAT;
- lateness (sent − scheduled) over every record that has both, whatever its outcome (open loop only);
- failed share = (error + incomplete) / (records that are not `dropped`); each category's share over the same base;
  `dropped` records (cancelled at stop, lost with a worker, not sent) are counted by category, outside the rates;
- output tokens/s = completion tokens of `ok` records / the span they finished in.

Time: a record belongs to the window by when it finished, on the wall clock of the process that measured it
(`wall_sent` + (end − sent); workers' monotonic clocks are not comparable, their wall clocks are NTP-synced), or by
when it arrived when it carries no times. The window is (now − window_s, now]; its span for rates is
min(window_s, now − start). At test stop the clock is frozen, so the view keeps showing the run as it ended.
"Since start" percentiles are exact up to `Quantiles.exact_cap` values each, then within ±0.5% (see `quantiles`).
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from slabench.analysis.columns import record_itl
from slabench.core import metrics
from slabench.core.record import Outcome, RequestRecord, StageUnit
from slabench.webui.quantiles import Quantiles

SCHEMA_VERSION = 1
PCTS = (50.0, 95.0, 99.0)
PCT_NAMES = ("p50", "p95", "p99")
LATENCIES = ("ttft", "ttfat", "ttft_sent", "itl", "tpot", "e2e", "lateness")
DEFAULT_WINDOW_S = 30.0


@dataclass(frozen=True, slots=True)
class Entry:
    """What the window keeps of one record."""

    finished: float  # wall clock
    outcome: Outcome
    category: str | None  # error category (or outcome) of a record that is not ok
    ttft: float | None  # the graded one: from `scheduled` in open loop, else from `sent`
    ttfat: float | None  # to the first answer token (after any reasoning), from the same start as `ttft`
    ttft_sent: float | None  # open loop only: from `sent`
    tpot: float | None
    e2e: float | None
    lateness: float | None
    itl: np.ndarray  # per-token gaps, seconds
    output_tokens: int | None
    reasoned: bool  # an ok record whose model reasoned before answering


def reasoned(r: RequestRecord) -> bool:
    if r.reasoning_tokens:
        return True
    first, answer = r.first_token, r.first_answer_token
    return first is not None and answer is not None and answer > first


def finished_wall(r: RequestRecord, arrived: float) -> float:
    if r.wall_sent is not None and r.sent is not None and r.end is not None:
        return r.wall_sent + (r.end - r.sent)
    return arrived


def entry(r: RequestRecord, arrived: float) -> Entry:
    ok = r.outcome is Outcome.OK
    open_loop = r.scheduled is not None
    return Entry(
        finished=finished_wall(r, arrived),
        outcome=r.outcome,
        category=None if ok else str(r.error_category or r.outcome),
        ttft=(metrics.ttft_scheduled(r) if open_loop else metrics.ttft(r)) if ok else None,
        ttfat=(metrics.ttft_answer_scheduled(r) if open_loop else metrics.ttft_answer(r)) if ok else None,
        ttft_sent=metrics.ttft(r) if ok and open_loop else None,
        tpot=metrics.tpot(r) if ok else None,
        e2e=metrics.e2e(r) if ok else None,
        lateness=metrics.lateness(r),
        itl=record_itl(r) if ok else np.empty(0),
        output_tokens=r.completion_tokens if ok else None,
        reasoned=ok and reasoned(r),
    )


def _pcts(values: np.ndarray | list[float]) -> dict[str, float | None]:
    arr = np.asarray(values, dtype=float)
    if arr.size == 0:
        return dict.fromkeys(PCT_NAMES)
    return dict(zip(PCT_NAMES, (float(x) for x in np.percentile(arr, PCTS, method="linear")), strict=True))


def _rate(num: float, span: float | None) -> float | None:
    return num / span if span else None


class _Counts:
    """Outcome counts and token sums over a set of entries."""

    def __init__(self) -> None:
        self.records = 0
        self.ok = 0
        self.counted = 0  # not dropped
        self.failed = 0  # error + incomplete
        self.categories: Counter[str] = Counter()
        self.dropped: Counter[str] = Counter()
        self.output_tokens = 0
        self.open_loop = False
        self.reasoning = False

    def add(self, e: Entry) -> None:
        self.records += 1
        if e.lateness is not None:
            self.open_loop = True
        if e.outcome is Outcome.DROPPED:
            self.dropped[e.category or "dropped"] += 1
            return
        self.counted += 1
        if e.outcome is Outcome.OK:
            self.ok += 1
            self.reasoning = self.reasoning or e.reasoned
            self.output_tokens += e.output_tokens or 0
        else:
            self.failed += 1
            self.categories[e.category or str(e.outcome)] += 1

    def figures(self, span: float | None) -> dict[str, Any]:
        n = self.counted
        return {
            "records": self.records,
            "ok": self.ok,
            "counted": n,
            "failed": self.failed,
            "span_s": span,
            "requests_per_s": _rate(self.ok, span),
            "output_tokens": self.output_tokens,
            "output_tokens_per_s": _rate(self.output_tokens, span),
            "failed_rate": self.failed / n if n else None,
            "errors": {k: {"count": v, "rate": v / n} for k, v in sorted(self.categories.items())},
            "dropped": dict(sorted(self.dropped.items())),
            "open_loop": self.open_loop,
            "reasoning": self.reasoning,
        }


def stage_view(level: int | None, unit: str | None, repeat: int | None, phase: str | None) -> dict[str, Any] | None:
    """A record's stage for the LLM tab: its level in users or req/s (`unit`), repeat and phase; None without one."""
    shown: int | float | None = level
    if level is not None and unit is not None:
        load = StageUnit(unit)
        shown, unit = load.load(level), load.load_unit
    out = {"level": shown, "unit": unit, "repeat": repeat, "phase": phase}
    return out if any(v is not None for v in out.values()) else None


class LiveAggregator:
    def __init__(self, window_s: float = DEFAULT_WINDOW_S, exact_cap: int | None = None) -> None:
        if window_s <= 0:
            raise ValueError("window_s must be positive")
        self.window_s = window_s
        self._exact_cap = exact_cap
        self.reset(None)

    def reset(self, started: float | None) -> None:
        """A new run starts (wall clock)."""
        self.started = started
        self.stopped: float | None = None
        self._window: deque[Entry] = deque()
        self._total = _Counts()
        kw = {} if self._exact_cap is None else {"exact_cap": self._exact_cap}
        self._quantiles = {k: Quantiles(**kw) for k in LATENCIES}
        self._stage: tuple[float, dict[str, Any]] | None = None

    def stop(self, at: float) -> None:
        """The run stopped: the clock freezes here."""
        self.stopped = at

    def add(self, r: RequestRecord, arrived: float) -> None:
        e = entry(r, arrived)
        self._window.append(e)
        self._total.add(e)
        q = self._quantiles
        for name in ("ttft", "ttfat", "ttft_sent", "tpot", "e2e", "lateness"):
            v = getattr(e, name)
            if v is not None:
                q[name].add((v,))
        if e.itl.size:
            q["itl"].add(e.itl)
        stage = stage_view(r.stage_level, r.stage_unit, r.stage_repeat, r.stage_phase)
        if stage is not None:
            at = r.wall_sent if r.wall_sent is not None else arrived
            if self._stage is None or at >= self._stage[0]:
                self._stage = (at, stage)

    @property
    def total_records(self) -> int:
        return self._total.records

    def clock(self, now: float) -> float:
        return min(now, self.stopped) if self.stopped is not None else now

    def _in_window(self, now: float) -> list[Entry]:
        lo = now - self.window_s
        # Entries arrive roughly in finishing order; dropping from the left is only for memory (the filter below
        # decides what is in the window), and an entry older than the window can never come back into it.
        while self._window and self._window[0].finished <= lo:
            self._window.popleft()
        return [e for e in self._window if e.finished > lo]

    def _span(self, now: float, window: bool) -> float | None:
        elapsed = now - self.started if self.started is not None else None
        if window:
            return self.window_s if elapsed is None else max(0.0, min(self.window_s, elapsed)) or None
        return elapsed if elapsed and elapsed > 0 else None

    def snapshot(
        self,
        now: float,
        in_flight: int | None = None,
        stage: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """The figures as of `now` (wall clock). `in_flight` and `stage` come from the runner when it knows them
        (the shape's current stage beats the stage of the latest record)."""
        now = self.clock(now)
        entries = self._in_window(now)
        counts = _Counts()
        for e in entries:
            counts.add(e)
        window = counts.figures(self._span(now, window=True))
        lat = {}
        for k in LATENCIES:
            vals: np.ndarray | list[float]
            if k == "itl":
                vals = np.concatenate([e.itl for e in entries]) if entries else []
            else:
                vals = [v for e in entries if (v := getattr(e, k)) is not None]
            lat[k] = {**_pcts(vals), "n": len(vals)}
        window["latency"] = lat

        total = self._total.figures(self._span(now, window=False))
        total["latency"] = {}
        for k, q in self._quantiles.items():
            total["latency"][k] = {
                **dict(zip(PCT_NAMES, q.percentiles(PCTS), strict=True)),
                "n": q.count,
                "exact": q.exact,
            }
        if stage is None and self._stage is not None:
            stage = self._stage[1]
        return {
            "schema_version": SCHEMA_VERSION,
            "now": now,
            "started": self.started,
            "stopped": self.stopped,
            "elapsed_s": None if self.started is None else now - self.started,
            "window_s": self.window_s,
            "stage": stage or None,
            "in_flight": in_flight,
            "window": window,
            "total": total,
        }


def add_all(agg: LiveAggregator, records: Iterable[RequestRecord], arrived: float) -> None:
    for r in records:
        agg.add(r, arrived)


SERIES_KEYS = (
    *(f"{k}_{p}" for k in LATENCIES for p in PCT_NAMES),
    "output_tokens_per_s",
    "requests_per_s",
    "failed_rate",
    "in_flight",
    "queue_waiting",
    "queue_running",
    "kv_usage",
)


def series_point(snap: dict[str, Any], server: dict[str, Any] | None = None) -> dict[str, Any]:
    """One point of the charts' time series: the window figures at `snap["now"]`, and the server's gauges."""
    w = snap["window"]
    p: dict[str, Any] = {"t": snap["now"]}
    for k in LATENCIES:
        for name in PCT_NAMES:
            p[f"{k}_{name}"] = w["latency"][k][name]
    p["output_tokens_per_s"] = w["output_tokens_per_s"]
    p["requests_per_s"] = w["requests_per_s"]
    p["failed_rate"] = w["failed_rate"]
    p["in_flight"] = snap["in_flight"]
    server = server or {}
    p["queue_waiting"] = server.get("waiting")
    p["queue_running"] = server.get("running")
    p["kv_usage"] = server.get("kv_usage")
    return p


class Series:
    """The charts' history: a bounded list of points, each with a sequence number so a page fetches only what is
    new."""

    def __init__(self, max_points: int = 1800) -> None:
        self.max_points = max_points
        self._points: deque[dict[str, Any]] = deque(maxlen=max_points)
        self._seq = 0

    def clear(self) -> None:
        self._points.clear()

    def append(self, point: dict[str, Any]) -> None:
        self._seq += 1
        self._points.append({"seq": self._seq, **point})

    def since(self, seq: int) -> list[dict[str, Any]]:
        return [p for p in self._points if p["seq"] > seq]

    @property
    def last_seq(self) -> int:
        return self._seq
