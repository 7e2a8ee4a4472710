"""What a plan replays: when requests arrive (a queue, a rate, a day, or closed-loop users) and how long each one is.

Lengths are the QA-grading workload's: a queue row with an account and a seed is that call rebuilt
(`slabench.workload.build_item`): prompt tokens as the simulator counts them (`prompt_tokens`: system prompt +
transcript), output tokens = the task's answer length, the account's system prompt as the shared prefix (the
simulator keys its prefix cache on the system message, as vLLM would hit on it). Arrivals that are not calls of the
dataset (a rate, a day, a queue file without seeds, closed-loop users) take the burst queue's calls in turn, so every
load has the same request mix.

Rebuilding 20,000 calls takes 7–40 s on this machine, so their lengths are cached per (queue file, workload settings,
task) under ``$XDG_CACHE_HOME/slabench`` (default ``~/.cache/slabench``), built once on both cores.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import zipfile
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from slabench.core.errors import UserError
from slabench.core.queue import QueueItem
from slabench.sim.engine import SimRequest

LOADS = ("burst", "gamma", "queue", "rate", "diurnal", "steps")


@dataclass(frozen=True)
class Mix:
    """Per-request lengths, indexable: request i is SimRequest built from row i."""

    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    prefix_tokens: np.ndarray
    accounts: tuple[str, ...]  # prefix key per row
    max_tokens: int
    source: str

    def __len__(self) -> int:
        return len(self.prompt_tokens)

    def request(self, request_id: str, row: int) -> SimRequest:
        row %= len(self.prompt_tokens)
        prefix = int(self.prefix_tokens[row])
        return SimRequest(
            request_id,
            int(self.prompt_tokens[row]),
            self.max_tokens,
            int(self.output_tokens[row]),
            prefix_key=self.accounts[row] if prefix else None,
            prefix_tokens=prefix,
        )


@dataclass(frozen=True)
class PlannedLoad:
    """Open loop: `offsets` (seconds, sorted) with the mix row of each. Closed loop: `users` for `duration_s` (or
    until `max_requests` were sent); the n-th request sent takes mix row n."""

    name: str
    description: str
    mix: Mix
    offsets: np.ndarray | None = None
    rows: np.ndarray | None = None
    users: int | None = None
    duration_s: float | None = None
    max_requests: int | None = None  # closed loop: users stop once this many were sent (a sweep's `requests:`)
    # closed loop: after the n-th request sent ends, its user waits after_s[n] before its next (a measured run's own
    # gaps, replayed by calibrate: a starved client idles between requests the server could have served)
    after_s: np.ndarray | None = None

    @property
    def open_loop(self) -> bool:
        return self.offsets is not None

    @property
    def requests(self) -> int | None:
        return len(self.offsets) if self.offsets is not None else None

    @property
    def span_s(self) -> float:
        """Arrival window (open loop: first to last arrival) or the closed loop's duration."""
        if self.offsets is not None:
            return float(self.offsets[-1] - self.offsets[0]) if len(self.offsets) else 0.0
        return float(self.duration_s or 0.0)


def open_loop(name: str, description: str, mix: Mix, offsets: np.ndarray) -> PlannedLoad:
    """Arrivals at `offsets`, the n-th taking mix row n."""
    return PlannedLoad(name, description, mix, offsets=offsets, rows=np.arange(len(offsets)))


def capped_load(load: PlannedLoad, cap_s: float | None) -> PlannedLoad:
    """The load's first `cap_s` seconds (SLABENCH_MAX_RUN_S: a smoke run of a printed command); None: unchanged."""
    if cap_s is None:
        return load
    description = f"{load.description}, its first {cap_s:g} s only (SLABENCH_MAX_RUN_S)"
    if load.offsets is not None and load.rows is not None:
        keep = load.offsets < load.offsets[0] + cap_s if len(load.offsets) else slice(None)
        return replace(load, description=description, offsets=load.offsets[keep], rows=load.rows[keep])
    return replace(load, description=description, duration_s=min(load.duration_s or cap_s, cap_s))


# -- the request mix -------------------------------------------------------------------------------------------------
def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "slabench"


def _lengths(chunk: Sequence[tuple[str, int, float, int, str]], task: str) -> list[tuple[int, int]]:
    from slabench.workload import QueueItem, build_item, prompt_tokens

    out = []
    for account, seed, offset, index, kind in chunk:
        item = build_item(QueueItem(index=index, offset_s=offset, account=account, seed=seed, kind=kind))
        out.append((prompt_tokens(item, task), item.output_tokens(task)))  # type: ignore[arg-type]
    return out


def call_mix(
    calls: Sequence[tuple[str, int, float, int, str]], task: str, source: str, fingerprint: bytes, workers: int = 2
) -> Mix:
    """Lengths of the workload calls (account, seed, offset, index, kind), from the cache when it has them."""
    from slabench.core.tokens import estimate_tokens
    from slabench.workload import load_settings, system_prompt
    from slabench.workload.dataset import GENERATOR_VERSION, settings_fingerprint

    settings = load_settings()
    key = hashlib.sha256(
        fingerprint + f"|{settings_fingerprint(settings)}|{GENERATOR_VERSION}|{task}".encode()
    ).hexdigest()[:24]
    path = _cache_dir() / f"plan-mix-{key}.npz"
    lengths = None
    if path.exists():
        try:
            with np.load(path) as z:
                lengths = z["lengths"]
            # only what this function writes: a row of whole token counts per call, every prompt at least one
            ok = lengths.shape == (len(calls), 2) and lengths.dtype.kind in "iu"
            if not ok or (lengths[:, 0] < 1).any() or (lengths[:, 1] < 0).any():
                lengths = None
        except (OSError, ValueError, KeyError, zipfile.BadZipFile):  # a spoiled file: rebuilt below
            lengths = None
    if lengths is None:
        size = max(1, -(-len(calls) // (4 * workers)))
        chunks = [calls[i : i + size] for i in range(0, len(calls), size)]
        if workers > 1 and len(chunks) > 1:
            with ProcessPoolExecutor(workers) as pool:
                parts = list(pool.map(_lengths, chunks, [task] * len(chunks)))
        else:
            parts = [_lengths(c, task) for c in chunks]
        lengths = np.array([x for part in parts for x in part], dtype=np.int64).reshape(-1, 2)
        tmp = path.with_suffix(f".{os.getpid()}.tmp.npz")  # two plans at once never write the same file
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            np.savez(tmp, lengths=lengths)
            tmp.replace(path)
        except OSError:  # no cache: the next plan rebuilds them
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)  # a half-written one, named by this process's id, is nobody's
    system = {a: estimate_tokens(system_prompt(a, task)) for a in {c[0] for c in calls}}  # type: ignore[arg-type]
    accounts = tuple(f"{c[0]}/{task}" for c in calls)
    return Mix(
        prompt_tokens=lengths[:, 0],
        output_tokens=lengths[:, 1],
        prefix_tokens=np.array([system[c[0]] for c in calls], dtype=np.int64),
        accounts=accounts,
        max_tokens=settings.output.max_tokens,
        source=source,
    )


def dataset_load(dataset_dir: str | Path, kind: str, task: str, workers: int = 2) -> PlannedLoad:
    """The dataset's burst (or gamma control) queue: each row is its own call."""
    from slabench.workload import load_queue
    from slabench.workload.dataset import QUEUE_FILES, resolve_dir

    queue = load_queue(dataset_dir, kind)  # type: ignore[arg-type]
    path = resolve_dir(dataset_dir) / QUEUE_FILES[kind]
    mix = call_mix(_calls(queue), task, f"{path} ({task} task)", path.read_bytes(), workers)
    offsets = np.array([q.offset_s for q in queue])
    window = offsets[-1] if len(offsets) else 0.0
    return open_loop(kind, f"{kind} queue {path}: {len(queue):,} requests over {window:.0f} s", mix, offsets)


def _calls(rows: Sequence[QueueItem]) -> list[tuple[str, int, float, int, str]]:
    """The workload calls (account, seed, offset, index, kind) of queue rows that each name an account and a seed
    (the dataset's queues; a queue file whose every row does)."""
    calls = []
    for r in rows:
        assert r.account is not None and r.seed is not None  # checked by the caller
        calls.append((r.account, r.seed, r.offset_s, r.index, r.kind or "queue"))
    return calls


def read_queue(
    path: str | Path, fmt: str = "auto", window: str = "", block_tokens: int | None = None
) -> list[QueueItem]:
    """The queue file's rows (`slabench.core.queue`: slabench's own format or a public trace), errors naming
    --queue."""
    from slabench.core.queue import parse_window, read_queue_file

    return read_queue_file(path, fmt, parse_window(window), block_tokens, flag="--queue")


def shared_prefixes(rows: Sequence[QueueItem], block_tokens: int) -> tuple[np.ndarray, tuple[str, ...]]:
    """Per row: the prompt tokens it shares with another row of the trace, and the key the simulator's prefix cache
    knows them by — its longest run of leading blocks that another row starts with too. (The engine caches one
    prefix per key, not a tree of blocks: a row that continues a shorter shared run past it is keyed by the run.)"""
    counts: dict[int, int] = {}
    chains = []
    for r in rows:
        h, chain = 0, []
        for b in r.prefix_blocks:
            h = hash((h, b))
            chain.append(h)
            counts[h] = counts.get(h, 0) + 1
        chains.append(chain)
    tokens = np.zeros(len(rows), dtype=np.int64)
    keys = [""] * len(rows)
    for i, chain in enumerate(chains):
        k = next((k for k in range(len(chain), 0, -1) if counts[chain[k - 1]] > 1), 0)
        if k:
            tokens[i], keys[i] = k * block_tokens, f"trace-{chain[k - 1]}"
    return tokens, tuple(keys)


def queue_file_load(
    path: str | Path,
    task: str,
    burst_mix: Callable[[], Mix],
    max_tokens: int = 2048,
    workers: int = 2,
    fmt: str = "auto",
    window: str = "",
    block_tokens: int = 512,
) -> PlannedLoad:
    """A queue file (CSV/JSONL with offset_s, or a public trace). Lengths: its own prompt_tokens/output_tokens
    (max_tokens = `max_tokens`; a trace's shared blocks as shared prefixes, `shared_prefixes`); else, when every row
    has an account and a seed, those calls; else the burst's calls in turn (`burst_mix()` builds them)."""
    rows = read_queue(path, fmt, window, block_tokens)
    offsets = np.array([r.offset_s for r in rows])
    if rows[0].output_tokens is not None:  # then every row has both lengths (the parser checks)
        output = np.array([r.output_tokens for r in rows], dtype=np.int64)
        prefix_tokens, keys = shared_prefixes(rows, block_tokens)
        mix = Mix(
            prompt_tokens=np.array([r.prompt_tokens for r in rows], dtype=np.int64),
            output_tokens=output,
            prefix_tokens=prefix_tokens,
            accounts=keys,
            max_tokens=max(max_tokens, int(output.max())),
            source=f"{path} (its prompt_tokens/output_tokens)",
        )
        how = "its own lengths"
    elif all(r.account is not None and r.seed is not None for r in rows):
        mix = call_mix(_calls(rows), task, f"{path} ({task} task)", Path(path).read_bytes(), workers)
        how = f"its calls, {task} task"
    else:
        mix = burst_mix()
        how = "lengths: the burst's calls in turn"
    description = f"queue file {path}: {len(rows):,} requests over {offsets[-1] - offsets[0]:.0f} s ({how})"
    return open_loop("queue", description, mix, offsets)


MAX_PLANNED_REQUESTS = 2_000_000  # a load beyond this would take hours to replay and memory beyond a laptop's


def check_size(expected: float, what: str) -> None:
    """Refuse a load of more requests than the planner can replay, before its arrivals are drawn."""
    if expected > MAX_PLANNED_REQUESTS:
        raise UserError(
            f"{what}: about {expected:,.0f} requests, more than the planner replays ({MAX_PLANNED_REQUESTS:,}); "
            "lower the rate or the duration"
        )


def rate_load(mix: Mix, rate_rps: float, duration_s: float, burstiness: float = 1.0, seed: int = 0) -> PlannedLoad:
    """Gamma renewal arrivals at `rate_rps` for `duration_s` (Poisson at burstiness 1), like `vllm bench serve`."""
    from slabench.shapes.schedules import check_positive, rate_arrivals, step_plan

    check_positive(rate_rps, "--rate-rps")
    check_positive(duration_s, "--duration")
    check_size(rate_rps * duration_s, f"--rate-rps {rate_rps:g} × --duration {duration_s:g}")
    arrivals = rate_arrivals(step_plan([rate_rps], 0.0, duration_s), burstiness, seed)
    if not arrivals:
        raise UserError(f"--rate-rps {rate_rps:g} over --duration {duration_s:g} s gives no request; raise either")
    offsets = np.array([a.offset for a in arrivals])
    description = f"{rate_rps:g} req/s for {duration_s:g} s (burstiness {burstiness:g}, seed {seed})"
    return open_loop("rate", f"{description}: {len(offsets):,} requests", mix, offsets)


def diurnal_load(
    mix: Mix, peak_rps: float, day_minutes: float, days: int = 1, burstiness: float = 1.0, seed: int = 0
) -> PlannedLoad:
    """The office day of `shapes/diurnal.py` (night at zero, peaks at 10:30 and 14:30), compressed to minutes."""
    from slabench.shapes.schedules import OFFICE_DAY, Diurnal, check_positive

    check_positive(day_minutes, "--diurnal-day-minutes")
    check_positive(peak_rps, "--diurnal-peak-rps")
    check_size(peak_rps * day_minutes * 60.0 * days, f"--diurnal-peak-rps {peak_rps:g} over {days} day(s)")
    day = Diurnal(OFFICE_DAY, peak_rps, day_minutes * 60.0, days)
    offsets = np.array([a.offset for a in day.arrivals(burstiness, seed)])
    if not len(offsets):
        raise UserError("--diurnal-peak-rps: the day has no request; raise the peak rate or the day's length")
    description = f"office day at peak {peak_rps:g} req/s in {day_minutes:g} min × {days} day(s)"
    return open_loop("diurnal", f"{description}: {len(offsets):,} requests", mix, offsets)


def steps_load(mix: Mix, users: int, duration_s: float) -> PlannedLoad:
    """Closed loop: `users` clients, each sending its next call the moment the previous one finishes."""
    from slabench.shapes.schedules import check_int, check_positive

    check_int(users, "--users", 1)
    check_positive(duration_s, "--duration")
    return PlannedLoad(
        "steps",
        f"{users} closed-loop users for {duration_s:g} s (each sends its next request when the last one ends)",
        mix,
        users=users,
        duration_s=duration_s,
    )
