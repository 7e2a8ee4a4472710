"""`slabench plan --autoscale`: the options, their checks (before any work), and the run after the plan's own.

Writes `autoscale.json` (every profile's scaled replays, their timelines and the day's three fleets) and
`autoscale.png` (replicas, queue and TTFT p95 over the burst) next to `plan.json`. Method: docs/plan.md.
"""

from __future__ import annotations

import argparse
import json
import math
from concurrent.futures import Executor, Future
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from slabench.core.errors import UserError
from slabench.plan.chart_rule import TEMPLATE, ScalingRule, chart_rule
from slabench.plan.checks import Check
from slabench.plan.coldstart import KEYS, TIERS, ColdStart, cold_start

if TYPE_CHECKING:
    from slabench.plan.autoscale import AutoscaleAnswer
    from slabench.plan.scaling import Scaling
    from slabench.plan.search import ProfileAnswer, ProfileJob


def add_options(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("autoscaling (docs/plan.md)")
    g.add_argument(
        "--autoscale",
        action="store_true",
        help="replay the load on a fleet the chart's autoscaling rule scales: warm replicas needed, the day's cost",
    )
    g.add_argument(
        "--cache-tier",
        choices=TIERS,
        default="s3",
        help="where a new replica's weights come from: nvme (a kept node), s3 (a new node; default), hf (first pull)",
    )
    g.add_argument(
        "--cold-start",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help=f"override a cold-start assumption (repeatable); keys: {', '.join(KEYS)}",
    )
    g.add_argument(
        "--warm",
        action="append",
        default=[],
        metavar="PROFILE=N",
        help="also replay the load from N warm replicas of this GPU profile (repeatable)",
    )


@dataclass(frozen=True)
class AutoscaleSetup:
    rule: ScalingRule
    cold: ColdStart
    tier: str
    peak_rps: float
    warm: dict[str, int]  # --warm: a profile's replicas to replay from, besides the search's


def _warm(items: list[str], profiles: list[str]) -> dict[str, int]:
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name or not value.isdigit() or int(value) < 1:
            raise UserError(f"--warm {item!r}: use PROFILE=N with N ≥ 1 warm replicas, e.g. --warm l40s=150")
        if name not in profiles:
            raise UserError(f"--warm {item!r}: {name} is not among the planned profiles ({', '.join(profiles)})")
        out[name] = int(value)
    return out


def setup(args: argparse.Namespace, serving: dict[str, Any], profiles: list[str]) -> AutoscaleSetup | None:
    """The rule, the cold start and the day, checked before any planning (None: no --autoscale). `profiles`: the
    planned GPU profiles' names."""
    if not args.autoscale:
        if args.cold_start or args.cache_tier != "s3" or args.warm:
            raise UserError("--cold-start, --cache-tier and --warm shape the autoscaled replay: add --autoscale")
        return None
    if not (math.isfinite(args.diurnal_peak_rps) and args.diurnal_peak_rps > 0):
        raise UserError(f"--diurnal-peak-rps {args.diurnal_peak_rps:g}: the day's peak must be > 0 requests/s")
    if not TEMPLATE.is_file():
        raise UserError(
            f"--autoscale reads the vllm-serving chart's rule ({TEMPLATE} is missing): run slabench from a checkout "
            "of its repository, where helm/vllm-serving is"
        )
    rule = chart_rule(args.serving_values, serving.get("max_num_seqs"))
    warm = _warm(args.warm, profiles)
    return AutoscaleSetup(rule, cold_start(args.cold_start), args.cache_tier, args.diurnal_peak_rps, warm)


def search_scaling(s: AutoscaleSetup | None, balancer: str) -> Scaling | None:
    """What the plan's search needs to run its pessimistic end's fleets as the autoscaled replays `submit` would
    otherwise repeat (`ProfileJob.scaling`). Round robin only: there a scaled fleet that never scales routes as the
    fixed one (request i to replica i mod N), so the plan's figures stay the same; least outstanding breaks ties
    differently on the two."""
    from slabench.plan.scaling import Scaling

    if s is None or balancer != "round-robin":
        return None
    return Scaling(s.rule, s.cold, s.tier)


def submit(
    pool: Executor, s: AutoscaleSetup, job: ProfileJob, answer: ProfileAnswer, usd_per_replica_hour: float
) -> Future[AutoscaleAnswer] | None:
    """The profile `job` through the scaled replay and the day, as soon as its plan is known (None: it has no
    planned fleet to scale from). Replayed as the plan plans: at the pessimistic end of its 90 % interval (each
    step `answer.factor` times as long), from the planned count."""
    from slabench.plan.autoscale import autoscale_profile

    if answer.planned is None or answer.pessimistic is None:
        return None
    p = answer.planned.prediction
    return pool.submit(
        autoscale_profile, job, s.rule,
        s.cold, s.tier, answer.pessimistic, p.ok, p.drain_s, usd_per_replica_hour,
        answer.floor.get("ttft_p95") or 0.0, s.peak_rps, s.warm.get(answer.gpu.name), answer.factor,
        answer.pessimistic_runs,
    )  # fmt: skip


def write(s: AutoscaleSetup, answers: list[AutoscaleAnswer], checks: list[Check], out: Path) -> list[Path]:
    """autoscale.json and (with matplotlib) autoscale.png; returns the files written."""
    from slabench.core.extras import missing
    from slabench.plan.autoscale import plot_png
    from slabench.plan.jsondoc import finite

    doc = {
        "kind": "slabench.autoscale",
        "schema_version": 1,
        "rule": s.rule.describe(),
        "cache_tier": s.tier,
        "cold_start": {k: getattr(s.cold, v) for k, v in KEYS.items()},
        "day_peak_rps": s.peak_rps,
        "profiles": [a.to_dict() for a in answers],
    }
    (out / "autoscale.json").write_text(json.dumps(finite(doc), indent=2, ensure_ascii=False, allow_nan=False) + "\n")
    written = [out / "autoscale.json"]
    if missing("matplotlib") is None and answers:
        (out / "autoscale.png").write_bytes(plot_png(answers, checks))
        written.append(out / "autoscale.png")
    return written
