"""The disruption service's decision function (pure), as the live service and ``tenon replay disruption`` run
it.

* ``evolve`` folds the projection, the service's own commands (:mod:`.orchestration`) and, per claim, the
  hashes its NodePool template and NodeClass had when it was planned (drift).
* ``tick``: expiration (forceful, every tick); the commands under way move on (replacements Initialized ->
  terminations; a replacement lost -> abandoned); a settled proposal is judged again; and when nothing is
  settling, one round of :func:`tenon.domain.disruption.rounds.decide_round` (emptiness, drift,
  consolidation in Karpenter's order) may start a new command. A round whose inputs have not changed since
  the last one that found nothing is not computed again (its answer would be the same). A tick with nothing
  due returns at once, whatever the size of the cluster: no command under way, no claim expired, no claim
  drifted or consolidatable yet (:mod:`.due`, kept as events fold), or the last round found nothing at this
  state and nothing it reads of the clock has changed since (:mod:`.quiet`); it decides what the whole
  tick would (``shortcuts=False`` does the whole work, tests compare them).
* ``decide``: a Node deleted by a user (a deletion timestamp held by tenon's finalizer) becomes
  ``DisruptionRequested`` with method ``delete``, so it takes the same graceful path as every other removal;
  an ``InterruptionNotice`` (folded into the state's notices) is answered by :mod:`.interruption`: the
  replacement first, as a confirmed command of method ``interruption`` (forceful: no budget holds it back).
  Both, and a queue's next requests (below), are level-triggered: the decider ``decides_on_batches``
  (:mod:`tenon.runtime.decider`), a fetched batch of observations folded whole and decided once; a notice
  is decided alone, on the state as of itself.
* ``tick`` moves interruption commands on by :func:`.interruption.tick` (the drain once the replacement is
  Initialized or the deadline is near), not by the replacement rules of the other methods: an interrupted
  machine goes whether or not its replacement made it.
* Emptiness is a queue (:mod:`.queue`): one proposal of every empty candidate of the pools whose budget lets
  one go, settled once, then requested as the budget lets them go. ``decide`` moves a confirmed queue on
  with every batch of inputs (a claim Terminated makes room), so the budget stays full: the next node starts
  when one finishes, not at the next tick. The tick that confirms a queue also proposes the empty nodes no
  command holds (they emptied while it settled), so the next queue settles while this one drains; queues on
  one pool share its room within a decision. A queue may be proposed while the budget is full (its nodes
  wait for room): a round then runs on a full budget when a claim no command holds is consolidatable, and
  only to look for empty ones.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from functools import partial

import msgspec

from proto import events as ev
from proto import registry
from proto.ids import derive_id
from tenon.domain.disruption import consolidation, drift, emptiness, expiration
from tenon.domain.disruption.candidates import budget_mapping, candidates, consolidatable
from tenon.domain.disruption.commands import EPSILON, Command
from tenon.domain.disruption.rounds import Round, decide_round
from tenon.domain.disruption.simulation import Repacker
from tenon.domain.disruption.view import ClusterView, meta
from tenon.domain.nodeclaim import ClaimBook
from tenon.services.disruption import interruption, orchestration
from tenon.services.disruption.due import Quiet, due_index
from tenon.services.disruption.orchestration import REPLACEMENT_TIMEOUT, REQUEST_AGAIN_AFTER, SETTLE, request
from tenon.services.disruption.projection_view import (
    Command as Underway,
)
from tenon.services.disruption.projection_view import (
    DisruptionState,
    build_view,
    decode_state,
    encode_state,
    hashes_at_plan,
)
from tenon.services.disruption.queue import empty_queue, is_queue, queued_requests
from tenon.services.disruption.quiet import unchanged_until

PRODUCER = registry.DISRUPTION
__all__ = ["DisruptionDecider", "request"]


def _may_wait_for_room(state: DisruptionState, now: datetime) -> bool:
    """Whether a claim no command holds is consolidatable now (:mod:`.due`): if it is empty, an emptiness
    queue may be proposed for it although every budget is full (:func:`.queue.empty_queue`)."""
    index = due_index(state)
    index.refresh(state)
    busy = state.busy()
    return any(moments.acts <= now and name not in busy for name, moments in index.moments.items())


def nodes_deleted_by_users(
    state: DisruptionState, cause: ev.Event, *, indexed: bool = True
) -> list[ev.Event]:
    """A ``delete`` request for every claim whose Node is being deleted (a deletion timestamp, held by tenon's
    finalizer) and whose termination was not requested: a user's ``kubectl delete node``. ``indexed``: the
    index (:mod:`.due`) names the Nodes being deleted and the claims on each, no walk over the cluster for
    every input; else both are read off the projection."""
    if indexed:
        index = due_index(state)
        index.build(state)
        deleting = index.deleting
        on_deleting = sorted(name for node in deleting for name in index.claims_on.get(node, ()))
    else:
        deleting = {n for n, node in state.projection.nodes.items() if meta(node).get("deletionTimestamp")}
        on_deleting = sorted(state.projection.claims)
    if not deleting:
        return []
    claims = state.projection.claims
    return [
        request(
            claim.name,
            method="delete",
            reason=f"Node {claim.registered.node} deleted by a user",
            at=cause.decided_at,
            node=claim.registered.node,
            cause=cause.id,
        )
        for claim in (claims[name] for name in on_deleting if name in claims)
        if claim.registered is not None
        and claim.registered.node in deleting
        and claim.disruption is None
        and not claim.ended
    ]


def _underway(decision: ev.DisruptionDecision) -> Underway:
    return Underway(
        id=decision.command or decision.id,
        method=decision.method,
        stage=decision.stage,
        candidates=tuple(c.nodeclaim for c in decision.candidates),
        replacements=decision.replacement_claims,
        decided_at=decision.decided_at,
        savings=decision.savings_per_hour,
        reason=decision.reason,
        budget=decision.budget,
        settles_until=decision.settles_until,
    )


def fold_decision(state: DisruptionState, decision: ev.DisruptionDecision) -> None:
    key = decision.command or decision.id
    if decision.stage == "abandoned":
        state.commands.pop(key, None)
        return
    if decision.method == "expiration":
        return  # its terminations are requested with it
    underway = state.commands.get(key)
    if underway is None or decision.stage == "proposed":
        state.commands[key] = _underway(decision)
    else:  # a confirmation names the candidates that are still candidates
        underway.stage, underway.decided_at = "confirmed", decision.decided_at
        underway.candidates = tuple(c.nodeclaim for c in decision.candidates)


def fold_request(state: DisruptionState, event: ev.DisruptionRequested) -> None:
    underway = state.commands.get(event.decision_id or "")
    if underway is None:
        return
    claims = state.projection.claims
    if all(
        claims.get(n) is None or claims[n].disruption is not None or claims[n].ended
        for n in underway.candidates
    ):
        del state.commands[underway.id]


def forget_interruptions(state: DisruptionState) -> None:
    """Notices and interruption commands whose machines' claims all ended: nothing is left to do."""
    if not state.interruptions.notices and all(u.method != "interruption" for u in state.commands.values()):
        return  # nothing to forget (most claims end without a notice: no walk over every claim for them)
    state.interruptions.forget_ended(state.projection)
    claims = state.projection.claims
    for key, underway in list(state.commands.items()):
        if underway.method == "interruption" and all(
            claims.get(n) is None or claims[n].ended for n in underway.candidates
        ):
            del state.commands[key]


LINGER = 0.01
"""Disruption mostly answers in seconds (a candidate waits ``consolidateAfter``, a command settles 15 s), so
its consumer may gather 10 ms of records into one batch: it folds every pod and node change of the cluster,
and a third of its CPU went to batches of a few records. Not while a command waits for budget: with 50 ms
(20 ms, 10 ms) the 500-node scale to zero kept the budget 83-89 % (89-90 %, 90-92 %) full, and 96 % with no
wait, for a quarter more CPU in that phase only."""


class DisruptionDecider:
    name = PRODUCER
    inputs = registry.inputs_of(PRODUCER)
    state_format = "disruption/3"
    decides_on_batches = True

    def batch_linger(self, state: DisruptionState) -> float:
        """Seconds its consumer may gather records into one batch (:func:`tenon.runtime.decider.batch_linger`)
        before deciding: :data:`LINGER`, except while a confirmed queue is under way (0): each claim
        terminated then frees budget for the queue's next candidate, whose request must follow at once
        (``decide`` steps the queue on every input)."""
        queued = any(u.stage == "confirmed" and is_queue(u) for u in state.commands.values())
        return 0.0 if queued else LINGER

    observations = (ev.NodeClaimDrained,)
    """What termination (the executor) records of what it did: the pods evicted, whether the grace period
    ran out. A replay folds it as an input, never expects the decider to have decided it."""

    def __init__(self, *, settle: timedelta = SETTLE, shortcuts: bool = True) -> None:
        self.settle = settle
        """How long a proposal settles before it is judged again (Karpenter: 15 s)."""
        self.shortcuts = shortcuts
        """A tick with nothing due returns at once, and ``decide`` finds deleted Nodes without a walk over the
        cluster (:mod:`.due`); False: both do the whole work every time (the reference the shortcuts must
        agree with)."""
        self._quiet: tuple[object, ...] | None = None
        """The inputs of the last round that found nothing (memo: the same inputs find nothing again)."""

    def initial_state(self) -> DisruptionState:
        return DisruptionState()

    def evolve(self, state: DisruptionState, event: ev.Event, sequence: int = 0) -> DisruptionState:
        pruned = state.projection.pruned_at
        replaced = state.due.before(state.projection, event) if state.due is not None else None
        state.projection.apply(event, sequence)
        state.version += 1
        if isinstance(event, ev.NodeClaimPlanned) and event.nodeclaim not in state.hashes:
            state.hashes[event.nodeclaim] = hashes_at_plan(state.projection, event)
        elif isinstance(event, ev.DisruptionDecision) and event.producer == PRODUCER:
            fold_decision(state, event)
        elif isinstance(event, ev.DisruptionRequested):
            fold_request(state, event)
        elif isinstance(event, ev.InterruptionNotice):
            state.interruptions.fold(event)
        elif isinstance(event, ev.NodeClaimTerminated | ev.NodeClaimAbandoned):
            forget_interruptions(state)
        if state.projection.pruned_at != pruned:  # claims are forgotten only when the projection prunes
            for name in [n for n in state.hashes if n not in state.projection.claims]:
                del state.hashes[name]  # forgotten with its claim
        if state.due is not None:
            state.due.after(state.projection, event, replaced, pruned=state.projection.pruned_at != pruned)
        if state.load is not None:
            state.load.folded(state.projection, event, pruned=state.projection.pruned_at != pruned)
        return state

    def decided_alone(self, event: ev.Event) -> bool:
        return isinstance(event, ev.InterruptionNotice)

    def decide(self, state: DisruptionState, event: ev.Event) -> Sequence[ev.Event]:
        decisions: list[ev.Event] = []
        if isinstance(event, ev.InterruptionNotice):
            decisions += interruption.on_notice(state.interruptions, state.projection, event)
        decisions += nodes_deleted_by_users(state, event, indexed=self.shortcuts)
        spent: dict[str, int] = {}  # the queues share their pools' room
        for underway in sorted(state.commands.values(), key=lambda u: u.id):
            if underway.stage == "confirmed" and is_queue(underway):
                decisions += self._queue_step(state, underway, event.decided_at, spent, cause=event.id)
        return decisions

    def tick(self, state: DisruptionState, now: datetime) -> Sequence[ev.Event]:
        if self.shortcuts and self._nothing_due(state, now):
            return []
        view = build_view(state, now, with_core=False)  # the scheduling core's input only where it is read
        events: list[ev.Event] = self._expire(view, now)
        events += interruption.tick(state.interruptions, state.projection, now)
        spent: dict[str, int] = {}  # the queues share their pools' room
        for underway in sorted(state.commands.values(), key=lambda u: u.id):
            if underway.stage == "confirmed" and underway.method != "interruption":
                events += self._progress(state, underway, now, spent)
        settling = [u for u in state.commands.values() if u.stage == "proposed"]
        settled = [u for u in settling if now >= (u.settles_until or u.decided_at + self.settle)]
        for underway in sorted(settled, key=lambda u: u.id):
            events += self._validate(state, underway, now, spent)
        if len(settled) < len(settling):
            return events  # a proposal still settles: what it judges must not change under it
        if settled:
            return events + self._next_queue(state, now, events)
        if events:
            return events
        played = self._round(state, view)
        return self._start(state, view, played.command, now) if played.command is not None else []

    def _nothing_due(self, state: DisruptionState, now: datetime) -> bool:
        """Whether the whole tick would decide nothing, told without building the view: no command under way,
        no claim expired, no notice's drain due, and no claim a round could act on yet (:mod:`.due`), or the
        last round found nothing at this state and nothing it reads of the clock changed since
        (:mod:`.quiet`)."""
        if state.commands:
            return False
        index = due_index(state)
        expires, acts = index.earliest(state)
        if expires <= now:
            return False
        if state.interruptions.notices and interruption.tick(state.interruptions, state.projection, now):
            return False
        return acts > now or (index.quiet is not None and index.quiet.holds(state.version, now))

    # --- steps ----------------------------------------------------------------------------------------------

    def _expire(self, view: ClusterView, now: datetime) -> list[ev.Event]:
        command = expiration.decide(view)
        if command is None:
            return []
        decision = orchestration.decision(command, now, stage="confirmed")
        return [decision] + [
            request(
                c.name,
                method="expiration",
                reason=command.why[c.name],
                at=now,
                node=c.claim.node,
                decision_id=decision.id,
            )
            for c in command.candidates
        ]

    def _next_queue(self, state: DisruptionState, now: datetime, events: list[ev.Event]) -> list[ev.Event]:
        """Beside the tick's judgement of settled proposals (and its other steps), a proposal of the empty
        nodes no command holds (those the steps name are busy too, and count against the budget): the nodes
        that emptied while a queue settled begin settling now, not a tick later, so the budget does not run
        dry between two queues."""
        taken: set[str] = set()
        for event in events:
            if isinstance(event, ev.DisruptionRequested):
                taken.add(event.nodeclaim)
            elif isinstance(event, ev.DisruptionDecision):
                taken.update(c.nodeclaim for c in event.candidates)
        view = build_view(state, now, with_core=False, taken=frozenset(taken))
        queue = empty_queue(view, self.settle)
        return self._start(state, view, queue, now) if queue is not None else []

    def _round(self, state: DisruptionState, view: ClusterView) -> Round:
        """One round on ``view`` (made without the core's input: built here when a method would read it)."""
        allowed = tuple(
            (pool, a.allowed)
            for r in ("Empty", "Drifted", "Underutilized")
            for pool, a in budget_mapping(view, r).items()
        )
        full = all(n <= 0 for _, n in allowed)
        if full and not _may_wait_for_room(state, view.now):
            # no method may start a command on any pool (a queue holding a budget, most ticks of a
            # scale-down) and no node outside a command could go in a queue waiting for room: the round
            # would only find candidates to block them
            return self._found_nothing(state, view)
        known = candidates(view)
        found = known[0]
        key = (
            state.version,
            tuple((c.name, consolidatable(view, c)) for c in found),
            allowed,
            len(view.pending_pods),
        )
        if key == self._quiet:
            return self._found_nothing(state, view)
        # no empty candidate consolidatable now: no queue (spares empty_queue its own pass over the cluster)
        queue = empty_queue(view, self.settle) if emptiness.empty_candidates(view, found) else None
        if queue is not None:
            played = Round(queue)
        elif full:
            played = Round(None)  # only an emptiness queue may be proposed to wait for room
        elif drift.drifted(view) or consolidation.eligible(view, found):
            # they read the core (repacking); the candidates are those of this view (same state, same moment)
            played = decide_round(build_view(state, view.now), known=known)
        else:
            played = decide_round(view, known=known)  # nothing drifted, nothing to consolidate: core unread
        self._quiet = key if played.command is None else None
        return played if played.command is not None else self._found_nothing(state, view, played)

    def _found_nothing(self, state: DisruptionState, view: ClusterView, played: Round = Round(None)) -> Round:
        """No command this round: at this state, none until a fact it reads of the clock changes (remembered
        when no command is under way: only then may a tick skip its work)."""
        if self.shortcuts and not state.commands:
            until = partial(unchanged_until, state.projection, view)
            due_index(state).quiet = Quiet(state.version, view.now, until)
        return played

    def _start(
        self, state: DisruptionState, view: ClusterView, command: Command, now: datetime
    ) -> list[ev.Event]:
        stage = "confirmed" if command.method == "drift" else "proposed"
        first = orchestration.decision(command, now, stage=stage)
        claims = orchestration.replacement_claims(view, command.replacements, first.id)
        decision = msgspec.structs.replace(
            first, replacement_claims=claims, replacements=tuple(c.nodeclaim for c in claims)
        )
        if stage == "proposed":
            return [msgspec.structs.replace(decision, settles_until=now + self.settle)]
        return [decision, *orchestration.confirm(state, _underway(decision), decision.id, now)]

    def _validate(
        self, state: DisruptionState, underway: Underway, now: datetime, spent: dict[str, int]
    ) -> list[ev.Event]:
        if is_queue(underway):
            return self._validate_queue(state, underway, now, spent)
        view = build_view(state, now, settling=frozenset(underway.candidates))
        why = judge_again(view, underway)
        if why is not None:
            return [self._stage(underway, view, now, "abandoned", f"abandoned after settling: {why}")]
        confirmed = self._stage(underway, view, now, "confirmed", underway.reason)
        return [confirmed, *orchestration.confirm(state, underway, underway.id, now)]

    def _queue_step(
        self,
        state: DisruptionState,
        underway: Underway,
        now: datetime,
        spent: dict[str, int],
        *,
        cause: str | None = None,
    ) -> list[ev.Event]:
        """A confirmed queue's next requests, or its end when a waiting candidate is no longer empty;
        ``spent`` counts the requests of the same decision per pool (the queues share the room)."""
        step = queued_requests(state, underway, now, cause=cause, spent=spent)
        if step.stopped is None:
            return list(step.requests)
        view = build_view(state, now, with_core=False)
        return [self._stage(underway, view, now, "abandoned", f"queue ended: {step.stopped}", cause=cause)]

    def _validate_queue(
        self, state: DisruptionState, underway: Underway, now: datetime, spent: dict[str, int]
    ) -> list[ev.Event]:
        """A settled queue: confirmed with the candidates still empty (the budget is checked at each request,
        not here), and its first requests."""
        view = build_view(state, now, settling=frozenset(underway.candidates), with_core=False)
        found, _ = candidates(view)
        still = {c.name for c in emptiness.empty_candidates(view, found)}
        kept = tuple(name for name in underway.candidates if name in still)
        if not kept:
            return [self._stage(underway, view, now, "abandoned", "abandoned after settling: none is empty")]
        dropped = len(underway.candidates) - len(kept)
        reason = underway.reason + (f" ({dropped} no longer empty after settling)" if dropped else "")
        confirmed = msgspec.structs.replace(underway, stage="confirmed", candidates=kept, decided_at=now)
        decision = self._stage(confirmed, view, now, "confirmed", reason)
        # its first requests are decided on the state the confirmation makes: the same candidates, confirmed
        return [decision, *self._queue_step(state, confirmed, now, spent)]

    def _progress(
        self, state: DisruptionState, underway: Underway, now: datetime, spent: dict[str, int]
    ) -> list[ev.Event]:
        if is_queue(underway):
            return self._queue_step(state, underway, now, spent)
        if not underway.replacements:
            return orchestration.terminations(state, underway, underway.id, now)
        claims = [state.projection.claims.get(r.nodeclaim) for r in underway.replacements]
        if all(c is not None and c.initialized is not None for c in claims):
            return orchestration.terminations(state, underway, underway.id, now)
        lost = [
            c for c in claims if c is not None and (c.ended or c.finally_failed or c.disruption is not None)
        ]
        if lost:
            why = f"replacement {lost[0].name} ended ({lost[0].phase}) before it was Initialized"
        elif now - underway.decided_at > REPLACEMENT_TIMEOUT:
            why = f"replacements not Initialized within {REPLACEMENT_TIMEOUT}"
        elif all(c is None for c in claims) and now - underway.decided_at >= REQUEST_AGAIN_AFTER:
            return orchestration.confirm(state, underway, underway.id, now)  # the request may have been lost
        else:
            return []
        view = build_view(state, now)
        return [self._stage(underway, view, now, "abandoned", why)]

    def _stage(
        self,
        underway: Underway,
        view: ClusterView,
        now: datetime,
        stage: str,
        reason: str,
        *,
        cause: str | None = None,
    ) -> ev.DisruptionDecision:
        decision_id = derive_id(PRODUCER, "DisruptionDecision", stage, underway.id)
        return ev.DisruptionDecision(
            id=decision_id,
            decided_at=now,
            producer=PRODUCER,
            causation_id=cause,
            correlation_id=underway.id,
            method=underway.method,  # type: ignore[arg-type]
            candidates=tuple(
                ev.DisruptionCandidate(
                    nodeclaim=name,
                    node=view.claims[name].node if name in view.claims else None,
                    nodepool=view.claims[name].nodepool if name in view.claims else "",
                    reason=underway.reason,
                )
                for name in underway.candidates
            ),
            reason=reason,
            budget=underway.budget,
            replacements=tuple(r.nodeclaim for r in underway.replacements),
            stage=stage,  # type: ignore[arg-type]
            command=underway.id,
            replacement_claims=underway.replacements,
            savings_per_hour=underway.savings,
        )

    def claims(self, state: DisruptionState) -> ClaimBook:
        return state.projection.claims

    def encode(self, state: DisruptionState) -> bytes:
        return encode_state(state)

    def decode(self, data: bytes) -> DisruptionState:
        return decode_state(data)


def judge_again(view: ClusterView, underway: Underway) -> str | None:
    """Why a settled proposal no longer holds (None: it does), as Karpenter's validation judges it."""
    found, _ = candidates(view)
    by_name = {c.name: c for c in found}
    missing = [n for n in underway.candidates if n not in by_name]
    if missing:
        return f"{missing[0]} is no longer a candidate"
    chosen = [by_name[n] for n in underway.candidates]
    reason = "Empty" if underway.method == "emptiness" else consolidation.REASON
    budgets = budget_mapping(view, reason)
    for pool in {c.pool for c in chosen}:
        wanted = sum(1 for c in chosen if c.pool == pool)
        if budgets.get(pool) is None or budgets[pool].allowed < wanted:
            return f"the budget of NodePool {pool} no longer allows {wanted}"
    if underway.method == "emptiness":
        if len(emptiness.empty_candidates(view, chosen)) != len(chosen):
            return "a candidate is no longer empty"
        return None
    if len(consolidation.eligible(view, chosen)) != len(chosen) or view.core is None:
        return "a candidate is no longer consolidatable"
    command, why = consolidation.judge(chosen, Repacker(view).simulate(chosen), consolidation.TENON)
    if command is None:
        return why
    before = sum(r.choice.price_per_hour for r in underway.replacements)
    if len(command.replacements) != len(underway.replacements) or command.price_after > before + EPSILON:
        return "the simulation now gives a different move"
    return None
