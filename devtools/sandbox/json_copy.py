"""A private deep copy of JSON data: one ``msgspec`` encode/decode round trip.

The store copies every object on the way in and out, and the controllers copy the parts of stored objects
they modify (stored objects are immutable, :mod:`devtools.sandbox.store`). On Kubernetes objects the round
trip is six to seven times faster than ``copy.deepcopy`` (a Machine: 12 us against 82 us), which the
controllers spent a fifth of a second on in the 1,000-pod end-to-end run.
"""

from __future__ import annotations

from typing import Any

import msgspec

_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder().decode


def json_copy(obj: Any) -> Any:
    """A deep copy of ``obj`` (dicts, lists, strings, numbers, booleans, None); tuples come back as lists.
    Raises ``TypeError`` or ``msgspec.EncodeError`` for anything else."""
    return _decode(_encode(obj))
