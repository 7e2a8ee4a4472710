"""`--processes` without --host (the README's distributed command): the master sends every worker a spawn message at
each step of the ramp-up (once a second at -r 1), and each worker must handle it without holding its event loop.
Locust's worker rebuilt its whole option parser once per option (~100) for every message: ~0.5 s of CPU each, 1–2 s on
a busy machine, where a worker that never caught up killed each spawning greenlet before it ran and made no request."""

from __future__ import annotations

import json
import os
from collections import defaultdict

from slabench.core.sinks import read_records
from tests.helpers.locust_run import assert_exit, run_locust


def test_workers_start_their_users_while_the_master_ramps_up(tmp_path) -> None:
    log = tmp_path / "spawn.jsonl"
    env = {**os.environ, "SLABENCH_TEST_SPAWN_LOG": str(log)}
    res = run_locust(
        "-f", "tests/locustfiles/spawn_count_user.py", "--processes", "2", "-u", "8", "-r", "1", "-t", "6s",
        "--records", str(tmp_path / "records.jsonl"), env=env,
    )  # fmt: skip
    assert_exit(res.returncode, tmp_path, 0, output=res.stderr)
    handled: dict[str, dict[str, int]] = defaultdict(dict)
    for line in log.read_text().splitlines():
        note = json.loads(line)
        handled[note.pop("worker")] = note  # the last note of each worker: its whole run
    assert len(handled) == 2, handled
    for worker, counts in handled.items():
        assert counts["spawn_messages"] >= 3, (worker, counts)  # a ramp-up: a message a second
        assert counts["parser_builds"] <= 1, (worker, counts)  # Locust's defaults, computed once
    # each worker started its users and they made requests (the embedded simulator answered them)
    made = {r.worker_id for r in read_records(tmp_path / "records.jsonl")}
    assert made == set(handled), (made, res.stderr[-3000:])
