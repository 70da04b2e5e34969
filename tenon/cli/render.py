"""Log records as ``tenon tap`` and ``tenon replay`` print them: one line each, or one JSON object.

What an event says is :mod:`tenon.domain.eventviews`'s (one entry per event type); this module adds what a
record carries beside its event (stream sequence, subject, the broker's time) and shows a record that does not
decode instead of stopping at it.
"""

from __future__ import annotations

from typing import Any

import msgspec

from tenon.domain.eventviews import summary
from tenon.runtime.eventlog.records import LogRecord

__all__ = ["as_json", "line", "summary"]


def line(record: LogRecord) -> str:
    stamp = record.recorded_at.strftime("%H:%M:%S.%f")[:-3]
    try:
        event = record.decode()
    except Exception as exc:
        return f"#{record.sequence:<6} {stamp}  {'?':<14} {'UNDECODABLE':<22} {record.subject}  {exc}"
    return f"#{record.sequence:<6} {stamp}  {event.producer:<14} {type(event).__name__:<22} {summary(event)}"


def as_json(record: LogRecord) -> dict[str, Any]:
    body: dict[str, Any] = {
        "sequence": record.sequence,
        "subject": record.subject,
        "recordedAt": record.recorded_at.isoformat(),
        "headers": dict(record.headers),
    }
    try:
        body["event"] = msgspec.to_builtins(record.decode())
    except Exception as exc:
        body["error"] = str(exc)
        body["data"] = record.data.decode("utf-8", errors="replace")
    return body
