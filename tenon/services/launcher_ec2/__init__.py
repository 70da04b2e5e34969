"""launcher-ec2: EC2's instance types as tenon's catalog, and planned NodeClaims as EC2 instances.

What it does
------------
* **EC2NodeClass** (``karpenter.k8s.aws/v1``, from the pod-watcher's ``NodeClassesSnapshot``): its subnet,
  security-group and AMI selector terms resolved against EC2 (AMI aliases such as ``al2023@latest`` through
  SSM public parameters), its role or instance profile, tags, block devices, metadata options and user data
  with the kubelet's settings; ``status.conditions`` (``SubnetsReady``, ``SecurityGroupsReady``,
  ``AMIsReady``, ``InstanceProfileReady``, ``ValidationSucceeded``, ``Ready``) written as Karpenter writes
  them, with the reason when not ready (:mod:`.nodeclass`, :mod:`.launch_templates`).
* **Catalog** (:mod:`.catalog`): DescribeInstanceTypes and DescribeInstanceTypeOfferings, allocatable from
  Karpenter's formulas (ENI-limited pods, kube-reserved, eviction threshold, 7.5% VM memory overhead
  corrected by what registered nodes report), on-demand prices from the table shipped in ``data/``, spot
  prices from DescribeSpotPriceHistory or an estimate flagged as such; offerings EC2 refused are published
  unavailable for 3 minutes. Published as ``CatalogSnapshot`` (provider ``aws``).
* **Launch** (:mod:`.launching`): one CreateFleet (instant) per claim with overrides for its choices x zones,
  idempotent by a client token from the claim and a lookup by tag before launching; insufficient capacity
  fails the refused choices over to the next.
* **Termination and leaks** (:mod:`.removal`): TerminateInstances after ``NodeClaimDrained`` (and for
  abandoned or failed claims), ``NodeClaimTerminated`` once the instance is shutting down or gone; an
  instance tagged with a claim that exists nowhere is terminated only on positive evidence.

How it is built
---------------
A decider on :mod:`tenon.runtime.decider`: :mod:`.state` (the fold), :mod:`.launching` and :mod:`.removal`
(the whole-state decision), :mod:`.decider`; I/O in :mod:`.aws` (boto3), :mod:`.catalog_publisher` and
:mod:`.executor`; settings and ``SERVICE`` in :mod:`.service`. Everything it decides from is in the log (its
fleet requests and EC2's answers, the instances it observed, the leak evidence), so ``tenon replay
launcher-ec2`` decides it all again.
"""
