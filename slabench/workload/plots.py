"""`slabench dataset stats --plot`: the dataset's distributions in one PNG (matplotlib, no display needed)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # before pyplot: render to files, never to a screen
import matplotlib.pyplot as plt

from slabench.core.queue import QueueItem
from slabench.workload.accounts import WorkloadSettings
from slabench.workload.prompts import prompt_tokens
from slabench.workload.stats import ESTIMATOR, per_second_counts
from slabench.workload.transcripts import GradingItem


def plot_stats(
    queues: Mapping[str, Sequence[QueueItem]],
    calls: Sequence[GradingItem],
    settings: WorkloadSettings,
    path: str | Path,
) -> None:
    fig, ax = plt.subplots(2, 2, figsize=(13, 8.5))
    duration = settings.queue.duration_s
    for kind, items in queues.items():
        counts = per_second_counts([q.offset_s for q in items], duration)
        ax[0, 0].step(range(len(counts)), counts, where="post", label=f"{kind} ({len(items):,})", lw=1)
    ax[0, 0].set(title="arrivals per second", xlabel="seconds into the window", ylabel="requests")
    ax[0, 0].legend()

    accounts = list(settings.accounts)
    by_acct = {a: [c for c in calls if c.account == a] for a in accounts}
    for axis, title, value in (
        (ax[0, 1], "prompt tokens (verbose task)", lambda c: prompt_tokens(c, "verbose", settings)),
        (ax[1, 0], "verbose answer tokens (target)", lambda c: c.output_tokens("verbose")),
        (ax[1, 1], "transcript tokens", lambda c: c.transcript_tokens),
    ):
        data = [[value(c) for c in by_acct[a]] or [0] for a in accounts]
        axis.boxplot(data, whis=(1, 99), showfliers=False)
        axis.set_xticks(range(1, len(accounts) + 1), [f"{a}\n{settings.accounts[a].vertical}" for a in accounts])
        axis.set(title=f"{title}, p1–p99 whiskers", ylabel="tokens")
    fig.suptitle(f"retail QA-grading dataset — tokens by {ESTIMATOR.split(' (')[0]}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
