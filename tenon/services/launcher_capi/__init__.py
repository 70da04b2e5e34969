"""launcher-capi: Cluster API MachineDeployments as tenon's catalog, and Planned NodeClaims as Machines.

What it does
------------
* **Catalog.** For each ``ClusterAPINodeClass`` (from the pod-watcher's ``NodeClassesSnapshot``), its member
  MachineDeployments (label ``node.cluster.x-k8s.io/karpenter-member`` and the NodeClass's
  ``scalableResourceSelector``) become instance types with capacity, price and how many more may be created
  (max-size annotation minus ``spec.replicas``). When the NodeClass names an OpenStack cloud, Nova flavors fill
  what the annotations omit and the NodeClass's price table supplies prices (:mod:`.openstack`). The result is
  published as a ``CatalogSnapshot`` on ``tenon.catalog.<nodeclass>`` whenever its content changes; an MD that
  cannot be read is skipped with a reason naming it, and a Warning Event on it in the management cluster.
* **Launch.** On ``NodeClaimPlanned`` for a claim of a NodeClass it serves, it scales the MD of the chosen
  instance type (merge patch with a resourceVersion precondition, retried on 409 by deciding again), binds the
  new Machine to the claim (annotation ``tenon.sh/nodeclaim``, label ``karpenter.sh/nodepool``) and appends
  ``NodeClaimLaunched`` once the Machine has a providerID. An MD at its max size (or paused) gives
  ``NodeClaimLaunchFailed`` and the claim's next fallback is tried; after the last, the failure is final.
* **Removal.** A claim ``NodeClaimAbandoned``, ``NodeClaimDrained`` or ``NodeClaimTerminated`` loses exactly
  its Machine: the ``cluster.x-k8s.io/delete-machine`` annotation, then one replica fewer. After a drain, once
  the Machine is gone, the launcher appends ``NodeClaimTerminated``. A Machine bound to a claim the log never
  had is removed the same way after a grace period (default 10 minutes).

How it is built
---------------
Layers, pure first:

* :mod:`.catalog` (pure): NodeClass + MachineDeployments (+ flavors) -> ``CatalogContent`` (the snapshot's
  fields, a content hash, and the (instance type, zone) -> MD map the launcher acts on).
* :mod:`.launching` (pure): the claim projection (``apply_claim_event``) and :func:`.launching.decide`: whole
  state in, actions out (marks, binds, MD patches, claim events). The MD's own annotations record which
  claims a replica was added for and which Machines a replica was removed for, in the same patch as the
  replicas, so a crash between two writes never makes a restart scale twice or forget a decrement.
* :mod:`.openstack`: flavors from Nova (blocking I/O in a thread), merged into MDs (pure).
* :mod:`.service` (I/O): the log (rebuild at start with ``read``, then the durable consumer ``launcher-capi``
  on ``tenon.nodeclaim.*``), list-and-watch of MDs and Machines, and carrying out decisions. Everything is
  level-triggered: each change re-runs ``decide`` on the whole state, so a redelivered event or a restart
  finds nothing new to do.
* ``__main__``: ``python -m tenon.services.launcher_capi [--kubeconfig WORKLOAD] [--management-kubeconfig PATH]
  [--namespace NS] [--leak-grace SECONDS]`` under ``tenon.runtime.service.run_service`` (leader election: a second
  replica waits).
"""
