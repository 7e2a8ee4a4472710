"""One source of GPU facts: the facts table (slabench/fleet/data/gpu_facts.yaml) is what the simulator's GPU profiles
read, and the price table, the per-family serving values and the Karpenter pools agree with it (docs/fleet.md)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from slabench.fleet.facts import family_gpu, instance_gpu, packaged_facts, split_instance_type
from slabench.sim.profiles import PROFILE_DIR, available_profiles, load_gpu_profile, load_profile
from slabench.sla.cost import replica_price
from slabench.sla.prices import load_prices

ROOT = Path(__file__).resolve().parents[2]
SERVING_CI = ROOT / "helm" / "vllm-serving" / "ci"
# The chart serves an 8B FP8 Llama (helm/vllm-serving/values.yaml); this is its simulator model.
SERVED_MODEL = "llama-3.1-8b-fp8"
# Per-family serving values: a whole card per family, and the MIG slice on g7e.
FAMILY_VALUES = {"g5": "g5-values.yaml", "g6": "g6-values.yaml", "g7": "g7-values.yaml", "g7e": "g7e-mig-values.yaml"}
FIGURES = ("memory_mib", "memory_bandwidth_gb_s", "dense_bf16_tflops", "karpenter_gpu_name")


def gpu_profiles() -> list[str]:
    return available_profiles("gpu")


@pytest.mark.parametrize("name", gpu_profiles())
def test_each_built_in_gpu_profile_reads_its_card_from_the_facts_table(name: str) -> None:
    raw = yaml.safe_load((PROFILE_DIR / f"{name}.yaml").read_text())
    assert raw.get("facts_gpu") in packaged_facts().gpus, f"{name}: names no card of the facts table"
    restated = sorted(set(FIGURES) & set(raw))
    assert not restated, f"{name}: restates {restated}, which the facts table holds"
    profile = load_gpu_profile(name)
    card = packaged_facts().gpus[raw["facts_gpu"]]
    share = 1.0 if profile.mig_profile is None else 0.5  # the one MIG profile built in: 2g.48gb of a 96 GB card
    assert profile.memory_mib == round(card.memory_mib * share)  # type: ignore[operator]
    assert profile.memory_bandwidth_gb_s == card.memory_bandwidth_gb_s * share  # type: ignore[operator]
    assert profile.dense_bf16_tflops == card.dense_bf16_tflops * share  # type: ignore[operator]
    for itype in profile.instances:
        assert instance_gpu(packaged_facts(), itype) is not None


def test_a_profile_whose_instances_hold_another_card_is_refused(tmp_path: Path) -> None:
    from slabench.core.errors import UserError

    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: gpu\nname: bad\nsource: test\nfacts_gpu: l4\ninstances: [g5.xlarge]\n")
    with pytest.raises(UserError, match=r"g5\.xlarge is not an EC2 type with l4 .*a10g"):
        load_gpu_profile(bad)
    bad.write_text("kind: gpu\nname: bad\nsource: test\nfacts_gpu: l5\n")
    with pytest.raises(UserError, match=r"'l5' is not a GPU of the facts table \(known: .*l4"):
        load_gpu_profile(bad)


def test_the_price_table_describes_each_instance_as_the_facts_table_does() -> None:
    facts, table = packaged_facts(), load_prices()
    for itype, spec in table.instances.items():
        if spec.gpus == 0:
            continue
        found = instance_gpu(facts, itype)
        assert found is not None, f"{itype}: priced but unknown to the facts table"
        card = facts.gpus[found[0]]
        assert (spec.gpu, spec.gpus, spec.gpu_memory_gb) == (card.name, found[1], card.memory_gib), itype
    for profile, mig in table.mig_profiles.items():
        (card,) = [g for g in facts.gpus.values() if g.name == mig.gpu]
        assert card.mig is not None and profile in card.mig.profiles
        slice_gb = int(re.fullmatch(r"\d+g\.(\d+)gb", profile).group(1))  # type: ignore[union-attr]
        assert mig.card_fraction == slice_gb / card.memory_gib


@pytest.mark.parametrize("family", sorted(FAMILY_VALUES))
def test_each_familys_serving_values_fit_its_card_and_are_priced(family: str) -> None:
    """g5 (A10G), g6 (L4), g7 (RTX PRO 4500) and a g7e MIG slice: the card is in the facts table, a simulator profile
    models it, the values' vLLM flags fit its KV cache (what vLLM checks at start-up), a Karpenter pool launches the
    family, and the planner can price a replica on it."""
    facts = packaged_facts()
    values = yaml.safe_load((SERVING_CI / FAMILY_VALUES[family]).read_text())
    selector = values["nodeSelector"]
    mig = selector.get("nvidia.com/mig.config", "").removeprefix("all-") or None
    assert selector.get("karpenter.k8s.aws/instance-family", family) == family
    gpu = family_gpu(facts, family)
    assert gpu is not None, f"{family}: not in the facts table"
    (profile,) = [
        p for p in gpu_profiles() if (load_gpu_profile(p).facts_gpu, load_gpu_profile(p).mig_profile) == (gpu, mig)
    ]
    model = values["model"]
    engine = {
        "max_model_len": model["maxModelLen"],
        "max_num_seqs": model["maxNumSeqs"],
        "gpu_memory_utilization": model["gpuMemoryUtilization"],
    }
    cfg = load_profile(profile, SERVED_MODEL, engine)  # raises if the model or max_model_len does not fit
    assert cfg.kv_capacity_tokens >= model["maxModelLen"]
    pools = yaml.safe_load((ROOT / "karpenter" / "values.yaml").read_text())["nodePools"]
    (pool,) = [p for p in pools.values() if p["name"] == selector["karpenter.sh/nodepool"]]
    families = pool.get("families") or [split_instance_type(t)[0] for t in pool["instanceTypes"]]
    assert family in families
    instance = load_gpu_profile(profile).instances[0]
    assert split_instance_type(instance)[0] == family
    table = load_prices()
    price = replica_price(instance, 1, table, table.default_region, mig_profile=mig)
    assert price.per_replica_usd_per_hour > 0


def _figure(cell: str) -> float:
    """'~1.8 TB/s' → 1800 (GB/s), '~600 GB/s' → 600, '~70 TFLOPS' → 70, '22888' → 22888."""
    number = float(re.search(r"[\d.]+", cell.replace(",", "")).group(0))  # type: ignore[union-attr]
    return number * 1000 if "TB/s" in cell else number


def test_docs_fleet_md_gpu_table_is_the_facts_tables() -> None:
    """docs/fleet.md shows the facts; a figure changed in one place and not the other fails here."""
    rows = {}
    for line in (ROOT / "docs" / "fleet.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == 6 and (m := re.match(r"`([a-z0-9-]+)`", cells[4])):
            rows[m.group(1)] = cells
    facts = packaged_facts()
    shown = {key for key, gpu in facts.gpus.items() if gpu.dense_bf16_tflops is not None}
    assert set(rows) == shown
    for key in shown:
        gpu, cells = facts.gpus[key], rows[key]
        assert _figure(cells[1]) == gpu.memory_gib, key
        assert _figure(cells[2]) == gpu.memory_bandwidth_gb_s, key
        assert _figure(cells[3]) == gpu.dense_bf16_tflops, key
        assert _figure(cells[5]) == gpu.memory_mib, key
