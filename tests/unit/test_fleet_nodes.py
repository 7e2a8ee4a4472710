"""The fleet file: every user mistake is one clear line naming the file, the line and the fix."""

import re
from pathlib import Path

import pytest

from slabench.core.errors import UserError
from slabench.fleet.facts import load_facts
from slabench.fleet.nodes import load_nodes

FACTS = load_facts()


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "nodes.yaml"
    path.write_text(text)
    return path


def error_of(path: Path) -> str:
    with pytest.raises(UserError) as info:
        load_nodes(path, FACTS)
    return str(info.value)


def test_a_valid_file_resolves_instance_types_to_gpus(tmp_path):
    path = write(
        tmp_path, 'nodes:\n  - {name: a, instance_type: g7e.12xlarge, driver: "595.58.03", mig_profile: 2g.48gb}\n'
    )
    block, nodes = load_nodes(path, FACTS)
    assert block is None
    (n,) = nodes
    assert (n.gpu, str(n.cc), n.driver.branch, n.mig_profiles) == ("rtx-pro-server-6000", "12.0", 595, ("2g.48gb",))


def test_unknown_instance_type_names_file_line_and_the_sizes_that_exist(tmp_path):
    path = write(
        tmp_path,
        'nodes:\n  - name: a\n    instance_type: g5.xlarge\n    driver: "580.95.05"\n'
        '  - name: b\n    instance_type: g7e.xlarge\n    driver: "580.95.05"\n',
    )
    msg = error_of(path)
    assert msg.startswith(f"{path}:6: nodes.1.instance_type: unknown instance type 'g7e.xlarge'")
    assert "sizes: 2xlarge, 4xlarge" in msg and "\n" not in msg


def test_unknown_family_lists_the_known_ones(tmp_path):
    msg = error_of(write(tmp_path, 'nodes:\n  - {name: a, instance_type: c7i.xlarge, driver: "580.95.05"}\n'))
    assert re.match(rf"{re.escape(str(tmp_path))}/nodes.yaml:2: .*'c7i' is not a GPU instance family .*g7e", msg)


def test_unquoted_driver_version_asks_for_quotes(tmp_path):
    msg = error_of(write(tmp_path, "nodes:\n  - name: a\n    instance_type: g5.xlarge\n    driver: 580.95\n"))
    assert f"{tmp_path}/nodes.yaml:4: nodes.0.driver:" in msg and 'quoted string, e.g. "580.95.05"' in msg


def test_misspelt_key_is_an_error_with_its_line(tmp_path):
    msg = error_of(write(tmp_path, 'nodes:\n  - name: a\n    instance_type: g5.xlarge\n    driver: "580.95.05"\n'
                                   "    mig: 2g.48gb\n"))  # fmt: skip
    assert f"{tmp_path}/nodes.yaml:5: nodes.0.mig: unknown key" in msg


def test_bad_driver_and_missing_keys(tmp_path):
    assert "not a driver version" in error_of(
        write(tmp_path, 'nodes:\n  - {name: a, instance_type: g5.xlarge, driver: "r580"}\n')
    )
    assert "nodes.0.driver: required key is missing" in error_of(
        write(tmp_path, "nodes:\n  - {name: a, instance_type: g5.xlarge}\n")
    )


def test_duplicate_names_and_empty_fleet(tmp_path):
    dup = (
        'nodes:\n  - {name: a, instance_type: g5.xlarge, driver: "580.95.05"}\n'
        '  - {name: a, instance_type: g6.xlarge, driver: "580.95.05"}\n'
    )
    assert "repeated: a" in error_of(write(tmp_path, dup))
    assert "nodes:" in error_of(write(tmp_path, "nodes: []\n"))
    assert "the file is empty" in error_of(write(tmp_path, ""))


def test_malformed_yaml_names_the_line(tmp_path):
    msg = error_of(write(tmp_path, "nodes:\n  - name: a\n    instance_type: [g5\n"))
    assert re.match(rf"{re.escape(str(tmp_path))}/nodes.yaml:\d: invalid YAML", msg)


def test_gpu_key_for_instance_types_outside_the_table(tmp_path):
    path = write(tmp_path, 'nodes:\n  - {name: onprem, instance_type: dgx-h100, gpu: h100, driver: "580.95.05"}\n')
    (n,) = load_nodes(path, FACTS)[1]
    assert (n.gpu, str(n.cc)) == ("h100", "9.0")
    msg = error_of(write(tmp_path, 'nodes:\n  - {name: x, instance_type: dgx, gpu: h101, driver: "580.95.05"}\n'))
    assert "nodes.0.gpu: unknown GPU 'h101'" in msg and "h100" in msg
    msg = error_of(write(tmp_path, 'nodes:\n  - {name: x, instance_type: g5.xlarge, gpu: l4, driver: "580.95.05"}\n'))
    assert "g5.xlarge has GPU 'a10g', not 'l4'" in msg


def test_image_block_is_validated(tmp_path):
    base = 'nodes:\n  - {name: a, instance_type: g5.xlarge, driver: "580.95.05"}\n'
    block, _ = load_nodes(write(tmp_path, base + 'image:\n  cuda: "13.0"\n  arch_list: "8.6 12.0"\n'), FACTS)
    assert (block.cuda, block.arch_list, block.name) == ("13.0", "8.6 12.0", "serving image")
    msg = error_of(write(tmp_path, base + "image:\n  cuda: 12.9\n  arch_list: '8.6'\n"))
    assert "image.cuda:" in msg and "quoted string" in msg
    msg = error_of(write(tmp_path, base + "image:\n  cuda: '12.9'\n  arch_list: 'sm_86'\n"))
    assert "image.arch_list:" in msg and "not an arch list entry: 'sm_86'" in msg
