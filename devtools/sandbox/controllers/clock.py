"""Wall-clock timestamps as the Kubernetes API writes them (RFC 3339, UTC, second precision).

The controllers time their simulated delays with the event loop's monotonic clock (``loop.time()``), because
API timestamps only have second precision and the ``fast`` profile works in tens of milliseconds; these
helpers are only for the timestamps written into objects (``lastTransitionTime``, ``startTime``, events).
"""

from __future__ import annotations

from datetime import UTC, datetime


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_rfc3339(text: str | None) -> datetime | None:
    if not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
