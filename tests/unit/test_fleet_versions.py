"""Parsers of CUDA releases, driver versions, compute capabilities and TORCH_CUDA_ARCH_LIST."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slabench.fleet.versions import (
    ArchTarget,
    ComputeCapability,
    CudaVersion,
    DriverVersion,
    format_arch_list,
    parse_arch_list,
)


def test_cuda_version_accepts_major_minor_and_patch():
    assert CudaVersion.parse("12.9") == CudaVersion(12, 9)
    assert CudaVersion.parse("12.9.1") == CudaVersion(12, 9)
    assert CudaVersion.parse("13.0") > CudaVersion.parse("12.10") > CudaVersion.parse("12.9")
    assert str(CudaVersion.parse(" 13.2 ")) == "13.2"


@pytest.mark.parametrize("bad", ["12", "twelve", "12.x", "", "v12.9"])
def test_cuda_version_rejects_garbage_with_an_example(bad):
    with pytest.raises(ValueError, match=r"expected MAJOR\.MINOR"):
        CudaVersion.parse(bad)


def test_driver_version_orders_numerically_and_keeps_its_text():
    d = DriverVersion.parse("580.95.05")
    assert d.branch == 580 and str(d) == "580.95.05"
    assert d.at_least(DriverVersion.parse("580.65.06"))
    assert not DriverVersion.parse("580.9.5").at_least(DriverVersion.parse("580.65.06"))  # 9 < 65, not "9" > "6"
    assert DriverVersion.parse("570.26").at_least(DriverVersion.parse("570.26.0"))
    assert not DriverVersion.parse("570.26").at_least(DriverVersion.parse("570.26.1"))


@pytest.mark.parametrize("bad", ["580.95.05.1", "r580", "580-95", ""])
def test_driver_version_rejects_garbage(bad):
    with pytest.raises(ValueError, match="driver version"):
        DriverVersion.parse(bad)


@given(st.lists(st.integers(0, 999), min_size=1, max_size=3), st.lists(st.integers(0, 999), min_size=1, max_size=3))
def test_driver_at_least_matches_zero_padded_tuple_order(a, b):
    da, db = DriverVersion.parse(".".join(map(str, a))), DriverVersion.parse(".".join(map(str, b)))
    pad = lambda p: tuple(p) + (0,) * (3 - len(p))  # noqa: E731
    assert da.at_least(db) == (pad(a) >= pad(b))
    assert da.at_least(db) or db.at_least(da)  # total


def test_compute_capability():
    cc = ComputeCapability.parse("12.0")
    assert cc.sm == "sm_120" and str(cc) == "12.0"
    assert ComputeCapability.parse("8.9") < ComputeCapability.parse("9.0") < cc
    with pytest.raises(ValueError):
        ComputeCapability.parse("8.10")


def test_arch_list_separators_variants_and_ptx():
    targets = parse_arch_list("8.0 8.6;9.0a, 10.0f 12.0+PTX")
    assert [str(t) for t in targets] == ["8.0", "8.6", "9.0a", "10.0f", "12.0+PTX"]
    assert targets[2] == ArchTarget(ComputeCapability(9, 0), "a", False)
    assert targets[4].ptx and targets[4].variant == ""


@pytest.mark.parametrize("bad", ["", "  ", "8.0 sm_90", "8.0 8.0", "9.0b"])
def test_arch_list_rejects_garbage(bad):
    with pytest.raises(ValueError):
        parse_arch_list(bad)


arch_entries = st.builds(
    lambda major, minor, variant, ptx: f"{major}.{minor}{variant}{'+PTX' if ptx else ''}",
    st.integers(5, 13),
    st.integers(0, 9),
    st.sampled_from(["", "a", "f"]),
    st.booleans(),
)


@given(st.lists(arch_entries, min_size=1, max_size=8, unique_by=lambda e: e), st.sampled_from([" ", ";", ", "]))
def test_arch_list_round_trips_through_its_normal_form(entries, sep):
    targets = parse_arch_list(sep.join(entries))
    assert format_arch_list(targets) == " ".join(entries)
    assert parse_arch_list(format_arch_list(targets)) == targets
