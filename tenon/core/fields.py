"""Reading fields of Kubernetes objects (plain dicts) with errors that say where: :class:`Ctx`.

A :class:`Ctx` knows the source (file, or ``event``), the document index, the object's kind and name; every
reader takes the field's path (``spec.template.spec.containers[0].resources.requests.cpu``) and raises an
:class:`~tenon.core.errors.InputError` naming all of them when the value is not what Kubernetes accepts
there. Integers are ASCII digits within int64 (never ``"１"``), quantities go through the one quantity parser
(:mod:`tenon.core.quantities`), requirements and selectors are checked as the API server (and, for NodePool
and NodeClaim requirements, Karpenter) checks them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tenon.core.errors import InputError
from tenon.core.model import Taint, Toleration
from tenon.core.quantities import QuantityError, show, to_canonical
from tenon.core.requirements import (
    KARPENTER_OPERATORS,
    NUMERIC_OPERATORS,
    SELECTOR_OPERATORS,
    LabelSelector,
    Requirement,
    integer,
)

TAINT_EFFECTS = ("NoSchedule", "NoExecute", "PreferNoSchedule")


def shown(value: Any) -> str:
    """``value`` for a one-line message: a scalar quoted (cut when long), a list or map by its kind only."""
    if value is None or isinstance(value, str | int | float | bool):
        return show(value)
    if isinstance(value, list):
        return "a list"
    return "a map" if isinstance(value, Mapping) else f"a {type(value).__name__}"


class Ctx:
    """Where we are: turns a field path and a problem into an :class:`InputError`."""

    def __init__(self, source: str, index: int | None, kind: str, name: str):
        self.source, self.index, self.kind, self.name = source, index, kind, name

    def error(self, field: str, problem: str) -> InputError:
        return InputError(self.source, self.index, self.kind, self.name, field, problem)

    def mapping(self, value: Any, field: str) -> Mapping[str, Any]:
        if type(value) is dict:  # what JSON and YAML give: no abstract-class check needed
            return value
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            raise self.error(field, f"must be a map, got {type(value).__name__}")
        return value

    def listing(self, value: Any, field: str) -> list[Any]:
        if value is None:
            return []
        if not isinstance(value, list):
            raise self.error(field, f"must be a list, got {type(value).__name__}")
        return value

    def integer(self, value: Any, field: str, minimum: int | None = None, maximum: int | None = None) -> int:
        """An integer field: a JSON/YAML integer or a string of ASCII digits (never ``"１"``), within int64
        and the bounds given."""
        number = value if isinstance(value, int) and not isinstance(value, bool) else None
        if isinstance(value, str):
            number = integer(value.strip())
        if number is None or not -(2**63) <= number < 2**63:
            raise self.error(field, f"must be an integer, got {shown(value)}")
        if minimum is not None and number < minimum:
            raise self.error(field, f"must be at least {minimum}, got {number}")
        if maximum is not None and number > maximum:
            raise self.error(field, f"must be at most {maximum}, got {number}")
        return number

    def resources(self, value: Any, field: str) -> dict[str, int]:
        out: dict[str, int] = {}
        for key, amount in self.mapping(value, field).items():
            try:
                out[str(key)] = to_canonical(str(key), amount)
            except QuantityError as err:
                raise self.error(f"{field}.{key}", str(err)) from None
        return out

    def text(self, value: Any, field: str) -> str:
        """A string field (a number or boolean YAML gave is taken as its text; ``None`` is empty)."""
        if value is None:
            return ""
        if isinstance(value, list | Mapping):
            raise self.error(field, f"must be a string, got {shown(value)}")
        return value if isinstance(value, str) else str(value)

    def labels(self, value: Any, field: str) -> dict[str, str]:
        mapping = self.mapping(value, field)
        for k, v in mapping.items():
            if type(k) is not str or type(v) is not str:
                return {str(k): self.text(v, f"{field}.{k}") for k, v in mapping.items()}
        return dict(mapping)  # what the API server gives: strings only (every pod's labels, parsed once)


def requirement(ctx: Ctx, raw: Any, field: str, operators: tuple[str, ...]) -> Requirement:
    raw = ctx.mapping(raw, field)
    key = raw.get("key")
    if not key or not isinstance(key, str):
        raise ctx.error(f"{field}.key", "is required")
    op = raw.get("operator")
    if not isinstance(op, str) or op not in operators:
        raise ctx.error(f"{field}.operator", f"{shown(op)} is not one of {', '.join(operators)}")
    listed = ctx.listing(raw.get("values"), f"{field}.values")
    values = tuple(ctx.text(v, f"{field}.values[{i}]") for i, v in enumerate(listed))
    if op in ("In", "NotIn") and not values:
        raise ctx.error(f"{field}.values", f"operator {op} needs at least one value")
    if op in ("Exists", "DoesNotExist") and values:
        raise ctx.error(f"{field}.values", f"operator {op} takes no values")
    if op in NUMERIC_OPERATORS:
        if len(values) != 1:
            raise ctx.error(f"{field}.values", f"operator {op} needs exactly one integer value")
        # Karpenter's requirements take a non-negative integer; a pod's Gt/Lt any int64, as Kubernetes
        ctx.integer(values[0], f"{field}.values[0]", 0 if operators is KARPENTER_OPERATORS else None)
    min_values = None
    if raw.get("minValues") is not None:
        min_values = ctx.integer(raw["minValues"], f"{field}.minValues", 1)
        if op == "In" and min_values > len(values):
            raise ctx.error(
                f"{field}.minValues", f"{min_values} is more than the {len(values)} values listed"
            )
    return Requirement(key, op, values, min_values)


def selector(ctx: Ctx, raw: Any, field: str) -> LabelSelector:
    raw = ctx.mapping(raw, field)
    labels = ctx.labels(raw.get("matchLabels"), f"{field}.matchLabels")
    exprs = tuple(
        requirement(ctx, e, f"{field}.matchExpressions[{i}]", SELECTOR_OPERATORS)
        for i, e in enumerate(ctx.listing(raw.get("matchExpressions"), f"{field}.matchExpressions"))
    )
    return LabelSelector(tuple(sorted(labels.items())), exprs)


def taints(ctx: Ctx, raw: Any, field: str) -> tuple[Taint, ...]:
    out = []
    for i, t in enumerate(ctx.listing(raw, field)):
        t = ctx.mapping(t, f"{field}[{i}]")
        if not t.get("key"):
            raise ctx.error(f"{field}[{i}].key", "is required")
        effect = t.get("effect")
        if effect not in TAINT_EFFECTS:
            raise ctx.error(
                f"{field}[{i}].effect", f"{shown(effect)} is not one of {', '.join(TAINT_EFFECTS)}"
            )
        out.append(Taint(str(t["key"]), str(t.get("value") or ""), str(effect)))
    return tuple(out)


def tolerations(ctx: Ctx, raw: Any, field: str) -> tuple[Toleration, ...]:
    out = []
    for i, t in enumerate(ctx.listing(raw, field)):
        t = ctx.mapping(t, f"{field}[{i}]")
        op = t.get("operator") or "Equal"
        if op not in ("Equal", "Exists"):
            raise ctx.error(f"{field}[{i}].operator", f"{shown(op)} is not Equal or Exists")
        out.append(
            Toleration(str(t.get("key") or ""), op, str(t.get("value") or ""), str(t.get("effect") or ""))
        )
    return tuple(out)
