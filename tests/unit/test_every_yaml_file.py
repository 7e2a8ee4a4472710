"""Every YAML file in the repo loads: through its strict model where it has one, against its chart's values schema
where it is Helm values, or at least as valid YAML (Kubernetes manifests; their schemas are checked by
.ci/validate-platform). A new YAML file with no entry here fails, so nothing ships unchecked. Everything is parsed
by the project's own loader (`slabench.core.yamlio`), so no file in the repo holds a key twice."""

import json
import subprocess
from pathlib import Path

import jsonschema
import pytest

from slabench.core import yamlio
from slabench.core.config import load_model

ROOT = Path(__file__).resolve().parents[2]


def _model(dotted: str):
    module, name = dotted.rsplit(".", 1)
    return getattr(__import__(module, fromlist=[name]), name)


def _strict(dotted: str):
    return lambda path: load_model(path, _model(dotted))


def _sim_profile(path: Path):
    from slabench.sim.profiles import load_gpu_profile, load_model_profile

    kind = yamlio.load_data(path).get("kind")
    return (load_gpu_profile if kind == "gpu" else load_model_profile)(path)


def _merge(base: dict, over: dict) -> dict:
    """Helm's values merge: maps merge key by key, anything else replaces."""
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def _helm_values(path: Path):
    chart = path.parent if path.name == "values.yaml" else path.parent.parent
    schema = json.loads((chart / "values.schema.json").read_text())
    values = yamlio.load_data(chart / "values.yaml") or {}
    if path.name != "values.yaml":
        values = _merge(values, yamlio.load_data(path) or {})
    jsonschema.validate(values, schema)


def _plain(path: Path):
    assert yamlio.parse_all(yamlio.read_text(path), str(path))


LOADERS = [  # (glob, loader) — first match wins
    ("slabench/workload/assumptions.yaml", _strict("slabench.workload.accounts.WorkloadSettings")),
    ("slabench/sim/profiles/*.yaml", _sim_profile),
    ("slabench/fleet/data/gpu_facts.yaml", _strict("slabench.fleet.facts.FleetFacts")),
    ("examples/fleet/*.yaml", _strict("slabench.fleet.nodes.NodesFile")),
    ("slabench/sla/instance_prices.yaml", lambda p: _model("slabench.sla.prices.load_prices")(p)),
    ("sla/*.yaml", lambda p: _model("slabench.sla.contract.load_contract")(p)),  # the example contracts
    ("sweeps/*.yaml", lambda p: _model("slabench.sweep.config.load_sweep")(p)),
    ("gpu-operator/*.yaml", _plain),  # Helm values and a ConfigMap for NVIDIA's charts: no local schema
    ("*/ci/*-values.yaml", _helm_values),
    ("*/values.yaml", _helm_values),
    ("*/Chart.yaml", _plain),
    ("observability/*.yaml", _plain),
    ("scripts/eks/*.yaml", _plain),  # eksctl's ClusterConfig: no local schema
    ("scripts/eks/values/*.yaml", _plain),  # values for upstream charts (checked against their keys elsewhere)
]


def yaml_files() -> list[Path]:
    out = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.yaml", "*.yml"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return sorted(ROOT / p for p in out if "/templates/" not in p)


@pytest.mark.parametrize("path", yaml_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_yaml_file_loads(path):
    rel = path.relative_to(ROOT)
    for pattern, loader in LOADERS:
        if rel.match(pattern):
            loader(path)
            return
    pytest.fail(f"{rel}: no loader knows this YAML file; add it to LOADERS in {Path(__file__).name}")
