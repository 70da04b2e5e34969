"""Validation of resource quantities, as the kube-apiserver does it: requests, limits, overhead, capacity.

Written after ``pkg/apis/core/validation/validation.go`` (``ValidateResourceRequirements``,
``ValidateResourceQuantityValue``, ``ValidateNodeResources``), with its field paths and messages, so a
client sees what a real cluster would tell it:

* every quantity parses with the project's one parser (:mod:`tenon.core.quantities`). The real server fails
  an unparsable quantity while decoding the body (400, without a field); the sandbox answers 422 naming the
  field instead, which says more and keeps every refusal of a bad object in one place;
* a quantity is not negative (``must be greater than or equal to 0``), and an integer resource (``pods``, an
  extended resource such as ``nvidia.com/gpu``) is whole (``must be an integer``);
* a container's request is at most its limit (``must be less than or equal to cpu limit of 1``); for a
  resource that cannot be overcommitted (extended resources, hugepages) it equals the limit, which must be
  set.

Paths: ``spec.containers[0].resources.requests[cpu]``, ``spec.overhead[cpu]``, a template's
``spec.template.spec.…``, and a node's ``status.capacity.cpu`` / ``status.allocatable.cpu``.

Each function returns the problems found as ``(field, message)`` pairs, all of them, as the API server
reports every error of an object at once; an empty list means valid.
"""

from __future__ import annotations

from typing import Any

from tenon.core.quantities import NANO, Quantity, QuantityError, parse

FieldError = tuple[str, str]

_NEGATIVE = "must be greater than or equal to 0"
_NOT_INTEGER = "must be an integer"
_STANDARD_INTEGER_RESOURCES = frozenset({"pods"})
_OVERCOMMITTED = frozenset({"cpu", "memory", "ephemeral-storage"})  # the usual names: no limit needed


def is_extended_resource(name: str) -> bool:
    """Outside the ``kubernetes.io`` domain, such as ``nvidia.com/gpu`` (``IsExtendedResourceName``)."""
    return "/" in name and "kubernetes.io/" not in name and not name.startswith("requests.")


def is_integer_resource(name: str) -> bool:
    return name in _STANDARD_INTEGER_RESOURCES or is_extended_resource(name)


def overcommit_allowed(name: str) -> bool:
    """Whether a request may be below its limit: native resources except hugepages."""
    native = "/" not in name or "kubernetes.io/" in name
    return native and not name.startswith("hugepages-")


def quantity_map(
    values: Any, path: str, key_style: str = "[{}]"
) -> tuple[dict[str, Quantity], list[FieldError]]:
    """Parse a ``{resource: quantity}`` map; the valid entries, and a problem for each invalid one."""
    if values is None:
        return {}, []
    if not isinstance(values, dict):
        return {}, [(path, "Invalid value: must be a map of resource name to quantity")]
    parsed: dict[str, Quantity] = {}
    errors: list[FieldError] = []
    for name, raw in values.items():
        try:
            quantity = parse(raw)
        except QuantityError as err:
            errors.append((path + key_style.format(name), f"Invalid value: {err.shown}: {err.reason}"))
            continue
        if quantity.nanos < 0 or (quantity.nanos % NANO and is_integer_resource(name)):
            problem = _NEGATIVE if quantity.nanos < 0 else _NOT_INTEGER
            errors.append(
                (path + key_style.format(name), f'Invalid value: "{quantity.canonical()}": {problem}')
            )
            continue
        parsed[name] = quantity
    return parsed, errors


def requirements_errors(resources: Any, path: str) -> list[FieldError]:
    """Problems of one ``resources`` block (a container's, or a pod's own ``spec.resources``)."""
    if resources is None:
        return []
    if not isinstance(resources, dict):
        return [(path, "Invalid value: must be an object")]
    limits, errors = quantity_map(resources.get("limits"), path + ".limits")
    requests, request_errors = quantity_map(resources.get("requests"), path + ".requests")
    errors.extend(request_errors)
    for name, request in requests.items():
        limit = limits.get(name)
        if limit is None and name in _OVERCOMMITTED:
            continue  # the common case, kept cheap: a cpu or memory request with no limit
        problem = _request_against_limit(name, request, limit)
        if problem is not None:
            errors.append((f"{path}.{problem[0]}", problem[1]))
    return errors


def _request_against_limit(name: str, request: Quantity, limit: Quantity | None) -> FieldError | None:
    """``(limits|requests, message)`` when the request does not fit its limit."""
    if limit is None:
        if overcommit_allowed(name):
            return None
        return "limits", "Required value: Limit must be set for non overcommitable resources"
    if not overcommit_allowed(name) and request.nanos != limit.nanos:
        relation = "equal to"
    elif request.nanos > limit.nanos:
        relation = "less than or equal to"
    else:
        return None
    return (
        "requests",
        f'Invalid value: "{request.canonical()}": must be {relation} {name} limit of {limit.canonical()}',
    )


def pod_spec_errors(spec: Any, path: str) -> list[FieldError]:
    """Resource problems of a pod spec at ``path`` (``spec``, or ``spec.template.spec`` in a workload)."""
    if not isinstance(spec, dict):
        return []
    errors: list[FieldError] = []
    for list_field in ("initContainers", "containers"):
        containers = spec.get(list_field)
        if not isinstance(containers, list):
            continue
        for i, container in enumerate(containers):
            resources = container.get("resources") if isinstance(container, dict) else None
            if resources is not None:
                errors.extend(requirements_errors(resources, f"{path}.{list_field}[{i}].resources"))
    if spec.get("overhead") is not None:
        errors.extend(quantity_map(spec["overhead"], f"{path}.overhead")[1])
    if spec.get("resources") is not None:
        errors.extend(requirements_errors(spec["resources"], f"{path}.resources"))
    return errors


def pod_errors(spec: Any) -> list[FieldError]:
    """Resource problems of a Pod's ``spec``."""
    return pod_spec_errors(spec, "spec")


def template_errors(spec: Any) -> list[FieldError]:
    """Resource problems of a workload's pod template (``spec.template.spec``)."""
    template = spec.get("template") if isinstance(spec, dict) else None
    if not isinstance(template, dict):
        return []
    return pod_spec_errors(template.get("spec"), "spec.template.spec")


def node_errors(status: Any) -> list[FieldError]:
    """Problems of a node's ``status.capacity`` and ``status.allocatable``."""
    if not isinstance(status, dict):
        return []
    errors: list[FieldError] = []
    for part in ("capacity", "allocatable"):
        errors.extend(quantity_map(status.get(part), f"status.{part}", ".{}")[1])
    return errors


def default_requests_from_limits(spec: dict[str, Any]) -> dict[str, Any]:
    """A pod's containers with a limit but no request for a resource request the limit (``SetDefaults_Pod``).

    Returns ``spec`` itself when nothing changes, else a copy with only the changed containers copied.
    """
    changed: dict[str, Any] = {}
    for list_field in ("initContainers", "containers"):
        containers = spec.get(list_field)
        if not isinstance(containers, list):
            continue
        for i, container in enumerate(containers):
            resources = container.get("resources") if isinstance(container, dict) else None
            if not isinstance(resources, dict) or not resources.get("limits"):
                continue  # the common case, kept cheap: nothing to default from
            defaulted = _with_requests_from_limits(container)
            if defaulted is not container:
                changed.setdefault(list_field, list(containers))[i] = defaulted
    return {**spec, **changed} if changed else spec


def _with_requests_from_limits(container: Any) -> Any:
    resources = container.get("resources") if isinstance(container, dict) else None
    if not isinstance(resources, dict):
        return container
    limits, requests = resources.get("limits"), resources.get("requests")
    if not isinstance(limits, dict) or not limits or not isinstance(requests, dict | None):
        return container
    missing = {name: value for name, value in limits.items() if name not in (requests or {})}
    if not missing:
        return container
    return {**container, "resources": {**resources, "requests": {**(requests or {}), **missing}}}
