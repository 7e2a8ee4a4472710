"""The shapes from Locust's web UI: picked in the class picker, parameters from the form (as the browser sends them),
two tests in one session, and a bad parameter reported without starting any load."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections import Counter

from slabench.core.sinks import read_records
from tests.helpers.locust_run import ROOT, scrape
from tests.helpers.ports import free_port
from tests.integration.test_shapes_burst import small_queue


def post(url: str, form: dict) -> dict:
    data = urllib.parse.urlencode(form).encode()
    return json.loads(urllib.request.urlopen(url, data=data, timeout=10).read())


def get_json(url: str) -> dict:
    return json.loads(urllib.request.urlopen(url, timeout=10).read())


def wait_state(web: str, states: set[str], timeout: float = 60) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            if get_json(f"{web}/stats/requests")["state"] in states:
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"web UI never reached {states}")


def test_shapes_run_from_the_web_ui(simulator, tmp_path):
    url = simulator("--ttft", "0.02", "--itl", "0.002", "--output-tokens", "8")
    queue = small_queue(tmp_path / "q.csv", [i * 0.01 for i in range(100)])
    records_path = tmp_path / "records.jsonl"
    port = free_port()
    web = f"http://127.0.0.1:{port}"
    argv = [sys.executable, "-m", "locust", "-f", "locustfiles/chat_replay.py,shapes/burst.py,shapes/steps.py"]
    argv += ["--class-picker", "--web-host", "127.0.0.1", "--web-port", port, "--host", url]
    argv += ["--records", str(records_path), "--append", "--prompt-tokens", "16"]  # both tests in one file
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_state(web, {"ready"})
        common = {"user_classes": "ChatReplayUser", "host": url, "user_count": "1", "spawn_rate": "1"}
        # a burst, 2× faster over every 2nd item
        form = common | {"shape_class": "BurstShape", "burst_queue": str(queue), "burst_time_scale": "2"}
        assert post(f"{web}/swarm", form)["success"]
        wait_state(web, {"stopped"})
        time.sleep(1)  # "stopped" shows while the test_stop listeners still run; Locust refuses a new shape until then
        # then concurrency steps in the same session
        form = common | {"shape_class": "StepsShape", "steps_levels": "2", "steps_warmup": "0.5"}
        assert post(f"{web}/swarm", form | {"steps_hold": "1.5", "steps_cooldown": "0"})["success"]
        wait_state(web, {"spawning", "running"})
        wait_state(web, {"stopped"})
        time.sleep(1)
        # a bad level: an error in the log, no load
        before = scrape(url)["slabench_sim_requests_received_total"]
        post(f"{web}/swarm", common | {"shape_class": "StepsShape", "steps_levels": "2,x"})
        time.sleep(2)
        assert scrape(url)["slabench_sim_requests_received_total"] == before
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    assert "--steps-levels '2,x': 'x' is not a positive integer" in err
    assert "Traceback" not in err
    records = read_records(records_path)
    runs = Counter(r.run_id for r in records)
    assert len(runs) == 2
    burst = [r for r in records if r.stage_level is None]
    assert Counter(r.item_id for r in burst) == Counter(f"queue-{i:05d}" for i in range(0, 100, 2))
    steps = [r for r in records if r.stage_level is not None]
    assert steps and {(r.stage_level, r.stage_phase) for r in steps} <= {(2, "warmup"), (2, "hold")}
    assert all(r.scheduled is None for r in steps)  # closed loop: no schedule to be late against
