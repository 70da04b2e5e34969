"""CustomResourceDefinitions (``apiextensions.k8s.io/v1``): what a CRD object defines, and whether it may.

A created CRD becomes, for each served version, a :class:`~devtools.sandbox.resources.ResourceType` whose
:class:`CustomKind` carries what the API server derives from the CRD: the compiled structural schema
(:mod:`devtools.sandbox.structural`) with its CEL rules (:mod:`devtools.sandbox.cel_validation`), the printer
columns ``kubectl get`` shows, the scale subresource's paths and the selectable fields. The store registers
them when the CRD is committed and forgets them when it is deleted (:mod:`devtools.sandbox.store`).

:func:`crd_errors` refuses a CRD the API server would refuse, with its field paths: the name is not
``<plural>.<group>``, the group has no dot or is a protected ``*.k8s.io`` / ``*.kubernetes.io`` group without
the ``api-approved.kubernetes.io`` annotation, the names or scope are missing or wrong, there is not exactly
one storage version, a version has no schema, the schema is not structural enough to be served (a node
without a type, a pattern that does not compile), a printer column or scale path the sandbox cannot read.
:func:`with_defaults` fills what the API server defaults (``singular``, ``listKind``, ``conversion``) and the
status it reports once the names are accepted (``Established``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from devtools.sandbox.cel_validation import Rule, attach_rules
from devtools.sandbox.jsonpath import JsonPath, JsonPathError, compile_path
from devtools.sandbox.resources import ResourceType
from devtools.sandbox.structural import FieldError, Node, Schema, SchemaError

GROUP = "apiextensions.k8s.io"
CLEANUP_FINALIZER = "customresourcecleanup.apiextensions.k8s.io"
APPROVAL_ANNOTATION = "api-approved.kubernetes.io"
_DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_KIND = re.compile(r"^[A-Za-z][A-Za-z0-9]*$")
_VERSION = re.compile(r"^v([0-9]+)(?:(alpha|beta)([0-9]+))?$")
_COLUMN_TYPES = frozenset({"integer", "number", "string", "boolean", "date"})
_NODE_TYPES = frozenset({"object", "array", "string", "integer", "number", "boolean"})


@dataclass(frozen=True)
class PrinterColumn:
    name: str
    type: str
    format: str
    description: str
    priority: int
    path: JsonPath


@dataclass(frozen=True)
class ScalePaths:
    """Where a kind keeps what its ``scale`` subresource reads and writes (simple ``.spec.x`` paths)."""

    spec_replicas: tuple[str, ...]
    status_replicas: tuple[str, ...]
    label_selector: tuple[str, ...] | None


@dataclass(frozen=True)
class CustomKind:
    """What a CRD defines for one served version (attached to its ResourceType)."""

    crd_name: str
    schema: Schema | None
    rules: tuple[Rule, ...]
    columns: tuple[PrinterColumn, ...] | None  # None: the default NAME, AGE
    scale: ScalePaths | None
    storage_version: str


def load_crd_documents(paths: Iterable[Path]) -> list[dict[str, Any]]:
    """Every CustomResourceDefinition in these files (``kustomization.yaml`` and other kinds skipped)."""
    found: list[dict[str, Any]] = []
    for path in sorted(paths):
        if path.name == "kustomization.yaml":
            continue
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict) and doc.get("kind") == "CustomResourceDefinition":
                found.append(doc)
    return found


def crd_files(root: Path) -> list[Path]:
    """The CRD manifests under ``root`` (a file, or a directory searched recursively)."""
    if root.is_file():
        return [root]
    return sorted(p for p in root.rglob("*.y*ml") if p.name != "kustomization.yaml")


def version_priority(version: str) -> tuple[int, int, int]:
    """Kubernetes' version order: GA before beta before alpha, higher numbers first (sort ascending)."""
    match = _VERSION.match(version)
    if match is None:
        return (3, 0, 0)
    stage = {"": 0, "beta": 1, "alpha": 2}[match[2] or ""]
    return (stage, -int(match[1]), -int(match[3] or 0))


# -- defaults and status -------------------------------------------------------------------------------------


def with_defaults(crd: dict[str, Any]) -> dict[str, Any]:
    """The CRD with the API server's defaults and status (copies what it changes)."""
    spec = crd.get("spec")
    if not isinstance(spec, dict) or not isinstance(spec.get("names"), dict):
        return crd
    names = dict(spec["names"])
    kind = names.get("kind")
    if isinstance(kind, str) and kind:
        names.setdefault("singular", kind.lower())
        names.setdefault("listKind", f"{kind}List")
    spec = {**spec, "names": names}
    spec.setdefault("conversion", {"strategy": "None"})
    versions = spec.get("versions")
    storage = next((v.get("name") for v in versions or () if isinstance(v, dict) and v.get("storage")), None)
    status = {
        "acceptedNames": names,
        "conditions": [
            _condition("NamesAccepted", "NoConflicts", "no conflicts found"),
            _condition("Established", "InitialNamesAccepted", "the initial names have been accepted"),
        ],
        "storedVersions": [storage] if storage else [],
    }
    old_status: dict[str, Any] = crd["status"] if isinstance(crd.get("status"), dict) else {}
    if old_status.get("conditions"):
        status["conditions"] = old_status["conditions"]
    stored = [*old_status.get("storedVersions", ()), *status["storedVersions"]]
    status["storedVersions"] = list(dict.fromkeys(stored))
    return {**crd, "spec": spec, "status": status}


def _condition(kind: str, reason: str, message: str) -> dict[str, Any]:
    return {
        "type": kind,
        "status": "True",
        "reason": reason,
        "message": message,
        "lastTransitionTime": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


def terminating(crd: dict[str, Any]) -> dict[str, Any]:
    """The status of a CRD whose instances are being deleted (``Terminating`` condition)."""
    status = dict(crd.get("status") or {})
    conditions = [c for c in status.get("conditions") or () if c.get("type") != "Terminating"]
    condition = _condition(
        "Terminating", "InstanceDeletionInProgress", "CustomResource deletion is in progress"
    )
    status["conditions"] = [*conditions, condition]
    return status


# -- validation ----------------------------------------------------------------------------------------------


def crd_errors(crd: dict[str, Any]) -> list[FieldError]:
    """Every reason the API server would refuse this CRD (empty: it is accepted)."""
    spec = crd.get("spec")
    if not isinstance(spec, dict):
        return [("spec", "Required value")]
    errors = _group_errors(crd, spec)
    errors += _names_errors(crd, spec)
    scope = spec.get("scope")
    if scope not in ("Cluster", "Namespaced"):
        errors.append(
            ("spec.scope", f'Unsupported value: {_q(scope)}: supported values: "Cluster", "Namespaced"')
        )
    errors += _versions_errors(spec.get("versions"))
    return errors


def _q(value: Any) -> str:
    return f'"{value}"' if isinstance(value, str) else repr(value)


def _group_errors(crd: dict[str, Any], spec: dict[str, Any]) -> list[FieldError]:
    group = spec.get("group")
    if not isinstance(group, str) or not group:
        return [("spec.group", "Required value")]
    if "." not in group or not _DNS_SUBDOMAIN.match(group):
        return [("spec.group", f'Invalid value: "{group}": should be a domain with at least one dot')]
    protected = group.endswith((".k8s.io", ".kubernetes.io")) or group in ("k8s.io", "kubernetes.io")
    annotations = (crd.get("metadata") or {}).get("annotations") or {}
    if protected and APPROVAL_ANNOTATION not in annotations:
        return [
            (
                f"metadata.annotations[{APPROVAL_ANNOTATION}]",
                f'Required value: protected groups must have approval annotation "{APPROVAL_ANNOTATION}", '
                "see https://github.com/kubernetes/enhancements/pull/1111",
            )
        ]
    return []


# What each name must look like, and how the API server says it is not.
_NAME_FORMS = {
    "plural": (_DNS_LABEL, "a lowercase RFC 1123 label"),
    "singular": (_DNS_LABEL, "a lowercase RFC 1123 label"),
    "kind": (_KIND, "must be a CamelCase name"),
    "listKind": (_KIND, "must be a CamelCase name"),
}


def _names_errors(crd: dict[str, Any], spec: dict[str, Any]) -> list[FieldError]:
    names = spec.get("names")
    if not isinstance(names, dict):
        return [("spec.names", "Required value")]
    errors: list[FieldError] = []
    for key, (form, problem) in _NAME_FORMS.items():
        value = names.get(key)
        if value in (None, ""):
            if key in ("plural", "kind"):
                errors.append((f"spec.names.{key}", "Required value"))
        elif not form.match(str(value)):
            errors.append((f"spec.names.{key}", f'Invalid value: "{value}": {problem}'))
    for short in names.get("shortNames") or ():
        if not _DNS_LABEL.match(str(short)):
            errors.append(("spec.names.shortNames", f'Invalid value: "{short}": a lowercase RFC 1123 label'))
    name = (crd.get("metadata") or {}).get("name")
    expected = f"{names.get('plural')}.{spec.get('group')}"
    if names.get("plural") and spec.get("group") and name != expected:
        errors.append(("metadata.name", f'Invalid value: "{name}": must be spec.names.plural+"."+spec.group'))
    return errors


def _versions_errors(versions: Any) -> list[FieldError]:
    if not isinstance(versions, list) or not versions:
        return [("spec.versions", "Required value: must have at least one version")]
    errors: list[FieldError] = []
    seen: set[str] = set()
    for i, version in enumerate(versions):
        path = f"spec.versions[{i}]"
        if not isinstance(version, dict):
            errors.append((path, "Invalid value: must be an object"))
            continue
        name = version.get("name")
        if not isinstance(name, str) or not _DNS_LABEL.match(name):
            errors.append((f"{path}.name", f"Invalid value: {_q(name)}: a lowercase RFC 1123 label"))
        elif name in seen:
            errors.append((f"{path}.name", f'Duplicate value: "{name}"'))
        seen.add(str(name))
        errors += _version_errors(version, path)
    storage = sum(1 for v in versions if isinstance(v, dict) and v.get("storage"))
    if storage != 1:
        errors.append(
            (
                "spec.versions",
                f"Invalid value: {_versions_shown(versions)}: must have exactly one "
                "version marked as storage version",
            )
        )
    return errors


def _versions_shown(versions: list[Any]) -> str:
    names = [v.get("name") for v in versions if isinstance(v, dict)]
    return "[" + ", ".join(f'"{n}"' for n in names) + "]"


def _version_errors(version: dict[str, Any], path: str) -> list[FieldError]:
    errors: list[FieldError] = []
    schema = (
        (version.get("schema") or {}).get("openAPIV3Schema")
        if isinstance(version.get("schema"), dict)
        else None
    )
    if not isinstance(schema, dict):
        return [(f"{path}.schema.openAPIV3Schema", "Required value: schemas are required")]
    schema_path = f"{path}.schema.openAPIV3Schema"
    if schema.get("type") != "object":
        errors.append((f"{schema_path}.type", 'Unsupported value: must be "object" at the root'))
    errors += _structural_errors(schema, schema_path)
    try:
        Node(schema)
    except SchemaError as err:
        errors.append((schema_path, f"Invalid value: {err}"))
    for j, column in enumerate(version.get("additionalPrinterColumns") or ()):
        errors += _column_errors(column, f"{path}.additionalPrinterColumns[{j}]")
    scale = (version.get("subresources") or {}).get("scale")
    if scale is not None:
        errors += _scale_errors(scale, f"{path}.subresources.scale")
    return errors


def _structural_errors(schema: Any, path: str) -> list[FieldError]:
    """Nodes without a type (unless int-or-string or preserving unknown fields), as the API server refuses."""
    if not isinstance(schema, dict):
        return [(path, "Invalid value: a schema must be an object")]
    errors: list[FieldError] = []
    typed = schema.get("type")
    if typed is None and not (
        schema.get("x-kubernetes-int-or-string") or schema.get("x-kubernetes-preserve-unknown-fields")
    ):
        errors.append((f"{path}.type", "Required value: must not be empty for specified fields"))
    elif typed is not None and typed not in _NODE_TYPES:
        errors.append((f"{path}.type", f'Unsupported value: "{typed}"'))
    for name, child in (schema.get("properties") or {}).items():
        errors += _structural_errors(child, f"{path}.properties[{name}]")
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), dict):
            errors += _structural_errors(schema[key], f"{path}.{key}")
    return errors


def _column_errors(column: Any, path: str) -> list[FieldError]:
    if not isinstance(column, dict):
        return [(path, "Invalid value: must be an object")]
    errors: list[FieldError] = []
    if not column.get("name"):
        errors.append((f"{path}.name", "Required value"))
    if column.get("type") not in _COLUMN_TYPES:
        shown = ", ".join(f'"{t}"' for t in sorted(_COLUMN_TYPES))
        errors.append(
            (f"{path}.type", f"Unsupported value: {_q(column.get('type'))}: supported values: {shown}")
        )
    try:
        compile_path(str(column.get("jsonPath") or ""))
    except JsonPathError as err:
        errors.append((f"{path}.jsonPath", f"Invalid value: {_q(column.get('jsonPath'))}: {err}"))
    return errors


def _simple_path(text: Any, under: str) -> tuple[str, ...] | None:
    if not isinstance(text, str) or not re.fullmatch(r"(\.[A-Za-z0-9_]+)+", text):
        return None
    parts = tuple(text[1:].split("."))
    return parts if parts[0] == under else None


def _scale_errors(scale: Any, path: str) -> list[FieldError]:
    if not isinstance(scale, dict):
        return [(path, "Invalid value: must be an object")]
    errors: list[FieldError] = []
    for key, under in (("specReplicasPath", "spec"), ("statusReplicasPath", "status")):
        if _simple_path(scale.get(key), under) is None:
            errors.append(
                (
                    f"{path}.{key}",
                    f"Invalid value: {_q(scale.get(key))}: should be a json path under .{under}",
                )
            )
    selector = scale.get("labelSelectorPath")
    if (
        selector is not None
        and _simple_path(selector, "status") is None
        and _simple_path(selector, "spec") is None
    ):
        errors.append(
            (
                f"{path}.labelSelectorPath",
                f"Invalid value: {_q(selector)}: should be a json path under .spec or .status",
            )
        )
    return errors


# -- what a CRD defines --------------------------------------------------------------------------------------


def _columns(version: dict[str, Any]) -> tuple[PrinterColumn, ...] | None:
    raw = version.get("additionalPrinterColumns")
    if not raw:
        return None
    return tuple(
        PrinterColumn(
            name=str(c["name"]),
            type=str(c.get("type", "string")),
            format=str(c.get("format") or ""),
            description=str(c.get("description") or ""),
            priority=int(c.get("priority") or 0),
            path=compile_path(str(c["jsonPath"])),
        )
        for c in raw
    )


def _scale(version: dict[str, Any]) -> ScalePaths | None:
    scale = (version.get("subresources") or {}).get("scale")
    if not isinstance(scale, dict):
        return None
    spec = _simple_path(scale.get("specReplicasPath"), "spec")
    status = _simple_path(scale.get("statusReplicasPath"), "status")
    if spec is None or status is None:
        return None
    selector = scale.get("labelSelectorPath")
    label = _simple_path(selector, "status") or _simple_path(selector, "spec") if selector else None
    return ScalePaths(spec, status, label)


def custom_kind(crd: dict[str, Any], version: dict[str, Any], storage: str) -> CustomKind:
    raw = ((version.get("schema") or {}).get("openAPIV3Schema")) or None
    schema = Schema(raw) if isinstance(raw, dict) else None
    rules = tuple(attach_rules(schema.root)) if schema is not None else ()
    return CustomKind(
        crd_name=str(crd["metadata"]["name"]),
        schema=schema,
        rules=rules,
        columns=_columns(version),
        scale=_scale(version),
        storage_version=storage,
    )


def served_versions(crd: dict[str, Any]) -> list[dict[str, Any]]:
    """The CRD's served versions, in Kubernetes' version priority order."""
    versions = [v for v in crd["spec"]["versions"] if v.get("served", True)]
    return sorted(versions, key=lambda v: version_priority(str(v["name"])))


def resource_types(crd: dict[str, Any]) -> list[ResourceType]:
    """One ResourceType per served version of a valid CRD (no :func:`crd_errors`), highest priority first."""
    spec, names = crd["spec"], crd["spec"]["names"]
    storage = next(str(v["name"]) for v in spec["versions"] if v.get("storage"))
    types: list[ResourceType] = []
    for version in served_versions(crd):
        subresources = frozenset(k for k in ("status", "scale") if k in (version.get("subresources") or {}))
        fields = frozenset(
            str(f["jsonPath"]).lstrip(".") for f in version.get("selectableFields") or () if f.get("jsonPath")
        )
        types.append(
            ResourceType(
                str(spec["group"]),
                str(version["name"]),
                str(names["plural"]),
                str(names["kind"]),
                spec["scope"] == "Namespaced",
                subresources,
                tuple(names.get("shortNames") or ()),
                fields,
                tuple(names.get("categories") or ()),
                custom=custom_kind(crd, version, storage),
            )
        )
    return types
