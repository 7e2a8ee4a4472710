"""The packaged facts table and its look-ups; a broken facts file is a one-line error with its line."""

from pathlib import Path

import pytest
import yaml

from slabench.core.errors import UserError
from slabench.fleet.facts import (
    default_facts_path,
    driver_max_cuda,
    gpu_for_product,
    instance_gpu,
    load_facts,
    min_driver_for_cuda,
    minor_compat_floor,
    unknown_instance_hint,
)
from slabench.fleet.versions import CudaVersion, DriverVersion


@pytest.fixture(scope="module")
def facts():
    return load_facts()


def test_packaged_facts_load_and_every_source_is_a_dated_url(facts):
    assert default_facts_path().is_file()
    assert facts.sources
    for source in facts.sources.values():
        assert source.url.startswith("https://") and source.retrieved[:4].isdigit()


@pytest.mark.parametrize(
    ("gpu", "cc"),
    [("a100-40gb", "8.0"), ("a10g", "8.6"), ("l4", "8.9"), ("l40s", "8.9"), ("h100", "9.0"), ("b200", "10.0"),
     ("rtx-pro-server-6000", "12.0")],
)  # fmt: skip
def test_compute_capabilities_of_the_fleet_gpus(facts, gpu, cc):
    assert facts.gpus[gpu].compute_capability == cc


@pytest.mark.parametrize(
    ("instance", "gpu", "count"),
    [("g5.xlarge", "a10g", 1), ("g5.2xlarge", "a10g", 1), ("g6.xlarge", "l4", 1), ("g6.2xlarge", "l4", 1),
     ("g6e.xlarge", "l40s", 1), ("g6e.2xlarge", "l40s", 1), ("g7e.2xlarge", "rtx-pro-server-6000", 1),
     ("g7e.4xlarge", "rtx-pro-server-6000", 1), ("g7e.12xlarge", "rtx-pro-server-6000", 2)],
)  # fmt: skip
def test_every_gpu_instance_of_the_fleet_table_is_known(facts, instance, gpu, count):
    # The instances of docs/fleet.md.
    assert instance_gpu(facts, instance) == (gpu, count)


def test_unknown_instance_types_say_what_exists(facts):
    assert instance_gpu(facts, "g7e.xlarge") is None  # there is no g7e.xlarge
    assert "2xlarge" in unknown_instance_hint(facts, "g7e.xlarge")
    assert instance_gpu(facts, "c7i.xlarge") is None
    assert "not a GPU instance family" in unknown_instance_hint(facts, "c7i.xlarge")


@pytest.mark.parametrize(
    ("driver", "max_cuda"),
    [("570.195.03", "12.8"), ("575.57.08", "12.9"), ("580.95.05", "13.0"), ("580.65.06", "13.0"),
     ("590.48.01", "13.1"), ("595.58.03", "13.2"), ("610.43.02", "13.3"), ("565.57.01", "12.6"),
     ("570.10", "12.6"),  # before 570.26 the 570 branch did not yet support CUDA 12.8
     ("625.1", "13.3")],  # newer than the table: at least the newest known CUDA
)  # fmt: skip
def test_driver_to_highest_cuda(facts, driver, max_cuda):
    assert driver_max_cuda(facts, DriverVersion.parse(driver)) == CudaVersion.parse(max_cuda)


def test_driver_older_than_the_table_has_no_answer(facts):
    assert driver_max_cuda(facts, DriverVersion.parse("470.256.02")) is None


def test_cuda_to_oldest_driver_and_minor_version_floors(facts):
    assert min_driver_for_cuda(facts, CudaVersion(12, 9)).min_driver == "575.51.03"
    assert min_driver_for_cuda(facts, CudaVersion(13, 0)).branch == 580
    assert min_driver_for_cuda(facts, CudaVersion(14, 0)) is None
    assert minor_compat_floor(facts, 12).min_branch == 525
    assert minor_compat_floor(facts, 13).min_branch == 580


def test_both_fleet_drivers_support_the_fleet_image_cuda_natively(facts):
    # Why the image is CUDA 12.9: R580 and R595 both run it natively, and Blackwell needs ≥ 12.8.
    for driver in ("580.95.05", "595.58.03"):
        assert driver_max_cuda(facts, DriverVersion.parse(driver)) >= CudaVersion(12, 9)
    assert CudaVersion.parse(facts.nvcc_targets.archs["12.0"].min_cuda) <= CudaVersion(12, 9)


def test_rtx_pro_6000_mig_profiles_include_the_fleet_slice(facts):
    mig = facts.gpus["rtx-pro-server-6000"].mig
    assert "2g.48gb" in mig.profiles and mig.max_instances == 4 and mig.min_driver == "575.51.03"
    assert facts.gpus["l40s"].mig is None and facts.gpus["a10g"].mig is None


def test_gpu_from_feature_discovery_product(facts):
    assert gpu_for_product(facts, "NVIDIA-L40S") == "l40s"
    assert gpu_for_product(facts, "NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition-MIG-2g.48gb") == "rtx-pro-server-6000"
    assert gpu_for_product(facts, "NVIDIA-GeForce-RTX-4090") is None


def _write_variant(tmp_path: Path, mutate) -> Path:
    data = yaml.safe_load(default_facts_path().read_text())
    mutate(data)
    path = tmp_path / "facts.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_facts_citing_an_unknown_source_is_an_error(tmp_path):
    path = _write_variant(tmp_path, lambda d: d["gpus"]["l4"].update(source="a_blog"))
    with pytest.raises(UserError, match=r"facts\.yaml.*unknown sources \['a_blog'\]"):
        load_facts(path)


def test_facts_with_unsorted_driver_branches_is_an_error(tmp_path):
    path = _write_variant(tmp_path, lambda d: d["driver_branches"].reverse())
    with pytest.raises(UserError, match="sorted by min_driver"):
        load_facts(path)


def test_facts_with_a_bad_compute_capability_names_the_line(tmp_path):
    path = _write_variant(tmp_path, lambda d: d["gpus"]["l4"].update(compute_capability="8.9.1"))
    lines = path.read_text().splitlines()
    line = next(i for i, text in enumerate(lines, 1) if "8.9.1" in text)
    with pytest.raises(
        UserError, match=rf"facts\.yaml:{line}: gpus\.l4\.compute_capability: .*not a compute capability"
    ):
        load_facts(path)


def test_facts_with_an_instance_family_of_an_unknown_gpu_is_an_error(tmp_path):
    path = _write_variant(tmp_path, lambda d: d["instance_families"]["g5"].update(gpu="a10"))
    with pytest.raises(UserError, match=r"GPUs not under `gpus`: \['a10'\]"):
        load_facts(path)
