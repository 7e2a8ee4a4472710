"""One YAML loader for the whole project (`slabench.core.yamlio`): a key given twice in one mapping is an error naming
the file, both lines and the key (YAML's "last one wins" once turned a FAIL into a PASS); non-UTF-8 or binary content
and syntax errors are one-line errors naming the file and line. Checked at every entry point that reads YAML."""

from __future__ import annotations

from pathlib import Path

import pytest

from slabench.core.errors import UserError
from slabench.core.sinks import open_sink
from tests.helpers.sla_helpers import record, slabench_cli, write

ROOT = Path(__file__).resolve().parents[2]

# A contract that FAILS (TTFT 0.1 s > 0.05 s) ... until a second `targets:` block silently replaces the first.
DUPLICATE_TARGETS = """\
name: c
load: {concurrency: 4}
deployment: {instance_type: g5.xlarge}
targets:
  ttft_p95_s: {max: 0.05}
description: looks harmless
targets:
  ttft_p95_s: {max: 0.2}
"""
DUP_MESSAGE = "sla.yaml:7: duplicate key 'targets' (first at line 4)"


@pytest.fixture
def run_dir(tmp_path):
    d = tmp_path / "run"
    sink = open_sink(d / "records.jsonl")
    sink.write([record(i, sent=0.5 * i) for i in range(40)])
    sink.close()
    return d


# -- the loader itself -------------------------------------------------------------------------------------------
def test_a_duplicate_key_names_the_file_both_lines_and_the_key(tmp_path):
    from slabench.core.yamlio import load_file

    with pytest.raises(UserError) as e:
        load_file(write(tmp_path, DUPLICATE_TARGETS))
    msg = str(e.value)
    assert msg.startswith(f"{tmp_path / DUP_MESSAGE}") and "\n" not in msg
    assert "merge" in msg or "delete" in msg  # says what would fix it


def test_nested_duplicates_and_quoted_spellings_are_caught(tmp_path):
    from slabench.core.yamlio import load_file

    nested = "a:\n  b: 1\n  c: 2\n  b: 3\n"
    with pytest.raises(UserError, match=r"x\.yaml:4: duplicate key 'b' \(first at line 2\)"):
        load_file(write(tmp_path, nested, "x.yaml"))
    flow = "a: {b: 1, 'b': 2}\n"  # the same key, quoted the second time
    with pytest.raises(UserError, match=r"x\.yaml:1: duplicate key 'b' \(first at line 1\)"):
        load_file(write(tmp_path, flow, "x.yaml"))


def test_same_key_in_different_mappings_and_merge_overrides_are_fine(tmp_path):
    from slabench.core.yamlio import load_file

    text = "base: &b {x: 1, y: 2}\none: {<<: *b, x: 3}\ntwo: {x: 4}\nlist: [{k: 1}, {k: 2}]\n"
    data, lines = load_file(write(tmp_path, text, "ok.yaml"))
    assert data["one"] == {"x": 3, "y": 2} and data["two"] == {"x": 4}
    assert lines[("two", "x")] == 3 and lines[("list", 1, "k")] == 4


def test_merge_keys_follow_the_yaml_spec_and_a_second_merge_key_is_a_duplicate(tmp_path):
    """Own keys win over merged ones; among `<<: [*a, *b]` the first map wins (PyYAML let the last win); two `<<`
    keys in one mapping silently let the second win — the duplicate-key bug by another door."""
    from slabench.core.yamlio import load_file

    text = (
        "a: &a {limit: 1, y: 1}\nb: &b {limit: 2, z: 2}\n"
        "first: {<<: [*a, *b]}\nown: {<<: [*a, *b], limit: 9}\nnested: {<<: {<<: *b, q: 1}}\n"
    )
    data, _ = load_file(write(tmp_path, text, "m.yaml"))
    assert data["first"] == {"limit": 1, "y": 1, "z": 2}
    assert data["own"] == {"limit": 9, "y": 1, "z": 2}
    assert data["nested"] == {"limit": 2, "z": 2, "q": 1}
    two = "a: &a {limit: 1}\nb: &b {limit: 2}\nc:\n  <<: *a\n  <<: *b\n"
    with pytest.raises(UserError, match=r"m\.yaml:5: duplicate key '<<' \(first at line 4\)"):
        load_file(write(tmp_path, two, "m.yaml"))


BILLION_LAUGHS = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n' + "".join(
    f"{x}: &{x} [{', '.join(['*' + p] * 9)}]\n" for p, x in zip("abcdefghi", "bcdefghij", strict=True)
)


@pytest.mark.parametrize(
    ("text", "rule"),
    [
        (BILLION_LAUGHS, r"x\.yaml:1: invalid YAML: aliases expand this document to [\d,]+ nodes"),
        ("a: 1\nb: &s [1, *s]\n", r"x\.yaml:2: invalid YAML: an alias that contains itself"),
        ("a: &m {k: *m}\n", r"x\.yaml:1: invalid YAML: an alias that contains itself"),
        ("a: " + "[" * 1000 + "]" * 1000 + "\n", r"x\.yaml:1: invalid YAML: nesting deeper than 100 levels"),
        ("a: " + "[" * 150 + "]" * 150 + "\n", r"x\.yaml:1: invalid YAML: nesting deeper than 100 levels"),
        ("a: 1\nb: " + "9" * 5000 + "\n", r"x\.yaml:2: invalid YAML: an integer of 5000 digits \(at most 100\)"),
        ("b: 0x" + "f" * 500 + "\n", r"x\.yaml:1: invalid YAML: an integer of 500 digits"),
    ],
    ids=["billion-laughs", "self-alias", "self-alias-map", "deep-1000", "deep-150", "int-5000-digits", "hex-500"],
)
def test_what_a_small_file_could_make_huge_or_endless_is_one_line(tmp_path, text, rule):
    """A 400-byte alias bomb grew every YAML reader to gigabytes; a self-referencing alias gave a RecursionError, a
    5,000-digit integer a ValueError traceback. Each is one line naming file and line, in bounded memory."""
    import tracemalloc

    from slabench.core.yamlio import load_file, parse_all

    path = write(tmp_path, text, "x.yaml")
    tracemalloc.start()
    try:
        for read in (load_file, lambda p: parse_all(p.read_text(), str(p))):
            with pytest.raises(UserError, match=rule) as e:
                read(path)
            assert "\n" not in str(e.value)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 100e6  # a bomb expanded would need gigabytes


def test_large_plain_documents_and_modest_aliases_still_load(tmp_path):
    """The bounds refuse expansion, not size: a long document without aliases, and aliases used as intended."""
    from slabench.core.yamlio import load_file

    long = "".join(f"k{i}: {{a: [1, 2, 3], b: x}}\n" for i in range(2_000))
    assert len(load_file(write(tmp_path, long, "long.yaml"))[0]) == 2_000
    shared = "base: &b {" + ", ".join(f"f{i}: {i}" for i in range(100)) + "}\n"
    shared += "".join(f"u{i}: {{<<: *b, own: {i}}}\n" for i in range(200))
    data = load_file(write(tmp_path, shared, "shared.yaml"))[0]
    assert data["u7"]["f99"] == 99 and data["u7"]["own"] == 7


def test_binary_non_utf8_and_syntax_errors_are_one_line_with_the_line(tmp_path):
    from slabench.core.yamlio import load_file

    latin1 = tmp_path / "l.yaml"
    latin1.write_bytes(b"name: a\ndescription: caf\xe9\n")
    with pytest.raises(UserError, match=r"l\.yaml:2: not UTF-8 text") as e:
        load_file(latin1)
    assert "\n" not in str(e.value)
    binary = tmp_path / "b.yaml"
    binary.write_bytes(b"name: a\n\x00\x01\x02PK\x03\x04")
    with pytest.raises(UserError, match=r"b\.yaml:2: .*binary"):
        load_file(binary)
    broken = write(tmp_path, "name: a\ntargets: [1, 2\nx: 3\n", "s.yaml")
    with pytest.raises(UserError, match=r"s\.yaml:\d+: invalid YAML") as e:
        load_file(broken)
    assert "\n" not in str(e.value)
    with pytest.raises(UserError, match=r"s\.yaml:2: invalid YAML"):  # a second document where one is expected
        load_file(write(tmp_path, "a: 1\n---\nb: 2\n", "s.yaml"))


def test_every_yaml_reading_module_goes_through_the_one_loader():
    """No module parses YAML on its own (only slabench/core/yamlio.py talks to PyYAML's loaders)."""
    offenders = []
    for py in sorted((ROOT / "slabench").rglob("*.py")):
        text = py.read_text(encoding="utf-8")
        if py.name != "yamlio.py" and any(f"yaml.{f}" in text for f in ("safe_load", "load(", "compose", "SafeLoader")):
            offenders.append(str(py.relative_to(ROOT)))
    assert offenders == []


# -- every entry point -------------------------------------------------------------------------------------------
def test_grade_a_duplicate_targets_block_exits_3_not_pass(monkeypatch, tmp_path, run_dir, capsys):
    slabench = slabench_cli(monkeypatch)
    first_only = DUPLICATE_TARGETS.split("description")[0]
    assert slabench(["grade", str(run_dir), "--sla", str(write(tmp_path, first_only)), "--no-write"]) == 2
    capsys.readouterr()
    assert slabench(["grade", str(run_dir), "--sla", str(write(tmp_path, DUPLICATE_TARGETS)), "--no-write"]) == 3
    err = capsys.readouterr().err
    assert DUP_MESSAGE in err and err.count("\n") == 1


def test_grade_a_second_merge_key_or_an_alias_bomb_exits_3_not_pass(monkeypatch, tmp_path, run_dir, capsys):
    """Two `<<` in `targets:` let the lax second one win (PASS, exit 0); now exit 3, one line. A bomb: exit 3."""
    slabench = slabench_cli(monkeypatch)
    head = DUPLICATE_TARGETS.split("targets")[0]
    two_merges = head + "strict: &s {ttft_p95_s: {max: 0.05}}\nlax: &l {ttft_p95_s: {max: 0.2}}\n"
    two_merges += "targets:\n  <<: *s\n  <<: *l\n"
    assert slabench(["grade", str(run_dir), "--sla", str(write(tmp_path, two_merges)), "--no-write"]) == 3
    err = capsys.readouterr().err
    assert "sla.yaml:8: duplicate key '<<' (first at line 7)" in err and err.count("\n") == 1
    assert slabench(["grade", str(run_dir), "--sla", str(write(tmp_path, BILLION_LAUGHS)), "--no-write"]) == 3
    err = capsys.readouterr().err
    assert "sla.yaml:1: invalid YAML: aliases expand" in err and err.count("\n") == 1


def test_contract_prices_file_with_a_duplicate_region(tmp_path):
    from slabench.sla.contract import load_contract

    prices = (ROOT / "slabench/sla/instance_prices.yaml").read_text(encoding="utf-8")
    doubled = prices + "\nregions:\n  us-east-1: {g5.xlarge: 0.01}\n"
    write(tmp_path, doubled, "prices.yaml")
    sla = write(tmp_path, DUPLICATE_TARGETS.split("description")[0] + "prices: {file: prices.yaml}\n")
    with pytest.raises(UserError, match=r"prices\.yaml:\d+: duplicate key 'regions' \(first at line \d+\)"):
        load_contract(sla)


def test_sweep_config(tmp_path):
    from slabench.sweep.config import load_sweep

    text = "name: s\nlevels: [1, 2]\nrepeats: 2\nrun: {duration_s: 5}\nlevels: [1, 2, 4, 8]\n"
    with pytest.raises(UserError, match=r"sweep\.yaml:5: duplicate key 'levels' \(first at line 2\)"):
        load_sweep(write(tmp_path, text, "sweep.yaml"))


def test_fleet_nodes_file_via_the_cli(tmp_path, capsys):
    from slabench.commands import cli

    text = (
        "nodes:\n  - {name: a, instance_type: g6.xlarge, driver: '580.95.05'}\n"
        "nodes:\n  - {name: b, instance_type: g6.xlarge, driver: '580.95.05'}\n"
    )
    code = cli.main(["fleet", "check", "--nodes", str(write(tmp_path, text, "nodes.yaml"))])
    assert code == 3
    assert "nodes.yaml:3: duplicate key 'nodes' (first at line 1)" in capsys.readouterr().err


def test_fleet_facts_table(tmp_path):
    from slabench.fleet.facts import default_facts_path, load_facts

    text = default_facts_path().read_text(encoding="utf-8") + "\nschema_version: 1\n"
    with pytest.raises(UserError, match=r"facts\.yaml:\d+: duplicate key 'schema_version'"):
        load_facts(write(tmp_path, text, "facts.yaml"))


def test_price_table(tmp_path):
    from slabench.sla.prices import load_prices

    text = "schema_version: 1\nschema_version: 1\n"
    with pytest.raises(UserError, match=r"p\.yaml:2: duplicate key 'schema_version' \(first at line 1\)"):
        load_prices(write(tmp_path, text, "p.yaml"))


def test_workload_assumptions(tmp_path):
    from slabench.workload.accounts import DEFAULT_SETTINGS, load_settings

    text = Path(DEFAULT_SETTINGS).read_text(encoding="utf-8") + "\nschema_version: 1\n"
    with pytest.raises(UserError, match=r"a\.yaml:\d+: duplicate key 'schema_version'"):
        load_settings(write(tmp_path, text, "a.yaml"))


def test_simulator_profile(tmp_path):
    from slabench.sim.profiles import PROFILE_DIR, load_gpu_profile

    text = (PROFILE_DIR / "l4.yaml").read_text(encoding="utf-8") + "\nkind: gpu\n"
    with pytest.raises(UserError, match=r"gpu\.yaml:\d+: duplicate key 'kind'"):
        load_gpu_profile(write(tmp_path, text, "gpu.yaml"))


def test_deploy_values_files(tmp_path):
    from slabench.deploy.plan import load_values_files

    values = write(tmp_path, "image:\n  tag: a\nimage:\n  tag: b\n", "values.yaml")
    with pytest.raises(UserError, match=r"values\.yaml:3: duplicate key 'image' \(first at line 1\)"):
        load_values_files((values,))


def test_deploy_rendered_manifests():
    from slabench.deploy.manifests import Rendered
    from slabench.deploy.validate import iter_documents

    text = "kind: Service\nmetadata: {name: a}\n---\nkind: Job\nkind: Service\n"
    with pytest.raises(UserError, match=r"chart:5: duplicate key 'kind' \(first at line 4\)"):
        Rendered("chart", text).docs  # noqa: B018
    with pytest.raises(UserError, match=r"out\.yaml:5: duplicate key 'kind'"):
        list(iter_documents(text, "out.yaml"))


def test_deploy_dry_run_with_a_doubled_values_file_exits_3(tmp_path, capsys):
    from slabench.commands import cli
    from tests.helpers.platform_helpers import get_helm

    sla = write(tmp_path, DUPLICATE_TARGETS.split("description")[0])
    values = write(tmp_path, "resources:\n  limits: {cpu: 1}\nresources: {}\n", "serving.yaml")
    code = cli.main(["deploy", "--dry-run", "--sla", str(sla), "--serving-values", str(values), "--helm", get_helm()])
    assert code == 3
    assert "serving.yaml:3: duplicate key 'resources' (first at line 1)" in capsys.readouterr().err
