#!/usr/bin/env bash
# The test command (README): lint, then every test tier.
set -euo pipefail
cd "$(dirname "$0")/.."
ruff check .
mypy  # strict on the whole package ([tool.mypy] in pyproject.toml)
# Two pytest-xdist workers: most tests wait on real servers and Locust, so two at once take ~half the time. Each test
# module, and the whole live tier, stays on one worker in its own order (pytest_xdist_make_scheduler in
# tests/conftest.py).
python -m pytest tests -q --durations=15 -n 2
