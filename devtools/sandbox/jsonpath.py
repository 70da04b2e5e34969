"""The JSONPath subset CustomResourceDefinitions use: printer columns and scale subresource paths.

``additionalPrinterColumns[].jsonPath`` and ``subresources.scale.*Path`` are kubectl-style JSONPath without
the braces: ``.spec.replicas``, ``.metadata.labels.node\\.kubernetes\\.io/instance-type`` (an escaped dot
stays in the field name), ``.status.conditions[?(@.type=="Ready")].status``, ``.spec.items[0].name``,
``.spec.items[*].name``. That is all CRDs use in practice; anything else is refused when the CRD is
registered (:class:`JsonPathError`), so a bad column is reported on the CRD, not at print time.

:func:`compile_path` parses once; :meth:`JsonPath.find` returns every match (a list: a filter or ``[*]`` can
match several values, a missing field matches none).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Step = Callable[[list[Any]], list[Any]]
_FILTER = re.compile(
    r"""^\?\(@\.([A-Za-z0-9_\-/.]+)\s*(==|!=)\s*(?:"([^"]*)"|'([^']*)'|(-?[0-9.]+)|(true|false))\)$"""
)


class JsonPathError(ValueError):
    """A path outside the supported subset, or malformed."""


@dataclass(frozen=True)
class JsonPath:
    source: str
    steps: tuple[Step, ...]

    def find(self, obj: Any) -> list[Any]:
        values = [obj]
        for step in self.steps:
            values = step(values)
            if not values:
                break
        return values

    def first(self, obj: Any, default: Any = None) -> Any:
        found = self.find(obj)
        return found[0] if found else default


def _field(name: str) -> Step:
    def step(values: list[Any]) -> list[Any]:
        return [v[name] for v in values if isinstance(v, dict) and name in v and v[name] is not None]

    return step


def _index(index: int) -> Step:
    def step(values: list[Any]) -> list[Any]:
        out = []
        for v in values:
            if isinstance(v, list) and -len(v) <= index < len(v):
                out.append(v[index])
        return out

    return step


def _every(values: list[Any]) -> list[Any]:
    out: list[Any] = []
    for v in values:
        if isinstance(v, list):
            out.extend(v)
        elif isinstance(v, dict):
            out.extend(v.values())
    return out


def _literal(match: re.Match[str]) -> Any:
    if match[3] is not None or match[4] is not None:
        return match[3] if match[3] is not None else match[4]
    if match[6] is not None:
        return match[6] == "true"
    number = float(match[5])
    return int(number) if number.is_integer() else number


def _filter(expression: str) -> Step:
    match = _FILTER.match(expression)
    if match is None:
        raise JsonPathError(f'unsupported filter [{expression}]: only [?(@.field=="value")] and != are')
    key = compile_path("." + match[1])
    wanted, negate = _literal(match), match[2] == "!="

    def step(values: list[Any]) -> list[Any]:
        out = []
        for item in _every(values):
            found = key.find(item)
            if found and ((found[0] == wanted) != negate):
                out.append(item)
        return out

    return step


def _bracket(inner: str) -> Step:
    if inner == "*":
        return _every
    if inner.startswith("?"):
        return _filter(inner)
    if re.fullmatch(r"-?[0-9]+", inner):
        return _index(int(inner))
    if len(inner) >= 2 and inner[0] == inner[-1] and inner[0] in "'\"":
        return _field(inner[1:-1])
    raise JsonPathError(f"unsupported subscript [{inner}]")


def _read_name(text: str, at: int) -> tuple[str, int]:
    """A field name from ``at`` up to the next unescaped ``.`` or ``[``; ``\\.`` is a literal dot."""
    name: list[str] = []
    while at < len(text) and text[at] not in ".[":
        if text[at] == "\\" and at + 1 < len(text):
            at += 1
        name.append(text[at])
        at += 1
    return "".join(name), at


def _closing_bracket(text: str, at: int) -> int:
    quote = None
    for i in range(at, len(text)):
        char = text[i]
        if quote:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "]":
            return i
    raise JsonPathError(f"{text}: unclosed [")


def compile_path(source: str) -> JsonPath:
    """Parse ``.a.b[0].c`` (braces ``{...}`` around it are accepted and dropped)."""
    text = source.strip()
    if text.startswith("{") and text.endswith("}"):
        text = text[1:-1].strip()
    if not text.startswith((".", "[")):
        raise JsonPathError(f"{source}: a path starts with . (such as .spec.replicas)")
    steps: list[Step] = []
    at = 0
    while at < len(text):
        if text[at] == "[":
            end = _closing_bracket(text, at + 1)
            steps.append(_bracket(text[at + 1 : end].strip()))
            at = end + 1
            continue
        name, at = _read_name(text, at + 1)
        if not name:
            raise JsonPathError(f"{source}: an empty field name")
        steps.append(_field(name))
    return JsonPath(source, tuple(steps))
