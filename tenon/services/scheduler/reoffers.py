"""Pods offered again before the claim bought for them had its chance: they keep their place and wait.

The pod-watcher offers a pod again when it is still pending a while after its batch, or a moment after
capacity arrived (:mod:`tenon.services.pod_watcher.batching`). A pod whose claim has not registered its Node
yet, or registered it only a moment before the pod was offered again, has not had its chance: its room is
coming, or its Node has just become schedulable and the kube-scheduler is about to place it there (it was
nominated to it: :mod:`.nominations`). Planning it again would repack the claims' room first-fit-decreasing
around every pod offered with it, a worse packing than the plan that bought them, and buy a node for whatever
no longer fits: on the 1,000-pod e2e run the 5 s re-batch offered 956 pods again as the nodes registered,
and their new plan bought 3 claims for 42 pods 7 s after the first wave. So such a pod is left out of the new
plan, and its claim keeps holding its room (:func:`tenon.services.scheduler.planner.cluster_input` counts a
claim's pods still pending).

A pod offered again :data:`PLACEMENT_GRACE` after its claim's Node registered, or :data:`SETTLE_GRACE` after
it was initialized, was not placed there (its room went to a pod of higher priority, or to what the plan did
not know), and is planned again like any pending pod. The second bound is the one that usually ends the wait:
pods can land once the Node is initialized, and the pod-watcher offers a pod again after capacity only once
the kube-scheduler has placed nothing for its idle period. On the 1,000-pod e2e run, pods of other claims
that took a Node's slack before their own Node came up left a pod with no room now and then; it was offered
again 1.9 s after its Node was initialized, 3.3 s after it registered, and waited for its next offer, 11 s
later, to be planned again (all Running at 20 s instead of 6). Karpenter holds a nomination for 20 s; this
is a deliberate difference: a re-plan of such a pod buys nothing while its Node still has room in the log's
view, so trusting the kube-scheduler's quiet sooner costs a plan at most.

The moment a pod is offered at is its batch's window opening, not its close, though every pod in a batch was
still pending at the close. Judged at the close (tried twice, in scale run 19 and on 2026-12-03 for a slow
1,000-pod e2e run whose pods joined a window 1.48 s after their Node was initialized, stayed pending through
its close and waited 10 s for their next offer), the 10,000-pod wave planned the same ~3,500 pending pods
again every few seconds as Nodes kept arriving, bought claims each time, and left pods never running. Left
out at the opening, such a pod waits for its next offer; its nomination (:mod:`.nominations`) is what should
place it meanwhile.

A claim abandoned or being disrupted no longer accepts pods, and holds none. The rule reads event times only
(the batch's window, the registration and the initialization), so a replay decides the same.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from tenon.domain.nodeclaim import NodeClaim
from tenon.domain.projection import ClusterProjection, KubeObject, object_key

PLACEMENT_GRACE = timedelta(seconds=5)
"""How long after its claim's Node registered a pod is still taken to be on its way there."""
SETTLE_GRACE = timedelta(seconds=1.5)
"""How long after its claim's Node was initialized (schedulable for its pods) a pod is still taken to be on
its way there."""


def _on_its_way(claim: NodeClaim, offered_at: datetime) -> bool:
    if claim.registered is None:
        return True
    if claim.initialized is not None and claim.initialized.decided_at + SETTLE_GRACE <= offered_at:
        return False
    return claim.registered.decided_at + PLACEMENT_GRACE > offered_at


def awaiting_their_claim(projection: ClusterProjection, offered_at: datetime) -> set[str]:
    """Keys of the pods whose claim still accepts pods and whose Node had neither registered
    :data:`PLACEMENT_GRACE` nor been initialized :data:`SETTLE_GRACE` before ``offered_at``."""
    return {
        key
        for claim in projection.claims.values()
        if claim.planned is not None and claim.accepts_pods and _on_its_way(claim, offered_at)
        for key in claim.planned.pods
    }


def to_plan_again(
    projection: ClusterProjection, pods: Sequence[KubeObject], offered_at: datetime
) -> list[KubeObject]:
    """The ``pods`` offered at ``offered_at`` to plan: all but those awaiting their claim."""
    waiting = awaiting_their_claim(projection, offered_at)
    return [pod for pod in pods if object_key(pod) not in waiting]
