"""The pod-watcher's metrics follow its watches: ``karpenter_scheduler_queue_depth`` is the pods waiting to be
scheduled, ``karpenter_pods_state`` has a series per pod that exists."""

from __future__ import annotations

from devtools.sandbox.testing import running_sandbox
from tenon.runtime.eventlog.memory import InMemoryEventLog
from tenon.runtime.observability import metrics
from tests.pod_watcher.support import running_watcher
from tests.pod_watcher.test_observations import unschedulable_pod
from tests.support.waiting import until


def queue_depth() -> float | None:
    return metrics.REGISTRY.get_sample_value(
        "karpenter_scheduler_queue_depth", {"controller": "provisioner", "scheduling_id": ""}
    )


def pod_series(name: str) -> int:
    [family] = [f for f in metrics.REGISTRY.collect() if f.name == "karpenter_pods_state"]
    return sum(1 for s in family.samples if s.labels.get("name") == name)


async def test_pending_pods_are_the_queue_and_each_pod_has_its_state_series() -> None:
    async with running_sandbox(controllers=False) as sandbox:
        store = sandbox.workload_store
        pods = store.resource("v1", "Pod")
        for index in range(3):
            created = store.create(pods, unschedulable_pod(f"queued-{index}", uid=f"u-queued-{index}"))
            created["status"] = unschedulable_pod()["status"]  # as the kube-scheduler marks it
            store.update(pods, created, "status")
        async with running_watcher(sandbox, InMemoryEventLog()):
            await until(lambda: queue_depth() == 3, 10, what="three pods in the queue")
            assert all(pod_series(f"queued-{index}") == 1 for index in range(3))
            store.delete(pods, "queued-0", "default")
            await until(lambda: queue_depth() == 2, 10, what="the deleted pod out of the queue")
            assert pod_series("queued-0") == 0 and pod_series("queued-1") == 1
