"""Offline, strict validation of rendered Kubernetes manifests.

Built-in kinds go through `kubernetes-validate --strict` (the upstream OpenAPI schemas, unknown fields are errors).
Custom resources (Karpenter NodePool / EC2NodeClass / NodeOverlay, Prometheus ServiceMonitor / PodMonitor /
PrometheusRule, KEDA ScaledObject) go through the upstream CRD schemas shipped in `schemas/` (see SOURCES.md), made
strict by adding
`additionalProperties: false` to every object schema that lists its properties, and through the CRDs' CEL rules
(`x-kubernetes-validations`, evaluated with cel-python) that plain JSON Schema skips. Transition rules (`oldSelf`)
need a previous object and are not evaluated. A kind that no schema covers is an error, never a silent pass.

    python -m slabench.deploy.validate [-k 1.30.0 -k 1.37.0] rendered/*.yaml
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jsonschema import Draft7Validator

if TYPE_CHECKING:
    from celpy.evaluation import CELFunction

from slabench.core import yamlio
from slabench.core.errors import UserError
from slabench.deploy.manifests import Manifest

SCHEMA_DIR = Path(__file__).with_name("schemas")
# (apiVersion, kind) -> schema file in SCHEMA_DIR
CRD_SCHEMAS = {
    ("karpenter.sh/v1", "NodePool"): "karpenter.sh_v1_nodepool.json",
    ("karpenter.k8s.aws/v1", "EC2NodeClass"): "karpenter.k8s.aws_v1_ec2nodeclass.json",
    ("karpenter.sh/v1alpha1", "NodeOverlay"): "karpenter.sh_v1alpha1_nodeoverlay.json",
    ("monitoring.coreos.com/v1", "ServiceMonitor"): "monitoring.coreos.com_v1_servicemonitor.json",
    ("monitoring.coreos.com/v1", "PodMonitor"): "monitoring.coreos.com_v1_podmonitor.json",
    ("monitoring.coreos.com/v1", "PrometheusRule"): "monitoring.coreos.com_v1_prometheusrule.json",
    ("keda.sh/v1alpha1", "ScaledObject"): "keda.sh_v1alpha1_scaledobject.json",
}
# Oldest Kubernetes the charts declare (kubeVersion >=1.30) and the newest kubernetes-validate knows.
DEFAULT_VERSIONS = ("1.30.0", "1.37.0")
# Where in a manifest: keys and list indexes from the root.
JsonPath = tuple[str | int, ...]


@dataclass(frozen=True)
class Problem:
    source: str  # file (and document index) the manifest came from
    resource: str  # Kind/name
    message: str

    def __str__(self) -> str:
        return f"{self.source}: {self.resource}: {self.message}"


def make_strict(schema: Any) -> Any:
    """A copy of an OpenAPI schema where every object with `properties` rejects unknown fields.

    Objects that already say what extra keys may hold (`additionalProperties`) or that keep unknown fields on purpose
    (`x-kubernetes-preserve-unknown-fields`) are left as they are.
    """
    if isinstance(schema, list):
        return [make_strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: make_strict(v) for k, v in schema.items()}
    if (
        "properties" in out
        and "additionalProperties" not in out
        and not out.get("x-kubernetes-preserve-unknown-fields", False)
    ):
        out["additionalProperties"] = False
    return out


@cache
def _crd_validator(filename: str) -> Draft7Validator:
    schema = json.loads((SCHEMA_DIR / filename).read_text(encoding="utf-8"))
    return Draft7Validator(make_strict(schema))


@cache
def _crd_schema(filename: str) -> Manifest:
    schema: Manifest = json.loads((SCHEMA_DIR / filename).read_text(encoding="utf-8"))
    return schema


def iter_documents(text: str, source: str) -> Iterator[tuple[str, object]]:
    """(source#index, manifest) for every non-empty YAML document in `text`."""
    for i, doc in enumerate(yamlio.parse_all(text, source)):
        if doc is None:
            continue
        yield f"{source}#{i}", doc


def _resource_name(doc: Manifest) -> str:
    meta = doc.get("metadata") or {}
    return f"{doc.get('kind', '?')}/{meta.get('name', '?')}"


def _json_path(path: Iterable[Any]) -> str:
    parts = [f"[{p}]" if isinstance(p, int) else f".{p}" for p in path]
    return "".join(parts).lstrip(".") or "(root)"


# --- CEL (x-kubernetes-validations) -------------------------------------------------------------------------------


def _cel_functions() -> dict[str, CELFunction]:
    """The Kubernetes CEL string extensions the CRDs use beyond standard CEL."""
    from celpy import celtypes

    def find(s: Any, pattern: Any) -> Any:
        m = re.search(str(pattern), str(s))
        return celtypes.StringType(m.group(0) if m else "")

    def split(s: Any, sep: Any) -> Any:
        return celtypes.ListType([celtypes.StringType(p) for p in str(s).split(str(sep))])

    return {"find": find, "split": split}


@cache
def _cel_program(rule: str) -> Any:
    import celpy

    env = celpy.Environment()
    return env.program(env.compile(rule), functions=_cel_functions())


def _cel_rule_failures(rules: list[dict[str, Any]], value: Any, path: JsonPath) -> Iterator[str]:
    from celpy.adapter import json_to_cel

    for r in rules:
        rule = r["rule"]
        if "oldSelf" in rule:  # transition rules compare with the stored object: an API server concern
            continue
        result = _cel_program(rule).evaluate({"self": json_to_cel(value)})
        # An evaluation error fails the rule, as it does in the API server.
        if isinstance(result, Exception) or not bool(result):
            msg = r.get("message") or f"failed rule: {rule}"
            yield f"{_json_path(path)}: {msg}"


def cel_problems(schema: object, value: Any, path: JsonPath = ()) -> Iterator[str]:
    """Evaluate every `x-kubernetes-validations` rule of `schema` that applies to a present part of `value`."""
    if not isinstance(schema, dict):
        return
    if rules := schema.get("x-kubernetes-validations"):
        yield from _cel_rule_failures(rules, value, path)
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        for key, sub in value.items():
            if key in props:
                yield from cel_problems(props[key], sub, (*path, key))
            elif isinstance(extra, dict):
                yield from cel_problems(extra, sub, (*path, key))
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            yield from cel_problems(schema["items"], item, (*path, i))


# --- one manifest ---------------------------------------------------------------------------------------------------


def validate_document(doc: object, source: str, versions: Iterable[str] = DEFAULT_VERSIONS) -> list[Problem]:
    """Problems with one manifest (empty list = valid)."""
    import kubernetes_validate

    if not isinstance(doc, dict):
        return [Problem(source, type(doc).__name__, "not a Kubernetes object (apiVersion and kind are required)")]
    resource = _resource_name(doc)
    if "apiVersion" not in doc or "kind" not in doc:
        return [Problem(source, resource, "not a Kubernetes object (apiVersion and kind are required)")]
    key = (doc["apiVersion"], doc["kind"])
    if key in CRD_SCHEMAS:
        validator = _crd_validator(CRD_SCHEMAS[key])
        problems = [
            Problem(source, resource, f"{_json_path(e.absolute_path)}: {e.message}")
            for e in sorted(validator.iter_errors(doc), key=lambda e: list(e.absolute_path))
        ]
        if not problems:  # CEL assumes the shape the schema guarantees
            schema = _crd_schema(CRD_SCHEMAS[key])
            problems = [Problem(source, resource, f"CEL {m}") for m in cel_problems(schema, doc)]
        return problems
    problems = []
    for version in versions:
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.SchemaNotFoundError:
            return [
                Problem(
                    source,
                    resource,
                    f"no schema for {doc['apiVersion']} {doc['kind']} (Kubernetes {version} built-in kinds and "
                    f"{sorted(k for _, k in CRD_SCHEMAS)} are known): add its CRD schema to {SCHEMA_DIR}",
                )
            ]
        except kubernetes_validate.ValidationError as e:
            problems.append(Problem(source, resource, f"Kubernetes {version}: {_json_path(e.path)}: {e.message}"))
    return problems


def validate_texts(
    texts: Iterable[tuple[str, str]], versions: Iterable[str] = DEFAULT_VERSIONS
) -> tuple[int, list[Problem]]:
    """Validate (source, YAML text) pairs. Returns (number of manifests checked, problems)."""
    versions = tuple(versions)
    count = 0
    problems: list[Problem] = []
    for source, text in texts:
        for where, doc in iter_documents(text, source):
            count += 1
            problems.extend(validate_document(doc, where, versions))
    return count, problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m slabench.deploy.validate", description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="+", type=Path, help="rendered manifests (multi-document YAML)")
    parser.add_argument(
        "-k",
        "--kubernetes-version",
        action="append",
        dest="versions",
        help=f"validate built-in kinds against this version (repeatable; default {' and '.join(DEFAULT_VERSIONS)})",
    )
    args = parser.parse_args(argv)
    if importlib.util.find_spec("celpy") is None:
        print("validate: the CRD CEL rules need cel-python: pip install cel-python", file=sys.stderr)
        return 3
    try:
        texts = [(str(f), f.read_text(encoding="utf-8")) for f in args.files]
        count, problems = validate_texts(texts, args.versions or DEFAULT_VERSIONS)
    except (OSError, UserError) as e:
        print(f"validate: {e}", file=sys.stderr)
        return 3
    for p in problems:
        print(p, file=sys.stderr)
    print(f"validate: {count} manifests in {len(args.files)} files, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
