"""The in-cluster sweep grades the server it was pointed at, never the embedded simulator.

`slabench sweep` runs for real (a subprocess of this checkout); "inside a pod" is what Kubernetes tells every
container: the KUBERNETES_SERVICE_HOST variable (set even with enableServiceLinks: false). No cluster is involved.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from slabench.sla.contract import load_contract
from slabench.sweep.config import load_sweep
from tests.helpers.platform_helpers import LOCUST, ROOT

SWEEP_WITHOUT_URL = """\
name: no-url
locustfile: locustfiles/chat_replay.py
levels: [1]
repeats: 2
run:
  duration_s: 2
"""


def sweep(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    cfg = tmp_path / "sweep.yaml"
    cfg.write_text(SWEEP_WITHOUT_URL)
    return subprocess.run(
        [sys.executable, "-m", "slabench", "sweep", "--config", str(cfg), "--output-dir", str(tmp_path / "runs"),
         "--sweep-id", "s1", *args],
        cwd=ROOT, capture_output=True, text=True, timeout=120, env={**os.environ, **(env or {})},
    )  # fmt: skip


def test_inside_a_pod_a_sweep_without_a_target_is_refused_before_anything_starts(tmp_path):
    p = sweep(tmp_path, env={"KUBERNETES_SERVICE_HOST": "10.100.0.1"})
    assert p.returncode == 3, p.stderr
    (line,) = [x for x in p.stderr.splitlines() if x.strip()]
    assert "target.url" in line and "--target-url" in line and "embedded simulator" in line
    assert "Traceback" not in p.stderr
    # Nothing ran: no simulator log, no run directories.
    assert not (tmp_path / "runs" / "s1" / "simulator.log").exists()
    assert not list((tmp_path / "runs").glob("s1/*/*/manifest.json"))


def test_inside_a_pod_the_target_url_flag_is_used_and_recorded(tmp_path):
    """With --target-url the sweep goes to that server; sweep.json says so (here nothing listens: the sweep stops
    at its reachability check with exit 3, after recording what it was pointed at)."""
    p = sweep(tmp_path, "--target-url", "http://127.0.0.1:9/", env={"KUBERNETES_SERVICE_HOST": "10.100.0.1"})
    assert p.returncode == 3, p.stderr
    assert "target http://127.0.0.1:9 is not reachable" in p.stderr
    meta = json.loads((tmp_path / "runs" / "s1" / "sweep.json").read_text())
    assert meta["target"] == {"kind": "server", "url": "http://127.0.0.1:9", "source": "--target-url",
                              "in_cluster": True}  # fmt: skip
    assert meta["status"] == "failed"
    assert "simulator" not in meta


def test_ci_example_configs_of_the_locust_chart_are_valid(tmp_path):
    """Every SLA contract and sweep config in helm/locust/ci/ loads with the suite's own loaders (run from the repo
    root, where the image's workdir /app has the same layout)."""
    seen = 0
    for values in sorted((LOCUST / "ci").glob("*-values.yaml")):
        config = (yaml.safe_load(values.read_text()) or {}).get("config") or {}
        for key, loader in (("sla", load_contract), ("sweep", load_sweep)):
            if config.get(key):
                f = tmp_path / f"{values.stem}-{key}.yaml"
                f.write_text(config[key])
                cwd = Path.cwd()
                os.chdir(ROOT)
                try:
                    loader(f)
                finally:
                    os.chdir(cwd)
                seen += 1
    assert seen >= 3  # the burst contract, the sweep contract and the sweep config


@pytest.mark.parametrize("path", sorted(str(p.relative_to(ROOT)) for p in (ROOT / "sweeps").glob("*.yaml")))
def test_shipped_sweeps_stay_valid(path):
    cwd = Path.cwd()
    os.chdir(ROOT)
    try:
        load_sweep(path)
    finally:
        os.chdir(cwd)
