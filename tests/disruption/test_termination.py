"""Termination against the sandbox: PodDisruptionBudgets hold, a restart mid-drain finishes once, what it
appends reaches the state through the log; the Drifted condition the service keeps on NodeClaims."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import pytest

from devtools.sandbox.testing import SandboxHandle, running_sandbox
from proto import events as ev
from proto import subjects
from tenon.domain.projection import ClusterProjection
from tenon.runtime.eventlog.jetstream import JetStreamEventLog
from tenon.runtime.eventlog.memory import InMemoryEventLog
from tenon.runtime.kube import NODECLAIMS, NODES, PODS, Kube, load_kube
from tenon.runtime.kube.resources import PODDISRUPTIONBUDGETS
from tenon.services.disruption.decider import DisruptionDecider
from tenon.services.disruption.service import DisruptionExecutor
from tenon.services.disruption.termination import Terminator
from tests.support.events import append_to_claim, build_event
from tests.support.services import caught_up
from tests.support.services import running as running_service
from tests.support.waiting import until

CLAIM, NODE = "default-abcde", "node-a"


def envelope(event_id: str) -> dict[str, Any]:
    return {"id": event_id, "decided_at": datetime.now(UTC), "producer": "pod-watcher"}


@pytest.fixture
async def sandbox() -> AsyncIterator[SandboxHandle]:
    async with running_sandbox("fast") as handle:
        yield handle


@pytest.fixture
async def kube(sandbox: SandboxHandle) -> AsyncIterator[Kube]:
    client = await load_kube(str(sandbox.workload_kubeconfig))
    yield client
    await client.close()


def initialized_claim(pods: tuple[str, ...]) -> list[ev.NodeClaimEvent]:
    """The story of claim CLAIM up to Initialized on node NODE, planned for ``pods``."""
    return [
        build_event(
            ev.NodeClaimPlanned,
            "plan",
            nodeclaim=CLAIM,
            nodepool="default",
            node_class="default",
            choice=ev.InstanceChoice("c3-8", None, "on-demand", 0.1),
            fallbacks=(),
            pods=pods,
            requirements=(),
            labels={},
        ),
        build_event(
            ev.NodeClaimLaunched, "launch", nodeclaim=CLAIM, provider_id="p://a", instance_type="c3-8"
        ),
        build_event(ev.NodeClaimRegistered, "reg", nodeclaim=CLAIM, node=NODE, provider_id="p://a"),
        build_event(ev.NodeClaimInitialized, "init", nodeclaim=CLAIM, node=NODE),
    ]


async def seed(event_log: JetStreamEventLog, kube: Kube) -> None:
    """A registered, initialized claim whose node runs one application pod guarded by a PDB."""
    node = await kube.create(
        NODES,
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": NODE,
                "labels": {"karpenter.sh/nodepool": "default", "kubernetes.io/hostname": NODE},
            },
            "spec": {"providerID": "p://a"},
            "status": {
                "capacity": {"cpu": "4", "memory": "8Gi", "pods": "110"},
                "allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"},
            },
        },
    )
    pod = await kube.create(
        PODS,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "guarded", "namespace": "default", "labels": {"app": "guarded"}},
            "spec": {"nodeName": NODE, "containers": [{"name": "c", "image": "pause"}]},
        },
    )
    await kube.create(
        PODDISRUPTIONBUDGETS,
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "guarded", "namespace": "default"},
            "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "guarded"}}},
        },
    )
    await kube.create(
        NODECLAIMS,
        {
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodeClaim",
            "metadata": {"name": CLAIM, "finalizers": ["karpenter.sh/termination"]},
            "spec": {},
        },
    )
    pool = {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": "default"},
        "spec": {
            "template": {"spec": {"nodeClassRef": {"name": "default"}}},
            "disruption": {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "Never"},
        },
    }
    await event_log.publish(subjects.NODEPOOLS, ev.NodePoolsSnapshot(**envelope("np"), nodepools=(pool,)))
    for event in initialized_claim(pods=("default/guarded",)):
        await append_to_claim(event_log, event)
    await event_log.publish(
        subjects.node(NODE), ev.NodeObserved(**envelope("node"), change="added", node=node)
    )
    await event_log.publish(
        subjects.bound_pod("default", "guarded"),
        ev.BoundPodObserved(**envelope("pod"), change="added", pod=pod),
    )


async def claim_events(event_log: JetStreamEventLog) -> list[ev.Event]:
    return [r.decode() async for r in event_log.read(subjects.nodeclaim(CLAIM))]


def start(event_log: JetStreamEventLog, kube: Kube) -> Any:
    return running_service(DisruptionDecider(), DisruptionExecutor(kube, max_backoff=0.3), event_log)


async def test_pdb_holds_the_drain_and_a_restart_finishes_it_once(
    jetstream_log: JetStreamEventLog, kube: Kube
) -> None:
    await seed(jetstream_log, kube)
    first = start(jetstream_log, kube)
    runtime = await first.__aenter__()

    async def guarded_running() -> bool:
        pod = await kube.get(PODS, "guarded", "default")
        return (pod.get("status") or {}).get("phase") == "Running"

    await until(guarded_running)
    # a user deletes the NodeClaim: tenon's finalizer holds it, and the graceful path starts
    await kube.delete(NODECLAIMS, CLAIM)

    async def tainted() -> bool:
        node = await kube.get(NODES, NODE)
        return any(t["key"] == "karpenter.sh/disrupted" for t in node["spec"].get("taints", []))

    await until(tainted)
    requested = [e for e in await claim_events(jetstream_log) if isinstance(e, ev.DisruptionRequested)]
    assert [r.method for r in requested] == ["delete"]
    # the PDB (maxUnavailable 0) refuses the evictions: the pod stays, nothing is drained
    terminator = runtime.executor.terminator
    await until(lambda: terminator.evictions_refused >= 2, what="evictions refused by the PDB")
    assert await kube.get_or_none(PODS, "guarded", "default") is not None
    assert not any(isinstance(e, ev.NodeClaimDrained) for e in await claim_events(jetstream_log))

    # the service dies mid-drain; a new leader resumes the same termination
    await first.__aexit__(None, None, None)
    second = start(jetstream_log, kube)
    runtime = await second.__aenter__()
    await kube.patch(PODDISRUPTIONBUDGETS, "guarded", {"spec": {"maxUnavailable": 1}}, namespace="default")

    async def drained() -> list[ev.Event]:
        return [e for e in await claim_events(jetstream_log) if isinstance(e, ev.NodeClaimDrained)]

    [done] = await until(drained, timeout=20)
    assert isinstance(done, ev.NodeClaimDrained) and done.evicted == ("default/guarded",)

    async def node_gone() -> bool:
        return await kube.get_or_none(NODES, NODE) is None

    await until(node_gone)
    await until(lambda: caught_up(runtime))
    assert len(await drained()) == 1
    assert len([e for e in await claim_events(jetstream_log) if isinstance(e, ev.DisruptionRequested)]) == 1
    await second.__aexit__(None, None, None)


async def test_kubectl_delete_node_takes_the_graceful_path(
    jetstream_log: JetStreamEventLog, kube: Kube
) -> None:
    await seed(jetstream_log, kube)
    await kube.patch(NODES, NODE, {"metadata": {"finalizers": ["karpenter.sh/termination"]}})
    await kube.patch(PODDISRUPTIONBUDGETS, "guarded", {"spec": {"maxUnavailable": 1}}, namespace="default")
    service = start(jetstream_log, kube)
    await service.__aenter__()
    await kube.delete(NODES, NODE)  # what `kubectl delete node` does; tenon's finalizer holds the Node
    deleting = await kube.get(NODES, NODE)
    assert deleting["metadata"].get("deletionTimestamp")
    # pod-watcher's observation of the deletion
    await jetstream_log.publish(
        subjects.node(NODE), ev.NodeObserved(**envelope("deleting"), change="changed", node=deleting)
    )

    async def drained() -> list[ev.Event]:
        return [e for e in await claim_events(jetstream_log) if isinstance(e, ev.NodeClaimDrained)]

    [done] = await until(drained)
    assert isinstance(done, ev.NodeClaimDrained) and done.evicted == ("default/guarded",)
    [request] = [e for e in await claim_events(jetstream_log) if isinstance(e, ev.DisruptionRequested)]
    assert (
        isinstance(request, ev.DisruptionRequested) and request.method == "delete" and NODE in request.reason
    )

    async def node_gone() -> bool:
        return await kube.get_or_none(NODES, NODE) is None

    await until(node_gone)  # the finalizer came off once the drain was done
    await service.__aexit__(None, None, None)


async def test_a_drifted_claim_held_back_by_its_budget_gets_the_drifted_condition(
    jetstream_log: JetStreamEventLog, kube: Kube
) -> None:
    await seed(jetstream_log, kube)
    service = start(jetstream_log, kube)
    await service.__aenter__()
    relabelled = {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": "default"},
        "spec": {
            "template": {
                "metadata": {"labels": {"team": "b"}},
                "spec": {"nodeClassRef": {"name": "default"}},
            },
            "disruption": {
                "consolidationPolicy": "WhenEmpty",
                "consolidateAfter": "Never",
                "budgets": [{"nodes": "0", "reasons": ["Drifted"]}],
            },
        },
    }
    await jetstream_log.publish(
        subjects.NODEPOOLS, ev.NodePoolsSnapshot(**envelope("relabelled"), nodepools=(relabelled,))
    )

    async def drifted() -> dict[str, Any] | None:
        obj = await kube.get(NODECLAIMS, CLAIM)
        found = [c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == "Drifted"]
        return found[0] if found else None

    condition = await until(drifted, what="the Drifted condition on the NodeClaim")
    assert (condition["status"], condition["reason"]) == ("True", "NodePoolDrifted")
    assert not [e for e in await claim_events(jetstream_log) if isinstance(e, ev.DisruptionRequested)]
    await service.__aexit__(None, None, None)


async def test_the_drained_a_termination_appends_reaches_the_state_only_through_the_log(
    kube: Kube,
) -> None:
    """The terminator appends ``NodeClaimDrained`` to the claim's history; the service's state learns it when
    its consumer folds that record, at its place in the log, where ``tenon replay`` folds it too. Folded into
    the state's claim at once, a tick decided between the append and its delivery counted the drained claim
    out of the budget, and the replay of a scale run's log, which had not folded it yet, counted 2-28 claims
    more in three budgets."""
    await kube.create(
        NODES,
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": NODE, "labels": {"karpenter.sh/nodepool": "default"}},
            "spec": {"providerID": "p://a"},
        },
    )
    event_log = InMemoryEventLog()
    request = build_event(
        ev.DisruptionRequested, "dr", nodeclaim=CLAIM, method="emptiness", reason="empty", node=NODE
    )
    for event in (*initialized_claim(pods=()), request):
        await append_to_claim(event_log, event)
    projection = ClusterProjection()
    async for record in event_log.read(subjects.nodeclaim(CLAIM)):
        projection.apply(record.decode(), record.sequence)

    await Terminator(kube, event_log, lambda: projection, poll_seconds=0.05).terminate(CLAIM)

    assert await kube.get_or_none(NODES, NODE) is None
    [appended] = [r async for r in event_log.read(subjects.nodeclaim(CLAIM)) if r.sequence > 5]
    assert isinstance(appended.decode(), ev.NodeClaimDrained)
    assert projection.claims[CLAIM].drained is None  # not before the consumer delivers it
    projection.apply(appended.decode(), appended.sequence)
    assert projection.claims[CLAIM].drained is not None
