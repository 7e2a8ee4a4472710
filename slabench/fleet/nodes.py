"""The fleet file (`--nodes nodes.yaml`): GPU nodes as instance type + driver (+ MIG profile), and optionally the
serving image. Schema mistakes come from `load_model` with file:line; facts mistakes (an unknown instance type) are
reported the same way."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, field_validator, model_validator

from slabench.core.config import StrictModel, load_model, load_yaml
from slabench.core.errors import UserError
from slabench.fleet.facts import FleetFacts, instance_gpu, unknown_instance_hint
from slabench.fleet.rules import NodeFacts
from slabench.fleet.versions import CudaVersion, DriverVersion, parse_arch_list


def _text(value: object, what: str, example: str) -> str:
    # YAML reads 580.95 or 12.9 as a float and would silently drop trailing zeros: insist on quotes.
    if not isinstance(value, str):
        raise ValueError(f'write the {what} as a quoted string, e.g. "{example}"')
    return value


class ImageBlock(StrictModel):
    name: str = "serving image"
    cuda: str
    arch_list: str

    @field_validator("cuda", mode="before")
    @classmethod
    def _valid_cuda(cls, v: object) -> str:
        return str(CudaVersion.parse(_text(v, "CUDA version", "12.9")))

    @field_validator("arch_list", mode="before")
    @classmethod
    def _valid_arch_list(cls, v: object) -> str:
        text = _text(v, "arch list", "8.0 8.6 8.9 9.0 10.0 12.0")
        parse_arch_list(text)
        return text


class NodeEntry(StrictModel):
    name: str = Field(min_length=1)
    instance_type: str = Field(min_length=1)
    driver: str
    mig_profile: str | None = None
    gpu: str | None = None  # a facts-table GPU key, for nodes whose instance type is not in the table

    @field_validator("driver", mode="before")
    @classmethod
    def _valid_driver(cls, v: object) -> str:
        return DriverVersion.parse(_text(v, "driver version", "580.95.05")).text


class NodesFile(StrictModel):
    schema_version: int = Field(default=1, ge=1, le=1)
    image: ImageBlock | None = None
    nodes: list[NodeEntry] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique_names(self) -> NodesFile:
        names = [n.name for n in self.nodes]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"node names must be unique; repeated: {', '.join(dupes)}")
        return self


def _where(path: Path, index: int, key: str) -> str:
    """file:line of nodes[index].key, read again only when there is an error to report."""
    _, lines = load_yaml(path)
    line = lines.get(("nodes", index, key)) or lines.get(("nodes", index))
    return f"{path}:{line}" if line else str(path)


def resolve_node(entry: NodeEntry, facts: FleetFacts, path: Path, index: int) -> NodeFacts:
    known = instance_gpu(facts, entry.instance_type)
    if entry.gpu is not None:
        if entry.gpu not in facts.gpus:
            raise UserError(
                f"{_where(path, index, 'gpu')}: nodes.{index}.gpu: unknown GPU '{entry.gpu}' "
                f"(known: {', '.join(facts.gpus)}) — use one of these keys or add the GPU to the facts file"
            )
        if known is not None and known[0] != entry.gpu:
            raise UserError(
                f"{_where(path, index, 'gpu')}: nodes.{index}.gpu: {entry.instance_type} has GPU '{known[0]}', "
                f"not '{entry.gpu}' — drop `gpu:` or fix the instance type"
            )
        gpu_key = entry.gpu
    elif known is not None:
        gpu_key = known[0]
    else:
        raise UserError(
            f"{_where(path, index, 'instance_type')}: nodes.{index}.instance_type: unknown instance type "
            f"'{entry.instance_type}': {unknown_instance_hint(facts, entry.instance_type)} — fix the name, "
            f"set `gpu:` to a GPU of the facts table, or add the type to a facts file (--facts)"
        )
    gpu = facts.gpus[gpu_key]
    return NodeFacts(
        name=entry.name,
        instance_type=entry.instance_type,
        gpu=gpu_key,
        gpu_name=gpu.name,
        cc=gpu.cc,
        driver=DriverVersion.parse(entry.driver),
        mig_profiles=(entry.mig_profile,) if entry.mig_profile else (),
    )


def load_nodes(path: str | Path, facts: FleetFacts) -> tuple[ImageBlock | None, list[NodeFacts]]:
    """Load a fleet file; returns its optional image block and the resolved nodes."""
    p = Path(path)
    spec = load_model(p, NodesFile)
    return spec.image, [resolve_node(entry, facts, p, i) for i, entry in enumerate(spec.nodes)]
