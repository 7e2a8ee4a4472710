"""SLABENCH_MAX_RUN_S: the cap the doc test puts on every run, on a sweep's runs and on the load `slabench plan`
replays; unset, nothing changes; a bad value is one clear line."""

from pathlib import Path

import numpy as np
import pytest

from slabench.core.errors import UserError
from slabench.core.runcap import ENV, capped, max_run_s
from slabench.plan.workload import capped_load
from tests.unit.test_plan import groups_of_four

REPO = Path(__file__).resolve().parents[2]


def test_unset_changes_nothing(monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    assert max_run_s() is None and capped(25.0) == 25.0 and capped(None) is None


def test_the_cap_shortens_and_bounds_an_untimed_run(monkeypatch):
    monkeypatch.setenv(ENV, "10")
    assert capped(25.0) == 10.0 and capped(4.0) == 4.0 and capped(None) == 10.0


@pytest.mark.parametrize("bad", ["soon", "0", "-3"])
def test_a_bad_cap_is_a_user_error(monkeypatch, bad):
    monkeypatch.setenv(ENV, bad)
    with pytest.raises(UserError, match=f"{ENV}='{bad}': must be a number of seconds above 0"):
        max_run_s()


def test_a_planned_load_keeps_its_first_seconds():
    load = groups_of_four(groups=10, gap=10.0)  # arrivals at 0, 10, …, 90 s
    short = capped_load(load, 25.0)
    assert np.array_equal(np.unique(short.offsets), [0.0, 10.0, 20.0]) and len(short.rows) == 12
    assert capped_load(load, None) is load


def test_a_sweep_run_gets_the_capped_duration(monkeypatch, tmp_path):
    from slabench.sweep.config import load_sweep
    from slabench.sweep.runner import locust_argv, plan

    monkeypatch.setenv(ENV, "7")
    cfg = load_sweep(REPO / "sweeps" / "default.yaml", REPO)
    run = plan(cfg)[0]
    argv = locust_argv(cfg, run, tmp_path, "id", "http://127.0.0.1:1")
    assert argv[argv.index("-t") + 1] == "7s"
