"""How long does `slabench plan` take for every built-in GPU profile on the default burst? Prints wall and CPU time.

Runs `slabench plan` as a user does (a fresh process, the example contract, the 20,000-request burst, all built-in
profiles, 2 worker processes), twice by default: once with an empty length cache (the 20,000 calls rebuilt from their
seeds, a one-time cost per dataset) and once warm. The machine's load average is printed with each figure: on a
shared machine the wall time stretches while the CPU time stays.

With `--autoscale` (and `--cache-tier`), `slabench plan --autoscale`: the same plan, then each profile's burst
on a fleet the chart's rule scales (warm replicas, one fewer) and its day three ways; per profile it prints the
warm replicas and the seconds the autoscaled part took.

    python benchmarks/plan_speed.py [--warm-only] [--balancer round-robin|least-outstanding] [--jobs 2]
                                    [--autoscale [--cache-tier nvme|s3|hf]]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_plan(cache: str, out: str, balancer: str, jobs: int, extra: list[str]) -> tuple[float, float, dict]:
    env = {**os.environ, "XDG_CACHE_HOME": cache}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    res = subprocess.run(
        [sys.executable, "-m", "slabench", "plan", "--out", out, "--balancer", balancer, "--jobs", str(jobs), *extra],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if res.returncode not in (0, 2):
        sys.exit(f"slabench plan failed ({res.returncode}):\n{res.stderr[-3000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, json.loads((Path(out) / "plan.json").read_text())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--warm-only", action="store_true", help="skip the cold run (lengths cache already built)")
    ap.add_argument("--balancer", default="round-robin", choices=("round-robin", "least-outstanding"))
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--autoscale", action="store_true", help="plan --autoscale: the fleet in time as well")
    ap.add_argument("--cache-tier", default="s3", choices=("nvme", "s3", "hf"))
    args = ap.parse_args()
    extra = ["--autoscale", "--cache-tier", args.cache_tier] if args.autoscale else []
    with tempfile.TemporaryDirectory() as tmp:
        cache = os.environ.get("XDG_CACHE_HOME", "") if args.warm_only else str(Path(tmp) / "cache")
        rounds = ["warm"] if args.warm_only else ["cold", "warm"]
        for name in rounds:
            load = os.getloadavg()[0]
            wall, cpu, plan = run_plan(
                cache or str(Path.home() / ".cache"), str(Path(tmp) / name), args.balancer, args.jobs, extra
            )
            print(
                f"{name}: {wall:.1f} s wall, {cpu:.1f} s CPU (load average {load:.1f} at start, {os.cpu_count()} CPUs)"
            )
        # at 80 columns: a header, then a row per profile
        print(f"  {'profile':<24}  {'replicas (90 %)':<15} {'planned':>7} {'$/h':>8} {'fleets':>6} {'s':>6}")
        for p in plan["profiles"]:
            iv = p.get("replicas_90") or {}
            low, high = iv.get("low") or "?", iv.get("high") or "none"
            replicas = f"{p['replicas']} ({low}–{high})" if p["replicas"] else "none"
            cost = p.get("cost", {}).get("usd_per_hour") or 0
            print(
                f"  {p['gpu']:<24}  {replicas:<15} {p.get('planned_replicas') or '-':>7} {cost:>8,.2f}"
                f" {len(p['probes']):>6} {p['search_seconds']:>6.1f}"
            )
        if args.autoscale:
            scaled = json.loads((Path(tmp) / name / "autoscale.json").read_text())
            day_head = "day: always-on / scaled / to zero"
            print(f"  {'profile':<24}  {'warm':>4} {'probes':>6}  {day_head:<33} {'s':>4}")
            for p in scaled["profiles"]:
                day = p["day"]
                usd = " / ".join(f"${day[m]['usd']:,.0f}" for m in ("always-on", "autoscaled", "scale-to-zero"))
                warm, probes = p["warm_replicas"], len(p["probes"])
                print(f"  {p['gpu']:<24}  {warm!s:>4} {probes:>6}  {usd:<33} {p['seconds']:>4.1f}")


if __name__ == "__main__":
    main()
