"""A closed batching window as ``PendingBatch`` events: pure, the same code live and in a replay.

What a batch records
--------------------
Its pods (their :mod:`.views` view: what scheduling reads), and what the batching decision read, so that
:mod:`.decider` can decide it again from the log alone: ``arrivals`` (when each pod joined the window, and
left it if it did before the close), the window's settings (``windowIdleSeconds``, ``windowMaxSeconds``), how
it closed (``windowClosedBy``; ``decidedAt`` is the moment it closed, to the microsecond), the message size
it was split by (``maxMessageBytes``) and the part's place (``windowPart`` of ``windowParts``).

Splitting
---------
A window whose pods do not fit in one broker message (NATS refuses messages over its ``max_payload``: 1 MiB
by default) goes out as several events sharing ``windowOpenedAt``. The pods are ordered by namespace and
name, so that pods of one workload, which sort together, stay together; each part takes pods with their
arrivals while they fit, and the arrivals of pods that left the window (and of pods too large for any
message, listed in ``tooLarge``) follow the pods wherever there is room. A pod whose JSON alone exceeds a
message is left out of its batch rather than failing every batch forever; the service logs it by name.

Ids (``proto/README.md``): the sorted pod uids of the part and the window's opening time; ``batchId`` is
the event id and also its ``correlationId``, which the scheduler carries along the chain. A part with no
pods (only arrivals that did not fit elsewhere) adds its part number.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec

from proto.events import KubeObject, PendingArrival, PendingBatch
from proto.ids import derive_id
from tenon.runtime.eventlog.factories import make_event
from tenon.services.pod_watcher.batching import Arrival, Batch, moment_of
from tenon.services.pod_watcher.observations import PRODUCER, describe, uid_of

ENVELOPE_BYTES = 4_096
"""Room kept in each message for the envelope, the settings fields and the headers."""


@dataclass
class _Item:
    """One unit of packing: a pod with its arrivals, or the arrivals of a pod not sent."""

    uid: str
    pod: Mapping[str, Any] | None
    arrivals: list[PendingArrival]
    too_large: bool = False
    size: int = 0


@dataclass
class _Part:
    items: list[_Item] = field(default_factory=list)
    used: int = 0


@dataclass(frozen=True)
class WindowEvents:
    """The events of one closed window, and the pods left out because no message could hold them."""

    events: tuple[PendingBatch, ...]
    too_large: tuple[str, ...]
    """How each pod left out is named in logs (``Pod default/big``), with its size."""


def _json_size(value: Any) -> int:
    return len(msgspec.json.encode(value)) + 1  # and the comma that separates it from its neighbour


def _recorded(arrival: Arrival) -> PendingArrival:
    return PendingArrival(
        arrival.uid,
        moment_of(arrival.joined),
        moment_of(arrival.left) if arrival.left is not None else None,
    )


def _sort_key(pod: Mapping[str, Any]) -> tuple[str, str, str]:
    meta = pod.get("metadata") or {}
    return (str(meta.get("namespace") or ""), str(meta.get("name") or ""), uid_of(pod))


def _items(batch: Batch, budget: int, assume_too_large: Collection[str]) -> tuple[list[_Item], list[str]]:
    """Pods (by namespace and name) with their arrivals, then the arrivals of pods not sent (by uid)."""
    arrivals: dict[str, list[PendingArrival]] = {}
    for arrival in batch.arrivals:
        arrivals.setdefault(arrival.uid, []).append(_recorded(arrival))
    items: list[_Item] = []
    left_out: list[_Item] = []
    too_large: list[str] = []
    for pod in sorted(batch.pods, key=_sort_key):
        uid = uid_of(pod)
        entries = arrivals.pop(uid, [])
        item = _Item(uid, pod, entries, size=_json_size(pod) + sum(_json_size(a) for a in entries))
        if item.size > budget or uid in assume_too_large:
            too_large.append(f"{describe(pod)} ({item.size} bytes of JSON, over {budget})")
            left_out.append(_Item(uid, None, entries, too_large=True))
        else:
            items.append(item)
    left_out += [_Item(uid, None, entries) for uid, entries in sorted(arrivals.items())]
    for item in left_out:
        item.size = _json_size(item.uid) + sum(_json_size(a) for a in item.arrivals)
    return items + sorted(left_out, key=lambda i: i.uid), too_large


def _pack(items: Sequence[_Item], budget: int) -> list[_Part]:
    parts = [_Part()]
    for item in items:
        if parts[-1].used + item.size > budget and parts[-1].items:
            parts.append(_Part())
        parts[-1].items.append(item)
        parts[-1].used += item.size
    return parts


def window_events(
    batch: Batch, max_message_bytes: int, *, assume_too_large: Collection[str] = ()
) -> WindowEvents:
    """The ``PendingBatch`` events of ``batch`` for messages of at most ``max_message_bytes``.

    ``assume_too_large``: uids to leave out as too large whatever their size (a replay knows them only as
    recorded in ``tooLarge``, not their objects)."""
    budget = max_message_bytes - ENVELOPE_BYTES
    items, too_large = _items(batch, budget, assume_too_large)
    parts = _pack(items, budget) if items else []
    opened = moment_of(batch.opened_at)
    events = []
    for index, part in enumerate(parts, start=1):
        pods: list[KubeObject] = [dict(i.pod) for i in part.items if i.pod is not None]
        uids = sorted(uid_of(pod) for pod in pods)
        key: tuple[object, ...] = (*uids, opened.isoformat()) if uids else (opened.isoformat(), "part", index)
        batch_id = derive_id(PRODUCER, PendingBatch.__name__, *key)  # the id make_event gives it
        events.append(
            make_event(
                PendingBatch,
                producer=PRODUCER,
                key=key,
                correlation_id=batch_id,
                decided_at=moment_of(batch.closed_at),
                batch_id=batch_id,
                pods=tuple(pods),
                window_opened_at=opened,
                window_closed_by=batch.closed_by,
                window_idle_seconds=batch.idle / 1_000_000,
                window_max_seconds=batch.max_duration / 1_000_000,
                window_part=index,
                window_parts=len(parts),
                max_message_bytes=max_message_bytes,
                arrivals=tuple(a for i in part.items for a in i.arrivals),
                too_large=tuple(i.uid for i in part.items if i.too_large),
            )
        )
    return WindowEvents(tuple(events), tuple(too_large))
