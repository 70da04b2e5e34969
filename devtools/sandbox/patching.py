"""The three PATCH flavours of the Kubernetes API, as pure functions on JSON data.

* **JSON merge patch** (RFC 7386, ``application/merge-patch+json``): maps merge recursively, ``null``
  deletes a key, every list is replaced whole.
* **Strategic merge patch** (``application/strategic-merge-patch+json``, built-in kinds only): like merge
  patch, except for lists the Go types tag with ``patchStrategy:"merge"``. Those merge element-by-element on
  a merge key (``containers`` by ``name``, ``conditions`` and ``addresses`` by ``type``, ``ownerReferences``
  by ``uid``, ...) or, for lists of primitives such as ``finalizers``, as a set union. Directives are
  honoured: ``$patch: replace|delete|merge`` in maps and list elements, ``$deleteFromPrimitiveList/<field>``,
  ``$setElementOrder/<field>``; ``$retainKeys`` is accepted and ignored.

  The real server looks strategies up in the Go struct tags; the sandbox keys them by **field name**
  (:data:`MERGE_KEYS`), which gives the same answer for every field of the kinds it serves (no two fields of
  those kinds share a name but differ in strategy). Lists with no strategy (``taints``, ``tolerations``,
  ``containerStatuses``) are replaced atomically, as upstream.
* **JSON patch** (RFC 6902, ``application/json-patch+json``): a list of operations, applied with the
  ``jsonpatch`` package. An object body is rejected with 400, as the real server does; this catches the
  CustomObjectsApi pitfall of sending a dict under the json-patch content type.

All functions return new data and never mutate their inputs (the store shares stored objects with watchers).
"""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch

from devtools.sandbox.errors import BadRequest, Invalid, UnsupportedMediaType

MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"
PATCH_TYPES = (MERGE_PATCH, STRATEGIC_MERGE_PATCH, JSON_PATCH, APPLY_PATCH)

# field name -> merge key, for lists of maps tagged patchStrategy:"merge" in the core/apps/policy types.
MERGE_KEYS: dict[str, str] = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "volumes": "name",
    "env": "name",
    "imagePullSecrets": "name",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "ports": "containerPort",
    "conditions": "type",
    "addresses": "type",
    "ownerReferences": "uid",
    "hostAliases": "ip",
    "topologySpreadConstraints": "topologyKey",
    "resourceClaims": "name",
    "schedulingGates": "name",
}
# lists of primitives tagged patchStrategy:"merge": set union.
MERGE_PRIMITIVE_LISTS: frozenset[str] = frozenset({"finalizers"})

_DELETE_FROM = "$deleteFromPrimitiveList/"
_SET_ORDER = "$setElementOrder/"


def _clone(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _clone(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clone(v) for v in value]
    return value


# --- RFC 7386 -----------------------------------------------------------------------------------------------


def merge_patch(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return _clone(patch)
    result: dict[str, Any] = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


# --- strategic merge patch ----------------------------------------------------------------------------------


def strategic_merge_patch(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        raise BadRequest("strategic merge patch: the body must be a JSON object")
    return _smp_map(target if isinstance(target, dict) else {}, patch, "")


def _smp_map(target: dict[str, Any], patch: dict[str, Any], where: str) -> dict[str, Any]:
    replaced = _map_directive(patch, where)
    if replaced is not None:
        return replaced
    result = dict(target)
    orders: dict[str, list[Any]] = {}
    for key, value in patch.items():
        if key in ("$patch", "$retainKeys"):
            continue
        if key.startswith(_SET_ORDER):
            orders[key[len(_SET_ORDER) :]] = value if isinstance(value, list) else []
        elif key.startswith(_DELETE_FROM):
            _delete_from_primitive_list(result, key, value)
        else:
            _smp_field(result, key, value, f"{where}.{key}" if where else key)
    for field, order in orders.items():
        if isinstance(result.get(field), list):
            result[field] = _apply_order(field, result[field], order)
    return result


def _map_directive(patch: dict[str, Any], where: str) -> dict[str, Any] | None:
    """What a map's ``$patch`` directive makes of it (``replace``, ``delete``), or None to merge."""
    directive = patch.get("$patch")
    if directive == "replace":
        return {k: _clone(v) for k, v in patch.items() if k != "$patch"}
    if directive == "delete":
        return {}
    if directive not in (None, "merge"):
        raise BadRequest(f'strategic merge patch at "{where or "/"}": unknown $patch directive "{directive}"')
    return None


def _delete_from_primitive_list(result: dict[str, Any], key: str, values: Any) -> None:
    """``$deleteFromPrimitiveList/<field>``: drop those values from the field's list."""
    if not isinstance(values, list):
        raise BadRequest(f'strategic merge patch: "{key}" must be a list')
    field = key[len(_DELETE_FROM) :]
    current = result.get(field)
    if isinstance(current, list):
        result[field] = [v for v in current if v not in values]


def _smp_field(result: dict[str, Any], key: str, value: Any, path: str) -> None:
    """Patch one field of ``result`` in place: delete on null, recurse into maps and lists, else set."""
    if value is None:
        result.pop(key, None)
    elif isinstance(value, dict):
        if value.get("$patch") == "delete":
            result.pop(key, None)
        else:
            current = result.get(key)
            result[key] = _smp_map(current if isinstance(current, dict) else {}, value, path)
    elif isinstance(value, list):
        result[key] = _smp_list(key, result.get(key), value, path)
    else:
        result[key] = value


def _smp_list(field: str, current: Any, patch: list[Any], where: str) -> list[Any]:
    current_list: list[Any] = current if isinstance(current, list) else []
    if any(isinstance(v, dict) and v.get("$patch") == "replace" for v in patch):
        return [_clone(v) for v in patch if not (isinstance(v, dict) and v.get("$patch") == "replace")]
    if field in MERGE_PRIMITIVE_LISTS:
        return _union(current_list, patch)
    merge_key = MERGE_KEYS.get(field)
    if merge_key is None:
        return [_clone(v) for v in patch]
    merged = list(current_list)
    for i, item in enumerate(patch):
        _merge_item(merged, merge_key, item, f"{where}[{i}]")
    return merged


def _union(current: list[Any], patch: list[Any]) -> list[Any]:
    """A list of primitives tagged ``patchStrategy:"merge"``: the patch's new values appended, in order."""
    merged = list(current)
    for value in patch:
        if value not in merged:
            merged.append(value)
    return merged


def _merge_item(merged: list[Any], merge_key: str, item: Any, where: str) -> None:
    """Merge one patch element into ``merged`` (in place) by its merge key; ``$patch: delete`` removes."""
    if not isinstance(item, dict):
        raise BadRequest(f'strategic merge patch at "{where}": expected an object with "{merge_key}"')
    if merge_key not in item:
        raise BadRequest(f'strategic merge patch at "{where}": missing merge key "{merge_key}"')
    key_value = item[merge_key]
    index = next(
        (j for j, old in enumerate(merged) if isinstance(old, dict) and old.get(merge_key) == key_value),
        None,
    )
    if item.get("$patch") == "delete":
        if index is not None:
            merged.pop(index)
    elif index is None:
        merged.append(_smp_map({}, item, where))
    else:
        merged[index] = _smp_map(merged[index], item, where)


def _apply_order(field: str, items: list[Any], order: list[Any]) -> list[Any]:
    """``$setElementOrder``: items in the listed order, the unlisted (or unorderable) ones after them."""
    merge_key = MERGE_KEYS.get(field)

    def key_of(value: Any) -> Any:
        key = value.get(merge_key) if merge_key and isinstance(value, dict) else value
        return key if isinstance(key, str | int | float | bool) else None  # a list or map names no element

    ranked: dict[Any, int] = {}
    for index, key in enumerate(key_of(v) for v in order):
        if key is not None:
            ranked.setdefault(key, index)
    return sorted(items, key=lambda v: ranked.get(key_of(v), len(order)))


# --- RFC 6902 -----------------------------------------------------------------------------------------------


def json_patch(target: Any, operations: Any) -> Any:
    if not isinstance(operations, list):
        raise BadRequest(
            "json: cannot unmarshal object into Go value of type []handlers.jsonPatchOp "
            "(a JSON patch body must be a list of operations; send an object as "
            "application/merge-patch+json)"
        )
    for i, op in enumerate(operations):
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise BadRequest(f"json patch operation {i}: needs 'op' and 'path'")
    try:
        return jsonpatch.JsonPatch(operations).apply(copy.deepcopy(target), in_place=True)
    except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as exc:
        raise Invalid(f"the server rejected our request due to an error in our request: {exc}") from exc
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        raise Invalid(f"json patch could not be applied: {exc}") from exc


def apply_patch(target: Any, body: Any, content_type: str, *, allow_strategic: bool = True) -> Any:
    """Dispatch on the content type (parameters such as ``; charset=utf-8`` are ignored)."""
    media = content_type.split(";", 1)[0].strip().lower()
    if media == JSON_PATCH:
        return json_patch(target, body)
    if media == MERGE_PATCH:
        if not isinstance(body, dict):
            raise BadRequest("merge patch: the body must be a JSON object")
        return merge_patch(target, body)
    if media == STRATEGIC_MERGE_PATCH:
        if not allow_strategic:
            raise UnsupportedMediaType(
                "the body of the request was in an unknown format - accepted media types "
                "include: application/json-patch+json, application/merge-patch+json, "
                "application/apply-patch+yaml (strategic merge patch is not supported "
                "for custom resources)"
            )
        return strategic_merge_patch(target, body)
    if media == APPLY_PATCH:
        # Server-side apply, approximated as a merge patch of the applied configuration (no managedFields).
        if not isinstance(body, dict):
            raise BadRequest("apply patch: the body must be an object")
        return merge_patch(target, body)
    raise UnsupportedMediaType(
        f'the body of the request was in an unknown format "{content_type}" - accepted '
        f"media types include: {', '.join(PATCH_TYPES)}"
    )
