"""How tenon writes prices, times, stream sequences and object names in text a person reads.

``tenon tap``, ``tenon replay``, ``tenon explain`` and the Kubernetes Events on a NodeClaim all print these;
one spelling each, so a price or a sequence looks the same wherever it appears.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any


def price(value: float | None) -> str:
    """``$0.1000/h``; ``price unknown`` when there is none."""
    return "price unknown" if value is None else f"${value:.4f}/h"


def relative(delta: timedelta) -> str:
    """A signed duration, as short as it stays readable: ``+1.5s``, ``+2m05s``, ``+3h10m``, ``+2d04h``."""
    seconds = delta.total_seconds()
    sign = "-" if seconds < 0 else "+"
    seconds = abs(seconds)
    if seconds < 60:
        return f"{sign}{seconds:.1f}s"
    minutes, secs = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{sign}{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{sign}{hours}h{minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{sign}{days}d{hours:02d}h"


def stamp(moment: datetime) -> str:
    """A moment to the second: ``2026-11-29T10:00:00Z`` in UTC, with its offset otherwise."""
    if moment.utcoffset() in (None, timedelta(0)):
        return moment.strftime("%Y-%m-%dT%H:%M:%SZ")
    return moment.isoformat(timespec="seconds")


def sequence(number: int) -> str:
    """A stream sequence as ``#N`` (``#-`` for an event not appended yet, sequence 0)."""
    return f"#{number}" if number else "#-"


def name_of(obj: dict[str, Any]) -> str:
    """A Kubernetes object's name (``?`` when it has none)."""
    return str((obj.get("metadata") or {}).get("name") or "?")
