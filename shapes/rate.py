"""Rate-driven arrivals: Poisson (burstiness 1) or Gamma(burstiness) at given request rates, seeded.

The Locust shape file (`-f locustfiles/<user>.py,shapes/rate.py`); the shape itself is `slabench.shapes.rate`.
"""

from slabench.shapes.rate import RateShape

__all__ = ["RateShape"]
