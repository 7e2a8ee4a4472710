"""Aggregate a sweep's runs into per-level figures: mean ± std, confidence intervals, the cliff, and the reports.

    python analysis/aggregate_runs.py runs/<sweep-id>        # the same as `slabench aggregate runs/<sweep-id>`

The code is `slabench.analysis`; this script is where a reader of the repository looks first.
"""

import sys

from slabench.commands.cli import main

if __name__ == "__main__":
    sys.exit(main(["aggregate", *sys.argv[1:]]))
