"""Seeded fault injection for the simulator: what real servers and networks do to streams.

Chosen per request, by rate (`--fault KIND=RATE`) or by the request header ``X-Slabench-Fault: KIND[:SECONDS]``
(the header wins). Kinds:
  http_500, http_503, http_429   error answer instead of a stream (429 with Retry-After)
  reset                          TCP reset halfway through the stream
  stall                          no bytes for `stall_s` seconds halfway through, then the stream goes on
  malformed                      one chunk of invalid JSON halfway through
  no_usage                       the final usage chunk is left out
  slow_start                     response headers only after `slow_start_s` seconds
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from slabench.core.errors import UserError

KINDS = ("http_500", "http_503", "http_429", "reset", "stall", "malformed", "no_usage", "slow_start")
HEADER = b"x-slabench-fault"


@dataclass(frozen=True, slots=True)
class Fault:
    kind: str
    seconds: float = 0.0

    @property
    def http_status(self) -> int | None:
        return int(self.kind[5:]) if self.kind.startswith("http_") else None


@dataclass
class FaultPlan:
    rates: dict[str, float] = field(default_factory=dict)
    stall_s: float = 5.0
    slow_start_s: float = 2.0
    seed: int = 0
    _rng: random.Random = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)
        bad = set(self.rates) - set(KINDS)
        if bad:
            raise UserError(f"--fault: unknown kind {sorted(bad)}; choose from {', '.join(KINDS)}")
        if any(not 0 <= r <= 1 for r in self.rates.values()) or sum(self.rates.values()) > 1:
            raise UserError("--fault: rates must be in [0, 1] and add up to at most 1")

    def choose(self, header: bytes | None) -> Fault | None:
        if header:
            kind, _, secs = header.decode().partition(":")
            if kind not in KINDS:
                return None
            default = self.slow_start_s if kind == "slow_start" else self.stall_s
            return Fault(kind, float(secs) if secs else default)
        if not self.rates:
            return None
        x = self._rng.random()
        for kind, rate in self.rates.items():
            if x < rate:
                return Fault(kind, self.slow_start_s if kind == "slow_start" else self.stall_s)
            x -= rate
        return None


def parse_fault_flags(flags: list[str]) -> dict[str, float]:
    rates = {}
    for flag in flags:
        kind, sep, rate = flag.partition("=")
        try:
            rates[kind] = float(rate) if sep else 1.0
        except ValueError:
            raise UserError(f"--fault {flag}: expected KIND=RATE, e.g. http_503=0.02") from None
    return rates
