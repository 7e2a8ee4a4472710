"""The key paths an upstream Helm chart's values accept, and a check of our values files against them.

Upstream charts we install but do not ship (GPU Operator, kube-prometheus-stack, Karpenter, KEDA, AWS Load Balancer
Controller) ignore a misspelled or moved key silently: the setting just does not happen. Their key paths, taken from
the charts' own default values.yaml at the pinned versions, are kept as data (tests/data/upstream_values/*.keys, one
JSON array per line, with the source in the header) and our values are checked against them offline.

    python -m slabench.deploy.values_keys extract values.yaml [--prefix grafana] > paths   # one chart's paths
    python -m slabench.deploy.values_keys check chart.keys our-values.yaml                   # exit 1 on unknown keys

A path ending in "*" is an open map in upstream's defaults (`{}`: labels, annotations, selectors, resources): any key
below it is accepted. A list or scalar default is a leaf: whatever we put there is the chart's to judge.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from slabench.core import yamlio

OPEN = "*"


def key_paths(values: Any, prefix: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    """Every key path of a values tree; empty maps end in OPEN."""
    if isinstance(values, dict):
        if not values and prefix:
            yield (*prefix, OPEN)
            return
        for key, sub in values.items():
            path = (*prefix, str(key))
            yield path
            yield from key_paths(sub, path)


def load_keys(path: Path) -> set[tuple[str, ...]]:
    """A .keys file: '#' comment lines (the source), then one JSON array of strings per line."""
    out = set()
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip() and not line.startswith("#"):
            item = json.loads(line)
            if not (isinstance(item, list) and all(isinstance(p, str) for p in item)):
                raise ValueError(f"{path}:{n}: expected a JSON array of strings")
            out.add(tuple(item))
    return out


def unknown_keys(ours: Any, known: set[tuple[str, ...]], prefix: tuple[str, ...] = ()) -> Iterator[str]:
    """Dotted paths in `ours` that the upstream chart does not have."""
    if not isinstance(ours, dict):
        return
    for key, sub in ours.items():
        path = (*prefix, str(key))
        if (*prefix, OPEN) in known:
            continue  # an open map: any key
        if path not in known:
            yield ".".join(path)
            continue
        if isinstance(sub, dict) and any(k[: len(path)] == path and len(k) > len(path) for k in known):
            yield from unknown_keys(sub, known, path)


def _extract(args: argparse.Namespace) -> int:
    data = yamlio.load_data(args.values) or {}
    prefix = tuple(args.prefix.split(".")) if args.prefix else ()
    for path in sorted(set(key_paths(data, prefix))):
        print(json.dumps(list(path)))
    return 0


def _check(args: argparse.Namespace) -> int:
    known = load_keys(Path(args.keys))
    bad = 0
    for f in args.values:
        for path in unknown_keys(yamlio.load_data(f) or {}, known):
            print(f"{f}: {path}: not a key of the chart ({args.keys})", file=sys.stderr)
            bad += 1
    return 1 if bad else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m slabench.deploy.values_keys", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("extract", help="print the key paths of a chart's values.yaml")
    e.add_argument("values")
    e.add_argument("--prefix", help="dotted prefix for a subchart's values, e.g. grafana")
    e.set_defaults(func=_extract)
    c = sub.add_parser("check", help="report keys of our values files that the chart does not have")
    c.add_argument("keys")
    c.add_argument("values", nargs="+")
    c.set_defaults(func=_check)
    args = parser.parse_args(argv)
    func: Callable[[argparse.Namespace], int] = args.func
    return func(args)


if __name__ == "__main__":
    sys.exit(main())
