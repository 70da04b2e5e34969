"""Every well-known Kubernetes name tenon reads or writes: labels, annotations, taints, finalizers.

One module, so a name is spelled once and a reader can see at a glance which of them are Karpenter's
public API (a Karpenter user's manifests and tools rely on them), which are Kubernetes' or Cluster API's own,
and which are tenon's (``tenon.sh/``). It lives in the core because the core reads node labels too;
everything above imports it from here.
"""

from __future__ import annotations

# --- Kubernetes ---------------------------------------------------------------------------------------------
HOSTNAME = "kubernetes.io/hostname"
ARCH = "kubernetes.io/arch"
OS = "kubernetes.io/os"
ZONE = "topology.kubernetes.io/zone"
INSTANCE_TYPE = "node.kubernetes.io/instance-type"
NOT_READY_TAINT = "node.kubernetes.io/not-ready"
UNREACHABLE_TAINT = "node.kubernetes.io/unreachable"
CLOUD_UNINITIALIZED_TAINT = "node.cloudprovider.kubernetes.io/uninitialized"
DEFAULT_STORAGE_CLASS = "storageclass.kubernetes.io/is-default-class"
ATTACHABLE_VOLUMES = "attachable-volumes-csi-"
"""Prefix of the resource that counts a node's volume attachments for one CSI driver
(``attachable-volumes-csi-ebs.csi.aws.com``): an instance type (or Node) that lists it has that many."""

# --- Karpenter (karpenter.sh/v1): labels, annotations, taints, finalizer ------------------------------------
NODEPOOL = "karpenter.sh/nodepool"
CAPACITY_TYPE = "karpenter.sh/capacity-type"
REGISTERED = "karpenter.sh/registered"
INITIALIZED = "karpenter.sh/initialized"
DO_NOT_DISRUPT = "karpenter.sh/do-not-disrupt"
UNREGISTERED_TAINT = "karpenter.sh/unregistered"
"""The taint a new node boots with, so nothing lands on it before tenon has made it its NodePool's."""
DISRUPTED_TAINT = "karpenter.sh/disrupted"
"""NoSchedule taint on a node being disrupted: nothing new lands there while it drains."""
TERMINATION_FINALIZER = "karpenter.sh/termination"
"""Holds a NodeClaim or Node deleted by a user until tenon has drained it gracefully."""
EPHEMERAL_TAINTS = (
    (NOT_READY_TAINT, "NoSchedule"),
    (NOT_READY_TAINT, "NoExecute"),
    (UNREACHABLE_TAINT, "NoSchedule"),
    (CLOUD_UNINITIALIZED_TAINT, "NoSchedule"),
    (UNREGISTERED_TAINT, "NoExecute"),
)
"""(key, effect) of the taints a node boots with and sheds by itself (Karpenter's ``KnownEphemeralTaints``):
a node of a NodePool not yet ``karpenter.sh/initialized`` is judged without them, and without its NodePool's
startup taints, so pods wait for it rather than buy another."""
EPHEMERAL_TAINT_PREFIXES = ("readiness.k8s.io/",)
"""Key prefixes of ephemeral taint families (the Node Readiness Controller's ``readiness.k8s.io/<rule>``)."""

# --- Cluster API --------------------------------------------------------------------------------------------
DELETE_MACHINE = "cluster.x-k8s.io/delete-machine"
"""Annotation that makes Cluster API remove exactly this Machine when its MachineDeployment shrinks."""
DEPLOYMENT_NAME = "cluster.x-k8s.io/deployment-name"
PAUSED = "cluster.x-k8s.io/paused"
MAX_SIZE = "cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size"
"""cluster-autoscaler's annotation for a node group's upper bound; tenon honours it the same way."""
CAPACITY_PREFIX = "capacity.cluster-autoscaler.kubernetes.io/"
"""cluster-autoscaler's scale-from-zero capacity annotations (``cpu``, ``memory``, ``ephemeral-disk``...)."""
KARPENTER_MEMBER = "node.cluster.x-k8s.io/karpenter-member"
"""Label marking a MachineDeployment as part of Karpenter's (and tenon's) Cluster API node groups."""

# --- tenon --------------------------------------------------------------------------------------------------
PRICE_PER_HOUR = "tenon.sh/price-per-hour"
FLAVOR = "tenon.sh/flavor"
NODECLAIM = "tenon.sh/nodeclaim"
"""On a Machine: the NodeClaim it was bound to (tenon's ownership mark)."""
BATCH = "tenon.sh/batch"
NOMINATED_PODS = "tenon.sh/nominated-pods"
SCALED_UP_FOR = "tenon.sh/scaled-up-for"
"""On a MachineDeployment: the claims a replica was added for and whose Machine is not bound yet."""
SCALED_DOWN_FOR = "tenon.sh/scaled-down-for"
"""On a MachineDeployment: the Machines a replica was removed for and that are not gone yet."""
