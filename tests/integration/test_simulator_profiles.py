"""The simulator as a vLLM capacity model, served over HTTP: its /metrics agree with the harness's records."""

from slabench.core.record import Outcome
from slabench.core.sinks import read_records
from tests.helpers.locust_run import CHAT, assert_exit, run_users, scrape


def test_profile_engine_metrics_agree_with_records(simulator, tmp_path):
    url = simulator("--profile", "l4")
    records_path = tmp_path / "r.jsonl"
    res = run_users(
        CHAT, url, records_path, "--max-tokens", "24", "--prompt-tokens", "300", users=4, run_time="3s", stop_timeout=20
    )
    assert_exit(res.returncode, records_path.parent, 0, output=res.stderr)
    records = read_records(records_path)
    assert records and all(r.outcome is Outcome.OK for r in records)
    m = scrape(url)
    assert m["vllm:request_success_total"] == len(records)
    assert m["vllm:prompt_tokens_total"] == sum(r.prompt_tokens for r in records)
    assert m["vllm:generation_tokens_total"] == sum(r.completion_tokens for r in records)
    assert m["vllm:request_queue_time_seconds_count"] == len(records)
    assert m["vllm:request_prefill_time_seconds_sum"] > 0
    assert m["vllm:num_requests_running"] == 0
    # Client TTFT includes the server's queue + prefill, so it is never below the server's own view.
    client_ttft = sum(r.first_token - r.sent for r in records) / len(records)
    server_ttft = m["vllm:time_to_first_token_seconds_sum"] / m["vllm:time_to_first_token_seconds_count"]
    assert client_ttft >= server_ttft
