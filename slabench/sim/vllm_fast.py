"""The vLLM capacity model of `vllm_engine`, with the bookkeeping made fast enough to plan fleets in virtual time.

`VllmEngine` touches every running request on every step: right for a server that streams each token, but a
20,000-request burst is ~23 M decode tokens, a minute of Python per fleet size. `PlanningEngine` computes the same
steps with the same scheduler and roofline, and differs only in how it keeps the books:

- **The decode cohort.** Requests that decode one token per step — nearly all of them — are kept as a cohort: their
  progress is "tokens at join + cohort steps since", the KV blocks they need are counted from a histogram of their
  positions modulo the block size, and the step's token count and context sums come from running totals. A request
  is touched again only when it finishes (or emits a stream chunk), is preempted or aborted: a heap says when.
- **Prefill chunks and admissions** (the few other requests) go through the same code as `VllmEngine`. A step that
  must preempt (not enough free blocks for everyone) falls back to `VllmEngine`'s own scheduling for that step.
- **Stretches of plain steps.** While the cohort is all that runs and nothing can change, `next_event_time()` reports
  the end of the stretch, so a virtual-time driver does not visit each step; an `add` or `abort` inside a stretch
  applies the steps before it first.

A unit test runs random workloads (prefix caching, preemption, chunked prefill, stream intervals, aborts) through
both engines and requires identical per-request timings, engine counters and token gaps.

Emissions follow `stream_interval` as in `VllmEngine` (only the order of a step's emissions may differ). Planning uses
a large interval: chunks are not needed, and each one is a cohort event. `token_gaps` records, for every sampled token
after a request's first, the time since its previous token: the inter-token latency a client streaming every token
sees; `first_tokens` collects each request's first token as it is sampled (for a driver that judges TTFT as it
goes).
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_right
from itertools import accumulate
from typing import Protocol

from slabench.sim.engine import Emission, SimRequest, StepResult
from slabench.sim.profiles import EngineConfig
from slabench.sim.vllm_engine import _DONE, _RUNNING, VllmModel, _Seq


class TokenGaps(Protocol):
    def add(self, gap: float, count: int) -> None:
        """`count` tokens were each sampled `gap` seconds after their request's previous token."""

    def add_series(self, first: float, step: float, length: int, count: int) -> None:
        """`count` tokens for each of the gaps first, first + step, ..., first + (length − 1)·step."""


class _PSeq(_Seq):
    __slots__ = ("base", "g0", "last", "order", "ticket")

    def __init__(self, req: SimRequest, now: float, block_size: int) -> None:
        super().__init__(req, now, block_size)
        self.last = 0.0  # when its latest token was sampled
        self.g0 = 0  # cohort steps completed when it joined (or was last brought up to date)
        self.base = 0  # computed − g0: its position is base + cohort steps, constant while it is a member
        self.order = 0  # running order among members
        self.ticket = 0  # its valid entry in the event heap (0: not a member)


class _Stretch:
    """Plain cohort steps after the in-flight one (step 1, from `start` to `end1`), in closed form: step i+1
    (i = 1..k) takes ``overhead + max(compute, memory)`` with both terms affine in i (the roofline is affine in the
    context, which grows by one token per member per step): the larger slope wins after the lines cross. Each
    member takes a block every block-size steps, when its position crosses a block boundary (`blocks`)."""

    __slots__ = ("end1", "g0", "k", "last_end", "left", "members", "overhead", "right", "split", "start")

    def __init__(
        self,
        start: float,
        end1: float,
        k: int,
        members: int,
        g0: int,
        overhead: float,
        compute: tuple[float, float],  # (a, b): compute time of step i+1 = a + b·i
        memory: tuple[float, float],
    ) -> None:
        self.start, self.end1, self.k, self.members, self.g0, self.overhead = start, end1, k, members, g0, overhead
        (a1, b1), (a2, b2) = compute, memory
        self.split = 0  # steps 2..split+1 follow `left`, the rest `right`
        self.left = (0.0, 0.0)
        if b1 == b2:
            self.right = compute if a1 >= a2 else memory
        else:
            flat, steep = (compute, memory) if b1 < b2 else (memory, compute)
            cross = (flat[0] - steep[0]) / (steep[1] - flat[1])
            self.left, self.right = flat, steep
            self.split = min(k, math.floor(cross)) if cross >= 1 else 0
        self.last_end = end1 + self.time(k)  # when step k+1 ends: the engine's next event

    def runs(self, m: int) -> list[tuple[float, float, int]]:
        """Durations of steps 2..m+1 as arithmetic runs (first, increment, length)."""
        out = []
        s = min(self.split, m)
        if s > 0:
            a, b = self.left
            out.append((self.overhead + a + b, b, s))
        if m > s:
            a, b = self.right
            out.append((self.overhead + a + b * (s + 1), b, m - s))
        return out

    def time(self, m: int) -> float:
        """Σ durations of steps 2..m+1."""
        s = self.split
        ov = self.overhead
        if s >= m:
            if m <= 0:
                return 0.0
            a, b = self.left
            return m * (ov + a) + b * m * (m + 1) / 2
        a, b = self.right
        total = (m - s) * (ov + a) + b * (m * (m + 1) - s * (s + 1)) / 2
        if s > 0:
            a, b = self.left
            total += s * (ov + a) + b * s * (s + 1) / 2
        return total

    def guess(self, t: float) -> int:
        """About the last step j (0..k) that ends before t: the steps' durations summed in closed form and solved
        for t (exact up to rounding; the caller checks)."""
        x = t - self.end1
        if x <= 0:
            return 0
        s = self.split
        ov = self.overhead
        if s > 0:
            m = _solve(ov, *self.left, 0, 0.0, x)
            if m <= s:
                return max(0, min(self.k, math.floor(m) + 1))
        m = _solve(ov, *self.right, s, self.time(s), x)
        return max(0, min(self.k, math.floor(m) + 1))

    def end(self, j: int) -> float:
        """When step j ends (j = 1..k+1)."""
        return self.end1 + self.time(j - 1)

    def blocks(self, m: int, hist: list[int]) -> int:
        """Blocks taken by steps 2..m+1, `hist` counting the members by position mod the block size: step i+1 is
        scheduled after g0 + i − 1 cohort steps, and the members whose position then sits on a block boundary
        take one."""
        bs = len(hist)
        full, r = divmod(m, bs)
        if not r:
            return self.members * full
        top = -self.g0 % bs  # step 2's index; then top − 1, top − 2, ... round the histogram
        lo = top - r + 1
        part = sum(hist[lo : top + 1]) if lo >= 0 else sum(hist[: top + 1]) + sum(hist[lo:])
        return self.members * full + part


def _solve(overhead: float, a: float, b: float, s: int, before: float, x: float) -> float:
    """m ≥ s where ``before + Σ_{i=s+1..m} (overhead + a + b·i) = x`` (a step i+1 takes overhead + a + b·i)."""
    c = before - x - s * (overhead + a) - b * s * (s + 1) / 2
    lin = overhead + a + b / 2
    if b <= 1e-300:
        return -c / lin if lin > 0 else math.inf
    q = b / 2
    return (-lin + math.sqrt(max(lin * lin - 4 * q * c, 0.0))) / (2 * q)


class PlanningEngine(VllmModel[_PSeq]):
    """`VllmEngine`'s model with cohort bookkeeping (see the module doc). Use it in virtual time."""

    def __init__(
        self,
        config: EngineConfig,
        seed: int = 0,
        *,
        token_gaps: TokenGaps | None = None,
        first_tokens: list[tuple[str, float]] | None = None,
    ) -> None:
        super().__init__(config, seed, _PSeq)
        self._gaps = token_gaps
        self._firsts = first_tokens  # (request id, time) appended as each request's first token is sampled
        self._members: dict[str, _PSeq] = {}  # running decoders, in running order
        self._specials: list[_PSeq] = []  # running requests still prefilling, after every member (see _join)
        self._gs = 0  # cohort steps scheduled
        self._gd = 0  # cohort steps completed
        self._hist = [0] * self._bs  # members by base mod block size
        self._asum = 0  # Σ base over members
        self._events: list[tuple[int, int, int, _PSeq]] = []  # (cohort step, order, ticket, request)
        self._next_ticket = 0
        self._next_order = 0
        self._in_flight = 0  # members computing in the step in flight
        self._cohort_end = 0.0  # when the last cohort step ended
        self._stretch: _Stretch | None = None
        # If the token budget cannot hold every sequence, decodes may be left out of a step: keep the books per
        # request (VllmEngine's way) throughout.
        self._cohort_ok = self._max_seqs <= self._budget

    # ---------------------------------------------------------------- the Engine protocol

    def add(self, req: SimRequest, now: float) -> None:
        self.check(req)
        if req.request_id in self._seqs:
            raise ValueError(f"request id {req.request_id!r} is already in the engine")
        if self._stretch is not None:
            self._apply_stretch_before(self._stretch, now)
        s = _PSeq(req, now, self._bs)
        self._seqs[s.rid] = s
        self._waiting.append(s)
        if self._batch is None and self._kick is None:
            self._kick = now

    def abort(self, request_id: str, now: float) -> None:
        if self._stretch is not None:
            self._apply_stretch_before(self._stretch, now)
        s = self._seqs.get(request_id)
        if s is None:
            return
        if s.state == _RUNNING:
            del self._seqs[request_id]
            if s.ticket:
                if self._gs > self._gd:
                    self._in_flight -= 1  # its token in the step in flight is not produced
                self._leave(s)
            else:
                self._specials.remove(s)
            self._release(s)
            s.state = _DONE
            self.num_aborted_total += 1
        else:
            super().abort(request_id, now)

    def next_event_time(self) -> float | None:
        if self._stretch is not None:
            return self._stretch.last_end
        return super().next_event_time()

    def step(self, now: float) -> StepResult:
        out = StepResult()
        self._step(now, out.emissions)
        return out

    def run_until(self, limit: float, inclusive: bool = False) -> float | None:
        """Take every step due before `limit` (and at it, if `inclusive`), as `step` at each `next_event_time()`
        would, with no emissions reported (a planning driver reads `pop_finished` instead); the time of the last
        step taken (None: none)."""
        last = None
        scratch: list[Emission] = []
        while True:
            st = self._stretch
            t = st.last_end if st is not None else self._batch_end if self._batch is not None else self._kick
            if t is None or t > limit or (t == limit and not inclusive):
                return last
            self._step(t, scratch)
            scratch.clear()
            last = t

    def _step(self, now: float, emissions: list[Emission]) -> None:
        st = self._stretch
        if st is not None:
            if now < st.last_end:
                return
            self._apply_stretch(st, st.k)
        if self._batch is not None:
            if now < self._batch_end:
                return
            start = self._batch_end
            self._complete_step(self._batch, start, emissions)
            self._batch = None
        elif self._kick is not None and now >= self._kick:
            start = now
        else:
            return
        self._kick = None
        self._schedule_step(start)
        if self._batch is not None and not self._jitter:
            self._plan_stretch(start)

    def stats(self) -> dict[str, float]:
        out = super().stats()
        out["num_requests_running"] = float(len(self._members) + len(self._specials))
        return out

    # ---------------------------------------------------------------- the cohort

    def _join(self, s: _PSeq) -> None:
        """A running request that just sampled a token (and decodes from now on) joins the cohort. Decoders always
        precede prefills in running order (a prefill that is not finishing takes the rest of the token budget, so
        nothing behind it can finish its own first), so members in join order are running order."""
        s.g0 = self._gd
        s.base = s.computed - self._gd
        s.order = self._next_order
        self._next_order += 1
        self._hist[s.base % self._bs] += 1
        self._asum += s.base
        self._members[s.rid] = s
        self._push_event(s)

    def _push_event(self, s: _PSeq) -> None:
        """When the cohort step that gives `s` its last token, or a token that completes a stream chunk, ends."""
        due = s.g0 + min(s.out_len - s.produced, self._interval - s.pending)
        self._next_ticket += 1
        s.ticket = self._next_ticket
        heapq.heappush(self._events, (due, s.order, s.ticket, s))

    def _catch_up(self, s: _PSeq) -> None:
        """Write the cohort steps since `s` joined (or was last caught up) into its own fields."""
        done = self._gd - s.g0
        scheduled = self._gs - s.g0
        if done:
            s.computed += done
            s.produced += done
            s.pending += done
            s.last = self._cohort_end
            s.g0 = self._gd
        s.blocks = (s.computed + scheduled - done + self._bs - 1) // self._bs - s.shared

    def _leave(self, s: _PSeq) -> None:
        self._catch_up(s)
        self._hist[s.base % self._bs] -= 1
        self._asum -= s.base
        del self._members[s.rid]
        s.ticket = 0

    def _dissolve(self) -> None:
        """Back to per-request books: every member caught up, running order rebuilt."""
        members = list(self._members.values())
        for s in members:
            self._leave(s)
        self._events.clear()
        self._running = members + self._specials
        self._specials = []

    # ---------------------------------------------------------------- steps

    def _schedule_step(self, start: float) -> None:
        bs = self._bs
        n_dec = len(self._members)
        budget = self._budget - n_dec
        take = self._hist[-self._gs % bs] if n_dec else 0  # members starting a new block this step
        chunks = []
        for s in self._specials:
            if budget <= 0:
                break
            p = s.computed
            n = min(s.prompt + s.produced - p, budget)
            need = (p + n + bs - 1) // bs - s.shared - s.blocks
            chunks.append((s, n, need))
            if need > 0:
                take += need
            budget -= n
        if not self._cohort_ok or budget < 0 or take > self._num_blocks - self._used:
            self._schedule_explicitly(start)  # a preemption (or a budget that cannot hold every decode)
            return
        if take:
            self._alloc(take)  # as one: reclaiming cached blocks depends only on how many are taken, in order
        batch: list[tuple[_PSeq, int]] = []
        c = self._asum + n_dec * (self._gs + 1)
        ntok, pairs, ctx = n_dec, c, c
        for s, n, need in chunks:
            if need > 0:
                s.blocks += need
            p = s.computed
            batch.append((s, n))
            ntok += n
            pairs += n * p + n * (n + 1) // 2
            ctx += p + n
        if self._waiting:
            for s, n in self._admit(start, budget, n_dec + len(self._specials)):
                self._specials.append(s)
                batch.append((s, n))
                p = s.computed
                ntok += n
                pairs += n * p + n * (n + 1) // 2
                ctx += p + n
        if not ntok:
            if self._waiting:
                raise RuntimeError("vllm engine stalled: idle with waiting requests that do not fit")
            return
        dt = self._roofline(ntok, pairs, ctx, n_dec + len(batch))
        if self._jitter:
            dt *= 1.0 + self._rng.uniform(-self._jitter, self._jitter)
        if n_dec:
            self._gs += 1
        self._in_flight = n_dec
        self._batch = batch
        self._batch_start = start
        self._batch_end = start + dt
        self.steps_total += 1
        self.busy_time_total += dt

    def _schedule_explicitly(self, start: float) -> None:
        self._dissolve()
        self._in_flight = 0
        self._schedule(start)  # VllmEngine's scheduler over self._running
        self._specials = self._running  # every running request is kept per request until this step completes

    def _complete_step(self, batch: list[tuple[_PSeq, int]], now: float, emissions: list[Emission]) -> None:
        gaps = self._gaps
        start = self._batch_start
        interval = self._interval
        if self._in_flight:
            n_dec = self._in_flight
            self._in_flight = 0
            self._gd += 1
            self._cohort_end = now
            self.generation_tokens_total += n_dec
            if gaps is not None:
                gaps.add(now - start, n_dec)
            events = self._events
            while events and events[0][0] <= self._gd:
                _, _, ticket, s = heapq.heappop(events)
                if s.ticket != ticket:
                    continue  # left the cohort since
                if s.produced + self._gd - s.g0 >= s.out_len:
                    self._leave(s)
                    reason = "length" if s.produced >= s.max_tokens else "stop"
                    emissions.append(Emission(s.rid, s.pending, True, reason, s.cached))
                    self._finish(s, now, reason)
                else:
                    self._catch_up(s)  # stays in place: base and order unchanged
                    emissions.append(Emission(s.rid, s.pending, False, None, s.cached))
                    s.pending = 0
                    self._push_event(s)
        if not batch:
            return  # the cohort alone: nobody joins or leaves the specials
        followed = 0  # tokens of requests whose previous token came at this step's start
        joining = []
        for s, n in batch:
            if s.state != _RUNNING:
                continue  # aborted while the step ran
            first = self._advance(s, n, now)
            if first is None:
                continue  # a prefill chunk: no token yet
            if first:
                if self._firsts is not None:
                    self._firsts.append((s.rid, now))
            elif gaps is not None:
                if s.last == start:
                    followed += 1
                else:
                    gaps.add(now - s.last, 1)  # resumed after a preemption
            s.last = now
            if s.produced >= s.out_len:
                reason = "length" if s.produced >= s.max_tokens else "stop"
                emissions.append(Emission(s.rid, s.pending, True, reason, s.cached))
                self._finish(s, now, reason)
                continue
            if first or s.pending >= interval:
                emissions.append(Emission(s.rid, s.pending, False, None, s.cached))
                s.pending = 0
            joining.append(s)
        if gaps is not None and followed:
            gaps.add(now - start, followed)
        if not self._cohort_ok:
            joining = []
        if joining or (self._specials and any(s.state != _RUNNING for s in self._specials)):
            joined = {id(s) for s in joining}
            self._specials = [s for s in self._specials if s.state == _RUNNING and id(s) not in joined]
            for s in joining:
                self._join(s)

    # ---------------------------------------------------------------- stretches of plain steps

    def _plan_stretch(self, start: float) -> None:
        """Step 1 (just scheduled at `start`) runs the cohort alone. If the steps after it would too — nobody
        finishes or emits, no block shortage, and whatever kept the queue waiting at step 1 still holds (the same
        sequences and budget; fewer free blocks) — set out how they go."""
        if self._batch or self._specials or not self._in_flight:
            return
        head = self._waiting[0] if self._waiting else None
        if head is not None and head.preemptions and head.own_key in self._prefixes:
            return  # its cache lookup may drop its own blocks as eviction trims the prefix they follow
        events = self._events
        while events and events[0][2] != events[0][3].ticket:
            heapq.heappop(events)
        k = events[0][0] - self._gd - 1  # completions gd+1..gd+k are plain (step 1 is gd+1)
        if k < 1:
            return
        bs = self._bs
        n = self._in_flight
        g0 = self._gs  # step i+1 is scheduled after g0 + i - 1 cohort steps
        full, rest = divmod(self._num_blocks - self._used, n)
        if k > full * bs:  # the free blocks may run out within the stretch: it ends before the step that would preempt
            hist = self._hist
            period = [0, *accumulate(hist[-(g0 + m) % bs] for m in range(bs - 1))]  # non-decreasing
            k = min(k, full * bs + bisect_right(period, rest) - 1)
            if k < 1:
                return
        # step i+1 has context c = asum + n·(g0 + i) = c0 + n·i
        c0 = self._asum + n * g0
        if self._measured is not None:  # linear: per sequence and token + (per pair + per context token) × c
            s, a, b, cc = self._measured
            compute, memory = ((s + a) * n + (b + cc) * c0, (b + cc) * n), (0.0, 0.0)
        else:
            ef, bw = self._eff_flops, self._eff_bw
            compute = ((self._flops_tok * n + self._flops_pair * c0) / ef, self._flops_pair * n / ef)
            memory = ((self._weights + self._kv_bpt * c0) / bw, self._kv_bpt * n / bw)
        self._stretch = _Stretch(start, self._batch_end, k, n, g0, self._overhead, compute, memory)

    def _apply_stretch_before(self, st: _Stretch, now: float) -> None:
        """Apply the plain steps of `st` (the current stretch) that end before `now` (an arrival or abort at `now`
        comes after them)."""
        lo, hi = 0, st.k  # steps 1..lo end before now; find the largest such lo ≤ k
        j = st.guess(now)  # nearly always it: check it before searching the whole stretch
        if j > 0 and st.end1 + st.time(j - 1) >= now:
            hi = j - 1
        else:
            lo = j
            if j < hi and st.end1 + st.time(j) >= now:
                hi = j
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if st.end(mid) < now:
                lo = mid
            else:
                hi = mid - 1
        self._apply_stretch(st, lo)

    def _apply_stretch(self, st: _Stretch, j: int) -> None:
        """Complete steps 1..j of `st` (the current stretch) and schedule step j+1, as `step` would have one by
        one."""
        self._stretch = None
        if j == 0:
            return
        n = st.members
        take = st.blocks(j, self._hist)
        if take:
            self._alloc(take)
        self._gs += j
        self._gd += j
        self.generation_tokens_total += j * n
        self.steps_total += j
        elapsed = st.time(j)  # steps 2..j+1
        self.busy_time_total += elapsed
        if self._gaps is not None:
            self._gaps.add(st.end1 - st.start, n)
            for first, inc, length in st.runs(j - 1):
                self._gaps.add_series(first, inc, length, n)
        end = st.end1 + st.time(j - 1)
        self._cohort_end = end
        self._batch_start = end
        self._batch_end = st.end1 + elapsed
