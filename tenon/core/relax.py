"""Preferences held as rules until a pod cannot run, then relaxed one step at a time (Karpenter's ladder).

Karpenter treats a pod's soft constraints as hard while it schedules, and when the pod fails it drops one and
tries again, in this order (``preferences.go``): preferred pod affinity, preferred pod anti-affinity,
preferred node affinity, ``ScheduleAnyway`` topology spreads (then ``PreferNoSchedule`` taints, which tenon's
templates already treat as a last resort, :func:`tenon.core.templates.preferred`). :func:`relax` is one step
of that ladder for one pod; the solver re-solves with the relaxed pods until no pod that failed has anything
left to relax.

One deliberate difference: within preferred pod (anti-)affinity Karpenter drops the *heaviest* term first;
tenon drops the *lightest*, since a weight is how much a preference matters to the kube-scheduler's scoring
(a pod keeps what it cares most about for as long as it can).
"""

from __future__ import annotations

from dataclasses import replace

from tenon.core.model import Pod


def relax(pod: Pod) -> Pod | None:
    """``pod`` with its next soft constraint dropped, or ``None`` when it has none left."""
    if pod.preferred_pod_affinity:
        return replace(pod, preferred_pod_affinity=pod.preferred_pod_affinity[:-1])
    if pod.preferred_pod_anti_affinity:
        return replace(pod, preferred_pod_anti_affinity=pod.preferred_pod_anti_affinity[:-1])
    if pod.preferred_node_affinity:
        return replace(pod, preferred_node_affinity=())
    anyway = tuple(t for t in pod.topology_spread if t.when_unsatisfiable != "ScheduleAnyway")
    if anyway != pod.topology_spread:
        return replace(pod, topology_spread=anyway)
    return None
