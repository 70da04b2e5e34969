"""Decoding whatever a log may hold: ``proto.codec.decode`` returns an event or raises
:class:`UndecodableEvent` with a one-line reason (the runner dead-letters it with that text), never anything
else, for any bytes, any JSON shaped like an event, and real events with one thing wrong."""

from __future__ import annotations

import json
from typing import Any

import msgspec
from hypothesis import given
from hypothesis import strategies as st

from proto.codec import UndecodableEvent, decode, encode
from proto.events import EVENT_TYPES_BY_NAME, Event
from tests.trust.generated import EVENTS, FUZZ, HOSTILE_VALUES

JSON: st.SearchStrategy[Any] = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=20,
)


def outcome(data: bytes) -> Event | str:
    """The event, or the reason it is undecodable; anything else escapes and fails the test."""
    try:
        event = decode(data)
    except UndecodableEvent as exc:
        reason = str(exc)
        assert reason and "\n" not in reason, repr(reason)
        return reason
    assert isinstance(event, Event)
    assert decode(encode(event)) == event  # what is accepted is stored and read back the same
    return event


@FUZZ
@given(st.binary(max_size=512))
def test_any_bytes(data: bytes) -> None:
    outcome(data)


@st.composite
def event_shaped(draw: st.DrawFn) -> dict[str, Any]:
    """A JSON object with a known (or almost known) type, a schema, and some of the type's fields."""
    name = draw(st.sampled_from(sorted(EVENT_TYPES_BY_NAME)))
    fields = [f.encode_name for f in msgspec.structs.fields(EVENT_TYPES_BY_NAME[name])]
    document: dict[str, Any] = {
        "type": draw(st.sampled_from([name, name.lower(), name + "x", 5, None])),
        "schema": draw(st.sampled_from([1, 2, "1", None, 1.0])),
    }
    for field in draw(st.lists(st.sampled_from(fields), unique=True)):
        document[field] = draw(JSON | HOSTILE_VALUES)
    return document


@FUZZ
@given(event_shaped())
def test_json_shaped_like_an_event(document: dict[str, Any]) -> None:
    outcome(json.dumps(document).encode())


def _paths(obj: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [path] if path else []
    if isinstance(obj, dict):
        for key, value in obj.items():
            found += _paths(value, (*path, key))
    elif isinstance(obj, list):
        for index, value in enumerate(obj):
            found += _paths(value, (*path, index))
    return found


@st.composite
def one_thing_wrong(draw: st.DrawFn) -> bytes:
    """A real event (of any kind the fuzzers make) with one part replaced, deleted, or the text cut."""
    event = draw(EVENTS[draw(st.sampled_from(sorted(EVENTS)))]())
    document = json.loads(encode(event))
    path = draw(st.sampled_from(_paths(document)))
    parent = document
    for step in path[:-1]:
        parent = parent[step]
    how = draw(st.sampled_from(["replace", "delete", "cut"]))
    if how == "cut":
        text = json.dumps(document).encode()
        return text[: draw(st.integers(0, len(text)))]
    if how == "delete" and isinstance(parent, dict):
        del parent[path[-1]]
    else:
        parent[path[-1]] = draw(JSON | HOSTILE_VALUES)
    return json.dumps(document).encode()


@FUZZ
@given(one_thing_wrong())
def test_a_real_event_with_one_thing_wrong(data: bytes) -> None:
    outcome(data)
