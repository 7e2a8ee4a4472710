"""YAML config → strict pydantic models, with errors that name the file, line and field.

Every YAML file the project reads goes through `load_model` (parsed by `slabench.core.yamlio`, which also refuses
duplicate keys), so one mistake reads the same everywhere:
``sla.yaml:12: targets.ttft_p95_s: Input should be greater than 0 (got -1)``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from slabench.core import yamlio
from slabench.core.errors import UserError

M = TypeVar("M", bound=BaseModel)


class StrictModel(BaseModel):
    """Base for every config model: unknown keys are errors, values are immutable after load."""

    model_config = ConfigDict(extra="forbid", frozen=True)


def _nearest_line(lines: dict[tuple[Any, ...], int], loc: tuple[Any, ...]) -> int | None:
    """The line of the deepest existing ancestor of `loc` (a missing key points at its parent)."""
    for end in range(len(loc), -1, -1):
        key = tuple(str(p) if not isinstance(p, int) else p for p in loc[:end])
        if key in lines:
            return lines[key]
    return None


def format_validation_error(err: ValidationError, source: str, lines: dict[tuple[Any, ...], int] | None = None) -> str:
    out = []
    for e in err.errors():
        loc = tuple(p for p in e["loc"] if p not in ("function-after", "function-before"))
        field = ".".join(str(p) for p in loc) or "(top level)"
        line = _nearest_line(lines, loc) if lines else None
        where = f"{source}:{line}" if line else source
        msg = e["msg"]
        if e["type"] == "extra_forbidden":
            msg = "unknown key (check the spelling; see the schema for allowed keys)"
        elif e["type"] == "missing":
            msg = "required key is missing"
        elif "input" in e and not isinstance(e["input"], dict | list):
            msg = f"{msg} (got {e['input']!r})"
        out.append(f"{where}: {field}: {msg}")
    return "\n".join(out)


def load_yaml(path: str | Path) -> tuple[Any, dict[tuple[Any, ...], int]]:
    """Parse a YAML file; return its data and a path→line index. Every problem (a duplicate key, bad bytes, a syntax
    error) is a one-line UserError naming the file and line."""
    return yamlio.load_file(path)


def load_model(path: str | Path, model: type[M]) -> M:
    """Load a YAML file into `model`; any problem becomes a UserError naming file, line and field."""
    data, lines = load_yaml(path)
    if data is None:
        raise UserError(f"{path}: the file is empty; expected a mapping of {model.__name__} fields")
    try:
        return model.model_validate(data)
    except ValidationError as e:
        raise UserError(format_validation_error(e, str(path), lines)) from None


def validate_data(data: Any, model: type[M], source: str) -> M:
    """Validate already-parsed data (e.g. a JSON row); errors name `source` (e.g. ``file.jsonl:17``)."""
    try:
        return model.model_validate(data)
    except ValidationError as e:
        raise UserError(format_validation_error(e, source)) from None
