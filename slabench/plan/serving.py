"""The vLLM serving flags a plan is made for: what `slabench deploy` installs, not the profile's defaults.

Read, later winning over earlier: the vllm-serving chart's own `values.yaml`, each `--serving-values FILE` (merged
as Helm merges `-f` files: maps key by key, anything else replaced), then the flags given on the command line.
Only the flags that shape capacity are taken (the chart's `model:` keys on the left):

    maxNumSeqs → max_num_seqs              maxModelLen → max_model_len
    maxNumBatchedTokens → max_num_batched_tokens (0: vLLM's default)
    gpuMemoryUtilization → gpu_memory_utilization
    enablePrefixCaching → enable_prefix_caching
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from slabench.core.errors import UserError
from slabench.core.yamlio import load_data

CHART_KEYS = {
    "maxNumSeqs": "max_num_seqs",
    "maxModelLen": "max_model_len",
    "maxNumBatchedTokens": "max_num_batched_tokens",
    "gpuMemoryUtilization": "gpu_memory_utilization",
    "enablePrefixCaching": "enable_prefix_caching",
}
CHART_VALUES = Path(__file__).resolve().parents[2] / "helm" / "vllm-serving" / "values.yaml"


def add_options(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("serving flags (vLLM's; default: each GPU profile's own)")
    g.add_argument(
        "--serving-values",
        action="append",
        default=[],
        metavar="FILE",
        help="plan for what the vllm-serving chart installs with these values (repeatable, merged as helm -f)",
    )
    g.add_argument("--max-num-seqs", type=int, help="vLLM --max-num-seqs")
    g.add_argument("--max-model-len", type=int, help="vLLM --max-model-len")
    g.add_argument("--max-num-batched-tokens", type=int, help="vLLM --max-num-batched-tokens")
    g.add_argument("--gpu-memory-utilization", type=float, help="vLLM --gpu-memory-utilization")
    g.add_argument("--prefix-caching", choices=("on", "off"), help="vLLM --enable-prefix-caching (default on)")


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def merged_values(files: list[str], chart_values: Path = CHART_VALUES) -> dict[str, Any]:
    """The chart's values with `files` over its defaults, merged as `helm -f` merges them."""
    merged: dict[str, Any] = {}
    defaults = [str(chart_values)] if chart_values.is_file() else []  # an installed package has no charts
    for f in [*defaults, *files]:
        doc = load_data(f) or {}
        if not isinstance(doc, dict):
            raise UserError(f"{f}: a Helm values file is a mapping, not a {type(doc).__name__}")
        merged = _merge(merged, doc)
    return merged


def chart_flags(files: list[str], chart_values: Path = CHART_VALUES) -> dict[str, Any]:
    """The capacity flags the chart installs with `files` over its defaults (the defaults alone if none given)."""
    merged = merged_values(files, chart_values)
    model = merged.get("model") or {}
    if not isinstance(model, dict):
        raise UserError(f"{files[-1] if files else chart_values}: model: must be a mapping of the chart's model keys")
    out: dict[str, Any] = {}
    for key, option in CHART_KEYS.items():
        value = model.get(key)
        if value is None or (key == "maxNumBatchedTokens" and value == 0):
            continue
        out[option] = value
    return out


def serving_flags(args: argparse.Namespace) -> dict[str, Any]:
    """Engine overrides (`slabench.sim.profiles.EngineOptions` keys) for the plan, checked later with the profile.
    With --autoscale the chart's own flags are the base even without a values file: its autoscaling rule is read from
    the chart, and a replica the rule scales must be the one the chart deploys."""
    charted = args.serving_values or getattr(args, "autoscale", False)
    out = chart_flags(args.serving_values) if charted else {}
    for option in ("max_num_seqs", "max_model_len", "max_num_batched_tokens", "gpu_memory_utilization"):
        value = getattr(args, option, None)
        if value is not None:
            out[option] = value
    if getattr(args, "prefix_caching", None):
        out["enable_prefix_caching"] = args.prefix_caching == "on"
    return out


def describe(flags: dict[str, Any]) -> str:
    """The flags as vLLM's command line writes them, for the plan's assumptions."""
    if not flags:
        return "each GPU profile's own vLLM flags"
    parts = []
    for option, value in sorted(flags.items()):
        flag = "--" + option.replace("_", "-")
        if isinstance(value, bool):
            parts.append(flag if value else flag.replace("--enable-", "--no-enable-"))
        else:
            parts.append(f"{flag} {value}")
    return "vLLM " + " ".join(parts)
