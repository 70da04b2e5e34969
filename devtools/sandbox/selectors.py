"""Label and field selectors: parsing the query-string forms and matching objects against them.

Label selectors accept the full string grammar of ``k8s.io/apimachinery/pkg/labels``: ``key``, ``!key``,
``key=value``, ``key==value``, ``key!=value``, ``key in (a,b)``, ``key notin (a,b)``; comma means AND. The
structured ``metav1.LabelSelector`` form (``matchLabels`` + ``matchExpressions``) that Deployments, PDBs and
ReplicaSets carry converts to the same :class:`LabelSelector` with :func:`from_label_selector_dict`, so the
sandbox controllers and the HTTP layer share one matcher.

Field selectors accept ``path=value``, ``path==value`` and ``path!=value`` on the paths a resource declares
selectable (see :mod:`devtools.sandbox.resources`). Values compare as the server's field sets render them:
booleans as ``true``/``false``, absent fields as the empty string.

Both parsers raise :class:`~devtools.sandbox.errors.BadRequest` naming the offending term, which the HTTP
layer returns as a 400 ``Status``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from devtools.sandbox.errors import BadRequest

_KEY_RE = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)
_VALUE_RE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")


@dataclass(frozen=True)
class Requirement:
    key: str
    operator: str  # "=", "!=", "in", "notin", "exists", "!"
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        op = self.operator
        if op == "=":
            return labels.get(self.key) == self.values[0]
        if op == "!=":
            return labels.get(self.key) != self.values[0]
        if op == "in":
            return self.key in labels and labels[self.key] in self.values
        if op == "notin":
            return labels.get(self.key) not in self.values
        if op == "exists":
            return self.key in labels
        return self.key not in labels  # "!"

    def render(self) -> str:
        if self.operator in ("=", "!="):
            return f"{self.key}{self.operator}{self.values[0]}"
        if self.operator in ("in", "notin"):
            return f"{self.key} {self.operator} ({','.join(self.values)})"
        return self.key if self.operator == "exists" else f"!{self.key}"


@dataclass(frozen=True)
class LabelSelector:
    """AND of requirements; ``matches_nothing`` is the nil selector (a PDB or Service without a selector)."""

    requirements: tuple[Requirement, ...] = ()
    matches_nothing: bool = False

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        if self.matches_nothing:
            return False
        labels = labels or {}
        return all(r.matches(labels) for r in self.requirements)

    @property
    def is_empty(self) -> bool:
        return not self.requirements and not self.matches_nothing

    def render(self) -> str:
        return ",".join(r.render() for r in self.requirements)


EVERYTHING = LabelSelector()
NOTHING = LabelSelector(matches_nothing=True)


def _check_key(key: str, selector: str) -> str:
    if not key or not _KEY_RE.match(key):
        raise BadRequest(f'unable to parse requirement: invalid label key "{key}" in selector "{selector}"')
    return key


def _check_value(value: str, selector: str) -> str:
    if len(value) > 63 or not _VALUE_RE.match(value):
        raise BadRequest(
            f'unable to parse requirement: invalid label value "{value}" in selector "{selector}"'
        )
    return value


def _split_terms(selector: str) -> list[str]:
    """Split on commas that are not inside ``( )``."""
    terms, depth, start = [], 0, 0
    for i, ch in enumerate(selector):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth < 0:
                raise BadRequest(f'unable to parse label selector "{selector}": unbalanced ")"')
        elif ch == "," and depth == 0:
            terms.append(selector[start:i])
            start = i + 1
    if depth != 0:
        raise BadRequest(f'unable to parse label selector "{selector}": unbalanced "("')
    terms.append(selector[start:])
    return terms


_SET_RE = re.compile(r"^\s*(\S+)\s+(in|notin)\s*\((.*)\)\s*$")


def parse_label_selector(selector: str | None) -> LabelSelector:
    """Parse the ``labelSelector`` query-string form; empty or None selects everything."""
    if selector is None or not selector.strip():
        return EVERYTHING
    requirements: list[Requirement] = []
    for raw in _split_terms(selector):
        term = raw.strip()
        if not term:
            raise BadRequest(f'unable to parse label selector "{selector}": empty requirement')
        set_match = _SET_RE.match(term)
        if set_match:
            key, op, values_raw = set_match.groups()
            values = (
                tuple(_check_value(v.strip(), selector) for v in values_raw.split(","))
                if values_raw.strip()
                else ()
            )
            if not values:
                raise BadRequest(
                    f'unable to parse label selector "{selector}": "{op}" needs at least one value'
                )
            requirements.append(Requirement(_check_key(key, selector), op, values))
            continue
        for token, op in (("!=", "!="), ("==", "="), ("=", "=")):
            if token in term:
                key, value = term.split(token, 1)
                requirements.append(
                    Requirement(
                        _check_key(key.strip(), selector), op, (_check_value(value.strip(), selector),)
                    )
                )
                break
        else:
            if term.startswith("!"):
                requirements.append(Requirement(_check_key(term[1:].strip(), selector), "!"))
            elif " " in term or any(c in term for c in "<>()"):
                raise BadRequest(
                    f'unable to parse label selector "{selector}": unsupported requirement "{term}"'
                )
            else:
                requirements.append(Requirement(_check_key(term, selector), "exists"))
    return LabelSelector(tuple(requirements))


def from_label_selector_dict(selector: Mapping[str, Any] | None, *, where: str = "selector") -> LabelSelector:
    """Convert a ``metav1.LabelSelector`` dict. ``None`` selects nothing; ``{}`` selects everything."""
    if selector is None:
        return NOTHING
    if not isinstance(selector, Mapping):
        raise BadRequest(f"{where}: must be an object with matchLabels/matchExpressions")
    requirements: list[Requirement] = []
    match_labels = selector.get("matchLabels") or {}
    if not isinstance(match_labels, Mapping):
        raise BadRequest(f"{where}.matchLabels: must be a map of strings")
    for key, value in sorted(match_labels.items()):
        requirements.append(Requirement(str(key), "=", (str(value),)))
    for i, expr in enumerate(selector.get("matchExpressions") or []):
        if not isinstance(expr, Mapping) or "key" not in expr or "operator" not in expr:
            raise BadRequest(f"{where}.matchExpressions[{i}]: needs key and operator")
        op = expr["operator"]
        values = tuple(str(v) for v in expr.get("values") or ())
        if op in ("In", "NotIn"):
            if not values:
                raise BadRequest(f"{where}.matchExpressions[{i}].values: must be non-empty for {op}")
            requirements.append(Requirement(str(expr["key"]), op.lower(), values))
        elif op in ("Exists", "DoesNotExist"):
            if values:
                raise BadRequest(f"{where}.matchExpressions[{i}].values: must be empty for {op}")
            requirements.append(Requirement(str(expr["key"]), "exists" if op == "Exists" else "!"))
        else:
            raise BadRequest(f'{where}.matchExpressions[{i}].operator: unsupported operator "{op}"')
    return LabelSelector(tuple(requirements))


def render_label_selector_dict(selector: Mapping[str, Any] | None) -> str:
    """The string form of a structured selector (what a Scale's ``status.selector`` reports)."""
    return from_label_selector_dict(selector).render() if selector is not None else ""


# --- field selectors --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FieldRequirement:
    path: str
    negate: bool
    value: str

    def matches(self, obj: Mapping[str, Any]) -> bool:
        return (field_value(obj, self.path) == self.value) != self.negate


@dataclass(frozen=True)
class FieldSelector:
    requirements: tuple[FieldRequirement, ...] = ()

    def matches(self, obj: Mapping[str, Any]) -> bool:
        return all(r.matches(obj) for r in self.requirements)

    @property
    def is_empty(self) -> bool:
        return not self.requirements

    def exact(self, path: str) -> str | None:
        """The value an ``=`` requirement pins ``path`` to, if any (lets the store use an index)."""
        for r in self.requirements:
            if r.path == path and not r.negate:
                return r.value
        return None


def field_value(obj: Mapping[str, Any], path: str) -> str:
    current: Any = obj
    for part in path.split("."):
        if not isinstance(current, Mapping):
            return ""
        current = current.get(part)
        if current is None:
            return ""
    if isinstance(current, bool):
        return "true" if current else "false"
    return str(current)


def parse_field_selector(
    selector: str | None, allowed: Callable[[str], bool], *, resource: str = ""
) -> FieldSelector:
    """Parse ``fieldSelector``; ``allowed(path)`` says which paths the resource supports (400 otherwise)."""
    if selector is None or not selector.strip():
        return FieldSelector()
    requirements: list[FieldRequirement] = []
    for raw in selector.split(","):
        term = raw.strip()
        for token, negate in (("!=", True), ("==", False), ("=", False)):
            if token in term:
                path, value = term.split(token, 1)
                path = path.strip()
                negated = negate
                break
        else:
            raise BadRequest(f'invalid field selector "{selector}": "{term}" needs an operator (=, ==, !=)')
        if not allowed(path):
            raise BadRequest(
                f'field label not supported: "{path}"' + (f" for {resource}" if resource else "")
            )
        requirements.append(FieldRequirement(path, negated, value.strip()))
    return FieldSelector(tuple(requirements))
