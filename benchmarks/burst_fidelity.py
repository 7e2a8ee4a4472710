"""Burst fidelity: replay the 20,000-request / 195 s queue open loop against the simulator and measure how faithfully
the requests went out: records = scheduled items, lateness (sent − scheduled) p50/p99/max, and achieved vs scheduled
requests per second.

    python benchmarks/burst_fidelity.py                      # the full burst, one Locust process
    python benchmarks/burst_fidelity.py --processes 2        # master + 2 workers
    python benchmarks/burst_fidelity.py --time-scale 10      # quick: every 10th item, 10× faster (same rate)
    python benchmarks/burst_fidelity.py --profile prof.svg   # py-spy flame graph of the (local) Locust process
    python benchmarks/burst_fidelity.py --workload qa --processes 2   # the real QA-grading user (~1,000-token
                                     # graded answers) against the embedded simulator Locust starts itself

The queue is the dataset's `queue_burst.csv` when it has been built (`slabench dataset build`), else the same queue
generated here from the workload recipe (`slabench.workload.queue.build_queue` with the dataset seed). Figures depend
on what else runs on the machine: the load average is printed with them.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import numpy as np
import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from slabench.core import metrics  # noqa: E402
from slabench.core.sinks import read_records  # noqa: E402
from slabench.locust.openloop import lateness_summary, per_second  # noqa: E402
from slabench.sim.cli import EMBEDDED_NICE  # noqa: E402


def queue_csv(out: Path) -> tuple[Path, str]:
    """The burst queue as a CSV file, and where it came from."""
    from slabench.core.errors import UserError
    from slabench.workload import load_queue, load_settings
    from slabench.workload.queue import build_queue

    try:
        items = load_queue("datasets", "burst")
        source = "datasets/queue_burst.csv"
    except UserError:
        settings = load_settings()
        items = build_queue(settings, settings.seed, "burst")
        source = f"generated (build_queue, seed {settings.seed}; the dataset is not built)"
    lines = ["index,account,offset_s,seed"] + [f"{q.index},{q.account},{q.offset_s:.6f},{q.seed}" for q in items]
    out.write_text("\n".join(lines) + "\n")
    return out, source


def free_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


def start_simulator(a: argparse.Namespace) -> tuple[subprocess.Popen, str]:
    argv = [sys.executable, "-m", "slabench", "simulate", "--port", "0", "--ttft", str(a.ttft), "--itl", str(a.itl)]
    argv += ["--output-tokens", str(a.output_tokens), "--stream-interval", str(a.stream_interval)]
    argv += ["--nice", str(a.sim_nice)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    line = proc.stdout.readline().strip()
    if not line.startswith("slabench simulator listening on "):
        proc.kill()
        raise SystemExit(f"simulator did not start: {line!r} {proc.stderr.read()}")
    return proc, line.rsplit(" ", 1)[-1]


class LoadSampler(threading.Thread):
    """Every second while the burst runs: the 1-minute load average, and the CPU time of each process in the Locust
    process tree (master, workers, scraper: the last sample of each is its total, to within a second)."""

    def __init__(self, root_pid: int) -> None:
        super().__init__(daemon=True)
        self.root_pid = root_pid
        self.samples: list[float] = []
        self.cpu: dict[int, float] = {}
        self.simulators: set[int] = set()  # an embedded simulator in the tree
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(1.0):
            self.samples.append(os.getloadavg()[0])
            try:
                root = psutil.Process(self.root_pid)
                for proc in [root, *root.children(recursive=True)]:
                    self.cpu[proc.pid] = sum(proc.cpu_times()[:2])
                    if "simulate" in proc.cmdline():
                        self.simulators.add(proc.pid)
            except psutil.Error:  # a process ended between listing and reading
                continue


def profile_top(path: Path, n: int = 20) -> dict[str, list[str]]:
    """Where the Locust processes' busy samples went: the share in which each function is on the stack
    (inclusive) or running itself (self). Idle samples (the event loop in epoll, thread-pool threads) and start-up
    imports are left out."""
    incl: Counter[str] = Counter()
    own: Counter[str] = Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if "_WorkerGreenlet.run" in stack or "_find_and_load" in stack:
            continue
        frames = [f for f in stack.split(";") if f and not f.startswith("process ")]
        if not frames:
            continue
        keys = []
        for frame in frames:
            name, _, where = frame.partition(" (")
            keys.append(f"{name} ({where.split(':')[0]})" if where else name)
        if keys[-1].startswith("Hub.run "):
            continue  # the event loop waiting in epoll: idle
        k = int(count)
        total += k
        own[keys[-1]] += k
        for key in set(keys):
            incl[key] += k

    def top(c: Counter[str]) -> list[str]:
        return [f"{v / total:6.1%}  {f}" for f, v in c.most_common(n)] if total else []

    return {"inclusive": top(incl), "self": top(own)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--time-scale", type=float, default=1.0)
    p.add_argument("--processes", type=int, default=0, help="Locust worker processes (0 = one local process)")
    p.add_argument("--max-in-flight", type=int, default=0)
    p.add_argument("--prompt-tokens", type=int, default=256, help="synthetic prompt length (chat replay user)")
    p.add_argument("--ttft", type=float, default=0.1)
    p.add_argument("--itl", type=float, default=0.01)
    p.add_argument("--output-tokens", type=int, default=64)
    p.add_argument("--stream-interval", type=int, default=1)
    p.add_argument("--per-chunk-usage", choices=["on", "off"], default="on")
    p.add_argument(
        "--sim-nice",
        type=int,
        default=EMBEDDED_NICE,
        help="the simulator's CPU niceness (default: as when Locust or a sweep starts it; 0 = same as Locust)",
    )
    p.add_argument(
        "--profile",
        default="",
        help="py-spy profile of the Locust processes: an SVG flame graph, or collapsed stacks (.txt) summarized here",
    )
    p.add_argument("--keep", default="", help="keep the records in this directory")
    p.add_argument(
        "--workload",
        choices=["chat", "qa"],
        default="chat",
        help="chat: chat replay against a simulator started here with the knobs above; qa: the QA-grading user "
        "(locustfiles/qa_grading.py) against the embedded simulator, with its defaults, as `locust` runs it",
    )
    a = p.parse_args()

    work = Path(a.keep) if a.keep else Path(tempfile.mkdtemp(prefix="burst-fidelity-"))
    work.mkdir(parents=True, exist_ok=True)
    queue, source = queue_csv(work / "queue.csv")
    sim, url = start_simulator(a) if a.workload == "chat" else (None, "")
    records_path = work / "records.jsonl"
    records_path.unlink(missing_ok=True)
    argv = [sys.executable, "-m", "locust", "--headless", "--only-summary"]
    if a.workload == "chat":
        argv += ["-f", "locustfiles/chat_replay.py,shapes/burst.py", "--host", url]
        argv += ["--prompt-tokens", str(a.prompt_tokens), "--max-tokens", "2048"]
    else:
        argv += ["-f", "locustfiles/qa_grading.py,shapes/burst.py"]  # no --host: the embedded simulator
    argv += ["--burst-queue", str(queue), "--burst-time-scale", str(a.time_scale)]
    argv += ["--records", str(records_path), "--open-loop-max-in-flight", str(a.max_in_flight)]
    argv += ["--per-chunk-usage", a.per_chunk_usage]
    argv += ["--run-id", "burst-fidelity", "--spool-dir", str(work / "spool")]
    if a.processes:
        port = free_port()  # not Locust's default 5557: other runs on the machine may hold it
        argv += ["--processes", str(a.processes), "--master-bind-host", "127.0.0.1"]
        argv += ["--master-bind-port", port, "--master-port", port]
    if a.profile:
        if not shutil.which("py-spy"):
            raise SystemExit("--profile needs py-spy (pip install py-spy)")
        fmt = ["-f", "raw"] if a.profile.endswith(".txt") else []
        argv = ["py-spy", "record", "--nonblocking", "-r", "100", *fmt, "-o", a.profile, "--subprocesses", "--", *argv]
    load_before = os.getloadavg()
    t_start = time.monotonic()
    locust = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    sampler = LoadSampler(locust.pid)
    sampler.start()
    try:
        _, stderr = locust.communicate()
    finally:
        sampler.stop.set()
        if sim is not None:
            sim_cpu = sum(psutil.Process(sim.pid).cpu_times()[:2])
            sim.terminate()
            sim.wait(10)
    if sim is None:  # the embedded simulator is in Locust's process tree
        sim_cpu = sum(v for pid, v in sampler.cpu.items() if pid in sampler.simulators)
    locust_cpu = sum(v for pid, v in sampler.cpu.items() if pid not in sampler.simulators)
    wall = time.monotonic() - t_start
    summary = [ln for ln in stderr.splitlines() if "open loop" in ln or "records →" in ln]
    if locust.returncode != 0:
        print(stderr[-3000:], file=sys.stderr)
        print(f"locust exited {locust.returncode}", file=sys.stderr)

    records = read_records(records_path)
    status_path = records_path.parent / "run_status.json"
    status = json.loads(status_path.read_text()) if status_path.exists() else {}
    scheduled_n = sum(1 for _ in queue.open()) - 1
    stride = max(1, round(a.time_scale))
    expected = len(range(0, scheduled_n, stride))
    offsets = np.array([float(ln.split(",")[2]) for ln in queue.read_text().splitlines()[1:]])[::stride] / a.time_scale
    sent = [r for r in records if r.sent is not None]
    late = [x for x in (metrics.lateness(r) for r in sent) if x is not None]
    ls = lateness_summary(late)
    duration = float(offsets[-1]) + 1.0
    # The run's zero on the monotonic clock: each record's scheduled time minus its item's due offset.
    due = {f"queue-{i:05d}": off for i, off in zip(range(0, scheduled_n, stride), offsets, strict=True)}
    zero = float(np.median([r.scheduled - due[r.item_id] for r in records if r.item_id in due and r.scheduled]))
    sched_ps = per_second(offsets, duration)
    sent_ps = per_second([r.sent - zero for r in sent], duration)
    diff = sent_ps - sched_ps
    ids = Counter(r.item_id for r in records)
    out = {
        "queue": source,
        "time_scale": a.time_scale,
        "processes": a.processes or 1,
        "scheduled": expected,
        "records": len(records),
        "distinct_items": len(ids),
        "duplicates": sum(1 for n in ids.values() if n > 1),
        "outcomes": dict(Counter(str(r.error_category or r.outcome) for r in records)),
        "lateness_ms": {k: round(v * 1e3, 2) for k, v in ls.items() if k != "n"} if ls else None,
        "late_over_20ms": sum(1 for x in late if x > 0.020),
        "rate_per_s": {
            "scheduled_peak": int(sched_ps.max()),
            "achieved_peak": int(sent_ps.max()),
            "max_abs_diff": int(np.abs(diff).max()),
            "seconds_off_by_more_than_1pct_of_peak": int((np.abs(diff) > 0.01 * sched_ps.max()).sum()),
            "correlation": round(float(np.corrcoef(sched_ps, sent_ps)[0, 1]), 5),
        },
        "wall_s": round(wall, 1),
        "cpu_s": {"locust_all_processes": round(locust_cpu, 1), "simulator": round(sim_cpu, 1)},
        "cpu_ms_per_request": {
            "locust_all_processes": round(locust_cpu / max(1, len(sent)) * 1e3, 2),
            "simulator": round(sim_cpu / max(1, len(sent)) * 1e3, 2),
        },
        "run_status": {
            k: status.get(k)
            for k in ("incomplete_reasons", "workers_missing_then_back", "max_heartbeat_gap_s", "accounting")
        },
        "load_avg_1m": {
            "before": round(load_before[0], 2),
            "during_mean": round(float(np.mean(sampler.samples)), 2) if sampler.samples else None,
            "during_max": round(max(sampler.samples), 2) if sampler.samples else None,
        },
        "workload": a.workload,
        "sim": {
            "ttft": a.ttft,
            "itl": a.itl,
            "output_tokens": a.output_tokens,
            "stream_interval": a.stream_interval,
            "nice": a.sim_nice,
        }
        if a.workload == "chat"
        else "embedded, --sim-* defaults",
        "locust_summary": summary,
    }
    if a.profile.endswith(".txt"):
        out["profile_top"] = profile_top(Path(a.profile))
    print(json.dumps(out, indent=2))
    print(f"records in {work}" if a.keep else "", end="")
    if not a.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if locust.returncode == 0 and len(records) == expected else 1


if __name__ == "__main__":
    raise SystemExit(main())
