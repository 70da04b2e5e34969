"""The NodeClaim lifecycle after launch (pure): registration, initialization, abandonment.

The scheduler is the single writer of a claim's state (Karpenter's lifecycle controller does the same job):

* **Registered** when a Node whose ``spec.providerID`` equals the claim's launched providerID is observed.
  Deciding it also means (for the service, as a side effect before the event is appended) syncing the
  NodePool's labels and taints onto the Node and removing ``karpenter.sh/unregistered``, the taint the node
  booted with so nothing lands on it before that happened (:func:`registration_patch`).
* **Initialized** when that Node is Ready and none of the NodePool's startup taints, nor the unregistered
  taint, remain: from then on pods may land and the claim counts as a Node. A Node observed before its
  registration patch showed (still tainted unregistered) is judged as the registration leaves it (that
  taint gone, the pool's taints on): if that is initialized, Initialized is decided at once, right after
  Registered (whose Node patch must have succeeded first), instead of waiting for the Node's next
  observation to show the patch.
* **Abandoned** when a claim was not launched within ``launch_timeout`` (5 min) or not registered within
  ``registration_timeout`` (15 min) of being planned, or when every instance type failed to launch. The
  launcher removes its machine, and the scheduler plans its pods again.

Decisions are level-triggered: after an event is folded, each claim it concerns is checked for what is now
true and not yet recorded (:func:`due`). So a decision that could not be recorded (another writer appended to
the claim first) is simply decided again when that writer's event is folded, and deciding twice decides the
same. Event-driven decisions take their time from the triggering event, so they replay exactly; timeouts are
checked against a clock the service passes in (:func:`expired_claims`), and they are recorded with no
causation.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from functools import lru_cache
from typing import Any

from proto import events as ev
from proto.ids import derive_id
from tenon.core.wellknown import REGISTERED, TERMINATION_FINALIZER, UNREGISTERED_TAINT
from tenon.domain.nodeclaim import NodeClaim, Phase
from tenon.domain.projection import ClusterProjection, KubeObject

PRODUCER = "scheduler"
LAUNCH_TIMEOUT = timedelta(minutes=5)
REGISTRATION_TIMEOUT = timedelta(minutes=15)


_STEPPING = frozenset({Phase.FAILED, Phase.LAUNCHED, Phase.REGISTERED})
"""The phases in which a claim may have a lifecycle step due (:func:`due`)."""


def _ready(node: KubeObject) -> bool:
    for condition in (node.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return bool(condition.get("status") == "True")
    return False


def _taint_keys(node: KubeObject) -> set[tuple[str, str]]:
    return {(t.get("key", ""), t.get("effect", "")) for t in (node.get("spec") or {}).get("taints") or []}


def is_initialized(claim: NodeClaim, node: KubeObject) -> bool:
    if not _ready(node):
        return False
    keys = {key for key, _ in _taint_keys(node)}
    if UNREGISTERED_TAINT in keys:
        return False
    startup = {t.get("key") for t in (claim.planned.startup_taints if claim.planned else ())}
    return not (startup & keys)


def registration_patch(claim: NodeClaim, node: KubeObject) -> dict[str, Any] | None:
    """The merge patch that makes a joining Node belong to its claim, or None if it already does.

    A merge patch replaces a list whole, so a patch that writes the taints or the finalizers carries the
    ``resourceVersion`` of the ``node`` it was computed from: the API server refuses it (409 Conflict) if the
    Node changed since, instead of undoing a change it did not see. A joining Node changes often: its
    ``node.kubernetes.io/not-ready`` taint goes when it turns Ready, often between the observation a
    registration is decided on and the patch, and a patch from that observation put it back."""
    if claim.planned is None:
        return None
    meta = node.get("metadata") or {}
    labels = meta.get("labels") or {}
    wanted_labels = {k: v for k, v in claim.planned.labels.items() if labels.get(k) != v}
    if labels.get(REGISTERED) != "true":
        wanted_labels[REGISTERED] = "true"
    taints = list((node.get("spec") or {}).get("taints") or [])
    kept = [t for t in taints if t.get("key") != UNREGISTERED_TAINT]
    present = {(t.get("key"), t.get("effect")) for t in kept}
    for taint in (*claim.planned.taints, *claim.planned.startup_taints):
        if (taint.get("key"), taint.get("effect")) not in present:
            kept.append(dict(taint))
            present.add((taint.get("key"), taint.get("effect")))
    patch: dict[str, Any] = {}
    if wanted_labels:
        patch["metadata"] = {"labels": wanted_labels}
    finalizers = list(meta.get("finalizers") or [])
    if TERMINATION_FINALIZER not in finalizers:
        # a user's `kubectl delete node` then waits for a graceful drain instead of orphaning the machine
        patch.setdefault("metadata", {})["finalizers"] = [*finalizers, TERMINATION_FINALIZER]
    if kept != taints:
        patch["spec"] = {"taints": kept}
    version = meta.get("resourceVersion")
    if version and ("spec" in patch or "finalizers" in patch.get("metadata", {})):
        patch.setdefault("metadata", {})["resourceVersion"] = version
    return patch or None


def as_registered(claim: NodeClaim, node: KubeObject) -> KubeObject:
    """``node`` as its registration patch leaves it (what :func:`registration_patch` changes applied)."""
    patch = registration_patch(claim, node)
    if not patch:
        return node
    meta = node.get("metadata") or {}
    labels = {**(meta.get("labels") or {}), **((patch.get("metadata") or {}).get("labels") or {})}
    spec = {**(node.get("spec") or {}), **(patch.get("spec") or {})}
    return {**node, "metadata": {**meta, "labels": labels}, "spec": spec}


def _event_time(event: ev.Event) -> datetime:
    return event.decided_at


def affected_claims(projection: ClusterProjection, event: ev.Event) -> list[NodeClaim]:
    """The claims whose lifecycle ``event`` may move: its own claim, or the claims of a Node it observed."""
    if isinstance(event, ev.NodeClaimEvent):
        claim = projection.claims.get(event.nodeclaim)
        return [claim] if claim is not None else []
    if isinstance(event, ev.NodeObserved) and event.change != "removed":
        name = (event.node.get("metadata") or {}).get("name")
        provider_id = (event.node.get("spec") or {}).get("providerID")
        return [
            c
            for c in projection.claims.values()
            if (c.registered and c.registered.node == name)
            or (c.launched and provider_id and c.launched.provider_id == provider_id)
        ]
    return []


def due(projection: ClusterProjection, claim: NodeClaim, cause: ev.Event) -> list[ev.Event]:
    """What is true of ``claim`` now and not yet recorded (level-triggered: deciding twice decides the
    same)."""
    if claim.phase == "Failed" and claim.abandoned is None and claim.launch_failures:
        return [
            _abandoned(
                claim,
                f"no instance type could be launched: {claim.launch_failures[-1].reason}",
                cause,
                cause.decided_at,
            )
        ]
    if claim.phase == "Launched" and claim.launched is not None:
        node = projection.node_by_provider_id(claim.launched.provider_id)
        if node is not None:
            registered = _registered(claim, node, cause)
            # Ready first: the registration patch leaves the conditions as they are, and most Nodes of a
            # wave are not Ready yet, so their patch need not be worked out on every batch
            if _ready(node) and is_initialized(claim, as_registered(claim, node)):
                # Ready, and nothing but the registration's own taint kept it from being initialized
                return [registered, _initialized(claim, registered.node, cause)]
            return [registered]
    if claim.phase == "Registered" and claim.registered is not None:
        node = projection.nodes.get(claim.registered.node)
        if node is not None and _ready(node) and is_initialized(claim, _as_left_by_registration(claim, node)):
            return [_initialized(claim, claim.registered.node, cause)]
    return []


def _as_left_by_registration(claim: NodeClaim, node: KubeObject) -> KubeObject:
    """A registered claim's ``node`` as its registration left it: an observation that still shows the
    unregistered taint was made before the registration patch (whose watch event comes later), and is judged
    as the patch leaves it, as :func:`due` judges a Launched claim's Node. So whether the Registered was
    folded yet or not (carried out behind the deciding, :mod:`tenon.runtime.decider`), the same observation
    decides the same Initialized, live and in ``tenon replay``. A Node without that taint is judged as it
    is: its registration patch is in it, and a startup taint removed since is not put back."""
    taints = (node.get("spec") or {}).get("taints") or ()
    if any(t.get("key") == UNREGISTERED_TAINT for t in taints):
        return as_registered(claim, node)
    return node


def decide(projection: ClusterProjection, event: ev.Event) -> list[ev.Event]:
    """Lifecycle events that became true with ``event`` (already folded into ``projection``), for the claims
    it concerns."""
    decisions: list[ev.Event] = []
    for claim in affected_claims(projection, event):
        decisions += due(projection, claim, event)
    return decisions


def due_everywhere(projection: ClusterProjection, cause: ev.Event) -> list[ev.Event]:
    """Every claim's lifecycle events that are true now and not yet recorded, answering ``cause`` (what the
    scheduler decides on a whole batch of inputs: whichever of them made a step true)."""
    decisions: list[ev.Event] = []
    for claim in projection.claims.in_phases(_STEPPING):
        decisions += due(projection, claim, cause)
    return decisions


@lru_cache(maxsize=16_384)
def _step_id(step: str, claim: str) -> str:
    """A claim's lifecycle step's id. Remembered: the scheduler decides every stepping claim's steps again on
    each batch (:func:`due_everywhere`), and deriving the ids was 40 % of that, a tenth of its CPU while a
    wave of Nodes joined."""
    return derive_id(PRODUCER, step, claim)


def _registered(claim: NodeClaim, node: KubeObject, cause: ev.Event) -> ev.NodeClaimRegistered:
    return ev.NodeClaimRegistered(
        id=_step_id("NodeClaimRegistered", claim.name),
        decided_at=_event_time(cause),
        producer=PRODUCER,
        causation_id=cause.id,
        correlation_id=claim.name,
        nodeclaim=claim.name,
        node=str((node.get("metadata") or {}).get("name")),
        provider_id=str((node.get("spec") or {}).get("providerID")),
    )


def _initialized(claim: NodeClaim, node: str, cause: ev.Event) -> ev.NodeClaimInitialized:
    return ev.NodeClaimInitialized(
        id=_step_id("NodeClaimInitialized", claim.name),
        decided_at=_event_time(cause),
        producer=PRODUCER,
        causation_id=cause.id,
        correlation_id=claim.name,
        nodeclaim=claim.name,
        node=node,
    )


def _abandoned(claim: NodeClaim, reason: str, cause: ev.Event | None, now: datetime) -> ev.NodeClaimAbandoned:
    return ev.NodeClaimAbandoned(
        id=derive_id(PRODUCER, "NodeClaimAbandoned", claim.name),
        decided_at=now,
        producer=PRODUCER,
        causation_id=cause.id if cause else None,
        correlation_id=claim.name,
        nodeclaim=claim.name,
        reason=reason,
        pods=claim.planned.pods if claim.planned else (),
    )


def expired_claims(
    projection: ClusterProjection,
    now: datetime,
    *,
    launch_timeout: timedelta = LAUNCH_TIMEOUT,
    registration_timeout: timedelta = REGISTRATION_TIMEOUT,
) -> list[ev.NodeClaimAbandoned]:
    """Claims that waited too long for their machine or their node."""
    expired = []
    for claim in projection.claims.values():
        if claim.planned is None:
            continue
        age = now - claim.planned.decided_at
        if claim.phase == "Planned" and age > launch_timeout:
            expired.append(_abandoned(claim, f"not launched within {launch_timeout}", None, now))
        elif claim.phase == "Launched" and age > registration_timeout:
            expired.append(_abandoned(claim, f"no node registered within {registration_timeout}", None, now))
    return expired
