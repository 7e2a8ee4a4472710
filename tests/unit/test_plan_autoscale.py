"""`slabench plan --autoscale` on small cases worked out by hand: the toy card of test_plan (100 ms a step, a
10 + 10-token request takes 1.0 s), a fleet the HPA scales with a known cold start, the day's three fleets, the
chart's rule read from its values and template, and the command line."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from slabench.core.errors import UserError
from slabench.plan.autoscale import fewest_warm
from slabench.plan.chart_rule import chart_rule
from slabench.plan.coldstart import ColdStart, cold_start
from slabench.plan.day import DAY_S, day_run
from slabench.plan.replay import replay
from slabench.plan.scaling import flaps, scaled_replay
from slabench.plan.search import PLAN_ENGINE
from slabench.plan.workload import PlannedLoad
from slabench.sim.profiles import load_profile
from tests.fuzz.registry import cli
from tests.unit.test_plan import TOY_MODEL, exact_gpu, groups_of_four, mix, on_the_grid, toy_gpu

RULE = chart_rule([])
HOUR_OF = {"hour_at": lambda t: 24.0 * t / DAY_S % 24.0}


@pytest.fixture
def toy_model(tmp_path):
    path = tmp_path / "toy-model.yaml"
    path.write_text(TOY_MODEL)
    return str(path)


def day_args(**over):
    """A day of no load on the chart's rule: replicas serving 0.5 requests/s each in 64 slots, $2/h, no cold start."""
    args = dict(rate=lambda t: 0.0, rule=RULE, per_replica_rps=0.5, slots=64, startup_s=0.0, usd_per_replica_hour=2.0,
                ttft_floor_s=0.1, ttft_target_s=2.0, peak_rps=1.0, **HOUR_OF)  # fmt: skip
    return {**args, **over}


def every(gap: float, until: float) -> PlannedLoad:
    offsets = np.arange(0.0, until, gap)
    return PlannedLoad("test", "steady", mix([10], [10]), offsets=offsets, rows=np.zeros(len(offsets), int))


def test_the_chart_rule_is_read_from_its_values_and_template(tmp_path):
    r = RULE
    assert (r.target, r.counts_running, r.min_replicas, r.max_replicas) == (48.0, True, 1, 4)  # ⌊0.75 × 64⌋
    assert (r.poll_s, r.cooldown_s, r.up_pods, r.up_period_s) == (15.0, 900.0, 1, 120.0)
    assert (r.down_window_s, r.down_pods, r.down_period_s, r.schedule) == (600.0, 1, 300.0, (7.0, 20.0))
    values = tmp_path / "v.yaml"
    values.write_text("model: {maxNumSeqs: 128}\nautoscaling: {maxReplicas: 9, schedule: {enabled: false}}\n")
    wider = chart_rule([str(values)])
    assert (wider.target, wider.max_replicas, wider.schedule) == (96.0, 9, None)
    assert chart_rule([str(values)], max_num_seqs=10).target == 7.0  # --max-num-seqs wins, as the plan deploys it
    values.write_text("autoscaling: {minReplicas: 5}\n")
    with pytest.raises(UserError, match=r"minReplicas \(5\) is above autoscaling.maxReplicas \(4\)"):
        chart_rule([str(values)])
    values.write_text("autoscaling: {pollingInterval: .nan}\n")
    with pytest.raises(UserError, match=r"autoscaling\.pollingInterval"):
        chart_rule([str(values)])


def test_cold_start_per_cache_tier_adds_up_its_stated_steps():
    c = ColdStart()
    gb8 = 8e9
    assert c.seconds("nvme", gb8) == pytest.approx(5 + 4 + 60)  # pod, 8 GB at 2 GB/s, vLLM
    # + a node, a 10 GB image at 100 MB/s, 8 GB from S3 at 500 MB/s (or Hugging Face at 50)
    assert c.seconds("s3", gb8) == pytest.approx(45 + 90 + 100 + 16 + 5 + 4 + 60)
    assert c.seconds("hf", gb8) == pytest.approx(45 + 90 + 100 + 160 + 5 + 4 + 60)
    assert cold_start(["boot-s=30", "s3-mb-s=1000"]).seconds("s3", gb8) == pytest.approx(320 - 60 - 8)
    for bad in ("boot=30", "boot-s", "boot-s=-1", "s3-mb-s=0", "pull-mb-s=nan"):
        with pytest.raises(UserError, match="--cold-start"):
            cold_start([bad])


def test_fewest_warm_probes_down_then_bisects():
    tried = []

    def probe(n):
        tried.append(n)
        return n >= 7

    assert fewest_warm(probe, 20) == (7, {20: True, 19: True, 17: True, 13: True, 5: False, 9: True, 7: True, 6: False})
    assert tried[0] == 19  # one fewer first: autoscaling rarely saves more
    assert fewest_warm(lambda n: n >= 20, 20)[0] == 20
    assert fewest_warm(lambda n: True, 1)[0] == 1


def test_a_single_replica_that_never_scales_is_the_fixed_fleet(tmp_path, toy_model):
    """One request every 2 s for 20 s on one replica: each alone (TTFT 0.1 s, E2E 1.0 s); nothing waits, the rule
    never acts, and the replica is paid from the first arrival until the last request ends (18 + 1 s)."""
    config = load_profile(toy_gpu(tmp_path, 1), toy_model, engine=PLAN_ENGINE)
    run = scaled_replay(config, every(2.0, 20.0), RULE, startup_s=300.0, warm=1)
    f = run.prediction.figures
    assert f["ttft_p95"] == pytest.approx(0.1, abs=1e-6) and f["e2e_p95"] == pytest.approx(1.0, abs=1e-6)
    assert (run.scale_ups, run.scale_downs, run.peak_replicas) == (0, 0, 1)
    assert run.replica_seconds == pytest.approx(19.0, abs=1e-6)
    assert run.queue_drained_s == 0.0 and max(run.timeline.waiting) == 0
    assert set(run.timeline.ready) == {1}


def test_from_the_fixed_answer_the_scaled_fleet_gives_the_fixed_figures(tmp_path, toy_model):
    """Groups of four on four one-at-a-time replicas: the fleet the plan answers. Scaled from those four (the floor)
    with nothing to add, every figure is the fixed replay's."""
    config = load_profile(toy_gpu(tmp_path, 1), toy_model, engine=PLAN_ENGINE)
    fixed = replay(config, groups_of_four(), 4)
    run = scaled_replay(config, groups_of_four(), RULE, startup_s=60.0, warm=4, max_replicas=4)
    assert run.prediction.figures == fixed.figures
    assert run.prediction.ok == fixed.ok == 40


def test_a_scale_out_serves_after_its_known_delay(tmp_path, toy_model):
    """Four requests a second on one one-at-a-time replica (1 s each): a queue from the start. The rule (target 1
    per replica, polled every 15 s, up one per 15 s) asks for a second replica at the poll at 15 s and a third at
    30 s; with a 10 s cold start they take requests from 25 s and 40 s."""
    config = load_profile(toy_gpu(tmp_path, 1), toy_model, engine=PLAN_ENGINE)
    rule = replace(RULE, target=1.0, up_period_s=15.0, max_replicas=3)
    run = scaled_replay(config, every(0.25, 60.0), rule, startup_s=10.0, warm=1, drain_timeout=600)
    tl = run.timeline
    at = {t: (asked, ready) for t, asked, ready in zip(tl.t, tl.replicas, tl.ready, strict=True)}
    assert at[10.0] == (1, 1) and at[15.0] == (2, 1) and at[20.0] == (2, 1)
    assert at[25.0] == (2, 2) and at[30.0] == (3, 2) and at[35.0] == (3, 2) and at[40.0] == (3, 3)
    assert (run.scale_ups, run.peak_replicas) == (2, 3)
    # 240 requests, 1 s each: 1 replica-second for 0–25 s, 2 for 25–40 s, 3 after: the queue is still there at the
    # end of the arrivals (waiting > 0 at 60 s) and gone once three replicas have served it
    assert tl.waiting[tl.t.index(60.0)] > 0 and run.queue_drained_s > 60.0
    assert run.prediction.ok == 240
    # paid: the first from 0, the second from 15, the third from 30, until the end
    end = run.prediction.end
    assert run.replica_seconds == pytest.approx(end + (end - 15.0) + (end - 30.0), abs=1e-6)


def test_a_day_always_on_autoscaled_and_scaled_to_zero_by_hand():
    """No load at all: always on keeps the peak's 2 replicas 24 h; autoscaled its minimum of 1 for 24 h; scaled to
    zero, one replica from 7 h to 20 h (the schedule) and none outside."""
    on, auto, zero = (day_run(m, **day_args()) for m in ("always-on", "autoscaled", "scale-to-zero"))
    assert (on.replica_hours, on.usd) == (48.0, 96.0)
    assert auto.replica_hours == 24.0
    assert zero.replica_hours == pytest.approx(13.0) and zero.lost == 0


def test_a_day_scaled_to_zero_loses_what_comes_before_the_schedule():
    """One request a second all day, each holding one of 8 slots for 4 s (2 a second per replica): 4 in flight, one
    replica's worth. From zero nothing wakes the fleet until 7 h (no replica, no series), so the first 7 h and the
    poll that asks for the replica are lost; after 20 h the load keeps the replica (KEDA stays active)."""
    zero = day_run("scale-to-zero", **day_args(rate=lambda t: 1.0, per_replica_rps=2.0, slots=8))
    assert zero.lost == pytest.approx(7 * 3600 + 15)
    assert zero.replica_hours == pytest.approx(17.0, abs=0.01)  # 7 h → 24 h


def test_a_rule_held_below_the_load_keeps_a_standing_queue():
    """2 requests/s on replicas that serve 0.5 each with 64 slots (a request holds one 128 s): 256 in flight, which
    the rule (48 per replica) holds on 5 replicas (256 / 240 = 1.07, within the HPA's 0.1 tolerance), 2.5 requests/s
    of capacity, and nothing stands in the queue.
    Held to one replica, the queue stands all day; and a rule whose target is above a replica's slots (48 against 4:
    a --max-num-seqs far below the chart's) keeps a standing queue with replicas to spare."""
    rule = replace(RULE, schedule=None, max_replicas=8)
    args = day_args(rate=lambda t: 2.0, peak_rps=2.0)
    del args["rule"]
    day = day_run("autoscaled", rule=rule, **args)
    assert day.standing_queue_s == 0 and day.replicas[-1] == 5 and day.flaps == 0
    held = day_run("autoscaled", rule=replace(rule, max_replicas=1), **args)
    assert held.standing_queue_s > 0.9 * DAY_S and held.within_ttft < 0.01
    narrow = day_run("autoscaled", rule=rule, **{**args, "slots": 4})
    assert narrow.standing_queue_s > 0.9 * DAY_S and max(narrow.replicas) < 8


def test_a_rule_that_oscillates_shows_it():
    """Twenty minutes of 4 requests/s, twenty of nothing, all day: the rule adds replicas through each busy spell and
    drops them in each lull (after its 600 s window), only to want them back: it flaps every cycle. A day that
    merely follows its ramps changes direction hours apart and does not count."""
    assert flaps([(0.0, 1), (100.0, -1), (200.0, 1), (5000.0, -1)], 1000.0) == 2
    assert flaps([(0.0, 1), (3600.0, 1), (7200.0, -1), (20000.0, 1)], 1000.0) == 0
    rule = replace(RULE, schedule=None, max_replicas=20)
    args = day_args(rate=lambda t: 4.0 if (t // 1200) % 2 == 0 else 0.0, startup_s=60.0, peak_rps=4.0)
    del args["rule"]
    day = day_run("autoscaled", rule=rule, **args)
    assert day.flaps >= 30  # 36 cycles in a day


def test_plan_autoscale_writes_its_answer(tmp_path):
    out = tmp_path / "plan"
    code, err = cli(["plan", "--autoscale", "--cache-tier", "nvme", "--profiles", "rtx-pro-6000", "--load", "rate",
                     "--rate-rps", "2", "--duration", "30", "--diurnal-peak-rps", "3", "--jobs", "1",
                     "--out", str(out)])  # fmt: skip
    assert code == 0, err
    doc = json.loads((out / "autoscale.json").read_text())
    (p,) = doc["profiles"]
    assert p["gpu"] == "rtx-pro-6000" and p["warm_replicas"] == 1 and p["cache_tier"] == "nvme"
    assert set(p["day"]) == {"always-on", "autoscaled", "scale-to-zero"}
    assert p["day"]["scale-to-zero"]["usd"] < p["day"]["always-on"]["usd"]
    assert (out / "autoscale.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--autoscale", "--cold-start", "boot=3"], "--cold-start 'boot=3': use KEY=VALUE"),
        (["--cold-start", "boot-s=3"], "add --autoscale"),
        (["--autoscale", "--diurnal-peak-rps", "0"], "--diurnal-peak-rps 0"),
    ],
)
def test_bad_autoscale_flags_are_one_line_and_exit_3(tmp_path, argv, says):
    code, err = cli(["plan", "--profiles", "l4", "--out", str(tmp_path / "p"), *argv])
    assert code == 3 and says in err and "Traceback" not in err


def test_warm_replicas_of_a_small_load_and_the_view_at_80_columns(tmp_path, toy_model):
    """Groups of four on one-at-a-time replicas, TTFT p95 ≤ 0.5 s: the plan's 4 replicas (test_plan). From 3 warm
    the rule (48 per replica) never asks for a fourth — at most 4 requests run or wait per replica — so one request
    of each group waits a whole second (a quarter of the TTFTs are 1.1 s) and 3 misses: 4 warm replicas are needed.
    The console view reads at 80 columns."""
    from rich.console import Console

    from slabench.plan.autoscale import AutoscaleView, autoscale_profile
    from slabench.plan.checks import latency_checks
    from slabench.plan.search import ProfileJob
    from slabench.sla.contract import load_contract
    from tests.unit.test_plan import contract

    checks = latency_checks(load_contract(contract(tmp_path, "  ttft_p95_s: {max: 0.5}")))
    job = ProfileJob(toy_gpu(tmp_path, 1), toy_model, groups_of_four(), checks, "round-robin", 300.0, 50, {})
    a = autoscale_profile(job, RULE,
                          ColdStart(), "s3", 4, 40, 91.0, 1.0, 0.1, 1.0)  # fmt: skip
    assert a.warm == 4 and a.probes == {3: False, 4: True}
    assert a.below is not None and a.below.scale_ups == 0 and a.below.peak_load_per_replica <= 4
    assert "ttft_p95_s" in (a.below.prediction.stopped or "")  # failed for sure: stopped early
    assert a.run is not None and a.run.prediction.figures["ttft_p95"] == pytest.approx(0.1, abs=1e-6)
    assert set(a.day) == {"always-on", "autoscaled", "scale-to-zero"}
    console = Console(width=80, record=True, color_system=None)
    console.print(AutoscaleView([a], RULE, 1.0))
    text = console.export_text()
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "…" not in text and "toy1" in text and "never asked for a replica" in text


def test_a_step_down_scales_in_after_the_window_one_replica_per_period(tmp_path, toy_model):
    """A step load: 4 requests/s for 60 s (the scale-out above: up to 3 replicas), then one request every 10 s for
    25 minutes. The balancer assigns each request as it arrives, so the first replica holds what came in its first
    25 s alone: 100 + 30 + 27 requests served one a second, its queue gone at ~157 s (the tick at 160 s). The last
    poll that sees a queue (150 s) wants 3; the rule scales in only below the highest recommendation of the last
    600 s, one replica per 300 s: to 2 at 750 s, to 1 at 1,050 s. A removed replica is paid until it has finished
    what it held."""
    config = load_profile(toy_gpu(tmp_path, 1), toy_model, engine=PLAN_ENGINE)
    rule = replace(RULE, target=1.0, up_period_s=15.0, max_replicas=3)
    offsets = np.concatenate([np.arange(0.0, 60.0, 0.25), np.arange(60.0, 1560.0, 10.0)])
    load = PlannedLoad("test", "step", mix([10], [10]), offsets=offsets, rows=np.zeros(len(offsets), int))
    run = scaled_replay(config, load, rule, startup_s=10.0, warm=1, drain_timeout=600)
    tl = run.timeline
    downs = [t for t, before, after in zip(tl.t[1:], tl.replicas[:-1], tl.replicas[1:], strict=True) if after < before]
    assert (run.scale_ups, run.scale_downs, run.flaps) == (2, 2, 0)
    assert downs == [750.0, 1050.0]
    assert tl.replicas[-1] == 1 and min(tl.ready) >= 1
    assert run.prediction.ok == len(offsets) and run.queue_drained_s == 160.0
    end = run.prediction.end
    paid = end + (downs[1] - 15.0) + (downs[0] - 30.0)  # each removed replica was idle (1 s requests, 10 s apart)
    assert run.replica_seconds == pytest.approx(paid, abs=1.0)


def test_warm_n_replays_from_the_replicas_asked_for(tmp_path, toy_model):
    """--warm PROFILE=N: groups of four from 2 warm one-at-a-time replicas — two of each group wait (half the TTFTs
    above 0.5 s): it misses, and says so; the search's answer (4) is unchanged."""
    from slabench.plan.autoscale import AutoscaleView, autoscale_profile
    from slabench.plan.checks import latency_checks
    from slabench.plan.search import ProfileJob
    from slabench.sla.contract import load_contract
    from tests.unit.test_plan import contract

    checks = latency_checks(load_contract(contract(tmp_path, "  ttft_p95_s: {max: 0.5}")))
    job = ProfileJob(toy_gpu(tmp_path, 1), toy_model, groups_of_four(), checks, "round-robin", 300.0, 50, {})
    a = autoscale_profile(job, RULE,
                          ColdStart(), "s3", 4, 40, 91.0, 1.0, 0.1, 1.0, requested=2)  # fmt: skip
    assert a.warm == 4 and a.requested is not None and a.requested.warm == 2 and a.requested_meets is False
    assert a.to_dict()["from_requested"]["warm"] == 2
    assert any("from 2 warm (--warm)" in n and "misses" in n for n in AutoscaleView([a], RULE, 1.0)._notes(a))


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--autoscale", "--warm", "l4=0"], "--warm 'l4=0': use PROFILE=N"),
        (["--autoscale", "--warm", "h100=3"], "h100 is not among the planned profiles (l4)"),
        (["--warm", "l4=3"], "add --autoscale"),
    ],
)
def test_bad_warm_flags_are_one_line_and_exit_3(tmp_path, argv, says):
    code, err = cli(["plan", "--profiles", "l4", "--out", str(tmp_path / "p"), *argv])
    assert code == 3 and says in err and "Traceback" not in err


def one_rejected_group() -> PlannedLoad:
    """Five requests at once, the second's prompt (4,000 + 100 max tokens) beyond the toy model's 4,096: vLLM's
    HTTP 400, answered before any balancer."""
    rows = np.array([0, 1, 0, 0, 0])
    return PlannedLoad("test", "one rejected", mix([10, 4000], [10, 10]), offsets=np.zeros(5), rows=rows)


def test_a_scaled_fleet_the_rule_never_grows_is_the_fixed_replay(tmp_path, toy_model):
    """Two one-at-a-time replicas, round robin by the request's index as an ALB rotates: requests 0, 2, 4 to the
    first (TTFT 0.1, 1.1, 2.1 s), 3 to the second (0.1 s), 1 rejected. Scaled from those two with two as the ceiling
    the prediction is the fixed replay's to the last figure, and the rule (48 per replica) never wanted more than
    two: a higher ceiling would have changed nothing."""
    config = load_profile(toy_gpu(tmp_path, 1), toy_model, engine=PLAN_ENGINE)
    fixed = replay(config, one_rejected_group(), 2)
    assert fixed.per_replica_requests == [3, 1] and fixed.errors == 1
    assert fixed.figures["ttft_p50"] == pytest.approx(0.6, abs=1e-6)  # type 7 over 0.1, 0.1, 1.1, 2.1
    run = scaled_replay(config, one_rejected_group(), RULE, startup_s=60.0, warm=2, max_replicas=2)
    assert run.prediction == fixed
    assert run.rule_wanted <= 2 and run.same_with_ceiling(4)
    wider = scaled_replay(config, one_rejected_group(), RULE, startup_s=60.0, warm=2, max_replicas=4)
    assert wider == run


def count_replays(monkeypatch) -> list[int]:
    from slabench.plan.replay import FleetReplay, _FixedFleet

    calls: list[int] = []  # the replicas each replay started with, whichever of the two loops ran it

    def counting(run):
        def counted(self, *args, **kwargs):
            calls.append(len(self.engines))
            return run(self, *args, **kwargs)

        return counted

    monkeypatch.setattr(FleetReplay, "run", counting(FleetReplay.run))
    monkeypatch.setattr(_FixedFleet, "_run_by_replica", counting(_FixedFleet._run_by_replica))
    return calls


def test_autoscale_takes_the_search_runs_the_rule_never_scaled(tmp_path, toy_model, monkeypatch):
    """The search's runs from 3 and 4 replicas (each its own ceiling) where the rule never asked for more: the
    autoscaled answer takes them as they are (no replay) and is the one it replays without them."""
    from slabench.plan.autoscale import autoscale_profile
    from slabench.plan.checks import latency_checks
    from slabench.plan.search import ProfileJob
    from slabench.sla.contract import load_contract
    from tests.unit.test_plan import contract

    checks = latency_checks(load_contract(contract(tmp_path, "  ttft_p95_s: {max: 0.5}")))
    job = ProfileJob(toy_gpu(tmp_path, 1), toy_model, groups_of_four(), checks, "round-robin", 300.0, 50, {})
    config = job.config()
    startup = ColdStart().seconds("s3", config.weight_bytes)
    searched = {n: scaled_replay(config, job.load, RULE, startup, n, checks=checks, max_replicas=n) for n in (3, 4)}
    assert all(r.rule_wanted <= n for n, r in searched.items())
    args = (job, RULE, ColdStart(), "s3", 4, 40, 91.0, 1.0, 0.1, 1.0)
    replays = count_replays(monkeypatch)
    fresh = autoscale_profile(*args)
    assert replays == [3, 4]
    taken = autoscale_profile(*args, searched=searched)
    assert replays == [3, 4]  # none more
    assert taken.run is searched[4] and taken.below is searched[3]
    # the same answer; from 3 warm the run stopped early (failed for sure), and where a run stops depends on the
    # loop that ran it (fleet-wide: at the step; replica by replica: after that 10 s window)
    assert {**taken.to_dict(), "seconds": 0, "from_one_fewer": None} == {**fresh.to_dict(), "seconds": 0,
                                                                         "from_one_fewer": None}  # fmt: skip
    assert not taken.below.prediction.complete and not fresh.below.prediction.complete


def test_autoscale_replays_a_search_run_the_rule_would_have_scaled(tmp_path, toy_model, monkeypatch):
    """Four requests a second on one-at-a-time replicas, a rule of 1 per replica: from 1 or 2 replicas with that
    as the ceiling the rule asked for more at its polls, so those runs are not the autoscaled fleet's (its ceiling is
    the chart's 3) and each is replayed: there the rule adds replicas."""
    from slabench.plan.autoscale import autoscale_profile
    from slabench.plan.checks import latency_checks
    from slabench.plan.search import ProfileJob
    from slabench.sla.contract import load_contract
    from tests.unit.test_plan import contract

    checks = latency_checks(load_contract(contract(tmp_path, "  ttft_p95_s: {max: 100}")))
    rule = replace(RULE, target=1.0, up_period_s=15.0, max_replicas=3)
    job = ProfileJob(toy_gpu(tmp_path, 1), toy_model, every(0.25, 60.0), checks, "round-robin", 600.0, 50, {})
    config = job.config()
    startup = ColdStart().seconds("nvme", config.weight_bytes)
    searched = {n: scaled_replay(config, job.load, rule, startup, n, checks=checks, max_replicas=n) for n in (1, 2)}
    assert all(r.rule_wanted > n and not r.same_with_ceiling(3) for n, r in searched.items())
    replays = count_replays(monkeypatch)
    a = autoscale_profile(job, rule, ColdStart(), "nvme", 2, 240, 60.0, 1.0, 0.1, 1.0, searched=searched)
    assert a.probes == {1: False, 2: True} and replays == [1, 2]  # each replayed, from its warm replicas
    assert a.run is not searched[2] and a.below is not searched[1]
    assert a.run is not None and a.run.scale_ups > 0 and a.run.peak_replicas == 3


def test_with_autoscale_the_pessimistic_search_keeps_its_fleets_as_scaled_runs(tmp_path, toy_model):
    """Groups of four, each step 1.5 times as long at the pessimistic end: still 4 replicas. With --autoscale's
    setup the end's search replays its fleets as scaled ones that cannot scale: the same answer and figures, and
    the run of each kept for the autoscaled part."""
    from slabench.plan.checks import latency_checks
    from slabench.plan.scaling import Scaling
    from slabench.plan.search import ProfileJob, finish_interval, plan_model, search_end
    from slabench.sla.contract import load_contract
    from tests.unit.test_plan import contract

    checks = latency_checks(load_contract(contract(tmp_path, "  ttft_p95_s: {max: 0.5}")))
    job = ProfileJob(toy_gpu(tmp_path, 1), toy_model, groups_of_four(), checks, "round-robin", 300.0, 50, {}, 1.5)
    answer = plan_model(job)
    plain = search_end(job, answer, "pessimistic")
    scaled = search_end(replace(job, scaling=Scaling(RULE, ColdStart(), "s3")), answer, "pessimistic")
    assert plain.replicas == scaled.replicas == 4 and not plain.scaled
    assert plain.probe is not None and scaled.probe is not None
    assert scaled.probe.prediction == plain.probe.prediction and scaled.probe.judged == plain.probe.judged
    assert scaled.scaled[4].prediction == plain.probe.prediction and scaled.scaled[4].same_with_ceiling(4)
    finish_interval(answer, {"pessimistic": scaled, "optimistic": search_end(job, answer, "optimistic")},
                    {"optimistic": plain.probe.prediction})  # fmt: skip
    assert answer.pessimistic_runs == scaled.scaled


def test_a_fleet_that_cannot_scale_is_replayed_replica_by_replica_with_the_same_timeline(tmp_path, toy_model):
    """From N warm with N as the ceiling, round robin: `scaled_replay` runs each replica on its own and samples
    them at the ticks afterwards. Everything — prediction, timeline (sampled before what is due at the tick: here
    ticks, arrivals and steps all fall on one 125 ms grid), the rule's wish for more — is the fleet-wide loop's."""
    from slabench.plan.scaling import _scaled_run, _ScaledFleet, _StillFleet

    load = on_the_grid(seed=3, n=300, ticks=400, rejected=(40,))
    config = load_profile(exact_gpu(tmp_path), toy_model, engine=PLAN_ENGINE)
    rule = replace(RULE, target=2.0)
    wanted_more = 0
    for warm, drain in ((2, 300.0), (4, 300.0), (8, 300.0), (2, 3.0)):  # the last cut by its drain horizon
        still = _scaled_run(_StillFleet(config, load, rule, warm, (), drain, 5.0), warm, 60.0)
        fleet_wide = _scaled_run(_ScaledFleet(config, load, rule, 60.0, warm, "round-robin", (), drain, 5.0, warm),
                                 warm, 60.0)  # fmt: skip
        assert still == fleet_wide, (warm, drain)
        assert scaled_replay(config, load, rule, 60.0, warm, max_replicas=warm, drain_timeout=drain) == still
        wanted_more += still.rule_wanted > warm
    assert still.prediction.incomplete > 0  # the cut run left requests unfinished
    assert wanted_more >= 1  # the rule asked for more where it could not add any
