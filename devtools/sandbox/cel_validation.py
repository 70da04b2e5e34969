"""CEL validation rules (``x-kubernetes-validations``) of CustomResourceDefinitions, evaluated as the API
server evaluates them.

The expressions run on ``common-expression-language`` (maintained Python bindings over cel-rust), with the
Kubernetes CEL libraries a CRD rule may call and cel-rust lacks added here: the regex library (``find``,
``findAll``), the strings library (``charAt``, ``indexOf``, ``lastIndexOf``, ``lowerAscii``, ``upperAscii``,
``replace``, ``split``, ``substring``, ``trim``, ``join``, ``reverse``, ``strings.quote``), the sets library
(``sets.contains``, ``sets.equivalent``, ``sets.intersects``) and the lists library (``isSorted``, ``sum``,
``min``, ``max``, ``indexOf``, ``lastIndexOf``). Every rule of the CRDs in ``deploy/crds`` is evaluated.

What the API server does and the sandbox does too:

* a rule sits on a schema node; ``self`` is the value there, and the rule runs wherever that node has a value;
* a transition rule (one naming ``oldSelf``) runs only on an update, where the stored object has a value
  at the same place: object properties and map values correlate by name, ``x-kubernetes-list-type: map``
  items by their keys and ``set`` items by value; items of an atomic list have no stored counterpart;
* ratcheting: a value equal to the stored one is not checked again;
* a rule that is false is reported on the node's path (plus the rule's ``fieldPath``), worded
  ``spec.x: Invalid value: "object": <message>`` (``messageExpression`` when it evaluates to a string, else
  ``message``, else ``failed rule: <rule>``), ``Required value: ...`` or ``Forbidden: ...`` by its
  ``reason``; an evaluation error (``no such key: x``) is reported the same way with the rule named.

What the sandbox cannot evaluate, and does instead: a rule that does not parse (cel-rust lacks the optional
syntax ``a.?b``), or that calls a function neither cel-rust nor this module provides (the Kubernetes
``quantity``, ``url``, ``ip``/``cidr``, ``semver`` and ``format`` libraries, ``authorizer``), and a transition
rule with ``optionalOldSelf`` on a create (``oldSelf`` would be an empty optional). Such a rule is accepted:
the object is stored as if it held, and the sandbox logs once per rule, naming it and its place. The same
happens for every rule when the library is not installed. Values reach CEL as JSON types: a
``format: date-time`` or ``duration`` string stays a string (the API server makes it a timestamp/duration).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from devtools.sandbox.structural import ABSENT, FieldError, Node, correlate_list, describe, join, type_name

log = logging.getLogger(__name__)

_cel: Any
_CEL_EXTENSIONS: dict[str, dict[str, Callable[..., Any]]]
try:  # the CEL engine is a test extra; without it every rule is accepted (and said so once)
    import cel as _cel
    from cel.stdlib import EXTENSIONS as _CEL_EXTENSIONS
except ImportError:  # pragma: no cover - exercised only where the extra is not installed
    _cel = None
    _CEL_EXTENSIONS = {}

_ABSENT = ABSENT
# cel-rust's own functions (macros such as all/exists/has expand into comprehensions and are not listed)
_BUILTIN_FUNCTIONS = frozenset(
    {
        "size", "contains", "startsWith", "endsWith", "matches", "int", "uint", "double", "string", "bytes",
        "bool", "timestamp", "duration", "type", "dyn", "getFullYear", "getMonth",
        "getDayOfYear", "getDayOfMonth", "getDate", "getDayOfWeek", "getHours", "getMinutes", "getSeconds",
        "getMilliseconds", "optional.of", "optional.none", "optional.ofNonZeroValue", "hasValue", "value",
        "or", "orValue",
    }
)  # fmt: skip
_OPERATOR_MARKS = ("_", "@", "!", "-")
_UNDEFINED = "Undefined variable or function"
_REASONS = {"FieldValueRequired": "Required value", "FieldValueForbidden": "Forbidden"}
_warned: set[tuple[str, str]] = set()


def _find(text: str, pattern: str) -> str:
    match = re.search(pattern, text)
    return match.group(0) if match else ""


def _find_all(text: str, pattern: str, limit: int = -1) -> list[str]:
    found = [m.group(0) for m in re.finditer(pattern, text)]
    return found if limit < 0 else found[:limit]


def _index_of(target: Any, item: Any, offset: int = 0) -> int:
    if isinstance(target, str):
        index: int = _CEL_EXTENSIONS["strings"]["indexOf"](target, item, offset)
        return index
    return next((i for i, v in enumerate(target) if v == item), -1)


def _last_index_of(target: Any, item: Any, *offset: int) -> int:
    if isinstance(target, str):
        index: int = _CEL_EXTENSIONS["strings"]["lastIndexOf"](target, item, *offset)
        return index
    return next((i for i in range(len(target) - 1, -1, -1) if target[i] == item), -1)


def _functions() -> dict[str, Callable[..., Any]]:
    functions: dict[str, Callable[..., Any]] = {}
    for library in ("strings", "sets"):
        functions.update(_CEL_EXTENSIONS.get(library, {}))
    functions.update(
        {
            "find": _find,
            "findAll": _find_all,
            "indexOf": _index_of,
            "lastIndexOf": _last_index_of,
            "isSorted": lambda items: list(items) == sorted(items),
            "sum": lambda items: sum(items),
            "min": lambda items: min(items),
            "max": lambda items: max(items),
        }
    )
    return functions


_LIBRARY = _functions()


@dataclass
class Rule:
    """One ``x-kubernetes-validations`` entry of a schema node."""

    source: str
    message: str
    where: str  # the node's path in the schema, for the log (".spec.template")
    message_expression: str = ""
    reason: str = ""
    field_path: str = ""
    optional_old_self: bool = False
    program: Any = None
    message_program: Any = None
    transition: bool = False
    unevaluable: str = ""  # why the sandbox cannot evaluate it ("" when it can)
    _context: Any = field(default=None, repr=False)

    def say_unevaluable(self) -> None:
        key = (self.where, self.source)
        if key not in _warned:
            _warned.add(key)
            log.warning(
                "sandbox: CEL rule %r at %s is not evaluated (%s); objects are accepted as if it held",
                self.source,
                self.where or ".",
                self.unevaluable,
            )


def compile_rule(entry: dict[str, Any], where: str) -> Rule:
    """A rule from its CRD entry; a rule the engine cannot compile is kept, marked unevaluable."""
    rule = Rule(
        source=str(entry.get("rule", "")),
        message=str(entry.get("message") or ""),
        where=where,
        message_expression=str(entry.get("messageExpression") or ""),
        reason=str(entry.get("reason") or ""),
        field_path=str(entry.get("fieldPath") or ""),
        optional_old_self=bool(entry.get("optionalOldSelf")),
    )
    if _cel is None:
        rule.unevaluable = "the CEL engine (common-expression-language) is not installed"
        return rule
    try:
        rule.program = _cel.compile(rule.source)
        if rule.message_expression:
            rule.message_program = _cel.compile(rule.message_expression)
    except (ValueError, RuntimeError) as err:
        rule.unevaluable = f"the CEL engine cannot compile it: {str(err).splitlines()[0]}"
        return rule
    rule.transition = "oldSelf" in (rule.program.variables() or ())
    missing = sorted(missing_functions(rule.program))
    if missing:
        rule.unevaluable = f"the CEL engine lacks {', '.join(missing)}"
    return rule


def missing_functions(program: Any) -> set[str]:
    """The functions a compiled rule calls that neither cel-rust nor this module provides."""
    called = set(program.functions() or ())
    return {
        name
        for name in called
        if name not in _BUILTIN_FUNCTIONS and name not in _LIBRARY and not name.startswith(_OPERATOR_MARKS)
    }


def attach_rules(root: Node) -> list[Rule]:
    """Compile every node's ``x-kubernetes-validations`` onto it; all the rules (for the log and tests)."""
    rules: list[Rule] = []
    _attach(root, "", rules)
    return rules


def _attach(node: Node, where: str, rules: list[Rule]) -> bool:
    """Compile the rules of ``node`` and below; True when some rule sits at or below it."""
    node.rules = tuple(compile_rule(e, where) for e in node.raw.get("x-kubernetes-validations") or ())
    rules.extend(node.rules)
    below = bool(node.rules)
    for name, child in node.properties.items():
        below = _attach(child, f"{where}.{name}", rules) or below
    for nested in (node.items, node.additional):
        if isinstance(nested, Node):
            below = _attach(nested, f"{where}[*]", rules) or below
    node.has_rules = below
    return below


class _Evaluator:
    """Evaluates rules; one Context with the library functions, reused (building one is the costly part)."""

    def __init__(self) -> None:
        self.context: Any = _cel.Context(functions=_LIBRARY) if _cel is not None else None

    def run(self, program: Any, self_value: Any, old: Any) -> Any:
        variables = {"self": self_value}
        if old is not _ABSENT:
            variables["oldSelf"] = old
        self.context.update(variables)
        return program.execute(self.context)


_evaluator: _Evaluator | None = None


def _engine() -> _Evaluator:
    global _evaluator
    if _evaluator is None:
        _evaluator = _Evaluator()
    return _evaluator


def _error_text(err: BaseException) -> str:
    if isinstance(err, KeyError):
        return f"no such key: {err.args[0] if err.args else ''}"
    return str(err).splitlines()[0] if str(err) else type(err).__name__


def _message(rule: Rule, value: Any, old: Any) -> str:
    if rule.message_program is not None:
        try:
            text = _engine().run(rule.message_program, value, old)
        except Exception:  # the message falls back, as upstream, when its expression fails
            text = None
        if isinstance(text, str) and text.strip():
            return text
    return rule.message or f"failed rule: {rule.source}"


def _report(rule: Rule, path: str, value: Any, detail: str) -> FieldError:
    where = path
    if rule.field_path:
        where = (
            path + rule.field_path
            if rule.field_path.startswith("[")
            else join(path, rule.field_path.lstrip("."))
        )
    prefix = _REASONS.get(rule.reason)
    if prefix:
        return where, f"{prefix}: {detail}"
    return where, f'Invalid value: "{type_name(value)}": {detail}'


def check_rule(rule: Rule, value: Any, old: Any, path: str) -> list[FieldError]:
    """The problem ``rule`` finds with ``value`` (``old``: the stored value there, or absent)."""
    if rule.transition and old is _ABSENT:
        if not rule.optional_old_self:
            return []  # a transition rule has nothing to compare on a create
        rule.unevaluable = rule.unevaluable or "optionalOldSelf on a create needs an empty optional oldSelf"
    if rule.unevaluable:
        rule.say_unevaluable()
        return []
    try:
        result = _engine().run(rule.program, value, old if rule.transition else _ABSENT)
    except Exception as err:  # evaluation errors are the object's problem, reported like upstream
        text = _error_text(err)
        if _UNDEFINED in text:
            rule.unevaluable = f"the CEL engine lacks a function it calls: {text}"
            rule.say_unevaluable()
            return []
        return [_report(rule, path, value, f"{text} evaluating rule: {rule.source}")]
    if result is True:
        return []
    if result is not False:
        return [
            _report(rule, path, value, f"rule evaluated to {describe(result)}, not a bool: {rule.source}")
        ]
    return [_report(rule, path, value, _message(rule, value, old))]


def rule_errors(node: Node, value: Any, path: str, old: Any = _ABSENT) -> list[FieldError]:
    """Every rule at or below ``node`` that ``value`` breaks (ratcheting: unchanged values pass)."""
    if not node.has_rules or value is None or (old is not _ABSENT and (old is value or old == value)):
        return []
    errors: list[FieldError] = []
    for rule in node.rules:
        errors.extend(check_rule(rule, value, old, path))
    if isinstance(value, dict):
        stored = old if isinstance(old, dict) else None
        for key, item in value.items():
            child = node.child(key)
            if child is not None and child.has_rules and not (not path and key == "metadata"):
                before = stored.get(key, _ABSENT) if stored is not None else _ABSENT
                errors.extend(rule_errors(child, item, join(path, key), before))
    elif isinstance(value, list) and node.items is not None and node.items.has_rules:
        counterpart = correlate_list(node, old) if isinstance(old, list) else None
        for i, item in enumerate(value):
            before = counterpart(item) if counterpart is not None else _ABSENT
            errors.extend(rule_errors(node.items, item, f"{path}[{i}]", before))
    return errors
