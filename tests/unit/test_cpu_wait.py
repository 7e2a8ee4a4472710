"""The load generator's wait for a CPU, from the kernel's scheduler statistics."""

import os
from pathlib import Path

import pytest

from slabench.cpu_wait import CpuWait, CpuWaitMeter, read_schedstat


def test_schedstat_is_read_as_time_waited_and_times_run(tmp_path: Path):
    stat = tmp_path / "schedstat"
    stat.write_text("5000000000 1500000000 3000\n")  # on a CPU 5 s, waited 1.5 s, got a CPU 3,000 times
    assert read_schedstat(stat) == (1_500_000_000, 3000)
    meter = CpuWaitMeter(stat)
    meter.start()
    stat.write_text("6000000000 2700000000 3600\n")
    wait = meter.read()
    assert wait is not None and wait.wait_s == pytest.approx(1.2) and wait.runs == 600
    assert wait.per_run_ms == pytest.approx(2.0)


def test_without_the_kernels_figures_nothing_is_measured(tmp_path: Path):
    meter = CpuWaitMeter(tmp_path / "absent")
    meter.start()
    assert meter.read() is None
    (tmp_path / "garbled").write_text("not numbers\n")
    assert read_schedstat(tmp_path / "garbled") is None
    assert CpuWait(0.0, 0, 1.0).per_run_ms == 0.0


@pytest.mark.skipif(not os.path.exists("/proc/self/schedstat"), reason="Linux only")
def test_this_process_is_measured():
    meter = CpuWaitMeter()
    meter.start()
    sum(range(200_000))
    wait = meter.read()
    assert wait is not None and wait.runs >= 0 and 0 <= wait.wait_s <= wait.span_s + 1e-3
