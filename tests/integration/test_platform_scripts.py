"""The scripts the charts ship, run for real: run-job.sh (verdict, upload, signals) with the real
`slabench results upload` against moto, and the `helm test` checks against HTTP servers on 127.0.0.1."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import pytest

from tests.helpers.moto_server import MotoServer
from tests.helpers.platform_helpers import LOCUST, SERVING, slabench_results_shim

RUN_JOB = LOCUST / "files" / "run-job.sh"
BUCKET = "results-bkt"


def load(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def s3() -> Iterator[MotoServer]:
    with MotoServer() as server:
        import boto3

        env = server.env()
        boto3.client("s3", endpoint_url=server.url, region_name="us-east-1",
                     aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
                     aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"]).create_bucket(Bucket=BUCKET)  # fmt: skip
        yield server


def keys(server: MotoServer, prefix: str) -> set[str]:
    import boto3

    client = boto3.client("s3", endpoint_url=server.url, region_name="us-east-1", aws_access_key_id="testing",
                          aws_secret_access_key="testing")  # fmt: skip
    return {o["Key"] for o in client.list_objects_v2(Bucket=BUCKET, Prefix=prefix).get("Contents", [])}


def run_job(tmp_path: Path, s3: MotoServer, command: str, uri: str | None, **popen) -> subprocess.Popen:
    results = tmp_path / "results"
    results.mkdir(exist_ok=True)
    env = {**os.environ, **s3.env(), "RESULTS_DIR": str(results),
           "PATH": f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}"}  # fmt: skip
    if uri:
        env["RESULTS_S3_URI"] = uri
    else:
        env.pop("RESULTS_S3_URI", None)
    slabench_results_shim(tmp_path / "bin")
    return subprocess.Popen(["sh", str(RUN_JOB), "sh", "-c", command], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **popen)  # fmt: skip


@pytest.mark.parametrize("verdict", [0, 2])
def test_verdict_passes_through_and_results_are_uploaded(tmp_path, s3, verdict):
    cmd = f'echo \'{{"ok": true}}\' > "$RESULTS_DIR/records.jsonl"; exit {verdict}'
    proc = run_job(tmp_path, s3, cmd, f"s3://{BUCKET}/runs/v{verdict}/")
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == verdict, err
    assert keys(s3, f"runs/v{verdict}/") == {f"runs/v{verdict}/records.jsonl", f"runs/v{verdict}/exit-code"}
    assert (tmp_path / "results" / "exit-code").read_text() == f"{verdict}\n"


def test_a_pass_without_uploaded_evidence_is_exit_4(tmp_path, s3):
    proc = run_job(tmp_path, s3, "exit 0", "s3://no-such-bucket-here/runs/x/")
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 4
    assert "uploading" in err and "failed" in err


def test_a_failing_verdict_is_kept_when_the_upload_fails_too(tmp_path, s3):
    proc = run_job(tmp_path, s3, "exit 2", "s3://no-such-bucket-here/runs/x/")
    proc.communicate(timeout=60)
    assert proc.returncode == 2


def test_no_destination_means_no_upload(tmp_path, s3):
    proc = run_job(tmp_path, s3, "exit 0", None)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0
    assert "upload" not in err


def test_sigterm_reaches_the_test_and_results_are_still_uploaded(tmp_path, s3):
    # The "load test" writes a marker once it runs, then exits 143 on TERM (as Locust stops on SIGTERM).
    cmd = (
        'trap "echo stopped > $RESULTS_DIR/stopped; exit 143" TERM; touch $RESULTS_DIR/started; '
        "while :; do sleep 0.05; done"
    )
    proc = run_job(tmp_path, s3, cmd, f"s3://{BUCKET}/runs/term/")
    started = tmp_path / "results" / "started"
    deadline = time.monotonic() + 20
    while not started.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert started.exists()
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    assert keys(s3, "runs/term/") == {"runs/term/stopped", "runs/term/started", "runs/term/exit-code"}


# --- helm test checks -----------------------------------------------------------------------------------------------


class _Handler(BaseHTTPRequestHandler):
    # Set per test on a fresh subclass (see the http_server fixture).
    routes: ClassVar[dict[str, tuple[int, dict]]]
    seen_auth: ClassVar[list[str | None]]
    url: ClassVar[str]

    def log_message(self, *args):
        pass

    def do_GET(self):
        self.seen_auth.append(self.headers.get("Authorization"))
        status, body = self.routes.get(self.path, (404, {"detail": "not found"}))
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def http_server() -> Iterator[type[_Handler]]:
    handler = type("H", (_Handler,), {"routes": {}, "seen_auth": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    handler.url = f"http://127.0.0.1:{server.server_address[1]}"
    yield handler
    server.shutdown()
    server.server_close()


def test_check_server_passes_on_a_healthy_server_serving_the_model(http_server):
    check = load(SERVING / "files" / "check_server.py")
    http_server.routes.update({"/health": (200, {}), "/v1/models": (200, {"data": [{"id": "qa-grader"}]})})
    assert check.check(http_server.url, "qa-grader", "secret-key") == []
    assert http_server.seen_auth[-1] == "Bearer secret-key"


def test_check_server_names_what_is_wrong(http_server):
    check = load(SERVING / "files" / "check_server.py")
    http_server.routes.update({"/health": (503, {}), "/v1/models": (200, {"data": [{"id": "other"}]})})
    problems = check.check(http_server.url, "qa-grader", None)
    assert problems[0].endswith("/health returned 503, expected 200")
    assert "expected 'qa-grader'" in problems[1]
    assert check.check("http://127.0.0.1:9", "m", None, timeout=2)[0].startswith("cannot reach")


def test_check_http_command_exit_codes(http_server):
    http_server.routes.update({"/health": (200, {}), "/": (200, {})})
    script = str(LOCUST / "files" / "check_http.py")
    ok = subprocess.run(["python3", script, f"{http_server.url}/health", f"{http_server.url}/"], capture_output=True,
                        text=True, timeout=30)  # fmt: skip
    assert ok.returncode == 0, ok.stderr
    bad = subprocess.run(["python3", script, f"{http_server.url}/health", f"{http_server.url}/missing"],
                         capture_output=True, text=True, timeout=30)  # fmt: skip
    assert bad.returncode == 1 and "FAIL: GET" in bad.stderr and "-> 404" in bad.stderr


def test_readiness_gate_check_reads_gates_and_conditions():
    gates = load(SERVING / "files" / "check_readiness_gates.py")
    gate = "target-health.elbv2.k8s.aws/k8s-slabench-vllm-0123456789"

    def pod(name, gates_, conditions):
        return {"metadata": {"name": name}, "spec": {"readinessGates": [{"conditionType": g} for g in gates_]},
                "status": {"conditions": [{"type": t, "status": s} for t, s in conditions]}}  # fmt: skip

    assert gates.gate_problems([pod("a", [gate], [(gate, "True"), ("Ready", "True")])]) == []
    (missing,) = gates.gate_problems([pod("b", [], [("Ready", "True")])])
    assert "label the namespace elbv2.k8s.aws/pod-readiness-gate-inject=enabled" in missing
    (pending,) = gates.gate_problems([pod("c", [gate], [(gate, "False")])])
    assert pending.endswith("is False")
    assert gates.gate_problems([]) == ["no serving pods match the selector"]
