"""The pods a claim was bought for are nominated to its Node as it registers, before any pod can land there,
so the kube-scheduler keeps the plan; offered again all the same, a pod is planned as any pending pod."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

from devtools.sandbox.testing import running_sandbox
from proto import events as ev
from proto import registry, subjects
from tenon.core.wellknown import PLANNED_NODE
from tenon.domain.projection import ClusterProjection
from tenon.runtime.eventlog.memory import InMemoryEventLog
from tenon.runtime.kube import NODES, PODS, Kube, load_kube
from tenon.services.scheduler import planner
from tenon.services.scheduler.decider import SchedulerDecider
from tenon.services.scheduler.nominations import overcommitted, without_own_nomination
from tenon.services.scheduler.service import CONNECTIONS_KEPT_FROM_NOMINATIONS, SchedulerExecutor
from tests.scheduler.test_lifecycle_steps import joined, launch_and_join
from tests.support.events import build_event
from tests.support.objects import demo_facts, pending_batch, pending_pod
from tests.support.services import running
from tests.support.waiting import until


class OrderedKube(Kube):
    """The sandbox's API, remembering the writes made to it in order."""

    def __init__(self, inner: Kube) -> None:
        super().__init__(inner.api)
        self.writes: list[str] = []

    async def request(self, method: str, path: str, **kwargs: Any) -> Any:
        if method == "PATCH":
            self.writes.append(path)
        return await super().request(method, path, **kwargs)


async def two_pods_offered_and_node_a(
    kube: Kube, joining: dict[str, Any]
) -> tuple[list[dict[str, Any]], dict[str, Any], InMemoryEventLog]:
    """web-0 and web-1 (1 CPU each) pending in the API server, the Node ``joining`` created there, and a log
    holding the demo's facts and a batch offering both pods."""
    pods = [pending_pod("web-0", "1"), pending_pod("web-1", "1")]
    for pod in pods:
        await kube.create(PODS, pod, namespace="default")
    node = await kube.create(NODES, {"apiVersion": "v1", "kind": "Node", **joining})
    event_log = InMemoryEventLog()
    for fact in demo_facts():
        await event_log.publish(registry.subject_of(fact), fact)
    await event_log.publish(subjects.PENDING, pending_batch("b", *pods, at=datetime.now(UTC)))
    return pods, node, event_log


async def test_the_pods_planned_for_a_claim_are_nominated_to_its_node_before_its_taint_goes() -> None:
    async with running_sandbox(controllers=False) as sandbox:
        client = await load_kube(str(sandbox.workload_kubeconfig))
        kube = OrderedKube(client)
        try:
            pods, node, event_log = await two_pods_offered_and_node_a(client, joined(ready=True))
            async with running(SchedulerDecider(), SchedulerExecutor(kube), event_log) as runtime:
                claim = await launch_and_join(runtime, event_log, node)  # one claim for both pods
                await until(lambda: runtime.state.claims[claim].registered, what="the claim registered")
            for pod in pods:
                stored = await client.get(PODS, pod["metadata"]["name"], namespace="default")
                assert stored["status"]["nominatedNodeName"] == "node-a"
            node_patch = kube.writes.index("/api/v1/nodes/node-a")
            nominations = [w for w in kube.writes if w.endswith("/status") and "/pods/" in w]
            assert len(nominations) == 2
            assert all(kube.writes.index(w) < node_patch for w in nominations)
        finally:
            await client.close()


def test_a_pod_offered_again_on_its_own_nomination_is_planned_again_its_node_first() -> None:
    projection = ClusterProjection()
    for sequence, fact in enumerate(demo_facts(), start=1):
        projection.apply(fact, sequence)
    pod = pending_pod("web-0", "1")
    batch = pending_batch("b", pod, at=datetime.now(UTC))
    projection.apply(batch, 100)
    decisions = SchedulerDecider().decide(projection, batch)
    [claim] = [d.nodeclaim for d in decisions if isinstance(d, ev.NodeClaimPlanned)]
    story = (
        *decisions,
        build_event(ev.NodeClaimLaunched, "l", nodeclaim=claim, provider_id="p://a", instance_type="c3-8"),
        build_event(ev.NodeClaimRegistered, "r", nodeclaim=claim, node="node-a", provider_id="p://a"),
    )
    for sequence, event in enumerate(story, start=101):
        projection.apply(event, sequence)
    ours = {**pod, "status": {**pod["status"], "nominatedNodeName": "node-a"}}
    preempting = {**pod, "status": {**pod["status"], "nominatedNodeName": "node-b"}}
    offered = without_own_nomination(projection, ours)
    assert "nominatedNodeName" not in offered["status"]
    # planned again, but taking node-a's room first while it fits there (the kube-scheduler tries it there)
    assert offered["metadata"]["annotations"][PLANNED_NODE] == "node-a"
    # a nomination tenon did not write (the kube-scheduler's preemption) still says the pod is being placed
    assert without_own_nomination(projection, preempting) is preempting


def _node_a(allocatable: dict[str, str] | None) -> dict[str, Any]:
    status: dict[str, Any] = {"conditions": [{"type": "Ready", "status": "True"}]}
    if allocatable is not None:
        status["allocatable"] = allocatable
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "node-a", "labels": {}},
        "spec": {"providerID": "p://a"},
        "status": status,
    }


def _running_on_node_a(name: str, cpu: str) -> dict[str, Any]:
    pod = pending_pod(name, cpu)
    pod["spec"]["nodeName"] = "node-a"
    pod["status"] = {"phase": "Running"}
    return pod


def _waiting_on_node_a(
    allocatable: dict[str, str] | None, running: list[dict[str, Any]], waiting: list[dict[str, Any]]
) -> ClusterProjection:
    """Node node-a with ``running`` pods bound to it, and ``waiting`` pods offered pending."""
    projection = ClusterProjection()
    story: list[ev.Event] = [
        build_event(ev.NodeObserved, "node-a", change="added", node=_node_a(allocatable))
    ]
    story += [
        build_event(ev.BoundPodObserved, f"bound-{i}", change="added", pod=p) for i, p in enumerate(running)
    ]
    story.append(pending_batch("b", *waiting))
    for sequence, event in enumerate(story, start=1):
        projection.apply(event, sequence)
    return projection


FOUR_CPUS = {"cpu": "4", "memory": "16Gi", "pods": "110"}


def test_nominations_a_node_can_honour_together_are_all_kept() -> None:
    waiting = [pending_pod(f"web-{i}", "1") for i in range(3)]
    projection = _waiting_on_node_a(FOUR_CPUS, [_running_on_node_a("ds", "100m")], waiting)
    keys = [f"default/web-{i}" for i in range(3)]
    assert overcommitted(projection, "node-a", keys) == []


def test_when_others_took_a_nodes_slack_the_smallest_nominated_pods_that_fit_keep_their_nomination() -> None:
    waiting = [pending_pod("web-0", "2"), pending_pod("web-1", "1"), pending_pod("web-2", "1")]
    # another claim's pod landed on node-a before the nominations were read: 2.5 CPUs left for 4 nominated
    projection = _waiting_on_node_a(FOUR_CPUS, [_running_on_node_a("intruder", "1500m")], waiting)
    keys = ["default/web-0", "default/web-1", "default/web-2"]
    assert overcommitted(projection, "node-a", keys) == ["default/web-0"]


def test_a_node_whose_room_cannot_be_read_keeps_every_nomination() -> None:
    waiting = [pending_pod("web-0", "2")]
    projection = _waiting_on_node_a(None, [_running_on_node_a("intruder", "8")], waiting)
    assert overcommitted(projection, "node-a", ["default/web-0"]) == []


@contextlib.asynccontextmanager
async def both_pods_nominated_to_node_a() -> AsyncIterator[tuple[Kube, Any, InMemoryEventLog]]:
    """web-0 and web-1 planned on one claim, nominated to its Node node-a (2.5 CPUs), initialized; the
    scheduler running: (kube, runtime, event log)."""
    async with running_sandbox(controllers=False) as sandbox:
        kube = await load_kube(str(sandbox.workload_kubeconfig))
        try:
            joining = joined(ready=True)
            joining["status"]["allocatable"] = {"cpu": "2500m", "memory": "16Gi", "pods": "110"}
            _, node, event_log = await two_pods_offered_and_node_a(kube, joining)
            async with running(SchedulerDecider(), SchedulerExecutor(kube), event_log) as runtime:
                claim = await launch_and_join(runtime, event_log, node)  # one claim for both pods
                await until(lambda: runtime.state.claims[claim].initialized, what="the claim initialized")
                yield kube, runtime, event_log
        finally:
            await kube.close()


async def test_a_tick_clears_the_nominations_a_node_can_no_longer_honour_and_keeps_the_others() -> None:
    async with both_pods_nominated_to_node_a() as (kube, runtime, event_log):
        # another claim's pod took node-a's slack before the nominations were read: 1.5 CPUs left
        intruder = _running_on_node_a("intruder", "1")
        landed = build_event(ev.BoundPodObserved, "intruder", change="added", pod=intruder)
        await event_log.publish(registry.subject_of(landed), landed)
        await until(lambda: "default/intruder" in runtime.state.bound_pods, what="the intruder")
        await runtime.tick(datetime.now(UTC) + timedelta(seconds=2))
        web_0 = await kube.get(PODS, "web-0", namespace="default")
        web_1 = await kube.get(PODS, "web-1", namespace="default")
    assert web_0["status"]["nominatedNodeName"] == "node-a"
    assert "nominatedNodeName" not in web_1["status"]


async def test_the_tick_weighs_nominations_only_while_no_decision_holds_the_state() -> None:
    """Weighing nominations parses pods and Nodes into the state's caches, which a plan deciding in a worker
    thread reads meanwhile (the runtime's lock is held for it): so the tick weighs them under that lock."""
    async with both_pods_nominated_to_node_a() as (_, runtime, _):
        state = runtime.state
        parsed_under_lock: list[bool] = []
        parse = state.parse

        def watched_parse(kind: str, key: str, obj: Any) -> Any:
            parsed_under_lock.append(runtime.lock.locked())
            return parse(kind, key, obj)

        state.parse = watched_parse
        await runtime.executor.ticked(datetime.now(UTC) + timedelta(seconds=2))
    assert parsed_under_lock and all(parsed_under_lock)


class GatedKube(Kube):
    """The sandbox's API, holding every pod status patch (a nomination) until ``gate`` opens: an API server
    too busy to answer them."""

    def __init__(self, inner: Kube) -> None:
        super().__init__(inner.api)
        self.gate = asyncio.Event()
        self.in_flight = 0
        self.most_in_flight = 0

    async def request(self, method: str, path: str, **kwargs: Any) -> Any:
        if not (method == "PATCH" and "/pods/" in path and path.endswith("/status")):
            return await super().request(method, path, **kwargs)
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            await self.gate.wait()
            return await super().request(method, path, **kwargs)
        finally:
            self.in_flight -= 1


async def test_a_wave_of_nominations_leaves_connections_for_the_registrations_node_patches() -> None:
    # a thousand nominations at once filled the client's connections, and each Node patch waited behind
    # every nomination sent before it: the Nodes of a wave registered together at its end
    async with running_sandbox(controllers=False) as sandbox:
        client = await load_kube(str(sandbox.workload_kubeconfig))
        kube = GatedKube(client)
        try:
            await client.create(NODES, {"apiVersion": "v1", "kind": "Node", **joined(ready=True)})
            executor = SchedulerExecutor(kube)
            allowed = client.api.configuration.connection_pool_maxsize - CONNECTIONS_KEPT_FROM_NOMINATIONS
            wave = [
                asyncio.create_task(executor._nominate_pod(f"default/web-{i}", "node-a"))
                for i in range(allowed + 30)
            ]
            await until(lambda: kube.in_flight == allowed, what="the nominations in flight")
            await executor._patch_node("node-a", {"metadata": {"labels": {"registered": "yes"}}})
            stored = await client.get(NODES, "node-a")
            assert stored["metadata"]["labels"]["registered"] == "yes"
            kube.gate.set()
            await asyncio.gather(*wave, return_exceptions=True)  # the pods do not exist: 404s, as advice
            assert kube.most_in_flight == allowed
        finally:
            await client.close()


def test_a_pod_marked_with_its_planned_node_keeps_the_mark_after_the_nomination_check_read_it() -> None:
    """The service's nomination check (its tick) reads the pending pods as the log has them, while a long
    plan may be running in a worker thread; the plan's copy marked with the Node it takes first is read apart
    from that, so the plan still places it there first (a scale run's live plan lost the mark, its replay
    kept it, and the two bought different claims)."""
    projection = _waiting_on_node_a(FOUR_CPUS, [], [pending_pod("web-0", "1")])
    pod = projection.pending["default/web-0"]
    marked = {**pod, "metadata": {**pod["metadata"], "annotations": {PLANNED_NODE: "node-a"}}}

    assert overcommitted(projection, "node-a", ["default/web-0"]) == []  # the tick's check read the pod
    plan_input, _, _ = planner.cluster_input(projection, [marked], datetime.now(UTC))

    assert [(p.name, p.planned_node) for p in plan_input.pods if not p.node_name] == [("web-0", "node-a")]
