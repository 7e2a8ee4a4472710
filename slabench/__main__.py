import sys

from slabench.cli import main

sys.exit(main())
