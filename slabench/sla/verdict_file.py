"""The typed schema of `verdict.json`, built from the grader's own types (`CheckResult`, `ReplicaPrice`,
`CapacityReport`, the summary's `Estimate`), so there is one definition of each part. Every verdict is validated
against it as it is written (`verdict_document`): the file, this model and the published JSON Schema
(docs/verdict.schema.json) cannot drift apart. `load_verdict` reads one back. Versions follow `slabench.core.schema`
(`VERDICT`): another kind or major version is refused with one line; a newer minor only adds fields."""

from __future__ import annotations

import dataclasses
import typing
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from slabench.analysis.summary import Estimate
from slabench.core.errors import UserError
from slabench.core.schema import VERDICT
from slabench.sla.capacity import CapacityReport
from slabench.sla.cost import ReplicaPrice
from slabench.sla.grade import CheckResult, Status, Verdict


class _File(BaseModel):
    model_config = ConfigDict(frozen=True)  # a newer minor's added fields are ignored when read


def _fields(cls: type) -> dict[str, Any]:
    """A dataclass's fields as pydantic field definitions (annotation, default), its annotations resolved."""
    hints = typing.get_type_hints(cls)
    out: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            out[f.name] = (hints[f.name], f.default)
        elif f.default_factory is not dataclasses.MISSING:
            out[f.name] = (hints[f.name], Field(default_factory=f.default_factory))
        else:
            out[f.name] = (hints[f.name], ...)
    return out


class LevelVerdictFile(_File):
    level: str  # "8 users", "2.5 req/s", a scenario
    verdict: Status


# What the file holds beside each type: the deployment's total and arithmetic, a cost line's estimate flattened
# beside its metric, the capacity answer's tested levels as objects.
DeploymentFile = create_model(
    "DeploymentFile", __base__=_File, **_fields(ReplicaPrice), total_usd_per_hour=(float, ...), arithmetic=(str, ...)
)
CostFile = create_model("CostFile", __base__=_File, metric=(str, ...), **_fields(Estimate), arithmetic=(str, ...))
CapacityFile = create_model(
    "CapacityFile", __base__=_File, **{**_fields(CapacityReport), "tested": (list[LevelVerdictFile], ...)}
)


class VerdictFile(_File):
    """verdict.json: the verdict, the evidence's completeness, every check on its interval, cost and capacity."""

    kind: Literal["slabench.verdict"] = "slabench.verdict"  # absent in files of minor 0
    schema_version: int
    schema_minor: int = 0
    verdict: Status
    measurement: Literal["complete", "incomplete"] = "complete"  # incomplete: exit 4 whatever the verdict (minor 2)
    incomplete: list[str] = []
    summary: str
    contract: str
    sla_file: str
    source: str
    load: str  # the contract's load
    graded_level: str | None  # the tested level that stood for it (None: not tested)
    measured_load: float | None = None  # the load it held, in its unit: users active over half its window, or req/s
    single_run: bool
    checks: list[CheckResult]
    deployment: DeploymentFile  # type: ignore[valid-type]  # built at import time by create_model
    cost: list[CostFile]  # type: ignore[valid-type]
    capacity: CapacityFile  # type: ignore[valid-type]
    levels: list[LevelVerdictFile]  # every tested level's own verdict against the same checks
    notes: list[str]
    records_sha256: dict[str, str] = {}  # records file → sha256: the evidence the verdict was computed from (minor 4)


def verdict_document(verdict: Verdict) -> dict[str, Any]:
    """verdict.json's content, checked against `VerdictFile` (a writer that drifted from the schema fails here)."""
    doc = verdict.to_dict()
    typed = VerdictFile.model_validate(doc).model_dump(mode="json")
    if typed != doc:  # a bug of ours: name the first part that differs
        key = next(k for k in doc if typed.get(k) != doc[k])
        raise AssertionError(f"verdict.json drifted from VerdictFile at {key!r}: {doc[key]!r} → {typed.get(key)!r}")
    return doc


def load_verdict(path: str | Path) -> VerdictFile:
    data = VERDICT.read_json(path)
    where = str(path)
    VERDICT.check(data, where)
    try:
        return VerdictFile.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        raise UserError(f"{where}: {'.'.join(map(str, err['loc']))}: {err['msg']} — was the file edited?") from None
