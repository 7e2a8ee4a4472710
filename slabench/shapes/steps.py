"""Concurrency steps: levels of concurrent users, each with warm-up, hold and cool-down, repeated.

    locust -f locustfiles/chat_replay.py,shapes/steps.py --headless --steps-levels 1,2,4,8 --steps-hold 60

Each (level, repeat) runs warm-up → hold → cool-down at its level (cool-down keeps the load on, so requests started
in the hold finish under the same load; only hold records are measurements), then optionally idles with no users.
Every record carries stage_level (stage_unit users), stage_repeat and stage_phase.
"""

from __future__ import annotations

from typing import Any

from slabench.core.record import StageUnit
from slabench.shapes.base import ClosedLoopShape, Plan, add_step_options, install, stepped_spans
from slabench.shapes.schedules import parse_levels, plan_end


class StepsShape(ClosedLoopShape):
    alias = "steps"
    spawn_rate_option = "steps_spawn_rate"

    @classmethod
    def add_options(cls, parser: Any) -> None:
        g = parser.add_argument_group("slabench shape: concurrency steps (shapes/steps.py)")
        g.add_argument("--steps-levels", default="1,2,4,8,16,32,64", help="concurrent users per level, comma-separated")
        add_step_options(g, "steps", "level", warmup=30.0, hold=120.0, cooldown=10.0)
        g.add_argument("--steps-spawn-rate", type=float, default=0.0, help="users started per second (0 = the level)")

    def build(self, opts: Any, environment: Any) -> Plan:
        levels = parse_levels(opts.steps_levels)
        spans = stepped_spans(opts, "steps", levels)
        end = plan_end(spans)
        text = f"levels {','.join(map(str, levels))} × {opts.steps_repeats} repeat(s), {len(spans)} spans, {end:.0f} s"
        return Plan(spans=spans, level_unit=StageUnit.USERS, end=end, text=text)


install(StepsShape)
