"""The sweep YAML: strict models (unknown keys and wrong types are errors naming the line).

    slabench sweep --config sweeps/default.yaml

See sweeps/*.yaml for annotated examples and docs/analysis.md for every field.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import Field, NonNegativeFloat, PositiveFloat, PositiveInt, field_validator, model_validator

from slabench.core.config import StrictModel, load_model, load_yaml
from slabench.core.errors import UserError

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_OPTION = re.compile(r"^[a-z][a-z0-9-]*$")


class Target(StrictModel):
    url: str | None = None  # None: start the embedded simulator (one for the whole sweep)
    api_key_env: str = "OPENAI_API_KEY"  # environment variable holding the key (never the key itself)
    insecure: bool = False  # skip TLS verification (off by default)

    @field_validator("url")
    @classmethod
    def _url(cls, v: str | None) -> str | None:
        if v is not None and not re.match(r"^https?://[^/\s]+", v):
            raise ValueError("must be an http:// or https:// URL, e.g. http://127.0.0.1:8000")
        return v.rstrip("/") if v else v


class Simulator(StrictModel):
    """Knobs of the embedded simulator (`slabench simulate`), used when target.url is not set."""

    ttft: NonNegativeFloat = 0.1
    itl: NonNegativeFloat = 0.01
    jitter: NonNegativeFloat = 0.0
    output_tokens: PositiveInt = 128
    stream_interval: PositiveInt = 1
    profile: str | None = None  # simulate vLLM on this GPU profile (e.g. l4) instead of fixed latencies
    model_profile: str | None = None  # with profile: the model profile (default: the simulator's)
    max_num_seqs: PositiveInt | None = None  # with profile: vLLM --max-num-seqs
    args: list[str] = Field(default_factory=list)  # further `slabench simulate` flags, passed as they are

    @model_validator(mode="after")
    def _profile_only(self) -> Simulator:
        if self.profile is None and (self.model_profile is not None or self.max_num_seqs is not None):
            raise ValueError("model_profile and max_num_seqs apply only with a GPU profile (set profile, e.g. l4)")
        return self


class Run(StrictModel):
    """One locust process per (level, repeat): how long it runs and what is left out."""

    duration_s: PositiveFloat | None = None  # run for this long (locust -t) ...
    requests: PositiveInt | None = None  # ... or stop after this many records (warm-up included)
    max_duration_s: PositiveFloat | None = None  # safety cap for request-count runs
    warmup_s: NonNegativeFloat = 0.0  # the first seconds of each run's records are left out of the figures
    spawn_rate: PositiveFloat | None = None  # users started per second (default: the level: all within 1 s)
    processes: PositiveInt = 1  # locust --processes (1: a single local process)
    stop_timeout_s: NonNegativeFloat = 0.0  # locust --stop-timeout: let in-flight requests finish at the end
    records_format: Literal["jsonl", "parquet"] = "jsonl"  # parquet: ~3× smaller, ~3× faster to aggregate
    # fresh: each run starts with the server's prefix cache emptied (or, where it cannot be, with prompts another
    # run's cache cannot match); keep: runs share what the cache holds, e.g. to measure a warm cache on purpose
    prefix_cache: Literal["fresh", "keep"] = "fresh"

    @model_validator(mode="after")
    def _one_limit(self) -> Run:
        if (self.duration_s is None) == (self.requests is None):
            raise ValueError("set exactly one of duration_s (seconds per run) or requests (records per run)")
        if self.duration_s is not None and self.warmup_s >= self.duration_s:
            raise ValueError(f"warmup_s ({self.warmup_s}) must be shorter than duration_s ({self.duration_s})")
        return self


class Cliff(StrictModel):
    latency_metric: str = "ttft_p95"
    latency_ratio: float = Field(1.5, gt=1)
    throughput_metric: str = "throughput_rps"
    scaling_floor: float = Field(0.5, gt=0, lt=1)


class Slo(StrictModel):
    """Per-request SLOs for goodput (a request counts when OK and within every one set)."""

    ttft_s: PositiveFloat | None = None
    itl_s: PositiveFloat | None = None
    tpot_s: PositiveFloat | None = None
    e2e_s: PositiveFloat | None = None


class Analysis(StrictModel):
    require_ci: bool = True  # refuse a sweep whose levels cannot get a confidence interval (repeats < 2)
    slo: Slo | None = None
    cliff: Cliff = Field(default_factory=Cliff)
    report: bool = True  # aggregate and write the report when the sweep finishes


class SweepConfig(StrictModel):
    name: str = Field(min_length=1, max_length=60)
    target: Target = Field(default_factory=Target)
    simulator: Simulator = Field(default_factory=Simulator)
    model: str | None = None  # default: the first model the server lists
    locustfile: str = "locustfiles/chat_replay.py"
    locust_options: dict[str, str | int | float | bool] = Field(default_factory=dict)  # --key value per entry
    levels: list[PositiveInt] = Field(min_length=1)
    repeats: PositiveInt = 3
    run: Run
    seed: int = 0
    seed_policy: Literal["per_run", "fixed"] = "per_run"
    seed_flag: str | None = None  # locustfile option that takes each run's seed, e.g. "--seed"
    analysis: Analysis = Field(default_factory=Analysis)
    output_dir: str = "runs"

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _NAME.match(v):
            raise ValueError("use letters, digits, '.', '_' or '-' (it names the run directory)")
        return v

    @field_validator("levels")
    @classmethod
    def _levels(cls, v: list[int]) -> list[int]:
        if len(set(v)) != len(v):
            raise ValueError(f"levels repeat a value ({v}); list each concurrency once")
        return sorted(v)

    @field_validator("locust_options")
    @classmethod
    def _options(cls, v: dict[str, str | int | float | bool]) -> dict[str, str | int | float | bool]:
        for key in v:
            if not _OPTION.match(key):
                raise ValueError(f"{key!r}: write locust options without dashes, e.g. max-tokens: 64")
            if key in RESERVED_OPTIONS:
                raise ValueError(f"{key!r} is set by the sweep itself; use the sweep's own field instead")
        return v

    @field_validator("seed_flag")
    @classmethod
    def _seed_flag(cls, v: str | None) -> str | None:
        if v is not None and not re.match(r"^--[a-z][a-z0-9-]*$", v):
            raise ValueError("must be a long option such as --seed")
        return v


# Options the sweep passes itself (per run, or from its own fields).
RESERVED_OPTIONS = frozenset(
    {
        "host",
        "users",
        "u",
        "spawn-rate",
        "r",
        "run-time",
        "t",
        "headless",
        "records",
        "csv",
        "run-id",
        "processes",
        "model",
        "api-key-env",
        "insecure",
        "stage-level",
        "stage-repeat",
        "stop-after-requests",
        "exit-code-on-error",
        "stop-timeout",
        "locustfile",
        "f",
    }
)


def load_sweep(path: str | Path, locustfile_root: Path | None = None) -> SweepConfig:
    """Load and check a sweep YAML; every problem is a UserError naming the file and line. The locustfile must exist
    relative to `locustfile_root` (default: where you run, as locust resolves it)."""
    cfg = load_model(path, SweepConfig)
    _, lines = load_yaml(path)
    if cfg.analysis.require_ci and cfg.repeats < 2:
        line = lines.get(("repeats",)) or lines.get(("analysis", "require_ci")) or 1
        raise UserError(
            f"{path}:{line}: repeats: {cfg.repeats} gives no confidence interval (a CI needs at least 2 repeats) — "
            "set repeats ≥ 2, or analysis.require_ci: false to accept figures without one"
        )
    lf = Path(cfg.locustfile)
    if not (locustfile_root / lf if locustfile_root else lf).exists():
        line = lines.get(("locustfile",), 1)
        where = f"in {locustfile_root}" if locustfile_root else "(paths are relative to where you run)"
        raise UserError(f"{path}:{line}: locustfile: {lf} does not exist {where}")
    return cfg
