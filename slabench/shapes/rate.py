"""Rate-driven arrivals: Poisson (burstiness 1) or Gamma(burstiness) at given request rates, seeded.

    locust -f locustfiles/chat_replay.py,shapes/rate.py --headless --rate-rps 2,4,8 --rate-burstiness 0.5

Gaps are drawn exactly like ``vllm bench serve --request-rate R --burstiness B`` (Gamma with shape B and mean 1/R),
so runs compare with vLLM's and AIPerf's. Several rates run as steps with warm-up, hold, cool-down and repeats, like
the concurrency steps. Open loop: requests go out at their times whatever is in flight. Records carry the rate as
stage_level in stage_unit milli_rps (thousandths of a request per second), stage_repeat and stage_phase.
"""

from __future__ import annotations

from typing import Any

from slabench.core.record import StageUnit
from slabench.shapes.base import OpenLoopShape, Plan, install, open_loop_user_class, opt_float, opt_int
from slabench.shapes.items import arrival_items
from slabench.shapes.schedules import parse_rates, plan_end, rate_arrivals, step_plan


class RateShape(OpenLoopShape):
    alias = "rate"

    @classmethod
    def add_options(cls, parser: Any) -> None:
        g = parser.add_argument_group("slabench shape: request-rate steps (shapes/rate.py)")
        g.add_argument("--rate-rps", default="1", help="request rates (requests/s), comma-separated, one step each")
        g.add_argument("--rate-burstiness", type=float, default=1.0, help="Gamma shape: 1 = Poisson, < 1 burstier")
        g.add_argument("--rate-warmup", type=float, default=0.0, help="seconds of warm-up per rate and repeat")
        g.add_argument("--rate-hold", type=float, default=60.0, help="seconds measured per rate and repeat")
        g.add_argument("--rate-cooldown", type=float, default=0.0, help="seconds at the rate after the hold")
        g.add_argument("--rate-idle", type=float, default=0.0, help="seconds with no arrivals after each cool-down")
        g.add_argument("--rate-repeats", type=int, default=1, help="repeats of every rate in this run")
        g.add_argument("--rate-order", choices=["sweep", "level"], default="sweep", help="as --steps-order")
        g.add_argument("--rate-repeat-start", type=int, default=0, help="number of the first repeat")
        g.add_argument("--rate-seed", type=int, default=0, help="seed of the arrival process")

    def build(self, opts: Any, environment: Any) -> Plan:
        rates = parse_rates(opts.rate_rps)
        spans = step_plan(
            rates,
            warmup=opt_float(opts, "rate_warmup"),
            hold=opt_float(opts, "rate_hold"),
            cooldown=opt_float(opts, "rate_cooldown"),
            idle=opt_float(opts, "rate_idle"),
            repeats=opt_int(opts, "rate_repeats"),
            order=str(opts.rate_order),
            repeat_start=opt_int(opts, "rate_repeat_start"),
        )
        burstiness = opt_float(opts, "rate_burstiness")
        user_class = open_loop_user_class(environment)
        items = arrival_items(rate_arrivals(spans, burstiness, opt_int(opts, "rate_seed")), "rate")
        end = plan_end(spans)
        text = (
            f"rates {','.join(f'{r:g}' for r in rates)} req/s (burstiness {burstiness:g}), "
            f"{len(items)} arrivals over {end:.0f} s"
        )
        return Plan(
            spans=spans, level_unit=StageUnit.MILLI_RPS, items=tuple(items), user_class=user_class, end=end, text=text
        )


install(RateShape)
