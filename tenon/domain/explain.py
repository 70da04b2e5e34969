"""Why a NodeClaim exists, where it is in its life, and why it was or was not disrupted, from the log alone.

This is the logic behind ``tenon explain NODECLAIM`` and ``tenon explain --pod NS/NAME``, and behind the text
the scheduler and the disruption service attach to Kubernetes Events on a NodeClaim: the one module that
puts tenon's decisions into words. It is pure: it takes plain data (:class:`LoggedEvent`: each event with its
stream sequence and the time the broker stored it) and returns an explanation object; reading the broker and
decoding its records is :mod:`tenon.cli.explain`'s job. What each event says on its own (its line in a claim's
life, the pods it concerns) comes from the table of event types, :mod:`tenon.domain.eventviews`.

Design
------
Every decision tenon takes is an event that carries its own reasons, so explaining is a join, not a
recomputation:

* **Why it exists.** ``NodeClaimPlanned`` names its batch (``batch_id``, ``causation_id`` = the answered
  ``PendingBatch``), its pods, and the scheduler's ``explanation``: ``chosen`` (why the winner won) and
  ``considered`` (every instance type looked at, with its price and verdict). The verdicts are the
  scheduling core's own words, recorded with the plan (the core cannot call this module: it imports nothing
  of ours); each is turned into a plain outcome by its leading words: ``chosen`` (cheapest that fits),
  ``fallback`` (fits but dearer: lost on price, the launcher may still use it), or ``lost`` (too small, not
  allowed, no offering, NodePool limit, max size...). A claim planned again for the pods of an abandoned
  claim answers a ``NodeClaimAbandoned`` instead of a batch; its batch id is ``replan-<abandoned claim>``
  and the story says so.
* **Where it is in its life.** The claim's aggregate subject holds its lifecycle, in order. Each step is shown
  with its time relative to ``Planned`` (the broker's time of storage, not ``decidedAt``: the scheduler stamps
  a plan with its batch's decision time so that replays derive the same ids). The phase is the one the
  services themselves compute (:class:`tenon.domain.nodeclaim.NodeClaim`), so ``explain`` never disagrees with
  the scheduler about where a claim is.
* **Why it was or was not disrupted.** Every ``DisruptionDecision`` that names the claim, as a candidate
  (method, reason, the budget that allowed it) or as blocked (what blocked it); a ``DisruptionRequested``
  that no decision explains (a user's ``kubectl delete``) is said to be so; and when nothing named it, that
  is said too.

A pod's explanation starts at the batches that held it (``PendingBatch``) and the answers to them
(``BatchPlanned``, including re-plans after an abandoned claim): a new claim (then that claim's whole
explanation), room on an existing node or in-flight claim, or unschedulable with the reason per NodePool; and
it ends where the pod ended (the last ``BoundPodObserved``).

Records that do not decode are skipped by the caller (``tenon tap`` shows them) but counted in ``searched``,
so "not in the log" always says how much log was looked at.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal

from proto import events as ev
from tenon.domain.eventviews import claim_step, pods_of
from tenon.domain.nodeclaim import ImpossibleStory, NodeClaim
from tenon.domain.projection import FINISHED, object_key
from tenon.domain.wording import price, relative, sequence, stamp

MAX_EVENT_MESSAGE = 1000
"""Kubernetes caps an Event's ``message`` at 1 KiB; :func:`nodeclaim_event_message` stays within it."""

REPLAN_PREFIX = "replan-"
"""Batch id prefix the scheduler uses when it plans again for an abandoned claim's pods."""

Outcome = Literal["chosen", "fallback", "lost"]


def replan_batch_id(claim: str) -> str:
    """The batch id under which the scheduler plans again for the pods of the abandoned ``claim``."""
    return f"{REPLAN_PREFIX}{claim}"


def replanned_claim(batch_id: str | None) -> str | None:
    """The abandoned claim a batch id re-plans the pods of (``replan-<claim>``), or None for a real batch."""
    if batch_id and batch_id.startswith(REPLAN_PREFIX):
        return batch_id[len(REPLAN_PREFIX) :]
    return None


# --- input --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LoggedEvent:
    """One event as it sits in the log: its stream sequence and when the broker stored it.

    A service explaining events it has not appended yet may pass sequence 0 and its own clock."""

    sequence: int
    recorded_at: datetime
    event: ev.Event


def _ordered(records: Iterable[LoggedEvent]) -> list[LoggedEvent]:
    """Log order, each event once (the CLI merges several subject reads).

    Keyed by event id, not sequence, so a caller that has no sequences yet (a service explaining the events
    it is about to append, all with sequence 0) keeps them all, in the order given.
    """
    seen: dict[str, LoggedEvent] = {}
    for record in records:
        seen.setdefault(record.event.id, record)
    return sorted(seen.values(), key=lambda r: r.sequence)


def _iso(moment: datetime) -> str:
    return moment.isoformat()


def _since(delta: timedelta | None) -> str:
    return relative(delta) if delta is not None else "?"


# --- the NodeClaim explanation ------------------------------------------------------------------------------


@dataclass(frozen=True)
class InstanceVerdict:
    """One instance type the scheduler looked at for this claim, and what became of it."""

    instance_type: str
    price_per_hour: float | None
    outcome: Outcome
    verdict: str
    """The scheduler's own words (``too small: needs cpu=3, has 1900m after DaemonSets``)."""
    why: str
    """The verdict as a sentence about this claim (``lost on price: fits, but $0.2000/h > $0.1000/h``)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "instanceType": self.instance_type,
            "pricePerHour": self.price_per_hour,
            "outcome": self.outcome,
            "verdict": self.verdict,
            "why": self.why,
        }


@dataclass(frozen=True)
class Origin:
    """What the claim answers: a PendingBatch (or an abandoned claim whose pods were planned again)."""

    batch_id: str | None
    cause_id: str | None
    batch_sequence: int | None = None
    batch_at: datetime | None = None
    batch_pods: tuple[str, ...] = ()
    window_closed_by: str | None = None
    replan_of: str | None = None
    """The abandoned claim whose pods this claim was planned again for."""
    batch_answer: str | None = None
    """What else the same BatchPlanned did (other claims, pods on existing room, unschedulable pods)."""

    def sentence(self) -> str:
        """What the claim answers, as ``tenon explain`` says it under "Why it exists"."""
        if self.replan_of:
            return (
                f"Planned again for the pods of claim {self.replan_of}, which was abandoned "
                f"(batch {self.batch_id})."
            )
        if self.batch_sequence is not None and self.batch_at is not None:
            return (
                f"It answers PendingBatch {self.batch_id} ({sequence(self.batch_sequence)} at "
                f"{stamp(self.batch_at)}, {len(self.batch_pods)} pending pod(s), window closed by "
                f"{self.window_closed_by})."
            )
        return f"It answers batch {self.batch_id or '?'} (the PendingBatch is not in the log)."

    def to_json(self) -> dict[str, Any]:
        return {
            "batchId": self.batch_id,
            "causationId": self.cause_id,
            "batchSequence": self.batch_sequence,
            "batchAt": _iso(self.batch_at) if self.batch_at else None,
            "batchPods": list(self.batch_pods),
            "windowClosedBy": self.window_closed_by,
            "replanOf": self.replan_of,
            "batchAnswer": self.batch_answer,
        }


@dataclass(frozen=True)
class LifeStep:
    """One event on the claim's subject."""

    step: str
    """Planned, Launched, LaunchFailed, Registered, Initialized, Abandoned, DisruptionRequested, Drained,
    Terminated."""
    sequence: int
    at: datetime
    since_planned: timedelta | None
    detail: str
    producer: str

    def to_json(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "sequence": self.sequence,
            "at": _iso(self.at),
            "sincePlannedSeconds": None
            if self.since_planned is None
            else round(self.since_planned.total_seconds(), 3),
            "detail": self.detail,
            "producer": self.producer,
        }


@dataclass(frozen=True)
class DisruptionMention:
    """A DisruptionDecision that named the claim, or a DisruptionRequested no decision explains."""

    sequence: int
    at: datetime
    role: Literal["candidate", "blocked", "requested"]
    method: str
    reason: str
    budget: str | None = None
    blocked_by: str | None = None
    decision_id: str | None = None

    def sentence(self) -> str:
        if self.role == "candidate":
            return f"{self.method}: chosen for disruption: {self.reason} (allowed by budget {self.budget})"
        if self.role == "blocked":
            return f"{self.method}: considered but blocked: {self.blocked_by}"
        return f"{self.method}: termination requested without a disruption decision: {self.reason}"

    def to_json(self) -> dict[str, Any]:
        return {
            "sequence": self.sequence,
            "at": _iso(self.at),
            "role": self.role,
            "method": self.method,
            "reason": self.reason,
            "budget": self.budget,
            "blockedBy": self.blocked_by,
            "decisionId": self.decision_id,
            "sentence": self.sentence(),
        }


def _requests(planned: ev.NodeClaimPlanned) -> dict[str, Any] | None:
    """What the node must hold (its pods plus DaemonSets), as the scheduler recorded it."""
    explanation = planned.explanation if isinstance(planned.explanation, dict) else {}
    requests = explanation.get("requests")
    return requests if isinstance(requests, dict) else None


@dataclass(frozen=True)
class NodeClaimExplanation:
    """Everything the log says about one NodeClaim; ``found`` is False when nothing names it."""

    name: str
    searched: int
    found: bool
    phase: str | None = None
    planned: ev.NodeClaimPlanned | None = None
    planned_sequence: int | None = None
    planned_at: datetime | None = None
    origin: Origin | None = None
    chosen_because: str | None = None
    considered: tuple[InstanceVerdict, ...] = ()
    life: tuple[LifeStep, ...] = ()
    disruptions: tuple[DisruptionMention, ...] = ()
    notes: tuple[str, ...] = ()

    # -- summaries shared by text(), the event message and JSON --

    def why_exists(self) -> str:
        if self.planned is None:
            return "its NodeClaimPlanned is not in the log (older than the stream keeps?)"
        p = self.planned
        origin = self.origin
        if origin and origin.replan_of:
            cause = f"planned again for the pods of abandoned claim {origin.replan_of}"
        elif origin and origin.batch_sequence is not None:
            where = f"#{origin.batch_sequence}, " if origin.batch_sequence else ""
            cause = f"answers batch {origin.batch_id} ({where}{len(origin.batch_pods)} pending pod(s))"
        else:
            cause = f"answers batch {p.batch_id or '?'} (its PendingBatch is not in the log)"
        pods = ", ".join(p.pods) if p.pods else "-"
        return f"{cause}; it is for {len(p.pods)} pod(s): {pods}; NodePool {p.nodepool}"

    def why_this_type(self) -> str:
        if self.planned is None:
            return ""
        choice = self.planned.choice
        cheapest = price(choice.price_per_hour)
        head = f"{choice.instance_type} won on price: the cheapest type that fits ({cheapest})"
        losers = [f"{v.instance_type} {v.why}" for v in self.considered if v.outcome != "chosen"]
        return head + ("; " + "; ".join(losers) if losers else "")

    def disruption_summary(self) -> str:
        if not self.disruptions:
            return "no disruption decision has named it"
        return "; ".join(d.sentence() for d in self.disruptions)

    # -- output --

    def text(self) -> str:
        if not self.found:
            return f"no NodeClaim named {self.name} in the log (searched {self.searched} events)"
        lines = [f"NodeClaim {self.name}: {self.phase}", *self._machine_lines()]
        lines += ["", "Why it exists", *self._why_lines()]
        lines += ["", "Where it is in its life", *self._life_lines()]
        lines += ["", "Disruption", *self._disruption_lines()]
        if self.notes:
            lines += ["", "Notes"] + [f"  {note}" for note in self.notes]
        return "\n".join(lines)

    def _machine_lines(self) -> Iterator[str]:
        if self.planned is None:
            return
        p, c = self.planned, self.planned.choice
        estimated = " (estimated)" if c.price_estimated else ""
        yield (
            f"  NodePool {p.nodepool}, NodeClass {p.node_class or '?'}: {c.instance_type} {c.capacity_type} "
            f"{c.zone or 'any zone'} at {price(c.price_per_hour)}{estimated}"
        )

    def _why_lines(self) -> Iterator[str]:
        p = self.planned
        if p is None:
            yield "  " + self.why_exists()
            return
        origin = self.origin or Origin(batch_id=p.batch_id, cause_id=p.causation_id)
        yield "  " + origin.sentence()
        yield f"  It is for {len(p.pods)} pod(s): {', '.join(p.pods) or '-'}"
        if origin.batch_answer:
            yield f"  The same batch: {origin.batch_answer}"
        requests = _requests(p)
        if requests:
            needs = ", ".join(f"{k}={v}" for k, v in sorted(requests.items()))
            yield f"  It must hold {needs} (its pods plus DaemonSets)."
        yield from self._choice_lines(p)

    def _choice_lines(self, p: ev.NodeClaimPlanned) -> Iterator[str]:
        if self.chosen_because:
            yield f"  {p.choice.instance_type} won on price: {self.chosen_because}."
        if self.considered:
            yield "  Instance types considered, cheapest first:"
            width = max(len(v.instance_type) for v in self.considered)
            for v in self.considered:
                yield f"    {v.instance_type:<{width}}  {price(v.price_per_hour):>14}  {v.why}"
        else:
            yield "  (the plan recorded no instance types considered)"
        if p.fallbacks:
            listed = ", ".join(f"{f.instance_type} ({price(f.price_per_hour)})" for f in p.fallbacks)
            yield f"  Fallbacks, in order: {listed}"

    def _life_lines(self) -> Iterator[str]:
        for step in self.life:
            rel = _since(step.since_planned)
            yield f"  {sequence(step.sequence):<8} {rel:>9}  {step.step:<20} {step.detail}"
        yield f"  now: {self.phase}"

    def _disruption_lines(self) -> Iterator[str]:
        if not self.disruptions:
            yield "  no disruption decision has named it"
        for d in self.disruptions:
            yield f"  {sequence(d.sequence):<8} {stamp(d.at)}  {d.sentence()}"

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "kind": "NodeClaimExplanation",
            "nodeclaim": self.name,
            "found": self.found,
            "searched": self.searched,
        }
        if not self.found:
            body["message"] = self.text()
            return body
        body.update(_plan_json(self.planned))
        body.update(
            {
                "phase": self.phase,
                "plannedSequence": self.planned_sequence,
                "plannedAt": _iso(self.planned_at) if self.planned_at else None,
                "origin": self.origin.to_json() if self.origin else None,
                "chosenBecause": self.chosen_because,
                "considered": [v.to_json() for v in self.considered],
                "life": [s.to_json() for s in self.life],
                "disruptions": [d.to_json() for d in self.disruptions],
                "disruptionSummary": self.disruption_summary(),
                "notes": list(self.notes),
            }
        )
        return body


def _plan_json(p: ev.NodeClaimPlanned | None) -> dict[str, Any]:
    if p is None:
        return {
            "nodepool": None,
            "nodeClass": None,
            "pods": [],
            "choice": None,
            "fallbacks": [],
            "requests": None,
        }
    return {
        "nodepool": p.nodepool,
        "nodeClass": p.node_class,
        "pods": list(p.pods),
        "choice": _choice_json(p.choice),
        "fallbacks": [_choice_json(f) for f in p.fallbacks],
        "requests": _requests(p),
    }


def _choice_json(choice: ev.InstanceChoice) -> dict[str, Any]:
    return {
        "instanceType": choice.instance_type,
        "zone": choice.zone,
        "capacityType": choice.capacity_type,
        "pricePerHour": choice.price_per_hour,
        "priceEstimated": choice.price_estimated,
    }


# --- the scheduler's verdicts, in words ---------------------------------------------------------------------


def _says(verdict: str, outcome: str) -> bool:
    """Whether a recorded verdict begins with ``outcome``'s word (``chosen: cheapest that fits``)."""
    return verdict == outcome or verdict.startswith(outcome + ":")


def _lost_on_price(
    name: str, price_per_hour: float | None, verdict: str, planned: ev.NodeClaimPlanned
) -> InstanceVerdict:
    chosen = planned.choice
    rank = next((i for i, f in enumerate(planned.fallbacks, start=1) if f.instance_type == name), None)
    dearer = (
        f"{price(price_per_hour)} > {price(chosen.price_per_hour)}"
        if price_per_hour is not None
        else "costs more"
    )
    tail = f" (fallback {rank} if {chosen.instance_type} cannot be launched)" if rank else ""
    return InstanceVerdict(
        name, price_per_hour, "fallback", verdict, f"lost on price: fits, but {dearer}{tail}"
    )


def _lost(
    name: str, price_per_hour: float | None, verdict: str, chosen: ev.InstanceChoice
) -> InstanceVerdict:
    cheaper = price_per_hour is not None and price_per_hour < chosen.price_per_hour
    if cheaper and _says(verdict, "too small"):
        prefix = "cheaper, but did not fit: "
    elif cheaper:
        prefix = "cheaper, but lost: "
    else:
        prefix = "lost: "
    return InstanceVerdict(name, price_per_hour, "lost", verdict, prefix + verdict)


def _won(name: str, price_per_hour: float | None, verdict: str) -> InstanceVerdict:
    return InstanceVerdict(name, price_per_hour, "chosen", verdict, "won: the cheapest type that fits")


def _recorded_verdict(item: dict[str, Any], planned: ev.NodeClaimPlanned) -> InstanceVerdict:
    name = str(item.get("instanceType", "?"))
    price_raw = item.get("pricePerHour")
    price_per_hour = float(price_raw) if isinstance(price_raw, int | float) else None
    verdict = str(item.get("verdict", ""))
    if name == planned.choice.instance_type or _says(verdict, "chosen"):
        return _won(name, price_per_hour, verdict)
    if _says(verdict, "fallback"):
        return _lost_on_price(name, price_per_hour, verdict, planned)
    return _lost(name, price_per_hour, verdict, planned.choice)


def _verdicts(planned: ev.NodeClaimPlanned) -> tuple[InstanceVerdict, ...]:
    """The scheduler's ``considered`` list as outcomes, cheapest first (unknown prices last); the chosen type
    and the fallbacks are there even when the plan did not list them."""
    explanation = planned.explanation if isinstance(planned.explanation, dict) else {}
    raw = explanation.get("considered") or []
    out = [_recorded_verdict(item, planned) for item in raw if isinstance(item, dict)]
    seen = {v.instance_type for v in out}
    chosen = planned.choice
    if chosen.instance_type not in seen:
        out.append(_won(chosen.instance_type, chosen.price_per_hour, "chosen"))
    for fallback in planned.fallbacks:
        if fallback.instance_type not in seen:
            seen.add(fallback.instance_type)
            out.append(_lost_on_price(fallback.instance_type, fallback.price_per_hour, "fallback", planned))
    return tuple(sorted(out, key=lambda v: (v.price_per_hour is None, v.price_per_hour or 0.0)))


# --- gathering a claim's story from the log -----------------------------------------------------------------


def _batch_answer(answer: ev.BatchPlanned, claim: str) -> str | None:
    parts: list[str] = []
    others = [c for c in answer.nodeclaims if c != claim]
    if others:
        parts.append(f"{len(others)} other new claim(s) ({', '.join(others)})")
    if answer.existing:
        parts.append(f"{len(answer.existing)} pod(s) on existing room")
    if answer.unschedulable:
        parts.append(f"{len(answer.unschedulable)} unschedulable pod(s)")
    if not parts:
        return None
    return "; ".join(parts) + f"; total {price(answer.total_price_per_hour)} for the batch"


def _life(own: Sequence[LoggedEvent], planned: ev.NodeClaimPlanned | None) -> tuple[LifeStep, ...]:
    planned_at = next((r.recorded_at for r in own if isinstance(r.event, ev.NodeClaimPlanned)), None)
    steps = []
    for record in own:
        assert isinstance(record.event, ev.NodeClaimEvent)
        step, detail = claim_step(record.event, planned)
        since = (record.recorded_at - planned_at) if planned_at else None
        steps.append(
            LifeStep(step, record.sequence, record.recorded_at, since, detail, record.event.producer)
        )
    return tuple(steps)


def _fold(name: str, own: Sequence[LoggedEvent]) -> tuple[NodeClaim, list[LoggedEvent], list[str]]:
    """The claim as the services fold it, the steps they folded, and a note for each step they refuse
    (a step written by a service that does not own it, a step its story does not allow: dead-lettered)."""
    claim = NodeClaim(name)
    folded: list[LoggedEvent] = []
    refused: list[str] = []
    for record in own:
        assert isinstance(record.event, ev.NodeClaimEvent)
        try:
            claim.apply(record.event, record.sequence)
        except ImpossibleStory as exc:
            refused.append(
                f"{sequence(record.sequence)} refused by the services (not part of its story): {exc}"
            )
            continue
        folded.append(record)
    return claim, folded, refused


def explain_nodeclaim(
    name: str, records: Sequence[LoggedEvent], searched: int | None = None
) -> NodeClaimExplanation:
    """Everything the log in ``records`` says about the NodeClaim ``name``.

    ``searched`` is how many records were read (default: ``len(records)``); it only appears in the
    not-found message.
    """
    if not name:
        raise ValueError("explain_nodeclaim: the NodeClaim name is empty")
    ordered = _ordered(records)
    count = len(records) if searched is None else searched
    own = [r for r in ordered if isinstance(r.event, ev.NodeClaimEvent) and r.event.nodeclaim == name]
    state, folded, refused = _fold(name, own)
    disruptions = _disruptions(name, ordered, folded)
    if not own and not disruptions:
        return NodeClaimExplanation(name=name, searched=count, found=False)
    planned = state.planned
    planned_record = next((r for r in folded if isinstance(r.event, ev.NodeClaimPlanned)), None)
    explanation = planned.explanation if planned and isinstance(planned.explanation, dict) else {}
    missing = () if planned else ("its NodeClaimPlanned is not in the log (older than the stream keeps?)",)
    return NodeClaimExplanation(
        name=name,
        searched=count,
        found=True,
        phase=state.phase if own else "not seen on its own subject",
        planned=planned,
        planned_sequence=planned_record.sequence if planned_record else None,
        planned_at=planned_record.recorded_at if planned_record else None,
        origin=_origin(name, planned, ordered) if planned else None,
        chosen_because=str(explanation.get("chosen") or "") or None,
        considered=_verdicts(planned) if planned else (),
        life=_life(folded, planned),
        disruptions=disruptions,
        notes=(*missing, *refused),
    )


def _origin(name: str, planned: ev.NodeClaimPlanned, ordered: Sequence[LoggedEvent]) -> Origin:
    batch_id = planned.batch_id
    batch_record = next(
        (
            r
            for r in ordered
            if isinstance(r.event, ev.PendingBatch)
            and (
                r.event.id == planned.causation_id or (batch_id is not None and r.event.batch_id == batch_id)
            )
        ),
        None,
    )
    answer = next(
        (r.event for r in ordered if isinstance(r.event, ev.BatchPlanned) and name in r.event.nodeclaims),
        None,
    )
    replan_of = replanned_claim(batch_id)
    batch_answer = _batch_answer(answer, name) if answer else None
    if batch_record is None:
        return Origin(
            batch_id=batch_id, cause_id=planned.causation_id, replan_of=replan_of, batch_answer=batch_answer
        )
    batch = batch_record.event
    assert isinstance(batch, ev.PendingBatch)
    return Origin(
        batch_id=batch.batch_id,
        cause_id=batch.id,
        batch_sequence=batch_record.sequence,
        batch_at=batch_record.recorded_at,
        batch_pods=_pod_keys(batch),
        window_closed_by=batch.window_closed_by,
        replan_of=replan_of,
        batch_answer=batch_answer,
    )


_POD_KEYS: OrderedDict[int, tuple[ev.PendingBatch, tuple[str, ...]]] = OrderedDict()
_POD_KEYS_KEPT = 4
"""Batches whose pod keys are kept (each holds its batch, up to the log's message size, alive)."""


def _pod_keys(batch: ev.PendingBatch) -> tuple[str, ...]:
    """The batch's pod keys, listed once per batch object. The scheduler explains every claim it makes an
    object for, each with the same batch, and each claim of a 2,500-pod batch listed the same 2,500 pods
    again (1.2 million keys for the batch's 500 claims). Keyed by the object, not its id: two logs (two tests,
    two clusters read by one process) may hold different batches under one id."""
    kept = _POD_KEYS.get(id(batch))
    if kept is not None and kept[0] is batch:
        return kept[1]
    keys = tuple(object_key(p) for p in batch.pods)
    _POD_KEYS[id(batch)] = (batch, keys)
    if len(_POD_KEYS) > _POD_KEYS_KEPT:
        _POD_KEYS.popitem(last=False)
    return keys


def _decision_mentions(name: str, record: LoggedEvent) -> Iterator[DisruptionMention]:
    """How a DisruptionDecision named the claim: as a candidate, as blocked, or not at all."""
    event = record.event
    assert isinstance(event, ev.DisruptionDecision)
    for candidate in (c for c in event.candidates if c.nodeclaim == name):
        reason = (
            event.reason if candidate.reason in ("", event.reason) else f"{event.reason}: {candidate.reason}"
        )
        yield DisruptionMention(
            record.sequence,
            record.recorded_at,
            "candidate",
            event.method,
            reason,
            budget=event.budget,
            decision_id=event.id,
        )
    for blocked in (b for b in event.blocked if b.nodeclaim == name):
        yield DisruptionMention(
            record.sequence,
            record.recorded_at,
            "blocked",
            event.method,
            event.reason,
            budget=event.budget,
            blocked_by=blocked.blocked_by,
            decision_id=event.id,
        )


def _unexplained_request(record: LoggedEvent, decision_ids: set[str]) -> DisruptionMention | None:
    """A DisruptionRequested no decision in the log explains (a user's delete, or a decision aged out)."""
    event = record.event
    if not isinstance(event, ev.DisruptionRequested) or event.decision_id in decision_ids:
        return None
    reason = (
        event.reason
        if event.decision_id is None
        else f"{event.reason} (decision {event.decision_id} is not in the log)"
    )
    return DisruptionMention(
        record.sequence, record.recorded_at, "requested", event.method, reason, decision_id=event.decision_id
    )


def _disruptions(
    name: str, ordered: Sequence[LoggedEvent], own: Sequence[LoggedEvent]
) -> tuple[DisruptionMention, ...]:
    out = [
        mention
        for record in ordered
        if isinstance(record.event, ev.DisruptionDecision)
        for mention in _decision_mentions(name, record)
    ]
    decision_ids = {m.decision_id for m in out if m.role == "candidate" and m.decision_id}
    requests = (_unexplained_request(record, decision_ids) for record in own)
    out += [mention for mention in requests if mention is not None]
    out.sort(key=lambda d: d.sequence)
    return tuple(out)


def nodeclaim_event_message(explanation: NodeClaimExplanation) -> str:
    """The explanation in at most 1,000 characters, for a Kubernetes Event on the NodeClaim.

    Parts in order of importance (why it exists, why this type, where it is, disruption); each is cut with an
    ellipsis rather than dropped so the reader knows there is more (``tenon explain`` has it all).
    """
    if not explanation.found:
        return explanation.text()[:MAX_EVENT_MESSAGE]
    life = ", ".join(f"{s.step} {_since(s.since_planned)}" for s in explanation.life)
    parts = [
        f"NodeClaim {explanation.name} ({explanation.phase}): {explanation.why_exists()}.",
        explanation.why_this_type() + "." if explanation.planned else "",
        f"Life: {life}.",
        "Disruption: " + explanation.disruption_summary() + ".",
    ]
    parts = [p for p in parts if p]
    budget = MAX_EVENT_MESSAGE - (len(parts) - 1)  # one space between parts
    cut = [
        p if len(p) <= a else p[: max(a - 1, 0)] + "…"
        for p, a in zip(parts, _shares(parts, budget), strict=True)
    ]
    return " ".join(cut)[:MAX_EVENT_MESSAGE]


def _shares(parts: Sequence[str], budget: int) -> list[int]:
    """Each part's fair share of ``budget`` characters, what short parts leave over handed to longer ones."""
    allowance = [0] * len(parts)
    remaining = budget
    pending = sorted(range(len(parts)), key=lambda i: len(parts[i]))
    while pending:
        share = remaining // len(pending)
        index = pending.pop(0)
        allowance[index] = min(len(parts[index]), share)
        remaining -= allowance[index]
    return allowance


# --- the pod explanation ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BatchOutcomeForPod:
    """One batch that held the pod and what the scheduler's answer did with it."""

    batch_id: str
    batch_sequence: int | None
    batch_at: datetime | None
    answer_sequence: int | None
    outcome: Literal["new-claim", "existing", "unschedulable", "not-answered", "not-in-answer"]
    detail: str
    nodeclaim: str | None = None
    reasons: dict[str, str] = field(default_factory=dict)
    claim: NodeClaimExplanation | None = None

    def line(self) -> str:
        where = (
            f"#{self.batch_sequence} at {stamp(self.batch_at)}"
            if self.batch_sequence and self.batch_at
            else "its PendingBatch is not in the log"
        )
        return f"  batch {self.batch_id} ({where}): {self.detail}"

    def to_json(self) -> dict[str, Any]:
        return {
            "batchId": self.batch_id,
            "batchSequence": self.batch_sequence,
            "batchAt": _iso(self.batch_at) if self.batch_at else None,
            "answerSequence": self.answer_sequence,
            "outcome": self.outcome,
            "detail": self.detail,
            "nodeclaim": self.nodeclaim,
            "reasons": dict(self.reasons),
            "claim": self.claim.to_json() if self.claim else None,
        }


@dataclass(frozen=True)
class PodExplanation:
    pod: str
    searched: int
    found: bool
    batches: tuple[BatchOutcomeForPod, ...] = ()
    ended: str | None = None
    """Where the pod ended: the last BoundPodObserved, in words."""
    bound_node: str | None = None

    def text(self) -> str:
        if not self.found:
            return f"no pod named {self.pod} in the log (searched {self.searched} events)"
        lines = [f"Pod {self.pod}"]
        if not self.batches:
            lines.append("  no pending batch held it: the kube-scheduler placed it without tenon")
        for b in self.batches:
            lines.append(b.line())
            lines += [f"    NodePool {pool}: {why}" for pool, why in sorted(b.reasons.items())]
        lines.append(f"  ended: {self.ended or 'no BoundPodObserved: not bound to a node (yet)'}")
        claims = [b.claim.text() for b in self.batches if b.claim is not None and b.claim.found]
        return "\n\n".join(["\n".join(lines), *claims])

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "kind": "PodExplanation",
            "pod": self.pod,
            "found": self.found,
            "searched": self.searched,
        }
        if not self.found:
            body["message"] = self.text()
            return body
        body.update(
            {
                "batches": [b.to_json() for b in self.batches],
                "ended": self.ended,
                "boundNode": self.bound_node,
            }
        )
        return body


def parse_pod_key(namespace_name: str) -> tuple[str, str]:
    """``NS/NAME`` -> (namespace, name); a clear ValueError otherwise."""
    namespace, sep, name = namespace_name.partition("/")
    if not sep or not namespace or not name or "/" in name:
        raise ValueError(f"pod {namespace_name!r}: expected NAMESPACE/NAME, e.g. default/inflate-3")
    return namespace, name


@dataclass
class _PodTrail:
    """What the log says about one pod, gathered in one pass: the batches that held it, the answers that
    mention it (or plan a claim for it), and its last binding."""

    key: str
    claim_pods: dict[str, tuple[str, ...]]
    batches: dict[str, LoggedEvent] = field(default_factory=dict)
    answers: dict[str, LoggedEvent] = field(default_factory=dict)
    order: list[str] = field(default_factory=list)
    bound: LoggedEvent | None = None

    def follow(self, record: LoggedEvent) -> None:
        event = record.event
        if isinstance(event, ev.PendingBatch) and self.key in pods_of(event):
            self._note(self.batches, event.batch_id, record)
        elif isinstance(event, ev.BatchPlanned) and self._mentions(event):
            self._note(self.answers, event.batch_id, record)
        elif isinstance(event, ev.BoundPodObserved) and self.key in pods_of(event):
            self.bound = record

    def _mentions(self, answer: ev.BatchPlanned) -> bool:
        return (
            answer.batch_id in self.batches
            or any(self.key in self.claim_pods.get(c, ()) for c in answer.nodeclaims)
            or self.key in pods_of(answer)
        )

    def _note(self, where: dict[str, LoggedEvent], batch_id: str, record: LoggedEvent) -> None:
        where.setdefault(batch_id, record)
        if batch_id not in self.order:
            self.order.append(batch_id)


def explain_pod(
    namespace_name: str, records: Sequence[LoggedEvent], searched: int | None = None
) -> PodExplanation:
    """What the log in ``records`` says about the pod ``NS/NAME``."""
    parse_pod_key(namespace_name)
    key = namespace_name
    ordered = _ordered(records)
    count = len(records) if searched is None else searched
    claim_pods = {
        r.event.nodeclaim: r.event.pods for r in ordered if isinstance(r.event, ev.NodeClaimPlanned)
    }
    trail = _PodTrail(key, claim_pods)
    for record in ordered:
        trail.follow(record)
    outcomes = tuple(
        _pod_outcome(key, b, trail.batches.get(b), trail.answers.get(b), claim_pods, ordered, count)
        for b in trail.order
    )
    if not outcomes and trail.bound is None:
        return PodExplanation(pod=key, searched=count, found=False)
    ended, node = _ended(trail.bound)
    return PodExplanation(pod=key, searched=count, found=True, batches=outcomes, ended=ended, bound_node=node)


def _pod_outcome(
    key: str,
    batch_id: str,
    batch: LoggedEvent | None,
    answer: LoggedEvent | None,
    claim_pods: dict[str, tuple[str, ...]],
    ordered: Sequence[LoggedEvent],
    searched: int,
) -> BatchOutcomeForPod:
    batch_seq = batch.sequence if batch else None
    batch_at = batch.recorded_at if batch else None
    if answer is None:
        return BatchOutcomeForPod(
            batch_id,
            batch_seq,
            batch_at,
            None,
            "not-answered",
            "no BatchPlanned answers it in the log (the scheduler has not planned it yet)",
        )
    plan = answer.event
    assert isinstance(plan, ev.BatchPlanned)
    head = (batch_id, batch_seq, batch_at, answer.sequence)
    at = sequence(answer.sequence)
    claim = next((c for c in plan.nodeclaims if key in claim_pods.get(c, ())), None)
    if claim is not None:
        explanation = explain_nodeclaim(claim, ordered, searched)
        what = _new_claim(claim, explanation.planned)
        return BatchOutcomeForPod(*head, "new-claim", f"{what} ({at})", nodeclaim=claim, claim=explanation)
    placement = next((p for p in plan.existing if p.pod == key), None)
    if placement is not None:
        kind = "in-flight NodeClaim" if placement.kind == "NodeClaim" else "Node"
        return BatchOutcomeForPod(*head, "existing", f"fits on existing room: {kind} {placement.node} ({at})")
    unschedulable = next((u for u in plan.unschedulable if u.pod == key), None)
    if unschedulable is not None:
        # the reasons per NodePool are listed under the line when there are any
        why = "" if unschedulable.reasons else f": {unschedulable.reason}"
        reasons = dict(unschedulable.reasons)
        return BatchOutcomeForPod(*head, "unschedulable", f"unschedulable ({at}){why}", reasons=reasons)
    return BatchOutcomeForPod(*head, "not-in-answer", f"{_not_in_answer(plan, claim_pods)} ({at})")


def _new_claim(claim: str, planned: ev.NodeClaimPlanned | None) -> str:
    if planned is None:
        return f"a new claim {claim}"
    c = planned.choice
    return (
        f"a new claim {claim}: {c.instance_type} at {price(c.price_per_hour)} in NodePool {planned.nodepool}"
    )


def _not_in_answer(plan: ev.BatchPlanned, claim_pods: dict[str, tuple[str, ...]]) -> str:
    unseen = [c for c in plan.nodeclaims if c not in claim_pods]
    if not unseen:
        return "not in the answer: it was already bound when the scheduler planned"
    return (
        f"not placed on existing room nor unschedulable; the answer's claims {', '.join(unseen)} "
        "are not in the log read, one of them may hold it"
    )


def _ended(bound: LoggedEvent | None) -> tuple[str | None, str | None]:
    if bound is None:
        return None, None
    event = bound.event
    assert isinstance(event, ev.BoundPodObserved)
    node = (event.pod.get("spec") or {}).get("nodeName")
    phase = (event.pod.get("status") or {}).get("phase")
    when = f"({sequence(bound.sequence)} at {stamp(bound.recorded_at)})"
    if event.change == "removed":
        return f"removed from node {node} {when}", None
    # a bound pod's recorded phase is the one of its last recorded change (its binding, its end), so only an
    # end is worth telling: a "Pending" recorded at binding would read as if the pod never started
    ended = phase in FINISHED
    return f"bound to node {node}" + (f", {phase}" if ended else "") + f" {when}", node
