"""How long a replica the autoscaler adds takes to serve: stated assumptions, each overridable, with its source.

A replica whose weights are on the host's NVMe already (`nvme`: a node the fleet kept, with the image cached) only
starts a pod, reads the weights and starts vLLM. Any other replica needs a new GPU node: Karpenter provisions it, it
boots and joins, pulls the serving image, and the weights come from S3 (`s3`: the fleet's design, docs/weights.md)
or, with no cache at all, from Hugging Face (`hf`: the first pull ever). The figures are estimates (nothing here ran
on EKS or a GPU); docs/plan.md gives the source of each. Override any with `--cold-start KEY=VALUE`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace

from slabench.core.errors import UserError

TIERS = ("nvme", "s3", "hf")


@dataclass(frozen=True, slots=True)
class ColdStart:
    provision_s: float = 45.0  # Karpenter: batch the pending pod, launch the EC2 instance
    boot_s: float = 90.0  # the node boots, joins, the GPU driver and device plugin come up
    image_gb: float = 10.0  # the vLLM serving image, uncompressed (docs/images.md: 8–12 GB)
    pull_mb_s: float = 100.0  # image pull and extraction
    nvme_gb_s: float = 2.0  # reading the weights from host NVMe into vLLM
    s3_mb_s: float = 500.0  # hydrate: in-region S3, parallel ranged GETs, verified
    hf_mb_s: float = 50.0  # a first pull from Hugging Face
    pod_start_s: float = 5.0  # schedule the pod on a node that has room, start its containers
    engine_start_s: float = 60.0  # vLLM: CUDA graphs, compile cache, warm-up, until /health answers

    def steps(self, tier: str, weight_bytes: float) -> list[tuple[str, float]]:
        """The steps of one replica's cold start, in order, with their seconds."""
        if tier not in TIERS:
            raise ValueError(f"cache tier {tier!r}: use one of {TIERS}")
        gb = weight_bytes / 1e9
        out: list[tuple[str, float]] = []
        if tier != "nvme":
            out += [
                ("provision", self.provision_s),
                ("boot", self.boot_s),
                ("image pull", self.image_gb * 1000.0 / self.pull_mb_s),
            ]
            copy = self.s3_mb_s if tier == "s3" else self.hf_mb_s
            out.append((f"weights from {'S3' if tier == 's3' else 'Hugging Face'}", gb * 1000.0 / copy))
        out += [
            ("pod start", self.pod_start_s),
            ("weights from NVMe", gb / self.nvme_gb_s),
            ("engine start", self.engine_start_s),
        ]
        return out

    def seconds(self, tier: str, weight_bytes: float) -> float:
        return sum(s for _, s in self.steps(tier, weight_bytes))

    def describe(self, tier: str, weight_bytes: float) -> str:
        parts = " + ".join(f"{name} {s:.0f}" for name, s in self.steps(tier, weight_bytes))
        return f"{tier}: {parts} = {self.seconds(tier, weight_bytes):.0f} s"


KEYS = {f.name.replace("_", "-"): f.name for f in fields(ColdStart)}


def cold_start(items: list[str]) -> ColdStart:
    """The assumptions with `--cold-start KEY=VALUE` overrides (e.g. boot-s=120, s3-mb-s=1000)."""
    out = ColdStart()
    for item in items:
        key, sep, value = item.partition("=")
        try:
            number = float(value)
        except ValueError:
            number = math.nan
        if not sep or key not in KEYS:
            raise UserError(f"--cold-start {item!r}: use KEY=VALUE with KEY one of {', '.join(KEYS)}")
        positive = not key.endswith("-s") or key.endswith("mb-s") or key.endswith("gb-s")  # a rate must be > 0
        if not math.isfinite(number) or number < 0 or (positive and number == 0):
            raise UserError(f"--cold-start {item!r}: {key} must be a finite number {'>' if positive else '≥'} 0")
        out = replace(out, **{KEYS[key]: number})
    return out
