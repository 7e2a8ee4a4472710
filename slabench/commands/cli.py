"""The `slabench` command. Each subcommand lives in its own module and registers itself via `add_parser`."""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import NoReturn

from slabench import __version__
from slabench.core.errors import UserError

DESCRIPTION = (
    "Load testing and SLA grading for OpenAI-compatible LLM endpoints: sweep a workload over load levels, aggregate "
    "repeats with confidence intervals, grade them against an SLA contract (exit 0 PASS, 1 CONDITIONAL, 2 FAIL, "
    "3 bad input, 4 measurement incomplete), and size a fleet per GPU. `slabench COMMAND --help` for each command."
)

# subcommand → module exposing add_parser(subparsers); each parser sets `func(args) -> int`. Only the module of
# the command being run is imported (a no-op `weights hydrate` in an init container must start fast).
COMMANDS = {
    "sweep": "slabench.sweep.cli",
    "aggregate": "slabench.sweep.cli",
    "grade": "slabench.commands.grade",
    "simulate": "slabench.sim.cli",
    "dataset": "slabench.workload.cli",
    "fleet": "slabench.fleet.cli",
    "weights": "slabench.weights.cli",
    "results": "slabench.commands.results_upload",
    "deploy": "slabench.deploy.cli",
    "scrape": "slabench.evidence.scrape",
    "recover": "slabench.commands.recover",
    "plan": "slabench.plan.cli",
    "calibrate": "slabench.plan.calibrate_cli",
}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # usage mistakes are invalid input: exit 3, one line
        self.print_usage(sys.stderr)
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        raise SystemExit(UserError.exit_code)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    parser = _Parser(prog="slabench", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"slabench {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser, metavar="COMMAND")
    modules = dict.fromkeys(m for name, m in COMMANDS.items() if command in (None, name))  # ordered, unique
    for module in modules:
        importlib.import_module(module).add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    command = argv[0] if argv and argv[0] in COMMANDS else None
    args = build_parser(command).parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except UserError as e:
        print(f"slabench: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("slabench: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
