"""Node requirements and label selectors: the matching rules of Kubernetes and Karpenter.

Two related languages live here:

* :class:`Requirement` is a node-selector requirement (``key``, ``operator`` in In/NotIn/Exists/DoesNotExist/
  Gt/Lt, Karpenter's Gte/Lte, ``values``, and Karpenter's optional ``minValues``). It is used by NodePool
  ``spec.template.spec.requirements``, pod ``nodeSelector`` (as ``In`` with one value) and required/preferred
  node affinity terms. :func:`allows` answers "would a node whose label ``key`` has this value (or is absent,
  ``None``) satisfy the requirement?". ``Gt``/``Lt``/``Gte``/``Lte`` compare integers, as Kubernetes and
  Karpenter do: a label value that is not an integer (ASCII digits, :func:`integer`) fails them.
  ``Gte``/``Lte`` (Karpenter v1, late 2025) are accepted where Karpenter accepts them: NodePool and NodeClaim
  requirements (:data:`KARPENTER_OPERATORS`); a pod's node affinity keeps Kubernetes' operators
  (:data:`NODE_OPERATORS`), as the API server would refuse anything else there.
* :class:`LabelSelector` (``matchLabels`` + ``matchExpressions`` with In/NotIn/Exists/DoesNotExist) selects
  *pods* for pod affinity, anti-affinity and topology spread.

Both are frozen and hashable so the solver can use them as dictionary keys when it groups identical pods.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

NODE_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")
KARPENTER_OPERATORS = (*NODE_OPERATORS, "Gte", "Lte")
SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")
NUMERIC_OPERATORS = ("Gt", "Lt", "Gte", "Lte")
_INTEGER = re.compile(r"[+-]?[0-9]{1,19}", re.ASCII)


def integer(text: str) -> int | None:
    """``text`` as an int64 written in ASCII digits (an optional sign), else ``None``.

    Python's ``int()`` also reads full-width and other Unicode digits (``"１"``) and underscores, which
    Kubernetes refuses; this does not, and it never reads more than 19 digits.
    """
    if not _INTEGER.fullmatch(text):
        return None
    number = int(text)
    return number if -(2**63) <= number < 2**63 else None


@dataclass(frozen=True)
class Requirement:
    key: str
    operator: str
    values: tuple[str, ...] = ()
    min_values: int | None = None

    def allows(self, value: str | None) -> bool:
        """Whether a node whose label ``key`` is ``value`` (``None``: label absent) satisfies this."""
        op = self.operator
        if op == "In":
            return value is not None and value in self.values
        if op == "NotIn":
            return value is None or value not in self.values
        if op == "Exists":
            return value is not None
        if op == "DoesNotExist":
            return value is None
        if value is None:
            return False
        number, bound = integer(value), integer(self.values[0])
        if number is None or bound is None:
            return False
        if op == "Gt":
            return number > bound
        if op == "Lt":
            return number < bound
        if op == "Gte":
            return number >= bound
        return op == "Lte" and number <= bound

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {"key": self.key, "operator": self.operator}
        if self.values:
            out["values"] = list(self.values)
        if self.min_values is not None:
            out["minValues"] = self.min_values
        return out

    def describe(self) -> str:
        if self.operator in ("Exists", "DoesNotExist"):
            return f"{self.key} {self.operator}"
        return f"{self.key} {self.operator} [{','.join(self.values)}]"


def all_allow(requirements: Iterable[Requirement], labels: Mapping[str, str]) -> bool:
    """Whether a node with ``labels`` satisfies every requirement (an AND, as within one affinity term)."""
    return all(req.allows(labels.get(req.key)) for req in requirements)


def first_violation(requirements: Iterable[Requirement], labels: Mapping[str, str]) -> Requirement | None:
    for req in requirements:
        if not req.allows(labels.get(req.key)):
            return req
    return None


@dataclass(frozen=True)
class LabelSelector:
    """A pod label selector. The empty selector matches every pod, as in Kubernetes; a selector left out of a
    topology spread or pod affinity term (``null``) matches none (``nothing``)."""

    match_labels: tuple[tuple[str, str], ...] = ()
    match_expressions: tuple[Requirement, ...] = ()
    nothing: bool = False

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.nothing:
            return False
        for key, value in self.match_labels:
            if labels.get(key) != value:
                return False
        return all(expr.allows(labels.get(expr.key)) for expr in self.match_expressions)

    def describe(self) -> str:
        if self.nothing:
            return "<no pods>"
        parts = [f"{k}={v}" for k, v in self.match_labels]
        parts += [expr.describe() for expr in self.match_expressions]
        return ",".join(parts) or "<all pods>"
