"""Concurrency steps (distributed), rate and diurnal arrivals, shape selection and bad input — the real `locust`
command against the simulator."""

from __future__ import annotations

import itertools
import subprocess
import sys
from collections import Counter, defaultdict
from collections.abc import Iterator

import pytest

from slabench.core.record import Outcome
from slabench.core.sinks import read_records
from slabench.shapes.schedules import OFFICE_DAY, Diurnal, rate_arrivals, step_plan
from tests.helpers.locust_run import ROOT, assert_exit, exit_for, run_locust, scrape
from tests.integration.test_shapes_burst import processes, small_queue

FAST = ("--ttft", "0.02", "--itl", "0.002", "--output-tokens", "16")
STEPS, BURST = "locustfiles/chat_replay.py,shapes/steps.py", "locustfiles/chat_replay.py,shapes/burst.py"
RATE, DIURNAL = "locustfiles/chat_replay.py,shapes/rate.py", "locustfiles/chat_replay.py,shapes/diurnal.py"


@pytest.fixture(scope="module")
def shared_simulator() -> Iterator[str]:
    """One simulator for the bad-input cases: none of them may send it a request."""
    argv = [sys.executable, "-m", "slabench", "simulate", "--port", "0", *FAST]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    line = proc.stdout.readline().strip()
    assert line.startswith("slabench simulator listening on "), proc.stderr.read()
    yield line.rsplit(" ", 1)[-1]
    proc.terminate()
    proc.wait(5)


def test_concurrency_steps_stamp_every_record_with_its_stage_on_two_workers(simulator, tmp_path):
    url = simulator("--ttft", "0.05", "--itl", "0.005", "--output-tokens", "10")  # ~0.1 s per request
    records_path = tmp_path / "records.jsonl"
    res = run_locust(
        "-f",
        "locustfiles/chat_replay.py,shapes/steps.py",
        "--host",
        url,
        "--steps-levels",
        "1,3",
        "--steps-warmup",
        "1.5",
        "--steps-hold",
        "1.5",
        "--steps-cooldown",
        "0",
        "--steps-repeats",
        "2",
        "--steps-spawn-rate",
        "100",  # users start at once: the warm-up only has to cover Locust's 1 s shape tick
        *processes(2),
        "--prompt-tokens",
        "16",
        "--records",
        str(records_path),
        timeout=120,
    )
    assert res.returncode == exit_for(tmp_path), res.stderr[-3000:]
    records = read_records(records_path)
    assert all(r.outcome in (Outcome.OK, Outcome.DROPPED) for r in records)
    stages = Counter((r.stage_level, r.stage_repeat, r.stage_phase) for r in records)
    assert all(k[0] in (1, 3) and k[1] in (0, 1) and k[2] in ("warmup", "hold") for k in stages)
    for level, rep in itertools.product((1, 3), (0, 1)):
        assert stages[(level, rep, "hold")] >= 5, stages
    # sweep order: hold stages appear in time as (1,0), (3,0), (1,1), (3,1)
    holds = sorted((r for r in records if r.stage_phase == "hold"), key=lambda r: r.wall_sent)
    order = [k for k, _ in itertools.groupby((r.stage_level, r.stage_repeat) for r in holds)]
    assert order == [(1, 0), (3, 0), (1, 1), (3, 1)]
    # during a hold exactly `level` users were sending, spread over both workers for level 3
    users: dict[tuple, set] = defaultdict(set)
    for r in holds:
        users[(r.stage_level, r.stage_repeat)].add(r.user_id)
    assert {k: len(v) for k, v in users.items()} == {(1, 0): 1, (3, 0): 3, (1, 1): 1, (3, 1): 3}
    assert len({r.worker_id for r in holds if r.stage_level == 3}) == 2
    assert scrape(url)["slabench_sim_requests_received_total"] == len(records)


def test_rate_steps_send_the_seeded_arrivals_at_their_times(simulator, tmp_path):
    url = simulator(*FAST)
    records_path = tmp_path / "records.jsonl"
    res = run_locust(
        "-f",
        "locustfiles/chat_replay.py,shapes/steps.py,shapes/rate.py",
        "--shape",
        "rate",  # several shapes loaded: pick one by name
        "--host",
        url,
        "--rate-rps",
        "10,40",
        "--rate-warmup",
        "0.5",
        "--rate-hold",
        "1.5",
        "--rate-burstiness",
        "0.5",
        "--rate-seed",
        "11",
        "--open-loop-start-delay",
        "0.5",
        "--prompt-tokens",
        "16",
        "--records",
        str(records_path),
    )
    assert_exit(res.returncode, records_path.parent, 0, output=res.stderr)
    records = read_records(records_path)
    plan = step_plan([10.0, 40.0], warmup=0.5, hold=1.5)
    arrivals = rate_arrivals(plan, 0.5, seed=11)
    assert len(records) == len(arrivals) > 40
    assert all(r.outcome is Outcome.OK for r in records)
    # one process: scheduled = t0 + due exactly, so the offsets are the seeded ones
    got = sorted(r.scheduled for r in records)
    t0 = got[0] - arrivals[0].offset
    assert [g - t0 for g in got] == pytest.approx([a.offset for a in arrivals], abs=1e-6)
    by_stage = Counter((r.stage_level, r.stage_phase) for r in records)
    want = Counter((round(a.span.level * 1000), a.span.phase) for a in arrivals)
    assert by_stage == want
    assert all(r.sent >= r.scheduled for r in records)


def test_a_compressed_diurnal_day_follows_its_curve(simulator, tmp_path):
    url = simulator(*FAST)
    records_path = tmp_path / "records.jsonl"
    res = run_locust(
        "-f",
        "locustfiles/chat_replay.py,shapes/diurnal.py",
        "--host",
        url,
        "--diurnal-peak-rps",
        "60",
        "--diurnal-day-minutes",
        "0.05",  # a day in 3 s
        "--open-loop-start-delay",
        "0.5",
        "--diurnal-seed",
        "4",
        "--prompt-tokens",
        "16",
        "--records",
        str(records_path),
    )
    assert_exit(res.returncode, records_path.parent, 0, output=res.stderr)
    records = read_records(records_path)
    day = Diurnal(curve=OFFICE_DAY, peak_rps=60, day_s=3)
    arrivals = day.arrivals(1.0, seed=4)
    assert len(records) == len(arrivals) > 50
    t0 = min(r.scheduled for r in records) - arrivals[0].offset
    hours = Counter(int(day.hour_at(r.scheduled - t0 + 1e-9)) for r in records)
    assert sum(hours[h] for h in range(1, 5)) == 0  # the night trough: no requests at all
    assert sum(hours[h] for h in range(9, 17)) > 0.6 * len(records)  # office hours carry the load
    assert {r.stage_phase for r in records} == {"hold"} and {r.stage_repeat for r in records} == {0}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((STEPS, "--steps-levels", "1,0"), "'0' is not a positive integer"),
        ((STEPS, "--steps-levels", "2,four"), "'four' is not a positive integer"),
        ((BURST, "--burst-time-scale", "0"), "--burst-time-scale 0: must be a number > 0"),
        ((BURST, "--burst-time-scale", "-5"), "--burst-time-scale -5: must be a number > 0"),
        ((RATE, "--rate-rps", "0"), "is not a rate > 0"),
        ((DIURNAL, "--diurnal-curve", "0:1,12:1"), "hours must rise strictly from 0 to 24"),
        ((STEPS, "--shape", "burst"), "--shape burst: no such shape among the loaded files (steps)"),
    ],
)
def test_bad_options_fail_before_any_load(shared_simulator, tmp_path, args, message):
    url = shared_simulator
    queue = small_queue(tmp_path / "q.csv", [0.0, 0.1])
    extra = ("--burst-queue", str(queue)) if args[0] == BURST else ()
    res = run_locust("-f", *args, *extra, "--host", url, "--records", str(tmp_path / "r.jsonl"))
    assert res.returncode == 3
    errors = [ln for ln in res.stderr.splitlines() if "ERROR" in ln]
    assert len(errors) == 1 and message in errors[0], res.stderr[-2000:]
    assert "Traceback" not in res.stderr
    assert scrape(url)["slabench_sim_requests_received_total"] == 0


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ("offset_s\n0.0\n0.3\n0.2\n", "q.csv:4: offset 0.2 is earlier than the previous one (0.3)"),
        ("offset_s\n-0.5\n0.3\n", "q.csv:2: offset -0.5 is negative"),
    ],
)
def test_bad_queue_files_fail_before_any_load_on_workers_too(shared_simulator, tmp_path, rows, message):
    url = shared_simulator
    queue = tmp_path / "q.csv"
    queue.write_text(rows)
    res = run_locust("-f", BURST, "--burst-queue", str(queue), "--host", url, *processes(2))
    assert res.returncode == 3
    assert message in res.stderr and "Traceback" not in res.stderr
    assert scrape(url)["slabench_sim_requests_received_total"] == 0
