"""pod-watcher: the cluster's eyes. Every input of a scheduling decision enters the event log here.

What it publishes (``proto/README.md`` is the map)
--------------------------------------------------
* ``PendingBatch`` on ``tenon.pending`` (the pods' scheduling needs) when a batching window closed;
* ``NodeObserved`` (added / changed / removed) on ``tenon.cluster.node.<node>`` when a Node changed in a way
  that matters, ``BoundPodObserved`` on ``tenon.cluster.pod.<ns>.<pod>`` likewise for a bound pod;
* ``NodePoolsSnapshot``, ``NodeClassesSnapshot`` (ClusterAPINodeClass, EC2NodeClass) and
  ``DaemonSetsSnapshot`` on ``tenon.cluster.nodepools`` / ``.nodeclasses`` / ``.daemonsets`` when their
  content changed;

and every cluster fact again, unchanged, once per resync interval (a quarter of ``TENON_EVENTS_MAX_AGE``), so
that none ages out of the log.

Design
------
One concept per module:

* :mod:`.views` (pure): least data. What of a Pod, a Node or a DaemonSet is recorded: what scheduling reads
  (requests, affinity, tolerations, topology spread, volumes' claims, owners, labels, ...), never env values,
  commands, args or annotations tenon does not read. The log is kept for days and read by many.
* :mod:`.observations` (pure): which pods are pending (``PodScheduled=False/Unschedulable``, not DaemonSet
  pods, not being deleted, default scheduler, not bound), which Node and bound-pod changes matter (labels,
  taints, capacity/allocatable, Ready, unschedulable, providerID, deletion; a pod's binding, end and deletion,
  not its start; never heartbeats), snapshot content and its fingerprint, and the deterministic event ids.
  Its trackers keep "the last version published" per object, so a re-list becomes a diff with ``removed``
  for what vanished.
* :mod:`.batching` (pure, logical time): the batching window (closes ``idle`` after the last new pod or
  ``max`` after the first; only pods still pending at close), and the re-batch safety net (a pod still
  pending ``rebatch`` after its batch is offered again; the scheduler counts in-flight claims, so this never
  buys twice). Every deadline happens at its own microsecond, whatever the event loop was doing.
* :mod:`.pending_batches` (pure): a closed window as ``PendingBatch`` events, split by message size, each
  recording what its batching read (arrivals, settings, the size limit).
* :mod:`.decider` (pure): the batching decided again from those records (``tenon replay pod-watcher``).
* :mod:`.resync` (pure): when each published fact is due to be re-asserted, spread over the interval.
* :mod:`.service` (I/O and settings): ``list_and_watch`` on the workload cluster (re-lists on 410 and
  reconnects), one task per kind, publishing through ``EventLog.publish``. It runs only while its replica
  leads (``tenon.runtime.service``); each leadership term first rebuilds its view from the log (the last
  event per subject), so a new leader neither repeats what the old one published nor misses what changed in
  between.

Exactly-once, in practice
-------------------------
Ids are derived from what an event observes (uid + resourceVersion + change, + the resync epoch for a
re-assertion; content hash; pod uids + window opening time), so a repeat by a restarted or new leader is
dropped by JetStream's duplicate window, and the log-rebuilt view keeps repeats from being derived in the
first place outside that window.

Running it
----------
``tenon run pod-watcher`` or ``python -m tenon.services.pod_watcher``, with ``--help`` for every setting:
``TENON_KUBECONFIG`` (default: the in-cluster service account), ``TENON_BATCH_IDLE`` (1s),
``TENON_BATCH_MAX`` (10s), ``TENON_REBATCH`` (5s), durations such as ``500ms`` or ``2s``; the broker and the
log's retention from ``TENON_NATS_URL``, ``TENON_EVENTS_MAX_AGE`` and friends
(:class:`tenon.runtime.service.CommonSettings`). A bad value is one line naming the variable, exit 2.

Size and cost
-------------
* A window whose pods do not fit in one message (the broker's limit, capped at 8 MiB) is published as several
  ``PendingBatch`` events sharing ``windowOpenedAt``. Measured on the sandbox before the least-data views:
  1,000 pods of 20 Deployments -> two batches (943 + 57) at 1 MiB, closed 1.02 s after the last pod became
  Unschedulable, with the idle window at 1 s.
* A new leader reads the last event of each ``tenon.cluster.>`` subject (``EventLog.last_per_subject``), one
  message per object, not the retained history: 2,000 pods behind 20,000 events recover in about 0.2 s.
* Re-assertions trickle at ``facts / resync interval`` per second (50,000 facts over 3.5 days: one every 6 s).
* Pods are watched cluster-wide without a field selector (bound and pending pods are both needed).
"""
