"""A worker handles each spawn message from its master in microseconds, not in a second of CPU.

Locust's worker, on every spawn message, keeps the master's options that are not Locust's own by asking, once per
option, for Locust's default options (`locust.argument_parser.default_args_dict`), which builds Locust's whole
parser and parses an empty command line each time: ~5 ms, and slabench's locustfiles have ~100 options, so ~0.5 s
of CPU (1–2 s on a busy machine) with the worker's event loop held. The master sends every worker a spawn message
at each step of the ramp-up, once a second at Locust's default spawn rate: `--processes 4` on two cores spent the
cores on this alone, its niced embedded simulator starved, and a worker whose handling took longer than the second
between messages killed each spawning greenlet before it ran (Locust replaces it on the next message): it started
no user and the run made no request (exit 4, "no request was made"). The defaults are the same on every call (the
process's environment and Locust's code): computed once, handed out as copies.
"""

from __future__ import annotations

import functools
from typing import Any

from locust import argument_parser


def compute_default_options_once() -> None:
    """Make `default_args_dict` build Locust's parser once per process (idempotent)."""
    compute = argument_parser.default_args_dict
    if hasattr(compute, "__wrapped__"):  # already done
        return
    once = functools.cache(compute)

    @functools.wraps(compute)
    def default_args_dict() -> dict[str, Any]:
        return dict(once())  # a copy: a caller may change what it gets

    argument_parser.default_args_dict = default_args_dict
