#!/usr/bin/env bash
# The test command (README): lint, then every test tier.
set -euo pipefail
cd "$(dirname "$0")/.."
ruff check .
mypy  # strict on the whole package ([tool.mypy] in pyproject.toml)
# Two pytest-xdist workers: most tests wait on real servers and Locust, so two at once take ~half the time. Each test
# module, and the whole live tier, stays on one worker in its own order (pytest_xdist_make_scheduler in
# tests/conftest.py).
# Then the few tests marked serial, alone. Both passes run; either failing fails the command.
status=0
python -m pytest tests -q --durations=15 -n 2 -m "not serial" || status=$?
python -m pytest tests -q -m serial || status=$?
exit "$status"
