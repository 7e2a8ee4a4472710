#!/usr/bin/env bash
# The test command (README): lint, then every test tier.
set -euo pipefail
cd "$(dirname "$0")/.."
ruff check .
mypy  # strict on the whole package ([tool.mypy] in pyproject.toml)
python -m pytest tests -q --durations=15
