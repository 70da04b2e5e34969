"""The disruption service: removing and replacing nodes that are no longer worth their price or no longer
what their NodePool says, without breaking anything.

The methods are pure and shared with ``tenon simulate --disruption`` (:mod:`tenon.domain.disruption`); this
package runs them on the event log: :mod:`.projection_view` (the service's state and the view the methods
decide on), :mod:`.orchestration` (a command's stages: proposed, confirmed with its replacements requested,
terminations once they are Initialized, or abandoned), :mod:`.decider`; then the I/O: :mod:`.termination`
(taint, drain through the Eviction API honouring PodDisruptionBudgets and ``do-not-disrupt``, wait for
volumes to detach, record, delete: the one path every method and every user delete takes) and
:mod:`.service` (the executor: taints on confirmation, the Drifted condition on NodeClaim objects).
"""
