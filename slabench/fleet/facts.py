"""The facts table (`data/gpu_facts.yaml`): GPUs, EC2 instance families, driver branches and nvcc targets, loaded into
strict models, plus the pure look-ups the rules need."""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from importlib import resources
from itertools import pairwise
from pathlib import Path
from typing import Annotated

from pydantic import AfterValidator, Field, model_validator

from slabench.core.config import StrictModel, load_model
from slabench.fleet.versions import ComputeCapability, CudaVersion, DriverVersion


def _parsed_by(parse: Callable[[str], object]) -> AfterValidator:
    """A text field kept as written once `parse` accepts it (it raises ValueError with a user-facing message)."""

    def check(value: str) -> str:
        parse(value)
        return value

    return AfterValidator(check)


DriverText = Annotated[str, _parsed_by(DriverVersion.parse)]
CudaText = Annotated[str, _parsed_by(CudaVersion.parse)]
CapabilityText = Annotated[str, _parsed_by(ComputeCapability.parse)]


class Source(StrictModel):
    title: str
    url: str
    retrieved: str
    note: str | None = None


class MigFacts(StrictModel):
    min_driver: DriverText
    max_instances: int = Field(gt=0)
    profiles: list[str] = Field(min_length=1)
    source: str


class GpuFacts(StrictModel):
    name: str
    compute_capability: CapabilityText
    memory_gib: int = Field(gt=0)
    # The simulator's roofline inputs (approximate public figures): what the node reports as its GPU memory, and the
    # card's peak memory bandwidth and dense BF16 tensor throughput. A GPU only the fleet check knows may omit them.
    memory_mib: int | None = Field(None, gt=0)
    memory_bandwidth_gb_s: float | None = Field(None, gt=0)
    dense_bf16_tflops: float | None = Field(None, gt=0)
    figures_source: str | None = None
    gfd_products: tuple[str, ...] = ()
    source: str
    mig: MigFacts | None = None

    @property
    def cc(self) -> ComputeCapability:
        return ComputeCapability.parse(self.compute_capability)


class InstanceFamily(StrictModel):
    gpu: str
    sizes: dict[str, int]
    source: str


class DriverBranch(StrictModel):
    branch: int
    min_driver: DriverText
    max_cuda: CudaText
    source: str


class MinorCompat(StrictModel):
    cuda_major: int
    min_branch: int
    source: str


class NvccArch(StrictModel):
    min_cuda: CudaText
    max_cuda: CudaText | None = None


class NvccTargets(StrictModel):
    arch_specific_min_cuda: str
    family_specific_min_cuda: str
    source: str
    archs: dict[str, NvccArch]


class FleetFacts(StrictModel):
    schema_version: int = Field(ge=1, le=1)
    updated: str
    sources: dict[str, Source]
    driver_branches: list[DriverBranch] = Field(min_length=1)
    minor_version_compat: list[MinorCompat]
    nvcc_targets: NvccTargets
    gpus: dict[str, GpuFacts]
    instance_families: dict[str, InstanceFamily]

    @model_validator(mode="after")
    def _consistent(self) -> FleetFacts:
        cited = [b.source for b in self.driver_branches] + [c.source for c in self.minor_version_compat]
        cited += [self.nvcc_targets.source] + [f.source for f in self.instance_families.values()]
        for gpu in self.gpus.values():
            cited += [gpu.source] + ([gpu.mig.source] if gpu.mig else [])
            cited += [gpu.figures_source] if gpu.figures_source else []
        missing = sorted(set(cited) - set(self.sources))
        if missing:
            raise ValueError(f"cites unknown sources {missing}; add them under `sources`")
        unknown_gpus = sorted({f.gpu for f in self.instance_families.values()} - set(self.gpus))
        if unknown_gpus:
            raise ValueError(f"instance_families use GPUs not under `gpus`: {unknown_gpus}")
        drivers = [DriverVersion.parse(b.min_driver) for b in self.driver_branches]
        if any(not b.at_least(a) or a == b for a, b in pairwise(drivers)):
            raise ValueError("driver_branches must be sorted by min_driver, oldest first")
        return self


def default_facts_path() -> Path:
    return Path(str(resources.files("slabench.fleet.data").joinpath("gpu_facts.yaml")))


def load_facts(path: str | Path | None = None) -> FleetFacts:
    """Load the facts table (the packaged one unless `path` is given); mistakes become one-line UserErrors."""
    return load_model(path or default_facts_path(), FleetFacts)


@cache
def packaged_facts() -> FleetFacts:
    """The packaged table, loaded once: what the simulator's profiles and the tests read."""
    return load_facts()


def family_gpu(facts: FleetFacts, family: str) -> str | None:
    """The gpu key of an EC2 instance family (None if the table does not know the family)."""
    fam = facts.instance_families.get(family)
    return fam.gpu if fam else None


# --- look-ups (pure) ---------------------------------------------------------------------------------------------


def split_instance_type(instance_type: str) -> tuple[str, str]:
    family, _, size = instance_type.strip().partition(".")
    return family, size


def instance_gpu(facts: FleetFacts, instance_type: str) -> tuple[str, int] | None:
    """(gpu key, GPUs per instance) for a known EC2 instance type, else None."""
    family, size = split_instance_type(instance_type)
    fam = facts.instance_families.get(family)
    if fam is None or size not in fam.sizes:
        return None
    return fam.gpu, fam.sizes[size]


def unknown_instance_hint(facts: FleetFacts, instance_type: str) -> str:
    """Why `instance_type` is unknown, naming what would be accepted."""
    family, size = split_instance_type(instance_type)
    fam = facts.instance_families.get(family)
    if fam is None:
        return (
            f"'{family}' is not a GPU instance family in the facts table (known: {', '.join(facts.instance_families)})"
        )
    return f"{family} has no size '{size}' (sizes: {', '.join(fam.sizes)})"


def gpu_for_product(facts: FleetFacts, product: str) -> str | None:
    """The gpu key whose GPU-feature-discovery product name matches `product` (MIG suffix ignored)."""
    base = product.split("-MIG-")[0]
    for key, gpu in facts.gpus.items():
        if base in gpu.gfd_products:
            return key
    return None


def driver_max_cuda(facts: FleetFacts, driver: DriverVersion) -> CudaVersion | None:
    """Highest CUDA the driver supports natively: the newest row whose minimum driver it meets (None if none)."""
    best = None
    for row in facts.driver_branches:
        if driver.at_least(DriverVersion.parse(row.min_driver)):
            best = CudaVersion.parse(row.max_cuda)
    return best


def min_driver_for_cuda(facts: FleetFacts, cuda: CudaVersion) -> DriverBranch | None:
    """The oldest driver row that supports `cuda` natively (None if the table has none)."""
    for row in facts.driver_branches:
        if CudaVersion.parse(row.max_cuda) >= cuda:
            return row
    return None


def minor_compat_floor(facts: FleetFacts, cuda_major: int) -> MinorCompat | None:
    return next((c for c in facts.minor_version_compat if c.cuda_major == cuda_major), None)


def newest_known_branch(facts: FleetFacts) -> DriverBranch:
    return facts.driver_branches[-1]
