"""Wall-clock timestamps as the Kubernetes API writes them (RFC 3339, UTC, second precision).

The controllers time their simulated delays with the event loop's monotonic clock (``loop.time()``), because
API timestamps only have second precision and the ``fast`` profile works in tens of milliseconds; these
helpers are only for the timestamps written into objects (``lastTransitionTime``, ``startTime``, events).
"""

from __future__ import annotations

import time
from datetime import datetime

_last_stamp: tuple[int, str] = (-1, "")


def now_rfc3339() -> str:
    """The current second, formatted once per second: the kubelet, the Cluster API controller and every
    condition and Event stamp it, thousands of times a second in a burst."""
    global _last_stamp
    second = int(time.time())
    if _last_stamp[0] != second:
        _last_stamp = (second, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(second)))
    return _last_stamp[1]


def parse_rfc3339(text: str | None) -> datetime | None:
    if not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
