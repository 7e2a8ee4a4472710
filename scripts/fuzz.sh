#!/usr/bin/env bash
# The fuzz suite's long mode: every registered reader (tests/fuzz/registry.py) against many more hostile inputs
# than the test command's 25 each, with fresh random inputs each run. Usage: scripts/fuzz.sh [EXAMPLES] [pytest -k]
set -euo pipefail
cd "$(dirname "$0")/.."
export SLABENCH_FUZZ_EXAMPLES="${1:-1000}"
python -m pytest tests/fuzz/test_readers.py -q ${2:+-k "$2"} -p no:cacheprovider
