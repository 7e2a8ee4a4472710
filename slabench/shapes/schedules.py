"""Pure schedule functions behind every load shape: no Locust, no clocks, no I/O.

A plan is a tuple of `Span`s laid end to end from t = 0 (seconds from the shape's start). Closed-loop shapes read the
span at a time (`span_at`) for their user count; open-loop shapes turn spans into arrival offsets. Every record is
stamped with the span it was scheduled in (level, repeat, phase), so warm-up can be excluded and repeats told apart.
"""

from __future__ import annotations

import bisect
import itertools
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

from slabench.core.errors import UserError

PHASES = ("warmup", "hold", "cooldown", "idle")
REPEAT_ORDERS = ("sweep", "level")

# Relative request rate through a day (hour → share of the peak): a night trough at zero (lets a fleet scale to
# zero), a morning ramp, two office-hours peaks around a lunch dip, an evening tail.
OFFICE_DAY: tuple[tuple[float, float], ...] = (
    (0.0, 0.03),
    (1.0, 0.0),
    (5.0, 0.0),
    (7.0, 0.12),
    (9.0, 0.7),
    (10.5, 1.0),
    (12.25, 0.72),
    (14.5, 1.0),
    (17.0, 0.6),
    (19.5, 0.25),
    (22.0, 0.1),
    (24.0, 0.03),
)


@dataclass(frozen=True, slots=True)
class Span:
    """One stretch of a plan: [start, end) seconds, at `level` (users, or requests/s), in `phase` of `repeat`."""

    start: float
    end: float
    level: float | None  # users (closed loop) or requests/s (open loop); None for a replayed queue
    repeat: int
    phase: str  # one of PHASES; "idle" means no load at all

    @property
    def users(self) -> int:
        """Closed loop: users to run (none while idle)."""
        return 0 if self.phase == "idle" or self.level is None else int(self.level)


# -- parsing options -----------------------------------------------------------------------------------------------
def parse_levels(text: str, option: str = "--steps-levels") -> tuple[int, ...]:
    """``"1,2,4"`` → (1, 2, 4); anything that is not a positive integer is a UserError."""
    parts = [p.strip() for p in str(text).split(",")]
    if not any(parts):
        raise UserError(f"{option}: no levels given — use comma-separated user counts like 1,2,4,8")
    out = []
    for p in parts:
        if not p.isdigit() or int(p) < 1:
            raise UserError(f"{option} {text!r}: {p!r} is not a positive integer — use user counts like 1,2,4,8")
        out.append(int(p))
    return tuple(out)


def parse_rates(text: str, option: str = "--rate-rps") -> tuple[float, ...]:
    """``"0.5,2,8"`` → request rates in requests/s; each must be a finite number > 0."""
    parts = [p.strip() for p in str(text).split(",")]
    out = []
    for p in parts:
        try:
            v = float(p)
        except ValueError:
            v = math.nan
        if not math.isfinite(v) or v <= 0:
            raise UserError(f"{option} {text!r}: {p!r} is not a rate > 0 — use requests per second like 0.5,2,8")
        if v < 0.001:  # records keep a rate in thousandths of a request per second (stage_unit milli_rps)
            raise UserError(f"{option} {text!r}: {p!r} is below 0.001 requests per second, the finest rate recorded")
        out.append(v)
    return tuple(out)


def parse_curve(text: str, option: str = "--diurnal-curve") -> tuple[tuple[float, float], ...]:
    """``"0:0.1,9:1,24:0.1"`` → ((hour, relative rate), ...): hours rise strictly from 0 to 24, rates ≥ 0, some > 0."""
    points = []
    for p in str(text).split(","):
        hour, sep, value = p.strip().partition(":")
        try:
            h, v = float(hour), float(value)
        except ValueError:
            h = v = math.nan
        if not sep or not (math.isfinite(h) and math.isfinite(v)) or v < 0:
            raise UserError(f"{option}: {p.strip()!r} is not hour:rate — use e.g. 0:0.1,9:1,17:0.5,24:0.1")
        points.append((h, v))
    check_curve(points, option)
    return tuple(points)


def check_curve(points: Sequence[tuple[float, float]], option: str = "--diurnal-curve") -> None:
    hours = [h for h, _ in points]
    if len(points) < 2 or hours[0] != 0 or hours[-1] != 24 or any(b <= a for a, b in itertools.pairwise(hours)):
        raise UserError(f"{option}: hours must rise strictly from 0 to 24 (got {', '.join(f'{h:g}' for h in hours)})")
    if not any(v > 0 for _, v in points):
        raise UserError(f"{option}: every rate is 0 — at least one point must be above 0")


def check_positive(value: float, option: str, allow_zero: bool = False) -> float:
    ok = math.isfinite(value) and (value >= 0 if allow_zero else value > 0)
    if not ok:
        raise UserError(f"{option} {value:g}: must be a number {'≥' if allow_zero else '>'} 0")
    return value


def check_int(value: int, option: str, minimum: int) -> int:
    if int(value) != value or value < minimum:
        raise UserError(f"{option} {value}: must be an integer ≥ {minimum}")
    return int(value)


# -- stepped plans (concurrency steps, rate steps) -------------------------------------------------------------------
def step_plan(
    levels: Sequence[float],
    warmup: float,
    hold: float,
    cooldown: float = 0.0,
    idle: float = 0.0,
    repeats: int = 1,
    order: str = "sweep",
    repeat_start: int = 0,
) -> tuple[Span, ...]:
    """Each (level, repeat) runs warm-up → hold → cool-down at its level, then `idle` seconds with no load.

    `order` "sweep" runs the whole level list once per repeat (1,2,4,1,2,4: repeats far apart in time, so drift shows
    between them); "level" runs every repeat of a level before the next level (1,1,2,2,4,4). `repeat_start` numbers
    the first repeat, for series of runs that each contribute repeats. Zero-length phases are left out.
    """
    if not levels:
        raise UserError("no levels given")
    for name, v in (("warm-up", warmup), ("cool-down", cooldown), ("idle", idle)):
        check_positive(v, name, allow_zero=True)
    check_positive(hold, "hold")
    check_int(repeats, "repeats", 1)
    check_int(repeat_start, "repeat start", 0)
    if order not in REPEAT_ORDERS:
        raise UserError(f"repeat order {order!r}: use one of {', '.join(REPEAT_ORDERS)}")
    reps = range(repeat_start, repeat_start + repeats)
    runs = [(lv, r) for r in reps for lv in levels] if order == "sweep" else [(lv, r) for lv in levels for r in reps]
    spans: list[Span] = []
    t = 0.0
    for level, rep in runs:
        for phase, length in (("warmup", warmup), ("hold", hold), ("cooldown", cooldown), ("idle", idle)):
            if length > 0:
                spans.append(Span(t, t + length, level, rep, phase))
                t += length
    return tuple(spans)


def span_at(plan: Sequence[Span], t: float) -> Span | None:
    """The span in effect at `t` seconds (the first one before 0), or None once the plan is over."""
    if not plan or t >= plan[-1].end:
        return None
    i = bisect.bisect_right([s.start for s in plan], t) - 1
    return plan[max(i, 0)]


def plan_end(plan: Sequence[Span]) -> float:
    return plan[-1].end if plan else 0.0


# -- arrivals ------------------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Arrival:
    offset: float  # seconds from the shape's start
    span: Span


def gamma_gap(rng: random.Random, rate: float, burstiness: float) -> float:
    """One inter-arrival gap of a Gamma renewal process with mean 1/rate and shape `burstiness`, exactly as
    ``vllm bench serve --request-rate R --burstiness B`` draws it (B = 1 is Poisson; B < 1 burstier)."""
    return rng.gammavariate(burstiness, 1.0 / (rate * burstiness))


def rate_arrivals(plan: Sequence[Span], burstiness: float = 1.0, seed: int = 0) -> list[Arrival]:
    """Arrivals at each span's rate (requests/s) inside every span except idle ones: offsets start + g1, +g2, ...
    while < end. One seeded generator for the whole plan, so the same arguments give the same offsets."""
    check_positive(burstiness, "burstiness")
    rng = random.Random(seed)
    out: list[Arrival] = []
    for span in plan:
        if span.phase == "idle" or not span.level:
            continue
        t = span.start + gamma_gap(rng, span.level, burstiness)
        while t < span.end:
            out.append(Arrival(t, span))
            t += gamma_gap(rng, span.level, burstiness)
    return out


def curve_rate(curve: Sequence[tuple[float, float]], hour: float) -> float:
    """Relative rate at `hour` (wrapped into [0, 24]), linear between the curve's points."""
    if not 0.0 <= hour <= 24.0:
        hour %= 24.0
    hours = [h for h, _ in curve]
    i = min(max(bisect.bisect_right(hours, hour) - 1, 0), len(curve) - 2)
    (h0, v0), (h1, v1) = curve[i], curve[i + 1]
    return v0 + (v1 - v0) * (hour - h0) / (h1 - h0)


@dataclass(frozen=True, slots=True)
class Diurnal:
    """A day of the rate curve compressed into `day_s` seconds, `days` times, starting at `start_hour`."""

    curve: tuple[tuple[float, float], ...]
    peak_rps: float
    day_s: float
    days: int = 1
    start_hour: float = 0.0
    repeat_start: int = 0

    def __post_init__(self) -> None:
        check_curve(self.curve)
        check_positive(self.peak_rps, "--diurnal-peak-rps")
        check_positive(self.day_s, "--diurnal-day-minutes")
        check_int(self.days, "--diurnal-days", 1)
        if not 0 <= self.start_hour < 24:
            raise UserError(f"--diurnal-start-hour {self.start_hour:g}: must be in [0, 24)")

    @property
    def duration(self) -> float:
        return self.days * self.day_s

    def hour_at(self, t: float) -> float:
        hour = (self.start_hour + 24.0 * t / self.day_s) % 24.0
        return 0.0 if math.isclose(hour, 24.0, abs_tol=1e-9) else hour

    def rate_at(self, t: float) -> float:
        """Requests/s at `t` seconds from the start."""
        return self.peak_rps * curve_rate(self.curve, self.hour_at(t))

    def breakpoints(self) -> list[float]:
        """Run times where the rate's slope may change (curve points, day edges), from 0 to the end."""
        ts = {0.0, self.duration}
        for day in range(self.days + 1):
            for h, _ in self.curve:
                t = (day * 24.0 + h - self.start_hour) * self.day_s / 24.0
                if 0 < t < self.duration:
                    ts.add(t)
        return sorted(ts)

    def plan(self) -> tuple[Span, ...]:
        """One span per simulated clock hour, at that hour's mean rate; the repeat is the day of the run."""
        hour_s = self.day_s / 24.0
        first = (math.ceil(self.start_hour) - self.start_hour) * hour_s  # the first whole simulated hour
        edges = {0.0, self.duration} | {first + k * hour_s for k in range(24 * self.days + 1)}
        edges_sorted = sorted(e for e in edges if 0.0 <= e <= self.duration)
        spans = []
        for a, b in itertools.pairwise(edges_sorted):
            if b - a <= 1e-9 * self.day_s:
                continue
            mean = (self.cumulative(b) - self.cumulative(a)) / (b - a)
            spans.append(Span(a, b, mean, self.repeat_start + int(a // self.day_s), "hold"))
        return tuple(spans)

    def cumulative(self, t: float) -> float:
        """Expected arrivals in [0, t): the integral of the (piecewise-linear) rate."""
        total, points = 0.0, self.breakpoints()
        for a, b in itertools.pairwise(points):
            if a >= t:
                break
            end = min(b, t)
            r_end = self.rate_at(end) if end < b else self._rate_left(b)
            total += (self.rate_at(a) + r_end) * (end - a) / 2.0
        return total

    def _rate_left(self, t: float) -> float:
        """The rate just before `t`: the curve is continuous except where a day wraps from 24 h to 0 h."""
        hour = (self.start_hour + 24.0 * t / self.day_s) % 24.0
        if t > 0 and math.isclose(hour, 0.0, abs_tol=1e-9):
            hour = 24.0
        return self.peak_rps * curve_rate(self.curve, hour)

    def arrivals(self, burstiness: float = 1.0, seed: int = 0) -> list[Arrival]:
        """A Gamma renewal process of unit rate mapped through the inverse of the cumulative rate (time rescaling):
        Poisson for burstiness 1, and the rate follows the curve exactly in expectation. Seeded."""
        check_positive(burstiness, "--diurnal-burstiness")
        rng = random.Random(seed)
        plan = self.plan()
        starts = [s.start for s in plan]
        out: list[Arrival] = []
        points = self.breakpoints()
        seg, acc = 0, 0.0  # current segment [points[seg], points[seg+1]) and Λ at its start
        s = gamma_gap(rng, 1.0, burstiness)
        while seg < len(points) - 1:
            a, b = points[seg], points[seg + 1]
            r0, r1 = self.rate_at(a), self._rate_left(b)
            area = (r0 + r1) * (b - a) / 2.0
            if s - acc >= area:
                acc += area
                seg += 1
                continue
            t = a + _invert_linear(r0, r1, b - a, s - acc)
            out.append(Arrival(t, plan[bisect.bisect_right(starts, t) - 1]))
            s += gamma_gap(rng, 1.0, burstiness)
        return out


def _invert_linear(r0: float, r1: float, length: float, c: float) -> float:
    """τ in [0, length] with ∫₀^τ (r0 + (r1 − r0)·x/length) dx = c (the stable root of the quadratic)."""
    if c <= 0:
        return 0.0
    a = (r1 - r0) / (2.0 * length)
    if a >= 0:  # √(r0² + 4ac) as a hypotenuse: the squares of a tiny rate or area underflow (c = 5e-324 gave the span)
        denom = r0 + math.hypot(r0, 2.0 * math.sqrt(a) * math.sqrt(c))
    else:
        denom = r0 + math.sqrt(max(r0 * r0 + 4.0 * a * c, 0.0))
    return min(2.0 * c / denom, length) if denom > 0 else length


# -- replayed queues -----------------------------------------------------------------------------------------------
def stride_indices(n: int, time_scale: float, stride: int = 0) -> range:
    """Which of `n` queue rows a time-scaled replay sends: every `stride`-th from the first. Stride 0 means "keep
    the request rate": round(time_scale) for speed-ups, 1 otherwise."""
    check_positive(time_scale, "--burst-time-scale")
    if stride == 0:
        stride = max(1, round(time_scale))
    check_int(stride, "--burst-stride", 1)
    return range(0, n, stride)


def partition(n_items: int, worker_index: int, n_workers: int) -> range:
    """Worker `worker_index` of `n_workers` sends items worker_index, worker_index + n, ...: every item exactly once
    across workers, and each worker's share is spread evenly over the whole schedule."""
    if n_workers < 1 or not 0 <= worker_index < n_workers:
        raise ValueError(f"worker {worker_index} of {n_workers}")
    return range(worker_index, n_items, n_workers)
