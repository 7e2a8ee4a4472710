"""The simulator's HTTP surface, spoken to as a client would."""

import json
import urllib.error
import urllib.request

import pytest

from tests.locust_run import scrape


def post(url, path, body, headers=None):
    req = urllib.request.Request(
        url + path, json.dumps(body).encode(), {"Content-Type": "application/json", **(headers or {})}
    )
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


@pytest.fixture
def sim(simulator):
    return simulator("--ttft", "0.01", "--itl", "0.001", "--output-tokens", "5")


def test_models_health_and_unary_completions(sim):
    models = json.loads(urllib.request.urlopen(sim + "/v1/models").read())
    assert models["data"][0]["id"] == "slabench-sim"
    assert urllib.request.urlopen(sim + "/health").status == 200
    status, body = post(
        sim,
        "/v1/chat/completions",
        {"model": "slabench-sim", "max_tokens": 50, "messages": [{"role": "user", "content": "one two three"}]},
    )
    data = json.loads(body)
    assert status == 200 and data["usage"] == {"prompt_tokens": 3, "completion_tokens": 5, "total_tokens": 8}
    assert data["choices"][0]["finish_reason"] == "stop"
    status, body = post(sim, "/v1/completions", {"model": "slabench-sim", "prompt": "a b", "max_tokens": 2})
    data = json.loads(body)
    assert data["choices"][0]["finish_reason"] == "length" and data["usage"]["completion_tokens"] == 2


def test_streaming_chunks_and_counters_agree(sim):
    _, body = post(
        sim,
        "/v1/chat/completions",
        {
            "model": "slabench-sim",
            "max_tokens": 50,
            "stream": True,
            "ignore_eos": True,
            "messages": [{"role": "user", "content": "hi"}],
            "stream_options": {"include_usage": True},
        },
    )
    events = [line[6:] for line in body.split("\n") if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert sum(1 for c in chunks if c["choices"] and c["choices"][0]["delta"].get("content")) == 50
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 50
    m = scrape(sim)
    assert m["vllm:generation_tokens_total"] == 50 and m["vllm:prompt_tokens_total"] == 1
    assert m["vllm:time_to_first_token_seconds_count"] == 1 and m["vllm:inter_token_latency_seconds_count"] == 49


@pytest.mark.parametrize(
    "body,status,message",
    [
        ({"model": "nope", "messages": [{"role": "user", "content": "x"}]}, 404, "does not exist"),
        ({"model": "slabench-sim", "messages": []}, 400, "non-empty list"),
        ({"model": "slabench-sim", "prompt": "x", "max_tokens": 10**6}, 400, "maximum context length"),
    ],
)
def test_bad_requests_get_openai_style_errors(sim, body, status, message):
    path = "/v1/chat/completions" if "messages" in body else "/v1/completions"
    code, text = post(sim, path, body)
    assert code == status and message in json.loads(text)["error"]["message"]


def test_health_is_503_while_the_model_loads(simulator):
    url = simulator("--load-time", "30")
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(url + "/health")
    assert e.value.code == 503
