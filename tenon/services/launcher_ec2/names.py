"""Names of Karpenter's AWS provider that launcher-ec2 reads or writes: EC2 tag keys, node labels, the
EC2NodeClass API.

They are Karpenter's public API (a Karpenter user's tooling keys on them: the tags on instances, the labels on
nodes), spelled once in :mod:`tenon.core.wellknown` (``AWS_*``); this module gives them the launcher's short
names and adds what is not a Kubernetes name (the provider's scheme, the EC2NodeClass condition types).
"""

from __future__ import annotations

from tenon.core import wellknown as wk

GROUP = wk.AWS_GROUP
NODECLASS_KIND = wk.AWS_NODECLASS_KIND
PROVIDER = "aws"
"""``CatalogSnapshot.provider`` of the EC2 catalogs, and the scheme of their providerIDs (``aws:///zone/id``)."""

# --- tags on instances (and volumes, fleets, launch templates) -------------------------------------------
TAG_NODEPOOL = wk.NODEPOOL
TAG_NODECLAIM = wk.AWS_NODECLAIM_TAG
TAG_NODECLASS = wk.AWS_EC2NODECLASS
TAG_CLUSTER_PREFIX = wk.AWS_CLUSTER_TAG_PREFIX
TAG_EKS_CLUSTER = wk.AWS_EKS_CLUSTER_TAG
TAG_MANAGED_BY = wk.AWS_MANAGED_BY_TAG
TAG_NAME = wk.AWS_NAME_TAG

# --- labels a node of an EC2 instance type carries (Karpenter's well-known labels) ----------------------
LABEL_CATEGORY = wk.AWS_INSTANCE_CATEGORY
LABEL_FAMILY = wk.AWS_INSTANCE_FAMILY
LABEL_GENERATION = wk.AWS_INSTANCE_GENERATION
LABEL_SIZE = wk.AWS_INSTANCE_SIZE
LABEL_CPU = wk.AWS_INSTANCE_CPU
LABEL_CPU_MANUFACTURER = wk.AWS_INSTANCE_CPU_MANUFACTURER
LABEL_MEMORY = wk.AWS_INSTANCE_MEMORY
LABEL_HYPERVISOR = wk.AWS_INSTANCE_HYPERVISOR
LABEL_GPU_COUNT = wk.AWS_INSTANCE_GPU_COUNT
LABEL_GPU_NAME = wk.AWS_INSTANCE_GPU_NAME
LABEL_GPU_MANUFACTURER = wk.AWS_INSTANCE_GPU_MANUFACTURER
LABEL_GPU_MEMORY = wk.AWS_INSTANCE_GPU_MEMORY
LABEL_LOCAL_NVME = wk.AWS_INSTANCE_LOCAL_NVME
LABEL_ENCRYPTION_IN_TRANSIT = wk.AWS_INSTANCE_ENCRYPTION_IN_TRANSIT
LABEL_EBS_BANDWIDTH = wk.AWS_INSTANCE_EBS_BANDWIDTH
LABEL_NETWORK_BANDWIDTH = wk.AWS_INSTANCE_NETWORK_BANDWIDTH
LABEL_NODECLASS = wk.AWS_EC2NODECLASS

# --- EC2NodeClass status condition types (Karpenter's) -------------------------------------------------
SUBNETS_READY = "SubnetsReady"
SECURITY_GROUPS_READY = "SecurityGroupsReady"
AMIS_READY = "AMIsReady"
INSTANCE_PROFILE_READY = "InstanceProfileReady"
VALIDATION_SUCCEEDED = "ValidationSucceeded"
READY = "Ready"
