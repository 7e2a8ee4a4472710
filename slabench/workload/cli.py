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
from slabench.core.textcols import aligned, pack, terminal_width
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
        print(_format(report, terminal_width()))
    if args.plot:
        from slabench.workload.plots import plot_stats

        plot_stats(queues, calls, settings, args.plot)
        print(f"wrote {args.plot}")
    return 0


_MEASURES = (("prompt verbose", "prompt_tokens", "verbose"), ("prompt terse", "prompt_tokens", "terse"),
             ("output verbose", "output_tokens", "verbose"), ("output terse", "output_tokens", "terse"),
             ("transcript", "transcript_tokens", None))  # fmt: skip


def _pcts(s: dict[str, Any], key: str, task: str | None) -> list[str]:
    d = s[key][task] if task else s[key]
    return [f"{v:,.0f}" for v in d.values()] if d is not None else ["no data", "", "", ""]


def _format(r: dict[str, Any], width: int = 80) -> str:
    """Token lengths per account, two measures side by side (p10 / p50 / p90 / p99 each), then the arrivals: every
    figure whole at 80 columns."""
    out = [f"dataset {r['dataset']}", *pack(["token counts:", *r["token_estimator"].split()], width, sep=" ")]
    out += [f"lengths from {r['length_source']}", ""]
    for title, rows in (("queue calls", r["lengths"]), ("golden calls", r["golden"])):
        out.append(f"{title}: tokens per call")
        for pair in (_MEASURES[0:2], _MEASURES[2:4], _MEASURES[4:5]):
            head = ["account", "n", *(("p10", "p50", "p90", "p99") * len(pair))]
            body = [[s["account"], f"{s['items']:,}", *(c for _, k, t in pair for c in _pcts(s, k, t))] for s in rows]
            lines = aligned([head, *body], right=range(1, len(head)))
            widths = [max(len(row[i]) for row in (head, *body)) for i in range(len(head))]
            starts = [sum(widths[:i]) + 2 * i for i in range(2, len(head), 4)]
            names = ""
            for (name, *_), at in zip(pair, starts, strict=True):  # each measure's name over its four columns
                names = names.ljust(at) + name
            out += [names, *lines, ""]
    out.append("arrivals (per-second counts; 100 ms peak = the busiest sliding 100 ms window)")
    for kind, a in r["arrivals"].items():
        if not a["count"]:
            out.append(f"{kind:6} no data")
            continue
        parts = [
            f"{kind} n={a['count']:,} in [{a['min_offset_s']:.3f}, {a['max_offset_s']:.3f}] s",
            f"mean {a['mean_rate']:.1f}/s",
            f"per second p50 {a['per_second_p50']:.0f}, p99 {a['per_second_p99']:.0f}, max {a['per_second_max']}",
            f"100 ms peak {a['peak_100ms_rate']:.0f} req/s",
            f"inter-arrival CV {a['interarrival_cv']:.2f}",
            "shares " + ", ".join(f"{k} {v:.1%}" for k, v in a["account_shares"].items()),
        ]
        out += pack(parts, width)
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
