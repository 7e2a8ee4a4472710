"""GPU/model profiles: the built-in YAML files, vLLM's start-up arithmetic, and user mistakes as one-line errors."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from slabench.core.errors import UserError
from slabench.sim.profiles import (
    PROFILE_DIR,
    available_profiles,
    load_gpu_profile,
    load_model_profile,
    load_profile,
)
from slabench.sim.vllm_engine import VllmEngine

MiB = 1024**2

FLEET_GPUS = {"a10g", "l4", "l40s", "rtx-pro-4500", "rtx-pro-6000", "rtx-pro-6000-mig-2g.48gb"}


def test_the_fleet_and_the_reference_model_are_built_in():
    assert set(available_profiles("gpu")) >= FLEET_GPUS
    assert "llama-3.1-8b-fp8" in available_profiles("model")
    assert not set(available_profiles("gpu")) & set(available_profiles("model"))
    for path in PROFILE_DIR.glob("*.yaml"):  # names match files, every file names its source
        p = load_gpu_profile(path) if path.stem in available_profiles("gpu") else load_model_profile(path)
        assert p.name == path.stem and p.source


def test_fleet_figures():
    # docs/fleet.md: memory (Karpenter MiB), bandwidth (GB/s), dense FP16/BF16 TFLOPS.
    figures = {g: load_gpu_profile(g) for g in FLEET_GPUS}
    assert {g: (p.memory_mib, p.memory_bandwidth_gb_s, p.dense_bf16_tflops) for g, p in figures.items()} == {
        "a10g": (22888, 600, 70),
        "l4": (22888, 300, 120),
        "l40s": (45776, 864, 360),
        "rtx-pro-4500": (32623, 896, 210),
        "rtx-pro-6000": (98304, 1800, 500),
        "rtx-pro-6000-mig-2g.48gb": (49152, 900, 250),
    }
    card, half = figures["rtx-pro-6000"], figures["rtx-pro-6000-mig-2g.48gb"]
    assert half.memory_mib * 2 == card.memory_mib and half.dense_bf16_tflops * 2 == card.dense_bf16_tflops


def test_reference_model_kv_arithmetic_on_a_24_gb_card():
    cfg = load_profile("l4")
    assert cfg.kv_bytes_per_token == 2 * 32 * 8 * 128 * 2 == 128 * 1024
    # vLLM: memory × utilisation − weights − activations − reserve, in blocks of 16 tokens.
    budget = 22888 * MiB * 0.9 - 8.03e9 - 192 * 1024 * 2048 - 1536 * MiB
    assert cfg.num_gpu_blocks == math.floor(budget / (16 * 128 * 1024))
    assert 11e9 < cfg.kv_budget_bytes < 12e9  # docs/fleet.md: ~11–12 GB remain for KV...
    assert 85_000 < cfg.kv_capacity_tokens < 95_000  # ...about 90k tokens
    assert 20 <= cfg.kv_capacity_tokens // 3500 <= 25  # ~20–25 QA requests of ~3.5k tokens


def test_vllm_batch_defaults_depend_on_device_memory():
    small, big, slice_ = load_profile("l4"), load_profile("rtx-pro-6000"), load_profile("rtx-pro-6000-mig-2g.48gb")
    assert (small.max_num_batched_tokens, small.max_num_seqs) == (2048, 256)
    assert (big.max_num_batched_tokens, big.max_num_seqs) == (8192, 1024)
    assert (slice_.max_num_batched_tokens, slice_.max_num_seqs) == (2048, 256)
    assert big.kv_capacity_tokens > 2 * slice_.kv_capacity_tokens  # a slice keeps the weights' full cost


def test_engine_overrides_and_the_gpu_profiles_own_flags(tmp_path: Path):
    cfg = load_profile("l4", engine={"max_num_seqs": 8, "gpu_memory_utilization": 0.95})
    assert cfg.max_num_seqs == 8 and cfg.kv_capacity_tokens > load_profile("l4").kv_capacity_tokens
    card = tmp_path / "my-l4.yaml"
    card.write_text(
        (PROFILE_DIR / "l4.yaml").read_text().replace("name: l4", "name: my-l4")
        + "engine:\n  max_num_batched_tokens: 512\n  stream_interval: 4\n"
    )
    mine = load_profile(card)
    assert (mine.gpu.name, mine.max_num_batched_tokens, mine.options.stream_interval) == ("my-l4", 512, 4)
    assert load_profile(card, engine={"stream_interval": 2}).options.stream_interval == 2  # explicit wins
    assert VllmEngine(mine, seed=3).config.gpu.name == "my-l4"


def test_a_user_model_by_path(tmp_path: Path):
    model = tmp_path / "tiny.yml"
    model.write_text(
        "kind: model\nname: tiny\nsource: made up for a test\nparams_b: 1\nweight_bytes_per_param: 2\n"
        "num_layers: 16\nnum_attention_heads: 16\nnum_kv_heads: 4\nhead_dim: 64\nmax_model_len: 4096\n"
    )
    cfg = load_profile("a10g", model)
    assert cfg.model.name == "tiny" and cfg.kv_bytes_per_token == 2 * 16 * 4 * 64 * 2


def test_unknown_names_list_what_exists():
    with pytest.raises(UserError, match=r"unknown gpu profile 'h100'.*l4.*rtx-pro-6000"):
        load_profile("h100")
    with pytest.raises(UserError, match=r"unknown model profile 'gpt-5'.*llama-3.1-8b-fp8"):
        load_profile("l4", "gpt-5")
    with pytest.raises(UserError, match="file not found"):
        load_profile("missing/card.yaml")


def test_a_model_file_where_a_gpu_is_expected_is_named():
    with pytest.raises(UserError, match=r"llama-3.1-8b-fp8.yaml:\d+: kind: expected 'gpu'"):
        load_profile(PROFILE_DIR / "llama-3.1-8b-fp8.yaml")


def test_a_typo_in_a_profile_names_file_line_and_key(tmp_path: Path):
    card = tmp_path / "card.yaml"
    # the card's figures written out (a user's own card, not one of the facts table's), one key misspelt
    literal = "memory_mib: 22888\nmemory_bandwith_gb_s: 300\ndense_bf16_tflops: 120\n"
    text = re.sub(r"facts_gpu: .*\n", literal, (PROFILE_DIR / "l4.yaml").read_text())
    card.write_text(text)
    line = next(i for i, x in enumerate(text.splitlines(), 1) if x.startswith("memory_bandwith_gb_s"))
    with pytest.raises(UserError) as err:
        load_profile(card)
    assert f"card.yaml:{line}: memory_bandwith_gb_s: unknown key" in str(err.value)
    # without the line at all: a roofline profile needs it (a measured one gives step_time instead)
    card.write_text("\n".join(x for x in text.splitlines() if not x.startswith("memory_bandwith_gb_s")))
    with pytest.raises(UserError, match="memory_bandwidth_gb_s: required key is missing"):
        load_profile(card)


def test_bad_values_are_refused(tmp_path: Path):
    with pytest.raises(UserError, match="gpu_memory_utilization"):
        load_profile("l4", engine={"gpu_memory_utilization": 1.5})
    with pytest.raises(UserError, match="max_num_sqs: unknown key"):
        load_profile("l4", engine={"max_num_sqs": 4})
    model = tmp_path / "odd.yaml"
    model.write_text(
        "kind: model\nname: odd\nsource: x\nparams_b: 1\nweight_bytes_per_param: 1\nnum_layers: 2\n"
        "num_attention_heads: 10\nnum_kv_heads: 4\nhead_dim: 64\nmax_model_len: 1024\n"
    )
    with pytest.raises(UserError, match="multiple of num_kv_heads"):
        load_profile("l4", model)


def test_vllms_start_up_refusals_say_what_to_change():
    with pytest.raises(UserError, match=r"does not fit.*larger GPU"):
        load_profile("l4", "llama-3.1-70b-fp8")
    assert load_profile("rtx-pro-6000", "llama-3.1-70b-fp8").kv_capacity_tokens > 16384
    with pytest.raises(UserError, match=r"max_model_len 131072 .* at most \d+"):
        load_profile("l4", engine={"max_model_len": 131072})


def test_a_measured_profile_without_its_cache_size_is_refused(tmp_path: Path):
    # a measured profile sizes its KV cache by num_gpu_blocks_override alone (no memory_mib to derive one from)
    card = tmp_path / "measured.yaml"
    card.write_text(
        "kind: gpu\nname: measured\nsource: x\nstep_time: {overhead_ms: 4.0}\n"
        "engine: {num_gpu_blocks_override: 100000}\n"
    )
    assert load_profile(card).kv_capacity_tokens == 1_600_000
    with pytest.raises(UserError, match=r"unset num_gpu_blocks_override.*keep it set"):
        load_profile(card, engine={"num_gpu_blocks_override": None})


def test_a_profile_states_its_uncertainty_or_gets_the_documented_default(tmp_path: Path):
    from slabench.sim.profiles import DEFAULT_STEP_TIME_FACTOR_90

    assert load_gpu_profile("l4").uncertainty.step_time_factor_90 == DEFAULT_STEP_TIME_FACTOR_90 == 1.3
    assert "docs/plan.md" in load_gpu_profile("l4").uncertainty.source
    card = (PROFILE_DIR / "l4.yaml").read_text()
    good = tmp_path / "good.yaml"
    good.write_text(card + "uncertainty: {step_time_factor_90: 1.1, source: measured}\n")
    assert load_gpu_profile(good).uncertainty.step_time_factor_90 == 1.1
    bad = tmp_path / "bad.yaml"
    bad.write_text(card + "uncertainty: {step_time_factor_90: 0.9}\n")
    with pytest.raises(UserError, match="step_time_factor_90"):
        load_gpu_profile(bad)
