"""Concurrency steps: levels of concurrent users, each with warm-up, hold and cool-down, repeated.

The Locust shape file (`-f locustfiles/<user>.py,shapes/steps.py`); the shape itself is `slabench.shapes.steps`.
"""

from slabench.shapes.steps import StepsShape

__all__ = ["StepsShape"]
