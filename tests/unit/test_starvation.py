"""How late the load generator's event loop ran, and its wait for a CPU."""

import os
from pathlib import Path

import gevent
import gevent.monkey
import pytest

from slabench.evidence.starvation import LATE_S, STALL_S, Starvation, StarvationMeter, read_schedstat


def test_a_loop_held_by_a_busy_greenlet_is_measured_late(tmp_path: Path):
    meter = StarvationMeter(tmp_path / "no-schedstat")
    meter.start()
    meter.run_ticker()
    gevent.sleep(0.12)  # the ticker runs (on time, bar a busy machine's hiccups)
    quiet = meter.read()
    assert quiet.loop_late_max_s < 0.2 and quiet.loop_span_s >= 0.1
    hold = gevent.monkey.get_original("time", "sleep")  # not gevent's, even where time is patched
    clock = gevent.monkey.get_original("time", "perf_counter")
    t0 = clock()
    hold(0.6)  # holds the loop: the ticker's next wake-up is ~0.55 s late, a stall
    t1 = clock()
    gevent.sleep(0.1)
    held = meter.read()
    assert held.loop_late_max_s >= 0.5 and held.loop_late_s >= held.loop_late_max_s
    (stall,) = [(a, b) for a, b in held.stalls if b - a > STALL_S]  # its window, in the records' clock
    assert t0 - 0.06 <= stall[0] < t1 and t1 <= stall[1] < t1 + 0.2
    assert held.cpu_wait_runs == 0  # no scheduler statistics here: not measured
    meter.freeze()  # the load stopped: what the stop costs is not the run's
    frozen = meter.read()
    hold(0.3)
    gevent.sleep(0.1)
    assert meter.read() == frozen
    meter.start()  # a new run starts from nothing
    assert meter.read().loop_late_s == 0.0


def test_schedstat_is_read_as_time_waited_and_times_run(tmp_path: Path):
    stat = tmp_path / "schedstat"
    stat.write_text("5000000000 1500000000 3000\n")  # on a CPU 5 s, waited 1.5 s, got a CPU 3,000 times
    assert read_schedstat(stat) == (1_500_000_000, 3000)
    meter = StarvationMeter(stat)
    stat.write_text("6000000000 2700000000 3600\n")
    s = meter.read()
    assert s.cpu_wait_s == pytest.approx(1.2) and s.cpu_wait_runs == 600
    (tmp_path / "garbled").write_text("not numbers\n")
    assert read_schedstat(tmp_path / "garbled") is None


def test_the_figures_travel_as_a_dict():
    s = Starvation(loop_late_s=0.5, loop_late_max_s=0.2, loop_span_s=10.0, cpu_wait_s=1.0, cpu_wait_runs=100,
                   stalls=((1.0, 1.3),))  # fmt: skip
    assert Starvation(**s.as_dict()) == s and s.late_share == pytest.approx(0.05)
    assert Starvation(0.0, 0.0, 0.0).late_share == 0.0 and LATE_S < 0.05


@pytest.mark.skipif(not os.path.exists("/proc/self/schedstat"), reason="Linux only")
def test_this_process_is_measured():
    meter = StarvationMeter()
    sum(range(200_000))
    s = meter.read()
    assert s.cpu_wait_runs >= 0 and 0 <= s.cpu_wait_s <= s.loop_span_s + 1e-3
