"""Durations as Karpenter's fields write them (Go's ``time.ParseDuration`` subset the CRDs allow): ``30s``,
``15m``, ``1h30m``, ``720h``, ``Never`` where the field allows it. Bounded: a value past Go's limit (about
292 years, what a kube-apiserver would refuse) is an error, never an overflow or a long loop."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

_PART = re.compile(r"(\d{1,19})(h|m|s)")
_WHOLE = re.compile(r"(?:\d{1,19}(?:h|m|s))+")
_SECONDS = {"h": 3600, "m": 60, "s": 1}
MAX_DURATION = timedelta(seconds=(2**63 - 1) // 10**9)
"""Go's largest ``time.Duration``."""


class DurationError(ValueError):
    """A duration that cannot be read; ``str()`` says why in one line."""


def parse_duration(value: Any, *, allow_never: bool = False) -> timedelta | None:
    """``value`` as a timedelta; None for ``Never`` (only when ``allow_never``)."""
    if isinstance(value, bool) or not isinstance(value, str):
        raise DurationError(f"{value!r} is not a duration like 30s, 15m or 1h30m")
    text = value.strip()
    if allow_never and text == "Never":
        return None
    if not _WHOLE.fullmatch(text):
        never = " or Never" if allow_never else ""
        raise DurationError(f"{value!r} is not a duration like 30s, 15m or 1h30m{never}")
    seconds = sum(int(n) * _SECONDS[unit] for n, unit in _PART.findall(text))
    if seconds > MAX_DURATION.total_seconds():
        raise DurationError(f"{value!r} is longer than a duration can be (about 292 years)")
    return timedelta(seconds=seconds)
