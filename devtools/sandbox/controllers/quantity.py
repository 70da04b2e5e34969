"""Kubernetes resource quantities as exact integers, for the simulated scheduler and kubelet.

A quantity string (``"100m"``, ``"1.5"``, ``"2Gi"``, ``"1e3"``, ``"500M"``) is parsed exactly with
:class:`decimal.Decimal` and converted to an integer in the unit the scheduler compares in: **millicores**
for ``cpu`` and **base units** (bytes, counts) for everything else, rounding up as the apiserver does when it
canonicalises a quantity to its smallest representable value. A resource vector is a plain
``dict[str, int]``; :func:`add_into`, :func:`fits` and friends work on those.

Bad input raises :class:`QuantityError` naming the field it came from, so a malformed pod request or node
capacity is reported as e.g. ``pod default/web-1: spec.containers[0].resources.requests.cpu: invalid
quantity 'lots'``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from decimal import Decimal, InvalidOperation

_BINARY_SUFFIXES = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL_SUFFIXES = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
}
_QUANTITY = re.compile(
    r"^([+-]?(?:\d+\.?\d*|\.\d+))(?:([eE][+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E))?$"
)

# The unit each resource is compared in: cpu in millicores, everything else in whole base units.
MILLI_RESOURCES = frozenset({"cpu"})


class QuantityError(ValueError):
    """A quantity that is not a valid Kubernetes quantity; the message names where it came from."""


def parse_quantity(value: object, where: str = "quantity") -> Decimal:
    """The exact value of a Kubernetes quantity (a string, or a bare int/float as YAML may give)."""
    if isinstance(value, bool):
        raise QuantityError(f"{where}: invalid quantity {value!r}")
    if isinstance(value, int | float):
        if isinstance(value, float) and not math.isfinite(value):
            raise QuantityError(f"{where}: invalid quantity {value!r}")
        return Decimal(str(value))
    if not isinstance(value, str):
        raise QuantityError(
            f"{where}: invalid quantity {value!r} (expected a string such as '500m' or '2Gi')"
        )
    match = _QUANTITY.match(value.strip())
    if not match:
        raise QuantityError(f"{where}: invalid quantity {value!r}")
    number, exponent, suffix = match.groups()
    try:
        base = Decimal(number)
        if exponent:
            return base * (Decimal(10) ** int(exponent[1:]))
    except (InvalidOperation, ValueError):
        raise QuantityError(f"{where}: invalid quantity {value!r}") from None
    if suffix in _BINARY_SUFFIXES:
        return base * _BINARY_SUFFIXES[suffix]
    return base * _DECIMAL_SUFFIXES[suffix or ""]


def to_units(resource: str, value: object, where: str = "quantity") -> int:
    """A quantity as the integer the scheduler compares: millicores for cpu, base units otherwise (ceil)."""
    exact = parse_quantity(value, where)
    if resource in MILLI_RESOURCES:
        exact *= 1000
    return math.ceil(exact)


def resource_list(values: Mapping[str, object] | None, where: str) -> dict[str, int]:
    """A ``{resource: quantity}`` map (requests, capacity, allocatable, overhead) as integer units."""
    if not values:
        return {}
    if not isinstance(values, Mapping):
        raise QuantityError(
            f"{where}: expected a map of resource name to quantity, got {type(values).__name__}"
        )
    return {name: to_units(name, q, f"{where}.{name}") for name, q in values.items()}


def add_into(total: dict[str, int], extra: Mapping[str, int]) -> dict[str, int]:
    """Add ``extra`` into ``total`` in place and return it."""
    for name, amount in extra.items():
        total[name] = total.get(name, 0) + amount
    return total


def subtract_into(total: dict[str, int], extra: Mapping[str, int]) -> dict[str, int]:
    """Subtract ``extra`` from ``total`` in place (dropping zeros) and return it."""
    for name, amount in extra.items():
        left = total.get(name, 0) - amount
        if left:
            total[name] = left
        else:
            total.pop(name, None)
    return total


def max_into(total: dict[str, int], other: Mapping[str, int]) -> dict[str, int]:
    """Element-wise maximum of ``total`` and ``other``, written into ``total``."""
    for name, amount in other.items():
        if amount > total.get(name, 0):
            total[name] = amount
    return total


def insufficient(
    request: Mapping[str, int], used: Mapping[str, int], allocatable: Mapping[str, int]
) -> list[str]:
    """Names of the resources for which ``used + request`` exceeds ``allocatable`` (zero requests never do)."""
    return sorted(
        name
        for name, amount in request.items()
        if amount > 0 and used.get(name, 0) + amount > allocatable.get(name, 0)
    )


def format_units(resource: str, amount: int) -> str:
    """An integer unit amount back as a canonical quantity string (``1500`` cpu -> ``"1500m"``)."""
    if resource in MILLI_RESOURCES:
        return f"{amount // 1000}" if amount % 1000 == 0 else f"{amount}m"
    for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
        factor = _BINARY_SUFFIXES[suffix]
        if amount and amount % factor == 0:
            return f"{amount // factor}{suffix}"
    return str(amount)


def sum_lists(lists: Iterable[Mapping[str, int]]) -> dict[str, int]:
    total: dict[str, int] = {}
    for one in lists:
        add_into(total, one)
    return total
