"""Scheduled items for the open-loop shapes: queue rows or generated arrivals → `OpenLoopItem`s. Pure."""

from __future__ import annotations

from collections.abc import Sequence

from slabench.core.queue import QueueItem
from slabench.core.record import StageUnit, stage_fields
from slabench.locust.openloop import OpenLoopItem
from slabench.shapes.schedules import Arrival, check_positive, stride_indices


def burst_items(
    rows: Sequence[QueueItem], time_scale: float = 1.0, stride: int = 0, repeat: int = 0
) -> list[OpenLoopItem]:
    """The rows a replay sends (every stride-th, see `stride_indices`) with due = offset / time_scale; stamped
    stage_repeat = repeat, stage_phase = "hold"."""
    check_positive(time_scale, "--burst-time-scale")
    out = []
    for i in stride_indices(len(rows), time_scale, stride):
        r = rows[i]
        out.append(
            OpenLoopItem(
                index=r.index,
                due=r.offset_s / time_scale,
                offset_s=r.offset_s,
                account=r.account,
                item_id=r.item_id,
                seed=r.seed,
                kind=r.kind,
                prompt_tokens=r.prompt_tokens,
                output_tokens=r.output_tokens,
                prefix_blocks=r.prefix_blocks,
                **stage_fields(None, None, repeat, "hold"),
            )
        )
    return out


def arrival_items(arrivals: Sequence[Arrival], kind: str) -> list[OpenLoopItem]:
    """Generated arrivals, stamped with their span's stage: its rate (stage_unit milli_rps), repeat and phase."""
    return [
        OpenLoopItem(
            index=i,
            due=a.offset,
            offset_s=a.offset,
            item_id=f"{kind}-{i:06d}",
            kind=kind,
            **stage_fields(a.span.level, StageUnit.MILLI_RPS, a.span.repeat, a.span.phase),
        )
        for i, a in enumerate(arrivals)
    ]
