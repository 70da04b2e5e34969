"""When a Machine may be removed (pure): only on positive evidence; in doubt it is kept, and the launcher says
why.

Removing a Machine removes a node and every pod on it, so the launcher never reads *absence* of evidence as
evidence of absence (a claim missing from a log that keeps 14 days is not a claim that never existed). A
Machine bound to a claim (annotation ``tenon.sh/nodeclaim``, tenon's ownership mark) is removed when:

1. **its claim's story says so, and the story is complete** (known from its ``NodeClaimPlanned``): the claim
   was abandoned, drained or terminated, every instance type failed for good, or it launched on another
   Machine (or another Machine bound to it is the one kept). Steps written by a service that does not own them
   were refused by the aggregate and are not part of any story (a forged ``NodeClaimDrained`` removes
   nothing);
2. **or the claim is nowhere (a leak)**: no claim of that name in the state (log and snapshot), the Machine
   has been bound to it for longer than the leak grace, and the launcher's executor looked and recorded it
   (``MachineLeakChecked``): no NodeClaim object of that name exists in the workload cluster, and the event
   log still reaches back past the Machine's creation minus the launch timeout (so the claim's ``Planned``
   would be in it, had there been one).

Otherwise the Machine stays. When the evidence is missing for good (a story known only in part, a NodeClaim
object that exists, a log that lost the Machine's beginning, a workload cluster that cannot be read) the
decision is :class:`Keep` with a code and a reason, which the launcher records once per Machine and reason
(``MachineKept``) and shows as a Kubernetes Event; emptiness (the disruption service) removes an unused node
properly later.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from proto import events as ev
from tenon.domain.nodeclaim import NodeClaim
from tenon.services.launcher_capi.observations import MachineView
from tenon.services.launcher_capi.state import LauncherState

INCOMPLETE_HISTORY = "incomplete-history"
NODECLAIM_OBJECT_EXISTS = "nodeclaim-object-exists"
NODECLAIM_OBJECTS_UNREADABLE = "nodeclaim-objects-unreadable"
LOG_TOO_SHORT = "log-too-short"


@dataclass(frozen=True)
class Remove:
    reason: str
    evidence: tuple[str, ...]


@dataclass(frozen=True)
class Keep:
    code: str
    reason: str


Verdict = Remove | Keep | None
"""Remove it, keep it for a reason worth saying, or nothing to say (it is wanted)."""


def _when(event: ev.Event) -> str:
    return event.decided_at.strftime("%Y-%m-%dT%H:%M:%SZ")


def _ending(claim: NodeClaim) -> tuple[str, ev.Event] | None:
    """Why the claim's machine is no longer wanted, and the step that says so."""
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
        facts.append(f"{type(step).__name__} {step.id} by {step.producer} at {_when(step)}")
    assert claim.planned is not None
    facts.append(f"complete history from NodeClaimPlanned {claim.planned.id} at {_when(claim.planned)}")
    return tuple(facts)


def verdict(
    state: LauncherState, machine: MachineView, bound: Mapping[str, Sequence[MachineView]]
) -> Verdict:
    """What to do with ``machine`` (bound to a claim) given everything the state knows."""
    assert machine.claim is not None
    claim = state.claims.get(machine.claim)
    if claim is None:
        return _leak_verdict(state, machine)
    ending = _ending(claim)
    if not claim.complete:
        if ending is None:
            return None
        return Keep(
            INCOMPLETE_HISTORY,
            f"NodeClaim {claim.name} looks {ending[0]}, but its history is incomplete (its first events left "
            f"the log and no snapshot holds them): Machine {machine.ref} is not removed on partial evidence",
        )
    if ending is not None:
        return Remove(f"NodeClaim {claim.name} {ending[0]}", _evidence(claim, ending[1]))
    if claim.launched is not None and claim.launched.machine not in (None, machine.name):
        return Remove(
            f"NodeClaim {claim.name} launched on Machine {claim.launched.machine}",
            _evidence(claim, claim.launched),
        )
    others = bound.get(claim.name, ())
    if claim.launched is None and len(others) > 1:
        keep = min(others, key=lambda m: (m.provider_id is None, m.name))
        if keep.name != machine.name:
            return Remove(
                f"NodeClaim {claim.name} is bound to Machine {keep.name} too, which is kept",
                _evidence(claim, None),
            )
    return None


def _checked(state: LauncherState, machine: MachineView) -> ev.MachineLeakChecked | None:
    """The leak check that applies to the Machine's current binding, if one was made."""
    check = state.checks.get(machine.ref)
    if check is None or check.nodeclaim != machine.claim or check.bound_since != machine.bound_since:
        return None
    return check


def _leak_verdict(state: LauncherState, machine: MachineView) -> Verdict:
    check = _checked(state, machine)
    if check is None:
        return None  # within the grace, or not looked at yet
    name = check.nodeclaim
    if check.nodeclaim_object == "present":
        return Keep(
            NODECLAIM_OBJECT_EXISTS,
            f"bound to NodeClaim {name}, which the event log does not have, but a NodeClaim object {name} "
            "exists in the workload cluster",
        )
    if check.nodeclaim_object != "absent":
        return Keep(
            NODECLAIM_OBJECTS_UNREADABLE,
            f"bound to NodeClaim {name}, which the event log does not have, and the workload cluster's "
            f"NodeClaims could not be read to rule it out ({check.detail or 'no reason given'})",
        )
    if not check.log_reaches_back:
        return Keep(
            LOG_TOO_SHORT,
            f"bound to NodeClaim {name}, which the event log does not have, but the log starts at "
            f"{_moment(check.log_starts_at)}, after {_moment(check.log_needed_since)} "
            "(the Machine's creation minus the launch timeout): the claim may have aged out of it",
        )
    if check.decided_at - check.bound_since < timedelta(seconds=check.leak_grace):
        return None
    return Remove(
        f"leaked: bound to NodeClaim {name}, which exists nowhere",
        (
            f"no NodeClaim {name} in the event log or the launcher's snapshot",
            f"no NodeClaim object {name} in the workload cluster at {_when(check)}",
            f"the log reaches back to {_moment(check.log_starts_at)}, "
            f"before {_moment(check.log_needed_since)} (the Machine's creation minus the launch timeout)",
            f"bound to it since {_moment(check.bound_since)}, longer than the leak grace "
            f"{check.leak_grace:g}s",
        ),
    )


def _moment(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%dT%H:%M:%SZ") if value is not None else "(its beginning)"


def leak_suspects(state: LauncherState, now: datetime, grace: timedelta) -> Iterator[MachineView]:
    """Machines of member MachineDeployments bound for longer than ``grace`` to a claim the state does not
    have, not checked yet: what the executor looks for in the workload cluster and the log
    (``MachineLeakChecked``)."""
    for machine in state.machines.values():
        if machine.claim is None or machine.deleting or machine.claim in state.claims:
            continue
        if machine.md is None or f"{machine.namespace}/{machine.deployment}" not in state.deployments:
            continue
        if machine.bound_since is None or now - machine.bound_since < grace:
            continue
        if _checked(state, machine) is None:
            yield machine
