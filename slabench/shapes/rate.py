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
from slabench.shapes.base import (
    OpenLoopShape,
    Plan,
    add_step_options,
    install,
    open_loop_user_class,
    opt_float,
    opt_int,
    stepped_spans,
)
from slabench.shapes.items import arrival_items
from slabench.shapes.schedules import parse_rates, plan_end, rate_arrivals


class RateShape(OpenLoopShape):
    alias = "rate"

    @classmethod
    def add_options(cls, parser: Any) -> None:
        g = parser.add_argument_group("slabench shape: request-rate steps (shapes/rate.py)")
        g.add_argument("--rate-rps", default="1", help="request rates (requests/s), comma-separated, one step each")
        g.add_argument("--rate-burstiness", type=float, default=1.0, help="Gamma shape: 1 = Poisson, < 1 burstier")
        add_step_options(g, "rate", "rate", warmup=0.0, hold=60.0, cooldown=0.0)
        g.add_argument("--rate-seed", type=int, default=0, help="seed of the arrival process")

    def build(self, opts: Any, environment: Any) -> Plan:
        rates = parse_rates(opts.rate_rps)
        spans = stepped_spans(opts, "rate", rates)
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
