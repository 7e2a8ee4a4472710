"""The 20,000-request grading queue: the end-of-shift burst, and a Gamma(k=0.25) renewal control.

Burst (docs/workload.md): each account's share of the total arrives as batch uploads. Batch sizes ~
LogNormal(ln 25, 0.9) clipped to [1, 500]; a batch starts at a time drawn from the account's end-of-shift envelope
(Gaussian bumps) or, with probability `baseline_share`, uniformly over the window; inside a batch the gaps are
exponential at `within_batch_rate`. A batch that would run past the window's end starts earlier, so all arrivals stay in
[0, duration) and each batch stays whole.

Control: Gamma renewal with shape k = `gamma_shape` at the same mean rate — what ``vllm bench serve --burstiness``
draws. The N gaps are scaled so the N arrivals fill [0, duration) exactly (an (N+1)-th gap closes the window);
accounts are assigned by an exact shuffle of the same per-account counts.

Every item carries its own seed, from which its transcript and prompt are rebuilt on demand (`build_item`), so the
queue's 20,000 calls are 20,000 different calls, not the 250 golden ones repeated.
"""

from __future__ import annotations

import hashlib
import math
import random
from collections.abc import Sequence
from typing import Literal

from slabench.core.errors import UserError
from slabench.core.queue import QueueItem
from slabench.workload.accounts import Bump, Queue, WorkloadSettings

QueueKind = Literal["burst", "gamma"]
QUEUE_KINDS: tuple[QueueKind, ...] = ("burst", "gamma")
SEED_BITS = 48  # item seeds: unique, and short enough to keep the CSV small


def queue_kind(name: str) -> QueueKind:
    """`name` as a queue kind (options from the command line or the web UI arrive as text)."""
    for kind in QUEUE_KINDS:
        if name == kind:
            return kind
    raise UserError(f"queue: unknown queue kind {name!r} (use one of: {', '.join(QUEUE_KINDS)})")


def derive_seed(seed: int, label: str) -> int:
    """A 64-bit seed for one named stream of the dataset (stable across Python versions and platforms)."""
    return int.from_bytes(hashlib.sha256(f"{seed}/{label}".encode()).digest()[:8], "big")


def account_counts(settings: WorkloadSettings, total: int) -> dict[str, int]:
    """Split `total` by share with the largest-remainder method: exact, and within one of share × total."""
    raw = {k: a.share * total for k, a in settings.accounts.items()}
    counts = {k: math.floor(v) for k, v in raw.items()}
    rest = total - sum(counts.values())
    for k in sorted(raw, key=lambda k: (counts[k] - raw[k], k))[:rest]:
        counts[k] += 1
    return counts


def _batch_start(bumps: Sequence[Bump], q: Queue, rng: random.Random) -> float:
    if rng.random() < q.baseline_share:
        return rng.uniform(0.0, q.duration_s)
    bump = rng.choices(bumps, weights=[b.weight for b in bumps])[0]
    while True:  # the envelope is truncated to the window
        t = rng.gauss(bump.center_s, bump.sd_s)
        if 0.0 <= t < q.duration_s:
            return t


def burst_arrivals(settings: WorkloadSettings, rng: random.Random) -> list[tuple[float, str]]:
    """(offset seconds, account) for every arrival of the burst queue, unsorted."""
    q = settings.queue
    lo, hi = q.batch_clip
    out: list[tuple[float, str]] = []
    for key, n_left in account_counts(settings, q.total).items():
        bumps = settings.accounts[key].envelope
        while n_left > 0:
            size = min(
                n_left, int(min(hi, max(lo, round(rng.lognormvariate(math.log(q.batch_median), q.batch_log_sd)))))
            )
            rel = [0.0]
            for _ in range(size - 1):
                rel.append(rel[-1] + rng.expovariate(q.within_batch_rate))
            start = _batch_start(bumps, q, rng)
            start = max(0.0, min(start, q.duration_s - rel[-1] - 1e-3))  # keep the whole batch in the window
            out.extend((start + r, key) for r in rel)
            n_left -= size
    return out


def gamma_arrivals(settings: WorkloadSettings, rng: random.Random) -> list[tuple[float, str]]:
    """(offset seconds, account) for the Gamma(k) renewal control, same count and window as the burst."""
    q = settings.queue
    gaps = [rng.gammavariate(q.gamma_shape, 1.0) for _ in range(q.total + 1)]
    scale = (q.duration_s - 1e-3) / math.fsum(gaps)
    times, t = [], 0.0
    for g in gaps[:-1]:
        t += g
        times.append(t * scale)
    accounts = [k for k, n in account_counts(settings, q.total).items() for _ in range(n)]
    rng.shuffle(accounts)
    return list(zip(times, accounts, strict=True))


def build_queue(
    settings: WorkloadSettings, seed: int, kind: QueueKind, taken: set[int] | None = None
) -> list[QueueItem]:
    """The queue `kind` for dataset `seed`. `taken` holds seeds already used (golden calls, the other queue) and
    gains this queue's, so no call appears twice anywhere in the dataset."""
    rng = random.Random(derive_seed(seed, f"queue/{kind}/arrivals"))
    arrivals = burst_arrivals(settings, rng) if kind == "burst" else gamma_arrivals(settings, rng)
    # round to the microsecond first: the file stores 6 decimals and must be sorted as stored
    rows = sorted((round(t, 6), acct) for t, acct in arrivals)
    seeds = random.Random(derive_seed(seed, f"queue/{kind}/seeds"))
    taken = set() if taken is None else taken
    items = []
    for i, (t, acct) in enumerate(rows):
        s = seeds.getrandbits(SEED_BITS)
        while s in taken:
            s = seeds.getrandbits(SEED_BITS)
        taken.add(s)
        items.append(QueueItem(index=i, offset_s=t, account=acct, seed=s, kind=kind))
    return items
