"""The compatibility rules: pure functions from (image, node, facts) to findings, each with the reason in words.

A node passes when every finding is OK; WARN means it runs with a caveat the operator should know about (binary
compatibility instead of an exact build, CUDA minor-version compatibility, a fact that cannot be verified); FAIL means
the image does not run there (or not as configured).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

from slabench.fleet.facts import (
    FleetFacts,
    GpuFacts,
    driver_max_cuda,
    min_driver_for_cuda,
    minor_compat_floor,
    newest_known_branch,
)
from slabench.fleet.image import ImageSpec
from slabench.fleet.versions import ComputeCapability, CudaVersion, DriverVersion


class Severity(IntEnum):
    OK = 0
    WARN = 1
    FAIL = 2

    @property
    def label(self) -> str:
        return self.name.lower()


@dataclass(frozen=True)
class Finding:
    rule: str  # arch | cuda_driver | mig | facts
    severity: Severity
    message: str


@dataclass(frozen=True)
class NodeFacts:
    """What is known about one GPU node; `gpu` is the facts-table key when the GPU is known."""

    name: str
    instance_type: str | None
    gpu: str | None
    gpu_name: str
    cc: ComputeCapability
    driver: DriverVersion | None
    mig_profiles: tuple[str, ...] = ()
    notes: tuple[Finding, ...] = ()  # findings made while gathering the facts (e.g. a label disagreeing with the table)


@dataclass(frozen=True)
class NodeResult:
    node: NodeFacts
    driver_max_cuda: CudaVersion | None
    findings: tuple[Finding, ...]

    @property
    def severity(self) -> Severity:
        return max((f.severity for f in self.findings), default=Severity.OK)


@dataclass(frozen=True)
class FleetResult:
    image: ImageSpec
    results: tuple[NodeResult, ...]
    skipped: tuple[str, ...] = ()  # nodes left out (not GPU nodes), with why

    @property
    def severity(self) -> Severity:
        return max((r.severity for r in self.results), default=Severity.OK)

    def count(self, severity: Severity) -> int:
        return sum(1 for r in self.results if r.severity == severity)


def check_arch(image: ImageSpec, node: NodeFacts) -> Finding:
    """Is there a kernel build in the image this GPU can run?"""
    cc = node.cc
    listed = image.arch_list
    if any(t.cc == cc for t in image.archs):
        return Finding("arch", Severity.OK, f"{cc.sm} kernels are in the image (arch list {listed})")
    # SASS for a lower minor of the same major runs (binary compatibility), except arch-specific ('a') builds.
    lower = sorted(
        (t for t in image.archs if t.cc.major == cc.major and t.cc < cc and t.variant != "a"), key=lambda t: t.cc
    )
    if lower:
        best = lower[-1].cc
        return Finding(
            "arch",
            Severity.WARN,
            f"compute capability {cc} ({node.gpu_name}) is not in the arch list {listed}: it runs the {best.sm} "
            f"kernels (binary compatible within {cc.major}.x), but vLLM builds arch-specific kernels (FP8 and CUTLASS "
            f"paths) only for listed targets — add {cc} to TORCH_CUDA_ARCH_LIST",
        )
    ptx_note = ""
    if any(t.ptx and t.cc < cc for t in image.archs):
        ptx_note = " (+PTX does not help: vLLM drops it from its own kernels' targets)"
    return Finding(
        "arch",
        Severity.FAIL,
        f"compute capability {cc} ({node.gpu_name}) is not in the image arch list {listed} and no listed target "
        f"runs on it{ptx_note} — rebuild with {cc} in TORCH_CUDA_ARCH_LIST",
    )


def check_cuda_driver(image: ImageSpec, node: NodeFacts, facts: FleetFacts) -> tuple[Finding, CudaVersion | None]:
    """Does the node's driver support the image's CUDA release? Returns the finding and the driver's highest CUDA."""
    if node.driver is None:
        return Finding(
            "cuda_driver",
            Severity.WARN,
            "driver version unknown (no nvidia.com/cuda.driver-version.* label: is GPU feature discovery running?)",
        ), None
    driver = node.driver
    max_cuda = driver_max_cuda(facts, driver)
    needed = min_driver_for_cuda(facts, image.cuda)
    upgrade = (
        f"upgrade the driver to ≥ {needed.min_driver} (R{needed.branch})"
        if needed
        else f"upgrade to a driver that supports CUDA {image.cuda} (newer than the facts table)"
    )
    if max_cuda is None:
        return Finding(
            "cuda_driver",
            Severity.FAIL,
            f"driver {driver} is older than every branch in the facts table; image CUDA {image.cuda} needs a newer "
            f"driver — {upgrade}",
        ), None
    beyond = driver.branch > newest_known_branch(facts).branch
    up_to = f"CUDA ≥ {max_cuda}, newer than the facts table" if beyond else f"CUDA ≤ {max_cuda}"
    if image.cuda <= max_cuda:
        return Finding(
            "cuda_driver", Severity.OK, f"driver {driver} supports {up_to}; image CUDA is {image.cuda}"
        ), max_cuda
    floor = minor_compat_floor(facts, image.cuda.major)
    if floor is not None and driver.branch >= floor.min_branch:
        return Finding(
            "cuda_driver",
            Severity.WARN,
            f"image CUDA {image.cuda} is newer than driver {driver} supports ({up_to}): it runs only through CUDA "
            f"minor-version compatibility (no JIT of newer PTX; features that need the newer driver fail) — "
            f"{upgrade} for full support",
        ), max_cuda
    floor_text = f"; CUDA {image.cuda.major}.x needs R{floor.min_branch}+" if floor else ""
    return Finding(
        "cuda_driver",
        Severity.FAIL,
        f"image CUDA {image.cuda} is newer than driver {driver} supports ({up_to}{floor_text}) — {upgrade} "
        f"or use an image built for CUDA ≤ {max_cuda}",
    ), max_cuda


def check_mig(node: NodeFacts, gpu: GpuFacts | None) -> Finding | None:
    """Is each MIG profile the node exposes a known profile of its GPU, on a driver that supports MIG there?"""
    if not node.mig_profiles:
        return None
    profiles = ", ".join(node.mig_profiles)
    if gpu is None:
        return Finding("mig", Severity.WARN, f"cannot verify MIG profile {profiles}: the GPU is not in the facts table")
    if gpu.mig is None:
        return Finding("mig", Severity.FAIL, f"MIG profile {profiles} set, but {gpu.name} does not support MIG")
    unknown = [p for p in node.mig_profiles if p not in gpu.mig.profiles]
    if unknown:
        return Finding(
            "mig",
            Severity.FAIL,
            f"MIG profile {', '.join(unknown)} is unknown for {gpu.name} (known: {', '.join(gpu.mig.profiles)})",
        )
    min_driver = DriverVersion.parse(gpu.mig.min_driver)
    if node.driver is not None and not node.driver.at_least(min_driver):
        return Finding(
            "mig",
            Severity.FAIL,
            f"MIG on {gpu.name} needs driver ≥ {min_driver} (R{min_driver.branch}); the node has {node.driver}",
        )
    return Finding("mig", Severity.OK, f"MIG profile {profiles} is a known {gpu.name} profile")


def check_node(image: ImageSpec, node: NodeFacts, facts: FleetFacts) -> NodeResult:
    cuda_finding, max_cuda = check_cuda_driver(image, node, facts)
    findings = [*node.notes, check_arch(image, node), cuda_finding]
    mig = check_mig(node, facts.gpus.get(node.gpu) if node.gpu else None)
    if mig is not None:
        findings.append(mig)
    return NodeResult(node, max_cuda, tuple(findings))


def check_fleet(
    image: ImageSpec, nodes: list[NodeFacts], facts: FleetFacts, skipped: tuple[str, ...] = ()
) -> FleetResult:
    return FleetResult(image, tuple(check_node(image, n, facts) for n in nodes), skipped)
