"""Every event type with its subject, who may write it and who reads it: the one table the rest derives from.

``proto/README.md``'s map, the broker permissions each service gets (a service may publish only what it writes
and subscribe only to what it reads), the NodeClaim aggregate's check of who may write a step, ``tenon tap``'s
and ``tenon explain``'s view of the log: all of them read this table, so they cannot disagree.

Writers and readers are service names. ``launcher-*`` stands for every launcher (``launcher-capi``,
``launcher-ec2``): which launcher acts on a claim depends on its NodeClass, not on the event type.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any

from proto import events as ev
from proto import subjects
from proto.objects import event_refusal
from proto.subjects import NODECLAIM_STEPS

POD_WATCHER = "pod-watcher"
SCHEDULER = "scheduler"
LAUNCHER_CAPI = "launcher-capi"
LAUNCHER_EC2 = "launcher-ec2"
LAUNCHERS = "launcher-*"
DISRUPTION = "disruption"
INTERRUPTION_HANDLER = "interruption-handler"
ANY_CONSUMER = "*"

SERVICES: tuple[str, ...] = (
    POD_WATCHER,
    SCHEDULER,
    LAUNCHER_CAPI,
    LAUNCHER_EC2,
    DISRUPTION,
    INTERRUPTION_HANDLER,
)
"""Every service that writes to the log, by the name it writes into ``producer``."""


@dataclass(frozen=True)
class EventSpec:
    type: type[ev.Event]
    subject: str
    """The subject pattern it is published on (``*`` stands for one name token)."""
    writers: tuple[str, ...]
    readers: tuple[str, ...]

    def written_by(self, producer: str) -> bool:
        return any(fnmatchcase(producer, writer) for writer in self.writers)


def _claim_step(
    event_type: type[ev.NodeClaimEvent], writers: tuple[str, ...], readers: tuple[str, ...]
) -> EventSpec:
    return EventSpec(
        event_type, f"tenon.nodeclaim.*.{NODECLAIM_STEPS[event_type.__name__]}", writers, readers
    )


_EVERYONE_DECIDING = (SCHEDULER, DISRUPTION)
_NODECLASS_READERS = (SCHEDULER, LAUNCHERS, DISRUPTION)
"""Disruption reads NodeClasses for drift (a changed NodeClass drifts its claims)."""


def _capi(*event_types: type[ev.Event], subject: str) -> tuple[EventSpec, ...]:
    """The CAPI launcher's own story of the Cluster API objects: its observations (its decisions must be
    replayable from the log, so what it saw is in the log) and its actions on them, written and read by it."""
    return tuple(EventSpec(t, subject, (LAUNCHER_CAPI,), (LAUNCHER_CAPI,)) for t in event_types)


def _ec2(*event_types: type[ev.Event], subject: str) -> tuple[EventSpec, ...]:
    """The EC2 launcher's own story of EC2 (fleets asked and answered, instances observed, checked,
    terminated, kept): written and read by it, so its decisions replay from the log."""
    return tuple(EventSpec(t, subject, (LAUNCHER_EC2,), (LAUNCHER_EC2,)) for t in event_types)


_CLAIM_READERS = (SCHEDULER, LAUNCHERS, DISRUPTION)
_CLAIM_READERS_AND_INTERRUPTIONS = (*_CLAIM_READERS, INTERRUPTION_HANDLER)
"""Launched and Terminated are read by the interruption-handler too: which instances tenon runs (a notice for
any other is counted and dropped)."""


SPECS: tuple[EventSpec, ...] = (
    EventSpec(ev.NodeObserved, "tenon.cluster.node.*", (POD_WATCHER,), _EVERYONE_DECIDING),
    EventSpec(ev.BoundPodObserved, "tenon.cluster.pod.*.*", (POD_WATCHER,), _EVERYONE_DECIDING),
    EventSpec(ev.NodePoolsSnapshot, "tenon.cluster.nodepools", (POD_WATCHER,), _EVERYONE_DECIDING),
    EventSpec(ev.NodeClassesSnapshot, "tenon.cluster.nodeclasses", (POD_WATCHER,), _NODECLASS_READERS),
    EventSpec(ev.DaemonSetsSnapshot, "tenon.cluster.daemonsets", (POD_WATCHER,), _EVERYONE_DECIDING),
    EventSpec(ev.PodDisruptionBudgetsSnapshot, "tenon.cluster.pdbs", (POD_WATCHER,), (DISRUPTION,)),
    EventSpec(
        ev.CatalogSnapshot,
        "tenon.catalog.*",
        (LAUNCHERS,),
        (SCHEDULER, DISRUPTION, LAUNCHER_CAPI, LAUNCHER_EC2),
    ),
    EventSpec(ev.PendingBatch, "tenon.pending", (POD_WATCHER,), _EVERYONE_DECIDING),
    EventSpec(ev.BatchPlanned, "tenon.scheduling.batch", (SCHEDULER,), ()),
    _claim_step(ev.NodeClaimPlanned, (SCHEDULER,), (SCHEDULER, LAUNCHERS, DISRUPTION)),
    _claim_step(ev.NodeClaimLaunched, (LAUNCHERS,), _CLAIM_READERS_AND_INTERRUPTIONS),
    _claim_step(ev.NodeClaimLaunchFailed, (LAUNCHERS,), (SCHEDULER, LAUNCHERS, DISRUPTION)),
    _claim_step(ev.NodeClaimRegistered, (SCHEDULER,), (SCHEDULER, LAUNCHERS, DISRUPTION)),
    _claim_step(ev.NodeClaimInitialized, (SCHEDULER,), (SCHEDULER, LAUNCHERS, DISRUPTION)),
    _claim_step(ev.NodeClaimAbandoned, (SCHEDULER,), (SCHEDULER, LAUNCHERS, DISRUPTION)),
    _claim_step(ev.DisruptionRequested, (DISRUPTION,), (SCHEDULER, LAUNCHERS, DISRUPTION)),
    _claim_step(ev.NodeClaimDrained, (DISRUPTION,), (SCHEDULER, LAUNCHERS, DISRUPTION)),
    _claim_step(ev.NodeClaimTerminated, (LAUNCHERS,), _CLAIM_READERS_AND_INTERRUPTIONS),
    EventSpec(ev.DisruptionDecision, "tenon.disruption.decision", (DISRUPTION,), (DISRUPTION,)),
    EventSpec(
        ev.ReplacementsRequested, subjects.DISRUPTION_REPLACEMENTS, (DISRUPTION,), (SCHEDULER, DISRUPTION)
    ),
    EventSpec(
        ev.InterruptionNotice, "tenon.interruption.*", (INTERRUPTION_HANDLER,), (DISRUPTION, LAUNCHER_EC2)
    ),
    EventSpec(
        ev.InterruptionMessageReceived,
        subjects.INTERRUPTION_MESSAGES,
        (INTERRUPTION_HANDLER,),
        (INTERRUPTION_HANDLER,),
    ),
    EventSpec(ev.DeadLetter, "tenon.deadletter.*.*", (ANY_CONSUMER,), ()),
    *_capi(
        ev.MachineDeploymentObserved, ev.MachineDeploymentScaled, subject=subjects.CAPI_MACHINEDEPLOYMENTS
    ),
    *_capi(
        ev.MachineObserved,
        ev.MachineLeakChecked,
        ev.MachineBound,
        ev.MachineRemovalDecided,
        ev.MachineKept,
        subject=subjects.CAPI_MACHINES,
    ),
    *_ec2(ev.Ec2FleetRequested, ev.Ec2FleetAnswered, subject=subjects.EC2_FLEETS),
    *_ec2(
        ev.Ec2InstanceObserved,
        ev.Ec2InstanceLeakChecked,
        ev.Ec2InstanceTerminationDecided,
        ev.Ec2InstanceKept,
        subject=subjects.EC2_INSTANCES,
    ),
)

BY_TYPE: dict[type[ev.Event], EventSpec] = {spec.type: spec for spec in SPECS}


def spec_of(event_type: type[ev.Event]) -> EventSpec:
    try:
        return BY_TYPE[event_type]
    except KeyError:
        raise KeyError(f"{event_type.__name__} is missing from proto/registry.py") from None


def may_write(producer: str, event_type: type[ev.Event]) -> bool:
    """Whether ``producer`` owns ``event_type`` (what the broker permits and the aggregate checks)."""
    return spec_of(event_type).written_by(producer)


def _name(obj: ev.KubeObject, field: str) -> str:
    return str((obj.get("metadata") or {}).get(field) or "")


_SUBJECT_OF: dict[type[ev.Event], Callable[[Any], str]] = {
    ev.NodeObserved: lambda e: subjects.node(_name(e.node, "name")),
    ev.BoundPodObserved: lambda e: subjects.bound_pod(
        _name(e.pod, "namespace") or "default", _name(e.pod, "name")
    ),
    ev.NodePoolsSnapshot: lambda e: subjects.NODEPOOLS,
    ev.NodeClassesSnapshot: lambda e: subjects.NODECLASSES,
    ev.DaemonSetsSnapshot: lambda e: subjects.DAEMONSETS,
    ev.PodDisruptionBudgetsSnapshot: lambda e: subjects.PDBS,
    ev.CatalogSnapshot: lambda e: subjects.catalog(e.node_class),
    ev.PendingBatch: lambda e: subjects.PENDING,
    ev.BatchPlanned: lambda e: subjects.BATCH_DECISIONS,
    ev.DisruptionDecision: lambda e: subjects.DISRUPTION_DECISIONS,
    ev.ReplacementsRequested: lambda e: subjects.DISRUPTION_REPLACEMENTS,
    ev.InterruptionNotice: lambda e: subjects.interruption(e.provider_id.split(":", 1)[0] or "unknown"),
    ev.DeadLetter: lambda e: subjects.deadletter(e.stream, e.consumer),
    ev.MachineDeploymentObserved: lambda e: subjects.capi_machinedeployment(
        _name(e.machine_deployment, "namespace") or "default", _name(e.machine_deployment, "name")
    ),
    ev.MachineDeploymentScaled: lambda e: subjects.capi_machinedeployment(e.namespace, e.machine_deployment),
    ev.MachineObserved: lambda e: subjects.capi_machine(
        _name(e.machine, "namespace") or "default", _name(e.machine, "name")
    ),
    ev.MachineLeakChecked: lambda e: subjects.capi_machine(e.namespace, e.machine),
    ev.MachineBound: lambda e: subjects.capi_machine(e.namespace, e.machine),
    ev.MachineRemovalDecided: lambda e: subjects.capi_machine(e.namespace, e.machine),
    ev.MachineKept: lambda e: subjects.capi_machine(e.namespace, e.machine),
    ev.InterruptionMessageReceived: lambda e: subjects.interruption_message(e.queue),
    ev.Ec2FleetRequested: lambda e: subjects.ec2_fleet(e.nodeclaim),
    ev.Ec2FleetAnswered: lambda e: subjects.ec2_fleet(e.nodeclaim),
    ev.Ec2InstanceObserved: lambda e: subjects.ec2_instance(str(e.instance.get("instanceId") or "unknown")),
    ev.Ec2InstanceLeakChecked: lambda e: subjects.ec2_instance(e.instance_id),
    ev.Ec2InstanceTerminationDecided: lambda e: subjects.ec2_instance(e.instance_id),
    ev.Ec2InstanceKept: lambda e: subjects.ec2_instance(e.instance_id),
}


def subject_of(event: ev.Event) -> str:
    """The concrete subject ``event`` is published on."""
    if isinstance(event, ev.NodeClaimEvent):
        return subjects.nodeclaim_step(event.nodeclaim, type(event).__name__)
    try:
        return _SUBJECT_OF[type(event)](event)
    except KeyError:
        raise KeyError(f"{type(event).__name__} has no subject in proto/registry.py") from None


def first_writer(event_type: type[ev.Event]) -> str:
    """The concrete service that writes ``event_type`` (for a launcher step: launcher-capi)."""
    writer = spec_of(event_type).writers[0]
    return LAUNCHER_CAPI if writer == LAUNCHERS else writer


def reads(service: str) -> tuple[EventSpec, ...]:
    """The event types ``service`` reads."""
    return tuple(spec for spec in SPECS if any(fnmatchcase(service, reader) for reader in spec.readers))


def inputs_of(service: str) -> tuple[str, ...]:
    """The subject filters ``service`` follows: the subjects of what it reads, a claim's steps collapsed into
    ``tenon.nodeclaim.>`` when it reads them all (fewer, non-overlapping filters for the broker)."""
    filters: list[str] = []
    claim_steps = [spec for spec in SPECS if issubclass(spec.type, ev.NodeClaimEvent)]
    read = reads(service)
    if all(step in read for step in claim_steps):
        filters.append(subjects.NODECLAIMS)
        read = tuple(spec for spec in read if spec not in claim_steps)
    filters += [spec.subject for spec in read]
    return tuple(dict.fromkeys(filters))


def refusal(subject: str, event: ev.Event) -> str | None:
    """Why ``event`` found on ``subject`` cannot be trusted (None when it can): a type the registry does not
    know, a subject that is not its type's, a producer that does not write it, or a Kubernetes object in it
    that no API server would serve (:mod:`proto.objects`). The broker's permissions
    enforce the subject side for each service's identity; this check catches what they cannot (and a broker
    run without them)."""
    spec = BY_TYPE.get(type(event))
    if spec is None:
        return f"{type(event).__name__} is not in proto/registry.py"
    if not subjects.matches(spec.subject, subject):
        return f"{type(event).__name__} does not belong on {subject} (it is written on {spec.subject})"
    if not spec.written_by(event.producer):
        writers = " or ".join(spec.writers)
        return f"{type(event).__name__} written by {event.producer!r}: only {writers} may write it"
    return event_refusal(event)


def writes_of(service: str) -> tuple[str, ...]:
    """The subjects ``service`` may publish events on: what the broker grants its identity (nothing more)."""
    subjects_written = [
        spec.subject for spec in SPECS if spec.written_by(service) and ANY_CONSUMER not in spec.writers
    ]
    return tuple(sorted(set(subjects_written)))
