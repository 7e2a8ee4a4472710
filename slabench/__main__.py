import sys

from slabench.commands.cli import main

sys.exit(main())
