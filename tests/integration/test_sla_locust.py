"""The Locust-side hook end to end: the real `locust --headless ... --sla FILE` against the simulator exits 0 on a
contract that passes and 2 on one that fails (also in distributed mode, where only the master grades), 0 on a
CONDITIONAL with --sla-allow-conditional, and 3 on a bad contract before any load is sent."""

import json

from slabench.core.sinks import read_records
from tests.helpers.locust_run import assert_exit, pass_or_doubtful, run_users
from tests.helpers.sla_helpers import write

FAST = ("--ttft", "0.02", "--itl", "0.002", "--output-tokens", "20")

# A locustfile as a CI user would write it until `install()` of the plugin registers the hook itself.
LOCUSTFILE = """\
from locustfiles.chat_replay import ChatReplayUser  # noqa: F401
from slabench.locust.sla import install

install()
"""

PASSES = """\
name: sim-passes
load: {concurrency: 4}
deployment: {instance_type: g6e.xlarge}
targets:
  ttft_p95_s: {max: 2.0}
  error_rate: {max: 0.1}
  throughput_rps: {min: 1}
  cost_per_million_output_tokens_usd: {max: 100}
"""
FAILS = PASSES.replace("ttft_p95_s: {max: 2.0}", "ttft_p95_s: {max: 0.001}")


# error_rate ≤ 10 %: 0 errors in ≥ 36 requests prove it (Clopper-Pearson upper bound); ≤ 1 % would need ≥ 368.


def locust(tmp_path, url, sla, *extra, users=4):
    lf = write(tmp_path, LOCUSTFILE, "sla_locustfile.py")
    records = tmp_path / "run" / "records.jsonl"
    res = run_users(
        lf, url, records, "--prompt-tokens", "32", "--sla", str(sla), *extra, users=users, run_time="2s", stop_timeout=5
    )
    return res, records


def test_a_passing_contract_exits_0_and_a_failing_one_exits_2(simulator, tmp_path):
    url = simulator(*FAST)
    res, records = locust(tmp_path, url, write(tmp_path, PASSES))
    assert_exit(res.returncode, records.parent, 0, output=res.stderr)
    verdict = json.loads((records.parent / "verdict.json").read_text())
    assert verdict["verdict"] == pass_or_doubtful(res.returncode, verdict) and verdict["single_run"] is True
    assert verdict["graded_level"] == "concurrency 4"
    assert verdict["checks"][0]["samples"] == sum(r.outcome == "ok" for r in read_records(records))
    assert f"slabench sla: {verdict['verdict']}: sim-passes at concurrency 4" in res.stderr
    assert "the verdict rests on a single run" in res.stderr

    (tmp_path / "run").rename(tmp_path / "run-pass")
    res, records = locust(tmp_path, url, write(tmp_path, FAILS), "--processes", "2")
    assert_exit(res.returncode, records.parent, 2, output=res.stderr)  # a FAIL stays FAIL on a busy machine
    verdict = json.loads((records.parent / "verdict.json").read_text())
    assert verdict["verdict"] == "FAIL"
    ttft = verdict["checks"][0]
    assert ttft["check"] == "ttft_p95_s" and ttft["status"] == "FAIL" and ttft["observed"] > 0.001
    assert len({r.worker_id for r in read_records(records)}) == 2  # both workers' records were graded
    assert res.stderr.count("slabench sla: FAIL:") == 1  # the master grades, the workers do not


def test_a_plain_run_is_at_its_user_count_and_conditional_can_be_allowed(simulator, tmp_path):
    url = simulator(*FAST)
    soft = PASSES.replace("{max: 2.0}", "{max: 2.0, severity: soft}").replace("error_rate: {max: 0.1}", "")
    soft = soft.replace("throughput_rps: {min: 1}", "").replace("{max: 100}", "{max: 100, severity: soft}")
    res, records = locust(tmp_path, url, write(tmp_path, soft), "--sla-allow-conditional", users=2)
    assert_exit(res.returncode, records.parent, 0, output=res.stderr)  # CONDITIONAL, allowed
    verdict = json.loads((records.parent / "verdict.json").read_text())
    assert verdict["verdict"] == "CONDITIONAL" and verdict["graded_level"] is None
    # -u 2 is concurrency 2, not the contract's 4: no data, which a soft check turns into CONDITIONAL, never PASS
    assert all(c["no_data"] and c["status"] == "CONDITIONAL" for c in verdict["checks"])
    assert "the run tested concurrency 2" in verdict["checks"][0]["reason"]


def test_a_bad_contract_exits_3_before_any_load(simulator, tmp_path):
    url = simulator(*FAST)
    bad = write(tmp_path, PASSES.replace("error_rate", "eror_rate"))
    res, records = locust(tmp_path, url, bad)
    assert res.returncode == 3
    assert "sla.yaml:6: targets.eror_rate: unknown key" in res.stderr
    assert not records.exists()


def test_a_second_targets_block_exits_3_before_any_load_not_pass(simulator, tmp_path):
    """YAML keeps the last of two equal keys: the lenient second `targets:` would have turned this FAIL into PASS."""
    url = simulator(*FAST)
    doubled = FAILS + "targets:\n  ttft_p95_s: {max: 2.0}\n"
    res, records = locust(tmp_path, url, write(tmp_path, doubled))
    assert res.returncode == 3, res.stderr[-3000:]
    assert "sla.yaml:9: duplicate key 'targets' (first at line 4)" in res.stderr
    assert not records.exists()


def test_a_misspelt_locust_option_exits_3_never_2(tmp_path):
    """Locust's argparse exits 2 on a usage error — which CI would read as an SLA FAIL. With slabench loaded, the
    real `locust` command exits 3 (bad input), one clear error, no load."""
    import subprocess
    import sys
    from pathlib import Path

    from tests.helpers.locust_run import ROOT

    locust_cmd = str(Path(sys.executable).with_name("locust"))
    sla = write(tmp_path, PASSES)
    for typo in (["--hedless"], ["-u", "four"], ["--sla-allow-conditonal"]):
        argv = [locust_cmd, "-f", "locustfiles/chat_replay.py", "--headless", "-t", "1s", "--sla", str(sla), *typo]
        res = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, timeout=120)
        assert res.returncode == 3, (typo, res.stderr[-2000:])
        assert "error:" in res.stderr and "Traceback" not in res.stderr
        assert not (tmp_path / "verdict.json").exists()
    assert "Did you mean '--sla-allow-conditional'?" in res.stderr  # Locust's own hint is kept


def test_a_run_that_answered_nothing_exits_4_whatever_the_verdict(tmp_path):
    res, records = locust(tmp_path, "http://127.0.0.1:9", write(tmp_path, PASSES))
    assert res.returncode == 4, res.stderr[-3000:]
    assert "the run is incomplete (exit 4): no request was answered" in res.stderr
    assert "Traceback" not in res.stderr
    status = json.loads((records.parent / "run_status.json").read_text())
    assert status["degraded"] and status["incomplete_reasons"] == ["no request was answered"]
