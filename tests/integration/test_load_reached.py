"""The load a verdict speaks for is the load measured: real Locust runs graded at 8 users, one with every user spawned
at once, one whose spawn rate (1 user/s over 5 s) never reached 8 — that one cannot PASS, exits 4 and says how many
users it held."""

import json

import pytest

from tests.helpers.locust_run import CHAT, run_users
from tests.helpers.sla_helpers import write
from tests.integration.test_saturation import FAST, GENEROUS


@pytest.mark.parametrize(("spawn_rate", "run_time", "reached"), [("8", "3s", True), ("1", "5s", False)])
def test_the_verdict_is_at_the_concurrency_measured(simulator, tmp_path, spawn_rate, run_time, reached):
    url = simulator(*FAST)
    records = tmp_path / "run" / "records.jsonl"
    sla = write(tmp_path, GENEROUS.replace("{LOAD}", "{concurrency: 8}"))
    res = run_users(
        CHAT, url, records, "--prompt-tokens", "16", "--sla", str(sla),
        users=8, spawn_rate=spawn_rate, run_time=run_time, stop_timeout=10,
    )  # fmt: skip
    verdict = json.loads((records.parent / "verdict.json").read_text())
    short = [r for r in verdict["incomplete"] if "the load was not reached" in r]
    if reached:
        assert verdict["measured_load"] == 8 and not short, verdict
        return
    assert res.returncode == 4, res.stderr[-3000:]
    assert 1 <= verdict["measured_load"] < 8 and verdict["verdict"] != "PASS", verdict
    (line,) = short
    assert f"concurrency 8: the load was not reached — {verdict['measured_load']:g} users were active" in line
