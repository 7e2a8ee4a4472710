"""`slabench simulate` as a user starts it: CPU priority, and bad options as one clear line."""

from __future__ import annotations

import os
import subprocess
import sys

import psutil

from tests.helpers.locust_run import ROOT


def test_nice_lowers_the_simulators_cpu_priority():
    argv = [sys.executable, "-m", "slabench", "simulate", "--port", "0", "--nice", "7"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert proc.stdout.readline().startswith("slabench simulator listening on ")
        assert psutil.Process(proc.pid).nice() == min(19, os.nice(0) + 7)  # niceness stops at 19
    finally:
        proc.terminate()
        proc.wait(5)


def test_a_nice_out_of_range_is_one_clear_line():
    argv = [sys.executable, "-m", "slabench", "simulate", "--port", "0", "--nice", "25"]
    res = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert res.returncode == 3
    assert "--nice 25: must be between 0 and 19" in res.stderr and "Traceback" not in res.stderr
