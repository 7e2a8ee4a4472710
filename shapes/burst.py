"""Burst replay: the 20,000-request / 195 s grading queue, each request sent at its offset whatever is in flight.

The Locust shape file (`-f locustfiles/<user>.py,shapes/burst.py`); the shape itself is `slabench.shapes.burst`.
"""

from slabench.shapes.burst import BurstShape

__all__ = ["BurstShape"]
