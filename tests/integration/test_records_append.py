"""Reusing a `--records` path must not silently add a second run to the first (then graded as one): the real `locust`
refuses a path that already holds records before any load is sent (exit 3, one line naming the path and --append),
on the command line and from the web UI form; `--append` adds the run on purpose; and grading a file that holds
several runs needs --merge-runs (`slabench grade`) or --sla-merge-runs (`locust --sla`)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import urllib.parse
import urllib.request

from slabench.core.sinks import open_sink, read_records
from tests.helpers.locust_run import CHAT, ROOT, assert_exit, run_users, scrape
from tests.helpers.ports import free_port
from tests.helpers.sla_helpers import record, write
from tests.integration.test_shapes_webui import get_json, wait_state

FAST = ("--ttft", "0.02", "--itl", "0.002", "--output-tokens", "8")
SLA = """\
name: sim
load: {concurrency: 2}
deployment: {instance_type: g6e.xlarge}
targets:
  ttft_p95_s: {max: 5.0}
"""


def earlier_run(path):
    sink = open_sink(path)
    sink.write([record(i, sent=0.1 * i).replace(run_id="earlier") for i in range(5)])
    sink.close()
    return path.read_bytes() if path.is_file() else None


def locust(url, records, *extra):
    """A request-count run (6 records, however busy the machine), as the sweep makes them."""
    return run_users(
        f"{CHAT},slabench/sweep/locust_stage.py", url, records, "--stop-after-requests", "6", "--prompt-tokens", "16",
        *extra, users=2, run_time="60s", stop_timeout=5,
    )  # fmt: skip


def test_an_existing_records_file_is_refused_before_any_load(simulator, tmp_path):
    url = simulator(*FAST)
    for name in ("records.jsonl", "records.parquet"):
        path = tmp_path / name
        before = earlier_run(path)
        sent = scrape(url)["slabench_sim_requests_received_total"]
        res = locust(url, path)
        assert res.returncode == 3, res.stderr[-2000:]
        assert f"--records {path}: already holds records" in res.stderr and "--append" in res.stderr
        assert "Traceback" not in res.stderr
        assert scrape(url)["slabench_sim_requests_received_total"] == sent  # no load was sent
        assert {r.run_id for r in read_records(path)} == {"earlier"}
        if before is not None:
            assert path.read_bytes() == before


def test_append_adds_the_run_and_grading_both_as_one_needs_merge_runs(simulator, tmp_path):
    url = simulator(*FAST)
    path = tmp_path / "records.jsonl"
    earlier_run(path)
    res = locust(url, path, "--append", "--run-id", "second")
    assert_exit(res.returncode, path.parent, 0, output=res.stderr)
    assert {r.run_id for r in read_records(path)} == {"earlier", "second"}

    # locust --sla over an appended file: refused at the start (before the load), unless merging is asked for
    sla = write(tmp_path, SLA)
    sent = scrape(url)["slabench_sim_requests_received_total"]
    res = locust(url, path, "--append", "--run-id", "third", "--sla", str(sla))
    assert res.returncode == 3, res.stderr[-2000:]
    assert "--sla-merge-runs" in res.stderr and "Traceback" not in res.stderr
    assert scrape(url)["slabench_sim_requests_received_total"] == sent
    res = locust(url, path, "--append", "--run-id", "third", "--sla", str(sla), "--sla-merge-runs")
    assert_exit(res.returncode, path.parent, 1, output=res.stderr)  # as one: CONDITIONAL, 17 are too few for a p95
    assert {r.run_id for r in read_records(path)} == {"earlier", "second", "third"}, res.stderr[-3000:]
    verdict = json.loads((tmp_path / "verdict.json").read_text())
    assert verdict["checks"][0]["samples"] == sum(r.outcome == "ok" for r in read_records(path))

    # slabench grade: refused with the run ids named, graded as one with --merge-runs
    grade = [sys.executable, "-m", "slabench", "grade", str(path), "--sla", str(sla), "--no-write"]
    out = subprocess.run(grade, capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 3
    assert "holds 3 runs (earlier, second, third)" in out.stderr and "--merge-runs" in out.stderr
    assert out.stderr.count("\n") == 1
    out = subprocess.run([*grade, "--merge-runs"], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert_exit(out.returncode, path.parent, 1, output=out.stderr)  # as one run: CONDITIONAL on its 17, not refused


def post(url: str, form: dict) -> dict:
    data = urllib.parse.urlencode(form).encode()
    return json.loads(urllib.request.urlopen(url, data=data, timeout=10).read())


def test_the_web_ui_refuses_a_used_records_path_unless_append_is_ticked(simulator, tmp_path):
    url = simulator(*FAST)
    used = tmp_path / "used.jsonl"
    earlier_run(used)
    port = free_port()
    web = f"http://127.0.0.1:{port}"
    argv = [sys.executable, "-m", "locust", "-f", "locustfiles/chat_replay.py", "--web-host", "127.0.0.1"]
    argv += ["--web-port", port, "--host", url, "--records", str(tmp_path / "new.jsonl"), "--prompt-tokens", "16"]
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_state(web, {"ready"})
        page = urllib.request.urlopen(f"{web}/", timeout=10).read().decode()
        options = json.loads(re.search(r'"extra_options": (\{.*?\}\}), "hide_common_options"', page).group(1))
        assert options["append"]["default_value"] is False and options["records"]["default_value"].endswith("new.jsonl")
        form = {"user_count": "1", "spawn_rate": "1", "host": url, "run_time": "60s"}
        form |= {"records": str(used), "run_id": ""}
        sent = scrape(url)["slabench_sim_requests_received_total"]
        answer = post(f"{web}/swarm", form | {"append": "false"})  # what the form sends when it is not ticked
        assert not answer["success"]
        assert answer["message"].startswith(f"--records {used}: already holds records")
        assert "--append" in answer["message"]
        time.sleep(2)
        assert scrape(url)["slabench_sim_requests_received_total"] == sent
        assert get_json(f"{web}/stats/requests")["state"] == "ready"
        assert post(f"{web}/swarm", form | {"append": "true"})["success"]  # ticked: added on purpose
        deadline = time.monotonic() + 60
        while len({r.run_id for r in read_records(used)}) < 2 and time.monotonic() < deadline:
            time.sleep(0.5)
        post(f"{web}/stop", {})
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    assert "Traceback" not in err
    assert len({r.run_id for r in read_records(used)}) == 2
