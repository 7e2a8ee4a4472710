"""The compatibility rules on the example fleet (g5, g6, g6e, g7e whole and MIG 2g.48gb, drivers 580 and 595) and on
the failing cases, each with the reason the operator reads."""

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slabench.fleet.facts import load_facts
from slabench.fleet.image import CUSTOM_IMAGE, CUSTOM_IMAGE_ARCH_LIST, ImageSpec, fleet_image, image_problems
from slabench.fleet.nodes import load_nodes
from slabench.fleet.rules import NodeFacts, Severity, check_arch, check_cuda_driver, check_fleet, check_node
from slabench.fleet.versions import ComputeCapability, DriverVersion, parse_arch_list

FACTS = load_facts()
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "fleet" / "nodes.yaml"
GOOD_FAMILIES = {"g5", "g6", "g6e", "g7e"}


@pytest.fixture(scope="module")
def facts():
    return FACTS


@pytest.fixture(scope="module")
def fleet(facts):
    block, nodes = load_nodes(EXAMPLE, facts)
    return block, {n.name: n for n in nodes}


def node(facts, instance_type="g7e.2xlarge", driver="580.95.05", mig=(), name="n"):
    family, _, _ = instance_type.partition(".")
    gpu = facts.instance_families[family].gpu
    return NodeFacts(name, instance_type, gpu, facts.gpus[gpu].name, facts.gpus[gpu].cc,
                     DriverVersion.parse(driver) if driver else None, tuple(mig))  # fmt: skip


def finding(result, rule):
    return next(f for f in result.findings if f.rule == rule)


def test_example_fleet_covers_every_family_driver_and_mig_mode(fleet):
    _, nodes = fleet
    good = [n for n in nodes.values() if not n.name.startswith(("bad-", "old-"))]
    assert {n.instance_type.split(".")[0] for n in good} == GOOD_FAMILIES
    assert {n.driver.branch for n in good} == {580, 595}
    g7e = [n for n in good if n.instance_type.startswith("g7e.")]
    assert {(n.driver.branch, n.mig_profiles) for n in g7e} == {(580, ()), (595, ()), (580, ("2g.48gb",)),
                                                                  (595, ("2g.48gb",))}  # fmt: skip


def test_fleet_image_runs_on_every_good_node_with_exact_kernels(fleet, facts):
    block, nodes = fleet
    image = ImageSpec.parse(block.name, block.cuda, block.arch_list)
    assert image == fleet_image()  # the example file describes the fleet image
    for n in nodes.values():
        if n.name.startswith(("bad-", "old-")):
            continue
        result = check_node(image, n, facts)
        assert result.severity == Severity.OK, (n.name, result.findings)
        assert "kernels are in the image" in finding(result, "arch").message
        if n.mig_profiles:
            assert finding(result, "mig").severity == Severity.OK


def test_image_without_sm120_fails_on_every_g7e_node_with_the_reason(fleet, facts):
    _, nodes = fleet
    image = ImageSpec.parse("no-blackwell", "12.9", "8.0 8.6 8.9 9.0 10.0")
    for n in nodes.values():
        result = check_node(image, n, facts)
        arch = finding(result, "arch")
        if n.instance_type.startswith("g7e."):
            assert arch.severity == Severity.FAIL
            assert (
                "compute capability 12.0" in arch.message
                and "not in the image arch list 8.0 8.6 8.9 9.0 10.0" in arch.message
            )
            assert "rebuild with 12.0 in TORCH_CUDA_ARCH_LIST" in arch.message
        else:
            assert arch.severity == Severity.OK


def test_cuda13_on_a_570_driver_fails_with_the_reason(fleet, facts):
    image = ImageSpec.parse("cu130", "13.0", "8.0 8.6 8.9 9.0 10.0 12.0")
    result = check_node(image, fleet[1]["old-g6e-r570"], facts)
    cuda = finding(result, "cuda_driver")
    assert result.severity == Severity.FAIL and cuda.severity == Severity.FAIL
    assert (
        "image CUDA 13.0 is newer than driver 570.195.03 supports (CUDA ≤ 12.8; CUDA 13.x needs R580+)" in cuda.message
    )
    assert "upgrade the driver to ≥ 580.65.06 (R580)" in cuda.message
    assert str(result.driver_max_cuda) == "12.8"


def test_cuda13_runs_on_580_and_595(fleet, facts):
    image = ImageSpec.parse("cu130", "13.0", "8.0 8.6 8.9 9.0 10.0 12.0")
    for name in ("g7e-rtxpro-r580", "g7e-rtxpro-r595", "g5-a10g-r580"):
        assert check_node(image, fleet[1][name], facts).severity == Severity.OK


def test_cuda129_on_a_570_driver_warns_minor_version_compatibility(fleet, facts):
    result = check_node(fleet_image(), fleet[1]["old-g6e-r570"], facts)
    cuda = finding(result, "cuda_driver")
    assert result.severity == Severity.WARN
    assert "minor-version compatibility" in cuda.message and "≥ 575.51.03 (R575)" in cuda.message


def test_unknown_mig_profile_fails_and_lists_the_real_ones(fleet, facts):
    result = check_node(fleet_image(), fleet[1]["bad-g7e-mig-3g72"], facts)
    mig = finding(result, "mig")
    assert mig.severity == Severity.FAIL
    assert "MIG profile 3g.72gb is unknown for NVIDIA RTX PRO 6000 Blackwell Server Edition" in mig.message
    assert "2g.48gb" in mig.message and "4g.96gb" in mig.message


def test_mig_on_a_gpu_without_mig_fails(fleet, facts):
    mig = finding(check_node(fleet_image(), fleet[1]["bad-g6e-mig"], facts), "mig")
    assert mig.severity == Severity.FAIL and "NVIDIA L40S does not support MIG" in mig.message


def test_mig_needs_its_minimum_driver(facts):
    result = check_node(fleet_image(), node(facts, driver="570.195.03", mig=("2g.48gb",)), facts)
    mig = finding(result, "mig")
    assert mig.severity == Severity.FAIL and "needs driver ≥ 575.51.03 (R575)" in mig.message


def test_binary_compatible_lower_minor_warns_and_names_the_missing_target(facts):
    a10g = node(facts, "g5.xlarge")
    f = check_arch(ImageSpec.parse("i", "12.9", "8.0 9.0 12.0"), a10g)
    assert f.severity == Severity.WARN and "runs the sm_80 kernels" in f.message and "add 8.6" in f.message
    # arch-specific builds do not carry over to another minor
    assert check_arch(ImageSpec.parse("i", "12.9", "8.0a"), a10g).severity == Severity.FAIL


def test_lower_ptx_does_not_cover_a_newer_major(facts):
    f = check_arch(ImageSpec.parse("i", "12.9", "8.0 10.0+PTX"), node(facts))
    assert f.severity == Severity.FAIL and "+PTX does not help" in f.message


def test_compute_capability_below_every_target_fails(facts):
    t4 = node(facts, "g4dn.xlarge")
    custom = ImageSpec.parse(CUSTOM_IMAGE, "12.9", CUSTOM_IMAGE_ARCH_LIST)  # our build has no sm_75
    assert check_arch(custom, t4).severity == Severity.FAIL
    assert check_arch(fleet_image(), t4).severity == Severity.OK  # vLLM's release image keeps sm_75


def test_driver_edge_cases(facts):
    image = fleet_image()
    unknown, max_cuda = check_cuda_driver(image, node(facts, driver=None), facts)
    assert unknown.severity == Severity.WARN and "driver version unknown" in unknown.message and max_cuda is None
    ancient, _ = check_cuda_driver(image, node(facts, driver="470.256.02"), facts)
    assert ancient.severity == Severity.FAIL and "older than every branch" in ancient.message
    newer, _ = check_cuda_driver(image, node(facts, driver="630.10.01"), facts)
    assert newer.severity == Severity.OK and "newer than the facts table" in newer.message


def test_fleet_result_is_the_worst_node(fleet, facts):
    _, nodes = fleet
    result = check_fleet(fleet_image(), list(nodes.values()), facts)
    assert result.severity == Severity.FAIL
    assert (result.count(Severity.OK), result.count(Severity.WARN), result.count(Severity.FAIL)) == (10, 1, 2)


def test_image_spec_problems_catch_targets_the_cuda_release_cannot_build(facts):
    assert image_problems(fleet_image(), facts) == []
    problems = image_problems(ImageSpec.parse("i", "12.6", "8.0 12.0"), facts)
    assert problems == ["12.0: needs CUDA ≥ 12.8 to compile (image CUDA is 12.6)"]
    assert "can no longer compile" in image_problems(ImageSpec.parse("i", "13.0", "7.0 8.0"), facts)[0]
    assert "'f' targets need CUDA ≥ 12.9" in image_problems(ImageSpec.parse("i", "12.8", "12.0f"), facts)[0]
    assert "not a CUDA target" in image_problems(ImageSpec.parse("i", "12.9", "8.3"), facts)[0]


targets = st.lists(st.sampled_from(["7.5", "8.0", "8.6", "8.9", "9.0", "9.0a", "10.0", "10.0f", "12.0", "12.0+PTX"]),
                   unique=True, min_size=1)  # fmt: skip


@given(targets, st.sampled_from(["7.5", "8.0", "8.6", "8.9", "9.0", "10.0", "12.0"]), st.sampled_from(["8.0", "12.0"]))
def test_adding_a_target_never_makes_a_node_worse(base, gpu_cc, extra):
    n = NodeFacts("n", None, None, "gpu", ComputeCapability.parse(gpu_cc), None)
    before = check_arch(ImageSpec("i", fleet_image().cuda, parse_arch_list(" ".join(base))), n).severity
    grown = parse_arch_list(" ".join(base if extra in base else [*base, extra]))
    after = check_arch(ImageSpec("i", fleet_image().cuda, grown), n).severity
    assert after <= before
    if ComputeCapability.parse(extra) == n.cc:
        assert after == Severity.OK  # an exact target always fixes the arch rule


CUDAS = ["12.0", "12.4", "12.8", "12.9", "13.0", "13.2", "13.3"]
DRIVERS = ["535.54.03", "570.195.03", "575.57.08", "580.95.05", "595.58.03"]


@given(st.sampled_from(CUDAS), st.sampled_from(CUDAS), st.sampled_from(DRIVERS))
def test_an_older_cuda_never_makes_a_driver_worse(cuda_a, cuda_b, driver):
    facts = FACTS
    n = NodeFacts("n", None, None, "gpu", ComputeCapability(8, 9), DriverVersion.parse(driver))
    low, high = sorted([cuda_a, cuda_b], key=lambda c: tuple(map(int, c.split("."))))
    sev = lambda cuda: check_cuda_driver(ImageSpec.parse("i", cuda, "8.9"), n, facts)[0].severity  # noqa: E731
    assert sev(low) <= sev(high)
