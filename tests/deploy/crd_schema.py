"""Checking CustomResourceDefinitions the way the kube-apiserver does, without one.

:func:`structural_problems` applies the rules of a *structural* schema (Kubernetes "Specifying a structural
schema": a type on every node, logical junctors holding value validations only, metadata restricted to name
and generateName, int-or-string only in its two allowed forms) and reports each violation with its path;
:func:`validator` turns a version's ``openAPIV3Schema`` into a JSON Schema validator (OpenAPI 3.0 schemas are
Draft 4 in what the API server checks: boolean ``exclusiveMinimum``, ``x-kubernetes-*`` ignored), so objects
can be validated with the failing field named. CEL rules (``x-kubernetes-validations``) are not evaluated
here.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import jsonschema

JUNCTORS = ("allOf", "anyOf", "oneOf", "not")
NOT_IN_JUNCTORS = ("description", "type", "default", "additionalProperties", "nullable")
INT_OR_STRING = [{"type": "integer"}, {"type": "string"}]


def _children(schema: dict[str, Any], path: str) -> Iterator[tuple[str, dict[str, Any]]]:
    for name, child in (schema.get("properties") or {}).items():
        yield f"{path}.{name}", child
    if isinstance(schema.get("additionalProperties"), dict):
        yield f"{path}[*]", schema["additionalProperties"]
    if isinstance(schema.get("items"), dict):
        yield f"{path}[]", schema["items"]


def _junctor_problems(schema: dict[str, Any], path: str) -> list[str]:
    problems = []
    for junctor in JUNCTORS:
        branches = schema.get(junctor)
        if branches is None:
            continue
        if schema.get("x-kubernetes-int-or-string") and junctor == "anyOf" and branches == INT_OR_STRING:
            continue
        for index, branch in enumerate(branches if isinstance(branches, list) else [branches]):
            where = f"{path}.{junctor}[{index}]"
            problems += [
                f"{where}: {key} is not allowed in {junctor}" for key in NOT_IN_JUNCTORS if key in branch
            ]
            for field in branch.get("properties") or {}:
                if field not in (schema.get("properties") or {}):
                    problems.append(f"{where}.{field}: specified in {junctor} but not outside it")
            if "items" in branch and "items" not in schema:
                problems.append(f"{where}: items specified in {junctor} but not outside it")
    return problems


def _node_problems(schema: dict[str, Any], path: str) -> list[str]:
    problems = []
    int_or_string = schema.get("x-kubernetes-int-or-string") is True
    preserve = schema.get("x-kubernetes-preserve-unknown-fields") is True
    if not schema.get("type") and not (int_or_string or preserve):
        problems.append(f"{path}: no type")
    if int_or_string and schema.get("type"):
        problems.append(f"{path}: x-kubernetes-int-or-string with a type")
    if "properties" in schema and isinstance(schema.get("additionalProperties"), dict):
        problems.append(f"{path}: both properties and additionalProperties")
    if schema.get("x-kubernetes-list-type") == "map":
        item = schema.get("items") or {}
        for key in schema.get("x-kubernetes-list-map-keys") or []:
            key_schema = (item.get("properties") or {}).get(key)
            if key_schema is None or (
                key not in (item.get("required") or []) and "default" not in key_schema
            ):
                problems.append(
                    f"{path}: list map key {key} must be a required (or defaulted) field of the items"
                )
    if "default" in schema:
        try:
            jsonschema.Draft4Validator(schema).validate(schema["default"])
        except jsonschema.ValidationError as err:
            problems.append(f"{path}: default {schema['default']!r} is invalid: {err.message}")
    return problems + _junctor_problems(schema, path)


def structural_problems(schema: dict[str, Any], path: str = "openAPIV3Schema") -> list[str]:
    """Every way ``schema`` is not structural (empty when it is)."""
    problems = _node_problems(schema, path)
    for child_path, child in _children(schema, path):
        if child_path == f"{path}.metadata" and path == "openAPIV3Schema":
            allowed = {"name", "generateName"}
            extra = set(child.get("properties") or {}) - allowed
            if extra:
                problems.append(
                    f"{child_path}: only name and generateName may be restricted, not {sorted(extra)}"
                )
        problems += structural_problems(child, child_path)
    return problems


def cel_rules(schema: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every ``x-kubernetes-validations`` rule with the path of the node it sits on."""
    for rule in schema.get("x-kubernetes-validations") or []:
        yield path or ".", rule
    for child_path, child in _children(schema, path):
        yield from cel_rules(child, child_path)


def version_schema(crd: dict[str, Any], version: str | None = None) -> dict[str, Any]:
    versions = crd["spec"]["versions"]
    chosen = next(v for v in versions if (version is None and v.get("storage")) or v["name"] == version)
    schema: dict[str, Any] = chosen["schema"]["openAPIV3Schema"]
    return schema


def validator(crd: dict[str, Any], version: str | None = None) -> jsonschema.Draft4Validator:
    return jsonschema.Draft4Validator(version_schema(crd, version))


def field_errors(crd: dict[str, Any], obj: dict[str, Any]) -> list[str]:
    """``path: message`` for every way ``obj`` fails its schema, sorted (paths like
    ``spec.template.spec.requirements[0].operator``)."""
    found = []
    for error in validator(crd).iter_errors(obj):
        path = ""
        for part in error.absolute_path:
            path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
        found.append(f"{path or '.'}: {error.message}")
    return sorted(found)
