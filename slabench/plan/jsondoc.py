"""The plan's JSON documents (plan.json, autoscale.json): strict JSON, whose numbers are all finite."""

from __future__ import annotations

import math
from typing import Any


def finite(x: Any) -> Any:
    """JSON has no infinity: an infinite figure (a request that never finished) is written as the string "inf"."""
    if isinstance(x, dict):
        return {k: finite(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [finite(v) for v in x]
    if isinstance(x, float):
        if math.isnan(x):
            return None
        if math.isinf(x):
            return "inf" if x > 0 else "-inf"
    return x
