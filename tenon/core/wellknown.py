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
REGION = "topology.kubernetes.io/region"
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

# --- Karpenter's AWS provider (karpenter.k8s.aws/v1): EC2NodeClass, node labels, instance tags -------------
AWS_GROUP = "karpenter.k8s.aws"
"""The API group of ``EC2NodeClass`` and the prefix of the AWS provider's labels."""
AWS_NODECLASS_KIND = "EC2NodeClass"
AWS_INSTANCE_CATEGORY = "karpenter.k8s.aws/instance-category"
AWS_INSTANCE_FAMILY = "karpenter.k8s.aws/instance-family"
AWS_INSTANCE_GENERATION = "karpenter.k8s.aws/instance-generation"
AWS_INSTANCE_SIZE = "karpenter.k8s.aws/instance-size"
AWS_INSTANCE_CPU = "karpenter.k8s.aws/instance-cpu"
AWS_INSTANCE_CPU_MANUFACTURER = "karpenter.k8s.aws/instance-cpu-manufacturer"
AWS_INSTANCE_MEMORY = "karpenter.k8s.aws/instance-memory"
AWS_INSTANCE_HYPERVISOR = "karpenter.k8s.aws/instance-hypervisor"
AWS_INSTANCE_GPU_COUNT = "karpenter.k8s.aws/instance-gpu-count"
AWS_INSTANCE_GPU_NAME = "karpenter.k8s.aws/instance-gpu-name"
AWS_INSTANCE_GPU_MANUFACTURER = "karpenter.k8s.aws/instance-gpu-manufacturer"
AWS_INSTANCE_GPU_MEMORY = "karpenter.k8s.aws/instance-gpu-memory"
AWS_INSTANCE_LOCAL_NVME = "karpenter.k8s.aws/instance-local-nvme"
AWS_INSTANCE_ENCRYPTION_IN_TRANSIT = "karpenter.k8s.aws/instance-encryption-in-transit-supported"
AWS_INSTANCE_EBS_BANDWIDTH = "karpenter.k8s.aws/instance-ebs-bandwidth"
AWS_INSTANCE_NETWORK_BANDWIDTH = "karpenter.k8s.aws/instance-network-bandwidth"
AWS_EC2NODECLASS = "karpenter.k8s.aws/ec2nodeclass"
"""Label on a node, and tag on its instance: the EC2NodeClass it was launched from."""
AWS_NODECLAIM_TAG = "karpenter.sh/nodeclaim"
"""Tag on an instance (and its volumes and fleet): the NodeClaim it was launched for (tenon's ownership mark
on EC2, as Karpenter's)."""
AWS_MANAGED_BY_TAG = "karpenter.sh/managed-by"
AWS_CLUSTER_TAG_PREFIX = "kubernetes.io/cluster/"
"""``kubernetes.io/cluster/<cluster>=owned``: the instance belongs to that cluster."""
AWS_EKS_CLUSTER_TAG = "eks:eks-cluster-name"
AWS_NAME_TAG = "Name"
AWS_DISCOVERY_TAG = "karpenter.sh/discovery"
"""``karpenter.sh/discovery=<cluster>`` on subnets and security groups, as Karpenter's getting-started guide
tags them (the demo EC2NodeClass selects them by it)."""

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
PLANNED_NODE = "tenon.sh/planned-node"
"""On a pending pod: the Node it was planned for and nominated to, whose room the plan gives it first while
it still fits there (the scheduler sets it in its own input on a pod offered again; never written to the
cluster)."""
SCALED_UP_FOR = "tenon.sh/scaled-up-for"
"""On a MachineDeployment: the claims a replica was added for and whose Machine is not bound yet."""
SCALED_DOWN_FOR = "tenon.sh/scaled-down-for"
"""On a MachineDeployment: the Machines a replica was removed for and that are not gone yet."""
CATALOG_NOTES = "tenon.sh/catalog-notes"
"""On an InstanceCatalog tenon built: how it was built and what it left out (one line)."""
REPLACE_ON_REBALANCE = "tenon.sh/replace-on-rebalance"
"""NodePool annotation: ``"true"`` replaces its nodes on an EC2 rebalance recommendation (by default one is
only recorded: they come far more often than interruptions, and acting on each churns nodes)."""
