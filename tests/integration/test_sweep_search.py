"""`slabench sweep --search` end to end: real Locust runs against the simulator's vLLM model of a card that runs two
requests at a time, so TTFT climbs once a third user queues. The search runs only the levels bisection needs, the
levels that passed all lie below those that did not, the bracket ends within the tolerance, and the contract's own
load is run for the verdict. The line it prints for `slabench plan --compare-search` runs as printed and sets the
plan's answer beside the search's, for the built-in profile the simulator served and for one calibrated from the
search's own runs."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest

from tests.helpers.locust_run import ROOT, assert_exit
from tests.helpers.sla_helpers import write

SWEEP = """\
name: search
simulator: {profile: l4, model_profile: llama-3.2-3b, max_num_seqs: 2, stream_interval: 4}
locust_options: {max-tokens: 24, prompt-tokens: 64, ignore-eos: true}
levels: [1, 6]
repeats: 2
run: {requests: 30, max_duration_s: 60}
analysis: {report: false}
"""

CONTRACT = """\
name: search
load: {concurrency: 6}
deployment: {instance_type: g6.xlarge}
min_repeats: 2
targets:
  ttft_p95_s: {max: 0.25}
  error_rate: {max: 0.5}
  throughput_rps: {min: 1000}  # a floor no level meets: it must not steer the search
"""


@pytest.mark.slow
def test_search_bisects_to_the_highest_passing_level(tmp_path):
    cfg, sla = write(tmp_path, SWEEP, "sweep.yaml"), write(tmp_path, CONTRACT, "sla.yaml")
    argv = [sys.executable, "-m", "slabench", "sweep", "--config", str(cfg), "--sla", str(sla), "--search",
            "--search-tolerance", "2", "--sweep-id", "s", "--output-dir", str(tmp_path / "runs")]  # fmt: skip
    p = subprocess.run(argv, capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert_exit(p.returncode, tmp_path / "runs" / "s", 2, output=p.stdout[-2000:] + p.stderr)  # the floor fails
    found = json.loads((tmp_path / "runs" / "s" / "search.json").read_text())
    steps = found["steps"]
    levels = [s["level"] for s in steps]
    assert levels[:2] == [1, 6] and len(set(levels)) == len(levels)
    assert len(levels) <= 2 + math.ceil(math.log2((6 - 1) / 2))  # bisection, not a grid
    passed = [s["level"] for s in steps if s["status"] == "PASS"]
    failed = [s["level"] for s in steps if s["status"] != "PASS"]
    assert passed and failed and max(passed) < min(failed)  # one boundary
    assert found["highest_passing"] == max(passed) and found["lowest_failing"] == min(failed)
    assert found["lowest_failing"] - found["highest_passing"] <= 2
    assert 1 <= found["highest_passing"] < 6  # two at a time: a queue forms well before six users
    assert f"search: {found['answer']}" in " ".join(p.stderr.split())  # the answer, as printed
    # the contract's own load was run too, and graded
    verdict = json.loads((tmp_path / "runs" / "s" / "verdict.json").read_text())
    assert verdict["graded_level"] == "concurrency 6"
    tested = {lv["level"] for lv in verdict["levels"]}
    assert tested == {f"concurrency {n}" for n in levels}  # the contract's load was one of the searched levels

    # the search prints the plan's command for its own profile and flags; run as printed, it sets the plan's answer
    # beside the search's, in one table at 80 columns: the simulator is the profile, so they agree
    (line,) = [ln for ln in p.stderr.splitlines() if "slabench plan --compare-search" in ln]
    command = line.split("search: beside a plan's answer: ", 1)[1].split()
    assert command[:3] == ["slabench", "plan", "--compare-search"] and "--max-num-seqs" in command
    env = {**os.environ, "COLUMNS": "80"}
    q = subprocess.run([sys.executable, "-m", *command], capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)
    assert q.returncode == 0, q.stdout[-2000:] + q.stderr[-2000:]
    assert max(map(len, q.stdout.splitlines())) <= 80, q.stdout
    rows = {ln.split("│")[1].strip(): ln for ln in q.stdout.splitlines() if ln.count("│") == 4}
    assert f"│ {found['highest_passing']:>5} │" in rows["sweep --search (measured)"], q.stdout
    compared = json.loads((tmp_path / "runs" / "s" / "compare.json").read_text())
    (plan,) = compared["plans"]
    assert rows["plan: l4"].split("│")[2].strip() == str(plan["highest_passing"])
    assert "they agree" in " ".join(q.stdout.split()), q.stdout

    # a profile calibrated from the search's own runs, beside the search: it agrees too
    cal = tmp_path / "cal.yaml"
    fit = [sys.executable, "-m", "slabench", "calibrate", str(tmp_path / "runs" / "s"), "--model", "llama-3.2-3b",
           "--max-num-seqs", "2", "--kv-cache-tokens", "100000", "--out", str(cal)]  # fmt: skip
    c = subprocess.run(fit, capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)
    assert c.returncode == 0, c.stdout[-2000:] + c.stderr[-2000:]
    at = command.index("--profiles")
    calibrated = [*command[: at + 1], str(cal), *command[at + 2 :]]
    q = subprocess.run([sys.executable, "-m", *calibrated], capture_output=True, text=True, timeout=300, cwd=ROOT,
                       env=env)  # fmt: skip
    assert q.returncode == 0, q.stdout[-2000:] + q.stderr[-2000:]
    said = " ".join(q.stdout.split())
    assert "│ plan: cal " in q.stdout and "cal: the search's bracket lies within" in said, q.stdout
    assert "cal was calibrated at 1–6 users" in said, q.stdout
