"""The disruption service: removing nodes that are no longer worth their price, without breaking anything.

Pure decisions first: :mod:`.budgets` (how many nodes of a NodePool may go at once, now, for a reason),
:mod:`.emptiness` (nodes with nothing but DaemonSet pods for ``consolidateAfter``, and what blocks the
others); then the I/O: :mod:`.termination` (taint, drain through the Eviction API honouring
PodDisruptionBudgets, record, delete: the one path every method and every user delete takes) and
:mod:`.service`. Consolidation, drift and expiry will be further methods beside emptiness, reusing the same
termination path.
"""
