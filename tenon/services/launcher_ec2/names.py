"""Names of Karpenter's AWS provider that launcher-ec2 reads or writes: EC2 tag keys, node labels, the
EC2NodeClass API.

They are Karpenter's public API (a Karpenter user's tooling keys on them: the tags on instances, the labels on
nodes). The Kubernetes and ``karpenter.sh`` names come from :mod:`tenon.core.wellknown`; the AWS provider's
own (``karpenter.k8s.aws/*``) are spelled here, once, for the EC2 launcher alone.
"""

from __future__ import annotations

from tenon.core.wellknown import NODEPOOL

GROUP = "karpenter.k8s.aws"
NODECLASS_KIND = "EC2NodeClass"
PROVIDER = "aws"
"""``CatalogSnapshot.provider`` of the EC2 catalogs, and the scheme of their providerIDs (``aws:///zone/id``)."""

# --- tags on instances (and volumes, fleets, launch templates) -------------------------------------------
TAG_NODEPOOL = NODEPOOL
TAG_NODECLAIM = "karpenter.sh/nodeclaim"
TAG_NODECLASS = "karpenter.k8s.aws/ec2nodeclass"
TAG_CLUSTER_PREFIX = "kubernetes.io/cluster/"
TAG_EKS_CLUSTER = "eks:eks-cluster-name"
TAG_MANAGED_BY = "karpenter.sh/managed-by"
TAG_NAME = "Name"

# --- labels a node of an EC2 instance type carries (Karpenter's well-known labels) ----------------------
LABEL_CATEGORY = "karpenter.k8s.aws/instance-category"
LABEL_FAMILY = "karpenter.k8s.aws/instance-family"
LABEL_GENERATION = "karpenter.k8s.aws/instance-generation"
LABEL_SIZE = "karpenter.k8s.aws/instance-size"
LABEL_CPU = "karpenter.k8s.aws/instance-cpu"
LABEL_CPU_MANUFACTURER = "karpenter.k8s.aws/instance-cpu-manufacturer"
LABEL_MEMORY = "karpenter.k8s.aws/instance-memory"
LABEL_HYPERVISOR = "karpenter.k8s.aws/instance-hypervisor"
LABEL_GPU_COUNT = "karpenter.k8s.aws/instance-gpu-count"
LABEL_GPU_NAME = "karpenter.k8s.aws/instance-gpu-name"
LABEL_GPU_MANUFACTURER = "karpenter.k8s.aws/instance-gpu-manufacturer"
LABEL_GPU_MEMORY = "karpenter.k8s.aws/instance-gpu-memory"
LABEL_LOCAL_NVME = "karpenter.k8s.aws/instance-local-nvme"
LABEL_ENCRYPTION_IN_TRANSIT = "karpenter.k8s.aws/instance-encryption-in-transit-supported"
LABEL_EBS_BANDWIDTH = "karpenter.k8s.aws/instance-ebs-bandwidth"
LABEL_NETWORK_BANDWIDTH = "karpenter.k8s.aws/instance-network-bandwidth"
LABEL_NODECLASS = "karpenter.k8s.aws/ec2nodeclass"

# --- EC2NodeClass status condition types (Karpenter's) -------------------------------------------------
SUBNETS_READY = "SubnetsReady"
SECURITY_GROUPS_READY = "SecurityGroupsReady"
AMIS_READY = "AMIsReady"
INSTANCE_PROFILE_READY = "InstanceProfileReady"
VALIDATION_SUCCEEDED = "ValidationSucceeded"
READY = "Ready"
