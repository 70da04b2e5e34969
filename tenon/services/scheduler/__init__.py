"""The scheduler service: pending pods in, NodeClaims out.

Modules, pure first: :mod:`tenon.domain.projection` (the cluster as the log tells it, shared with
disruption), :mod:`.planner` (PendingBatch -> NodeClaimPlanned + BatchPlanned through the scheduling core in
:mod:`tenon.core`), :mod:`.lifecycle` (Registered / Initialized / Abandoned), :mod:`.nodeclaims` and
:mod:`.nodepools` (the Kubernetes objects' status as functions of the projection), :mod:`.decider` (all of it
as one replayable decision function); then the I/O in
:mod:`.service`. Run it with ``python -m tenon.services.scheduler`` or ``tenon run scheduler``.
"""
