"""Burst replay: the 20,000-request / 195 s grading queue, each request sent at its offset whatever is in flight.

    locust -f locustfiles/chat_replay.py,shapes/burst.py --headless                      # the dataset's burst queue
    locust -f locustfiles/chat_replay.py,shapes/burst.py --headless --burst-queue q.csv  # any sorted queue file
    locust -f locustfiles/chat_replay.py,shapes/burst.py --headless --burst-queue mooncake.jsonl  # a public trace
    ... --burst-time-scale 10        # 10× faster over every 10th item: the same request rate, 1/10 of the time

Open loop (slabench/locust/openloop.py): with N workers the queue is split so every item is sent exactly once, against
one start time. Each record carries `scheduled` and `sent` (lateness = sent − scheduled), the item id and account, and
stage_repeat = --burst-repeat, stage_phase = "hold".
"""

from __future__ import annotations

from typing import Any

from slabench.core.queue import add_queue_file_options, parse_window, read_queue_file
from slabench.shapes.base import OpenLoopShape, Plan, install, open_loop_user_class, opt_float, opt_int
from slabench.shapes.items import burst_items
from slabench.shapes.schedules import Span, check_int, check_positive


class BurstShape(OpenLoopShape):
    alias = "burst"

    @classmethod
    def add_options(cls, parser: Any) -> None:
        g = parser.add_argument_group("slabench shape: burst replay (shapes/burst.py)")
        g.add_argument("--burst-queue", default="", help="queue file (CSV/JSONL with offset_s); default: the dataset's")
        add_queue_file_options(g, "--burst-queue")
        g.add_argument("--burst-dataset-dir", default="datasets", help="dataset directory (without --burst-queue)")
        g.add_argument("--burst-kind", choices=["burst", "gamma"], default="burst", help="which dataset queue")
        g.add_argument(
            "--burst-time-scale", type=float, default=1.0, help="replay this many times faster (e.g. 10 or 0.5)"
        )
        g.add_argument(
            "--burst-stride",
            type=int,
            default=0,
            help="send every n-th item (0 = round(time scale), which keeps the request rate)",
        )
        g.add_argument("--burst-repeat", type=int, default=0, help="stage_repeat stamped on the records")

    def build(self, opts: Any, environment: Any) -> Plan:
        scale = check_positive(opt_float(opts, "burst_time_scale"), "--burst-time-scale")
        stride = check_int(opt_int(opts, "burst_stride"), "--burst-stride", 0)
        repeat = check_int(opt_int(opts, "burst_repeat"), "--burst-repeat", 0)
        user_class = open_loop_user_class(environment)
        if opts.burst_queue:
            window = parse_window(str(getattr(opts, "queue_window", "") or ""))
            fmt, block = str(getattr(opts, "queue_format", "auto")), opt_int(opts, "queue_block_tokens")
            rows, source = read_queue_file(opts.burst_queue, fmt, window, block), str(opts.burst_queue)
        else:
            from slabench.workload import load_queue, queue_kind  # the dataset's queue, checked against its manifest

            kind = queue_kind(str(opts.burst_kind))
            rows, source = load_queue(opts.burst_dataset_dir, kind), f"{opts.burst_dataset_dir} ({kind})"
        items = burst_items(rows, scale, stride, repeat)
        end = items[-1].due
        span = Span(0.0, end, None, repeat, "hold")
        text = f"{len(items)} of {len(rows)} queued requests from {source} over {end:.1f} s (time scale {scale:g})"
        return Plan(spans=(span,), level_unit=None, items=tuple(items), user_class=user_class, end=end, text=text,
                    source=source)  # fmt: skip


install(BurstShape)
