"""The simulator's `/metrics`, with vLLM V1's metric names so the harness scrapes it like a real server."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

_LATENCY_BUCKETS = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
)
_GAUGES = {
    "num_requests_running": "Number of requests in model execution batches.",
    "num_requests_waiting": "Number of requests waiting to be processed.",
    "kv_cache_usage_perc": "KV-cache usage. 1 means 100 percent usage.",
}


class SimMetrics:
    """One registry per server (no process globals)."""

    def __init__(self, model: str = "slabench-sim") -> None:
        self.registry = CollectorRegistry()
        r, labels = self.registry, ["model_name"]
        self._model = model
        self.gauges = {k: Gauge(f"vllm:{k}", doc, labels, registry=r) for k, doc in _GAUGES.items()}
        self.prompt_tokens = Counter("vllm:prompt_tokens", "Number of prefill tokens processed.", labels, registry=r)
        self.generation_tokens = Counter(
            "vllm:generation_tokens", "Number of generation tokens processed.", labels, registry=r
        )
        self.success = Counter(
            "vllm:request_success",
            "Count of successfully processed requests.",
            [*labels, "finished_reason"],
            registry=r,
        )
        self.preemptions = Counter("vllm:num_preemptions", "Cumulative number of preemptions.", labels, registry=r)
        self.ttft = Histogram(
            "vllm:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            labels,
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.itl = Histogram(
            "vllm:inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds.",
            labels,
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.queue = Histogram(
            "vllm:request_queue_time_seconds",
            "Histogram of time spent in WAITING phase for request.",
            labels,
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.prefill = Histogram(
            "vllm:request_prefill_time_seconds",
            "Histogram of time spent in PREFILL phase for request.",
            labels,
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.decode = Histogram(
            "vllm:request_decode_time_seconds",
            "Histogram of time spent in DECODE phase for request.",
            labels,
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.prefix_queries = Counter(
            "vllm:prefix_cache_queries",
            "Prefix cache queries, in terms of number of queried tokens.",
            labels,
            registry=r,
        )
        self.prefix_hits = Counter(
            "vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.", labels, registry=r
        )
        self.e2e = Histogram(
            "vllm:e2e_request_latency_seconds",
            "Histogram of e2e request latency in seconds.",
            labels,
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        # Not a vLLM metric: lets tests prove that every request the server saw has exactly one record.
        self.received = Counter("slabench_sim_requests_received", "Completion requests received.", registry=r)
        # Not vLLM metrics: the simulator's own sign of a starved CPU (engine steps that ran late), which tells a
        # grader that its latencies measured the machine, not the model.
        self.steps = Counter("slabench_sim_engine_steps", "Engine steps run.", registry=r)
        self.late_steps = Counter(
            "slabench_sim_engine_late_steps", "Engine steps that ran later than 5 ms after they were due.", registry=r
        )
        self.late_s = Counter("slabench_sim_engine_late_seconds", "How late those late steps ran, in all.", registry=r)
        self.idle_late_s = Counter(
            "slabench_sim_idle_late_seconds",
            "How late the event loop woke while no request was in flight, in all (wake-ups more than 5 ms late): a "
            "process frozen or starved while idle, whose arriving requests wait in the kernel.",
            registry=r,
        )
        self._seen: dict[str, float] = {}
        # Labelled children resolved once: observe() runs per token.
        self._ttft, self._itl, self._e2e = (h.labels(model) for h in (self.ttft, self.itl, self.e2e))

    def set_step_counts(self, steps: int, late: int, late_s: float, idle_late_s: float) -> None:
        """The engine loop counts in plain numbers (per step); the counters take the increments when scraped."""
        for key, counter, total in (
            ("steps", self.steps, steps),
            ("late_steps", self.late_steps, late),
            ("late_s", self.late_s, late_s),
            ("idle_late_s", self.idle_late_s, idle_late_s),
        ):
            if total > self._seen.get(key, 0.0):
                counter.inc(total - self._seen.get(key, 0.0))
                self._seen[key] = total

    def set_gauges(self, stats: dict[str, float]) -> None:
        for k, g in self.gauges.items():
            if k in stats:
                g.labels(self._model).set(stats[k])
        # The engine keeps running totals; Prometheus counters take the increments.
        for key, counter in (
            ("num_preemptions_total", self.preemptions),
            ("prefix_cache_queries_total", self.prefix_queries),
            ("prefix_cache_hits_total", self.prefix_hits),
        ):
            total = stats.get(key)
            if total is not None and total > self._seen.get(key, 0.0):
                counter.labels(self._model).inc(total - self._seen.get(key, 0.0))
                self._seen[key] = total

    def observe_phases(self, timings: Any) -> None:
        for t in timings:
            self.queue.labels(self._model).observe(t.queue_time)
            self.prefill.labels(self._model).observe(t.prefill_time)
            self.decode.labels(self._model).observe(t.decode_time)

    def observe_token(self, call: Any, now: float, start: float, last: float | None) -> None:
        if last is None:
            self._ttft.observe(now - start)
        else:
            self._itl.observe(now - last)

    def observe_finished(self, call: Any, e2e: float) -> None:
        m = self._model
        self._e2e.observe(e2e)
        self.prompt_tokens.labels(m).inc(call.req.prompt_tokens)
        self.generation_tokens.labels(m).inc(call.completion)
        self.success.labels(m, call.finish_reason or "stop").inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)
