"""Kubernetes resource quantities: the API server's grammar, exact values, and tenon's integer units.

One parser for the whole project (the core, the services and the sandbox). It follows
``k8s.io/apimachinery/pkg/api/resource/quantity.go``:

* grammar: an optional sign, ASCII digits with an optional decimal point (``1``, ``1.5``, ``1.``, ``.5``),
  then one suffix: binary ``Ki Mi Gi Ti Pi Ei``, decimal ``n u m k M G T P E`` (or none), or an exponent
  ``e``/``E`` with an optional sign and ASCII digits (``1e3``, ``2E-3``). Surrounding whitespace is ignored,
  as the API server's JSON decoding trims it; JSON numbers (Python ``int``/``float``) are read like their
  text. Everything else is refused: words (``lots``), other digits (full-width ``１``), ``NaN``/``inf``,
  a bare sign or point, an exponent outside int64 (the API server's own limit);
* value: exact, kept in nano units (10^-9), a finer non-zero value rounded away from zero to a whole nano
  (``0.1n`` is ``1n``), as the API server does so that asking for a little gets something;
* format: the suffix family a quantity was written in (``DecimalSI``, ``BinarySI``, ``DecimalExponent``)
  decides its canonical form, as the API server re-emits it: ``1.5`` -> ``1500m``, ``1.5Gi`` -> ``1536Mi``,
  ``2e3`` -> ``2e3``, a BinarySI value under 1024 or with a fraction in decimal (``0.5Ki`` -> ``512``).

Tenon's own bounds, so that no input costs more than a bounded amount of work and every value fits the int64
the real scheduler counts in: at most ``MAX_LENGTH`` characters, and a magnitude of at most
``MAX_MAGNITUDE`` (2^63-1) base units. The API server caps a BinarySI value there silently and keeps a larger
decimal one that its int64 accessors then overflow on; tenon refuses both with a one-line error.

Negative quantities are valid syntax (``-1``); refusing them is validation, not parsing. :func:`parse` keeps
the sign, so the sandbox can answer as the API server does (``must be greater than or equal to 0``); every
resource amount the core reads is a request or a capacity, so :func:`parse_quantity` and
:func:`to_canonical` refuse a negative one.

The core works in integers (:func:`to_canonical`): CPU in millicores, every other resource (memory,
ephemeral-storage, pods, extended resources such as ``nvidia.com/gpu``) in its base unit, rounded *up* (a
request of 0.5 bytes needs a byte), which keeps every fit check on the safe side.

Errors raise :class:`QuantityError`, one line naming the value; callers wrap it into an error naming the
object and field, so this module stays free of any notion of where a quantity came from.
"""

from __future__ import annotations

import functools
import json
import math
import re
from fractions import Fraction
from typing import NamedTuple

CPU = "cpu"
MEMORY = "memory"
PODS = "pods"
EPHEMERAL_STORAGE = "ephemeral-storage"

DECIMAL_SI = "DecimalSI"
BINARY_SI = "BinarySI"
DECIMAL_EXPONENT = "DecimalExponent"

MAX_MAGNITUDE = 2**63 - 1  # base units: the largest value an int64 holds (the API server's cap)
MAX_LENGTH = 100  # characters: far above any real quantity (2^63-1 in nanos has 28 digits)
NANO = 10**9
_MAX_NANOS = MAX_MAGNITUDE * NANO
_INT64 = 2**63 - 1
EXAMPLES = "such as 500m, 2, 1.5Gi, 4G or 1e3"

_BINARY_EXPONENTS = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL_EXPONENTS = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_DECIMAL_SUFFIXES = {exponent: suffix for suffix, exponent in _DECIMAL_EXPONENTS.items()}
_BINARY_SUFFIXES = ("", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei")
# [0-9], never \d: \d also matches full-width and other Unicode digits, which the API server refuses.
_GRAMMAR = re.compile(
    r"([+-]?)([0-9]*)(?:\.([0-9]*))?(?:([KMGTPE]i)|[eE]([+-]?[0-9]+)|([numkMGTPE]?))", re.ASCII
)


class QuantityError(ValueError):
    """A value that is not a quantity tenon accepts; ``str()`` is one line naming the value."""

    def __init__(self, value: object, reason: str) -> None:
        self.value = value
        self.shown = show(value)
        self.reason = reason
        super().__init__(f"quantity {self.shown}: {reason}")


def show(value: object, limit: int = 40) -> str:
    """``value`` quoted for a one-line message (escapes kept, long text cut), as the API server prints it."""
    if isinstance(value, str):
        text = value
    elif isinstance(value, int) and not isinstance(value, bool):
        text = _int_text(value)
    else:
        text = repr(value)
    if len(text) > limit:
        text = text[:limit] + "..."
    return json.dumps(text, ensure_ascii=False)


def _int_text(value: int) -> str:
    if abs(value) > 10**30:  # str() of a huge int is slow (and over 4300 digits, an error)
        return f"{'-' if value < 0 else ''}<an integer of about 10^{int(math.log10(abs(value)))}>"
    return str(value)


class Quantity(NamedTuple):
    """A parsed quantity: its exact value in nano units (signed) and the format it was written in."""

    nanos: int
    format: str = DECIMAL_SI

    @property
    def value(self) -> Fraction:
        """The exact value in base units (cores for CPU, bytes for memory)."""
        return Fraction(self.nanos, NANO)

    def canonical(self) -> str:
        """The API server's canonical text: ``1500m``, ``1536Mi``, ``2e3``, ``0``."""
        if self.nanos == 0:
            return "0"
        sign = "-" if self.nanos < 0 else ""
        magnitude = abs(self.nanos)
        if self.format == BINARY_SI and magnitude >= 1024 * NANO and magnitude % NANO == 0:
            amount, power = magnitude // NANO, 0
            while amount % 1024 == 0 and power < len(_BINARY_SUFFIXES) - 1:
                amount, power = amount // 1024, power + 1
            return f"{sign}{amount}{_BINARY_SUFFIXES[power]}"
        amount, exponent = magnitude, -9
        while amount % 10 == 0:
            amount, exponent = amount // 10, exponent + 1
        shift = exponent % 3  # the exponent goes down to a multiple of three
        amount, exponent = amount * 10**shift, exponent - shift
        if self.format == DECIMAL_EXPONENT:
            return f"{sign}{amount}{f'e{exponent}' if exponent else ''}"
        return f"{sign}{amount}{_DECIMAL_SUFFIXES[exponent]}"


def parse(value: object) -> Quantity:
    """The quantity ``value`` (a string, or an int/float as JSON or YAML may give), sign kept."""
    if isinstance(value, str):
        return _parse_text(value)
    if isinstance(value, bool):
        raise QuantityError(value, f"expected a quantity {EXAMPLES}, got a boolean")
    if isinstance(value, int):
        if abs(value) > MAX_MAGNITUDE:
            raise QuantityError(value, f"too large: the largest quantity is 2^63-1 ({MAX_MAGNITUDE})")
        return Quantity(value * NANO)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise QuantityError(value, "not a finite number")
        return _parse_text(repr(value))
    raise QuantityError(value, f"expected a quantity {EXAMPLES}, got {type(value).__name__}")


@functools.lru_cache(maxsize=4096)
def _parse_text(text: str) -> Quantity:
    """The quantity a text says; cached because quantities repeat (every replica asks for the same ``100m``),
    so a repeat costs a dictionary look-up. Refusals are not cached: each raises again."""
    if len(text) > MAX_LENGTH:
        raise QuantityError(text, f"longer than {MAX_LENGTH} characters")
    match = _GRAMMAR.fullmatch(text.strip())
    if match is None or not (match[2] or match[3]):
        raise QuantityError(text, f"not a number with an optional suffix, {EXAMPLES}")
    sign, whole, fraction, binary, exponent, decimal = match.groups()
    fraction = fraction or ""
    if binary:
        fmt, power10, power2 = BINARY_SI, 0, _BINARY_EXPONENTS[binary]
    elif exponent is not None:
        fmt, power10, power2 = DECIMAL_EXPONENT, int(exponent), 0
        if abs(power10) > _INT64:
            raise QuantityError(text, "the exponent is out of range")
    else:
        fmt, power10, power2 = DECIMAL_SI, _DECIMAL_EXPONENTS[decimal], 0
    nanos = _nanos(text, (whole + fraction).lstrip("0"), power10 - len(fraction), power2)
    if fmt == BINARY_SI and 0 < nanos < NANO:
        fmt = DECIMAL_SI  # as the API server does: a BinarySI value under one has no binary form
    return Quantity(-nanos if sign == "-" else nanos, fmt)


def _nanos(text: str, digits: str, power10: int, power2: int) -> int:
    """``int(digits) * 10^power10 * 2^power2`` in nanos, rounded up; never builds a power it does not need.

    ``digits`` has no leading zero, so the value lies in [10^(n-1+power10), 10^(n+power10)) * 2^power2
    with n = len(digits), and 2^power2 <= 2^60 < 10^19: a value too large or below one nano is known from
    n and power10 alone.
    """
    if not digits:
        return 0
    size = len(digits) + power10
    if size - 1 >= 19:  # at least 10^19 > 2^63-1
        raise QuantityError(text, f"too large: the largest quantity is 2^63-1 ({MAX_MAGNITUDE})")
    if size + 19 <= -9:  # below 10^-9: the API server rounds it up to one nano
        return 1
    scaled = int(digits) << power2
    shift = power10 + 9
    nanos = scaled * 10**shift if shift >= 0 else -(-scaled // 10**-shift)
    if nanos > _MAX_NANOS:
        raise QuantityError(text, f"too large: the largest quantity is 2^63-1 ({MAX_MAGNITUDE})")
    return nanos


def parse_quantity(value: object) -> Fraction:
    """Exact, non-negative value of a quantity in base units (cores for CPU, bytes for memory)."""
    return Fraction(_non_negative(value), NANO)


def _non_negative(value: object) -> int:
    nanos = parse(value).nanos
    if nanos < 0:
        raise QuantityError(value, "must be greater than or equal to 0")
    return nanos


def to_canonical(resource: str, value: object) -> int:
    """A non-negative quantity in scheduler units (cpu millicores, else base units), rounded up."""
    nanos = _non_negative(value)
    return -(-nanos // (10**6 if resource == CPU else NANO))


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
