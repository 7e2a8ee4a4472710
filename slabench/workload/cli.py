"""``slabench dataset {build,verify,stats}``: the retail QA-grading dataset."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from slabench.core.errors import UserError
from slabench.core.extras import require
from slabench.core.files import check_output
from slabench.core.queue import QueueItem
from slabench.workload.accounts import load_settings
from slabench.workload.dataset import (
    build_item,
    load_golden,
    load_queue,
    resolve_dir,
    verify_dataset,
    write_dataset,
)
from slabench.workload.queue import QUEUE_KINDS


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("dataset", help="build, verify and describe the retail QA-grading dataset")
    sub = p.add_subparsers(dest="dataset_command", required=True, parser_class=type(p))

    def common(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--config", help="workload settings YAML (default: the packaged assumptions.yaml)")

    b = sub.add_parser("build", help="generate the dataset files and manifest (deterministic from --seed)")
    b.add_argument("--out", default="datasets", help="output directory (default: datasets)")
    b.add_argument("--seed", type=int, help="dataset seed (default: the settings' seed)")
    common(b)
    b.set_defaults(func=cmd_build)

    v = sub.add_parser("verify", help="rebuild from the manifest's seed and check every file byte for byte")
    v.add_argument("--dir", default="datasets", help="dataset directory (default: datasets)")
    common(v)
    v.set_defaults(func=cmd_verify)

    s = sub.add_parser("stats", help="token-length and arrival statistics (optionally plotted to PNG)")
    s.add_argument("--dir", default="datasets", help="dataset directory (default: datasets)")
    s.add_argument("--queue", choices=QUEUE_KINDS, default="burst", help="queue whose calls give the lengths")
    s.add_argument("--limit", type=int, help="rebuild only every k-th queue item so about this many are used")
    s.add_argument("--plot", metavar="PNG", help="also write the distributions to this PNG file")
    s.add_argument("--json", action="store_true", help="print JSON instead of tables")
    common(s)
    s.set_defaults(func=cmd_stats)


def cmd_build(args: argparse.Namespace) -> int:
    settings = load_settings(args.config)
    seed = settings.seed if args.seed is None else args.seed
    if seed < 0:
        raise UserError(f"--seed: must be a non-negative integer (got {seed})")
    check_output(args.out, "--out", is_dir=True)
    files = write_dataset(args.out, settings, seed)
    for name, data in files.items():
        print(f"wrote {Path(args.out) / name} ({len(data):,} bytes)")
    print(f"seed {seed}; check with: slabench dataset verify --dir {args.out}")
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    for line in verify_dataset(resolve_dir(args.dir), load_settings(args.config)):
        print(line)
    print("dataset verified: every file is byte-identical to a fresh build")
    return 0


def cmd_stats(args: argparse.Namespace) -> int:
    from slabench.workload.stats import ESTIMATOR, arrival_stats, length_stats  # numpy only when needed

    settings = load_settings(args.config)
    d = resolve_dir(args.dir)
    if args.limit is not None and args.limit <= 0:
        raise UserError(f"--limit: must be a positive number of items (got {args.limit})")
    if args.plot:
        check_output(args.plot, "--plot")  # before the work, not after it
        require("matplotlib", "--plot")
    queues: dict[str, list[QueueItem]] = {kind: load_queue(d, kind, settings) for kind in QUEUE_KINDS}
    golden = load_golden(d, settings)
    items = queues[args.queue]
    step = max(1, len(items) // args.limit) if args.limit else 1
    calls = [build_item(q, settings) for q in items[::step]]
    duration = settings.queue.duration_s
    report: dict[str, Any] = {
        "dataset": str(d),
        "token_estimator": ESTIMATOR,
        "length_source": f"{len(calls)} calls rebuilt from queue_{args.queue}"
        + (f" (every {step}th)" if step > 1 else ""),
        "lengths": [asdict(s) for s in length_stats(calls, settings)],
        "golden": [asdict(s) for s in length_stats(golden, settings)],
        "arrivals": {kind: asdict(arrival_stats(q, duration)) for kind, q in queues.items()},
    }
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(_format(report))
    if args.plot:
        from slabench.workload.plots import plot_stats

        plot_stats(queues, calls, settings, args.plot)
        print(f"wrote {args.plot}")
    return 0


def _pct(d: dict[str, float] | None) -> str:
    if d is None:
        return "no data"
    return " / ".join(f"{v:,.0f}" for v in d.values())


def _format(r: dict[str, Any]) -> str:
    out = [f"dataset {r['dataset']}", f"token counts: {r['token_estimator']}", f"lengths from {r['length_source']}", ""]
    head = f"{'account':8} {'n':>6}  {'prompt verbose p10/p50/p90/p99':>32}  {'prompt terse':>28}  "
    head += f"{'output verbose':>24}  {'output terse':>20}  {'transcript':>26}"
    for title, rows in (("queue calls", r["lengths"]), ("golden calls", r["golden"])):
        out += [title, head]
        for s in rows:
            out.append(
                f"{s['account']:8} {s['items']:>6}  {_pct(s['prompt_tokens']['verbose']):>32}  "
                f"{_pct(s['prompt_tokens']['terse']):>28}  {_pct(s['output_tokens']['verbose']):>24}  "
                f"{_pct(s['output_tokens']['terse']):>20}  {_pct(s['transcript_tokens']):>26}"
            )
        out.append("")
    out.append("arrivals (per-second counts over the window; 100 ms peak = busiest sliding 100 ms window)")
    for kind, a in r["arrivals"].items():
        if not a["count"]:
            out.append(f"{kind:6} no data")
            continue
        shares = ", ".join(f"{k} {v:.1%}" for k, v in a["account_shares"].items())
        out.append(
            f"{kind:6} n={a['count']:,} in [{a['min_offset_s']:.3f}, {a['max_offset_s']:.3f}] s, mean "
            f"{a['mean_rate']:.1f}/s; per second p50 {a['per_second_p50']:.0f}, p99 {a['per_second_p99']:.0f}, "
            f"max {a['per_second_max']}; 100 ms peak {a['peak_100ms_rate']:.0f} req/s; inter-arrival CV "
            f"{a['interarrival_cv']:.2f}; shares {shares}"
        )
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    """Run this command group alone (``python -m slabench.workload.cli``), before it is wired into `slabench`."""
    parser = argparse.ArgumentParser(prog="slabench")
    add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    try:
        code: int = args.func(args)
        return code
    except UserError as e:
        print(f"slabench: {e}", file=sys.stderr)
        return e.exit_code


__all__ = ["add_parser", "main"]

if __name__ == "__main__":
    sys.exit(main())
