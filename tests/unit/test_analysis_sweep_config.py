"""The sweep YAML: every example loads; mistakes are one line naming file, line and field; the locust command."""

import argparse
from pathlib import Path

import pytest

from slabench.core.errors import UserError
from slabench.sweep.cli import add_parser
from slabench.sweep.config import load_sweep
from slabench.sweep.runner import STAGE_PLUGIN, locust_argv, plan

ROOT = Path(__file__).resolve().parents[2]
GOOD = """\
name: t
levels: [4, 1, 2]
repeats: 2
run:
  duration_s: 5
  warmup_s: 1
"""


def write(tmp_path, text):
    p = tmp_path / "s.yaml"
    p.write_text(text)
    return p


@pytest.mark.parametrize("path", sorted((ROOT / "sweeps").glob("*.yaml")), ids=lambda p: p.name)
def test_every_example_sweep_loads(path, monkeypatch):
    monkeypatch.chdir(ROOT)
    cfg = load_sweep(path.relative_to(ROOT))
    assert cfg.levels == sorted(cfg.levels) and cfg.repeats >= 2


def test_defaults_and_sorting(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    cfg = load_sweep(write(tmp_path, GOOD))
    assert cfg.levels == [1, 2, 4]
    assert cfg.locustfile == "locustfiles/chat_replay.py" and cfg.target.url is None
    assert [(r.level, r.repeat, r.seed) for r in plan(cfg)] == [
        (1, 1, 0),
        (1, 2, 1),
        (2, 1, 2),
        (2, 2, 3),
        (4, 1, 4),
        (4, 2, 5),
    ]


@pytest.mark.parametrize(
    ("text", "pattern"),
    [
        (GOOD + "levles: [1]\n", r"s\.yaml:7: levles: unknown key"),
        (GOOD.replace("repeats: 2", "repeats: two"), r"s\.yaml:3: repeats: .*integer.*'two'"),
        (GOOD.replace("  warmup_s: 1", "  warmup_s: 1\n  duraton_s: 3"), r"s\.yaml:7: run\.duraton_s: unknown key"),
        (GOOD.replace("repeats: 2", "repeats: 1"), r"s\.yaml:3: repeats: 1 gives no confidence interval"),
        (GOOD.replace("  duration_s: 5\n", "  requests: 10\n  duration_s: 5\n"), r"s\.yaml:4: run: .*exactly one of"),
        (GOOD.replace("warmup_s: 1", "warmup_s: 9"), r"run: .*warmup_s \(9\.0\) must be shorter"),
        (GOOD.replace("[4, 1, 2]", "[1, 1]"), r"s\.yaml:2: levels: .*repeat a value"),
        (GOOD.replace("[4, 1, 2]", "[0, 1]"), r"s\.yaml:2: levels\.0: .*greater than 0"),
        (GOOD + "target:\n  url: 127.0.0.1:8000\n", r"s\.yaml:8: target\.url: .*http://"),
        (GOOD + "locust_options:\n  users: 5\n", r"locust_options: .*'users' is set by the sweep"),
        (GOOD + "locustfile: nope.py\n", r"s\.yaml:7: locustfile: nope\.py does not exist"),
        (GOOD + "simulator:\n  max_num_seqs: 8\n", r"simulator: .*only with a GPU profile"),
        ("", r"s\.yaml: the file is empty"),
    ],
)
def test_mistakes_name_the_line(tmp_path, monkeypatch, text, pattern):
    monkeypatch.chdir(ROOT)
    with pytest.raises(UserError, match=pattern):
        load_sweep(write(tmp_path, text))


def test_one_repeat_is_allowed_when_no_ci_is_asked_for(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    cfg = load_sweep(write(tmp_path, GOOD.replace("repeats: 2", "repeats: 1") + "analysis:\n  require_ci: false\n"))
    assert cfg.repeats == 1


def test_locust_command(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    text = (
        GOOD
        + "model: m\nseed_flag: --seed\nlocust_options:\n  max-tokens: 64\n  ignore-eos: true\n  insecure-x: false\n"
    )
    cfg = load_sweep(write(tmp_path, text))
    run = plan(cfg)[3]
    argv = locust_argv(cfg, run, tmp_path / "2" / "2", "sid-L2-r2", "http://127.0.0.1:9")
    s = " ".join(argv)
    assert f"-f locustfiles/chat_replay.py,{STAGE_PLUGIN}" in s
    assert "-u 2 -r 2 --host http://127.0.0.1:9" in s and "-t 5s" in s
    assert f"--records {tmp_path}/2/2/records.jsonl --csv {tmp_path}/2/2/locust --run-id sid-L2-r2" in s
    assert "--stage-level 2 --stage-repeat 2" in s and "--model m" in s and "--seed 3" in s
    assert "--max-tokens 64 --ignore-eos" in s and "insecure-x" not in s and "--processes" not in s
    cfg2 = load_sweep(write(tmp_path, GOOD.replace("duration_s: 5", "requests: 50\n  max_duration_s: 30")))
    s2 = " ".join(locust_argv(cfg2, plan(cfg2)[0], tmp_path, "x", "http://h:1"))
    assert "--stop-after-requests 50" in s2 and "-t 30s" in s2


def test_cli_registers_both_commands():
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers(dest="command"))
    a = parser.parse_args(["sweep", "--config", "x.yaml", "--resume"])
    assert a.resume == "latest" and a.func.__name__ == "run_sweep"
    b = parser.parse_args(["aggregate", "runs/x", "--slo", "ttft_s=0.5", "--require-ci"])
    assert b.slo == ["ttft_s=0.5"] and b.require_ci and b.func.__name__ == "run_aggregate"
