"""Concurrency steps: levels of concurrent users, each with warm-up, hold and cool-down, repeated.

    locust -f locustfiles/chat_replay.py,shapes/steps.py --headless --steps-levels 1,2,4,8 --steps-hold 60

Each (level, repeat) runs warm-up → hold → cool-down at its level (cool-down keeps the load on, so requests started
in the hold finish under the same load; only hold records are measurements), then optionally idles with no users.
Every record carries stage_level (stage_unit users), stage_repeat and stage_phase.
"""

from __future__ import annotations

from typing import Any

from slabench.core.record import StageUnit
from slabench.shapes.base import ClosedLoopShape, Plan, install, opt_float, opt_int
from slabench.shapes.schedules import parse_levels, plan_end, step_plan


class StepsShape(ClosedLoopShape):
    alias = "steps"
    spawn_rate_option = "steps_spawn_rate"

    @classmethod
    def add_options(cls, parser: Any) -> None:
        g = parser.add_argument_group("slabench shape: concurrency steps (shapes/steps.py)")
        g.add_argument("--steps-levels", default="1,2,4,8,16,32,64", help="concurrent users per level, comma-separated")
        g.add_argument("--steps-warmup", type=float, default=30.0, help="seconds of warm-up per level and repeat")
        g.add_argument("--steps-hold", type=float, default=120.0, help="seconds measured per level and repeat")
        g.add_argument("--steps-cooldown", type=float, default=10.0, help="seconds at the level after the hold")
        g.add_argument("--steps-idle", type=float, default=0.0, help="seconds with no users after each cool-down")
        g.add_argument("--steps-repeats", type=int, default=1, help="repeats of every level in this run")
        g.add_argument(
            "--steps-order",
            choices=["sweep", "level"],
            default="sweep",
            help="sweep: 1,2,4,1,2,4 (repeats far apart in time); level: 1,1,2,2,4,4",
        )
        g.add_argument(
            "--steps-repeat-start",
            type=int,
            default=0,
            help="number of the first repeat (for repeats spread over several runs: run k uses k × repeats)",
        )
        g.add_argument("--steps-spawn-rate", type=float, default=0.0, help="users started per second (0 = the level)")

    def build(self, opts: Any, environment: Any) -> Plan:
        levels = parse_levels(opts.steps_levels)
        spans = step_plan(
            levels,
            warmup=opt_float(opts, "steps_warmup"),
            hold=opt_float(opts, "steps_hold"),
            cooldown=opt_float(opts, "steps_cooldown"),
            idle=opt_float(opts, "steps_idle"),
            repeats=opt_int(opts, "steps_repeats"),
            order=str(opts.steps_order),
            repeat_start=opt_int(opts, "steps_repeat_start"),
        )
        end = plan_end(spans)
        text = f"levels {','.join(map(str, levels))} × {opts.steps_repeats} repeat(s), {len(spans)} spans, {end:.0f} s"
        return Plan(spans=spans, level_unit=StageUnit.USERS, end=end, text=text)


install(StepsShape)
