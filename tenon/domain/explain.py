"""Why a NodeClaim exists, where it is in its life, and why it was or was not disrupted, from the log alone (pure).

This is the logic behind ``tenon explain NODECLAIM`` and ``tenon explain --pod NS/NAME``, and behind the text
the scheduler and the disruption service attach to Kubernetes Events on a NodeClaim. It takes plain data (the
events as they sit in the log, each with its stream sequence and the time the broker stored it) and returns
an explanation object; reading the broker is :mod:`tenon.cli.explain`'s job.

Design
------
Every decision tenon takes is an event that carries its own reasons, so explaining is a join, not a
recomputation:

* **Why it exists.** ``NodeClaimPlanned`` names its batch (``batch_id``, ``causation_id`` = the answered
  ``PendingBatch``), its pods, and the scheduler's ``explanation``: ``chosen`` (why the winner won) and
  ``considered`` (every instance type looked at, with its price and verdict). Each verdict is turned into a
  plain outcome: ``chosen`` (cheapest that fits), ``fallback`` (fits but dearer: lost on price, the launcher
  may still use it), or ``lost`` (too small, not allowed, no offering, NodePool limit, max size...). A claim
  planned again for the pods of an abandoned claim answers a ``NodeClaimAbandoned`` instead of a batch; its
  batch id is ``replan-<abandoned claim>`` and the story says so.
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

Records that do not decode are skipped (``tenon tap`` shows them) but counted in ``searched``, so "not in the
log" always says how much log was looked at.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal

from proto import events as ev
from proto.codec import UndecodableEvent
from tenon.domain.projection import ClusterProjection, object_key
from tenon.runtime.eventlog.records import LogRecord

MAX_EVENT_MESSAGE = 1000
"""Kubernetes caps an Event's ``message`` at 1 KiB; :func:`nodeclaim_event_message` stays within it."""

REPLAN_PREFIX = "replan-"
"""Batch id prefix the scheduler uses when it plans again for an abandoned claim's pods."""

Outcome = Literal["chosen", "fallback", "lost"]


# --- input --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LoggedEvent:
    """One event as it sits in the log: its stream sequence and when the broker stored it.

    A service explaining events it has not appended yet may pass sequence 0 and its own clock."""

    sequence: int
    recorded_at: datetime
    event: ev.Event


def logged_events(records: Iterable[LogRecord]) -> tuple[list[LoggedEvent], int]:
    """Decode ``records`` (log order kept); returns the events and how many records were read in all."""
    out: list[LoggedEvent] = []
    count = 0
    for record in records:
        count += 1
        try:
            out.append(LoggedEvent(record.sequence, record.recorded_at, record.decode()))
        except UndecodableEvent:
            continue
    return out, count


def _ordered(records: Iterable[LoggedEvent]) -> list[LoggedEvent]:
    """Log order, each event once (the CLI merges several subject reads).

    Keyed by event id, not sequence, so a caller that has no sequences yet (a service explaining the events it
    is about to append, all with sequence 0) keeps them all, in the order given.
    """
    seen: dict[str, LoggedEvent] = {}
    for record in records:
        seen.setdefault(record.event.id, record)
    return sorted(seen.values(), key=lambda r: r.sequence)


# --- small formatting helpers ---------------------------------------------------------------------------------


def _price(value: float | None) -> str:
    return "price unknown" if value is None else f"${value:.4f}/h"


def _relative(delta: timedelta) -> str:
    seconds = delta.total_seconds()
    sign = "-" if seconds < 0 else "+"
    seconds = abs(seconds)
    if seconds < 60:
        return f"{sign}{seconds:.1f}s"
    minutes, secs = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{sign}{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{sign}{hours}h{minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{sign}{days}d{hours:02d}h"


def _stamp(moment: datetime) -> str:
    return (
        moment.strftime("%Y-%m-%dT%H:%M:%SZ")
        if moment.utcoffset() in (None, timedelta(0))
        else moment.isoformat(timespec="seconds")
    )


def _seq(sequence: int) -> str:
    """A stream sequence as ``#N`` (``#-`` for an event not appended yet)."""
    return f"#{sequence}" if sequence else "#-"


def _iso(moment: datetime) -> str:
    return moment.isoformat()


def _pod_key(pod: ev.KubeObject) -> str:
    return object_key(pod)


# --- the NodeClaim explanation ----------------------------------------------------------------------------------


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
        head = f"{choice.instance_type} won on price: the cheapest type that fits ({_price(choice.price_per_hour)})"
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
        lines: list[str] = [f"NodeClaim {self.name}: {self.phase}"]
        p = self.planned
        if p is not None:
            c = p.choice
            lines.append(
                f"  NodePool {p.nodepool}, NodeClass {p.node_class or '?'}: {c.instance_type} {c.capacity_type} "
                f"{c.zone or 'any zone'} at {_price(c.price_per_hour)}"
                + (" (estimated)" if c.price_estimated else "")
            )
        lines += ["", "Why it exists"]
        if p is None:
            lines.append("  " + self.why_exists())
        else:
            origin = self.origin or Origin(batch_id=p.batch_id, cause_id=p.causation_id)
            if origin.replan_of:
                lines.append(
                    f"  Planned again for the pods of claim {origin.replan_of}, which was abandoned "
                    f"(batch {origin.batch_id})."
                )
            elif origin.batch_sequence is not None and origin.batch_at is not None:
                lines.append(
                    f"  It answers PendingBatch {origin.batch_id} ({_seq(origin.batch_sequence)} at "
                    f"{_stamp(origin.batch_at)}, {len(origin.batch_pods)} pending pod(s), window closed by "
                    f"{origin.window_closed_by})."
                )
            else:
                lines.append(f"  It answers batch {p.batch_id or '?'} (the PendingBatch is not in the log).")
            lines.append(f"  It is for {len(p.pods)} pod(s): {', '.join(p.pods) or '-'}")
            if origin.batch_answer:
                lines.append(f"  The same batch: {origin.batch_answer}")
            requests = p.explanation.get("requests") if isinstance(p.explanation, dict) else None
            if requests:
                needs = ", ".join(f"{k}={v}" for k, v in sorted(requests.items()))
                lines.append(f"  It must hold {needs} (its pods plus DaemonSets).")
            if self.chosen_because:
                lines.append(f"  {p.choice.instance_type} won on price: {self.chosen_because}.")
            if self.considered:
                lines.append("  Instance types considered, cheapest first:")
                width = max(len(v.instance_type) for v in self.considered)
                for v in self.considered:
                    lines.append(f"    {v.instance_type:<{width}}  {_price(v.price_per_hour):>14}  {v.why}")
            else:
                lines.append("  (the plan recorded no instance types considered)")
            if p.fallbacks:
                lines.append(
                    "  Fallbacks, in order: "
                    + ", ".join(f"{f.instance_type} ({_price(f.price_per_hour)})" for f in p.fallbacks)
                )
        lines += ["", "Where it is in its life"]
        for step in self.life:
            rel = _relative(step.since_planned) if step.since_planned is not None else "?"
            lines.append(f"  {_seq(step.sequence):<8} {rel:>9}  {step.step:<20} {step.detail}")
        lines.append(f"  now: {self.phase}")
        lines += ["", "Disruption"]
        if not self.disruptions:
            lines.append("  no disruption decision has named it")
        for d in self.disruptions:
            lines.append(f"  {_seq(d.sequence):<8} {_stamp(d.at)}  {d.sentence()}")
        if self.notes:
            lines += ["", "Notes"] + [f"  {note}" for note in self.notes]
        return "\n".join(lines)

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
        p = self.planned
        body.update(
            {
                "phase": self.phase,
                "nodepool": p.nodepool if p else None,
                "nodeClass": p.node_class if p else None,
                "pods": list(p.pods) if p else [],
                "choice": _choice_json(p.choice) if p else None,
                "fallbacks": [_choice_json(f) for f in p.fallbacks] if p else [],
                "requests": (
                    p.explanation.get("requests") if p and isinstance(p.explanation, dict) else None
                ),
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


def _choice_json(choice: ev.InstanceChoice) -> dict[str, Any]:
    return {
        "instanceType": choice.instance_type,
        "zone": choice.zone,
        "capacityType": choice.capacity_type,
        "pricePerHour": choice.price_per_hour,
        "priceEstimated": choice.price_estimated,
    }


def _verdicts(planned: ev.NodeClaimPlanned) -> tuple[InstanceVerdict, ...]:
    """The scheduler's ``considered`` list as outcomes, cheapest first (unknown prices last)."""
    explanation = planned.explanation if isinstance(planned.explanation, dict) else {}
    raw = explanation.get("considered") or []
    chosen = planned.choice
    fallback_rank = {f.instance_type: i + 1 for i, f in enumerate(planned.fallbacks)}
    out: list[InstanceVerdict] = []
    seen: set[str] = set()
    for item in raw:
        if not isinstance(item, dict):
            continue
        name = str(item.get("instanceType", "?"))
        price_raw = item.get("pricePerHour")
        price = float(price_raw) if isinstance(price_raw, int | float) else None
        verdict = str(item.get("verdict", ""))
        seen.add(name)
        if name == chosen.instance_type or verdict.startswith("chosen"):
            out.append(InstanceVerdict(name, price, "chosen", verdict, "won: the cheapest type that fits"))
        elif verdict.startswith("fallback"):
            rank = fallback_rank.get(name)
            dearer = (
                f"{_price(price)} > {_price(chosen.price_per_hour)}" if price is not None else "costs more"
            )
            tail = f" (fallback {rank} if {chosen.instance_type} cannot be launched)" if rank else ""
            out.append(
                InstanceVerdict(name, price, "fallback", verdict, f"lost on price: fits, but {dearer}{tail}")
            )
        else:
            cheaper = price is not None and price < chosen.price_per_hour
            prefix = (
                "cheaper, but did not fit: "
                if cheaper and verdict.startswith("too small")
                else "cheaper, but lost: "
                if cheaper
                else "lost: "
            )
            out.append(InstanceVerdict(name, price, "lost", verdict, prefix + verdict))
    if chosen.instance_type not in seen:
        out.append(
            InstanceVerdict(
                chosen.instance_type,
                chosen.price_per_hour,
                "chosen",
                "chosen",
                "won: the cheapest type that fits",
            )
        )
    for rank, fb in enumerate(planned.fallbacks, start=1):
        if fb.instance_type not in seen:
            seen.add(fb.instance_type)
            out.append(
                InstanceVerdict(
                    fb.instance_type,
                    fb.price_per_hour,
                    "fallback",
                    "fallback",
                    f"lost on price: fits, but {_price(fb.price_per_hour)} > {_price(chosen.price_per_hour)} "
                    f"(fallback {rank} if {chosen.instance_type} cannot be launched)",
                )
            )
    return tuple(sorted(out, key=lambda v: (v.price_per_hour is None, v.price_per_hour or 0.0)))


def _life_detail(event: ev.NodeClaimEvent, planned: ev.NodeClaimPlanned | None) -> str:
    match event:
        case ev.NodeClaimPlanned():
            c = event.choice
            return f"{c.instance_type} at {_price(c.price_per_hour)} for {len(event.pods)} pod(s) (by {event.producer})"
        case ev.NodeClaimLaunched():
            text = f"as {event.provider_id}" + (f" (machine {event.machine})" if event.machine else "")
            if planned is not None and event.instance_type != planned.choice.instance_type:
                text += (
                    f"; launched as fallback {event.instance_type} instead of {planned.choice.instance_type}"
                )
            else:
                text = f"{event.instance_type} " + text
            return text
        case ev.NodeClaimLaunchFailed():
            then = "a fallback may follow" if event.retryable else "no retry"
            return f"{event.instance_type} could not be launched: {event.reason} ({then})"
        case ev.NodeClaimRegistered():
            return f"node {event.node} joined ({event.provider_id})"
        case ev.NodeClaimInitialized():
            return f"node {event.node} is Ready, startup taints gone: pods may land"
        case ev.NodeClaimAbandoned():
            pods = f"; its pods go back to the scheduler: {', '.join(event.pods)}" if event.pods else ""
            return f"{event.reason}{pods}"
        case ev.DisruptionRequested():
            node = f" node {event.node}" if event.node else ""
            return f"{event.method}:{node} {event.reason}"
        case ev.NodeClaimDrained():
            evicted = ", ".join(event.evicted) if event.evicted else "none"
            expired = "; the termination grace period ran out" if event.grace_period_expired else ""
            return f"{len(event.evicted)} pod(s) evicted: {evicted}{expired}"
        case ev.NodeClaimTerminated():
            return event.reason + (f" (machine {event.machine} removed)" if event.machine else "")
    return type(event).__name__


_STEP_NAMES = {
    ev.NodeClaimPlanned: "Planned",
    ev.NodeClaimLaunched: "Launched",
    ev.NodeClaimLaunchFailed: "LaunchFailed",
    ev.NodeClaimRegistered: "Registered",
    ev.NodeClaimInitialized: "Initialized",
    ev.NodeClaimAbandoned: "Abandoned",
    ev.DisruptionRequested: "DisruptionRequested",
    ev.NodeClaimDrained: "Drained",
    ev.NodeClaimTerminated: "Terminated",
}


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
    return "; ".join(parts) + f"; total {_price(answer.total_price_per_hour)} for the batch"


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
    projection = ClusterProjection()
    own: list[LoggedEvent] = []
    for record in ordered:
        event = record.event
        if isinstance(event, ev.NodeClaimEvent) and event.nodeclaim == name:
            own.append(record)
            projection.apply(event, record.sequence)
    disruptions = _disruptions(name, ordered, own)
    if not own and not disruptions:
        return NodeClaimExplanation(name=name, searched=count, found=False)
    state = projection.claim(name)
    planned_record = next((r for r in own if isinstance(r.event, ev.NodeClaimPlanned)), None)
    planned = state.planned
    planned_at = planned_record.recorded_at if planned_record else None
    notes: list[str] = []
    if planned is None:
        notes.append("its NodeClaimPlanned is not in the log (older than the stream keeps?)")
    life = tuple(
        LifeStep(
            step=_STEP_NAMES.get(type(r.event), type(r.event).__name__),
            sequence=r.sequence,
            at=r.recorded_at,
            since_planned=(r.recorded_at - planned_at) if planned_at else None,
            detail=_life_detail(r.event, planned),  # type: ignore[arg-type]
            producer=r.event.producer,
        )
        for r in own
    )
    origin = _origin(name, planned, ordered) if planned else None
    chosen_because = None
    considered: tuple[InstanceVerdict, ...] = ()
    if planned is not None:
        explanation = planned.explanation if isinstance(planned.explanation, dict) else {}
        chosen_because = str(explanation.get("chosen") or "") or None
        considered = _verdicts(planned)
    return NodeClaimExplanation(
        name=name,
        searched=count,
        found=True,
        phase=state.phase if own else "not seen on its own subject",
        planned=planned,
        planned_sequence=planned_record.sequence if planned_record else None,
        planned_at=planned_at,
        origin=origin,
        chosen_because=chosen_because,
        considered=considered,
        life=life,
        disruptions=disruptions,
        notes=tuple(notes),
    )


def _origin(name: str, planned: ev.NodeClaimPlanned, ordered: Sequence[LoggedEvent]) -> Origin:
    batch_id = planned.batch_id
    replan_of = batch_id[len(REPLAN_PREFIX) :] if batch_id and batch_id.startswith(REPLAN_PREFIX) else None
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
        batch_pods=tuple(_pod_key(p) for p in batch.pods),
        window_closed_by=batch.window_closed_by,
        replan_of=replan_of,
        batch_answer=batch_answer,
    )


def _disruptions(
    name: str, ordered: Sequence[LoggedEvent], own: Sequence[LoggedEvent]
) -> tuple[DisruptionMention, ...]:
    out: list[DisruptionMention] = []
    decision_ids: set[str] = set()
    for record in ordered:
        event = record.event
        if not isinstance(event, ev.DisruptionDecision):
            continue
        for candidate in event.candidates:
            if candidate.nodeclaim == name:
                decision_ids.add(event.id)
                reason = (
                    event.reason
                    if candidate.reason in ("", event.reason)
                    else f"{event.reason}: {candidate.reason}"
                )
                out.append(
                    DisruptionMention(
                        record.sequence,
                        record.recorded_at,
                        "candidate",
                        event.method,
                        reason,
                        budget=event.budget,
                        decision_id=event.id,
                    )
                )
        for blocked in event.blocked:
            if blocked.nodeclaim == name:
                out.append(
                    DisruptionMention(
                        record.sequence,
                        record.recorded_at,
                        "blocked",
                        event.method,
                        event.reason,
                        budget=event.budget,
                        blocked_by=blocked.blocked_by,
                        decision_id=event.id,
                    )
                )
    for record in own:
        event = record.event
        if isinstance(event, ev.DisruptionRequested) and (
            event.decision_id is None or event.decision_id not in decision_ids
        ):
            reason = (
                event.reason
                if event.decision_id is None
                else f"{event.reason} (decision {event.decision_id} is not in the log)"
            )
            out.append(
                DisruptionMention(
                    record.sequence,
                    record.recorded_at,
                    "requested",
                    event.method,
                    reason,
                    decision_id=event.decision_id,
                )
            )
    out.sort(key=lambda d: d.sequence)
    return tuple(out)


def nodeclaim_event_message(explanation: NodeClaimExplanation) -> str:
    """The explanation in at most 1,000 characters, for a Kubernetes Event on the NodeClaim.

    Parts in order of importance (why it exists, why this type, where it is, disruption); each is cut with an
    ellipsis rather than dropped so the reader knows there is more (``tenon explain`` has it all).
    """
    if not explanation.found:
        return explanation.text()[:MAX_EVENT_MESSAGE]
    parts = [
        f"NodeClaim {explanation.name} ({explanation.phase}): {explanation.why_exists()}.",
        explanation.why_this_type() + "." if explanation.planned else "",
        "Life: "
        + ", ".join(
            f"{s.step} {_relative(s.since_planned) if s.since_planned is not None else '?'}"
            for s in explanation.life
        )
        + ".",
        "Disruption: " + explanation.disruption_summary() + ".",
    ]
    parts = [p for p in parts if p]
    budget = MAX_EVENT_MESSAGE - (len(parts) - 1)  # one space between parts
    # give each part its fair share, handing what short parts leave over to the longer ones
    allowance: list[int] = [0] * len(parts)
    remaining = budget
    pending = sorted(range(len(parts)), key=lambda i: len(parts[i]))
    while pending:
        share = remaining // len(pending)
        index = pending.pop(0)
        allowance[index] = min(len(parts[index]), share)
        remaining -= allowance[index]
    cut = [p if len(p) <= a else p[: max(a - 1, 0)] + "…" for p, a in zip(parts, allowance, strict=True)]
    message = " ".join(cut)
    return message[:MAX_EVENT_MESSAGE]


# --- the pod explanation ---------------------------------------------------------------------------------------


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
            where = (
                f"#{b.batch_sequence} at {_stamp(b.batch_at)}"
                if b.batch_sequence and b.batch_at
                else "its PendingBatch is not in the log"
            )
            lines.append(f"  batch {b.batch_id} ({where}): {b.detail}")
            for pool, why in sorted(b.reasons.items()):
                lines.append(f"    NodePool {pool}: {why}")
        lines.append(f"  ended: {self.ended or 'no BoundPodObserved: not bound to a node (yet)'}")
        text = "\n".join(lines)
        for b in self.batches:
            if b.claim is not None and b.claim.found:
                text += "\n\n" + b.claim.text()
        return text

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


def explain_pod(
    namespace_name: str, records: Sequence[LoggedEvent], searched: int | None = None
) -> PodExplanation:
    """What the log in ``records`` says about the pod ``NS/NAME``."""
    parse_pod_key(namespace_name)
    key = namespace_name
    ordered = _ordered(records)
    count = len(records) if searched is None else searched
    claim_pods: dict[str, tuple[str, ...]] = {}
    for record in ordered:
        if isinstance(record.event, ev.NodeClaimPlanned):
            claim_pods[record.event.nodeclaim] = record.event.pods
    batches: dict[str, LoggedEvent] = {}
    answers: dict[str, LoggedEvent] = {}
    order: list[str] = []
    bound: LoggedEvent | None = None
    for record in ordered:
        event = record.event
        if isinstance(event, ev.PendingBatch) and any(_pod_key(p) == key for p in event.pods):
            batches.setdefault(event.batch_id, record)
            if event.batch_id not in order:
                order.append(event.batch_id)
        elif isinstance(event, ev.BatchPlanned):
            mentions = (
                event.batch_id in batches
                or any(key in claim_pods.get(c, ()) for c in event.nodeclaims)
                or any(p.pod == key for p in event.existing)
                or any(u.pod == key for u in event.unschedulable)
            )
            if mentions:
                answers.setdefault(event.batch_id, record)
                if event.batch_id not in order:
                    order.append(event.batch_id)
        elif isinstance(event, ev.BoundPodObserved) and _pod_key(event.pod) == key:
            bound = record
    outcomes = tuple(
        _pod_outcome(key, b, batches.get(b), answers.get(b), claim_pods, ordered, count) for b in order
    )
    ended, node = _ended(bound)
    if not outcomes and bound is None:
        return PodExplanation(pod=key, searched=count, found=False)
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
    for claim in plan.nodeclaims:
        if key in claim_pods.get(claim, ()):
            explanation = explain_nodeclaim(claim, ordered, searched)
            planned = explanation.planned
            what = (
                (
                    f"a new claim {claim}: {planned.choice.instance_type} at "
                    f"{_price(planned.choice.price_per_hour)} in NodePool {planned.nodepool}"
                )
                if planned
                else f"a new claim {claim}"
            )
            return BatchOutcomeForPod(
                batch_id,
                batch_seq,
                batch_at,
                answer.sequence,
                "new-claim",
                f"{what} ({_seq(answer.sequence)})",
                nodeclaim=claim,
                claim=explanation,
            )
    for placement in plan.existing:
        if placement.pod == key:
            kind = "in-flight NodeClaim" if placement.kind == "NodeClaim" else "Node"
            return BatchOutcomeForPod(
                batch_id,
                batch_seq,
                batch_at,
                answer.sequence,
                "existing",
                f"fits on existing room: {kind} {placement.node} ({_seq(answer.sequence)})",
            )
    for unschedulable in plan.unschedulable:
        if unschedulable.pod == key:
            return BatchOutcomeForPod(
                batch_id,
                batch_seq,
                batch_at,
                answer.sequence,
                "unschedulable",
                # the reasons per NodePool are listed under the line when there are any
                f"unschedulable ({_seq(answer.sequence)})"
                + ("" if unschedulable.reasons else f": {unschedulable.reason}"),
                reasons=dict(unschedulable.reasons),
            )
    unseen = [c for c in plan.nodeclaims if c not in claim_pods]
    detail = "not in the answer: it was already bound when the scheduler planned"
    if unseen:
        detail = (
            f"not placed on existing room nor unschedulable; the answer's claims {', '.join(unseen)} "
            "are not in the log read, one of them may hold it"
        )
    return BatchOutcomeForPod(
        batch_id, batch_seq, batch_at, answer.sequence, "not-in-answer", f"{detail} ({_seq(answer.sequence)})"
    )


def _ended(bound: LoggedEvent | None) -> tuple[str | None, str | None]:
    if bound is None:
        return None, None
    event = bound.event
    assert isinstance(event, ev.BoundPodObserved)
    node = (event.pod.get("spec") or {}).get("nodeName")
    phase = (event.pod.get("status") or {}).get("phase")
    stamp = _stamp(bound.recorded_at)
    if event.change == "removed":
        return f"removed from node {node} ({_seq(bound.sequence)} at {stamp})", None
    return f"bound to node {node}" + (
        f", {phase}" if phase else ""
    ) + f" ({_seq(bound.sequence)} at {stamp})", node
