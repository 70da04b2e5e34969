"""Event contracts: every fact tenon's services tell each other, as immutable msgspec Structs.

Design
------
The event log is the only thing services share, so these types are the system's public API. Three rules make
the log something a person can audit and a program can replay:

* **Every event is self-describing.** The JSON carries ``type`` (the tag of the tagged union, equal to the
  class
  name) and ``schema`` (a per-type version, a ``Literal`` so that a version this build does not know fails to
  decode and is dead-lettered instead of being half-understood).
* **Every event can be followed.** ``id`` is unique and deterministic (see :mod:`proto.ids`), ``decidedAt`` is
  when the producer decided, ``producer`` names the service, ``causationId`` is the id of the event this one
  answers (``None`` for observations of the outside world) and ``correlationId`` is carried unchanged along a
  chain (the PendingBatch id, the NodeClaim name) so ``tenon tap`` and ``tenon explain`` can pull a whole
  story.
* **Inputs are recorded whole.** Observations carry the Kubernetes object as the producer saw it (minus
  ``managedFields``), so a decision can be recomputed offline from the log alone.

Field names are snake_case in Python and camelCase on the wire, like the Kubernetes objects they sit beside.
Evolving a type: add optional fields freely; anything that changes meaning bumps ``schema`` to a new Literal
(``Literal[1, 2]``) and the consumer handles both.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, ClassVar, Literal

import msgspec

KubeObject = dict[str, Any]
"""A Kubernetes object as JSON (``apiVersion``, ``kind``, ``metadata``, ...)."""

ObservedChange = Literal["added", "changed", "removed"]


class Event(msgspec.Struct, frozen=True, kw_only=True, tag_field="type", rename="camel"):
    """Envelope fields shared by every event."""

    id: str
    decided_at: datetime
    producer: str
    causation_id: str | None = None
    correlation_id: str | None = None
    basis: int | None = None
    """For a decision taken on a clock tick rather than in answer to an event (``causation_id`` is then
    ``None``): the log sequence the deciding state covered, so a replay decides it from the same state."""

    subject_hint: ClassVar[str] = ""
    """The subject family the event is published on (documentation; see :mod:`proto.subjects`)."""


# --- observations of the cluster (written by pod-watcher, launchers) ---------------------------------------


class PendingArrival(msgspec.Struct, frozen=True, rename="camel"):
    """When a pod joined a batching window, and when it left if it stopped being pending before the close."""

    uid: str
    joined_at: datetime
    left_at: datetime | None = None


class PendingBatch(Event, frozen=True, kw_only=True, tag=True):
    """Pods the kube-scheduler could not place, collected over one batching window.

    The pods carry what scheduling reads (requests, affinity, tolerations, ...), never env values, commands or
    other annotations. The optional fields record what the batching decision read, so that ``tenon replay
    pod-watcher`` can decide it again: when each pod joined (and left) the window, the window's settings, the
    message size the window was split by, and this part's place among the window's parts (``decidedAt`` is
    when the window closed)."""

    schema: Literal[1] = 1
    batch_id: str
    pods: tuple[KubeObject, ...]
    window_opened_at: datetime
    window_closed_by: Literal["idle", "max-duration", "shutdown"]
    window_idle_seconds: float | None = None
    window_max_seconds: float | None = None
    window_part: int = 1
    window_parts: int = 1
    max_message_bytes: int | None = None
    arrivals: tuple[PendingArrival, ...] = ()
    """The joins of this part's pods; joins of pods that left the window go in any part with room."""
    too_large: tuple[str, ...] = ()
    """Uids of pods of the window left out because no message could hold them."""


class NodeObserved(Event, frozen=True, kw_only=True, tag=True):
    """A Node was added, changed in a way scheduling cares about, or removed."""

    schema: Literal[1] = 1
    change: ObservedChange
    node: KubeObject


class BoundPodObserved(Event, frozen=True, kw_only=True, tag=True):
    """A pod bound to a node (``spec.nodeName`` set) was added, changed or removed."""

    schema: Literal[1] = 1
    change: ObservedChange
    pod: KubeObject


class NodePoolsSnapshot(Event, frozen=True, kw_only=True, tag=True):
    """Every NodePool as it is now; the latest snapshot replaces all earlier ones."""

    schema: Literal[1] = 1
    nodepools: tuple[KubeObject, ...]


class NodeClassesSnapshot(Event, frozen=True, kw_only=True, tag=True):
    """Every NodeClass (ClusterAPINodeClass, EC2NodeClass) as it is now."""

    schema: Literal[1] = 1
    nodeclasses: tuple[KubeObject, ...]


class DaemonSetsSnapshot(Event, frozen=True, kw_only=True, tag=True):
    """Every DaemonSet as it is now: their pods land on every new node, so their requests count against it."""

    schema: Literal[1] = 1
    daemonsets: tuple[KubeObject, ...]


class PodDisruptionBudgetsSnapshot(Event, frozen=True, kw_only=True, tag=True):
    """Every PodDisruptionBudget as it is now (selector, minAvailable / maxUnavailable, and the status that
    says how many disruptions it allows): disruption chooses candidates whose moves the budgets allow."""

    schema: Literal[1] = 1
    pdbs: tuple[KubeObject, ...]


class SkippedSource(msgspec.Struct, frozen=True, rename="camel"):
    """An object a catalog could not use, and why (e.g. a MachineDeployment with a bad annotation)."""

    kind: str
    name: str
    reason: str
    namespace: str | None = None


class CatalogSnapshot(Event, frozen=True, kw_only=True, tag=True):
    """The instance types a NodeClass offers, with prices, as a launcher reads them from its provider.

    ``instance_types`` use the InstanceCatalog format (``spec.instanceTypes`` entries: name, capacity,
    overhead, labels, offerings). ``sources`` keeps the provider objects they were derived from
    (MachineDeployments on Cluster API) so a replay can re-derive them.
    """

    schema: Literal[1] = 1
    provider: Literal["cluster-api", "aws", "static"]
    node_class: str
    instance_types: tuple[KubeObject, ...]
    sources: tuple[KubeObject, ...] = ()
    skipped: tuple[SkippedSource, ...] = ()
    notes: tuple[str, ...] = ()


# --- the NodeClaim lifecycle (subject per claim: tenon.nodeclaim.<name>) ------------------------------------


class NodeClaimEvent(Event, frozen=True, kw_only=True):
    """An event on one NodeClaim's aggregate subject."""

    nodeclaim: str


class InstanceChoice(msgspec.Struct, frozen=True, rename="camel"):
    """One instance type a claim may be launched as, cheapest first."""

    instance_type: str
    zone: str | None
    capacity_type: str
    price_per_hour: float
    price_estimated: bool = False


class NodeClaimPlanned(NodeClaimEvent, frozen=True, kw_only=True, tag=True):
    """The scheduler decided to buy a machine for these pods."""

    schema: Literal[1] = 1
    nodepool: str
    node_class: str
    choice: InstanceChoice
    fallbacks: tuple[InstanceChoice, ...]
    pods: tuple[str, ...]
    requirements: tuple[KubeObject, ...]
    labels: dict[str, str]
    taints: tuple[KubeObject, ...] = ()
    startup_taints: tuple[KubeObject, ...] = ()
    batch_id: str | None = None
    explanation: KubeObject = msgspec.field(default_factory=dict)


class NodeClaimLaunched(NodeClaimEvent, frozen=True, kw_only=True, tag=True):
    """The provider created the machine; ``provider_id`` is how its Node will be recognised."""

    schema: Literal[1] = 1
    provider_id: str
    instance_type: str
    zone: str | None = None
    capacity_type: str | None = None
    machine: str | None = None
    """Provider-side name (the Cluster API Machine, the EC2 instance id)."""


class NodeClaimLaunchFailed(NodeClaimEvent, frozen=True, kw_only=True, tag=True):
    """The provider could not create this instance type; ``retryable`` says whether a fallback may follow."""

    schema: Literal[1] = 1
    instance_type: str
    reason: str
    retryable: bool = True


class NodeClaimRegistered(NodeClaimEvent, frozen=True, kw_only=True, tag=True):
    """A Node with the claim's providerID joined; labels and taints were synced."""

    schema: Literal[1] = 1
    node: str
    provider_id: str


class NodeClaimInitialized(NodeClaimEvent, frozen=True, kw_only=True, tag=True):
    """The Node is Ready and its startup taints are gone: pods may land."""

    schema: Literal[1] = 1
    node: str


class NodeClaimAbandoned(NodeClaimEvent, frozen=True, kw_only=True, tag=True):
    """A claim that did not launch or register in time; its machine is removed and its pods rescheduled."""

    schema: Literal[1] = 1
    reason: str
    pods: tuple[str, ...] = ()


class DisruptionRequested(NodeClaimEvent, frozen=True, kw_only=True, tag=True):
    """Termination of this claim's node begins (by a disruption method or a user's delete)."""

    schema: Literal[1] = 1
    method: str
    reason: str
    node: str | None = None
    decision_id: str | None = None


class NodeClaimDrained(NodeClaimEvent, frozen=True, kw_only=True, tag=True):
    """Every evictable pod left the node (or the termination grace period ran out)."""

    schema: Literal[1] = 1
    node: str | None
    evicted: tuple[str, ...] = ()
    grace_period_expired: bool = False


class NodeClaimTerminated(NodeClaimEvent, frozen=True, kw_only=True, tag=True):
    """The machine is gone and the Node deleted; the claim's life is over."""

    schema: Literal[1] = 1
    reason: str
    machine: str | None = None


class PodPlacement(msgspec.Struct, frozen=True, rename="camel"):
    pod: str
    node: str
    kind: Literal["Node", "NodeClaim"] = "Node"


class UnschedulablePod(msgspec.Struct, frozen=True, rename="camel"):
    pod: str
    reason: str
    reasons: dict[str, str] = msgspec.field(default_factory=dict)
    """NodePool -> why it could not take the pod."""


class BatchPlanned(Event, frozen=True, kw_only=True, tag=True):
    """The scheduler's answer to one PendingBatch as a whole: the claims it planned (each its own
    ``NodeClaimPlanned``), the pods that fit where room already is, and the pods that cannot run, with the
    reason per NodePool. ``tenon explain --pod`` starts here."""

    schema: Literal[1] = 1
    batch_id: str
    nodeclaims: tuple[str, ...]
    existing: tuple[PodPlacement, ...] = ()
    unschedulable: tuple[UnschedulablePod, ...] = ()
    total_price_per_hour: float = 0.0
    skipped: tuple[str, ...] = ()


# --- disruption and interruption ----------------------------------------------------------------------------


class InterruptionNotice(Event, frozen=True, kw_only=True, tag=True):
    """A provider says a machine will go away (spot interruption, rebalance, scheduled maintenance)."""

    schema: Literal[1] = 1
    provider_id: str
    kind: Literal["spot-interruption", "rebalance-recommendation", "scheduled-change", "state-change"]
    deadline: datetime | None = None
    detail: KubeObject = msgspec.field(default_factory=dict)


class DisruptionCandidate(msgspec.Struct, frozen=True, rename="camel"):
    nodeclaim: str
    node: str | None
    nodepool: str
    reason: str


class BlockedCandidate(msgspec.Struct, frozen=True, rename="camel"):
    nodeclaim: str
    node: str | None
    blocked_by: str


class ReplacementClaim(msgspec.Struct, frozen=True, rename="camel"):
    """A node a disruption command launches (and waits to be Initialized) before its candidates are drained:
    the claim exactly as the scheduler is to plan it (its ``NodeClaimPlanned`` copies these fields)."""

    nodeclaim: str
    nodepool: str
    node_class: str
    choice: InstanceChoice
    fallbacks: tuple[InstanceChoice, ...] = ()
    pods: tuple[str, ...] = ()
    """The candidates' pods it is for (they are bound elsewhere until the drain: nothing is held for them)."""
    requirements: tuple[KubeObject, ...] = ()
    labels: dict[str, str] = msgspec.field(default_factory=dict)
    taints: tuple[KubeObject, ...] = ()
    startup_taints: tuple[KubeObject, ...] = ()
    requests: dict[str, str] = msgspec.field(default_factory=dict)


class DisruptionDecision(Event, frozen=True, kw_only=True, tag=True):
    """The disruption service chose nodes to remove or replace, and says why and under which budget.

    A command goes through stages, each its own decision: ``proposed`` (consolidation and emptiness: judged
    again after a settle period before anything is done), ``confirmed`` (its candidates are tainted; its
    replacements are requested, and its candidates' termination is requested once they are Initialized, or
    at once when it has none) or ``abandoned`` (the judgement changed, or a replacement failed: candidates
    untainted). ``command`` names the proposal a later stage continues."""

    schema: Literal[1] = 1
    method: Literal["emptiness", "consolidation", "drift", "expiration", "interruption"]
    candidates: tuple[DisruptionCandidate, ...]
    reason: str
    budget: str
    blocked: tuple[BlockedCandidate, ...] = ()
    replacements: tuple[str, ...] = ()
    stage: Literal["proposed", "confirmed", "abandoned"] = "confirmed"
    command: str | None = None
    replacement_claims: tuple[ReplacementClaim, ...] = ()
    savings_per_hour: float = 0.0
    pods_moved: tuple[str, ...] = ()
    settles_until: datetime | None = None
    """For a proposal: when it is judged again (the settle period it was proposed with, recorded so that a
    replay judges it at the same moment whatever its own settings)."""


class ReplacementsRequested(Event, frozen=True, kw_only=True, tag=True):
    """Disruption asks the scheduler to plan exactly these claims for a confirmed command (``command``: its
    decision id). The scheduler answers with one ``NodeClaimPlanned`` per replacement not yet planned
    (``causationId`` this event, the claim name and fields as given); disruption drains the candidates once
    every replacement is Initialized, and abandons the command if one ends before."""

    schema: Literal[1] = 1
    command: str
    candidates: tuple[str, ...]
    replacements: tuple[ReplacementClaim, ...]
    reason: str


# --- Cluster API, as the Cluster API launcher sees it and acts on it (tenon.capi.*) -----------------------


class MachineDeploymentObserved(Event, frozen=True, kw_only=True, tag=True):
    """A karpenter-member MachineDeployment was added, changed in what the launcher decides on, or removed.

    ``machine_deployment`` is the object trimmed to those fields: name, namespace, uid, resourceVersion,
    ``spec.replicas``, ``spec.paused``, and the max-size, paused and ``tenon.sh/scaled-up-for`` /
    ``scaled-down-for`` annotations. A change to anything else (status, templates) is not an observation."""

    schema: Literal[1] = 1
    change: ObservedChange
    machine_deployment: KubeObject
    after: str | None = None
    """The launcher's own action on this object (its event id) after which this observation was published:
    what the launcher knew of the object beyond the action's own record (the launcher's decider sets aside
    observations of an object stored before its last action on it)."""


class MachineObserved(Event, frozen=True, kw_only=True, tag=True):
    """A Machine of a member MachineDeployment (or one carrying tenon's ownership mark) was added, changed in
    what the launcher decides on, or removed. ``machine`` is trimmed to: name, namespace, uid,
    resourceVersion, creation and deletion timestamps, the deployment-name and nodepool labels, the
    ``tenon.sh/nodeclaim`` and ``cluster.x-k8s.io/delete-machine`` annotations and ``spec.providerID``."""

    schema: Literal[1] = 1
    change: ObservedChange
    machine: KubeObject
    after: str | None = None
    """As ``MachineDeploymentObserved.after``."""


class MachineLeakChecked(Event, frozen=True, kw_only=True, tag=True):
    """The launcher looked for the NodeClaim of a Machine bound to a claim it does not know (past the grace).

    This is the evidence a removal needs, recorded so that the verdict (``MachineRemovalDecided`` or
    ``MachineKept``) can be replayed: whether a NodeClaim object of that name exists in the workload cluster,
    and whether the event log still reaches back past the Machine's creation minus the launch timeout (if it
    does not, the claim may simply have aged out of it)."""

    schema: Literal[1] = 1
    namespace: str
    machine: str
    machine_deployment: str | None = None
    nodeclaim: str
    machine_created: datetime | None = None
    bound_since: datetime
    leak_grace: float
    """Seconds the Machine had to stay bound to the unknown claim before this check (a launcher setting)."""
    nodeclaim_object: Literal["absent", "present", "unknown"]
    """Whether a NodeClaim object of that name is in the workload cluster (unknown: it could not be read)."""
    log_first_sequence: int
    log_starts_at: datetime | None = None
    log_needed_since: datetime | None = None
    """The moment the log must reach back to: the Machine's creation minus the launch timeout."""
    log_reaches_back: bool
    detail: str = ""


class MachineDeploymentScaled(Event, frozen=True, kw_only=True, tag=True):
    """The launcher set a MachineDeployment's replicas and its records of why (``tenon.sh/scaled-up-for``:
    claims a replica was added for and whose Machine is not bound yet; ``scaled-down-for``: Machines a replica
    was removed for), in one patch, preconditioned on what it decided from (``resource_version`` names that
    version; the patch holds its spec and annotations)."""

    schema: Literal[1] = 1
    namespace: str
    machine_deployment: str
    resource_version: str
    replicas_from: int
    replicas_to: int
    scaled_up_for: tuple[str, ...] = ()
    scaled_down_for: tuple[str, ...] = ()
    reason: str


class MachineBound(Event, frozen=True, kw_only=True, tag=True):
    """The launcher bound a Machine its MachineDeployment created for a claim to that claim (annotation
    ``tenon.sh/nodeclaim``, label ``karpenter.sh/nodepool``)."""

    schema: Literal[1] = 1
    namespace: str
    machine: str
    machine_deployment: str | None = None
    nodeclaim: str
    nodepool: str


class MachineRemovalDecided(Event, frozen=True, kw_only=True, tag=True):
    """The launcher marked a Machine ``cluster.x-k8s.io/delete-machine`` (its replica goes next), on positive
    evidence only: its claim ended, drained or failed for good with a complete history, or (a leak) no claim
    of that name exists anywhere and the log reaches back past the Machine. ``evidence`` lists the facts."""

    schema: Literal[1] = 1
    namespace: str
    machine: str
    machine_deployment: str | None = None
    nodeclaim: str
    reason: str
    evidence: tuple[str, ...] = ()


class MachineKept(Event, frozen=True, kw_only=True, tag=True):
    """The launcher kept a Machine it could not prove unwanted, and says why (once per Machine and reason).
    ``code`` names the rule: ``incomplete-history``, ``nodeclaim-object-exists``,
    ``nodeclaim-objects-unreadable``, ``log-too-short``."""

    schema: Literal[1] = 1
    namespace: str
    machine: str
    machine_deployment: str | None = None
    nodeclaim: str
    code: str
    reason: str


# --- EC2, as launcher-ec2 sees it and acts on it (tenon.ec2.*) ----------------------------------------------


class Ec2Override(msgspec.Struct, frozen=True, rename="camel"):
    """One (instance type, zone) a fleet may launch, with the subnet and image it launches from."""

    instance_type: str
    zone: str
    subnet_id: str
    image_id: str
    price_per_hour: float
    choice: int
    """The index of the claim's choice this override stands for (0: the choice, 1: the first fallback...)."""


class Ec2FleetRequested(Event, frozen=True, kw_only=True, tag=True):
    """launcher-ec2 asked EC2 for one instance for a claim: one CreateFleet (type instant) over ``overrides``
    (the claim's choices from its current one, of one capacity type, x the zones of the NodeClass's subnets),
    after looking for an instance already tagged with the claim (so a retry after a crash never launches two).
    ``client_token`` is derived from the claim and the attempt (AWS's own idempotency)."""

    schema: Literal[1] = 1
    nodeclaim: str
    node_class: str
    nodepool: str
    capacity_type: str
    allocation_strategy: str
    overrides: tuple[Ec2Override, ...]
    launch_template: str
    client_token: str
    attempt: int
    """How many launch failures the claim had when this was requested."""
    tags: dict[str, str] = msgspec.field(default_factory=dict)


class Ec2FleetError(msgspec.Struct, frozen=True, rename="camel"):
    """An override EC2 refused (``InsufficientInstanceCapacity``, ``MaxSpotInstanceCountExceeded``, ...)."""

    instance_type: str
    zone: str | None
    code: str
    message: str = ""


class Ec2FleetAnswered(Event, frozen=True, kw_only=True, tag=True):
    """What EC2 answered a ``Ec2FleetRequested`` (``after`` names it): the instance launched (or found already
    tagged with the claim), the overrides refused, or the error of the call itself."""

    schema: Literal[1] = 1
    nodeclaim: str
    after: str
    instance_id: str | None = None
    instance_type: str | None = None
    zone: str | None = None
    capacity_type: str | None = None
    found_by_tag: bool = False
    errors: tuple[Ec2FleetError, ...] = ()
    error_code: str | None = None
    error_message: str = ""


class Ec2InstanceObserved(Event, frozen=True, kw_only=True, tag=True):
    """An instance tagged for this cluster by tenon was added, changed state, or is gone. ``instance`` is
    trimmed to: ``instanceId``, ``instanceType``, ``zone``, ``state``, ``lifecycle`` (spot or on-demand),
    ``launchTime``, ``privateDnsName`` and the tags tenon reads (nodeclaim, nodepool, nodeclass, cluster)."""

    schema: Literal[1] = 1
    change: ObservedChange
    instance: KubeObject
    after: str | None = None
    """As ``MachineObserved.after``: the launcher's own action this observation was published after."""


class Ec2InstanceLeakChecked(Event, frozen=True, kw_only=True, tag=True):
    """The evidence about an instance tagged with a claim launcher-ec2 does not know, past the leak grace:
    whether a NodeClaim object of that name exists, whether the log reaches back past the instance's launch
    minus the launch timeout. As ``MachineLeakChecked``."""

    schema: Literal[1] = 1
    instance_id: str
    nodeclaim: str
    launched_at: datetime | None = None
    leak_grace: float
    nodeclaim_object: Literal["absent", "present", "unknown"]
    log_first_sequence: int
    log_starts_at: datetime | None = None
    log_needed_since: datetime | None = None
    log_reaches_back: bool
    detail: str = ""


class Ec2InstanceTerminationDecided(Event, frozen=True, kw_only=True, tag=True):
    """launcher-ec2 terminated an instance (TerminateInstances), on positive evidence only (``evidence``)."""

    schema: Literal[1] = 1
    instance_id: str
    nodeclaim: str
    reason: str
    evidence: tuple[str, ...] = ()


class Ec2InstanceKept(Event, frozen=True, kw_only=True, tag=True):
    """launcher-ec2 kept an instance it could not prove unwanted, and says why (once per instance and reason);
    ``code`` as ``MachineKept``."""

    schema: Literal[1] = 1
    instance_id: str
    nodeclaim: str
    code: str
    reason: str


class InterruptionMessageReceived(Event, frozen=True, kw_only=True, tag=True):
    """A message the interruption-handler received from its SQS queue, as it was (so the notice it becomes,
    or the dead letter, replays from the log). Deleted from the queue once what it decided is in the log."""

    schema: Literal[1] = 1
    queue: str
    message_id: str
    body: str
    sent_at: datetime | None = None
    receive_count: int = 1


# --- faults -------------------------------------------------------------------------------------------------


class DeadLetter(Event, frozen=True, kw_only=True, tag=True):
    """A message a consumer could not handle; it was acked so the consumer could go on, and kept here.

    ``data`` holds the original payload: UTF-8 text when it decodes as such, else base64 (``data_encoding``).
    """

    schema: Literal[1] = 1
    stream: str
    consumer: str
    original_subject: str
    original_sequence: int
    delivery_count: int
    error: str
    headers: dict[str, str]
    data: str
    data_encoding: Literal["utf-8", "base64"] = "utf-8"


AnyEvent = (
    PendingBatch
    | NodeObserved
    | BoundPodObserved
    | NodePoolsSnapshot
    | NodeClassesSnapshot
    | DaemonSetsSnapshot
    | PodDisruptionBudgetsSnapshot
    | CatalogSnapshot
    | BatchPlanned
    | NodeClaimPlanned
    | NodeClaimLaunched
    | NodeClaimLaunchFailed
    | NodeClaimRegistered
    | NodeClaimInitialized
    | NodeClaimAbandoned
    | DisruptionRequested
    | NodeClaimDrained
    | NodeClaimTerminated
    | InterruptionNotice
    | DisruptionDecision
    | ReplacementsRequested
    | DeadLetter
    | MachineDeploymentObserved
    | MachineObserved
    | MachineLeakChecked
    | MachineDeploymentScaled
    | MachineBound
    | MachineRemovalDecided
    | MachineKept
    | Ec2FleetRequested
    | Ec2FleetAnswered
    | Ec2InstanceObserved
    | Ec2InstanceLeakChecked
    | Ec2InstanceTerminationDecided
    | Ec2InstanceKept
    | InterruptionMessageReceived
)
"""The tagged union every consumer decodes."""

EVENT_TYPES: tuple[type[Event], ...] = AnyEvent.__args__  # type: ignore[attr-defined]
EVENT_TYPES_BY_NAME: dict[str, type[Event]] = {t.__name__: t for t in EVENT_TYPES}
