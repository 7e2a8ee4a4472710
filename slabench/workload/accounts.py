"""The workload's tunable assumptions (`assumptions.yaml`) as strict, validated settings.

Everything docs/workload.md marks "(assumption)" lives in that one YAML file; this module only gives it types and checks
(unknown keys, unknown rubric items or intents, shares that do not sum to 1 are errors naming the file and line).
"""

from __future__ import annotations

import functools
import math
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator

from slabench.core.config import StrictModel, load_model
from slabench.core.errors import UserError
from slabench.workload.rubric import RUBRIC_BY_ID, RubricItem, rubric_for

DEFAULT_SETTINGS = Path(__file__).with_name("assumptions.yaml")

Vertical = Literal["electronics", "apparel", "grocery", "furniture", "beauty", "card"]
INTENTS = (
    "order_status", "return", "refund", "damaged_item", "warranty", "exchange", "product_question", "missing_item",
    "delivery_scheduling", "subscription_cancel", "payment_update", "card_dispute", "balance_inquiry", "credit_limit",
    "lost_card",
)  # fmt: skip
# Policy facts an intent's dialogue quotes; an account using the intent must define them.
_INTENT_NEEDS = {
    "subscription_cancel": ("renewal_day",),
    "card_dispute": ("dispute_days", "provisional_credit_days", "investigation_days"),
    "credit_limit": ("apr", "late_fee"),
    "balance_inquiry": ("apr", "late_fee"),
}


class Output(StrictModel):
    base_tokens: int = Field(ge=0)
    per_item_median: float = Field(gt=0)
    per_item_log_sd: float = Field(ge=0)
    max_tokens: int = Field(gt=0)


class Queue(StrictModel):
    total: int = Field(gt=0)
    duration_s: float = Field(gt=0)
    batch_median: float = Field(gt=0)
    batch_log_sd: float = Field(ge=0)
    batch_clip: tuple[int, int]
    baseline_share: float = Field(ge=0, le=1)
    within_batch_rate: float = Field(gt=0)
    gamma_shape: float = Field(gt=0)

    @field_validator("batch_clip")
    @classmethod
    def _clip(cls, v: tuple[int, int]) -> tuple[int, int]:
        if not 1 <= v[0] <= v[1]:
            raise ValueError("batch_clip must be [low, high] with 1 ≤ low ≤ high")
        return v


class Context(StrictModel):
    ivr_disclosure: float = Field(ge=0, le=1)
    hold: float = Field(ge=0, le=1)
    transfer: float = Field(ge=0, le=1)
    offer_optout: float = Field(ge=0, le=1)


def _check_item_ids(ids: dict[int, float]) -> dict[int, float]:
    for k, p in ids.items():
        if k not in RUBRIC_BY_ID:
            raise ValueError(f"unknown rubric item {k} (the master rubric has items 1–{len(RUBRIC_BY_ID)})")
        if not 0 <= p <= 1:
            raise ValueError(f"item {k}: a probability must be in [0, 1] (got {p})")
    return ids


class Behaviour(StrictModel):
    skill_alpha: float = Field(gt=0)
    skill_beta: float = Field(gt=0)
    skill_effect: float = Field(ge=0)
    scale_noise_sd: float = Field(ge=0)
    yes_base: dict[int, float]
    autofail_rate: dict[int, float]
    context: Context

    _ids = field_validator("yes_base", "autofail_rate")(_check_item_ids)

    @model_validator(mode="after")
    def _covers_rubric(self) -> Behaviour:
        for item in RUBRIC_BY_ID.values():
            if item.scale == "1-5":
                continue
            n = (item.id in self.yes_base) + (item.id in self.autofail_rate)
            if n != 1:
                raise ValueError(
                    f"Y/N item {item.id} ({item.name}) needs exactly one of yes_base or autofail_rate (has {n})"
                )
        if 10 not in self.autofail_rate:
            raise ValueError("autofail_rate needs item 10 (the rate of courtesy = 1)")
        return self

    @property
    def skill_mean(self) -> float:
        return self.skill_alpha / (self.skill_alpha + self.skill_beta)


class Bump(StrictModel):
    center_s: float
    sd_s: float = Field(gt=0)
    weight: float = Field(gt=0)


class Policy(StrictModel):
    """Facts the account's policy reference states and its agents quote (correctly or not)."""

    return_days: int = Field(gt=0)
    return_condition: str
    refund_days: str
    restocking_fee: str
    warranty_months: int = Field(ge=0)
    warranty_scope: str
    report_hours: int = Field(gt=0)
    delivery_days: str
    renewal_day: str | None = None
    dispute_days: int | None = None
    provisional_credit_days: int | None = None
    investigation_days: int | None = None
    apr: str | None = None
    late_fee: str | None = None


class Account(StrictModel):
    key: str = ""  # filled from the mapping key
    name: str
    vertical: Vertical
    share: float = Field(gt=0, le=1)
    golden: int = Field(ge=0)
    minutes_median: float = Field(gt=0)
    minutes_log_sd: float = Field(ge=0)
    tokens_per_minute: float = Field(gt=0)
    rubric: tuple[int, ...] = Field(min_length=1)
    recording_disclosure_required: bool
    intents: dict[str, float] = Field(min_length=1)
    envelope: tuple[Bump, ...] = Field(min_length=1)
    policy: Policy

    @field_validator("rubric")
    @classmethod
    def _rubric(cls, v: tuple[int, ...]) -> tuple[int, ...]:
        for i in v:
            if i not in RUBRIC_BY_ID:
                raise ValueError(f"unknown rubric item {i} (the master rubric has items 1–{len(RUBRIC_BY_ID)})")
        if len(set(v)) != len(v):
            raise ValueError("a rubric item is listed twice")
        return v

    @field_validator("intents")
    @classmethod
    def _intents(cls, v: dict[str, float]) -> dict[str, float]:
        for k, w in v.items():
            if k not in INTENTS:
                raise ValueError(f"unknown intent {k!r} (known: {', '.join(INTENTS)})")
            if w <= 0:
                raise ValueError(f"intent {k}: weight must be > 0")
        return v

    @model_validator(mode="after")
    def _policy_covers_intents(self) -> Account:
        for intent in self.intents:
            for fact in _INTENT_NEEDS.get(intent, ()):
                if getattr(self.policy, fact) is None:
                    raise ValueError(f"intent {intent} needs policy.{fact}")
        return self

    @functools.cached_property
    def items(self) -> tuple[RubricItem, ...]:
        return rubric_for(self.rubric)


class WorkloadSettings(StrictModel):
    schema_version: Literal[1]
    seed: int = Field(ge=0)
    pass_threshold: float = Field(ge=0, le=100)
    call_minutes_clip: tuple[float, float]
    transcript_jitter_log_sd: float = Field(ge=0)
    output: Output
    queue: Queue
    behaviour: Behaviour
    accounts: dict[str, Account] = Field(min_length=1)

    @field_validator("accounts", mode="before")
    @classmethod
    def _keys(cls, v: object) -> object:
        if isinstance(v, dict):
            return {k: ({**a, "key": k} if isinstance(a, dict) else a) for k, a in v.items()}
        return v

    @model_validator(mode="after")
    def _shares(self) -> WorkloadSettings:
        total = sum(a.share for a in self.accounts.values())
        if not math.isclose(total, 1.0, abs_tol=1e-9):
            raise ValueError(f"account shares must sum to 1 (they sum to {total:g})")
        return self

    def account(self, key: str, where: str = "") -> Account:
        """The account `key`, or a UserError naming where the unknown key came from."""
        try:
            return self.accounts[key]
        except KeyError:
            known = ", ".join(self.accounts)
            raise UserError(f"{where + ': ' if where else ''}unknown account {key!r} (known: {known})") from None


@functools.lru_cache(maxsize=8)
def _load(path: str) -> WorkloadSettings:
    return load_model(path, WorkloadSettings)


def load_settings(path: str | Path | None = None) -> WorkloadSettings:
    """The settings at `path` (default: the packaged assumptions.yaml). Cached: settings are immutable."""
    return _load(str(Path(path).resolve()) if path else str(DEFAULT_SETTINGS))
