"""`python -m slabench.weights weights hydrate …` — the weights commands alone (same arguments as `slabench`)."""

import sys

from slabench.weights.cli import main

sys.exit(main())
