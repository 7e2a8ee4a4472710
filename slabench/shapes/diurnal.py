"""A diurnal day: a request-rate curve through 24 hours (night trough at zero, office-hours peaks), compressed.

    locust -f locustfiles/chat_replay.py,shapes/diurnal.py --headless --diurnal-peak-rps 20 --diurnal-day-minutes 24

For exercising autoscaling: the fleet should scale up into the morning and back to zero at night. The curve is
piecewise linear (``--diurnal-curve hour:relative-rate,...`` from 0 to 24; default: shapes.schedules.OFFICE_DAY),
arrivals are a Poisson (or Gamma, ``--diurnal-burstiness``) process time-rescaled to follow it exactly, seeded.
Open loop. Records carry stage_level = the simulated hour's mean rate in milli_rps (stage_unit), stage_repeat = the
day, phase "hold".
"""

from __future__ import annotations

from typing import Any

from slabench.core.record import StageUnit
from slabench.shapes.base import OpenLoopShape, Plan, install, open_loop_user_class, opt_float, opt_int
from slabench.shapes.items import arrival_items
from slabench.shapes.schedules import OFFICE_DAY, Diurnal, parse_curve


def diurnal_from_options(opts: Any) -> Diurnal:
    curve = parse_curve(opts.diurnal_curve) if str(opts.diurnal_curve).strip() else OFFICE_DAY
    return Diurnal(
        curve=curve,
        peak_rps=opt_float(opts, "diurnal_peak_rps"),
        day_s=opt_float(opts, "diurnal_day_minutes") * 60.0,
        days=opt_int(opts, "diurnal_days"),
        start_hour=opt_float(opts, "diurnal_start_hour"),
        repeat_start=opt_int(opts, "diurnal_repeat_start"),
    )


class DiurnalShape(OpenLoopShape):
    alias = "diurnal"

    @classmethod
    def add_options(cls, parser: Any) -> None:
        g = parser.add_argument_group("slabench shape: diurnal day (shapes/diurnal.py)")
        g.add_argument("--diurnal-peak-rps", type=float, default=10.0, help="request rate at the curve's peak")
        g.add_argument("--diurnal-day-minutes", type=float, default=24.0, help="real minutes one simulated day takes")
        g.add_argument("--diurnal-days", type=int, default=1, help="simulated days to run")
        g.add_argument("--diurnal-start-hour", type=float, default=0.0, help="simulated hour the run starts at")
        g.add_argument("--diurnal-curve", default="", help="hour:rate points, 0 to 24 h (default: office day)")
        g.add_argument("--diurnal-burstiness", type=float, default=1.0, help="Gamma shape: 1 = Poisson")
        g.add_argument("--diurnal-seed", type=int, default=0, help="seed of the arrival process")
        g.add_argument("--diurnal-repeat-start", type=int, default=0, help="stage_repeat of the first day")

    def build(self, opts: Any, environment: Any) -> Plan:
        day = diurnal_from_options(opts)
        user_class = open_loop_user_class(environment)
        arrivals = day.arrivals(opt_float(opts, "diurnal_burstiness"), opt_int(opts, "diurnal_seed"))
        items = arrival_items(arrivals, "diurnal")
        spans = day.plan()
        text = (
            f"peak {day.peak_rps:g} req/s, {day.days} day(s) of {day.day_s / 60:g} min from {day.start_hour:g} h: "
            f"{len(items)} arrivals (expected {day.cumulative(day.duration):.0f})"
        )
        return Plan(
            spans=spans,
            level_unit=StageUnit.MILLI_RPS,
            items=tuple(items),
            user_class=user_class,
            end=day.duration,
            text=text,
        )


install(DiurnalShape)
