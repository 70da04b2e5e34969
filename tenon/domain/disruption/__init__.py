"""Disruption, as pure functions on what tenon knows of the cluster: shared by the disruption service (which
decides and acts) and ``tenon simulate --disruption`` (which only says what it would do).

Karpenter's methods, in Karpenter's order, each its own module:

* :mod:`.durations` and :mod:`.budgets`: the NodePool fields they read (``consolidateAfter``, ``expireAfter``,
  ``terminationGracePeriod``, ``spec.disruption.budgets`` with cron schedules), validated with one-line
  reasons naming the field;
* :mod:`.view`: the cluster as disruption sees it (claims with their prices and ages, Nodes, pods per node,
  NodePools, PodDisruptionBudgets) and :mod:`.candidates`: which nodes may be disrupted for which reason, and
  what blocks the others (do-not-disrupt on pods, nodes and NodePool templates, PDBs, budgets);
* :mod:`.emptiness`, :mod:`.drift`, :mod:`.expiration`, :mod:`.consolidation` (single- and multi-node, with
  as many replacements as pay), on :mod:`.simulation` (repacking through the scheduling core);
* :mod:`.rounds`: one disruption round, methods in Karpenter's order, the first that acts wins.
"""
