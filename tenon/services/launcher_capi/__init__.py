"""launcher-capi: Cluster API MachineDeployments as tenon's catalog, and Planned NodeClaims as Machines.

What it does
------------
* **Catalog.** For each ``ClusterAPINodeClass`` (from the pod-watcher's ``NodeClassesSnapshot``), its member
  MachineDeployments (label ``node.cluster.x-k8s.io/karpenter-member`` and the NodeClass's
  ``scalableResourceSelector``) become instance types with capacity, price and how many more may be created
  (max-size annotation minus ``spec.replicas``). When the NodeClass names an OpenStack cloud, Nova flavors
  fill what the annotations omit and the NodeClass's price table supplies prices (:mod:`.openstack`). The
  result is published as a ``CatalogSnapshot`` on ``tenon.catalog.<nodeclass>`` whenever its content changes,
  and again well inside the log's retention; an MD that cannot be read is skipped with a reason naming it, and
  a Warning Event on it in the management cluster.
* **Launch.** On ``NodeClaimPlanned`` for a claim of a NodeClass it serves, it scales the MD of the chosen
  instance type (a patch whose ``test`` operations hold the spec and annotations it was decided on), binds
  the new Machine to the claim (annotation ``tenon.sh/nodeclaim``, label ``karpenter.sh/nodepool``) and
  appends ``NodeClaimLaunched`` once the Machine has a providerID. An MD at its max size (or paused) gives
  ``NodeClaimLaunchFailed`` and the claim's next fallback is tried; after the last, the failure is final.
* **Removal, on positive evidence only** (:mod:`.removal`). A claim abandoned, drained, terminated or failed
  for good, with a complete story, loses exactly its Machine: the ``cluster.x-k8s.io/delete-machine``
  annotation, then one replica fewer. After a drain, once the Machine is gone, the launcher appends
  ``NodeClaimTerminated``. A Machine bound to a claim that exists nowhere is removed only when no NodeClaim
  object of that name exists and the log reaches back past the Machine's creation; in doubt it is kept, and
  the launcher says why (``MachineKept``, a log line, a Kubernetes Event on the Machine).

How it is built
---------------
A decider on :mod:`tenon.runtime.decider`, pure parts first:

* :mod:`.catalog` (pure): NodeClass + MachineDeployments (+ flavors) -> ``CatalogContent``.
* :mod:`.observations` (pure): MachineDeployments and Machines trimmed to what decisions read, as events.
* :mod:`.state` (pure): the fold of the launcher's inputs: NodeClaim aggregates
  (:mod:`tenon.domain.nodeclaim`), NodeClasses, its catalogs, the observed Cluster API objects, its own
  decisions.
* :mod:`.launching` and :mod:`.removal` (pure): the whole-state decision (scale, bind, launch, fail over,
  remove, keep, terminate). The MD's own annotations record which claims a replica was added for and which
  Machines a replica was removed for, in the same patch as the replicas, so a crash between two writes never
  makes a restart scale twice or forget a decrement.
* :mod:`.decider`: the above as a :class:`tenon.runtime.decider.Decider` (``tenon replay launcher-capi``).
* :mod:`.watches`, :mod:`.catalog_publisher`, :mod:`.executor` (I/O): observations, catalogs, carrying out
  decisions with their preconditions, gathering the evidence for removals, explaining.
* :mod:`.openstack`: flavors from Nova (blocking I/O in a thread), merged into MDs (pure).
* :mod:`.service`: settings (``LauncherCapiSettings``) and ``SERVICE``; ``__main__`` runs it.
"""
