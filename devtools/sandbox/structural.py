"""A CustomResourceDefinition version's structural schema at work: pruning, defaulting and validation.

What the kube-apiserver does with a custom resource before it stores it (``apiextensions-apiserver``
``pruning``, ``structuraldefaulting`` and ``validation``, over ``kube-openapi``'s validators), in that order:

* **Pruning**: fields the schema does not specify are dropped, except where
  ``x-kubernetes-preserve-unknown-fields: true`` keeps them; ``apiVersion``, ``kind`` and ``metadata`` are
  kept at the root (and in ``x-kubernetes-embedded-resource`` objects). :meth:`Schema.prune` also names what
  it dropped, for ``fieldValidation=Strict`` (refuse) and ``Warn`` (a warning).
* **Defaulting**: a missing property with a ``default`` gets a copy of it, and the defaults inside that copy
  apply too; a ``null`` where the schema is not ``nullable`` is dropped (then defaulted), as upstream.
* **Validation**: ``type`` (``integer`` also takes a whole float; ``x-kubernetes-int-or-string``),
  ``nullable``, ``required``, ``enum``, ``pattern``, ``minimum``/``maximum`` (and exclusive), ``multipleOf``,
  ``minLength``/``maxLength``, ``minItems``/``maxItems``, ``uniqueItems``, ``minProperties``/
  ``maxProperties``, ``format`` (``date-time``, ``date``, ``byte``, ``uuid``, ``ipv4``, ``ipv6``;
  numeric formats such as ``int32`` are not checked, as upstream) and the value-validation junctors
  ``allOf``/``anyOf``/``oneOf``/``not``. Errors carry the real server's field paths and wording
  (``spec.weight: Invalid value: 200: spec.weight in body should be less than or equal to 100``).

The schema is compiled once per CRD version into :class:`Node` trees whose checks are small closures built
only for the keywords present, so validating an object costs one walk. Every walk is copy-on-write: stored
objects are shared and never changed in place.

Ratcheting (``CRDValidationRatcheting``, on by default since Kubernetes 1.30): on an update, a value equal to
the stored one at the same place is not validated again, so an object stored before a stricter schema can
still have its status written. It is also what keeps a status write cheap.

``metadata`` is left to the generic object-meta checks (:mod:`devtools.sandbox.admission`): a CRD may only
restrict ``name`` and ``generateName``, which :meth:`Schema.validate` does check.
"""

from __future__ import annotations

import base64
import binascii
import copy
import ipaddress
import json
import re
import uuid
from collections.abc import Callable, Collection, Sized
from datetime import date, datetime
from typing import Any

FieldError = tuple[str, str]
Check = Callable[[Any, str], list[FieldError]]
ABSENT: Any = object()
"""No value here (distinct from ``None``, a JSON null)."""
_ABSENT = ABSENT
_ROOT_KEPT = frozenset({"apiVersion", "kind", "metadata"})


class SchemaError(ValueError):
    """The schema itself is unusable (a pattern that does not compile, a non-structural node)."""


def describe(value: Any) -> str:
    """A value as ``field.Invalid`` prints it: strings quoted, numbers and booleans bare, the rest JSON."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, str | int | float):
        return json.dumps(value)
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def type_name(value: Any) -> str:
    """The OpenAPI type of a JSON value (``object``, ``array``, ``string``, ``integer``, ...)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _is_type(value: Any, wanted: str) -> bool:
    if wanted == "object":
        return isinstance(value, dict)
    if wanted == "array":
        return isinstance(value, list)
    if wanted == "string":
        return isinstance(value, str)
    if wanted == "boolean":
        return isinstance(value, bool)
    if isinstance(value, bool):
        return False
    if wanted == "integer":
        return isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    return wanted == "number" and isinstance(value, int | float)


def _invalid(path: str, value: Any, detail: str) -> FieldError:
    return path, f"Invalid value: {describe(value)}: {detail}"


# -- value checks, one per keyword -------------------------------------------------------------------------


def _numeric_checks(schema: dict[str, Any]) -> list[Check]:
    checks: list[Check] = []
    if "maximum" in schema:
        bound, exclusive = schema["maximum"], bool(schema.get("exclusiveMaximum"))

        def maximum(value: Any, path: str) -> list[FieldError]:
            if not _is_type(value, "number") or value < bound or (value == bound and not exclusive):
                return []
            relation = "less than" if exclusive else "less than or equal to"
            return [_invalid(path, value, f"{path} in body should be {relation} {bound}")]

        checks.append(maximum)
    if "minimum" in schema:
        low, low_exclusive = schema["minimum"], bool(schema.get("exclusiveMinimum"))

        def minimum(value: Any, path: str) -> list[FieldError]:
            if not _is_type(value, "number") or value > low or (value == low and not low_exclusive):
                return []
            relation = "greater than" if low_exclusive else "greater than or equal to"
            return [_invalid(path, value, f"{path} in body should be {relation} {low}")]

        checks.append(minimum)
    if schema.get("multipleOf"):
        factor = schema["multipleOf"]

        def multiple_of(value: Any, path: str) -> list[FieldError]:
            if not _is_type(value, "number") or (value / factor).is_integer():
                return []
            return [_invalid(path, value, f"{path} in body should be a multiple of {factor}")]

        checks.append(multiple_of)
    return checks


def _pattern_check(source: str) -> Check:
    try:
        regex = re.compile(source)
    except re.error as err:
        raise SchemaError(f"pattern {source!r} does not compile: {err}") from err

    def pattern(value: Any, path: str) -> list[FieldError]:
        if not isinstance(value, str) or regex.search(value):
            return []
        return [_invalid(path, value, f"{path} in body should match '{regex.pattern}'")]

    return pattern


def _max_length(longest: int) -> Check:
    def max_length(value: Any, path: str) -> list[FieldError]:
        if not isinstance(value, str) or len(value) <= longest:
            return []
        return [(path, f"Too long: may not be more than {longest} bytes")]

    return max_length


def _min_length(shortest: int) -> Check:
    def min_length(value: Any, path: str) -> list[FieldError]:
        if not isinstance(value, str) or len(value) >= shortest:
            return []
        return [_invalid(path, value, f"{path} in body should be at least {shortest} chars long")]

    return min_length


def _string_checks(schema: dict[str, Any]) -> list[Check]:
    checks: list[Check] = []
    if "pattern" in schema:
        checks.append(_pattern_check(schema["pattern"]))
    if "maxLength" in schema:
        checks.append(_max_length(int(schema["maxLength"])))
    if "minLength" in schema:
        checks.append(_min_length(int(schema["minLength"])))
    if schema.get("format") in _FORMATS:
        checks.append(_format_check(schema["format"]))
    return checks


def _date_time(text: str) -> bool:
    datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    return "T" in text.upper()


_FORMATS: dict[str, Callable[[str], Any]] = {
    "date-time": _date_time,
    "date": date.fromisoformat,
    "byte": lambda text: base64.b64decode(text, validate=True),
    "uuid": uuid.UUID,
    "ipv4": ipaddress.IPv4Address,
    "ipv6": ipaddress.IPv6Address,
}


def _format_check(name: str) -> Check:
    parse = _FORMATS[name]

    def check(value: Any, path: str) -> list[FieldError]:
        if not isinstance(value, str):
            return []
        try:
            ok = parse(value) is not False
        except (ValueError, binascii.Error):
            ok = False
        if ok:
            return []
        return [_invalid(path, value, f"{path} in body must be of type {name}: {describe(value)}")]

    return check


def _collection_checks(schema: dict[str, Any]) -> list[Check]:
    checks: list[Check] = []
    for keyword, kind in (("maxItems", list), ("maxProperties", dict)):
        if keyword in schema:
            checks.append(_too_many(int(schema[keyword]), kind))
    for keyword, kind, noun in (("minItems", list, "items"), ("minProperties", dict, "properties")):
        if keyword in schema:
            checks.append(_too_few(int(schema[keyword]), kind, noun))
    if schema.get("uniqueItems"):

        def unique(value: Any, path: str) -> list[FieldError]:
            if not isinstance(value, list):
                return []
            seen = {json.dumps(v, sort_keys=True) for v in value}
            return (
                []
                if len(seen) == len(value)
                else [_invalid(path, value, f"{path} in body shouldn't contain duplicates")]
            )

        checks.append(unique)
    return checks


def _too_many(most: int, kind: type[Sized]) -> Check:
    def check(value: Any, path: str) -> list[FieldError]:
        if not isinstance(value, kind) or len(value) <= most:
            return []
        return [(path, f"Too many: {len(value)}: must have at most {most} items")]

    return check


def _too_few(least: int, kind: type[Sized], noun: str) -> Check:
    def check(value: Any, path: str) -> list[FieldError]:
        if not isinstance(value, kind) or len(value) >= least:
            return []
        return [_invalid(path, value, f"{path} in body should have at least {least} {noun}")]

    return check


def _enum_check(schema: dict[str, Any]) -> list[Check]:
    if "enum" not in schema:
        return []
    allowed = list(schema["enum"])
    shown = ", ".join(describe(v) for v in allowed)

    def enum(value: Any, path: str) -> list[FieldError]:
        if value in allowed and not (isinstance(value, bool) and not any(v is value for v in allowed)):
            return []
        return [(path, f"Unsupported value: {describe(value)}: supported values: {shown}")]

    return [enum]


# -- the compiled tree -------------------------------------------------------------------------------------


class Node:
    """One schema node, compiled: its type, children, the checks of its keywords and its CEL rules."""

    __slots__ = (
        "additional",
        "checks",
        "default",
        "embedded",
        "has_rules",
        "int_or_string",
        "items",
        "junctors",
        "list_keys",
        "list_type",
        "nullable",
        "preserve_unknown",
        "properties",
        "raw",
        "required",
        "rules",
        "type",
    )

    def __init__(self, schema: dict[str, Any], path: str = "") -> None:
        if not isinstance(schema, dict):
            raise SchemaError(f"{path or '<root>'}: a schema must be an object")
        self.raw = schema
        self.type: str | None = schema.get("type")
        self.properties = {
            name: Node(child, join(path, name)) for name, child in (schema.get("properties") or {}).items()
        }
        self.items = Node(schema["items"], f"{path}[*]") if isinstance(schema.get("items"), dict) else None
        additional = schema.get("additionalProperties")
        self.additional: Node | bool | None = (
            Node(additional, f"{path}[*]") if isinstance(additional, dict) else additional
        )
        self.required: tuple[str, ...] = tuple(schema.get("required") or ())
        self.default: Any = schema.get("default", _ABSENT)
        self.nullable = bool(schema.get("nullable"))
        self.preserve_unknown = bool(schema.get("x-kubernetes-preserve-unknown-fields"))
        self.int_or_string = bool(schema.get("x-kubernetes-int-or-string"))
        self.embedded = bool(schema.get("x-kubernetes-embedded-resource"))
        self.list_type: str | None = schema.get("x-kubernetes-list-type")
        self.list_keys: tuple[str, ...] = tuple(schema.get("x-kubernetes-list-map-keys") or ())
        self.checks: tuple[Check, ...] = (
            *_enum_check(schema),
            *_numeric_checks(schema),
            *_string_checks(schema),
            *_collection_checks(schema),
        )
        self.junctors: tuple[tuple[str, tuple[Node, ...]], ...] = tuple(
            (name, _branches(schema[name], f"{path}.{name}"))
            for name in ("allOf", "anyOf", "oneOf", "not")
            if name in schema
        )
        self.rules: tuple[Any, ...] = ()  # the CEL rules, set by devtools.sandbox.cel_validation
        self.has_rules = False  # a rule at or below this node

    def child(self, key: str) -> Node | None:
        """The schema of property ``key`` (a named property, else additionalProperties)."""
        found = self.properties.get(key)
        if found is not None:
            return found
        return self.additional if isinstance(self.additional, Node) else None

    def keeps_unknown(self) -> bool:
        return self.preserve_unknown or self.additional is True

    def walk(self) -> list[Node]:
        """This node and every node below it (not the junctors' branches)."""
        nodes = [self]
        for child in [*self.properties.values(), self.items, self.additional]:
            if isinstance(child, Node):
                nodes.extend(child.walk())
        return nodes


def _branches(value: Any, path: str) -> tuple[Node, ...]:
    branches = value if isinstance(value, list) else [value]
    return tuple(Node(b, f"{path}[{i}]") for i, b in enumerate(branches))


# -- pruning -------------------------------------------------------------------------------------------------


def prune(node: Node, value: Any, path: str, dropped: list[str], root: bool = False) -> Any:
    """``value`` without the fields ``node`` does not specify (their paths appended to ``dropped``)."""
    if isinstance(value, dict):
        return _prune_object(node, value, path, dropped, root)
    if isinstance(value, list) and node.items is not None:
        items = node.items
        out = [prune(items, v, f"{path}[{i}]", dropped) for i, v in enumerate(value)]
        return value if all(a is b for a, b in zip(out, value, strict=True)) else out
    return value


def _prune_object(
    node: Node,
    value: dict[str, Any],
    path: str,
    dropped: list[str],
    root: bool,
    kept: Collection[str] = (),
) -> Any:
    """``kept``: keys whose values are pruned already, kept as they are."""
    keeps_unknown = node.keeps_unknown()
    kept_here = _ROOT_KEPT if (root or node.embedded) else frozenset()
    out: dict[str, Any] | None = None
    for key, item in value.items():
        if key in kept:
            continue
        child = node.child(key)
        if child is None:
            if keeps_unknown or key in kept_here:
                continue
            dropped.append(join(path, key))
            out = out if out is not None else dict(value)
            del out[key]
            continue
        if key == "metadata" and key in kept_here:
            continue  # object meta is checked by admission, not pruned by the schema
        pruned = prune(child, item, join(path, key), dropped)
        if pruned is not item:
            out = out if out is not None else dict(value)
            out[key] = pruned
    return value if out is None else out


# -- defaulting ----------------------------------------------------------------------------------------------


def apply_defaults(node: Node, value: Any, root: bool = False) -> Any:
    """``value`` with the schema's defaults filled in and non-nullable nulls dropped."""
    if isinstance(value, dict):
        return _default_object(node, value, root)
    if isinstance(value, list) and node.items is not None:
        out = [apply_defaults(node.items, v) for v in value]
        return value if all(a is b for a, b in zip(out, value, strict=True)) else out
    return value


def _default_object(node: Node, value: dict[str, Any], root: bool, kept: Collection[str] = ()) -> Any:
    """``kept``: keys whose values are defaulted already, kept as they are."""
    out: dict[str, Any] | None = None
    for key, child in node.properties.items():
        if (root and key == "metadata") or key in kept:
            continue
        current = value.get(key, _ABSENT)
        if current is None and not child.nullable:
            out = out if out is not None else dict(value)
            del out[key]
            current = _ABSENT
        if current is _ABSENT:
            if child.default is _ABSENT:
                continue
            current = copy.deepcopy(child.default)
        defaulted = apply_defaults(child, current)
        if defaulted is not value.get(key, _ABSENT):
            out = out if out is not None else dict(value)
            out[key] = defaulted
    if isinstance(node.additional, Node):
        current_items = (out if out is not None else value).items()
        extra = {k: v for k, v in current_items if k not in node.properties}
        for key, item in extra.items():
            defaulted = apply_defaults(node.additional, item)
            if defaulted is not item:
                out = out if out is not None else dict(value)
                out[key] = defaulted
    return value if out is None else out


# -- validation ----------------------------------------------------------------------------------------------


def validate(node: Node, value: Any, path: str, old: Any = _ABSENT) -> list[FieldError]:
    """Every way ``value`` fails ``node`` (empty: valid). ``old``: the stored value here, for ratcheting."""
    if old is not _ABSENT and (old is value or old == value):
        return []
    if value is None:
        if node.nullable or node.type is None:
            return []
        return [_invalid(path, value, f'{path} in body must be of type {node.type}: "null"')]
    errors = _type_errors(node, value, path)
    if errors:
        return errors
    for check in node.checks:
        errors.extend(check(value, path))
    for name, branches in node.junctors:
        errors.extend(_junctor_errors(name, branches, value, path))
    if isinstance(value, dict):
        errors.extend(_object_errors(node, value, path, old if isinstance(old, dict) else None))
    elif isinstance(value, list) and node.items is not None:
        errors.extend(_list_errors(node, value, path, old if isinstance(old, list) else None))
    return errors


def _type_errors(node: Node, value: Any, path: str) -> list[FieldError]:
    if node.int_or_string:
        if _is_type(value, "integer") or isinstance(value, str):
            return []
        wanted = "integer or string"
    elif node.type is None or _is_type(value, node.type):
        return []
    else:
        wanted = node.type
    actual = type_name(value)
    return [(path, f'Invalid value: "{actual}": {path} in body must be of type {wanted}: "{actual}"')]


def _object_errors(
    node: Node, value: dict[str, Any], path: str, old: dict[str, Any] | None
) -> list[FieldError]:
    errors = [(join(path, name), "Required value") for name in node.required if name not in value]
    for key, item in value.items():
        child = node.child(key)
        if child is None:
            continue
        if not path and key == "metadata":
            errors.extend(_metadata_errors(child, item))
            continue
        errors.extend(validate(child, item, join(path, key), old.get(key, _ABSENT) if old else _ABSENT))
    return errors


def _metadata_errors(node: Node, metadata: Any) -> list[FieldError]:
    """A CRD may restrict ``metadata.name`` and ``metadata.generateName`` (nothing else)."""
    if not isinstance(metadata, dict):
        return []
    errors: list[FieldError] = []
    for key in ("name", "generateName"):
        child = node.properties.get(key)
        if child is not None and key in metadata:
            errors.extend(validate(child, metadata[key], f"metadata.{key}"))
    return errors


def _list_errors(node: Node, value: list[Any], path: str, old: list[Any] | None) -> list[FieldError]:
    assert node.items is not None
    errors: list[FieldError] = []
    previous = correlate_list(node, old) if old is not None else None
    for i, item in enumerate(value):
        before = previous(item) if previous is not None else _ABSENT
        errors.extend(validate(node.items, item, f"{path}[{i}]", before))
    if node.list_type == "map" and node.list_keys:
        errors.extend(_duplicate_keys(node.list_keys, value, path))
    elif node.list_type == "set":
        errors.extend(_duplicate_items(value, path))
    return errors


def correlate_list(node: Node, old: list[Any]) -> Callable[[Any], Any] | None:
    """How an item finds its stored counterpart: by key in a map list, by value in a set; None otherwise
    (an atomic list's items have no identity of their own)."""
    if node.list_type == "map" and node.list_keys:
        keys = node.list_keys
        by_key = {_list_key(keys, item): item for item in old if isinstance(item, dict)}
        return lambda item: by_key.get(_list_key(keys, item), _ABSENT) if isinstance(item, dict) else _ABSENT
    if node.list_type == "set":
        stored = {json.dumps(item, sort_keys=True) for item in old}
        return lambda item: item if json.dumps(item, sort_keys=True) in stored else _ABSENT
    return None


def _list_key(keys: tuple[str, ...], item: dict[str, Any]) -> str:
    return json.dumps([item.get(k) for k in keys])


def _duplicate_keys(keys: tuple[str, ...], value: list[Any], path: str) -> list[FieldError]:
    seen: set[str] = set()
    errors: list[FieldError] = []
    for i, item in enumerate(value):
        if not isinstance(item, dict):
            continue
        key = _list_key(keys, item)
        if key in seen:
            shown = ", ".join(f"{k}: {describe(item.get(k))}" for k in keys)
            errors.append((f"{path}[{i}]", f"Duplicate value: map[{shown}]"))
        seen.add(key)
    return errors


def _duplicate_items(value: list[Any], path: str) -> list[FieldError]:
    seen: set[str] = set()
    errors: list[FieldError] = []
    for i, item in enumerate(value):
        key = json.dumps(item, sort_keys=True)
        if key in seen:
            errors.append((f"{path}[{i}]", f"Duplicate value: {describe(item)}"))
        seen.add(key)
    return errors


def _junctor_errors(name: str, branches: tuple[Node, ...], value: Any, path: str) -> list[FieldError]:
    passing = sum(1 for branch in branches if not validate(branch, value, path))
    if name == "allOf" and passing < len(branches):
        return [error for branch in branches for error in validate(branch, value, path)]
    if name == "anyOf" and passing == 0:
        return [_invalid(path, value, f"{path} in body must validate at least one schema (anyOf)")]
    if name == "oneOf" and passing != 1:
        return [_invalid(path, value, f"{path} in body must validate one and only one schema (oneOf)")]
    if name == "not" and passing:
        return [_invalid(path, value, f"{path} in body must not validate the schema (not)")]
    return []


# -- the whole schema ----------------------------------------------------------------------------------------


class Schema:
    """One CRD version's ``openAPIV3Schema``, compiled."""

    def __init__(self, schema: dict[str, Any]) -> None:
        self.raw = schema
        self.root = Node(schema)

    def prune(
        self, obj: dict[str, Any], admitted: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], list[str]]:
        """The object without unknown fields, and the paths of what was dropped. ``admitted``: an object
        this schema pruned and defaulted before (the stored version an update replaces); a top-level part
        ``obj`` shares with it (the very same object, as a status write shares the spec) is not walked."""
        dropped: list[str] = []
        pruned: dict[str, Any] = _prune_object(self.root, obj, "", dropped, True, _shared(obj, admitted))
        return pruned, dropped

    def default(self, obj: dict[str, Any], admitted: dict[str, Any] | None = None) -> dict[str, Any]:
        """The object with the schema's defaults; ``admitted`` as for :meth:`prune`."""
        defaulted: dict[str, Any] = _default_object(self.root, obj, True, _shared(obj, admitted))
        return defaulted

    def validate(self, obj: dict[str, Any], old: dict[str, Any] | None = None) -> list[FieldError]:
        return validate(self.root, obj, "", old if old is not None else _ABSENT)


def _shared(obj: dict[str, Any], admitted: dict[str, Any] | None) -> frozenset[str]:
    """The top-level keys whose values ``obj`` shares with ``admitted`` (the very same objects)."""
    if admitted is None:
        return frozenset()
    return frozenset(k for k, v in obj.items() if admitted.get(k, _ABSENT) is v)
