"""The offline manifest validator: strict CRD schemas, CEL rules, kubernetes-validate for built-in kinds."""

from __future__ import annotations

import copy
import hashlib

import pytest
import yaml

from slabench.deploy.validate import SCHEMA_DIR, main, make_strict, validate_document, validate_texts
from tests.helpers import platform_helpers
from tests.helpers.platform_helpers import FLEET, SERVING, one, render

helm_bin = platform_helpers.helm_bin  # session fixture: fetches helm with .ci/get-helm
pytestmark = pytest.mark.usefixtures("helm_bin")


@pytest.fixture(scope="module")
def fleet() -> list[dict]:
    return render(FLEET)


def problems(doc: dict) -> list[str]:
    return [p.message for p in validate_document(doc, "test")]


def test_make_strict_closes_objects_but_respects_open_ones():
    schema = {
        "type": "object",
        "properties": {
            "a": {"type": "object", "properties": {"b": {"type": "string"}}},
            "labels": {"type": "object", "additionalProperties": {"type": "string"}},
            "raw": {"type": "object", "properties": {"x": {}}, "x-kubernetes-preserve-unknown-fields": True},
        },
    }
    strict = make_strict(schema)
    assert strict["additionalProperties"] is False
    assert strict["properties"]["a"]["additionalProperties"] is False
    assert strict["properties"]["labels"]["additionalProperties"] == {"type": "string"}
    assert "additionalProperties" not in strict["properties"]["raw"]
    assert "additionalProperties" not in schema  # the input is not modified


def test_rendered_fleet_is_valid(fleet):
    for doc in fleet:
        assert problems(doc) == [], doc["metadata"]["name"]


def test_misspelled_field_in_a_nodepool_is_an_error(fleet):
    pool = copy.deepcopy(one(fleet, "NodePool", "gpu-whole"))
    pool["spec"]["disruption"]["consolidateAftr"] = "5m"
    assert problems(pool) == [
        "spec.disruption: Additional properties are not allowed ('consolidateAftr' was unexpected)"
    ]


def test_cel_rule_restricted_label_on_the_nodepool_template(fleet):
    pool = copy.deepcopy(one(fleet, "NodePool", "gpu-g7e-mig"))
    pool["spec"]["template"]["metadata"]["labels"]["karpenter.sh/nodepool"] = "x"
    assert problems(pool) == ['CEL spec.template.metadata.labels: label "karpenter.sh/nodepool" is restricted']


def test_cel_rule_role_xor_instance_profile(fleet):
    nc = copy.deepcopy(one(fleet, "EC2NodeClass", "gpu"))
    nc["spec"]["instanceProfile"] = "profile"
    assert problems(nc) == ["CEL spec: must specify exactly one of ['role', 'instanceProfile']"]


def test_cel_rule_price_and_price_adjustment_are_exclusive(fleet):
    overlay = copy.deepcopy(one(fleet, "NodeOverlay"))
    overlay["spec"].update(price="1.0", priceAdjustment="+10%")
    assert any("price" in m for m in problems(overlay))


def test_builtin_kinds_are_checked_strictly_against_kubernetes_schemas():
    dep = copy.deepcopy(one(render(SERVING), "Deployment"))
    dep["spec"]["template"]["spec"]["containers"][0]["livenessProbe"]["httpGett"] = {}
    msgs = problems(dep)
    assert msgs and all("httpGett" in m for m in msgs)
    assert {m.split(":")[0] for m in msgs} == {"Kubernetes 1.30.0", "Kubernetes 1.37.0"}


def test_unknown_kinds_are_errors_not_silent_passes():
    (msg,) = problems({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}})
    assert msg.startswith("no schema for example.com/v1 Widget")


def test_a_document_that_is_not_a_mapping_is_a_problem_not_a_crash():
    count, found = validate_texts([("x.yaml", "- a\n- b\n---\nplain\n")])
    assert count == 2
    assert [(p.source, p.resource) for p in found] == [("x.yaml#0", "list"), ("x.yaml#1", "str")]
    assert all("not a Kubernetes object" in p.message for p in found)


def test_cli_exit_codes(tmp_path, capsys, fleet):
    good = tmp_path / "good.yaml"
    good.write_text("---\n".join(yaml.safe_dump(d) for d in fleet))
    assert main([str(good)]) == 0
    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: x}\nspec: {}\n")
    assert main([str(bad)]) == 1
    assert "'template' is a required property" in capsys.readouterr().err


def test_validate_texts_counts_documents(fleet):
    text = "---\n".join(yaml.safe_dump(d) for d in fleet) + "---\n"
    count, found = validate_texts([("fleet.yaml", text)])
    assert (count, found) == (len(fleet), [])


def test_shipped_schemas_are_the_ones_sources_md_names():
    """The package carries the upstream CRD schemas (so `pip install` users can validate); each file's digest is the
    one SOURCES.md records next to its upstream commit, so an edited or swapped schema fails here."""
    sources = (SCHEMA_DIR / "SOURCES.md").read_text()
    for path in sorted(SCHEMA_DIR.glob("*.json")):
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        stem = path.stem.rsplit("_", 1)[-1]  # nodepool, ec2nodeclass, nodeoverlay, servicemonitor, podmonitor
        assert f"{stem} `{digest[:16]}`" in sources, path.name
