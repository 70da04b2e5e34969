"""Deterministic event ids: the same decision always gets the same id.

JetStream drops a message whose ``Nats-Msg-Id`` it has seen inside the stream's duplicate window. tenon sets
the header to the event id, and derives that id from what the event answers rather than from a random number:
a handler redelivered after a crash re-derives the same ids for the events it publishes, and the broker keeps
only the first copy. The rule, written once here so every service follows it:

    id = uuid5(TENON_NAMESPACE, "<producer>|<event type>|<part>|<part>...")

where the parts name the cause (the causation event id, or for observations the object's uid and
resourceVersion) and the position of the event among the answers to that cause (claim index, pod name).
"""

from __future__ import annotations

import uuid

TENON_NAMESPACE = uuid.UUID("5b0f0d8e-3c53-4b3e-9a55-0ad1b0e7c3a1")


def derive_id(producer: str, event_type: str, *parts: object) -> str:
    """The id an event gets: stable for the same producer, type and parts, distinct otherwise."""
    key = "|".join([producer, event_type, *(str(p) for p in parts)])
    return str(uuid.uuid5(TENON_NAMESPACE, key))
