"""Registering on Locust's event hooks once: the plugin and each part riding on it (grading, scraping, the web UI,
the load shapes) install themselves on the same hooks whenever a locustfile imports them, several times in a run."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from slabench.locust.state import first_install


def install_once(hooks: Any, part: str, add_options: Callable[..., None], on_init: Callable[..., None]) -> bool:
    """The first time `part` installs on `hooks`: its command-line options and its init listener, and True; after
    that False (its listeners are there already)."""
    if not first_install(hooks, part):
        return False
    hooks.init_command_line_parser.add_listener(add_options)
    hooks.init.add_listener(on_init)
    return True
