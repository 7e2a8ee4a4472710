"""The SLA contract: strict models for `sla/config_sla_example.yaml`, and the loader that checks it against the price
table and (at grading time) against what the run measured, with every mistake naming its line.

A contract says *at which load* it applies (a concurrency, a request rate, or a scenario such as the burst), *on which
deployment* (instance type, GPUs or MIG slices per replica, replicas), and what must hold there: latency ceilings,
error-rate ceilings, throughput floors, cost ceilings and per-task quality floors. Each check has a target, an
optional conditional band and a severity (hard: can FAIL; soft: at worst CONDITIONAL).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field, StringConstraints, create_model, model_validator

from slabench.core.config import StrictModel, load_model, load_yaml
from slabench.core.errors import UserError
from slabench.core.record import StageUnit
from slabench.evidence.run_status import MeasurementPolicy
from slabench.sla.cost import DeploymentError, ReplicaPrice, replica_price
from slabench.sla.estimates import Level, LevelEstimates
from slabench.sla.prices import DEFAULT_PRICES, PriceTable, load_prices

Severity = Literal["hard", "soft"]
_BAND = "how far past the target still counts as CONDITIONAL instead of FAIL (same unit as the target)"
_SEVERITY = "hard: a miss FAILS; soft: a miss is at worst CONDITIONAL"


class _Check(StrictModel):
    direction: ClassVar[str]  # "max": lower is better; "min": higher is better
    severity: Severity = Field("hard", description=_SEVERITY)

    @property
    def threshold(self) -> float:
        value: float = getattr(self, self.direction)  # the subclass's `max` or `min` field
        return value


class LatencyTarget(_Check):
    direction: ClassVar[str] = "max"
    max: float = Field(gt=0, description="seconds; the 95% CI upper bound must be at or below this to PASS")
    conditional_band: float = Field(0.0, ge=0, description=_BAND)


class RateCeiling(_Check):
    direction: ClassVar[str] = "max"
    max: float = Field(ge=0, le=1, description="a share of requests, 0..1 (0.01 = 1%)")
    conditional_band: float = Field(0.0, ge=0, le=1, description=_BAND)


class ThroughputFloor(_Check):
    direction: ClassVar[str] = "min"
    min: float = Field(gt=0, description="the 95% CI lower bound must be at or above this to PASS")
    conditional_band: float = Field(0.0, ge=0, description=_BAND)


class CostCeiling(_Check):
    direction: ClassVar[str] = "max"
    max: float = Field(gt=0, description="US dollars")
    conditional_band: float = Field(0.0, ge=0, description=_BAND)


class QualityFloor(_Check):
    direction: ClassVar[str] = "min"
    min: float = Field(ge=0, le=1, description="a share, 0..1")
    conditional_band: float = Field(0.0, ge=0, le=1, description=_BAND)


# contract field → (summary metric key, unit, target model, description)
_LATENCY_NAMES = {
    "ttft": "time to first token",
    "itl": "inter-token latency",
    "tpot": "time per output token",
    "e2e": "end-to-end request latency",
}
_Entry = tuple[str, str, type[_Check], str]
TARGETS: dict[str, _Entry] = {
    f"{m}_{s}_s": (f"{m}_{s}", "s", LatencyTarget, f"{what}, {s}, seconds")
    for m, what in _LATENCY_NAMES.items()
    for s in ("p50", "p90", "p95", "p99", "mean")
}
TARGETS |= {  # a reasoning model's second clock: to the first answer token, after the reasoning
    f"ttfat_{s}_s": (
        f"ttft_answer_{s}",
        "s",
        LatencyTarget,
        f"time to first answer token (after reasoning), {s}, seconds",
    )
    for s in ("p50", "p90", "p95", "p99", "mean")
}
_OTHER_TARGETS: dict[str, _Entry] = {  # annotated: `|=` on a bare literal confuses mypy's inference
    "error_rate": ("error_rate", "share", RateCeiling, "failed requests / requests (dropped ones excluded)"),
    "incomplete_rate": ("incomplete_rate", "share", RateCeiling, "streams cut or without usage / requests"),
    "throughput_rps": ("throughput_rps", "req/s", ThroughputFloor, "successful requests per second"),
    "goodput_rps": ("goodput_rps", "req/s", ThroughputFloor, "requests meeting every per-request SLO, per second"),
    "output_tokens_per_s": ("output_tokens_per_s", "tok/s", ThroughputFloor, "output tokens per second"),
    "total_tokens_per_s": ("total_tokens_per_s", "tok/s", ThroughputFloor, "prompt + output tokens per second"),
    "cost_per_million_output_tokens_usd": (
        "cost_per_million_output_tokens_usd",
        "USD",
        CostCeiling,
        "replicas' $/h ÷ output tokens per hour × 10⁶",
    ),
    "cost_per_million_total_tokens_usd": (
        "cost_per_million_total_tokens_usd",
        "USD",
        CostCeiling,
        "replicas' $/h ÷ total tokens per hour × 10⁶",
    ),
    "cost_per_1000_calls_usd": (
        "cost_per_1000_calls_usd",
        "USD",
        CostCeiling,
        "replicas' $/h ÷ successful requests per hour × 1000",
    ),
}
TARGETS |= _OTHER_TARGETS
# Checks a level misses by being under-used, not overloaded: throughput floors and per-unit costs improve with load.
UTILIZATION_CHECKS = frozenset(
    name for name, (_, _, model, _) in TARGETS.items() if model in (ThroughputFloor, CostCeiling)
)

# pydantic's field definitions: (annotation, FieldInfo); a union made at run time is no static type form.
_target_fields: dict[str, Any] = {
    name: (model | None, Field(None, description=desc)) for name, (_, _, model, desc) in TARGETS.items()
}
Targets = create_model(
    "Targets",
    __base__=StrictModel,
    __doc__="Ceilings (`max`) and floors (`min`) on the figures measured at the contract's load.",
    **_target_fields,
)

QUALITY_METRICS = {
    "item_accuracy": "rubric items scored like the ground truth / items (unparseable answers count 0)",
    "autofail_recall": "auto-fail items the model caught / auto-fail items in the truth",
    "pass_agreement": "calls whose pass/fail verdict agrees with the ground truth",
    "parse_rate": "answers that parse as the task's JSON schema",
}
_quality_fields: dict[str, Any] = {
    name: (QualityFloor | None, Field(None, description=desc)) for name, desc in QUALITY_METRICS.items()
}
QualityFloors = create_model(
    "QualityFloors",
    __base__=StrictModel,
    __doc__="Floors on answer quality for one workload task (e.g. `verbose`, `terse`), shares 0..1.",
    **_quality_fields,
)
TaskName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_-]+$")]


class Load(StrictModel):
    """The load at which the contract applies: exactly one of these."""

    concurrency: int | None = Field(None, ge=1, description="closed-loop concurrent users")
    request_rate_rps: float | None = Field(None, gt=0, description="open-loop arrival rate, requests per second")
    scenario: str | None = Field(None, min_length=1, description="a named scenario, e.g. `burst`")

    @model_validator(mode="after")
    def _one(self) -> Load:
        given = [k for k in ("concurrency", "request_rate_rps", "scenario") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(f"give exactly one of concurrency, request_rate_rps, scenario (got {given or 'none'})")
        return self

    @property
    def label(self) -> str:
        return self.as_level().label

    def as_level(self) -> Level:
        return Level(concurrency=self.concurrency, rate_rps=self.request_rate_rps, scenario=self.scenario)

    def matches(self, level: Level) -> bool:
        """Does a tested level stand for this load? Rates compare as records store them, to 0.001 req/s."""
        if self.concurrency is not None:
            return level.concurrency == self.concurrency
        if self.request_rate_rps is not None:
            stored = StageUnit.MILLI_RPS.stored
            return level.rate_rps is not None and stored(level.rate_rps) == stored(self.request_rate_rps)
        return level.scenario == self.scenario


class Mig(StrictModel):
    profile: str = Field(description="MIG profile, e.g. `2g.48gb` (see `mig_profiles` in the price table)")
    slices_per_replica: int = Field(1, ge=1)
    card_fraction: float | None = Field(
        None, gt=0, le=1, description="share of one card a slice costs (default: the price table's, 0.5 for 2g.48gb)"
    )


class Deployment(StrictModel):
    """What the measured endpoint runs on; priced from the price table."""

    instance_type: str = Field(description="EC2 instance type, e.g. `g6e.xlarge`")
    replicas: int = Field(1, ge=1, description="model replicas behind the endpoint during the run")
    gpus_per_replica: int | None = Field(None, ge=1, description="whole GPUs per replica (default 1)")
    mig: Mig | None = Field(None, description="MIG slices per replica instead of whole GPUs")
    hourly_cost_per_replica_usd: float | None = Field(
        None, gt=0, description="override the price arithmetic: what one replica costs per hour"
    )

    @model_validator(mode="after")
    def _gpus_or_mig(self) -> Deployment:
        if self.gpus_per_replica is not None and self.mig is not None:
            raise ValueError("give gpus_per_replica or mig, not both")
        return self


class Prices(StrictModel):
    # Defaults by keyword: type checkers only take `Field(default=...)` for one (`Prices()` is the default).
    file: str | None = Field(default=None, description="price table; relative paths are relative to this contract file")
    region: str | None = Field(default=None, description="AWS region (default: the table's default_region)")
    overrides_usd_per_hour: dict[str, Annotated[float, Field(gt=0)]] = Field(
        default={}, description="instance type → USD per instance-hour, replacing (or adding to) the table"
    )


class Capacity(StrictModel):
    target_load_rps: float = Field(gt=0, description="a load to size for, e.g. 103 (the burst's mean rate)")


class Contract(StrictModel):
    """An SLA contract for one model on one deployment at one load."""

    schema_version: Literal[1] = 1
    name: str = Field(min_length=1)
    description: str = ""
    load: Load
    deployment: Deployment
    prices: Prices = Prices()
    min_repeats: int = Field(
        1, ge=1, description="fewer repeats than this cap every check at CONDITIONAL (1: a single run may PASS)"
    )
    targets: Targets = Field(default_factory=Targets)  # type: ignore[valid-type]
    measurement: MeasurementPolicy = Field(
        default_factory=MeasurementPolicy,
        description="how much saturation of the load generator (or the embedded simulator) a run may show before "
        "its latencies are taken to measure the machine: such a run cannot PASS and exits 4",
    )
    quality: dict[TaskName, QualityFloors] = Field(  # type: ignore[valid-type]
        {}, description="task name → floors, e.g. `verbose: {item_accuracy: {min: 0.85}}`"
    )
    capacity: Capacity | None = None

    @model_validator(mode="after")
    def _something_to_check(self) -> Contract:
        if not self.checks():
            raise ValueError("the contract has no targets and no quality floors; nothing to grade")
        return self

    def checks(self) -> list[CheckSpec]:
        out = []
        for name, (metric, unit, _, _) in TARGETS.items():
            target = getattr(self.targets, name)
            if target is not None:
                out.append(CheckSpec(name, metric, unit, target, ("targets", name)))
        for task, floors in self.quality.items():
            for name in QUALITY_METRICS:
                target = getattr(floors, name)
                if target is not None:
                    out.append(
                        CheckSpec(
                            f"quality.{task}.{name}", f"quality.{task}.{name}", "share", target, ("quality", task, name)
                        )
                    )
        return out


@dataclass(frozen=True, slots=True)
class CheckSpec:
    name: str  # as written in the contract
    metric: str  # the summary's metric key
    unit: str
    target: Any  # one of the _Check models
    loc: tuple[str, ...]  # where in the contract


def json_schema() -> dict[str, Any]:
    schema = Contract.model_json_schema()
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        **schema,
    }


# -- loading -----------------------------------------------------------------------------------------------------
_Lines = dict[tuple[Any, ...], int]  # YAML path → line (slabench.core.yamlio)


def _where(path: Path, lines: _Lines, loc: tuple[str, ...]) -> str:
    """``file:line`` of the deepest part of `loc` present in the file (a default points at its parent)."""
    for end in range(len(loc), -1, -1):
        line = lines.get(tuple(loc[:end]))
        if line is not None:
            return f"{path}:{line}"
    return str(path)


def _error(path: Path, lines: _Lines, loc: tuple[str, ...], message: str) -> UserError:
    return UserError(f"{_where(path, lines, loc)}: {'.'.join(map(str, loc))}: {message}")


@dataclass(frozen=True)
class LoadedContract:
    contract: Contract
    path: Path
    lines: _Lines
    prices: PriceTable
    region: str
    replica: ReplicaPrice

    def where(self, loc: tuple[str, ...]) -> str:
        return _where(self.path, self.lines, loc)

    def error(self, loc: tuple[str, ...], message: str) -> UserError:
        return _error(self.path, self.lines, loc, message)

    def check_tasks_ran(self, levels: list[LevelEstimates]) -> None:
        """A quality floor for a task no level measured is a contract/run mismatch, not a "no data" FAIL — unless no
        request was answered at all (a run cut short): then no task could be graded, and the floors have no data."""
        ran = set().union(*(lv.quality_tasks() for lv in levels))
        if not ran and all(lv.get("e2e_p50") is None for lv in levels):
            return
        for task in self.contract.quality:
            if task not in ran:
                seen = ", ".join(sorted(ran)) or "none (the records carry no quality fields)"
                raise self.error(
                    ("quality", task),
                    f"quality floors for task {task!r}, but the run did not grade that task (tasks graded: {seen}) "
                    "— remove the floors or run the task",
                )

    def with_instance_type(self, instance_type: str) -> LoadedContract:
        """The same contract priced on another instance type (`slabench grade --instance-type`)."""
        dep = self.contract.deployment.model_copy(update={"instance_type": instance_type})
        contract = self.contract.model_copy(update={"deployment": dep})
        try:
            replica = _price(contract, self.prices, self.region)
        except DeploymentError as e:
            raise UserError(f"--instance-type {instance_type}: {e}") from None
        return LoadedContract(contract, self.path, self.lines, self.prices, self.region, replica)


def _price(contract: Contract, table: PriceTable, region: str) -> ReplicaPrice:
    d = contract.deployment
    return replica_price(
        d.instance_type,
        d.replicas,
        table,
        region,
        gpus_per_replica=d.gpus_per_replica,
        mig_profile=d.mig.profile if d.mig else None,
        mig_slices=d.mig.slices_per_replica if d.mig else 1,
        card_fraction=d.mig.card_fraction if d.mig else None,
        overrides=dict(contract.prices.overrides_usd_per_hour),
        replica_usd_per_hour=d.hourly_cost_per_replica_usd,
    )


def load_contract(path: str | Path) -> LoadedContract:
    """Load and check a contract: schema (unknown keys, ranges), then the deployment against the price table."""
    path = Path(path)
    contract = load_model(path, Contract)
    _, lines = load_yaml(path)
    prices_path = DEFAULT_PRICES
    if contract.prices.file:
        prices_path = Path(contract.prices.file)
        if not prices_path.is_absolute():
            prices_path = path.parent / prices_path
        if not prices_path.exists():
            raise _error(path, lines, ("prices", "file"), f"no such price table {prices_path}")
    table = load_prices(prices_path)
    region = contract.prices.region or table.default_region
    if region not in table.regions and contract.deployment.instance_type not in contract.prices.overrides_usd_per_hour:
        raise _error(
            path,
            lines,
            ("prices", "region"),
            f"no prices for region {region!r} in {prices_path} (regions: {', '.join(sorted(table.regions))}) "
            "— add them to your own prices.file or give prices.overrides_usd_per_hour",
        )
    try:
        replica = _price(contract, table, region)
    except DeploymentError as e:
        raise _error(path, lines, e.loc, str(e)) from None
    return LoadedContract(contract, path, lines, table, region, replica)
