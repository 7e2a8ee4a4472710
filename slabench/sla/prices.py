"""The instance price table (`instance_prices.yaml` beside this module): strict model and loader. Prices are data."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator

from slabench.core.config import StrictModel, load_model

DEFAULT_PRICES = Path(__file__).with_name("instance_prices.yaml")


class InstanceSpec(StrictModel):
    gpu: str | None = Field(None, description="GPU model, as AWS names it")
    gpus: int = Field(ge=0, description="GPUs (cards) in one instance; 0 for CPU instances")
    gpu_memory_gb: float | None = Field(None, gt=0, description="memory per GPU")


class MigProfile(StrictModel):
    gpu: str = Field(description="the GPU this profile exists on (must match the instance's `gpu`)")
    card_fraction: float = Field(gt=0, le=1, description="share of one card a slice is priced at")


class PriceTable(StrictModel):
    schema_version: Literal[1] = 1
    source: str = Field(min_length=1)
    source_date: str = Field(min_length=1, description="when the source was generated (YYYY-MM-DD)")
    currency: Literal["USD"] = "USD"
    pricing: str = Field(min_length=1, description="e.g. 'on-demand, Linux, shared tenancy'")
    default_region: str
    instances: dict[str, InstanceSpec]
    regions: dict[str, dict[str, float]] = Field(description="region → instance type → USD per instance-hour")
    mig_profiles: dict[str, MigProfile] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _consistent(self) -> PriceTable:
        if self.default_region not in self.regions:
            raise ValueError(f"default_region {self.default_region!r} has no prices under `regions`")
        for region, prices in self.regions.items():
            for itype, usd in prices.items():
                if itype not in self.instances:
                    raise ValueError(f"regions.{region}.{itype}: priced but not described under `instances`")
                if usd <= 0:
                    raise ValueError(f"regions.{region}.{itype}: price must be > 0 (got {usd})")
        return self

    def citation(self) -> str:
        return f"{self.pricing}, {self.source} ({self.source_date})"


def load_prices(path: str | Path | None = None) -> PriceTable:
    return load_model(path or DEFAULT_PRICES, PriceTable)
