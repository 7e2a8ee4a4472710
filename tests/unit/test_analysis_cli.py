"""`slabench aggregate` / `slabench sweep` as a user meets them: exit codes and one-line messages."""

import json
from pathlib import Path

import pytest

from slabench.commands.cli import main
from tests.helpers.analysis_helpers import rec, write_run


def test_aggregate_writes_the_report_and_prints_the_table(tmp_path, capsys):
    for repeat in (1, 2):
        write_run(tmp_path / "s", 1, repeat, [rec(float(i), ttft=0.1 + 0.01 * repeat) for i in range(5)])
    assert main(["aggregate", str(tmp_path / "s"), "--slo", "ttft_s=0.5", "--out", str(tmp_path / "rep")]) == 0
    out = capsys.readouterr()
    assert "TTFT p95 (ms)" in out.out and "report:" in out.err
    summary = json.loads((tmp_path / "rep" / "summary.json").read_text())
    assert summary["slo"] == {"ttft_s": 0.5} and "goodput_rps" in summary["levels"][0]["metrics"]


def test_aggregate_json_to_stdout(tmp_path, capsys):
    write_run(tmp_path / "s", 2, 1, [rec(float(i)) for i in range(3)])
    assert main(["aggregate", str(tmp_path / "s"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["levels"][0]["level"] == 2


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["aggregate", "{tmp}/empty"], "no runs found"),
        (["aggregate", "{tmp}/nowhere"], "no such directory"),
        (["aggregate", "{tmp}/one", "--require-ci"], "confidence intervals need at least 2 repeats"),
        (["aggregate", "{tmp}/one", "--slo", "ttft=1"], "--slo ttft=1: write KEY=SECONDS"),
        (["aggregate", "{tmp}/one", "--warmup-s", "-1"], "--warmup-s must be ≥ 0"),
        (["sweep", "--config", "{tmp}/bad.yaml"], "bad.yaml:2: levels: Input should be a valid list"),
        (["sweep", "--config", "{tmp}/missing.yaml"], "missing.yaml: file not found"),
        (["sweep", "--config", "{tmp}/good.yaml", "--resume"], "no unfinished sweep named 'g'"),
        (["sweep", "--config", "{tmp}/good.yaml", "--processes", "0"], "--processes must be ≥ 1"),
        (["sweep", "--config", "{tmp}/good.yaml", "--target-url", "ftp://x"], "must be an http:// or https:// URL"),
        (["sweep", "--config", "{tmp}/good.yaml", "--server-metrics", "10.0.0.5/metrics"], "'off', 'pods' or a URL"),
    ],
)
def test_user_mistakes_exit_3_with_one_line(tmp_path, capsys, monkeypatch, argv, message):
    (tmp_path / "empty").mkdir()
    write_run(tmp_path / "one", 1, 1, [rec(0.0)])
    (tmp_path / "bad.yaml").write_text("name: b\nlevels: 4\nrun:\n  duration_s: 3\n")
    (tmp_path / "good.yaml").write_text(f"name: g\nlevels: [1]\nrun:\n  duration_s: 3\noutput_dir: {tmp_path}/runs\n")
    monkeypatch.chdir(__import__("pathlib").Path(__file__).resolve().parents[2])
    assert main([a.format(tmp=tmp_path) for a in argv]) == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("slabench: ") and message in err[0], err


def test_a_sweep_can_be_told_where_every_run_scrapes_the_server(tmp_path):
    """In a cluster (slabench deploy --kind sweep): each serving pod's own /metrics, passed to every locust run."""
    import argparse

    from slabench.sweep.cli import _apply_overrides
    from slabench.sweep.config import load_sweep

    (tmp_path / "good.yaml").write_text("name: g\nlevels: [1]\nrun:\n  duration_s: 3\n")
    cfg = load_sweep(tmp_path / "good.yaml", Path(__file__).resolve().parents[2])
    args = argparse.Namespace(processes=None, target_url=None, output_dir=None, server_metrics="pods:app=vllm")
    assert _apply_overrides(cfg, args).locust_options["server-metrics"] == "pods:app=vllm"
