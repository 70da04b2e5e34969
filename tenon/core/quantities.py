"""Kubernetes resource quantities as exact integers.

A quantity (``"100m"``, ``"1.5Gi"``, ``"2e3"``, ``4``) is parsed exactly with :class:`fractions.Fraction` and
then stored in the scheduler's canonical integer unit: CPU in millicores, every other resource (memory,
ephemeral-storage, pods, extended resources such as ``nvidia.com/gpu``) in its base unit. Rounding is always
*up* (a request of 0.5 bytes needs a byte), which keeps every fit check on the safe side. Integers make sums
and comparisons exact and fast; the packer works on them directly.

Parsing errors raise :class:`QuantityError`; callers wrap it into an ``InputError`` that names the object and
field, so this module stays free of any notion of where a quantity came from.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}
_PATTERN = re.compile(r"^([+-]?(?:\d+(?:\.\d*)?|\.\d+))(?:([eE][+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]))?$")

CPU = "cpu"
MEMORY = "memory"
PODS = "pods"
EPHEMERAL_STORAGE = "ephemeral-storage"


class QuantityError(ValueError):
    """A string that is not a Kubernetes quantity."""


def parse_quantity(value: object) -> Fraction:
    """Exact value of a quantity in base units (cores for CPU, bytes for memory)."""
    if isinstance(value, bool):
        raise QuantityError(f"expected a quantity, got {value!r}")
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise QuantityError(f"expected a finite quantity, got {value!r}")
        return Fraction(str(value))
    if not isinstance(value, str):
        raise QuantityError(f"expected a quantity string, got {type(value).__name__}")
    match = _PATTERN.match(value.strip())
    if not match:
        raise QuantityError(f"{value!r} is not a Kubernetes quantity (examples: 500m, 2, 1.5Gi, 4G)")
    number, exponent, suffix = match.groups()
    amount = Fraction(number)
    if exponent:
        amount *= Fraction(10) ** int(exponent[1:])
    elif suffix in _BINARY:
        amount *= _BINARY[suffix]
    elif suffix:
        amount *= _DECIMAL[suffix]
    if amount < 0:
        raise QuantityError(f"{value!r} is negative")
    return amount


def to_canonical(resource: str, value: object) -> int:
    """Quantity in the scheduler's integer unit for ``resource`` (millicores for cpu), rounded up."""
    amount = parse_quantity(value)
    if resource == CPU:
        amount *= 1000
    return math.ceil(amount)


def format_quantity(resource: str, amount: int) -> str:
    """Human form of a canonical amount: ``1500m``/``2`` for cpu, ``512Mi``/``3Gi`` for bytes."""
    if resource == CPU:
        return f"{amount // 1000}" if amount % 1000 == 0 else f"{amount}m"
    if resource in (MEMORY, EPHEMERAL_STORAGE):
        for suffix, factor in (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
            if amount >= factor and amount % factor == 0:
                return f"{amount // factor}{suffix}"
        if amount >= 2**30:
            return f"{amount / 2**30:.1f}Gi"
        if amount >= 2**20:
            return f"{amount / 2**20:.1f}Mi"
    return str(amount)


def format_resources(resources: dict[str, int]) -> str:
    """``cpu=1500m memory=3Gi`` for messages, in a stable order (cpu, memory, then alphabetical)."""
    order = sorted(resources, key=lambda name: (name != CPU, name != MEMORY, name))
    return " ".join(f"{name}={format_quantity(name, resources[name])}" for name in order)
