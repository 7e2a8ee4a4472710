"""The autoscaling rule the vllm-serving chart renders, read from the same values and template the chart uses.

The ScaledObject (templates/scaledobject.yaml) scales on running + waiting requests over every replica with KEDA's
AverageValue target `loadPerReplica` = max(1, ⌊model.maxNumSeqs × autoscaling.targetUtilization⌋) (the chart's
`_helpers.tpl`), within [minReplicas, maxReplicas], polled every `pollingInterval`; the HPA behaviour (up one pod per
period, down after a stabilization window, one pod per period) is written in the template itself, so it is read from
there. With `schedule.enabled` the chart scales to zero outside the cron window: KEDA cannot wake it on load, since
with no replica there is no series (`ignoreNullValues`), so only the schedule brings it back.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slabench.core.errors import UserError
from slabench.core.files import read_text
from slabench.deploy.hpa import Autoscaler, Rule
from slabench.plan.serving import CHART_VALUES, merged_values

TEMPLATE = CHART_VALUES.parent / "templates" / "scaledobject.yaml"


@dataclass(frozen=True, slots=True)
class ScalingRule:
    target: float  # requests (running + waiting) per replica
    counts_running: bool  # the query sums running and waiting (False: waiting alone)
    min_replicas: int
    max_replicas: int
    poll_s: float
    cooldown_s: float  # KEDA: idle this long (the metric at 0) before it scales to zero
    up_pods: int
    up_period_s: float
    down_window_s: float
    down_pods: int
    down_period_s: float
    schedule: tuple[float, float] | None  # business hours (start, end) in hours of the day; zero outside

    def autoscaler(self, replicas: int, floor: int, ceiling: int) -> Autoscaler:
        """The HPA this rule drives, starting at `replicas`, kept within floor…ceiling."""
        return Autoscaler(
            Rule(self.counts_running, self.target),
            replicas,
            floor,
            ceiling,
            self.up_period_s,
            self.down_window_s,
            self.down_period_s,
            self.up_pods,
            self.down_pods,
        )

    def describe(self) -> str:
        series = "running + waiting" if self.counts_running else "waiting"
        zero = f"; zero outside {self.schedule[0]:g}–{self.schedule[1]:g} h (cron schedule)" if self.schedule else ""
        return (
            f"KEDA on {series} requests, {self.target:g} per replica, {self.min_replicas}–{self.max_replicas} "
            f"replicas, polled every {self.poll_s:g} s; up {self.up_pods} per {self.up_period_s:g} s, down "
            f"{self.down_pods} per {self.down_period_s:g} s after {self.down_window_s:g} s{zero}"
        )


def _number(values: dict[str, Any], key: str, where: str, low: float, integer: bool = False) -> float:
    v = values.get(key)
    ok = isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) and v >= low
    if ok and integer and isinstance(v, float) and not v.is_integer():
        ok = False
    if not ok or not isinstance(v, int | float):
        kind = "a whole number" if integer else "a number"
        raise UserError(f"{where}.{key}: {v!r} — must be {kind} ≥ {low:g}")
    return float(v)


def _policy(text: str, direction: str) -> tuple[int, float]:
    """(pods, periodSeconds) of the template's one Pods policy for scaleUp or scaleDown."""
    m = re.search(direction + r":.*?policies:\s*-\s*type:\s*Pods\s*value:\s*(\d+)\s*periodSeconds:\s*(\d+)", text, re.S)
    if not m:
        raise UserError(f"{TEMPLATE}: no `{direction}` Pods policy (value, periodSeconds) to read the HPA's behaviour")
    return int(m.group(1)), float(m.group(2))


def _hour(cron: Any, where: str) -> float:
    """The hour of a daily cron line ("M H * * ...")."""
    parts = str(cron).split()
    if len(parts) != 5 or not (parts[0].isdigit() and parts[1].isdigit()) or int(parts[1]) > 23 or int(parts[0]) > 59:
        raise UserError(f'{where}: {cron!r} — a daily cron line with a fixed minute and hour, e.g. "0 7 * * 1-5"')
    return int(parts[1]) + int(parts[0]) / 60.0


def chart_rule(files: list[str], max_num_seqs: int | None = None, template: Path = TEMPLATE) -> ScalingRule:
    """The rule the chart renders with `files` over its values (`max_num_seqs`: a --max-num-seqs given on the
    command line, which the plan deploys instead of the chart's)."""
    values = merged_values(files)
    try:
        return _rule(values, max_num_seqs, template)
    except UserError as e:  # name the file the value came from (the last given, else the chart's own)
        raise UserError(f"{files[-1] if files else CHART_VALUES}: {e}") from None


def _rule(values: dict[str, Any], max_num_seqs: int | None, template: Path) -> ScalingRule:
    a = values.get("autoscaling")
    if not isinstance(a, dict):
        raise UserError("autoscaling: must be a mapping (the vllm-serving chart's `autoscaling:` keys)")
    model = values.get("model")
    if not isinstance(model, dict):
        model = {}
    seqs = float(max_num_seqs) if max_num_seqs is not None else _number(model, "maxNumSeqs", "model", 1, True)
    utilization = _number(a, "targetUtilization", "autoscaling", 0.0)
    lo = int(_number(a, "minReplicas", "autoscaling", 0, True))
    hi = int(_number(a, "maxReplicas", "autoscaling", 1, True))
    if lo > hi:
        raise UserError(f"autoscaling.minReplicas ({lo}) is above autoscaling.maxReplicas ({hi})")
    text = read_text(template)
    up_pods, up_period = _policy(text, "scaleUp")
    down_pods, down_period = _policy(text, "scaleDown")
    schedule = None
    sched = a.get("schedule")
    if isinstance(sched, dict) and sched.get("enabled"):
        schedule = (
            _hour(sched.get("start"), "autoscaling.schedule.start"),
            _hour(sched.get("end"), "autoscaling.schedule.end"),
        )
    return ScalingRule(
        target=float(max(1, math.floor(seqs * utilization))),
        counts_running="num_requests_running" in text,
        min_replicas=lo,
        max_replicas=hi,
        poll_s=_number(a, "pollingInterval", "autoscaling", 1),
        cooldown_s=_number(a, "cooldownPeriod", "autoscaling", 0),
        up_pods=up_pods,
        up_period_s=up_period,
        down_window_s=_number(a, "scaleDownStabilizationSeconds", "autoscaling", 0),
        down_pods=down_pods,
        down_period_s=down_period,
        schedule=schedule,
    )
