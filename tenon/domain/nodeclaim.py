"""The NodeClaim aggregate: the one definition of a claim's state, its phase, and which stories are possible.

A NodeClaim's history is the ordered list of events on its subjects (``tenon.nodeclaim.<name>.*``, see
:mod:`proto.subjects`). Every service that cares about claims folds that history with :meth:`NodeClaim.apply`
and asks the same questions of the result: which :class:`Phase` it is in, whether it is **live** (its machine
is wanted: planned, launching, running or draining), whether it **accepts pods** (live and not being
disrupted), which instance type it is waiting for, and the stream sequence of its last event, which is what
an optimistic append on the claim must expect (:mod:`tenon.runtime.claims` owns that append).

Impossible stories are refused, not folded: an event written by a service that does not own its step (the
scheduler plans, registers, initializes and abandons; a launcher launches and terminates; disruption requests
and drains: :mod:`proto.registry`), or a step the claim's state does not allow (launched twice, drained
without a disruption request, anything after the end). :meth:`apply` raises :class:`ImpossibleStory` with the
reason; the runtime dead-letters such an event instead of acting on it.

A claim may be known only from the middle of its story, when its first events aged out of the log and no
snapshot kept them (``planned is None``). It still *exists*, which is what matters to a launcher deciding
whether a machine is a leak, but nothing destructive may be decided from an incomplete history:
:attr:`complete` says whether the story is known from its beginning, and steps are checked only against what
is known.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

import msgspec

from proto import events as ev
from proto import registry


class Phase(StrEnum):
    """Where a claim is in its life. ``str`` values are the names ``kubectl get nodeclaims`` and explain
    show."""

    PLANNED = "Planned"
    LAUNCHED = "Launched"
    REGISTERED = "Registered"
    INITIALIZED = "Initialized"
    DISRUPTING = "Disrupting"
    DRAINED = "Drained"
    FAILED = "Failed"
    ABANDONED = "Abandoned"
    TERMINATED = "Terminated"
    UNKNOWN = "Unknown"
    """Known only from events after its start (its Planned aged out): it exists, its phase is not known."""

    @property
    def live(self) -> bool:
        """The claim's machine is wanted: it is being launched, runs, or is being drained."""
        return self in _LIVE

    @property
    def ended(self) -> bool:
        return self in (Phase.ABANDONED, Phase.TERMINATED)


_LIVE = frozenset({Phase.PLANNED, Phase.LAUNCHED, Phase.REGISTERED, Phase.INITIALIZED, Phase.DISRUPTING})


class ImpossibleStory(ValueError):
    """An event that cannot be part of this claim's story; ``str()`` says why in one line."""


@dataclass
class NodeClaim:
    """One NodeClaim as its history tells it (mutable: :meth:`apply` folds one event in place)."""

    name: str
    planned: ev.NodeClaimPlanned | None = None
    launched: ev.NodeClaimLaunched | None = None
    launch_failures: list[ev.NodeClaimLaunchFailed] = field(default_factory=list)
    registered: ev.NodeClaimRegistered | None = None
    initialized: ev.NodeClaimInitialized | None = None
    abandoned: ev.NodeClaimAbandoned | None = None
    disruption: ev.DisruptionRequested | None = None
    drained: ev.NodeClaimDrained | None = None
    terminated: ev.NodeClaimTerminated | None = None
    first_sequence: int = 0
    last_sequence: int = 0
    """Stream sequence of the last event folded: what the next append on this claim must expect."""

    # --- questions every service asks -----------------------------------------------------------------------

    @property
    def complete(self) -> bool:
        """The story is known from its beginning (its Planned event was folded)."""
        return self.planned is not None

    @property
    def phase(self) -> Phase:  # an if-chain, not a table: every decision asks it of every claim
        if self.terminated is not None:
            return Phase.TERMINATED
        if self.abandoned is not None:
            return Phase.ABANDONED
        if self.drained is not None:
            return Phase.DRAINED
        if self.launch_failures and self.finally_failed:
            return Phase.FAILED
        if self.disruption is not None:
            return Phase.DISRUPTING
        if self.initialized is not None:
            return Phase.INITIALIZED
        if self.registered is not None:
            return Phase.REGISTERED
        if self.launched is not None:
            return Phase.LAUNCHED
        return Phase.PLANNED if self.planned is not None else Phase.UNKNOWN

    @property
    def live(self) -> bool:
        """Its machine is wanted (the one rule every service uses)."""
        return self.phase.live

    @property
    def accepts_pods(self) -> bool:
        """Capacity the scheduler may count on, now or once it has booted: live and not being disrupted."""
        return self.live and self.disruption is None

    @property
    def ended(self) -> bool:
        return self.phase.ended

    @property
    def finally_failed(self) -> bool:
        """Every instance type it could be launched as failed (the last failure was not retryable)."""
        return self.launched is None and any(not f.retryable for f in self.launch_failures)

    @property
    def attempts(self) -> tuple[ev.InstanceChoice, ...]:
        """The instance types it may be launched as, in order: the choice, then the fallbacks."""
        return (self.planned.choice, *self.planned.fallbacks) if self.planned else ()

    @property
    def current_choice(self) -> ev.InstanceChoice | None:
        """The choice a launcher should try now: the one after as many as have failed."""
        attempts = self.attempts
        failed = len(self.launch_failures)
        return attempts[failed] if failed < len(attempts) else None

    @property
    def instance_type(self) -> str | None:
        if self.launched is not None:
            return self.launched.instance_type
        return self.planned.choice.instance_type if self.planned else None

    @property
    def node_name(self) -> str | None:
        """The Node it registered as (or that its disruption named), if any."""
        if self.registered is not None:
            return self.registered.node
        return self.disruption.node if self.disruption is not None else None

    @property
    def nodepool(self) -> str | None:
        return self.planned.nodepool if self.planned else None

    # --- folding --------------------------------------------------------------------------------------------

    def copy(self) -> NodeClaim:
        """A scratch copy to fold into without touching this claim: an executor appending to a claim works on
        one, so the decider's state learns the append where the log delivers it, as a replay does."""
        return replace(self, launch_failures=list(self.launch_failures))

    def apply(self, event: ev.NodeClaimEvent, sequence: int = 0) -> bool:
        """Fold ``event`` (stored at ``sequence``; 0 when not yet known). False when it was folded already
        (a sequence at or below :attr:`last_sequence`, or the same event id again). Raises
        :class:`ImpossibleStory` when the event cannot belong to this story; nothing is changed then."""
        if sequence and sequence <= self.last_sequence:
            return False
        if self.holds(event):
            self._move(sequence)
            return False
        problem = self.refusal(event)
        if problem is not None:
            raise ImpossibleStory(
                f"NodeClaim {self.name}: {type(event).__name__} from {event.producer}: {problem}"
            )
        self._record(event)
        self._move(sequence)
        return True

    def refusal(self, event: ev.NodeClaimEvent) -> str | None:
        """Why ``event`` cannot be folded into this story, or None when it can."""
        if event.nodeclaim != self.name:
            return f"it names NodeClaim {event.nodeclaim}"
        if not registry.may_write(event.producer, type(event)):
            writers = " or ".join(registry.spec_of(type(event)).writers)
            return f"only {writers} may write this step"
        if self.terminated is not None:
            return "the claim is already terminated"
        check = _STEP_CHECKS.get(type(event))
        return check(self, event) if check is not None else None

    def holds(self, event: ev.NodeClaimEvent) -> bool:
        """Whether ``event`` (by id) is in this story already."""
        recorded: list[ev.NodeClaimEvent | None] = [self.planned, self.launched, self.registered]
        recorded += [self.initialized, self.abandoned, self.disruption, self.drained, self.terminated]
        recorded += self.launch_failures
        return any(known is not None and known.id == event.id for known in recorded)

    def _move(self, sequence: int) -> None:
        if sequence:
            self.first_sequence = self.first_sequence or sequence
            self.last_sequence = max(self.last_sequence, sequence)

    def _record(self, event: ev.NodeClaimEvent) -> None:
        match event:
            case ev.NodeClaimPlanned():
                self.planned = event
            case ev.NodeClaimLaunched():
                self.launched = event
            case ev.NodeClaimLaunchFailed():
                self.launch_failures.append(event)
            case ev.NodeClaimRegistered():
                self.registered = event
            case ev.NodeClaimInitialized():
                self.initialized = event
            case ev.NodeClaimAbandoned():
                self.abandoned = event
            case ev.DisruptionRequested():
                self.disruption = event
            case ev.NodeClaimDrained():
                self.drained = event
            case ev.NodeClaimTerminated():
                self.terminated = event


# --- which step may follow which (checked only against what the folded history shows) -----------------------


def _check_planned(claim: NodeClaim, _: ev.NodeClaimEvent) -> str | None:
    if claim.planned is not None:
        return "it is already planned"
    if claim.last_sequence:
        return "Planned must be its first event"
    return None


def _check_launch(claim: NodeClaim, _: ev.NodeClaimEvent) -> str | None:
    if claim.launched is not None:
        return "it is already launched"
    if claim.abandoned is not None or claim.drained is not None:
        return "it has ended"
    if claim.complete and claim.finally_failed:
        return "every instance type already failed"
    return None


def _check_registered(claim: NodeClaim, _: ev.NodeClaimEvent) -> str | None:
    if claim.registered is not None:
        return "it is already registered"
    if claim.complete and claim.launched is None:
        return "it was never launched"
    return None


def _check_initialized(claim: NodeClaim, _: ev.NodeClaimEvent) -> str | None:
    if claim.initialized is not None:
        return "it is already initialized"
    if claim.complete and claim.registered is None:
        return "it was never registered"
    return None


def _check_abandoned(claim: NodeClaim, _: ev.NodeClaimEvent) -> str | None:
    if claim.abandoned is not None:
        return "it is already abandoned"
    if claim.drained is not None:
        return "it was drained"
    return None


def _check_disruption(claim: NodeClaim, _: ev.NodeClaimEvent) -> str | None:
    if claim.disruption is not None:
        return "its disruption was already requested"
    return None


def _check_drained(claim: NodeClaim, _: ev.NodeClaimEvent) -> str | None:
    if claim.drained is not None:
        return "it is already drained"
    if claim.complete and claim.disruption is None:
        return "no disruption was requested"
    return None


def _check_terminated(claim: NodeClaim, _: ev.NodeClaimEvent) -> str | None:
    if claim.complete and claim.drained is None and claim.abandoned is None and not claim.finally_failed:
        return "it was neither drained, abandoned nor failed"
    return None


_STEP_CHECKS = {
    ev.NodeClaimPlanned: _check_planned,
    ev.NodeClaimLaunched: _check_launch,
    ev.NodeClaimLaunchFailed: _check_launch,
    ev.NodeClaimRegistered: _check_registered,
    ev.NodeClaimInitialized: _check_initialized,
    ev.NodeClaimAbandoned: _check_abandoned,
    ev.DisruptionRequested: _check_disruption,
    ev.NodeClaimDrained: _check_drained,
    ev.NodeClaimTerminated: _check_terminated,
}


class ClaimBook(dict[str, NodeClaim]):
    """Every claim by name; :meth:`fold` creates a claim on its first event.

    It also keeps the claims by phase and by registered Node, so that a decision asks for the few claims in a
    phase (:meth:`in_phases`) or on a Node (:meth:`registered_to`) instead of walking every claim: a scheduler
    decision walked 2,300 claims to find the few dozen whose lifecycle could move, a quarter of its CPU in the
    10,000-pod scale run. The indexes follow what goes through :meth:`fold` and what is added or removed; a
    claim changed by its own :meth:`NodeClaim.apply` (an executor recording a step it appended) is indexed
    again at its next fold, and both lookups check what they return, so a stale entry is never returned.
    """

    def __init__(self, claims: dict[str, NodeClaim] | None = None) -> None:
        super().__init__()
        self._phase_of: dict[str, Phase] = {}
        self._by_phase: dict[Phase, dict[str, None]] = {}
        self._node_of: dict[str, str] = {}
        self._by_node: dict[str, str] = {}
        for name, claim in (claims or {}).items():
            self[name] = claim

    @classmethod
    def from_plain(cls, plain: Mapping[str, Any]) -> ClaimBook:
        """The book a snapshot held, from its plain form (how msgspec hands a ClaimBook field to a
        ``dec_hook``)."""
        return cls({name: msgspec.convert(claim, NodeClaim) for name, claim in plain.items()})

    def __setitem__(self, name: str, claim: NodeClaim) -> None:
        super().__setitem__(name, claim)
        self._index(name, claim)

    def __delitem__(self, name: str) -> None:
        super().__delitem__(name)
        self._unindex(name)

    def pop(self, name: str, *default: NodeClaim | None) -> NodeClaim | None:  # type: ignore[override]
        self._unindex(name)
        return super().pop(name, *default)

    def fold(self, event: ev.NodeClaimEvent, sequence: int = 0) -> bool:
        claim = self.get(event.nodeclaim)
        if claim is None:
            claim = NodeClaim(event.nodeclaim)
            claim.apply(event, sequence)  # raises before the claim is added when the story is impossible
            self[event.nodeclaim] = claim
            return True
        changed = claim.apply(event, sequence)
        self._index(event.nodeclaim, claim)
        return changed

    def claim(self, name: str) -> NodeClaim:
        found = self.get(name)
        if found is None:
            found = self[name] = NodeClaim(name)
        return found

    def in_phases(self, phases: Collection[Phase]) -> list[NodeClaim]:
        """The claims in one of ``phases`` now, by name."""
        names = [name for phase in phases for name in self._by_phase.get(phase, ())]
        return [c for name in sorted(names) if (c := self.get(name)) is not None and c.phase in phases]

    def registered_to(self, node: str) -> NodeClaim | None:
        """The claim registered with the Node named ``node``, if any."""
        name = self._by_node.get(node)
        claim = self.get(name) if name is not None else None
        if claim is None or claim.registered is None or claim.registered.node != node:
            return None
        return claim

    def _index(self, name: str, claim: NodeClaim) -> None:
        phase = claim.phase
        before = self._phase_of.get(name)
        if before != phase:
            if before is not None:
                self._by_phase[before].pop(name, None)
            self._phase_of[name] = phase
            self._by_phase.setdefault(phase, {})[name] = None
        node = claim.registered.node if claim.registered is not None else None
        if node is not None and self._node_of.get(name) != node:
            self._node_of[name] = node
            self._by_node[node] = name

    def _unindex(self, name: str) -> None:
        phase = self._phase_of.pop(name, None)
        if phase is not None:
            self._by_phase[phase].pop(name, None)
        node = self._node_of.pop(name, None)
        if node is not None and self._by_node.get(node) == name:
            del self._by_node[node]
