"""The QA-grading workload end to end: Locust → simulator in grading mode → answer parsed and scored → records."""

from collections import Counter

import pytest

from slabench.core.record import Outcome
from slabench.core.sinks import read_records
from slabench.workload import load_settings
from tests.helpers.locust_run import ROOT, assert_exit, run_locust, scrape


def test_measured_item_accuracy_matches_the_simulated_models(tmp_path):
    records_path = tmp_path / "r.jsonl"
    res = run_locust(
        "-f",
        str(ROOT / "locustfiles" / "qa_grading.py"),
        "-u",
        "4",
        "-r",
        "4",
        "-t",
        "10s",
        "--stop-timeout",
        "10",
        "--sim-ttft",
        "0.01",
        "--sim-itl",
        "0.0002",
        "--sim-grading-accuracy",
        "0.8",
        "--qa-task",
        "verbose",
        "--records",
        str(records_path),
    )
    assert_exit(res.returncode, records_path.parent, 0, output=res.stderr)
    records = read_records(records_path)
    assert len(records) > 40 and all(r.outcome is Outcome.OK for r in records)
    assert all(r.parse_ok and r.quality_task == "verbose" and r.account for r in records)
    accuracy = sum(r.items_correct for r in records) / sum(r.items_expected for r in records)
    assert abs(accuracy - 0.8) <= 0.03
    assert {r.account for r in records} == set(load_settings().accounts)


def test_golden_calls_are_drawn_by_account_share():
    """Draws, not completions: closed loop, accounts with long calls complete fewer requests per second."""
    import random

    from locustfiles.qa_grading import GoldenCalls

    golden = GoldenCalls(str(ROOT / "datasets"))
    rng = random.Random(7)
    n = 20_000
    seen = Counter(golden.draw(rng).account for _ in range(n))
    for account, a in load_settings().accounts.items():
        assert abs(seen[account] / n - a.share) < 0.015, (account, seen[account] / n, a.share)


def test_terse_task_and_an_unparseable_answer_is_a_quality_failure_not_an_error(simulator, tmp_path):
    url = simulator("--ttft", "0.01", "--itl", "0.0002")
    records_path = tmp_path / "r.jsonl"
    res = run_locust(
        "-f",
        str(ROOT / "locustfiles" / "qa_grading.py"),
        "--host",
        url,
        "-u",
        "2",
        "-r",
        "2",
        "-t",
        "3s",
        "--stop-timeout",
        "5",
        "--qa-task",
        "terse",
        "--records",
        str(records_path),
        "--model",
        "slabench-sim",
    )
    assert_exit(res.returncode, records_path.parent, 0, output=res.stderr)
    records = read_records(records_path)
    # The standalone simulator grades too (default accuracy 0.9): its answers parse.
    assert records and all(r.outcome is Outcome.OK and r.parse_ok for r in records)
    assert all(r.quality_task == "terse" for r in records)


QA_RATE = str(ROOT / "locustfiles" / "qa_grading.py") + "," + str(ROOT / "shapes" / "rate.py")
QA_BURST = str(ROOT / "locustfiles" / "qa_grading.py") + "," + str(ROOT / "shapes" / "burst.py")
FAST_SIM = ("--sim-ttft", "0.01", "--sim-itl", "0.0002")


def test_arrivals_that_name_no_call_grade_golden_calls_drawn_by_their_index(tmp_path):
    """A rate shape's arrivals carry no account or seed: each gets a golden call, the same one on any worker."""
    records_path = tmp_path / "r.jsonl"
    res = run_locust("-f", QA_RATE, "--rate-rps", "4", "--rate-hold", "3", *FAST_SIM, "--records", str(records_path))
    assert_exit(res.returncode, records_path.parent, 0, output=res.stderr)
    records = read_records(records_path)
    assert len(records) >= 4 and all(r.outcome is Outcome.OK and r.parse_ok for r in records)
    assert all(r.account in load_settings().accounts and r.scheduled is not None for r in records)


@pytest.mark.parametrize(
    ("queue", "says"),
    [
        ("offset_s,account,seed\n0.0,A,5\n0.1,Z,6\n", "queue item queue-00001: account: unknown account 'Z'"),
        ("offset_s,account\n0.0,A\n", "queue item queue-00000: a QA-grading call is named by its account and its seed"),
    ],
)
def test_a_queue_naming_calls_the_workload_cannot_build_is_one_line_before_any_load(simulator, tmp_path, queue, says):
    url = simulator(*(a.removeprefix("--sim-") and a.replace("--sim-", "--") for a in FAST_SIM))
    (tmp_path / "q.csv").write_text(queue)
    res = run_locust("-f", QA_BURST, "--host", url, "--burst-queue", str(tmp_path / "q.csv"),
                     "--records", str(tmp_path / "r.jsonl"))  # fmt: skip
    assert res.returncode == 3, res.stderr[-2000:]
    assert "Traceback" not in res.stderr
    (line,) = [x for x in res.stderr.splitlines() if "/ERROR/" in x]
    assert f"{tmp_path / 'q.csv'}: {says}" in line, line
    assert scrape(url).get("slabench_sim_requests_received_total", 0) == 0
