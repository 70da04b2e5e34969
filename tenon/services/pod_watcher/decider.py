"""The pod-watcher's batching as a pure decider, for ``tenon replay pod-watcher --diff``.

The pod-watcher is not driven by the log: its inputs are watches on the cluster, and its work is a watcher
term (:mod:`.service`). What it *decides* is how pending pods are batched: which pods a window holds, when and
why it closed, and how it was split into messages. Every ``PendingBatch`` records what that decision read
(:mod:`.pending_batches`: the arrivals, the window's settings, the message size), so this decider's input is
the pod-watcher's own ``tenon.pending`` subject and its answer to a window is the window decided again:

* ``evolve`` collects the parts of each window (they share ``windowOpenedAt``);
* ``decide``, when a window's last part arrives, replays its arrivals through the live
  :class:`~.batching.PendingBatcher` (same code, same microseconds), closes it at the recorded moment (a
  ``shutdown`` close is the one outside input, the leader stopping, and is applied as such; any other close
  must come from the window's own deadline) and splits it with :func:`~.pending_batches.window_events` by the
  recorded message size. The answer is the list of events the pod-watcher would have published for that
  window: equal to the recorded parts, ``decidedAt`` included, when the batching behaves as it did.

A tampered or misbehaving batch shows as a difference: a pod missing or added, a close at the wrong moment or
for the wrong reason (a window that should have closed earlier yields two batches), another split. Earlier
parts of a window are answered with nothing; batches recorded before windows were recorded (no
``windowIdleSeconds``) cannot be decided again and are answered with nothing too.

For a replay (``replays_itself``), the recorded decisions to compare with are the window's own parts: the
pod-watcher's ``PendingBatch`` events, which are observations (no ``causationId``). A window that fits one
message is one part, decided on itself; a window split in ``n`` parts is answered on its last part with all
``n`` events, to be compared with the ``n`` recorded parts (``decide`` counts its input whether or not it was
folded first).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import msgspec

from proto import events as ev
from proto import registry, subjects
from tenon.domain.nodeclaim import ClaimBook
from tenon.services.pod_watcher.batching import PendingBatcher, micros, micros_of
from tenon.services.pod_watcher.pending_batches import window_events

KEPT_WINDOWS = 64
"""Windows whose parts are kept while waiting for the rest (parts of one window are published together, so
only a leader stopped mid-window leaves one unfinished)."""


class BatchingState(msgspec.Struct):
    """The parts seen of recent windows, by window (opening time), oldest window first."""

    windows: dict[str, list[ev.PendingBatch]] = msgspec.field(default_factory=dict)


def window_key(batch: ev.PendingBatch) -> str:
    return f"{batch.producer}|{batch.window_opened_at.isoformat()}"


def replayable(batch: ev.PendingBatch) -> bool:
    return batch.window_idle_seconds is not None and batch.window_max_seconds is not None


def _timeline(parts: Sequence[ev.PendingBatch]) -> list[tuple[int, int, str, bool]]:
    """Every join and leave of the window, in the order the live batcher saw them: by time, and at one moment
    a leave of an earlier stay, then joins, then the leave of a stay that began at that same moment."""
    moments: list[tuple[int, int, str, bool]] = []
    for part in parts:
        for arrival in part.arrivals:
            joined = micros_of(arrival.joined_at)
            moments.append((joined, 1, arrival.uid, True))
            if arrival.left_at is not None:
                left = micros_of(arrival.left_at)
                moments.append((left, 2 if left == joined else 0, arrival.uid, False))
    return sorted(moments)


def decide_window(parts: Sequence[ev.PendingBatch]) -> list[ev.PendingBatch]:
    """The events the pod-watcher's batching makes of the window these parts recorded."""
    first = parts[0]
    assert first.window_idle_seconds is not None and first.window_max_seconds is not None
    idle, longest = micros(first.window_idle_seconds), micros(first.window_max_seconds)
    batcher = PendingBatcher(idle=idle, max_duration=longest, rebatch=longest + idle)
    pods = {str(pod["metadata"]["uid"]): pod for part in parts for pod in part.pods}
    for at, _, uid, joins in _timeline(parts):
        if joins:
            batcher.pod_pending(uid, pods.get(uid) or {"metadata": {"uid": uid}}, at)
        else:
            batcher.pod_not_pending(uid, at)
    closed_at = micros_of(first.decided_at)
    if first.window_closed_by == "shutdown":
        batches = batcher.flush(closed_at)
    else:
        batches = batcher.poll(closed_at)
    too_large = {uid for part in parts for uid in part.too_large}
    limit = first.max_message_bytes or 0
    return [e for b in batches for e in window_events(b, limit, assume_too_large=too_large).events]


class BatchingDecider:
    """The pod-watcher's batching decision (see the module docstring)."""

    name = registry.POD_WATCHER
    inputs: tuple[str, ...] = (subjects.PENDING,)
    state_format = "pod-watcher-batching/1"
    replays_itself = True
    """Its inputs are its own events: a replay compares what it decides with the inputs themselves."""

    def initial_state(self) -> BatchingState:
        return BatchingState()

    def evolve(self, state: BatchingState, event: ev.Event, sequence: int = 0) -> BatchingState:
        if not (isinstance(event, ev.PendingBatch) and replayable(event)):
            return state
        parts = state.windows.setdefault(window_key(event), [])
        if all(part.id != event.id for part in parts):
            parts.append(event)
        while len(state.windows) > KEPT_WINDOWS:
            del state.windows[next(iter(state.windows))]
        return state

    def decide(self, state: BatchingState, event: ev.Event) -> Sequence[ev.Event]:
        """The window ``event`` completes, decided again (nothing for a part that does not complete one).
        ``event`` counts whether or not it was folded into ``state`` yet."""
        if not (isinstance(event, ev.PendingBatch) and replayable(event)):
            return []
        parts = [part for part in state.windows.get(window_key(event), []) if part.id != event.id]
        parts.append(event)
        if event.window_part != event.window_parts or len(parts) < event.window_parts:
            return []
        return decide_window(sorted(parts, key=lambda part: part.window_part))

    def tick(self, state: BatchingState, now: datetime) -> Sequence[ev.Event]:
        return []

    def claims(self, state: BatchingState) -> ClaimBook:
        return ClaimBook()

    def encode(self, state: BatchingState) -> bytes:
        return msgspec.msgpack.encode(state)

    def decode(self, data: bytes) -> BatchingState:
        return msgspec.msgpack.decode(data, type=BatchingState)
