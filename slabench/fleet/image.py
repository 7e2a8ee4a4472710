"""The serving image as the fleet check sees it: its CUDA release and the GPU targets it was compiled for."""

from __future__ import annotations

from dataclasses import dataclass

from slabench.fleet.facts import FleetFacts
from slabench.fleet.versions import ArchTarget, CudaVersion, format_arch_list, parse_arch_list

# The one serving image of the fleet: vLLM's own release image, CUDA 12.9 variant. Its x86_64 targets are vLLM's
# CUDA_ARCH_X86_CU129 of the v0.32.0 release pipeline (.buildkite/release-pipeline.yaml), which cover every GPU in the
# fleet, sm_80 (A100) to sm_120 (RTX PRO 6000), plus 7.5. The chart's default (helm/vllm-serving) is this image.
FLEET_IMAGE = "vllm/vllm-openai:v0.32.0-cu129"
FLEET_IMAGE_CUDA = "12.9"
FLEET_IMAGE_ARCH_LIST = "7.5 8.0 8.6 8.9 9.0 10.0 12.0"
# A custom build (docker/vllm/Dockerfile) only for what upstream does not publish; see docker/vllm/README.md.
CUSTOM_IMAGE = "ghcr.io/slabench/vllm-openai-fleet:0.32.0-cu129"
CUSTOM_IMAGE_ARCH_LIST = "8.0 8.6 8.9 9.0 10.0 12.0"


@dataclass(frozen=True)
class ImageSpec:
    name: str
    cuda: CudaVersion
    archs: tuple[ArchTarget, ...]

    @classmethod
    def parse(cls, name: str, cuda: str, arch_list: str) -> ImageSpec:
        return cls(name, CudaVersion.parse(cuda), parse_arch_list(arch_list))

    @property
    def arch_list(self) -> str:
        return format_arch_list(self.archs)


def fleet_image() -> ImageSpec:
    return ImageSpec.parse(FLEET_IMAGE, FLEET_IMAGE_CUDA, FLEET_IMAGE_ARCH_LIST)


def image_problems(image: ImageSpec, facts: FleetFacts) -> list[str]:
    """Arch list entries this CUDA release cannot compile: such an image cannot exist, so its spec is a mistake."""
    problems = []
    nvcc = facts.nvcc_targets
    for target in image.archs:
        arch = nvcc.archs.get(str(target.cc))
        if arch is None:
            problems.append(f"{target}: compute capability {target.cc} is not a CUDA target in the facts table")
            continue
        if image.cuda < CudaVersion.parse(arch.min_cuda):
            problems.append(f"{target}: needs CUDA ≥ {arch.min_cuda} to compile (image CUDA is {image.cuda})")
        if arch.max_cuda and image.cuda > CudaVersion.parse(arch.max_cuda):
            problems.append(f"{target}: CUDA {image.cuda} can no longer compile it (last: CUDA {arch.max_cuda})")
        suffix_min = {"a": nvcc.arch_specific_min_cuda, "f": nvcc.family_specific_min_cuda}.get(target.variant)
        if suffix_min and image.cuda < CudaVersion.parse(suffix_min):
            problems.append(
                f"{target}: '{target.variant}' targets need CUDA ≥ {suffix_min} (image CUDA is {image.cuda})"
            )
    return problems
