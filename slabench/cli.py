"""The `slabench` command. Each subcommand lives in its own module and registers itself via `add_parser`."""

from __future__ import annotations

import argparse
import importlib
import sys

from slabench.errors import UserError

# module path → exposes add_parser(subparsers); each parser sets `func(args) -> int`.
COMMAND_MODULES = [
    "slabench.sim.cli",
    "slabench.fleet.cli",
]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # usage mistakes are invalid input: exit 3, one line
        self.print_usage(sys.stderr)
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        raise SystemExit(UserError.exit_code)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="slabench", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for name in COMMAND_MODULES:
        importlib.import_module(name).add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
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
