"""The simulator's HTTP surface, spoken to as a client would."""

import contextlib
import http.client
import json
import socket
import struct
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from slabench.sim.server import _WORDS
from tests.helpers.locust_run import ROOT, scrape


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
    usage = {
        "prompt_tokens": 3,
        "completion_tokens": 5,
        "total_tokens": 8,
        "prompt_tokens_details": {"cached_tokens": 0},
    }
    assert status == 200 and data["usage"] == usage
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


def raw_stream_request(port: int, tokens: int, version: str = "1.1", rcvbuf: int | None = None) -> socket.socket:
    body = json.dumps(
        {
            "model": "slabench-sim",
            "max_tokens": tokens,
            "stream": True,
            "ignore_eos": True,
            "messages": [{"role": "user", "content": "hi"}],
        }
    ).encode()
    s = socket.socket()
    if rcvbuf is not None:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.connect(("127.0.0.1", port))
    head = f"POST /v1/chat/completions HTTP/{version}\r\nHost: x\r\nContent-Type: application/json\r\n"
    s.sendall(head.encode() + b"Content-Length: %d\r\n\r\n%b" % (len(body), body))
    return s


def read_response(s: socket.socket) -> tuple[bytes, bytes]:
    """Head and (de-chunked when chunked) body of one response that ends with the connection or the last chunk."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += s.recv(65536)
    head, rest = data.split(b"\r\n\r\n", 1)
    if b"transfer-encoding: chunked" not in head.lower():
        while chunk := s.recv(65536):
            rest += chunk
        return head, rest
    body = b""
    while True:
        while b"\r\n" not in rest:
            rest += s.recv(65536)
        size_line, rest = rest.split(b"\r\n", 1)
        size = int(size_line, 16)
        while len(rest) < size + 2:
            rest += s.recv(65536)
        if size == 0:
            return head, body
        body, rest = body + rest[:size], rest[size + 2 :]


def contents(body: bytes) -> list[str]:
    events = [line[6:] for line in body.decode().split("\n") if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    return [c["choices"][0]["delta"]["content"] for c in map(json.loads, events[:-1]) if c["choices"]]


def test_a_reader_that_falls_behind_gets_every_chunk_in_order(simulator):
    # The simulator writes chunks from its engine loop without blocking; what a full socket does not take is sent by
    # the request's own greenlet. A reader that pauses while ~3 MB are produced must still get all of it, in order.
    url = simulator("--ttft", "0.001", "--itl", "0.00001")
    s = raw_stream_request(int(url.rsplit(":", 1)[1]), 20000, rcvbuf=4096)
    time.sleep(1.0)
    head, body = read_response(s)
    s.close()
    assert head.startswith(b"HTTP/1.1 200")
    words = contents(body)
    assert len(words) == 20001  # the role-only delta, then one chunk per token
    assert words[1:] == [" " + _WORDS[i % len(_WORDS)] for i in range(20000)]


def test_an_http_1_0_client_gets_a_stream_that_ends_with_the_connection(sim):
    s = raw_stream_request(int(sim.rsplit(":", 1)[1]), 30, version="1.0")
    head, body = read_response(s)
    s.close()
    assert head.startswith(b"HTTP/1.1 200") and b"chunked" not in head.lower()
    assert len(contents(body)) == 31


def test_a_client_that_goes_away_mid_stream_frees_its_request(simulator):
    url = simulator("--ttft", "0.001", "--itl", "0.01")
    s = raw_stream_request(int(url.rsplit(":", 1)[1]), 10000)
    assert s.recv(65536).startswith(b"HTTP/1.1 200")
    deadline = time.monotonic() + 5
    while scrape(url).get("vllm:num_requests_running") != 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    s.close()
    while scrape(url).get("vllm:num_requests_running") != 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    m = scrape(url)
    assert m["vllm:num_requests_running"] == 0 and m.get("vllm:generation_tokens_total", 0) == 0


def test_clients_that_reset_before_the_reply_leave_nothing_behind(simulator):
    # Each client sends a stream request and resets the connection at once, before the response head can go out.
    # Their requests must leave the engine, and no later connection (which may get a reused fd number) may receive
    # a byte of their streams.
    url = simulator("--ttft", "0.5", "--itl", "0.01")
    port = int(url.rsplit(":", 1)[1])
    for _ in range(20):
        s = raw_stream_request(port, 3000)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.close()
    time.sleep(0.1)
    with socket.create_connection(("127.0.0.1", port)) as other:
        other.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        time.sleep(1.0)  # well past the first tokens of the reset requests
        other.settimeout(0.5)
        data = b""
        with contextlib.suppress(TimeoutError):
            while chunk := other.recv(65536):
                data += chunk
    assert data.endswith(b"\r\n\r\n{}"), data[:300]
    assert scrape(url)["vllm:num_requests_running"] == 0


def test_a_failed_engine_loop_ends_the_streams_and_the_simulator_instead_of_hanging_them():
    proc = subprocess.Popen(
        [sys.executable, "tests/servers/broken_engine_sim.py"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        url = proc.stdout.readline().strip().rsplit(" ", 1)[-1]
        body = {"model": "slabench-sim", "max_tokens": 50, "stream": True, "prompt": "hi"}
        # post's 10 s timeout turns a hang into socket.timeout (an OSError, not the HTTPException asserted here).
        with pytest.raises(http.client.HTTPException):
            post(url, "/v1/completions", body)
        assert proc.wait(30) == 1
        assert "RuntimeError: engine bug" in proc.stderr.read()
    finally:
        proc.kill()
        proc.wait()


def _typed_events(body: str) -> list[tuple[str, dict]]:
    """(event name, data) of each SSE event of a Responses stream."""
    out = []
    for block in body.strip().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines())
        out.append((fields["event"], json.loads(fields["data"])))
    return out


@pytest.mark.parametrize("profile", [(), ("--profile", "l4", "--model-profile", "llama-3.2-3b")])
def test_the_responses_api_streams_typed_events_ending_in_response_completed(simulator, profile):
    url = simulator(*(profile or ("--ttft", "0.01", "--itl", "0.001", "--output-tokens", "5")))
    model = json.loads(urllib.request.urlopen(url + "/v1/models").read())["data"][0]["id"]
    body = {
        "model": model,
        "input": "one two three",
        "instructions": "grade it",
        "max_output_tokens": 4,
        "stream": True,
    }
    status, text = post(url, "/v1/responses", body)
    assert status == 200 and "[DONE]" not in text
    events = _typed_events(text)
    kinds = [k for k, _ in events]
    assert kinds[:3] == ["response.created", "response.output_item.added", "response.content_part.added"]
    assert kinds[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert all(data["type"] == kind for kind, data in events)
    assert [d["sequence_number"] for _, d in events] == list(range(len(events)))
    deltas = [d["delta"] for k, d in events if k == "response.output_text.delta"]
    done = events[-1][1]["response"]
    assert done["status"] == "completed" and done["output"][0]["content"][0]["text"] == "".join(deltas)
    # instructions + input: 2 + 3 estimator tokens; the cap (4) is shorter than the answer (5 or the model's)
    assert done["usage"]["input_tokens"] == 5 and done["usage"]["output_tokens"] == 4
    assert done["usage"]["total_tokens"] == 9 and len(deltas) >= 1


def test_the_responses_api_unary_and_bad_requests(sim):
    status, body = post(sim, "/v1/responses", {"model": "slabench-sim", "input": [{"role": "user", "content": "a b"}]})
    data = json.loads(body)
    assert status == 200 and data["object"] == "response" and data["status"] == "completed"
    assert data["usage"]["input_tokens"] == 2 and data["usage"]["output_tokens"] == 5
    assert data["output"][0]["content"][0]["type"] == "output_text"
    status, body = post(sim, "/v1/responses", {"model": "slabench-sim", "input": 42})
    assert status == 400 and "`input` must be a string or a non-empty list of messages" in body
    status, _ = post(sim, "/v1/responses", {"model": "other", "input": "x"})
    assert status == 404


def test_a_reasoning_phase_comes_before_the_answer_in_chat_and_responses(simulator):
    """`--reasoning-tokens 3`: three reasoning tokens, then the answer's five; the usage counts all and says which."""
    url = simulator("--ttft", "0.01", "--itl", "0.001", "--output-tokens", "5", "--reasoning-tokens", "3")
    messages = [{"role": "user", "content": "one two"}]
    chat = {"model": "slabench-sim", "messages": messages, "max_tokens": 20, "stream": True}
    status, text = post(url, "/v1/chat/completions", {**chat, "stream_options": {"include_usage": True}})
    chunks = [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: {")]
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    kinds = [k for d in deltas for k in ("reasoning_content", "content") if d.get(k)]
    assert status == 200 and kinds == ["reasoning_content"] * 3 + ["content"] * 5
    usage = chunks[-1]["usage"]
    assert usage["completion_tokens"] == 8 and usage["completion_tokens_details"] == {"reasoning_tokens": 3}

    body = {"model": "slabench-sim", "input": "one two", "max_output_tokens": 20, "stream": True}
    status, text = post(url, "/v1/responses", body)
    kinds = [k for k, _ in _typed_events(text) if k.endswith(".delta")]
    assert kinds == ["response.reasoning_text.delta"] * 3 + ["response.output_text.delta"] * 5
    usage = _typed_events(text)[-1][1]["response"]["usage"]
    assert usage["output_tokens"] == 8 and usage["output_tokens_details"] == {"reasoning_tokens": 3}

    # completions have no reasoning phase
    status, text = post(url, "/v1/completions", {"model": "slabench-sim", "prompt": "x", "max_tokens": 20})
    assert json.loads(text)["usage"]["completion_tokens"] == 5


def test_usage_says_how_many_prompt_tokens_the_prefix_cache_held(simulator):
    """A second request with the same system prompt finds it in the engine's prefix cache, and its usage says so
    (chat: prompt_tokens_details.cached_tokens; Responses: input_tokens_details.cached_tokens)."""
    url = simulator("--profile", "l4", "--model-profile", "llama-3.2-3b")
    model = json.loads(urllib.request.urlopen(url + "/v1/models").read())["data"][0]["id"]
    shared = {"role": "system", "content": "the shared rubric " * 100}
    cached = []
    for i in range(2):
        body = {"model": model, "messages": [shared, {"role": "user", "content": f"case {i}"}], "max_tokens": 2}
        usage = json.loads(post(url, "/v1/chat/completions", body)[1])["usage"]
        cached.append(usage["prompt_tokens_details"]["cached_tokens"])
    body = {"model": model, "instructions": shared["content"], "input": "case 2", "max_output_tokens": 2}
    usage = json.loads(post(url, "/v1/responses", body)[1])["usage"]
    assert cached[0] == 0 and 0 < cached[1] < usage["input_tokens"]
    assert usage["input_tokens_details"]["cached_tokens"] == cached[1]
