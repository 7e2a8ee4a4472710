"""The server-metrics scraper's pure parts: parsing Prometheus text, deltas, series, URLs."""

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slabench.core.errors import UserError
from slabench.evidence.scrape import (
    COUNTERS,
    SIM_COUNTERS,
    NotPrometheus,
    Scraper,
    deltas,
    main,
    metrics_url,
    parse,
    series,
    summarize,
)
from slabench.sim.metrics import SimMetrics

# Lines as vLLM 0.32 serves them (two data-parallel engines), including the families that share a prefix with the
# tracked ones (`prompt_tokens_cached_total`, `_created` timestamps), which must not be mixed in.
VLLM_TEXT = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3.0
vllm:num_requests_running{engine="1",model_name="m"} 2.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 1.0
vllm:num_requests_waiting{engine="1",model_name="m"} 0.0
# HELP vllm:num_requests_waiting_by_reason Number of requests waiting, by reason.
# TYPE vllm:num_requests_waiting_by_reason gauge
vllm:num_requests_waiting_by_reason{engine="0",model_name="m",reason="capacity"} 7.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.5
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.25
# HELP vllm:prompt_tokens_total Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",model_name="m"} 100.0
vllm:prompt_tokens_total{engine="1",model_name="m"} 20.0
# HELP vllm:prompt_tokens_created Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_created gauge
vllm:prompt_tokens_created{engine="0",model_name="m"} 1.7962180219569795e+09
# HELP vllm:prompt_tokens_cached_total Number of cached prompt tokens (local + external).
# TYPE vllm:prompt_tokens_cached_total counter
vllm:prompt_tokens_cached_total{engine="0",model_name="m"} 55.0
# HELP vllm:generation_tokens_total Number of generation tokens processed.
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="m"} 8.0
# HELP vllm:request_success_total Count of successfully processed requests.
# TYPE vllm:request_success_total counter
vllm:request_success_total{engine="0",finished_reason="stop",model_name="m"} 1.0
vllm:request_success_total{engine="0",finished_reason="length",model_name="m"} 2.0
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_sum{engine="0",model_name="m"} 0.5
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1",model_name="m"} 1.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="1.0",model_name="m"} 2.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="m"} 2.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="m"} 2.0
vllm:time_to_first_token_seconds_sum{engine="1",model_name="m"} 1.5
vllm:time_to_first_token_seconds_bucket{engine="1",le="0.1",model_name="m"} 0.0
vllm:time_to_first_token_seconds_bucket{engine="1",le="1.0",model_name="m"} 0.0
vllm:time_to_first_token_seconds_bucket{engine="1",le="+Inf",model_name="m"} 1.0
vllm:time_to_first_token_seconds_count{engine="1",model_name="m"} 1.0
# HELP vllm:time_to_first_token_seconds_created Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds_created gauge
vllm:time_to_first_token_seconds_created{engine="0",model_name="m"} 1.7962180219577084e+09
# HELP http_requests_total Total number of requests by method, status and handler.
# TYPE http_requests_total counter
http_requests_total{handler="/metrics",method="GET",status="2xx"} 4.0
http_requests_total{handler="/v1/chat/completions",method="POST",status="2xx"} 2.0
http_requests_total{handler="/v1/chat/completions",method="POST",status="4xx"} 1.0
"""


def test_vllm_text_summed_over_engines_and_labels():
    s = parse(VLLM_TEXT)
    assert s["gauges"] == {"num_requests_running": 5.0, "num_requests_waiting": 1.0, "kv_cache_usage_perc": 0.375}
    assert s["counters"] == {
        "prompt_tokens_total": 120.0,
        "generation_tokens_total": 8.0,
        "request_success_total": 3.0,
        "requests_received_total": 3.0,  # completion calls only (not the /metrics scrapes), any status
    }
    ttft = s["histograms"]["time_to_first_token_seconds"]
    assert ttft == {"count": 3.0, "sum": 2.0, "buckets": {"0.1": 1.0, "1.0": 2.0, "+Inf": 3.0}}
    assert set(s["histograms"]) == {"time_to_first_token_seconds"}


def test_the_simulators_metrics_parse_with_every_tracked_family():
    sim = SimMetrics("m")
    sim.set_gauges(
        {
            "num_requests_running": 2,
            "num_requests_waiting": 1,
            "kv_cache_usage_perc": 0.1,
            "num_preemptions_total": 1,
            "prefix_cache_queries_total": 5,
            "prefix_cache_hits_total": 2,
        }
    )
    sim.generation_tokens.labels("m").inc(3)
    for h in (sim.queue, sim.prefill, sim.decode):
        h.labels("m").observe(0.01)
    sim.success.labels("m", "stop").inc()
    sim.ttft.labels("m").observe(0.05)
    sim.prompt_tokens.labels("m").inc(11)
    sim.set_step_counts(100, 3, 0.2, 1.5)
    s = parse(sim.render().decode())
    assert s["gauges"] == {"num_requests_running": 2.0, "num_requests_waiting": 1.0, "kv_cache_usage_perc": 0.1}
    assert s["counters"]["prompt_tokens_total"] == 11.0
    assert s["histograms"]["time_to_first_token_seconds"]["count"] == 1.0
    assert s["histograms"]["time_to_first_token_seconds"]["buckets"]["0.06"] == 1.0
    assert set(s["counters"]) == {*COUNTERS, *SIM_COUNTERS, "requests_received_total"}
    assert s["counters"]["slabench_sim_engine_late_seconds_total"] == pytest.approx(0.2)
    assert s["counters"]["slabench_sim_idle_late_seconds_total"] == pytest.approx(1.5)
    assert {
        "time_to_first_token_seconds",
        "inter_token_latency_seconds",
        "e2e_request_latency_seconds",
        "request_queue_time_seconds",
        "request_prefill_time_seconds",
        "request_decode_time_seconds",
    } <= set(s["histograms"])


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("<html><body>Not Found</body></html>", "not Prometheus text"),
        ('{"detail": "Not Found"}', "not Prometheus text"),
        ("# TYPE up gauge\nup 1\n", "no vllm:* metrics"),
        ("", "not Prometheus text"),
    ],
)
def test_a_body_without_vllm_metrics_is_refused_with_a_reason(body, message):
    with pytest.raises(NotPrometheus, match=re.escape(message)):
        parse(body)


def test_deltas_from_the_previous_scrape_and_across_a_restart():
    a = {"counters": {"prompt_tokens_total": 100.0}, "histograms": {"e2e": {"count": 4.0, "sum": 2.0}}}
    b = {"counters": {"prompt_tokens_total": 130.0}, "histograms": {"e2e": {"count": 5.0, "sum": 2.5}}}
    restarted = {"counters": {"prompt_tokens_total": 7.0}, "histograms": {"e2e": {"count": 1.0, "sum": 0.25}}}
    assert deltas(None, a) == {"prompt_tokens_total": 0.0, "e2e": {"count": 0.0, "sum": 0.0}}
    assert deltas(a, b) == {"prompt_tokens_total": 30.0, "e2e": {"count": 1.0, "sum": 0.5}}
    assert deltas(b, restarted) == {"prompt_tokens_total": 7.0, "e2e": {"count": 1.0, "sum": 0.25}}


@given(st.lists(st.integers(min_value=0, max_value=10_000), min_size=1, max_size=30))
def test_deltas_of_a_monotone_counter_add_up_to_its_rise(increments):
    values, total = [], 0.0
    for inc in increments:
        total += inc
        values.append({"counters": {"generation_tokens_total": total}, "histograms": {}})
    prev, summed = None, 0.0
    for v in values:
        summed += deltas(prev, v)["generation_tokens_total"]
        prev = v
    rise = values[-1]["counters"]["generation_tokens_total"] - values[0]["counters"]["generation_tokens_total"]
    assert summed == rise


def test_series_gives_gauges_and_token_rates_with_none_for_missing():
    rows = [
        {"t": 10.0, "gauges": {"num_requests_running": 0.0}, "deltas": {"generation_tokens_total": 0.0}},
        {"t": 11.0, "gauges": {"num_requests_running": 4.0}, "deltas": {"generation_tokens_total": 50.0}},
        {"t": 13.0, "gauges": {}, "deltas": {"generation_tokens_total": 30.0}},
    ]
    s = series(rows)
    assert s["t"] == [10.0, 11.0, 13.0]
    assert s["num_requests_running"] == [0.0, 4.0, None]
    assert s["kv_cache_usage_perc"] == [None, None, None]
    assert s["generation_tokens_per_s"] == [None, 50.0, 15.0]
    assert s["prompt_tokens_per_s"] == [None, None, None]


@pytest.mark.parametrize(
    ("host", "url"),
    [
        ("http://127.0.0.1:8000", "http://127.0.0.1:8000/metrics"),
        ("http://127.0.0.1:8000/v1", "http://127.0.0.1:8000/metrics"),
        ("https://llm.example.com/v1/", "https://llm.example.com/metrics"),
        ("https://gw.example.com:8443/team-a/v1", "https://gw.example.com:8443/team-a/metrics"),
        ("http://[::1]:9000", "http://[::1]:9000/metrics"),
    ],
)
def test_metrics_url_is_the_server_roots(host, url):
    assert metrics_url(host) == url


@pytest.mark.parametrize("url", ["localhost:8000/metrics", "http:///metrics", "ftp://h/metrics", "http://h:x/"])
def test_a_scrape_url_without_a_host_is_one_line_not_a_poll_that_never_succeeds(tmp_path, capsys, url):
    with pytest.raises(UserError, match="--url"):
        Scraper(url, tmp_path / "m.jsonl")  # refused when made (before the fix: polled until stopped)
    assert main(["--url", url, "--out", str(tmp_path / "m.jsonl")]) == 3
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"slabench: --url {url!r}: ") and "http://127.0.0.1" in err, err
    assert not (tmp_path / "m.jsonl").exists()


def hits(n: float) -> dict:
    return {"prefix_cache_hits_total": n}


def test_summarize_a_window_of_scrapes():
    rows = [
        {"t": 0.0, "gauges": {"num_requests_running": 0.0, "kv_cache_usage_perc": 0.0}, "deltas": {}},
        {
            "t": 1.0,
            "gauges": {"num_requests_running": 4.0, "num_requests_waiting": 2.0, "kv_cache_usage_perc": 0.5},
            "deltas": {
                "num_preemptions_total": 1.0,
                "prefix_cache_queries_total": 100.0,
                "prefix_cache_hits_total": 25.0,
            },
        },
        {
            "t": 2.0,
            "gauges": {"num_requests_running": 2.0, "num_requests_waiting": 0.0, "kv_cache_usage_perc": 0.3},
            "deltas": {
                "num_preemptions_total": 0.0,
                "prefix_cache_queries_total": 100.0,
                "prefix_cache_hits_total": 75.0,
            },
        },
        {"t": 9.0, "gauges": {"num_requests_running": 50.0}, "deltas": {}},
    ]
    s = summarize(rows, window=(0.0, 2.0))
    assert s["scrapes"] == 3
    assert s["num_requests_running_mean"] == 2.0 and s["num_requests_running_max"] == 4.0
    assert s["num_requests_waiting_mean"] == 1.0  # only the scrapes that had it
    assert s["kv_cache_usage_perc_max"] == 0.5
    assert s["preemptions"] == 1.0
    assert s["prefix_cache_hit_rate"] == 0.5


def test_summarize_nothing_is_none_not_zero():
    s = summarize([])
    assert s["scrapes"] == 0
    assert s["num_requests_running_mean"] is None and s["preemptions"] is None and s["prefix_cache_hit_rate"] is None
