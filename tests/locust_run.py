"""Run the real `locust` command (headless) and read what it left behind."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class LocustResult:
    returncode: int
    stdout: str
    stderr: str
    pid: int


def run_locust(*args: str, timeout: float = 120, env: dict | None = None) -> LocustResult:
    argv = [sys.executable, "-m", "locust", "--headless", "--only-summary", *args]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env) as p:
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            raise
    return LocustResult(p.returncode, out, err, p.pid)


def scrape(url: str) -> dict[str, float]:
    """Prometheus samples at `url`/metrics, summed over labels: {sample name: value}."""
    import urllib.request

    text = urllib.request.urlopen(f"{url}/metrics", timeout=5).read().decode()
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[s.name] = out.get(s.name, 0.0) + s.value
    return out


def exit_for(run_dir: Path) -> int:
    """The exit code a finished run owes what its run_status.json says: 4 when it is incomplete or its load generator
    was frozen mid-run — a busy test machine does that — else 0 (saturation alone is said, not an exit code)."""
    import json

    status = json.loads((run_dir / "run_status.json").read_text())
    return 4 if status.get("incomplete_reasons") or status.get("stalls") else 0
