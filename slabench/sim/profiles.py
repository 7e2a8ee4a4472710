"""GPU and model profiles for the vLLM capacity model, and the memory arithmetic vLLM does at start-up.

A profile is a YAML file with `kind: gpu` or `kind: model`. The built-in ones live in `profiles/` beside this module
(docs/fleet.md's cards and a few Llama/Qwen-shaped models); a user adds one by passing a path instead of a name.

    cfg = load_profile("l4")                       # reference model: 8B, FP8 weights, bf16 KV (128 KiB/token)
    cfg = load_profile("my-card.yaml", "my-model.yaml", engine={"max_num_seqs": 64})
    engine = VllmEngine(cfg, seed=1)               # slabench.sim.vllm_engine

KV capacity, as vLLM computes it when it profiles memory at start-up:
    memory × gpu_memory_utilization − weights − peak activation (∝ max_num_batched_tokens) − fixed reserve
    (CUDA context, CUDA graphs, non-torch allocations), divided into blocks of `block_size` tokens of
    2 · layers · kv_heads · head_dim · dtype bytes each.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import ConfigDict, Field, PositiveInt, model_validator

from slabench.core.config import StrictModel, load_model, load_yaml, validate_data
from slabench.core.errors import UserError
from slabench.fleet.facts import instance_gpu, packaged_facts

MiB = 1024**2
GiB = 1024**3
PROFILE_DIR = Path(__file__).with_name("profiles")
DEFAULT_MODEL = "llama-3.1-8b-fp8"
# vLLM picks bigger batch defaults on cards with ≥ 70 GiB (vllm/engine/arg_utils.py, get_batch_defaults,
# OpenAI API server context): 8192 batched tokens / 1024 sequences, else 2048 / 256.
_LARGE_CARD_BYTES = 70 * GiB


class Figures(StrictModel):
    """A profile's figures are physical: finite (no .inf/.nan) and within bounds far beyond any real card or model
    (a 1e308 overhead overflowed the planner)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class EngineOptions(Figures):
    """vLLM's serving flags that shape capacity. None means "vLLM's default" (resolved in `EngineConfig`)."""

    gpu_memory_utilization: float = Field(0.9, gt=0, le=1)
    max_num_seqs: PositiveInt | None = None
    max_num_batched_tokens: PositiveInt | None = None
    max_model_len: PositiveInt | None = None
    block_size: Literal[8, 16, 32, 64, 128] = 16
    # vLLM's --num-gpu-blocks-override: a fixed KV cache size instead of the memory arithmetic (tests, what-ifs).
    num_gpu_blocks_override: PositiveInt | None = None
    enable_prefix_caching: bool = True
    stream_interval: PositiveInt = 1
    # Multiplicative uniform noise on each step's duration (±fraction), seeded: repeats differ like real runs.
    step_time_jitter: float = Field(0.0, ge=0, lt=1)


class StepTime(Figures):
    """A measured step time (`slabench calibrate`) in place of the roofline: a step computing `n` new tokens after
    `p` cached ones for each of its scheduled requests takes overhead + per_sequence · requests + per_token · Σn +
    per_attention_pair · Σ(n·p + n(n+1)/2) + per_context_token · Σ(p + n)."""

    overhead_ms: float = Field(ge=0, le=60_000)
    per_sequence_us: float = Field(0.0, ge=0, le=1e9)  # sampling, output processing: each scheduled request, step
    per_token_us: float = Field(0.0, ge=0, le=1e9)
    per_context_token_ns: float = Field(0.0, ge=0, le=1e12)
    per_attention_pair_ns: float = Field(0.0, ge=0, le=1e12)


# What a built-in (public-figure, uncalibrated) profile's step time is trusted to: the roofline's achieved fractions
# of the peaks (bandwidth_efficiency 0.8, compute_efficiency 0.5) are assumptions, and vLLM's decode reaches roughly
# 0.6–0.95 of a card's memory bandwidth depending on kernels, batch and context; 0.8 / 0.6 = 1.33 and
# 0.8 / 0.95 = 0.84, so the true step time lies within ×1/1.3 … ×1.3 of the model's (docs/plan.md, Error bars).
DEFAULT_STEP_TIME_FACTOR_90 = 1.3
MAX_STEP_TIME_FACTOR_90 = 10.0  # the widest a profile states, or a level far out widens to
DEFAULT_UNCERTAINTY_SOURCE = (
    "default for uncalibrated public figures: achieved memory bandwidth 0.6–0.95 of peak against the 0.8 assumed "
    "moves the step time by ×0.84–×1.33 (docs/plan.md, Error bars)"
)


class Uncertainty(Figures):
    """How far the profile's step time is trusted: the true step time lies within [t / f, t · f] with 90 %
    confidence, f = `step_time_factor_90`. `slabench calibrate` writes one from its residuals and the runs'
    spread; a profile without one gets the default for public figures."""

    step_time_factor_90: float = Field(DEFAULT_STEP_TIME_FACTOR_90, ge=1, le=MAX_STEP_TIME_FACTOR_90)
    source: str = Field(DEFAULT_UNCERTAINTY_SOURCE, min_length=1)
    # The requests in flight per replica (closed-loop users) of the runs a calibration saw, lowest and highest: the
    # factor holds within them and widens beyond (`factor_at`). None: public figures, whose factor holds at any load.
    levels: tuple[float, float] | None = None

    @model_validator(mode="after")
    def _levels_in_order(self) -> Uncertainty:
        if self.levels is not None and not 0 < self.levels[0] <= self.levels[1] <= 1e9:
            raise ValueError(f"levels {list(self.levels)}: must be [lowest, highest] users seen, 0 < lowest ≤ highest")
        return self

    def extrapolation(self, level: float) -> float:
        """How far `level` (requests in flight per replica) lies outside the levels seen, as a ratio ≥ 1: level ÷
        the highest above them, the lowest ÷ level below them, 1 within them (or with no levels). A level below one
        counts as one: such a replica is idle part of the time, and while it works it carries at least one."""
        if self.levels is None or math.isnan(level):
            return 1.0
        lo, hi = self.levels
        level = max(level, 1.0)
        return max(1.0, level / hi, lo / level)

    def factor_at(self, level: float) -> float:
        """The 90 % step-time factor at `level`: f within the levels seen; beyond them the interval's log-width
        ln f grows in proportion to the extrapolation ratio r, f ** r (the fit's residual spread, scaled by how far
        out it is used), at most ×10. E.g. f = 1.2 calibrated at 1–4 users: ×1.44 at 8, ×2.07 at 16."""
        if not math.isfinite(level):
            return MAX_STEP_TIME_FACTOR_90
        return min(float(self.step_time_factor_90 ** self.extrapolation(level)), MAX_STEP_TIME_FACTOR_90)


class GpuProfile(Figures):
    kind: Literal["gpu"]
    name: str = Field(min_length=1)
    description: str = ""
    source: str = Field(min_length=1, description="where the figures come from (they are approximate)")
    # The card in the GPU facts table (slabench/fleet/data/gpu_facts.yaml): memory_mib, memory_bandwidth_gb_s,
    # dense_bf16_tflops and karpenter_gpu_name come from there unless the profile sets them (a MIG profile gets its
    # slice's share), and every one of `instances` must be an EC2 type with that card.
    facts_gpu: str | None = None
    instances: tuple[str, ...] = ()  # EC2 types with this card, cheapest first (`slabench plan` prices the first)
    karpenter_gpu_name: str | None = None
    mig_profile: str | None = Field(None, description="a MIG slice of `instances`' card, e.g. 2g.48gb (priced so)")
    # The roofline's inputs; a profile with a measured `step_time` needs none of them (and memory_mib only
    # without engine.num_gpu_blocks_override).
    memory_mib: int | None = Field(None, gt=0, le=1 << 30)  # up to a PiB
    memory_bandwidth_gb_s: float | None = Field(None, ge=0.001, le=1e7)
    dense_bf16_tflops: float | None = Field(None, ge=0.001, le=1e7)
    # Achieved fractions of the peaks: prefill GEMMs reach about half the dense tensor peak, decode about 80%
    # of memory bandwidth (modelling assumptions, stated in docs/simulator.md).
    compute_efficiency: float = Field(0.5, gt=0, le=1)
    bandwidth_efficiency: float = Field(0.8, gt=0, le=1)
    # Per-step fixed cost: scheduler, input preparation, kernel launches/graph replay, sampling.
    step_overhead_ms: float = Field(4.0, ge=0, le=60_000)
    # Memory vLLM cannot give to the KV cache besides weights and activations: CUDA graphs, non-torch allocations.
    reserved_mib: int = Field(1536, ge=0, le=1 << 30)
    engine: EngineOptions = EngineOptions()  # this card's deployment flags (defaults: vLLM's)
    step_time: StepTime | None = None  # measured (slabench calibrate): replaces the roofline
    uncertainty: Uncertainty = Uncertainty()

    def slowed(self, factor: float) -> GpuProfile:
        """The same card with every step taking `factor` times as long (< 1: faster): the overhead and a measured
        step time's coefficients × factor, the roofline's peaks ÷ factor. The ends of the 90 % interval."""
        if self.step_time is not None:
            st = self.step_time
            step = st.model_copy(update={k: getattr(st, k) * factor for k in type(st).model_fields})
            return self.model_copy(update={"step_time": step})
        update: dict[str, Any] = {"step_overhead_ms": self.step_overhead_ms * factor}
        for name in ("memory_bandwidth_gb_s", "dense_bf16_tflops"):
            value = getattr(self, name)
            if value is not None:
                update[name] = value / factor
        return self.model_copy(update=update)

    @model_validator(mode="before")
    @classmethod
    def _figures_from_facts(cls, data: Any) -> Any:
        if not isinstance(data, dict) or data.get("facts_gpu") is None:
            return data
        return {**facts_figures(str(data["facts_gpu"]), data.get("mig_profile"), data.get("instances") or ()), **data}

    @model_validator(mode="after")
    def _roofline_or_measured(self) -> GpuProfile:
        need = [] if self.step_time else ["memory_bandwidth_gb_s", "dense_bf16_tflops"]
        if self.engine.num_gpu_blocks_override is None:
            need.append("memory_mib")
        for name in need:
            if getattr(self, name) is None:
                raise ValueError(
                    f"{name}: required key is missing (a roofline profile gives memory_mib, memory_bandwidth_gb_s "
                    "and dense_bf16_tflops; a measured one gives step_time: and engine: num_gpu_blocks_override)"
                )
        return self


def facts_figures(key: str, mig_profile: str | None, instances: Any) -> dict[str, Any]:
    """A card's roofline figures from the GPU facts table; a MIG slice (e.g. 2g.48gb on a 96 GB card) gets its
    memory's share of each. Raises ValueError (the profile's validation error) for an unknown card or an instance of
    another card."""
    facts = packaged_facts()
    gpu = facts.gpus.get(key)
    if gpu is None:
        raise ValueError(f"facts_gpu: {key!r} is not a GPU of the facts table (known: {', '.join(facts.gpus)})")
    for itype in instances if isinstance(instances, list | tuple) else ():
        found = instance_gpu(facts, str(itype))
        if found is None or found[0] != key:
            raise ValueError(
                f"instances: {itype} is not an EC2 type with {key} (the facts table gives "
                f"{found[0] if found else 'no GPU'} for it)"
            )
    share = 1.0
    if mig_profile:
        slice_gb = re.fullmatch(r"\d+g\.(\d+)gb.*", str(mig_profile))
        if slice_gb is None or gpu.mig is None or str(mig_profile) not in gpu.mig.profiles:
            raise ValueError(f"mig_profile: {mig_profile!r} is not a MIG profile of {key} in the facts table")
        share = int(slice_gb.group(1)) / gpu.memory_gib
    figures: dict[str, Any] = {"karpenter_gpu_name": key}
    for name in ("memory_mib", "memory_bandwidth_gb_s", "dense_bf16_tflops"):
        value = getattr(gpu, name)
        if value is not None:
            figures[name] = round(value * share) if name == "memory_mib" else value * share
    return figures


class ModelProfile(Figures):
    kind: Literal["model"]
    name: str = Field(min_length=1)
    description: str = ""
    source: str = Field(min_length=1)
    params_b: float = Field(gt=0, le=1e6, description="parameters, billions")
    weight_bytes_per_param: float = Field(gt=0, le=16, description="1 for FP8, 2 for bf16, ~0.5 for 4-bit")
    num_layers: PositiveInt
    num_attention_heads: PositiveInt
    num_kv_heads: PositiveInt
    head_dim: PositiveInt
    kv_cache_dtype_bytes: Literal[1, 2, 4] = 2
    # Peak activation memory vLLM's profiling run sees, per token of max_num_batched_tokens.
    activation_kib_per_batched_token: float = Field(192.0, ge=0, le=1e9)
    max_model_len: PositiveInt

    @model_validator(mode="after")
    def _heads_divide(self) -> ModelProfile:
        if self.num_attention_heads % self.num_kv_heads:
            raise ValueError(
                f"num_attention_heads ({self.num_attention_heads}) must be a multiple of num_kv_heads "
                f"({self.num_kv_heads}) — grouped-query attention shares each KV head among whole query heads"
            )
        return self


@dataclass(frozen=True)
class EngineConfig:
    """A GPU, a model and vLLM's flags, resolved; the derived figures the engine runs on."""

    gpu: GpuProfile
    model: ModelProfile
    options: EngineOptions

    # -- resolved flags (vLLM's defaults where the options say None)
    @property
    def _large_card(self) -> bool:
        return (self.gpu.memory_mib or 0) * MiB >= _LARGE_CARD_BYTES

    @property
    def max_num_seqs(self) -> int:
        return self.options.max_num_seqs or (1024 if self._large_card else 256)

    @property
    def max_num_batched_tokens(self) -> int:
        return self.options.max_num_batched_tokens or (8192 if self._large_card else 2048)

    @property
    def max_model_len(self) -> int:
        return self.options.max_model_len or self.model.max_model_len

    @property
    def block_size(self) -> int:
        return self.options.block_size

    # -- memory
    @property
    def weight_bytes(self) -> float:
        return self.model.params_b * 1e9 * self.model.weight_bytes_per_param

    @property
    def kv_bytes_per_token(self) -> int:
        m = self.model
        return 2 * m.num_layers * m.num_kv_heads * m.head_dim * m.kv_cache_dtype_bytes  # K and V

    @property
    def activation_bytes(self) -> float:
        return self.model.activation_kib_per_batched_token * 1024 * self.max_num_batched_tokens

    @property
    def kv_budget_bytes(self) -> float:
        if self.gpu.memory_mib is None:  # a measured profile: its cache size is num_gpu_blocks_override
            return self.num_gpu_blocks * self.block_size * self.kv_bytes_per_token
        usable = self.gpu.memory_mib * MiB * self.options.gpu_memory_utilization
        return usable - self.weight_bytes - self.activation_bytes - self.gpu.reserved_mib * MiB

    @cached_property
    def num_gpu_blocks(self) -> int:
        if self.options.num_gpu_blocks_override:
            return self.options.num_gpu_blocks_override
        return max(0, math.floor(self.kv_budget_bytes / (self.block_size * self.kv_bytes_per_token)))

    @property
    def kv_capacity_tokens(self) -> int:
        return self.num_gpu_blocks * self.block_size

    # -- roofline
    @property
    def flops_per_token(self) -> float:
        return 2.0 * self.model.params_b * 1e9

    @property
    def attention_flops_per_pair(self) -> float:
        """FLOPs of QKᵀ and PV for one (query token, context token) pair, over all layers and heads."""
        m = self.model
        return 4.0 * m.num_layers * m.num_attention_heads * m.head_dim

    @property
    def effective_flops(self) -> float:
        if self.gpu.dense_bf16_tflops is None:
            return math.inf  # a measured step_time: the roofline is not used
        return self.gpu.dense_bf16_tflops * 1e12 * self.gpu.compute_efficiency

    @property
    def effective_bandwidth(self) -> float:
        if self.gpu.memory_bandwidth_gb_s is None:
            return math.inf
        return self.gpu.memory_bandwidth_gb_s * 1e9 * self.gpu.bandwidth_efficiency

    @property
    def step_overhead_s(self) -> float:
        if self.gpu.step_time is not None:
            return self.gpu.step_time.overhead_ms / 1000.0
        return self.gpu.step_overhead_ms / 1000.0

    @property
    def measured_step(self) -> tuple[float, float, float, float] | None:
        """A measured step time's (per sequence, per token, per attention pair, per context token), seconds; None:
        the roofline."""
        st = self.gpu.step_time
        if st is None:
            return None
        return (
            st.per_sequence_us * 1e-6,
            st.per_token_us * 1e-6,
            st.per_attention_pair_ns * 1e-9,
            st.per_context_token_ns * 1e-9,
        )

    def check(self) -> EngineConfig:
        """vLLM's start-up refusals, as user errors that say what to change."""
        where = f"profile {self.gpu.name} + {self.model.name}"
        memory_mib = self.gpu.memory_mib
        if self.options.num_gpu_blocks_override is None:  # the KV cache is what memory leaves
            if memory_mib is None:
                raise UserError(
                    f"{where}: the engine options unset num_gpu_blocks_override, the KV cache size of this measured "
                    "profile (it gives no memory_mib to derive one from) — keep it set, or add memory_mib"
                )
            if self.kv_budget_bytes <= 0:
                raise UserError(
                    f"{where}: the model does not fit: {self.weight_bytes / GiB:.1f} GiB of weights + "
                    f"{(self.activation_bytes + self.gpu.reserved_mib * MiB) / GiB:.1f} GiB reserve > "
                    f"{memory_mib * self.options.gpu_memory_utilization / 1024:.1f} GiB usable — pick a larger "
                    "GPU profile, a smaller or more quantised model, or raise gpu_memory_utilization"
                )
        if self.kv_capacity_tokens < self.max_model_len:
            raise UserError(
                f"{where}: max_model_len {self.max_model_len} needs more KV cache than the "
                f"{self.kv_capacity_tokens} tokens that fit — lower max_model_len (engine option) to at most "
                f"{self.kv_capacity_tokens}, or raise gpu_memory_utilization"
            )
        return self

    def summary(self) -> dict[str, Any]:
        """The figures worth printing next to any result produced with this config."""
        return {
            "gpu": self.gpu.name,
            "model": self.model.name,
            "weights_gib": round(self.weight_bytes / GiB, 2),
            "kv_bytes_per_token": self.kv_bytes_per_token,
            "kv_budget_gib": round(self.kv_budget_bytes / GiB, 2),
            "num_gpu_blocks": self.num_gpu_blocks,
            "kv_capacity_tokens": self.kv_capacity_tokens,
            "max_num_seqs": self.max_num_seqs,
            "max_num_batched_tokens": self.max_num_batched_tokens,
            "max_model_len": self.max_model_len,
            "enable_prefix_caching": self.options.enable_prefix_caching,
        }


def available_profiles(kind: Literal["gpu", "model"]) -> list[str]:
    """Names of the built-in profiles of one kind."""
    out = []
    for p in sorted(PROFILE_DIR.glob("*.yaml")):
        data, _ = load_yaml(p)
        if isinstance(data, dict) and data.get("kind") == kind:
            out.append(p.stem)
    return out


def _is_path(ref: str | Path) -> bool:
    s = str(ref)
    return isinstance(ref, Path) or s.endswith((".yaml", ".yml")) or "/" in s or "\\" in s


Profile = TypeVar("Profile", GpuProfile, ModelProfile)


def _load_kind(ref: str | Path, kind: Literal["gpu", "model"], cls: type[Profile]) -> Profile:
    if _is_path(ref):
        path = Path(ref)
    else:
        path = PROFILE_DIR / f"{ref}.yaml"
        names = available_profiles(kind)
        if str(ref) not in names:
            raise UserError(
                f"unknown {kind} profile {str(ref)!r} — built-in {kind} profiles: {', '.join(names)}; "
                "or pass the path of a YAML profile file"
            )
    data, lines = load_yaml(path)
    found = data.get("kind") if isinstance(data, dict) else None
    if found != kind:
        line = lines.get(("kind",), 1)
        raise UserError(
            f"{path}:{line}: kind: expected {kind!r} here but the file says {found!r} — "
            f"pass a `kind: {kind}` profile (see {PROFILE_DIR} for examples)"
        )
    return load_model(path, cls)


def load_gpu_profile(ref: str | Path) -> GpuProfile:
    return _load_kind(ref, "gpu", GpuProfile)


def load_model_profile(ref: str | Path) -> ModelProfile:
    return _load_kind(ref, "model", ModelProfile)


def load_profile(
    gpu: str | Path, model: str | Path = DEFAULT_MODEL, engine: dict[str, Any] | None = None
) -> EngineConfig:
    """Resolve a GPU profile and a model profile (built-in name or YAML path) into a checked EngineConfig.

    `engine` overrides vLLM flags (keys of `EngineOptions`) on top of the GPU profile's own `engine:` section.
    """
    g = load_gpu_profile(gpu)
    m = load_model_profile(model)
    merged = {**g.engine.model_dump(exclude_unset=True), **(engine or {})}
    options = validate_data(merged, EngineOptions, "engine options")
    return EngineConfig(gpu=g, model=m, options=options).check()
