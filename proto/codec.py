"""Bytes <-> events. The only place that knows events travel as JSON.

``decode`` never raises anything but :class:`UndecodableEvent`, whose message says what was wrong in words a
person can act on ("unknown event type 'NodeClaimPlaned'", "NodeClaimPlanned: schema 2 is not supported (this
build reads 1)", "Expected `str`, got `int` - at `$.nodepool`"). The consumer runner dead-letters with exactly
that text.
"""

from __future__ import annotations

from typing import Any

import msgspec

from proto.events import EVENT_TYPES_BY_NAME, AnyEvent, Event

_encoder = msgspec.json.Encoder()
_decoder: msgspec.json.Decoder[Any] = msgspec.json.Decoder(AnyEvent)  # type: ignore[arg-type]
_probe = msgspec.json.Decoder(dict[str, Any])


class UndecodableEvent(ValueError):
    """The payload is not an event this build understands; ``str()`` says why."""


def encode(event: Event) -> bytes:
    return _encoder.encode(event)


def decode(data: bytes) -> Event:
    try:
        event: Event = _decoder.decode(data)
        return event
    except msgspec.ValidationError as exc:
        raise UndecodableEvent(_explain(data, exc)) from None
    except msgspec.DecodeError as exc:
        raise UndecodableEvent(f"not valid JSON: {exc}") from None
    except RecursionError:  # msgspec descends once per level: a hostile object nested thousands deep
        raise UndecodableEvent("nested too deep to be a Kubernetes object or a tenon event") from None


def _explain(data: bytes, exc: msgspec.ValidationError) -> str:
    """Turn msgspec's message into one that names the event type and the schema problem when that is the
    cause."""
    try:
        raw = _probe.decode(data)
    except msgspec.DecodeError:
        return str(exc)
    kind = raw.get("type")
    if kind is None:
        return "no 'type' field: not a tenon event"
    event_type = EVENT_TYPES_BY_NAME.get(kind) if isinstance(kind, str) else None
    if event_type is None:
        return f"unknown event type {kind!r}"
    supported = _supported_schemas(event_type)
    schema = raw.get("schema")
    if schema not in supported:
        return (
            f"{kind}: schema {schema!r} is not supported (this build reads {', '.join(map(str, supported))})"
        )
    return f"{kind}: {exc}"


def _supported_schemas(event_type: type[Event]) -> tuple[int, ...]:
    field = next(f for f in msgspec.structs.fields(event_type) if f.name == "schema")
    return tuple(getattr(field.type, "__args__", ()))
