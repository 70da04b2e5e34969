"""Streams and subjects of the event log; ``proto/README.md`` is the human map of the same facts.

One stream, ``TENON_EVENTS``, holds every event in one total order, which is what makes a range of the log
replayable ("sequence 1,200 to 1,450") and lets ``tenon tap`` follow everything with one ordered consumer.
Subjects partition it so that consumers filter cheaply:

    tenon.cluster.node.<node>                     NodeObserved
    tenon.cluster.pod.<namespace>.<pod>           BoundPodObserved
    tenon.cluster.nodepools                       NodePoolsSnapshot
    tenon.cluster.nodeclasses                     NodeClassesSnapshot
    tenon.cluster.daemonsets                      DaemonSetsSnapshot
    tenon.catalog.<nodeclass>                     CatalogSnapshot
    tenon.pending                                 PendingBatch
    tenon.scheduling.batch                        BatchPlanned (the scheduler's answer to a batch)
    tenon.nodeclaim.<nodeclaim>.<step>            the NodeClaim lifecycle (aggregate: tenon.nodeclaim.<n>.*)
    tenon.disruption.decision                     DisruptionDecision
    tenon.disruption.replacements                 ReplacementsRequested (disruption asks the scheduler)
    tenon.interruption.<provider>                 InterruptionNotice
    tenon.interruption.message.<queue>            InterruptionMessageReceived (the SQS message as received)
    tenon.capi.machinedeployment.<ns>.<name>      MachineDeploymentObserved, MachineDeploymentScaled
    tenon.capi.machine.<ns>.<name>                MachineObserved, MachineBound, MachineLeakChecked,
                                                  MachineRemovalDecided, MachineKept (the CAPI launcher's)
    tenon.ec2.fleet.<nodeclaim>                   Ec2FleetRequested, Ec2FleetAnswered (launcher-ec2's)
    tenon.ec2.instance.<instance-id>              Ec2InstanceObserved, Ec2InstanceLeakChecked,
                                                  Ec2InstanceTerminationDecided, Ec2InstanceKept

Dead letters go to their own stream, ``TENON_DEADLETTER``, on ``tenon.deadletter.<stream>.<consumer>``, so a
poison message never shares retention (or consumers) with the healthy log.

Tokens come from Kubernetes names, which may hold dots (``ip-10-0-0-1.ec2.internal``); a dot would split the
token, so :func:`token` maps it to ``_`` (not a legal character in a Kubernetes name, so it cannot collide).
"""

from __future__ import annotations

EVENTS_STREAM = "TENON_EVENTS"
DEADLETTER_STREAM = "TENON_DEADLETTER"

ROOT = "tenon"
ALL_EVENTS = "tenon.>"
CLUSTER = "tenon.cluster.>"
NODES = "tenon.cluster.node.*"
BOUND_PODS = "tenon.cluster.pod.*.*"
NODEPOOLS = "tenon.cluster.nodepools"
NODECLASSES = "tenon.cluster.nodeclasses"
DAEMONSETS = "tenon.cluster.daemonsets"
PDBS = "tenon.cluster.pdbs"
CATALOGS = "tenon.catalog.*"
PENDING = "tenon.pending"
BATCH_DECISIONS = "tenon.scheduling.batch"
NODECLAIMS = "tenon.nodeclaim.>"
DISRUPTION_DECISIONS = "tenon.disruption.decision"
DISRUPTION_REPLACEMENTS = "tenon.disruption.replacements"
INTERRUPTIONS = "tenon.interruption.*"
INTERRUPTION_MESSAGES = "tenon.interruption.message.*"
EC2 = "tenon.ec2.>"
EC2_FLEETS = "tenon.ec2.fleet.*"
EC2_INSTANCES = "tenon.ec2.instance.*"
CAPI = "tenon.capi.>"
CAPI_MACHINEDEPLOYMENTS = "tenon.capi.machinedeployment.*.*"
CAPI_MACHINES = "tenon.capi.machine.*.*"
DEADLETTERS = "tenon.deadletter.>"

EVENT_SUBJECTS: tuple[str, ...] = (
    "tenon.cluster.>",
    "tenon.catalog.>",
    "tenon.pending",
    "tenon.scheduling.>",
    "tenon.nodeclaim.>",
    "tenon.disruption.>",
    "tenon.interruption.>",
    "tenon.capi.>",
    "tenon.ec2.>",
)
"""The subjects the events stream captures (``tenon.deadletter.>`` is deliberately not among them)."""


def token(name: str) -> str:
    """A Kubernetes name as one subject token."""
    if not name:
        raise ValueError("an empty name cannot be a subject token")
    return name.replace(".", "_").replace("*", "_").replace(">", "_").replace(" ", "_")


def node(name: str) -> str:
    return f"tenon.cluster.node.{token(name)}"


def bound_pod(namespace: str, name: str) -> str:
    return f"tenon.cluster.pod.{token(namespace)}.{token(name)}"


def catalog(nodeclass: str) -> str:
    return f"tenon.catalog.{token(nodeclass)}"


NODECLAIM_STEPS: dict[str, str] = {
    "NodeClaimPlanned": "planned",
    "NodeClaimLaunched": "launched",
    "NodeClaimLaunchFailed": "launch-failed",
    "NodeClaimRegistered": "registered",
    "NodeClaimInitialized": "initialized",
    "NodeClaimAbandoned": "abandoned",
    "DisruptionRequested": "disruption-requested",
    "NodeClaimDrained": "drained",
    "NodeClaimTerminated": "terminated",
}
"""Event type -> the last token of its subject. One subject per step (not one per claim) so that broker
permissions can say who may write which step (the scheduler plans, a launcher launches, ...); the claim's
history is still one ordered story, read and appended to through the wildcard :func:`nodeclaim`."""


def nodeclaim(name: str) -> str:
    """The claim's whole history: every step's subject (what an append's expected sequence is checked on)."""
    return f"tenon.nodeclaim.{token(name)}.*"


def nodeclaim_step(name: str, event_type: str) -> str:
    """The subject one lifecycle event of the claim is written on."""
    try:
        step = NODECLAIM_STEPS[event_type]
    except KeyError:
        raise ValueError(f"{event_type} is not a NodeClaim lifecycle event") from None
    return f"tenon.nodeclaim.{token(name)}.{step}"


def capi_machinedeployment(namespace: str, name: str) -> str:
    """A Cluster API MachineDeployment's story as the CAPI launcher tells it: observed, scaled, observed..."""
    return f"tenon.capi.machinedeployment.{token(namespace)}.{token(name)}"


def capi_machine(namespace: str, name: str) -> str:
    """A Cluster API Machine's story as the CAPI launcher tells it: observed, bound, checked, removed."""
    return f"tenon.capi.machine.{token(namespace)}.{token(name)}"


def interruption(provider: str) -> str:
    return f"tenon.interruption.{token(provider)}"


def interruption_message(queue: str) -> str:
    """An SQS message as the interruption-handler received it (one subject per queue)."""
    return f"tenon.interruption.message.{token(queue)}"


def ec2_fleet(nodeclaim_name: str) -> str:
    """launcher-ec2's fleet requests for one claim and EC2's answers."""
    return f"tenon.ec2.fleet.{token(nodeclaim_name)}"


def ec2_instance(instance_id: str) -> str:
    """An EC2 instance's story as launcher-ec2 tells it: observed, checked, terminated, kept."""
    return f"tenon.ec2.instance.{token(instance_id)}"


def deadletter(stream: str, consumer: str) -> str:
    return f"tenon.deadletter.{token(stream)}.{token(consumer)}"


def matches(subject_filter: str, subject: str) -> bool:
    """NATS wildcard matching: ``*`` is one token, ``>`` (last) is one or more tokens."""
    filter_tokens = subject_filter.split(".")
    subject_tokens = subject.split(".")
    for index, wanted in enumerate(filter_tokens):
        if wanted == ">":
            return len(subject_tokens) > index
        if index >= len(subject_tokens):
            return False
        if wanted != "*" and wanted != subject_tokens[index]:
            return False
    return len(filter_tokens) == len(subject_tokens)
