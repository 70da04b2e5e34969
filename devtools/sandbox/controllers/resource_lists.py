"""Resource vectors for the simulated scheduler and kubelet: ``{resource: amount}`` in integer units.

A resource list from an object (requests, overhead, capacity, allocatable) becomes a plain ``dict[str, int]``
through the project's one quantity parser (:mod:`tenon.core.quantities`): cpu in millicores, everything else
in base units, rounded up. :func:`add_into` and friends do the arithmetic in place, as the scheduler's cache
keeps running totals per node.

A bad list raises :class:`InvalidResources`, one line naming where it came from, e.g. ``pod default/web-1:
spec.containers[0].resources.requests[cpu]: quantity "lots": not a number ...``. Admission refuses such
objects, so this is the controllers' guard against an object stored some other way: they log and skip it.
"""

from __future__ import annotations

from collections.abc import Mapping

from tenon.core.quantities import QuantityError, to_canonical


class InvalidResources(ValueError):
    """A resource list that cannot be read; the message names the object and field."""


def resource_list(values: object, where: str) -> dict[str, int]:
    """A ``{resource: quantity}`` map as integer units (cpu millicores, base units otherwise)."""
    if not values:
        return {}
    if not isinstance(values, Mapping):
        raise InvalidResources(
            f"{where}: expected a map of resource name to quantity, got {type(values).__name__}"
        )
    out: dict[str, int] = {}
    for name, quantity in values.items():
        try:
            out[name] = to_canonical(name, quantity)
        except QuantityError as err:
            raise InvalidResources(f"{where}[{name}]: {err}") from None
    return out


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
