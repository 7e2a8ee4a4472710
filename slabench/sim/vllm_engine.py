"""A capacity model of vLLM (V1 scheduler) on one GPU: continuous batching over a paged KV cache, in virtual time.

What it models, per engine step (one forward pass of the batch):
- Scheduling like vLLM V1's FCFS scheduler. Running requests first, in arrival order: each asks for the tokens it has
  not computed yet (1 for a decode, the rest of its prompt — capped by the step's token budget — for a prefill), and
  KV blocks for them. When the blocks run out the newest running request is preempted (freed, reset to recompute, put
  back at the head of the queue) until the request fits or is itself the victim. Then, only if nothing was preempted,
  waiting requests are admitted in order while there are sequence slots, budget and blocks (the head blocks the
  queue). A prompt longer than the budget is prefilled in chunks over several steps, mixed with the decodes
  (chunked prefill).
- A paged KV cache of `num_gpu_blocks` blocks of `block_size` tokens (capacity: `profiles.EngineConfig`).
- Optional prefix caching (vLLM V1's default), keyed by `SimRequest.prefix_key`: once a request has computed its
  shared prefix, those full blocks are registered under the key; later requests with the key reference them and
  skip their computation. A preempted request's own full blocks stay cached too, so its recompute finds them.
  Blocks nobody references stay cached (they count as free) until reclaimed: least recently used entry first,
  from its tail, as vLLM frees blocks in reverse order. A finished request's own blocks are not kept (nothing
  could hit them: prompts are identified only by their prefix key).
- A roofline step time: overhead + max(compute, memory), where compute = (2·params·tokens + attention FLOPs) /
  (tensor FLOPS · efficiency) and memory = (weight bytes + KV bytes of every scheduled context) / (bandwidth ·
  efficiency). A decode-only step is memory-bound, a prefill chunk compute-bound.
- Streaming: a request's first token is emitted as soon as it is sampled, later ones in chunks of `stream_interval`
  tokens (and whatever is left when it finishes), like vLLM's `--stream-interval`.

Timing contract with the server: a step scheduled at t ends at t + step_time; `next_event_time()` is that end; the
`step(now)` call at (or after) it returns the step's emissions and starts the next step back-to-back from that end.
When idle, an `add` makes `next_event_time()` the arrival time, and the step starts at the `step(now)` call.

Per-request timings for vLLM's histograms (queue, prefill, decode, TTFT, E2E) are drained with `pop_finished()`.
"""

from __future__ import annotations

import random
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from slabench.sim.engine import Emission, SimRequest, StepResult, output_length
from slabench.sim.profiles import EngineConfig

_WAITING, _RUNNING, _DONE = 0, 1, 2


class RequestTooLong(ValueError):
    """The request cannot be served at this max_model_len (vLLM answers HTTP 400)."""


@dataclass(frozen=True, slots=True)
class RequestTiming:
    """One finished request's life, on the engine's clock (vLLM's definitions of its latency histograms)."""

    request_id: str
    arrival: float
    scheduled: float  # first time the scheduler picked it (end of queueing)
    first_token: float
    last_token: float
    prompt_tokens: int
    generation_tokens: int
    cached_prompt_tokens: int
    num_preemptions: int
    finish_reason: str

    @property
    def queue_time(self) -> float:
        return self.scheduled - self.arrival

    @property
    def prefill_time(self) -> float:
        return self.first_token - self.scheduled

    @property
    def decode_time(self) -> float:
        return self.last_token - self.first_token

    @property
    def inference_time(self) -> float:
        return self.last_token - self.scheduled

    @property
    def ttft(self) -> float:
        return self.first_token - self.arrival

    @property
    def e2e(self) -> float:
        return self.last_token - self.arrival


class _Prefix:
    """Cached blocks forming a prefix, under a key. Requests reference its first `n` blocks (n per holder); the
    first `active` = max(n) blocks are in use, the tail beyond them is reclaimable (counted as cached-free)."""

    __slots__ = ("active", "blocks", "holders", "key")

    def __init__(self, key: str, blocks: int) -> None:
        self.key = key
        self.blocks = blocks
        self.holders: list[int] = []
        self.active = 0


class _Seq:
    __slots__ = (
        "arrival",
        "blocks",
        "cached",
        "computed",
        "entry",
        "first",
        "max_tokens",
        "out_len",
        "own_base",
        "own_key",
        "pending",
        "preemptions",
        "prefix_blocks",
        "prefix_key",
        "produced",
        "prompt",
        "register",
        "rid",
        "scheduled",
        "shared",
        "state",
    )

    def __init__(self, req: SimRequest, now: float, block_size: int) -> None:
        self.rid = req.request_id
        self.arrival = now
        self.prompt = req.prompt_tokens
        self.out_len = output_length(req)
        self.max_tokens = req.max_tokens
        self.prefix_key = req.prefix_key if req.prefix_tokens > 0 else None
        # Full blocks of the shared prefix; at least one prompt token is always computed (as in vLLM).
        self.prefix_blocks = min(req.prefix_tokens, req.prompt_tokens - 1) // block_size
        self.produced = 0  # output tokens sampled so far
        self.computed = 0  # tokens whose KV is in the cache
        self.blocks = 0  # private KV blocks held
        self.shared = 0  # leading blocks served by `entry`
        self.entry: _Prefix | None = None
        self.register = False  # should register its prefix once computed
        self.pending = 0  # sampled, not yet emitted (stream_interval)
        self.cached = 0  # prompt tokens served from the prefix cache at first admission
        self.state = _WAITING
        self.scheduled: float | None = None
        self.first: float | None = None
        self.preemptions = 0
        self.own_key = "\0" + self.rid  # cache key of its own blocks kept across a preemption
        self.own_base = 0  # shared blocks those own blocks follow


S = TypeVar("S", bound=_Seq)


class VllmModel(Generic[S]):
    """vLLM-like engine over one `EngineConfig`, keeping a `S` per request (`VllmEngine`: `_Seq`; the planning
    engine keeps more per request). Pure: no clock, no I/O; the caller passes `now`."""

    def __init__(self, config: EngineConfig, seed: int, new_seq: Callable[[SimRequest, float, int], S]) -> None:
        self.config = config
        self._new_seq = new_seq
        c = config
        self._bs = c.block_size
        self._num_blocks = c.num_gpu_blocks
        self._max_seqs = c.max_num_seqs
        self._budget = c.max_num_batched_tokens
        self._max_len = c.max_model_len
        self._caching = c.options.enable_prefix_caching
        self._interval = c.options.stream_interval
        self._jitter = c.options.step_time_jitter
        self._flops_tok = c.flops_per_token
        self._flops_pair = c.attention_flops_per_pair
        self._eff_flops = c.effective_flops
        self._eff_bw = c.effective_bandwidth
        self._weights = c.weight_bytes
        self._kv_bpt = c.kv_bytes_per_token
        self._overhead = c.step_overhead_s
        self._measured = c.measured_step  # a calibrated linear step time instead of the roofline
        self._rng = random.Random(seed)

        self._seqs: dict[str, S] = {}
        self._running: list[S] = []
        self._waiting: deque[S] = deque()
        self._used = 0  # blocks referenced by requests (private + the active part of cached prefixes)
        self._cached_free = 0  # cached blocks nobody references (reclaimable)
        self._prefixes: dict[str, _Prefix] = {}
        self._evictable: OrderedDict[str, _Prefix] = OrderedDict()  # entries with a reclaimable tail, LRU first

        self._batch: list[tuple[S, int]] | None = None
        self._batch_end = 0.0
        self._batch_start = 0.0
        self._kick: float | None = None  # idle engine with work: when it may start
        self._finished: list[RequestTiming] = []

        self.steps_total = 0
        self.busy_time_total = 0.0
        self.num_preemptions_total = 0
        self.prefix_cache_queries_total = 0
        self.prefix_cache_hits_total = 0
        self.prompt_tokens_total = 0
        self.generation_tokens_total = 0
        self.request_success_total = 0
        self.num_aborted_total = 0

    # ---------------------------------------------------------------- the Engine protocol

    def reset_prefix_cache(self) -> bool:
        """vLLM's POST /reset_prefix_cache: every cached prefix forgotten. Refused while requests hold blocks (vLLM
        refuses too), so a sweep resets between runs, when nothing is in flight."""
        if self._seqs:
            return False
        self._prefixes.clear()
        self._evictable.clear()
        self._cached_free = 0
        return True

    def check(self, req: SimRequest) -> None:
        """Raise RequestTooLong if vLLM would reject the request (prompt + max_tokens beyond max_model_len)."""
        if req.prompt_tokens < 1:
            raise RequestTooLong("the prompt must have at least one token")
        if req.prompt_tokens + req.max_tokens > self._max_len:
            raise RequestTooLong(
                f"This model's maximum context length is {self._max_len} tokens. However, you requested "
                f"{req.prompt_tokens + req.max_tokens} tokens ({req.prompt_tokens} in the messages, "
                f"{req.max_tokens} in the completion). Please reduce the length of the messages or completion."
            )

    def add(self, req: SimRequest, now: float) -> None:
        self.check(req)
        if req.request_id in self._seqs:
            raise ValueError(f"request id {req.request_id!r} is already in the engine")
        s = self._new_seq(req, now, self._bs)
        self._seqs[s.rid] = s
        self._waiting.append(s)
        if self._batch is None and self._kick is None:
            self._kick = now

    def abort(self, request_id: str, now: float) -> None:
        s = self._seqs.pop(request_id, None)
        if s is None:
            return
        if s.state == _RUNNING:
            self._running.remove(s)
        else:
            self._waiting.remove(s)
            own = self._prefixes.get(s.own_key) if s.preemptions else None
            if own is not None:
                self._drop_cached(own)  # nobody else can reach a request's own blocks
        self._release(s)
        s.state = _DONE  # an in-flight step skips it
        self.num_aborted_total += 1

    def next_event_time(self) -> float | None:
        if self._batch is not None:
            return self._batch_end
        return self._kick

    def step(self, now: float) -> StepResult:
        out = StepResult()
        if self._batch is not None:
            if now < self._batch_end:
                return out
            start = self._batch_end
            self._complete(self._batch, start, out.emissions)
            self._batch = None
        elif self._kick is not None and now >= self._kick:
            start = now
        else:
            return out
        self._kick = None
        self._schedule(start)
        return out

    def stats(self) -> dict[str, float]:
        return {
            "num_requests_running": float(len(self._running)),
            "num_requests_waiting": float(len(self._waiting)),
            "kv_cache_usage_perc": self._used / self._num_blocks,
            "num_preemptions_total": float(self.num_preemptions_total),
            "prefix_cache_queries_total": float(self.prefix_cache_queries_total),
            "prefix_cache_hits_total": float(self.prefix_cache_hits_total),
            "prompt_tokens_total": float(self.prompt_tokens_total),
            "generation_tokens_total": float(self.generation_tokens_total),
            "request_success_total": float(self.request_success_total),
            "num_aborted_total": float(self.num_aborted_total),
            "num_gpu_blocks": float(self._num_blocks),
            "kv_cache_cached_free_blocks": float(self._cached_free),
            "steps_total": float(self.steps_total),
            "busy_time_seconds_total": self.busy_time_total,
        }

    # ---------------------------------------------------------------- extras for /metrics and tests

    def pop_finished(self) -> list[RequestTiming]:
        """Timings of requests finished (stop/length) since the last call; aborted requests are not included."""
        out, self._finished = self._finished, []
        return out

    def step_time(self, chunks: list[tuple[int, int]]) -> float:
        """The roofline time of a step that computes `n` new tokens after `p` cached ones for each (p, n)."""
        ntok = pairs = ctx = 0
        for p, n in chunks:
            ntok += n
            pairs += n * p + n * (n + 1) // 2
            ctx += p + n
        return self._roofline(ntok, pairs, ctx, len(chunks))

    # ---------------------------------------------------------------- internals

    def _roofline(self, ntok: int, pairs: int, ctx: int, nseq: int) -> float:
        if self._measured is not None:
            s, a, b, c = self._measured
            return self._overhead + s * nseq + a * ntok + b * pairs + c * ctx
        compute = (self._flops_tok * ntok + self._flops_pair * pairs) / self._eff_flops
        memory = (self._weights + self._kv_bpt * ctx) / self._eff_bw
        return self._overhead + (compute if compute > memory else memory)

    def _alloc(self, k: int) -> None:
        """Take k blocks; the caller checked k ≤ blocks not in use. Reclaims cached blocks if needed: least
        recently used entry first, from its tail (vLLM frees a request's blocks in reverse order), so what
        is left of an entry is still a usable prefix."""
        short = k - (self._num_blocks - self._used - self._cached_free)
        while short > 0:
            e = next(iter(self._evictable.values()))
            take = min(short, e.blocks - e.active)
            e.blocks -= take
            self._cached_free -= take
            short -= take
            if e.blocks == e.active:
                del self._evictable[e.key]
                if e.blocks == 0:
                    del self._prefixes[e.key]
        self._used += k

    def _hold(self, e: _Prefix, n: int) -> None:
        """A request starts referencing the first n blocks of a cached entry."""
        e.holders.append(n)
        if n > e.active:
            self._used += n - e.active
            self._cached_free -= n - e.active
            e.active = n
            if e.blocks == e.active:
                self._evictable.pop(e.key, None)

    def _unhold(self, e: _Prefix, n: int) -> None:
        e.holders.remove(n)
        active = max(e.holders, default=0)
        if active < e.active:
            self._used -= e.active - active
            self._cached_free += e.active - active
            e.active = active
        if e.blocks > e.active:
            self._evictable[e.key] = e
            self._evictable.move_to_end(e.key)  # most recently used

    def _release(self, s: _Seq) -> None:
        self._used -= s.blocks
        s.blocks = 0
        e = s.entry
        if e is not None:
            self._unhold(e, s.shared)
            s.entry = None
            s.shared = 0

    def _preempt(self, s: S) -> None:
        # With prefix caching vLLM frees the victim's full blocks with their hashes kept: until evicted, its
        # recompute finds them. Keep them as one evictable entry that continues the shared prefix it followed.
        own = s.computed // self._bs - s.shared if self._caching else 0
        if own > 0:
            e = _Prefix(s.own_key, own)
            s.own_base = s.shared
            self._prefixes[e.key] = e
            self._evictable[e.key] = e
            self._cached_free += own
            s.blocks -= own
            self._used -= own
        self._release(s)
        s.computed = 0
        s.register = False
        s.state = _WAITING
        s.preemptions += 1
        self._waiting.appendleft(s)
        self.num_preemptions_total += 1

    def _drop_cached(self, e: _Prefix) -> None:
        del self._prefixes[e.key]
        del self._evictable[e.key]
        self._cached_free -= e.blocks

    def _lookup(self, s: _Seq) -> tuple[_Prefix | None, int, _Prefix | None]:
        """Cache hits for a request about to be admitted: (shared entry, blocks it serves, own entry or None).

        The own entry (blocks kept from a preemption) is usable only if the shared blocks it followed are still
        there: block hashes chain, so a hole before them makes them unreachable (then it is dropped).
        """
        if not self._caching:
            return None, 0, None
        own = self._prefixes.get(s.own_key) if s.preemptions else None
        if own is not None and s.own_base == 0:
            return None, 0, own  # it holds the whole prefix itself
        e = self._prefixes.get(s.prefix_key) if s.prefix_key is not None and s.prefix_blocks > 0 else None
        hit = min(e.blocks, s.prefix_blocks) if e is not None else 0
        if own is not None and hit != s.own_base:
            self._drop_cached(own)
            own = None
        return e, hit, own

    def _schedule(self, start: float) -> None:
        bs = self._bs
        budget = self._budget
        running = self._running
        batch: list[tuple[S, int]] = []
        ntok = pairs = ctx = 0
        preempted = False

        # 1. Running requests, oldest first; on a block shortage preempt the newest.
        i = 0
        while i < len(running) and budget > 0:
            s = running[i]
            p = s.computed
            n = s.prompt + s.produced - p
            if n > budget:
                n = budget
            need = (p + n + bs - 1) // bs - s.shared - s.blocks
            if need > 0:
                while need > self._num_blocks - self._used:
                    victim = running.pop()
                    self._preempt(victim)
                    preempted = True
                    if victim is s:
                        break
                if s.state != _RUNNING:
                    break
                self._alloc(need)
                s.blocks += need
            batch.append((s, n))
            budget -= n
            ntok += n
            pairs += n * p + n * (n + 1) // 2
            ctx += p + n
            i += 1

        # 2. Waiting requests in order, unless this step had to preempt (as vLLM V1).
        if not preempted:
            for s, n in self._admit(start, budget, len(running)):
                running.append(s)
                batch.append((s, n))
                p = s.computed
                ntok += n
                pairs += n * p + n * (n + 1) // 2
                ctx += p + n

        if not batch:
            if self._waiting and self._waiting[0].arrival > start:  # idle since `start`: the next step starts now
                self._kick = self._waiting[0].arrival
                return
            if self._waiting:  # nothing runs yet the queue cannot start: the capacity checks failed us
                raise RuntimeError("vllm engine stalled: idle with waiting requests that do not fit")
            return
        dt = self._roofline(ntok, pairs, ctx, len(batch))
        if self._jitter:
            dt *= 1.0 + self._rng.uniform(-self._jitter, self._jitter)
        self._batch = batch
        self._batch_start = start
        self._batch_end = start + dt
        self.steps_total += 1
        self.busy_time_total += dt

    def _admit(self, start: float, budget: int, n_running: int) -> list[tuple[S, int]]:
        """Admit waiting requests in order while there are sequence slots, `budget` tokens and blocks for their
        first chunk; the head of the queue blocks the others (FCFS). Each admitted request has its blocks and
        `computed` = its cached tokens; returns (request, tokens to compute this step)."""
        bs = self._bs
        admitted: list[tuple[S, int]] = []
        waiting = self._waiting
        while waiting and budget > 0 and n_running < self._max_seqs:
            s = waiting[0]
            if s.arrival > start:  # a step the server's loop ran late began before this request came: not in it
                break
            entry, hit, own = self._lookup(s)
            own_blocks = own.blocks if own is not None else 0
            p = (hit + own_blocks) * bs
            total = s.prompt + s.produced
            n = total - p
            if n > budget:
                n = budget
            need = (p + n + bs - 1) // bs - hit - own_blocks
            revive = hit - entry.active if entry is not None and hit > entry.active else 0  # cached, unused
            if need + revive + own_blocks > self._num_blocks - self._used:
                break  # the head of the queue waits for blocks; FCFS keeps the others behind it
            waiting.popleft()
            if self._caching:  # vLLM looks every admitted request up, keyed or not
                self.prefix_cache_queries_total += total
                self.prefix_cache_hits_total += p
            if entry is not None:
                self._hold(entry, hit)
                s.entry = entry
                s.shared = hit
                s.register = own is None and hit < s.prefix_blocks  # may grow back what eviction trimmed
            elif own is None:
                s.register = self._caching and s.prefix_key is not None and s.prefix_blocks > 0
            if own is not None:
                self._drop_cached(own)
                self._used += own_blocks
            self._alloc(need)
            s.blocks = own_blocks + need
            s.computed = p
            if s.scheduled is None:
                s.scheduled = start
                s.cached = p
            s.state = _RUNNING
            admitted.append((s, n))
            budget -= n
            n_running += 1
        return admitted

    def _register_prefix(self, s: _Seq) -> None:
        """The request has computed its shared prefix: hand those blocks to the cache (unless another did)."""
        s.register = False
        key = s.prefix_key
        if key is None:  # registers only with a prefix to share
            return
        e = self._prefixes.get(key)
        if e is None:
            e = _Prefix(key, 0)
            self._prefixes[key] = e
            e.holders.append(0)
            s.entry = e
        elif e is not s.entry or e.blocks != s.shared:
            return  # computed twice concurrently, as vLLM does; this copy stays private
        # s references the whole entry (so it is all active): its private prefix blocks join it, still in use.
        grow = s.prefix_blocks - s.shared
        e.holders.remove(s.shared)
        e.holders.append(s.prefix_blocks)
        e.blocks += grow
        e.active = e.blocks
        s.blocks -= grow
        s.shared = s.prefix_blocks

    def _advance(self, s: _Seq, n: int, now: float) -> bool | None:
        """`s` computed `n` more tokens in the step that ended at `now`. None: no output token yet (a prefill chunk);
        else whether the token it produced was its first."""
        c = s.computed + n
        s.computed = c
        if s.register and c >= s.prefix_blocks * self._bs:
            self._register_prefix(s)
        if c < s.prompt + s.produced:
            return None
        s.produced += 1
        s.pending += 1
        self.generation_tokens_total += 1
        if s.first is not None:
            return False
        s.first = now
        self.prompt_tokens_total += s.prompt
        return True

    def _complete(self, batch: list[tuple[S, int]], now: float, emissions: list[Emission]) -> None:
        interval = self._interval
        finished = False
        for s, n in batch:
            if s.state != _RUNNING:
                continue  # aborted while the step ran
            first = self._advance(s, n, now)
            if first is None:
                continue  # a prefill chunk: no token yet
            done = s.produced >= s.out_len
            if done:
                reason = "length" if s.produced >= s.max_tokens else "stop"
                emissions.append(Emission(s.rid, s.pending, True, reason, s.cached))
                self._finish(s, now, reason)
                finished = True
            elif first or s.pending >= interval:
                emissions.append(Emission(s.rid, s.pending, False, None, s.cached))
                s.pending = 0
        if finished:
            self._running = [s for s in self._running if s.state == _RUNNING]

    def _finish(self, s: _Seq, now: float, reason: str) -> None:
        scheduled, first = s.scheduled, s.first
        assert scheduled is not None and first is not None, "a request finishes after it was scheduled and sampled"
        s.pending = 0
        s.state = _DONE
        self._release(s)
        del self._seqs[s.rid]
        self.request_success_total += 1
        self._finished.append(
            RequestTiming(
                s.rid, s.arrival, scheduled, first, now, s.prompt, s.produced, s.cached, s.preemptions, reason
            )
        )


class VllmEngine(VllmModel[_Seq]):
    """The vLLM capacity model the simulator serves: `VllmModel` keeping the plain per-request books."""

    def __init__(self, config: EngineConfig, seed: int = 0) -> None:
        super().__init__(config, seed, _Seq)
