"""Honest repeats: a repeat must not measure the prefix cache the run before it filled. The simulator serves vLLM's
POST /reset_prefix_cache in dev mode only (as vLLM does); a sweep empties the cache before each run where the server
offers it, and otherwise starts every prompt of the run with a salt no earlier run's cache can match — and each
run's manifest says which was done."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request

from tests.helpers.locust_run import ROOT, scrape
from tests.helpers.sla_helpers import write

PROFILE = ("--profile", "l4", "--model-profile", "llama-3.2-3b")


def post(url: str, path: str, body: dict | None = None) -> int:
    data = json.dumps(body).encode() if body is not None else b""
    req = urllib.request.Request(url + path, data, {"Content-Type": "application/json"}, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            r.read()
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def test_the_reset_endpoint_empties_the_cache_in_dev_mode_only(simulator):
    plain = simulator(*PROFILE)
    assert post(plain, "/reset_prefix_cache") == 404  # vLLM without VLLM_SERVER_DEV_MODE has no such route
    url = simulator(*PROFILE, "--dev-mode")
    system = " ".join(["policy"] * 64)  # four blocks of 16 tokens, shared by every request below
    body = {"model": "slabench-sim", "max_tokens": 2, "messages": [
        {"role": "system", "content": system}, {"role": "user", "content": "a b c"}]}  # fmt: skip
    assert post(url, "/v1/chat/completions", body) == 200
    assert post(url, "/v1/chat/completions", body) == 200
    hits = scrape(url)["vllm:prefix_cache_hits_total"]
    assert hits > 0  # the second request found the first one's blocks
    assert post(url, "/reset_prefix_cache") == 200
    assert post(url, "/v1/chat/completions", body) == 200
    assert scrape(url)["vllm:prefix_cache_hits_total"] == hits  # nothing left to hit after the reset


SWEEP = """\
name: fresh
{target}simulator: {{profile: l4, model_profile: llama-3.2-3b}}
locust_options: {{max-tokens: 4, prompt-tokens: 64}}
levels: [2]
repeats: 2
run: {{requests: 10, max_duration_s: 60}}
analysis: {{report: false}}
"""


def sweep(tmp_path, target: str = "") -> list[dict]:
    cfg = write(tmp_path, SWEEP.format(target=target), "sweep.yaml")
    argv = [sys.executable, "-m", "slabench", "sweep", "--config", str(cfg), "--sweep-id", "s",
            "--output-dir", str(tmp_path / "runs")]  # fmt: skip
    p = subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert p.returncode == 0, p.stderr[-3000:]
    return [json.loads((tmp_path / "runs" / "s" / "2" / str(r) / "manifest.json").read_text()) for r in (1, 2)]


def test_a_sweep_resets_the_embedded_simulators_cache_before_each_run(tmp_path):
    for m in sweep(tmp_path):
        assert m["prefix_cache"] == {"method": "reset", "detail": "POST /reset_prefix_cache: HTTP 200"}
        assert "--prompt-salt" not in m["argv"]


def test_without_the_endpoint_each_run_salts_its_prompts(tmp_path, simulator):
    url = simulator(*PROFILE)
    manifests = sweep(tmp_path, target=f"target: {{url: '{url}'}}\n")
    salts = []
    for m in manifests:
        cache = m["prefix_cache"]
        assert cache["method"] == "salted" and cache["detail"].startswith("POST /reset_prefix_cache: HTTP 404")
        assert m["argv"][m["argv"].index("--prompt-salt") + 1] == cache["salt"]
        salts.append(cache["salt"])
    assert len(set(salts)) == 2  # each repeat its own
