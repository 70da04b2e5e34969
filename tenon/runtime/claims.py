"""Writing to a NodeClaim's history: the one place that owns the optimistic append.

Every lifecycle event goes on its step's subject (``tenon.nodeclaim.<name>.<step>``) with the claim's last
known sequence as the expected last sequence of the whole history (``tenon.nodeclaim.<name>.*``): if anyone
wrote to the claim since the writer folded it, the broker refuses with :class:`ConcurrencyConflict`, and
nothing is written.

Two ways to go on after a conflict, and the caller picks:

* :func:`append_claim_event` raises it. A decider running on :mod:`tenon.runtime.decider` lets it defer the
  decision: the conflicting event is folded when the log delivers it, the claim is decided again then, and the
  decision is made on the state a replay will see (decisions there are level-triggered).
* :func:`record` reloads the claim's tail from the log (only the events after what it knows), folds it, and
  asks
  ``decide`` again with the fresh claim: for work outside the ordered flow (a drain finishing, a machine
  gone).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from proto import events as ev
from proto import subjects
from tenon.domain.nodeclaim import ImpossibleStory, NodeClaim
from tenon.runtime.eventlog import ConcurrencyConflict, EventLog, PublishResult, TransientError

log = logging.getLogger("tenon.claims")


async def append_claim_event(
    event_log: EventLog, event: ev.NodeClaimEvent, *, expected: int
) -> PublishResult:
    """Append ``event`` to its claim, expecting the claim's last sequence to be ``expected`` (0: a new
    claim)."""
    return await event_log.append(
        subjects.nodeclaim_step(event.nodeclaim, type(event).__name__),
        event,
        expected_last_sequence=expected,
        aggregate=subjects.nodeclaim(event.nodeclaim),
    )


async def reload(event_log: EventLog, claim: NodeClaim) -> int:
    """Fold the events of ``claim`` stored after what it holds; how many were new. Events that cannot belong
    to its story are skipped with a warning (the consumers that read them dead-letter them)."""
    folded = 0
    async for record in event_log.read(
        subjects.nodeclaim(claim.name), start_sequence=claim.last_sequence + 1
    ):
        event = record.event
        if not isinstance(event, ev.NodeClaimEvent):
            continue
        try:
            folded += claim.apply(event, record.sequence)
        except ImpossibleStory as exc:
            log.warning("impossible claim event skipped", extra={"nodeclaim": claim.name, "why": str(exc)})
            claim.last_sequence = max(claim.last_sequence, record.sequence)
    return folded


async def record(
    event_log: EventLog,
    claim: NodeClaim,
    decide: Callable[[NodeClaim], ev.NodeClaimEvent | None],
    *,
    attempts: int = 8,
) -> ev.NodeClaimEvent | None:
    """Append what ``decide(claim)`` says (None: nothing, any more), reloading and deciding again on a
    conflict. The appended event is folded into ``claim``: pass a copy (:meth:`NodeClaim.copy`) of a claim a
    decider's state holds, which must learn the event from the log. Raises :class:`TransientError` when the
    claim keeps moving."""
    for _ in range(attempts):
        event = decide(claim)
        if event is None:
            return None
        try:
            result = await append_claim_event(event_log, event, expected=claim.last_sequence)
        except ConcurrencyConflict as conflict:
            log.info("claim moved on; reloading it", extra={"nodeclaim": claim.name, "why": str(conflict)})
            await reload(event_log, claim)
            continue
        claim.apply(event, result.sequence)
        return event
    raise TransientError(f"NodeClaim {claim.name} kept changing while {attempts} appends were tried")
