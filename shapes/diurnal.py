"""A diurnal day: a request-rate curve through 24 hours (night trough at zero, office-hours peaks), compressed.

The Locust shape file (`-f locustfiles/<user>.py,shapes/diurnal.py`); the shape itself is `slabench.shapes.diurnal`.
"""

from slabench.shapes.diurnal import DiurnalShape

__all__ = ["DiurnalShape"]
