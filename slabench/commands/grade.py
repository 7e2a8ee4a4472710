"""`slabench grade RUN_DIR --sla FILE`: grade a run or a sweep against an SLA contract.

Prints the verdict table, writes ``verdict.json`` and ``verdict.md`` into each RUN_DIR, and exits 0 PASS,
1 CONDITIONAL, 2 FAIL, 3 invalid input, 4 measurement incomplete (whatever the checks said). Several RUN_DIRs
(e.g. the same sweep on several instance types, with ``--instance-type`` once per RUN_DIR) are graded one by one,
compared side by side, and the exit code is the worst.
"""

from __future__ import annotations

import argparse
import sys

from rich.console import Console

from slabench.core.errors import UserError
from slabench.core.textcols import add_documented_command


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = add_documented_command(
        sub,
        "grade",
        "grade a run or sweep against an SLA contract (exit 0 PASS, 1 CONDITIONAL, 2 FAIL, 3 bad input, "
        "4 measurement incomplete)",
        __doc__,
    )
    p.add_argument(
        "run_dirs",
        nargs="+",
        metavar="RUN_DIR",
        help="a sweep directory (summary.json), a run directory (records.jsonl/.parquet) or a records file",
    )
    p.add_argument(
        "--sla", required=True, metavar="FILE", help="the SLA contract (YAML), e.g. sla/config_sla_example.yaml"
    )
    p.add_argument(
        "--instance-type",
        action="append",
        default=[],
        metavar="TYPE",
        help="price RUN_DIR as this instance type instead of the contract's (give once per RUN_DIR)",
    )
    p.add_argument(
        "--merge-runs",
        action="store_true",
        help="grade a records file that holds several runs (e.g. written with locust --append) as one run",
    )
    p.add_argument("--no-write", action="store_true", help="do not write verdict.json / verdict.md")
    p.add_argument("--json", action="store_true", help="print verdict.json to stdout instead of the table")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import json

    from slabench.sla.contract import load_contract
    from slabench.sla.grade_run import exit_code, grade_run_dir, write_verdict
    from slabench.sla.render import comparison_table, verdict_table
    from slabench.sla.verdict_file import verdict_document

    if args.instance_type and len(args.instance_type) != len(args.run_dirs):
        raise UserError(
            f"--instance-type given {len(args.instance_type)} time(s) for {len(args.run_dirs)} RUN_DIR(s); "
            "give it once per RUN_DIR, in the same order, or not at all"
        )
    loaded = load_contract(args.sla)
    types = args.instance_type or [None] * len(args.run_dirs)
    console = Console()
    verdicts = []
    for run_dir, itype in zip(args.run_dirs, types, strict=True):
        verdict = grade_run_dir(run_dir, loaded, itype, merge_runs=args.merge_runs)
        verdicts.append(verdict)
        if not args.json:
            console.print(verdict_table(verdict))
        if not args.no_write:
            try:
                path = write_verdict(verdict, run_dir)
            except OSError as e:  # the verdict stands and keeps its exit code; only the file is missing
                print(
                    f"slabench grade: {run_dir}: could not write verdict.json ({e.strerror or e}); the verdict above "
                    "stands (exit code as graded) — grade into a writable copy, or pass --no-write",
                    file=sys.stderr,
                )
                continue
            if not args.json:
                console.print(f"wrote {path}")
    if args.json:  # one JSON document: the verdict, or a list of them for several RUN_DIRs
        docs = [verdict_document(v) for v in verdicts]
        print(json.dumps(docs[0] if len(docs) == 1 else docs, indent=2, ensure_ascii=False))
    elif len(verdicts) > 1:
        console.print(comparison_table(verdicts))
    return max(exit_code(v) for v in verdicts)  # the worst: 4 (incomplete) above 2 FAIL above 1 and 0
