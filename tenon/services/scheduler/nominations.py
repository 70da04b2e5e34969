"""Telling the kube-scheduler where the pods a claim was bought for should go: ``status.nominatedNodeName``.

A plan puts each pending pod on a node it bought. The kube-scheduler does not read the plan: when the first
new node becomes Ready it places every pending pod that fits there, least-allocated first, so pods planned
for nodes still booting take the room planned for others. Nodes are packed to the cost optimum, so what is
displaced often fits nowhere and buys a node of its own, seconds later (about one claim in ten on the
1,000-pod e2e run).

So, when a claim's Node registers (still tainted ``karpenter.sh/unregistered``, before any pod can land
there), the scheduler writes ``status.nominatedNodeName`` on the pods planned for it that still wait. The
kube-scheduler reads nominations from its pod informer whoever wrote them (the mechanism its own preemption
uses; KEP-5278 makes it the way for autoscalers to say where they made room): it tries a pod's nominated
node first (``PreferNominatedNode``) and holds a nominated pod's room against other pods of no higher
priority. **A deliberate difference from Karpenter**, which records a ``Nominated`` Event and leaves the
placement to chance.

A nomination is only advice: a pod the kube-scheduler still could not place on its nominated node (its room
went to a pod of higher priority, or a DaemonSet pod the plan did not know) comes back in a PendingBatch,
and is then planned as any pending pod (:func:`without_own_nomination`): a nomination tenon wrote is not
read as "the kube-scheduler is placing it" (which a preemption's nomination is).

**Nominations that no longer hold.** A nomination holds room: the kube-scheduler counts every pod nominated to
a node against the others it tries there. When a Node's slack went to pods of other claims before its own
pods' nominations were read (the kube-scheduler's pod and node informers are not ordered), its nominated pods
may no longer all fit, and each, tried there, finds the room held by the others: none lands until a nomination
changes (on a slow run of the 1,000-pod e2e, eight such pods held each other off two Nodes from 6 s to 20 s,
when a new claim's registration moved three of them). The kube-scheduler of 1.34 does not clear a nomination
after a failure ("external components ... are responsible for managing this field", kubernetes#133276); 1.35
clears it again on a scheduling or binding failure (kubernetes#135007); the sandbox behaves as 1.34 does.
Clearing the nomination of every pod planned again on another node was tried (2026-12-03): hundreds of pods
per batch in the scale run's waves lost theirs while their Nodes came up, and its 4,000-pod wave took 90 s
instead of 35 s. Moving it to the Node the new plan chose was worse: a nomination tenon did not write at a
registration reads as someone else's (a preemption's, whose pod nothing is provisioned for), and five pods
were never planned again.

What holds (2026-12-03, late night): clearing only the nominations a Node cannot honour
(:func:`overcommitted`). Once its claim has been initialized for
:data:`~tenon.services.scheduler.reoffers.SETTLE_GRACE` (the kube-scheduler had its chance), the pods tenon
nominated to a Node that still wait are weighed against what the Node has left (allocatable minus its running
pods): the smallest are kept nominated while they fit, and the others' are cleared, so the kept ones land and
the rest are placed wherever there is room or offered and planned again. The service clears them on its tick,
for the nominations it wrote in its term (a nomination it does not know it wrote is left alone: it acts only
on what it knows). Nothing is cleared while all of them fit, so a wave whose Nodes kept their room sees no
change. The same clears the nominations of a plan the Node turned out too small for (its allocatable below
what the catalog said), which would otherwise hold each other off it.

**A pod offered again past its grace** (:mod:`.reoffers`) is planned again, while the kube-scheduler still
tries it on the Node it is nominated to first. Planned as any pending pod, it no longer held that room in the
plan, and another pod the plan put on that Node found it taken (a scale run's 10,000-pod wave left one pod
pending so: ``bench/scale.py``, run 36). So it takes that Node's room first in the plan, before any other pod
is placed, while it still fits there (:data:`~tenon.core.wellknown.PLANNED_NODE`): the plan then agrees with
the kube-scheduler, and only a pod that no longer fits its Node is placed elsewhere.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from tenon.core.wellknown import PLANNED_NODE
from tenon.domain.nodeclaim import NodeClaim
from tenon.domain.projection import ClusterProjection, KubeObject, object_key


def pods_to_nominate(projection: ClusterProjection, claim: NodeClaim, node: str, now: datetime) -> list[str]:
    """Keys of the pods planned for ``claim`` that still wait and are not nominated to ``node`` yet."""
    if claim.planned is None:
        return []
    out = []
    for key in claim.planned.pods:
        if key in projection.bound_pods or not projection.still_pending(key, now):
            continue
        waiting = projection.pending.get(key) or {}
        if (waiting.get("status") or {}).get("nominatedNodeName") != node:
            out.append(key)
    return out


def nomination_patch(node: str) -> dict[str, object]:
    """The pod status merge patch."""
    return {"status": {"nominatedNodeName": node}}


def without_own_nomination(projection: ClusterProjection, pod: KubeObject) -> KubeObject:
    """``pod`` without the nomination tenon wrote (to the node of the claim it was planned for): offered
    again, it was not placed there yet, and is planned as a pending pod that takes that Node's room first
    while it still fits there (:data:`~tenon.core.wellknown.PLANNED_NODE`, in the plan's input only), as the
    kube-scheduler will try it there first. Other nominations are kept."""
    status = pod.get("status") or {}
    nominated = status.get("nominatedNodeName")
    if not nominated:
        return pod
    claim = projection.claims.registered_to(str(nominated))
    if claim is None or claim.planned is None or object_key(pod) not in claim.planned.pods:
        return pod
    metadata = pod.get("metadata") or {}
    annotations = {**(metadata.get("annotations") or {}), PLANNED_NODE: str(nominated)}
    return {
        **pod,
        "metadata": {**metadata, "annotations": annotations},
        "status": {k: v for k, v in status.items() if k != "nominatedNodeName"},
    }


def _requests(projection: ClusterProjection, key: str) -> dict[str, int] | None:
    pod = projection.pending.get(key)
    part = projection.parse("Pending", key, pod).part if pod is not None else None
    if part is None or len(part.pods) != 1:
        return None
    return {**part.pods[0].requests, "pods": 1}


def _left_on(projection: ClusterProjection, name: str) -> dict[str, int] | None:
    """What the Node ``name`` has left for pods, for each resource its allocatable names: that minus its
    running pods' requests."""
    node = projection.nodes.get(name)
    part = projection.parse("Node", name, node).part if node is not None else None
    if part is None or len(part.nodes) != 1 or not part.nodes[0].allocatable:
        return None
    left = dict(part.nodes[0].allocatable)
    for pod in projection.running_on(name):
        _take({**pod.requests, "pods": 1}, left)
    return left


def _fits(requests: dict[str, int], left: dict[str, int]) -> bool:
    """Whether ``requests`` fit in ``left`` (only what the Node's allocatable names is weighed)."""
    return all(amount <= left[resource] for resource, amount in requests.items() if resource in left)


def _take(requests: dict[str, int], left: dict[str, int]) -> None:
    for resource, amount in requests.items():
        if resource in left:
            left[resource] -= amount


def overcommitted(projection: ClusterProjection, node: str, nominated: Sequence[str]) -> list[str]:
    """Of the waiting pods ``nominated`` to ``node``, those whose nomination to clear. None when they fit
    together in what the Node has left; else each of them, tried there, would find the room held by the
    others and none would land, so the smallest are kept while they fit (as many as can land) and the rest
    are returned. Nothing when the Node's room or a pod's requests cannot be read: a nomination is cleared
    on positive evidence only."""
    left = _left_on(projection, node)
    if left is None:
        return []
    known: dict[str, dict[str, int]] = {}
    for key in nominated:
        requests = _requests(projection, key)
        if requests is None:
            return []
        known[key] = requests
    together: dict[str, int] = {}
    for requests in known.values():
        for resource, amount in requests.items():
            together[resource] = together.get(resource, 0) + amount
    if _fits(together, left):
        return []
    cleared: set[str] = set()
    for key in sorted(known, key=lambda k: (known[k].get("cpu", 0), known[k].get("memory", 0), k)):
        if _fits(known[key], left):
            _take(known[key], left)
        else:
            cleared.add(key)
    return [key for key in nominated if key in cleared]


def clearing_patch() -> dict[str, object]:
    """The pod status merge patch that removes a nomination."""
    return {"status": {"nominatedNodeName": None}}
