"""The pods a claim was bought for are nominated to its Node as it registers, before any pod can land there,
so the kube-scheduler keeps the plan; offered again all the same, a pod is planned as any pending pod."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from devtools.sandbox.testing import running_sandbox
from proto import events as ev
from proto import registry, subjects
from tenon.domain.projection import ClusterProjection
from tenon.runtime.eventlog.memory import InMemoryEventLog
from tenon.runtime.kube import NODES, PODS, Kube, load_kube
from tenon.services.scheduler.decider import SchedulerDecider
from tenon.services.scheduler.nominations import without_own_nomination
from tenon.services.scheduler.service import SchedulerExecutor
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


async def test_the_pods_planned_for_a_claim_are_nominated_to_its_node_before_its_taint_goes() -> None:
    async with running_sandbox(controllers=False) as sandbox:
        client = await load_kube(str(sandbox.workload_kubeconfig))
        kube = OrderedKube(client)
        try:
            pods = [pending_pod("web-0", "1"), pending_pod("web-1", "1")]
            for pod in pods:
                await client.create(PODS, pod, namespace="default")
            node = await client.create(NODES, {"apiVersion": "v1", "kind": "Node", **joined(ready=True)})
            event_log = InMemoryEventLog()
            for fact in demo_facts():
                await event_log.publish(registry.subject_of(fact), fact)
            await event_log.publish(subjects.PENDING, pending_batch("b", *pods, at=datetime.now(UTC)))
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


def test_a_pod_offered_again_on_its_own_nomination_is_planned_as_any_pending_pod() -> None:
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
    assert "nominatedNodeName" not in without_own_nomination(projection, ours)["status"]
    # a nomination tenon did not write (the kube-scheduler's preemption) still says the pod is being placed
    assert without_own_nomination(projection, preempting) is preempting
