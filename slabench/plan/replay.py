"""Replay a planned load on N replicas of one GPU profile behind a load balancer, in virtual time.

Each replica is a `PlanningEngine` (the simulator's vLLM capacity model). One event loop in time order: an arrival
is routed and added at its time; a replica's step is taken when due; a closed-loop client sends its next request
the moment its last one ends. Balancing, as an AWS Application Load Balancer does it:

- ``round-robin`` (the ALB default): request i goes to replica i mod N;
- ``least-outstanding`` (the ALB's `least_outstanding_requests`): to the replica with the fewest requests in flight,
  ties to the one that got a request least recently (ALB breaks ties at random).

Figures per request, as the grader defines them: TTFT from when the request was due (open loop: sent = scheduled in
virtual time), E2E, TPOT; ITL per token (the gap since the request's previous token, a client streaming every
token). A request the engine rejects (prompt + max_tokens beyond max_model_len: vLLM's HTTP 400) is an error; one
not finished `drain_timeout` seconds after the last arrival is incomplete (the open-loop shapes cancel it then) and
counts as an infinite TTFT/E2E, never as a fast one. Percentiles are type 7 (linear), as numpy's and the grader's.

With `checks`, a run stops as soon as a percentile check on TTFT or E2E has failed for sure and by far (twice as many
requests have passed their deadline without a first/last token as the percentile allows): the fleet is much too
small, and how much no longer matters. A fleet that misses narrowly runs to the end, so its figures are known.
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import chain
from typing import Any

import numpy as np

from slabench.plan.checks import Check
from slabench.plan.workload import PlannedLoad
from slabench.sim.profiles import EngineConfig
from slabench.sim.vllm_fast import PlanningEngine

BALANCERS = ("round-robin", "least-outstanding")


class TokenGaps:
    """Every token's gap since its request's previous token: single gaps and arithmetic series of them (a stretch
    of plain steps), each for some number of tokens. Percentiles to 0.01 % (log bins)."""

    __slots__ = ("points", "series")

    def __init__(self) -> None:
        self.points: list[tuple[float, int]] = []
        self.series: list[tuple[float, float, int, int]] = []

    def add(self, gap: float, count: int) -> None:
        self.points.append((gap, count))

    def add_series(self, first: float, step: float, length: int, count: int) -> None:
        self.series.append((first, step, length, count))

    def _arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """(points as rows of gap, count; series as rows of first, step, length, count)."""
        pts = np.fromiter(chain.from_iterable(self.points), float, 2 * len(self.points)).reshape(-1, 2)
        return pts, np.fromiter(chain.from_iterable(self.series), float, 4 * len(self.series)).reshape(-1, 4)

    def values(self, arrays: tuple[np.ndarray, np.ndarray] | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(gaps, tokens per gap), series expanded."""
        pts, sr = arrays or self._arrays()
        lengths = sr[:, 2].astype(np.int64)
        idx = np.repeat(np.arange(len(sr)), lengths)
        offset = np.arange(lengths.sum()) - np.repeat(np.cumsum(lengths) - lengths, lengths)
        sv = sr[idx, 0] + sr[idx, 1] * offset
        return np.concatenate([pts[:, 0], sv]), np.concatenate([pts[:, 1], sr[idx, 3]]).astype(np.int64)

    def figures(self) -> dict[str, float | None]:
        """itl_p50/p90/p95/p99 (type 7 over tokens, each value within 0.01 %) and itl_mean."""
        keys = ("itl_p50", "itl_p90", "itl_p95", "itl_p99", "itl_mean")
        arrays = self._arrays()
        v, w = self.values(arrays)
        if not len(v):
            return dict.fromkeys(keys)
        v = np.maximum(v, 1e-9)
        lo = float(v.min())
        width = math.log1p(1e-4)
        b = ((np.log(v) - math.log(lo)) / width).astype(np.int64)  # ≥ 0: truncation is the floor
        counts = np.bincount(b, weights=w)
        cum = np.cumsum(counts)
        n = int(cum[-1] + 0.5)

        def at(rank: int) -> float:
            k = int(np.searchsorted(cum, rank + 0.5))  # the bin holding the value of this rank (0-based)
            return lo * math.exp((k + 0.5) * width)

        out: dict[str, float | None] = {}
        for key, q in zip(keys, (0.5, 0.9, 0.95, 0.99), strict=False):
            h = (n - 1) * q
            r = math.floor(h)
            a = at(r)
            out[key] = a + (h - r) * (at(min(r + 1, n - 1)) - a)
        out["itl_mean"] = self.mean(arrays)
        return out

    def mean(self, arrays: tuple[np.ndarray, np.ndarray] | None = None) -> float:
        """The mean gap per token, each series summed in closed form; correctly rounded (`math.fsum`), so the same
        whatever order the replicas reported their gaps in."""
        pts, sr = arrays or self._arrays()
        first, step, length, count = sr.T
        series = count * (length * first + step * length * (length - 1) / 2)
        tokens = float(pts[:, 1].sum() + (length * count).sum())  # whole numbers: exact in any order
        return math.fsum(pts[:, 0] * pts[:, 1]) / tokens + math.fsum(series) / tokens


@dataclass
class Prediction:
    replicas: int
    balancer: str
    complete: bool  # False: stopped early, `stopped` says which check had already failed
    stopped: str | None
    figures: dict[str, float | None]
    requests: int  # sent (open loop: the whole load, unless stopped early)
    ok: int
    errors: int
    incomplete: int
    prompt_tokens: int
    output_tokens: int
    first_arrival: float
    last_arrival: float
    end: float  # the last token of the last request (or where the run stopped)
    preemptions: int
    per_replica_requests: list[int] = field(default_factory=list)

    @property
    def drain_s(self) -> float:
        """From the first arrival until the last request finished."""
        return self.end - self.first_arrival

    def to_dict(self) -> dict[str, Any]:
        return {
            "replicas": self.replicas,
            "balancer": self.balancer,
            "complete": self.complete,
            "stopped": self.stopped,
            "figures": self.figures,
            "requests": self.requests,
            "ok": self.ok,
            "errors": self.errors,
            "incomplete": self.incomplete,
            "prompt_tokens": self.prompt_tokens,
            "output_tokens": self.output_tokens,
            "first_arrival_s": self.first_arrival,
            "last_arrival_s": self.last_arrival,
            "end_s": self.end,
            "drain_s": self.drain_s,
            "preemptions": self.preemptions,
        }


def type7(sorted_values: np.ndarray, q: float) -> float:
    """Percentile q (0..1) of ascending values by linear interpolation; infinite values stay infinite."""
    n = len(sorted_values)
    h = (n - 1) * q
    lo = math.floor(h)
    hi = min(lo + 1, n - 1)
    a, b = float(sorted_values[lo]), float(sorted_values[hi])
    frac = h - lo
    if frac == 0 or a == b:
        return a
    return math.inf if math.isinf(b) else a + frac * (b - a)


class _Deadlines:
    """Requests in arrival order that have passed `target` seconds without their first (or last) token: once more
    than a percentile allows, that percentile is above the target whatever happens next."""

    __slots__ = ("arrivals", "bad", "check", "good", "limit", "ptr")

    def __init__(self, check: Check, arrivals: list[float], good: np.ndarray, counted: int) -> None:
        self.check = check
        self.arrivals = arrivals
        self.good = good  # per request: done in time (errors count as good: they are not in latency figures)
        # type 7: the value at rank floor((n-1)q) is above the target once n - floor((n-1)q) values are. Stop only
        # at twice the share the percentile allows (p95: 10 %; p50: 75 %): a fleet that misses narrowly runs to the
        # end, and its figures tell the search how far it is from the target.
        q = check.quantile
        assert q is not None  # kept for percentile checks only (`Check.per_request_deadline`)
        share = min(2.0 * (1.0 - q), (1.0 - q) + q / 2.0)
        self.limit = max(counted - math.floor((counted - 1) * q), math.ceil(share * counted)) if counted else math.inf
        self.ptr = 0
        self.bad = 0

    def failed(self, now: float) -> bool:
        cutoff = now - self.check.target
        arrivals, good = self.arrivals, self.good
        ptr, n = self.ptr, len(arrivals)
        while ptr < n and arrivals[ptr] < cutoff:
            if not good[ptr]:
                self.bad += 1
            ptr += 1
        self.ptr = ptr
        return self.bad >= self.limit


class FleetReplay:
    """The event loop in virtual time that every fleet shares: arrivals (open loop, or closed-loop clients), each
    replica's steps when due, the per-request books and the early stop on checks. What differs between fleets is
    a hook: `route` (which replica takes request i; −1: none, an error), `finished` (a replica's requests ended),
    and `next_extra` / `extra` (events of the fleet's own, such as a scaling rule's polls, taken before an arrival
    or a step at the same time)."""

    origin = 0.0  # stop messages count seconds from here
    balancer = "round-robin"

    def __init__(self, config: EngineConfig, load: PlannedLoad, checks: Sequence[Check], drain_timeout: float) -> None:
        self.config, self.load = config, load
        self.gaps = TokenGaps()
        self.firsts: list[tuple[str, float]] = []
        self.engines: list[PlanningEngine] = []
        self.version: list[int] = []
        self.events: list[tuple[float, int, int]] = []
        mix = load.mix
        if load.offsets is not None:  # open loop
            self.arrival = [float(t) for t in load.offsets]  # Python floats: engine arithmetic on numpy is slow
            self.rows = np.asarray(load.rows)
            prompt = mix.prompt_tokens[self.rows % len(mix)]
        else:
            self.arrival = []
        n_max = self.n_max = len(self.arrival)
        cap = max(n_max, 1024)  # per request (grown for closed loops)
        self.arr = np.full(cap, math.nan)
        self.first = np.full(cap, math.inf)
        self.last = np.full(cap, math.inf)
        self.gen = np.zeros(cap, dtype=np.int64)
        self.ptok = np.zeros(cap, dtype=np.int64)
        self.error = np.zeros(cap, dtype=bool)
        self.good: dict[Check, np.ndarray] = {}
        self.deadlines: list[_Deadlines] = []
        self.counted = 0
        if load.open_loop:
            self.arr[:n_max] = self.arrival
            self.error[:n_max] = (prompt < 1) | (prompt + mix.max_tokens > config.max_model_len)
            self.counted = int(n_max - self.error[:n_max].sum())
            for c in checks:
                if c.per_request_deadline:
                    self.good[c] = self.error[:n_max].copy()  # errors count as good: not in latency figures
                    self.deadlines.append(_Deadlines(c, self.arrival, self.good[c], self.counted))
        last_due = self.arrival[-1] if n_max else self.origin
        stop_sending = load.duration_s if not load.open_loop and load.duration_s else math.inf
        self.horizon = last_due + drain_timeout if load.open_loop else stop_sending + drain_timeout  # inf: to the end
        self.stopped: str | None = None
        self.next_open = self.n_sent = 0

    def add_replica(self) -> int:
        self.engines.append(PlanningEngine(self.config, token_gaps=self.gaps, first_tokens=self.firsts))
        self.version.append(0)
        return len(self.engines) - 1

    def push(self, k: int) -> None:
        """Replica k's next event (older entries for it are stale)."""
        t = self.engines[k].next_event_time()
        self.version[k] += 1
        if t is not None:
            heapq.heappush(self.events, (t, k, self.version[k]))

    # -- the fleet's hooks
    def route(self, i: int) -> int:
        raise NotImplementedError

    def finished(self, k: int, count: int, t: float) -> None:
        pass

    def next_extra(self, te: float, arrivals_left: bool) -> float:
        return math.inf

    def extra(self, t: float) -> None:
        pass

    def run(self) -> None:
        load, mix = self.load, self.load.mix
        max_len = self.config.max_model_len
        engines, version, events, firsts, push = self.engines, self.version, self.events, self.firsts, self.push
        arrival, n_max, horizon = self.arrival, self.n_max, self.horizon
        rows = self.rows if n_max else None
        arr, first, last, gen, ptok, error = self.arr, self.first, self.last, self.gen, self.ptok, self.error
        open_loop = load.open_loop
        ttft_checks = [(c, g) for c, g in self.good.items() if c.kind == "ttft"]
        e2e_checks = [(c, g) for c, g in self.good.items() if c.kind == "e2e"]
        stop_sending = load.duration_s if not open_loop and load.duration_s else math.inf
        after = load.after_s if load.after_s is not None else ()
        max_requests = load.max_requests or math.inf
        pending: list[tuple[float, int, int]] = []  # closed loop: (time, 0, client)
        if not open_loop:
            assert load.users is not None  # a closed loop has its users
            pending = [(0.0, u, u) for u in range(int(min(load.users, max_requests)))]
            heapq.heapify(pending)
        client_of: dict[int, int] = {}
        next_open = n_sent = 0
        now = self.origin
        stopped: str | None = None
        route, finished, next_extra = self.route, self.finished, self.next_extra

        while True:
            while events and events[0][2] != version[events[0][1]]:
                heapq.heappop(events)
            te = events[0][0] if events else math.inf
            # the next arrival (open-loop list or a closed-loop client's next request)
            ta = arrival[next_open] if next_open < n_max else pending[0][0] if pending else math.inf
            tx = next_extra(te, next_open < n_max)
            if tx <= ta and tx <= te and tx < math.inf:
                if tx > horizon:
                    break
                now = tx
                self.extra(tx)
                continue
            if ta <= te and ta < math.inf:
                now = ta
                if next_open < n_max:
                    i = next_open
                    next_open += 1
                    n_sent = next_open
                    if error[i]:
                        continue  # vLLM's HTTP 400: answered at once
                    req = mix.request(str(i), int(rows[i]))  # type: ignore[index]
                    client = -1
                else:
                    _, _, client = heapq.heappop(pending)
                    i = n_sent
                    n_sent += 1
                    if i >= len(arr):
                        arr, first, last, gen, ptok, error = self._grow(i + 1)
                    arr[i] = ta
                    req = mix.request(str(i), i)
                    if req.prompt_tokens < 1 or req.prompt_tokens + req.max_tokens > max_len:
                        error[i] = True  # vLLM's HTTP 400: answered at once, the client goes on
                        if ta < stop_sending and n_sent + len(pending) < max_requests:
                            heapq.heappush(pending, (ta, 0, client))
                        continue
                k = route(i)
                if k < 0:
                    error[i] = True  # no replica to take it: the load balancer's 503
                    continue
                ptok[i] = req.prompt_tokens
                if client >= 0:
                    client_of[i] = client
                engines[k].add(req, ta)
                push(k)
                continue
            if te == math.inf or te > horizon:
                break
            now = te
            _, k, _ = heapq.heappop(events)
            eng = engines[k]
            eng.step(te)
            if firsts:
                for rid, t in firsts:
                    i = int(rid)
                    first[i] = t
                    for c, good in ttft_checks:
                        if t - arr[i] <= c.target:
                            good[i] = True
                firsts.clear()
            done = eng.pop_finished()
            if done:
                for d in done:
                    i = int(d.request_id)
                    last[i] = d.last_token
                    gen[i] = d.generation_tokens
                    for c, good in e2e_checks:
                        if d.last_token - arr[i] <= c.target:
                            good[i] = True
                    if client_of:
                        client = client_of.pop(i, -1)
                        if client >= 0 and d.last_token < stop_sending and n_sent + len(pending) < max_requests:
                            wait = float(after[i]) if i < len(after) else 0.0
                            heapq.heappush(pending, (d.last_token + wait, 0, client))
                finished(k, len(done), te)
            push(k)
            stopped = self.failed_by(te)
            if stopped:
                break
        self.now, self.stopped, self.next_open, self.n_sent = now, stopped, next_open, n_sent

    def failed_by(self, t: float) -> str | None:
        """Which percentile check has failed for sure by `t` (None: none has), as the stop message says it."""
        for dl in self.deadlines:
            if dl.failed(t):
                c = dl.check
                return (
                    f"{c.name}: {dl.bad:,} requests already past {c.target:g} s without their "
                    f"{'first' if c.kind == 'ttft' else 'last'} token by t = {t - self.origin:.0f} s"
                )
        return None

    def _grow(self, need: int) -> tuple[np.ndarray, ...]:
        """Room for request `need` − 1 and more (a closed loop)."""
        cap = len(self.arr)
        new = max(need, 2 * cap)
        for name, fill in (("arr", math.nan), ("first", math.inf), ("last", math.inf), ("gen", 0), ("ptok", 0)):
            a = getattr(self, name)
            setattr(self, name, np.concatenate([a, np.full(new - cap, fill, dtype=a.dtype)]))
        self.error = np.concatenate([self.error, np.zeros(new - cap, dtype=bool)])
        return self.arr, self.first, self.last, self.gen, self.ptok, self.error

    @property
    def sent(self) -> int:
        """Requests sent (open loop: the whole load, unless stopped early)."""
        if self.load.open_loop:
            return self.n_max if self.stopped is None else self.next_open
        return self.n_sent

    def summary(self, replicas: int, sent_to: list[int]) -> Prediction:
        """The figures of the requests sent, as the grader defines them."""
        n = self.sent
        arr, first, last, gen, error = self.arr[:n], self.first[:n], self.last[:n], self.gen[:n], self.error[:n]
        served = ~error
        finished = np.isfinite(last) & served
        ok = int(finished.sum())
        errors = int(error.sum())
        incomplete = int((served & ~finished).sum())
        figures: dict[str, float | None] = {}
        ttft = np.sort((first - arr)[served])
        e2e = np.sort((last - arr)[served])
        multi = finished & (gen >= 2)
        tpot = np.sort((last[multi] - first[multi]) / (gen[multi] - 1))
        for kind, values in (("ttft", ttft), ("e2e", e2e), ("tpot", tpot)):
            for stat, q in (("p50", 0.5), ("p90", 0.9), ("p95", 0.95), ("p99", 0.99)):
                figures[f"{kind}_{stat}"] = type7(values, q) if len(values) else None
            figures[f"{kind}_mean"] = float(values.mean()) if len(values) else None
        figures |= self.gaps.figures()
        figures["error_rate"] = errors / n if n else None
        figures["incomplete_rate"] = incomplete / n if n else None
        first_arrival = float(arr[0]) if n else 0.0
        stop_time = float(self.now) if self.stopped else None
        end = stop_time if stop_time is not None else (float(last[finished].max()) if ok else first_arrival)
        if stop_time is None and incomplete:
            end = math.inf  # it never drained: the horizon cut it
        return Prediction(
            replicas, self.balancer, self.stopped is None, self.stopped, figures,
            requests=n, ok=ok, errors=errors, incomplete=incomplete,
            prompt_tokens=int(self.ptok[:n][finished].sum()), output_tokens=int(gen[finished].sum()),
            first_arrival=first_arrival, last_arrival=float(arr[-1]) if n else 0.0, end=end,
            preemptions=sum(e.num_preemptions_total for e in self.engines), per_replica_requests=sent_to,
        )  # fmt: skip


class _FixedFleet(FleetReplay):
    """N replicas, all up from the start."""

    def __init__(
        self,
        config: EngineConfig,
        load: PlannedLoad,
        replicas: int,
        balancer: str,
        checks: Sequence[Check],
        drain_timeout: float,
    ) -> None:
        super().__init__(config, load, checks, drain_timeout)
        self.replicas, self.balancer = replicas, balancer
        for _ in range(replicas):
            self.add_replica()
        self.outstanding = [0] * replicas
        self.sent_to = [0] * replicas
        # least outstanding: a heap of (in flight, stamp, replica), stale entries skipped
        self.stamp = [i - replicas for i in range(replicas)]
        self.lor = [(0, i - replicas, i) for i in range(replicas)]
        heapq.heapify(self.lor)
        self.stamps = 0
        self.ticks: tuple[list[float], list[float]] = ([], [])  # `_run_by_replica`'s samples: running, waiting

    def run(self) -> None:
        if self.balancer == "round-robin" and self.load.open_loop:
            self._run_by_replica()
        else:
            super().run()

    def _run_by_replica(self, window_s: float = 10.0, tick_s: float | None = None) -> None:
        """Round robin on a fixed fleet sends request i to replica i mod N whatever the others do, so each replica
        runs on its own, with no event queue across replicas (about a quarter less CPU). A window of virtual time at
        a time: after each, the checks that stop a run that has failed for sure are judged at the window's last step
        (so such a run stops up to one window later than `FleetReplay.run` would; a run that is not stopped gets
        the same figures). Within a replica, an arrival comes before a step due at the same time, as in `run`.

        `tick_s`: also sample the fleet every `tick_s` from the first arrival, as an autoscaled fleet's timeline
        does (before whatever is due at the tick): requests running and waiting summed over the replicas, in
        `self.ticks`, up to the last event."""
        mix, n, replicas = self.load.mix, self.n_max, self.replicas
        arrival, rows, error, firsts = self.arrival, self.rows, self.error, self.firsts
        arr, first, last, gen, ptok = self.arr, self.first, self.last, self.gen, self.ptok
        ttft_checks = [(c, g) for c, g in self.good.items() if c.kind == "ttft"]
        e2e_checks = [(c, g) for c, g in self.good.items() if c.kind == "e2e"]
        nxt = list(range(replicas))  # each replica's next request
        end = min(arrival[0] + window_s, self.horizon) if n else self.horizon
        latest = self.origin  # the last step taken
        last_event = latest  # ... or arrival
        tick0 = arrival[0] if n else 0.0
        running: list[float] = []
        waiting: list[float] = []
        tick = [0] * replicas  # each replica's next tick (index)
        no_tick = math.inf

        def sample(k: int, upto: float) -> float:
            """Replica k's state at each of its ticks up to `upto` (nothing of it happens before them); its next."""
            st = self.engines[k].stats()
            j = tick[k]
            while tick0 + j * tick_s <= upto:  # type: ignore[operator]  # (called with ticks only)
                if j == len(running):
                    running.append(0.0)
                    waiting.append(0.0)
                running[j] += st["num_requests_running"]
                waiting[j] += st["num_requests_waiting"]
                j += 1
            tick[k] = j
            return tick0 + j * tick_s  # type: ignore[operator]

        def steps(k: int, limit: float, at_limit: bool, nt: float) -> float:
            """Replica k's steps due before `limit` (and at it, `at_limit`), sampling the ticks they pass; its next
            tick."""
            nonlocal latest
            eng = self.engines[k]
            while True:
                tick_within = nt < limit or (at_limit and nt == limit)
                last = eng.run_until(nt, False) if tick_within else eng.run_until(limit, at_limit)
                if last is not None and last > latest:
                    latest = last
                if not tick_within:
                    return nt
                t = eng.next_event_time()  # at or after the tick
                if t is None or t > limit or (t == limit and not at_limit):
                    return nt
                nt = sample(k, t)

        while True:
            due = math.inf  # the next step of any replica, or arrival
            for k, eng in enumerate(self.engines):
                nt = no_tick if tick_s is None else tick0 + tick[k] * tick_s
                i = nxt[k]
                while i < n and arrival[i] <= end:
                    a = arrival[i]
                    nt = steps(k, a, False, nt)  # an arrival comes before a step due at the same time
                    if a >= nt:
                        nt = sample(k, a)
                    if not error[i]:
                        req = mix.request(str(i), int(rows[i]))
                        ptok[i] = req.prompt_tokens
                        eng.add(req, a)
                        self.sent_to[k] += 1
                    last_event = max(last_event, a)
                    i += replicas
                nxt[k] = i
                if steps(k, end, True, nt) <= end:
                    sample(k, end)
                t = eng.next_event_time()
                if t is not None and t < due:
                    due = t
                for d in eng.pop_finished():
                    j = int(d.request_id)
                    last[j], gen[j] = d.last_token, d.generation_tokens
            if firsts:
                ids = np.fromiter((int(rid) for rid, _ in firsts), dtype=np.int64, count=len(firsts))
                first[ids] = [t for _, t in firsts]
                firsts.clear()
            for checks, at in ((ttft_checks, first), (e2e_checks, last)):
                for c, good in checks:
                    good |= at[:n] - arr[:n] <= c.target
            if min(nxt) < n:
                due = min(due, arrival[min(nxt)])
            idle = due == math.inf
            self.stopped = self.failed_by(latest)
            if self.stopped or idle or end >= self.horizon:
                break
            # the next window with something in it: a sparse load (the floor's requests 10⁴ s apart) would
            # otherwise pass ~10⁵ empty windows, each judging the checks again on the same steps
            windows = max(1, math.ceil((min(due, self.horizon) - end) / window_s))
            end = min(end + windows * window_s, self.horizon)
        self.now = max(latest, last_event)
        self.next_open = self.n_sent = bisect_right(arrival, end) if self.stopped else n
        if tick_s is not None:
            # the ticks an event came after (a run cut by the horizon: every tick up to it)
            upto = self.horizon if not (idle or self.stopped) else self.now
            kept = bisect_right([tick0 + j * tick_s for j in range(len(running))], upto)
            self.ticks = (running[:kept], waiting[:kept])

    def route(self, i: int) -> int:
        if self.balancer == "round-robin":
            k = i % self.replicas
        else:
            lor, outstanding, stamp = self.lor, self.outstanding, self.stamp
            while True:
                count, st, k = lor[0]
                if count == outstanding[k] and st == stamp[k]:
                    break
                heapq.heappop(lor)
            self.stamps += 1
            stamp[k] = self.stamps
            heapq.heapreplace(lor, (count + 1, self.stamps, k))
        self.sent_to[k] += 1
        self.outstanding[k] += 1
        return k

    def finished(self, k: int, count: int, t: float) -> None:
        self.outstanding[k] -= count
        if self.balancer != "round-robin":
            heapq.heappush(self.lor, (self.outstanding[k], self.stamp[k], k))


def replay(
    config: EngineConfig,
    load: PlannedLoad,
    replicas: int,
    balancer: str = "round-robin",
    checks: Sequence[Check] = (),
    drain_timeout: float = 300.0,
) -> Prediction:
    if balancer not in BALANCERS:
        raise ValueError(f"balancer {balancer!r}: use one of {BALANCERS}")
    fleet = _FixedFleet(config, load, replicas, balancer, checks, drain_timeout)
    fleet.run()
    return fleet.summary(replicas, fleet.sent_to)
