"""`slabench fleet check` end to end through its argparse parser: output, exit codes and the image flags."""

import argparse
import json
from pathlib import Path

import pytest

from slabench.core.errors import UserError
from slabench.fleet import cli
from tests.unit.test_fleet_cluster import FakeKubeAPI, kubeconfig

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "fleet" / "nodes.yaml"
GOOD = 'nodes:\n  - {name: g6e, instance_type: g6e.xlarge, driver: "580.95.05"}\n' \
       '  - {name: g7e-mig, instance_type: g7e.2xlarge, driver: "595.58.03", mig_profile: 2g.48gb}\n'  # fmt: skip


def run(argv, capsys):
    parser = argparse.ArgumentParser(prog="slabench")
    cli.add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    code = args.func(args)
    return code, capsys.readouterr().out


def write(tmp_path, text):
    path = tmp_path / "nodes.yaml"
    path.write_text(text)
    return str(path)


def test_example_fleet_exits_1_and_explains_each_failing_node(capsys):
    code, out = run(["fleet", "check", "--nodes", str(EXAMPLE)], capsys)
    assert code == cli.EXIT_INCOMPATIBLE
    head = " ".join(out.split())  # 80 columns (no terminal): the image line wraps between its parts
    assert head.startswith("image vllm/vllm-openai:v0.32.0-cu129: CUDA 12.9, arch list 7.5 8.0 8.6 8.9 9.0 10.0 12.0")
    assert "FAIL mig: MIG profile 3g.72gb is unknown" in out
    assert "FAIL mig: MIG profile 2g.24gb set, but NVIDIA L40S does not support MIG" in out
    assert "WARN cuda_driver: image CUDA 12.9 is newer than driver 570.195.03" in out
    assert out.rstrip().endswith("13 GPU nodes: 10 ok, 1 warn, 2 fail")
    rows = [line.split() for line in out.splitlines() if line.startswith(("g5-", "g6-", "g6e-", "g7e-"))]
    assert len(rows) == 10 and all(row[-1] == "OK" for row in rows)


def test_good_fleet_exits_0(tmp_path, capsys):
    code, out = run(["fleet", "check", "--nodes", write(tmp_path, GOOD)], capsys)
    assert code == cli.EXIT_OK and "2 GPU nodes: 2 ok, 0 warn, 0 fail" in out


def test_flags_override_the_image_and_show_the_failing_cases(capsys):
    code, out = run(["fleet", "check", "--nodes", str(EXAMPLE), "--format", "json", "--image", "custom:1",
                     "--image-cuda", "13.0", "--image-arch-list", "8.0 8.6 8.9 9.0 10.0"], capsys)  # fmt: skip
    doc = json.loads(out)
    assert code == 1 and doc["image"] == {"name": "custom:1", "cuda": "13.0", "arch_list": "8.0 8.6 8.9 9.0 10.0"}
    by_name = {n["name"]: n for n in doc["nodes"]}
    for name in ("g7e-rtxpro-r580", "g7e-rtxpro-r595", "g7e-mig-2g48-r580", "g7e-mig-2g48-r595"):
        arch = next(f for f in by_name[name]["findings"] if f["rule"] == "arch")
        assert arch["severity"] == "fail" and "compute capability 12.0" in arch["message"]
    old = by_name["old-g6e-r570"]
    assert old["result"] == "fail" and old["driver_max_cuda"] == "12.8"
    assert any("CUDA 13.x needs R580+" in f["message"] for f in old["findings"])
    assert by_name["g6e-l40s-r580"]["result"] == "ok"
    assert doc["schema_version"] == 1 and doc["result"] == "fail" and doc["counts"] == {"ok": 6, "warn": 0, "fail": 7}


def test_strict_turns_warnings_into_failure(tmp_path, capsys):
    warn_only = 'nodes:\n  - {name: old, instance_type: g6e.xlarge, driver: "570.195.03"}\n'
    assert run(["fleet", "check", "--nodes", write(tmp_path, warn_only)], capsys)[0] == 0
    assert run(["fleet", "check", "--nodes", write(tmp_path, warn_only), "--strict"], capsys)[0] == 1


def test_bad_image_flags_are_user_errors(tmp_path, capsys):
    with pytest.raises(UserError, match=r"^--image-cuda: not a CUDA version: 'cuda12'"):
        run(["fleet", "check", "--nodes", write(tmp_path, GOOD), "--image-cuda", "cuda12"], capsys)
    with pytest.raises(UserError, match=r"^--image-arch-list: not an arch list entry: 'sm_120'"):
        run(["fleet", "check", "--nodes", write(tmp_path, GOOD), "--image-arch-list", "8.9 sm_120"], capsys)
    with pytest.raises(UserError, match=r"12\.0: needs CUDA ≥ 12\.8 to compile \(image CUDA is 12\.4\)"):
        run(["fleet", "check", "--nodes", write(tmp_path, GOOD), "--image-cuda", "12.4"], capsys)


def test_nodes_or_cluster_is_required(capsys):
    with pytest.raises(SystemExit):
        run(["fleet", "check"], capsys)
    with pytest.raises(SystemExit):
        run(["fleet", "check", "--nodes", str(EXAMPLE), "--from-cluster"], capsys)


def test_from_cluster(tmp_path, capsys):
    with FakeKubeAPI() as api:
        code, out = run(["fleet", "check", "--from-cluster", "--kubeconfig", kubeconfig(tmp_path, api.url)], capsys)
    assert code == 1  # the fake cluster has a node with an unknown MIG profile
    assert "g7e-bad-mig" in out and "1 skipped" in out and "skipped cpu-worker: not a GPU node" in out
    assert "t0ken" not in out  # credentials never reach the output


def test_from_cluster_without_gpu_nodes_is_a_user_error(tmp_path, capsys):
    with FakeKubeAPI() as api, pytest.raises(UserError, match="no GPU nodes found"):
        run(["fleet", "check", "--from-cluster", "--kubeconfig", kubeconfig(tmp_path, api.url),
             "--selector", "karpenter.sh/nodepool=cpu"], capsys)  # fmt: skip
