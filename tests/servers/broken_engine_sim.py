"""`slabench simulate` whose engine fails on its second step: stands in for a simulator bug (run as a script)."""

import sys

from slabench.commands import cli
from slabench.sim import cli as sim_cli
from slabench.sim.engine import FixedLatencyEngine


class BrokenEngine(FixedLatencyEngine):
    steps = 0

    def step(self, now):
        self.steps += 1
        if self.steps == 2:
            raise RuntimeError("engine bug")
        return super().step(now)


sim_cli.build_sim_engine = lambda args: BrokenEngine(ttft=0.01, itl=0.2, jitter=0.0, seed=0, stream_interval=1)
sys.exit(cli.main(["simulate", "--port", "0", *sys.argv[1:]]))
