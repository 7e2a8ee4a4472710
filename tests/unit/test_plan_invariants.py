"""Physical invariants of the planner's model, on every built-in GPU profile (with the reference model), at the
model's own figures and at both ends of the profile's 90 % interval: a longer prompt never gets its first token
sooner, and more closed-loop users never get fewer answers per second while the batch still fits (the knee: the
smaller of `max_num_seqs` and the requests the KV cache holds). A scheduler or step-time change that breaks one of
these would plan fleets that physics does not allow."""

from __future__ import annotations

import itertools
from dataclasses import replace

import numpy as np
import pytest

from slabench.plan.replay import replay
from slabench.plan.search import PLAN_ENGINE
from slabench.plan.workload import Mix, PlannedLoad
from slabench.sim.profiles import EngineConfig, available_profiles, load_profile

PROFILES = available_profiles("gpu")
OUTPUT = 128


def one_mix(prompt: int, output: int = OUTPUT) -> Mix:
    return Mix(
        prompt_tokens=np.array([prompt]),
        output_tokens=np.array([output]),
        prefix_tokens=np.zeros(1, dtype=np.int64),
        accounts=("",),
        max_tokens=output,
        source="test",
    )


def ends_of_interval(name: str) -> list[EngineConfig]:
    config = load_profile(name, engine=PLAN_ENGINE)
    f = config.gpu.uncertainty.step_time_factor_90
    return [replace(config, gpu=config.gpu.slowed(s)) for s in (1 / f, 1.0, f)]


@pytest.mark.parametrize("name", PROFILES)
def test_ttft_never_falls_as_the_prompt_grows(name: str):
    for config in ends_of_interval(name):
        prompts = [p for p in (16, 64, 256, 1024, 2048, 4096, 8192, 16384) if p + OUTPUT <= config.max_model_len]
        ttft = []
        for p in prompts:
            alone = PlannedLoad("alone", "one request", one_mix(p), offsets=np.zeros(1), rows=np.zeros(1, dtype=int))
            ttft.append(replay(config, alone, 1).figures["ttft_p50"])
        assert all(b >= a for a, b in itertools.pairwise(ttft)), (config.gpu.name, prompts, ttft)
        assert ttft[-1] > ttft[0]  # and a long prompt does cost something


@pytest.mark.parametrize("name", PROFILES)
def test_throughput_never_falls_as_users_grow_up_to_the_knee(name: str):
    prompt = 512
    for config in ends_of_interval(name):
        knee = min(config.max_num_seqs, config.kv_capacity_tokens // (prompt + OUTPUT))
        users = [u for u in (1, 2, 4, 8, 16, 32, 64, 128, 256) if u <= min(knee, 256)]
        rps = []
        for u in users:
            load = PlannedLoad("steps", f"{u} users", one_mix(prompt), users=u, max_requests=4 * u, duration_s=1e6)
            p = replay(config, load, 1, drain_timeout=1e6)
            assert p.ok == 4 * u
            rps.append(p.ok / p.drain_s)
        assert len(users) >= 4, (config.gpu.name, knee)
        assert all(b >= a for a, b in itertools.pairwise(rps)), (config.gpu.name, users, rps)


def test_the_ends_of_the_interval_scale_every_step():
    """A profile slowed by f takes f times as long for everything one request does alone (hand-checked: the step
    time is linear in overhead, ÷ bandwidth and ÷ compute)."""
    config = load_profile("l4", engine=PLAN_ENGINE)
    alone = PlannedLoad("alone", "one request", one_mix(1000), offsets=np.zeros(1), rows=np.zeros(1, dtype=int))
    base = replay(config, alone, 1).figures
    for f in (0.5, 1.3, 2.0):
        slowed = replay(replace(config, gpu=config.gpu.slowed(f)), alone, 1).figures
        for key in ("ttft_p50", "e2e_p50", "tpot_p50"):
            assert slowed[key] == pytest.approx(base[key] * f, rel=1e-9), (f, key)
