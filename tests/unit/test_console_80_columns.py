"""Every console table reads at 80 columns, the width rich and the plain tables use without a terminal (CI logs,
`| tee`): no line is longer, and every name and figure the table holds appears whole on one line (never cut to
`rtx-p…`, never wrapped between a number and its unit)."""

from __future__ import annotations

import argparse
import io
import json
import os
import re
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console

from slabench.analysis.aggregate import aggregate
from slabench.analysis.report import across, print_console
from slabench.plan.checks import latency_checks
from slabench.plan.cost import FleetCost
from slabench.plan.report import Plan, Row, _s, _usd, table
from slabench.plan.search import plan_profile
from slabench.sla.contract import load_contract
from slabench.sla.grade import fmt, grade
from slabench.sla.render import comparison_table, verdict_table
from tests.helpers.analysis_helpers import rec, write_run
from tests.helpers.sla_helpers import contract, est, level, replica
from tests.unit.test_plan import TOY_MODEL, groups_of_four

REPO = Path(__file__).resolve().parents[2]
WIDTH = 80


def at_80(renderable) -> list[str]:
    con = Console(file=io.StringIO(), width=WIDTH, record=True, color_system=None)
    con.print(renderable)
    return con.export_text().splitlines()


def assert_readable(lines: list[str], figures: list[str]) -> None:
    too_long = [line for line in lines if len(line.rstrip()) > WIDTH]
    assert not too_long, "\n".join(too_long)
    missing = [f for f in figures if not any(f in line for line in lines)]
    assert not missing, f"cut or wrapped at 80 columns: {missing}\n" + "\n".join(lines)


def test_plan_table(tmp_path):
    """The longest built-in profile name and a MIG instance, with every figure of each row."""
    model = tmp_path / "toy-model.yaml"
    model.write_text(TOY_MODEL)
    (tmp_path / "sla.yaml").write_text(
        "name: toy\nload: {scenario: burst}\ndeployment: {instance_type: g6e.xlarge}\n"
        "targets:\n  ttft_p95_s: {max: 0.5}\n  e2e_p95_s: {max: 1.5}\n"
    )
    checks = latency_checks(load_contract(tmp_path / "sla.yaml"))
    plan = Plan("groups of four", "toy (sla.yaml)", checks, "round-robin", "toy", "a toy", "test prices", 300.0)
    expected = []
    for name, seqs, itype, replicas in (("rtx-pro-6000-mig-2g.48gb", 2, "g7e.2xlarge", 1), ("a10g", 1, "g5.xlarge", 7)):
        gpu = tmp_path / f"{name}.yaml"
        gpu.write_text(
            f"kind: gpu\nname: {name}\nsource: a test\nmemory_mib: 1024\nmemory_bandwidth_gb_s: 1000\n"
            f"dense_bf16_tflops: 100\nstep_overhead_ms: 100\nreserved_mib: 0\nengine:\n  max_num_seqs: {seqs}\n"
        )
        answer = plan_profile(str(gpu), str(model), groups_of_four(), checks, "round-robin", 300.0, 50)
        price = replica(itype, replicas)
        p = answer.planned.prediction
        n = answer.pessimistic
        cost = FleetCost(price.per_replica_usd_per_hour * 100, n, p.drain_s / 3600, p.output_tokens, p.ok)
        plan.rows.append(Row(answer, price, cost))
        b = answer.planned_binding
        expected += [name, itype, answer.replicas_text(), _usd(cost.usd_per_hour), _usd(cost.per_million_output_tokens)]
        expected += [_usd(cost.per_1000_calls), _s(p.drain_s), _s(p.figures["ttft_p95"]), f"{b.margin:.2%}"]
        expected.append(b.check.name)
    assert_readable(at_80(table(plan)), expected)


def _verdicts():
    targets = {
        "ttft_p95_s": {"max": 2.0, "conditional_band": 0.5},
        "e2e_p95_s": {"max": 60.0},
        "output_tokens_per_s": {"min": 500},
        "cost_per_million_output_tokens_usd": {"max": 2.5, "conditional_band": 0.5},
        "cost_per_1000_calls_usd": {"max": 1.5, "severity": "soft"},
    }
    lv = level(
        16,
        ttft_p95=est(3.126, 0.475),
        e2e_p95=est(48.51, 9.5),
        output_tokens_per_s=est(12_345.6, 1_234.5),
        throughput_rps=est(11.25, 1.5),
    )
    c = contract(targets=targets, capacity={"target_load_rps": 103})
    return [grade(c, replica(t), [lv]) for t in ("g7e.2xlarge", "g7e.12xlarge", "g5.xlarge")]


def test_verdict_table():
    v = _verdicts()[0]
    figures = []
    for c in v.checks:
        figures += [c.check, str(c.status), fmt(c.observed, c.unit), fmt(c.target, c.unit)]
        figures += [fmt(c.ci95_low, c.unit), fmt(c.ci95_high, c.unit)]
        if c.conditional_band:
            figures.append(f"band {fmt(c.conditional_band, c.unit)}")
    lines = at_80(verdict_table(v))
    start = next(i for i, line in enumerate(lines) if line.startswith("SLA "))
    end = next(i for i, line in enumerate(lines) if i > start and line.startswith(("PASS ", "FAIL ", "CONDITIONAL ")))
    table_lines = lines[start:end]
    assert_readable(table_lines, figures)


def test_capacity_comparison_table():
    verdicts = _verdicts()
    figures = []
    for v in verdicts:
        cap = v.capacity
        figures += [v.deployment.instance_type, str(v.status), cap.highest_passing or "none"]
        if cap.replicas_needed is not None:
            figures += [f"{cap.per_replica_rps:.4g}", str(cap.replicas_needed), f"${cap.usd_per_hour:.4g}"]
    assert_readable(at_80(comparison_table(verdicts)), figures)


def test_sweep_per_level_table(tmp_path):
    rng = np.random.default_rng(3)
    for lv, base in ((4, 0.09), (8, 0.17), (16, 3.9)):
        for repeat in (1, 2, 3):
            recs = [rec(i * 0.05, ttft=base * rng.uniform(0.6, 1.4), gaps=(0.012,) * 20) for i in range(40)]
            write_run(tmp_path, lv, repeat, recs)
    summary = aggregate(tmp_path)
    buf = io.StringIO()
    print_console(summary, Console(file=buf, width=WIDTH, color_system=None))
    lines = buf.getvalue().splitlines()
    table_lines = lines[: next(i for i, line in enumerate(lines) if line.startswith("scaling cliff"))]
    figures = ["TTFT p95 (ms)"]
    for lv in summary.levels:
        for key, unit in (("ttft_p95", "ms"), ("throughput_rps", "")):
            figures += across(lv.metrics[key], unit).replace(" ± ", "\n± ").replace(" [", "\n[").split("\n")
    assert_readable(table_lines, figures)


def test_calibrate_table():
    from slabench.plan.calibrate_cli import CalibrationView

    meas = {"ttft_p50": 0.1729, "e2e_p50": 12.3456, "throughput_rps": 2.089, "output_tokens_per_s": 12_609.4}
    sim = {"ttft_p50": 0.1811, "e2e_p50": 11.9876, "throughput_rps": 2.201, "output_tokens_per_s": 13_210.9}
    rows = [("fit", "16/1", 16, 1_234, meas, sim), ("validate", "128/3", 128, 23_456, meas, sim)]
    figures = ["fit:", "validate:", "16/1", "128/3", "1,234", "23,456", "172.9", "→ 181.1", "(+5%)", "12,345.6"]
    figures += ["→ 11,987.6", "(-3%)", "12,609.4", "→ 13,210.9"]
    assert_readable(at_80(CalibrationView("my-server", rows)), figures)


def test_fleet_check_table(capsys, monkeypatch):
    from slabench.fleet import cli

    monkeypatch.setenv("COLUMNS", str(WIDTH))
    parser = argparse.ArgumentParser(prog="slabench")
    cli.add_parser(parser.add_subparsers(dest="command", required=True))
    nodes = str(REPO / "examples" / "fleet" / "nodes.yaml")
    args = parser.parse_args(["fleet", "check", "--nodes", nodes, "--format", "json"])
    args.func(args)
    doc = json.loads(capsys.readouterr().out)
    args.format = "table"
    args.func(args)
    lines = [line for line in capsys.readouterr().out.splitlines() if not line.startswith(("    FAIL", "    WARN"))]
    figures = [str(n[k]) for n in doc["nodes"] for k in ("name", "instance_type", "gpu_name", "driver") if n.get(k)]
    assert_readable(lines, figures)


def test_dataset_stats(capsys, monkeypatch):
    from slabench.workload import cli

    monkeypatch.setenv("COLUMNS", str(WIDTH))
    parser = argparse.ArgumentParser(prog="slabench")
    cli.add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["dataset", "stats", "--dir", str(REPO / "datasets"), "--json"])
    args.func(args)
    report = json.loads(capsys.readouterr().out)
    args.json = False
    args.func(args)
    lines = capsys.readouterr().out.splitlines()
    figures = []
    for s in report["lengths"] + report["golden"]:
        figures.append(f"{s['items']:,}")
        for d in (*s["prompt_tokens"].values(), *s["output_tokens"].values(), s["transcript_tokens"]):
            figures += [f"{v:,.0f}" for v in d.values()]
    for a in report["arrivals"].values():
        figures += [f"n={a['count']:,}", f"[{a['min_offset_s']:.3f}, {a['max_offset_s']:.3f}] s"]
        figures += [f"{a['mean_rate']:.1f}/s", f"{a['peak_100ms_rate']:.0f} req/s"]
    assert_readable(lines, figures)
    assert re.search(r"prompt verbose +prompt terse", "\n".join(lines))


@pytest.fixture(autouse=True)
def _no_terminal(monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)


@pytest.mark.parametrize("command", ["", "plan", "calibrate", "grade", "deploy", "fleet", "sweep", "recover"])
def test_every_commands_help_reads_at_80_columns(command):
    """A command's help in a CI log or a pipe: its description rewrapped per paragraph, never a 118-column line
    (plan, calibrate, grade, deploy and fleet once printed their docstrings as written)."""
    import subprocess
    import sys

    argv = [sys.executable, "-m", "slabench", *([command] if command else []), "--help"]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=60, env={**os.environ, "COLUMNS": "80"})
    assert out.returncode == 0, out.stderr[-2000:]
    wide = [line for line in out.stdout.splitlines() if len(line) > 80]
    assert not wide, wide
