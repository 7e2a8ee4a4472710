"""`slabench deploy` refuses a maxModelLen that the workload's longest request (prompt + max_tokens) does not fit,
in one line and before anything is rendered or installed; with `--tokenizer` the count is the model's own."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from slabench.core.tokens import ChatTokenizer
from slabench.deploy.context import check_context, longest_request
from slabench.workload import build_messages, load_golden, load_settings, prompt_tokens
from tests.helpers.platform_helpers import ROOT, get_helm
from tests.helpers.tokenizer_helpers import build_coarse_tokenizer

SLA = "name: qa\nload: {scenario: burst}\ndeployment: {instance_type: g6e.xlarge}\ntargets:\n  ttft_p95_s: {max: 2.0}\n"


def dry_run(tmp_path: Path, *extra: str, helm: str | None = None) -> subprocess.CompletedProcess:
    sla = tmp_path / "sla.yaml"
    sla.write_text(SLA)
    argv = [sys.executable, "-m", "slabench.deploy.cli", "--dry-run", "--sla", str(sla), "--helm", helm or get_helm(4),
            *extra]  # fmt: skip
    return subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd=ROOT)


def values(tmp_path: Path, max_model_len: int) -> tuple[str, str]:
    f = tmp_path / f"serving-{max_model_len}.yaml"
    f.write_text(f"model:\n  maxModelLen: {max_model_len}\n")
    return "--serving-values", str(f)


def test_the_longest_request_covers_the_golden_calls_and_the_queue():
    longest = longest_request(str(ROOT / "datasets"), "verbose")
    golden = max(prompt_tokens(g, "verbose") for g in load_golden(ROOT / "datasets"))
    assert longest.max_tokens == load_settings().output.max_tokens == 2048
    assert longest.prompt_tokens >= golden
    assert longest.unit == "estimator tokens" and longest.call.startswith(("burst queue item", "golden call"))


def test_with_the_tokenizer_the_count_is_the_models(tmp_path):
    tok = ChatTokenizer(build_coarse_tokenizer(tmp_path))
    estimated = longest_request(str(ROOT / "datasets"), "verbose")
    counted = longest_request(str(ROOT / "datasets"), "verbose", tok)
    assert counted.unit == "the model's tokens"
    golden = max(tok.count(build_messages(g, "verbose")) for g in load_golden(ROOT / "datasets"))
    assert counted.prompt_tokens >= golden > estimated.prompt_tokens  # this tokenizer spends ~3 tokens per estimate


def test_a_short_context_is_one_line_naming_the_file_and_the_fix(tmp_path):
    r = dry_run(tmp_path, *values(tmp_path, 8192), helm="/nonexistent/helm")  # refused before helm is needed
    assert r.returncode == 3, r.stderr
    (line,) = r.stderr.strip().splitlines()
    longest = longest_request(str(ROOT / "datasets"), "verbose")
    assert "serving-8192.yaml: maxModelLen 8192 is shorter than the workload's longest request" in line
    assert f"= {longest.total} estimator tokens" in line
    assert f"set model.maxModelLen to at least {longest.total}" in line
    assert r.stdout == ""


def test_the_chart_default_fits_the_workload(tmp_path):
    r = dry_run(tmp_path)
    assert r.returncode == 0, r.stderr
    assert "deploy: context: maxModelLen 16384 ≥ the longest request" in r.stderr


def test_the_models_tokens_decide_when_a_tokenizer_is_given(tmp_path):
    (tmp_path / "tok").mkdir()
    folder = build_coarse_tokenizer(tmp_path / "tok")
    r = dry_run(tmp_path, "--tokenizer", str(folder))
    assert r.returncode == 3 and "maxModelLen 16384 is shorter" in r.stderr and "the model's tokens" in r.stderr
    r = dry_run(tmp_path, "--tokenizer", str(folder), *values(tmp_path, 65536))
    assert r.returncode == 0, r.stderr


def test_a_run_of_another_workload_is_not_held_to_the_qa_lengths(tmp_path):
    locust = tmp_path / "locust.yaml"
    locust.write_text("locustfile: locustfiles/chat_replay.py\n")
    r = dry_run(tmp_path, *values(tmp_path, 4096), "--locust-values", str(locust))
    assert r.returncode == 0, r.stderr
    assert "context check skipped: locustfiles/chat_replay.py" in r.stderr


def test_an_unknown_qa_task_in_the_values_is_one_line_naming_the_flag(tmp_path):
    locust = tmp_path / "locust.yaml"
    locust.write_text("headless:\n  extraArgs: [--qa-task, brief]\n")
    r = dry_run(tmp_path, "--locust-values", str(locust), helm="/nonexistent/helm")  # refused before helm is needed
    assert r.returncode == 3, r.stderr
    (line,) = r.stderr.strip().splitlines()
    assert "--qa-task 'brief' in the Locust values' extraArgs: unknown grading task" in line
    assert "(use one of: verbose, terse)" in line


@pytest.mark.parametrize(("max_model_len", "fits"), [(11828, True), (11827, False)])
def test_the_limit_is_prompt_plus_max_tokens(max_model_len, fits):
    from slabench.core.errors import UserError
    from slabench.deploy.context import Longest

    longest = Longest(9780, 2048, "burst queue item 5013 (verbose task)", "estimator tokens")
    if fits:
        check_context(max_model_len, longest, "x.yaml")
    else:
        with pytest.raises(UserError, match="at least 11828"):
            check_context(max_model_len, longest, "x.yaml")
