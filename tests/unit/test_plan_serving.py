"""The serving flags a plan is made for (`slabench.plan.serving`): the chart's values merged as Helm merges -f files,
the command line over them, and vLLM's spelling in the plan's assumptions."""

from __future__ import annotations

import argparse

from slabench.plan.serving import CHART_VALUES, add_options, chart_flags, describe, serving_flags


def parse(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_options(p)
    return p.parse_args(argv)


def test_the_chart_defaults_are_what_deploy_installs():
    flags = chart_flags([])
    assert CHART_VALUES.is_file() and flags["max_num_seqs"] >= 1 and flags["max_model_len"] >= 1
    assert "max_num_batched_tokens" not in flags  # 0 in the chart: vLLM's own default


def test_values_files_merge_key_by_key_and_flags_win(tmp_path):
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    a.write_text("model:\n  maxNumSeqs: 32\n  maxModelLen: 4096\n")
    b.write_text("model:\n  maxNumSeqs: 16\n  enablePrefixCaching: false\n")
    flags = serving_flags(parse("--serving-values", str(a), "--serving-values", str(b)))
    assert (flags["max_num_seqs"], flags["max_model_len"], flags["enable_prefix_caching"]) == (16, 4096, False)
    flags = serving_flags(parse("--serving-values", str(b), "--max-num-seqs", "8", "--prefix-caching", "on"))
    assert (flags["max_num_seqs"], flags["enable_prefix_caching"]) == (8, True)
    assert serving_flags(parse()) == {}


def test_described_as_vllm_writes_them():
    assert describe({}) == "each GPU profile's own vLLM flags"
    text = describe({"max_num_seqs": 8, "enable_prefix_caching": False, "gpu_memory_utilization": 0.85})
    assert text == "vLLM --no-enable-prefix-caching --gpu-memory-utilization 0.85 --max-num-seqs 8"
