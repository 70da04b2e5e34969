"""When an EC2 instance is terminated (pure): only on positive evidence; in doubt it is kept, and the launcher
says why. The rule is the Cluster API launcher's (:mod:`tenon.services.launcher_capi.removal`), on instances.

An instance tagged ``karpenter.sh/nodeclaim=<claim>`` is terminated when:

1. **its claim's story says so, and the story is complete** (known from its ``NodeClaimPlanned``): the claim
   was drained, abandoned or terminated, every instance type failed for good, or it launched as another
   instance (a second instance of one claim). A step written by a service that does not own it was refused by
   the aggregate and is part of no story (a forged ``NodeClaimDrained`` terminates nothing);
2. **or the claim is nowhere (a leak)**: no claim of that name in the state, and the executor looked past the
   leak grace and recorded it (``Ec2InstanceLeakChecked``): no NodeClaim object of that name in the workload
   cluster, and the log reaches back past the instance's launch minus the launch timeout.

Otherwise it stays; when the evidence is missing for good the decision is ``Ec2InstanceKept`` with a code,
once per instance and reason. A drained claim whose instances are all shutting down or gone gets
``NodeClaimTerminated``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta

from proto import events as ev
from tenon.domain.nodeclaim import NodeClaim
from tenon.services.launcher_ec2.launching import Plan
from tenon.services.launcher_ec2.observations import InstanceView
from tenon.services.launcher_ec2.state import Ec2State

INCOMPLETE_HISTORY = "incomplete-history"
NODECLAIM_OBJECT_EXISTS = "nodeclaim-object-exists"
NODECLAIM_OBJECTS_UNREADABLE = "nodeclaim-objects-unreadable"
LOG_TOO_SHORT = "log-too-short"


@dataclass(frozen=True)
class Terminate:
    reason: str
    evidence: tuple[str, ...]


@dataclass(frozen=True)
class Keep:
    code: str
    reason: str


Verdict = Terminate | Keep | None


def _when(moment: datetime | None) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ") if moment is not None else "(its beginning)"


def _ending(claim: NodeClaim) -> tuple[str, ev.Event] | None:
    for reason, step in (
        ("terminated", claim.terminated),
        ("abandoned", claim.abandoned),
        ("drained", claim.drained),
    ):
        if step is not None:
            return reason, step
    if claim.finally_failed and claim.launch_failures:
        return "failed to launch as every instance type", claim.launch_failures[-1]
    return None


def _evidence(claim: NodeClaim, step: ev.Event | None) -> tuple[str, ...]:
    facts = []
    if step is not None:
        facts.append(f"{type(step).__name__} {step.id} by {step.producer} at {_when(step.decided_at)}")
    assert claim.planned is not None
    facts.append(
        f"complete history from NodeClaimPlanned {claim.planned.id} at {_when(claim.planned.decided_at)}"
    )
    return tuple(facts)


def verdict(state: Ec2State, instance: InstanceView) -> Verdict:
    """What to do with ``instance`` (tagged with a claim) given everything the state knows."""
    assert instance.claim is not None
    claim = state.claims.get(instance.claim)
    if claim is None:
        return _leak_verdict(state, instance)
    ending = _ending(claim)
    if not claim.complete:
        if ending is None:
            return None
        return Keep(
            INCOMPLETE_HISTORY,
            f"NodeClaim {claim.name} looks {ending[0]}, but its history is incomplete (its first events left "
            f"the log and no snapshot holds them): instance {instance.id} is not terminated on partial "
            "evidence",
        )
    if ending is not None:
        return Terminate(f"NodeClaim {claim.name} {ending[0]}", _evidence(claim, ending[1]))
    if claim.launched is not None and claim.launched.machine not in (None, instance.id):
        return Terminate(
            f"NodeClaim {claim.name} launched as instance {claim.launched.machine}",
            _evidence(claim, claim.launched),
        )
    return None


def _leak_verdict(state: Ec2State, instance: InstanceView) -> Verdict:
    check = state.checks.get(instance.id)
    if check is None or check.nodeclaim != instance.claim:
        return None  # within the grace, or not looked at yet
    name = check.nodeclaim
    if check.nodeclaim_object == "present":
        return Keep(
            NODECLAIM_OBJECT_EXISTS,
            f"tagged with NodeClaim {name}, which the event log does not have, but a NodeClaim object {name} "
            "exists in the workload cluster",
        )
    if check.nodeclaim_object != "absent":
        return Keep(
            NODECLAIM_OBJECTS_UNREADABLE,
            f"tagged with NodeClaim {name}, which the event log does not have, and the workload cluster's "
            f"NodeClaims could not be read to rule it out ({check.detail or 'no reason given'})",
        )
    if not check.log_reaches_back:
        return Keep(
            LOG_TOO_SHORT,
            f"tagged with NodeClaim {name}, which the event log does not have, but the log starts at "
            f"{_when(check.log_starts_at)}, after {_when(check.log_needed_since)} (the instance's launch "
            "minus the launch timeout): the claim may have aged out of it",
        )
    return Terminate(
        f"leaked: tagged with NodeClaim {name}, which exists nowhere",
        (
            f"no NodeClaim {name} in the event log or the launcher's snapshot",
            f"no NodeClaim object {name} in the workload cluster at {_when(check.decided_at)}",
            f"the log reaches back to {_when(check.log_starts_at)}, before {_when(check.log_needed_since)} "
            "(the instance's launch minus the launch timeout)",
            f"seen for longer than the leak grace {check.leak_grace:g}s",
        ),
    )


def _terminate(decided: Plan, instance: InstanceView, outcome: Terminate) -> None:
    assert instance.claim is not None
    decided.terminations.append(
        decided.event(
            ev.Ec2InstanceTerminationDecided,
            (instance.id, instance.claim),
            instance.claim,
            instance_id=instance.id,
            nodeclaim=instance.claim,
            reason=outcome.reason,
            evidence=outcome.evidence,
        )
    )


def _keep(decided: Plan, instance: InstanceView, outcome: Keep) -> None:
    assert instance.claim is not None
    if decided.state.was_kept(instance.id, instance.claim, outcome.code):
        return
    decided.kept.append(
        decided.event(
            ev.Ec2InstanceKept,
            (instance.id, instance.claim, outcome.code),
            instance.claim,
            instance_id=instance.id,
            nodeclaim=instance.claim,
            code=outcome.code,
            reason=outcome.reason,
        )
    )


def decide_removals(decided: Plan) -> None:
    """Terminations, instances kept, and ``NodeClaimTerminated`` for drained claims whose instances are
    gone."""
    state = decided.state
    for instance in sorted(state.instances.values(), key=lambda i: i.id):
        if instance.claim is None or instance.gone or instance.id in state.terminations:
            continue
        outcome = verdict(state, instance)
        if isinstance(outcome, Terminate):
            _terminate(decided, instance, outcome)
        elif isinstance(outcome, Keep):
            _keep(decided, instance, outcome)
    leaving = {t.instance_id for t in decided.terminations}
    for claim in state.claims.values():
        if claim.drained is None or claim.terminated is not None or not state.ours(claim):
            continue
        instances = state.instances_of(claim.name)
        if any(not i.gone and i.id not in leaving for i in instances):
            continue
        if any(i.id in leaving for i in instances):
            continue  # terminated in this plan: Terminated follows once it is seen shutting down
        decided.terminated(claim, sorted(i.id for i in instances))


def leak_suspects(state: Ec2State, now: datetime, grace: timedelta) -> Iterator[InstanceView]:
    """Instances tagged with a claim the state does not have, seen for longer than ``grace``, not checked for
    that claim yet: what the executor looks up (``Ec2InstanceLeakChecked``)."""
    for instance in state.instances.values():
        if instance.claim is None or instance.gone or instance.claim in state.claims:
            continue
        if instance.seen_at is None or now - instance.seen_at < grace:
            continue
        check = state.checks.get(instance.id)
        if check is None or check.nodeclaim != instance.claim:
            yield instance
