"""Pending pods become PendingBatch events: a real nats-server, the sandbox's kube-scheduler,
kubernetes-asyncio."""

from __future__ import annotations

from typing import Any

import pytest

from devtools.sandbox.testing import running_sandbox
from proto.events import PendingBatch
from tenon.runtime.eventlog.jetstream import JetStreamEventLog
from tests.pod_watcher.support import running_watcher, wait_for_events
from tests.sandbox.controller_support import condition, deployment, node, pod
from tests.support.waiting import until

pytestmark = pytest.mark.integration


def unschedulable(p: dict[str, Any] | None) -> bool:
    c = condition(p, "PodScheduled") if p else None
    return bool(c and c.get("status") == "False" and c.get("reason") == "Unschedulable")


async def test_a_deployment_of_8_pods_is_one_batch_without_daemonset_or_deleted_pods(
    jetstream_log: JetStreamEventLog,
) -> None:
    async with running_sandbox("fast") as sandbox:
        store = sandbox.workload_store
        pods_rt = store.resource("v1", "Pod")
        # a node too small for anything, so the DaemonSet makes a pod that is Unschedulable too
        store.create(store.resource("v1", "Node"), node("tiny", cpu="500m"))
        store.create(
            store.resource("apps/v1", "DaemonSet"),
            {
                "apiVersion": "apps/v1",
                "kind": "DaemonSet",
                "metadata": {"name": "agent", "namespace": "default"},
                "spec": {
                    "selector": {"matchLabels": {"app": "agent"}},
                    "template": {
                        "metadata": {"labels": {"app": "agent"}},
                        "spec": {
                            "containers": [
                                {"name": "a", "image": "a:1", "resources": {"requests": {"cpu": "1"}}}
                            ]
                        },
                    },
                },
            },
        )
        await until(
            lambda: any(unschedulable(p) for p in store.list(pods_rt, "default")[0]),
            what="the DaemonSet pod Unschedulable",
        )

        async with running_watcher(sandbox, jetstream_log, batch_idle=1.0, rebatch=300.0):
            doomed = pod("doomed", cpu="1", labels={"app": "doomed"})
            doomed["metadata"]["finalizers"] = ["tests.tenon.dev/hold"]
            store.create(pods_rt, doomed)
            store.create(store.resource("apps/v1", "Deployment"), deployment("inflate", 8, cpu="1"))
            await until(lambda: unschedulable(store.get(pods_rt, "doomed", "default")), what="doomed pending")
            store.delete(pods_rt, "doomed", "default")  # held by its finalizer: being deleted, still there

            batches = await wait_for_events(
                jetstream_log, PendingBatch, lambda b: len(b) >= 1, what="a batch"
            )
            batch = batches[0]
            names = sorted(p["metadata"]["name"] for p in batch.pods)
            assert len(names) == 8 and all(n.startswith("inflate-") for n in names)
            assert batch.window_closed_by == "idle"
            assert (batch.decided_at - batch.window_opened_at).total_seconds() >= 1.0
            last_joined = max(a.joined_at for a in batch.arrivals)
            assert (batch.decided_at - last_joined).total_seconds() == 1.0  # closed at the idle deadline
            assert batch.batch_id == batch.id == batch.correlation_id
            for p in batch.pods:  # what the scheduler needs of each pod
                assert p["spec"]["containers"][0]["resources"]["requests"] == {"cpu": "1"}
                assert unschedulable(p) and "managedFields" not in p["metadata"]
                assert p["metadata"]["uid"]

            store.create(pods_rt, pod("late", cpu="1"))
            batches = await wait_for_events(
                jetstream_log, PendingBatch, lambda b: len(b) >= 2, what="the next batch"
            )
            # the next batch holds only the late pod: the burst was one window, none of it batched twice
            assert [[p["metadata"]["name"] for p in b.pods] for b in batches[1:]] == [["late"]]
            assert batches[1].id != batches[0].id


async def test_pods_still_pending_are_offered_again_after_the_rebatch_delay(
    jetstream_log: JetStreamEventLog,
) -> None:
    async with running_sandbox("fast") as sandbox:
        store = sandbox.workload_store
        async with running_watcher(sandbox, jetstream_log, batch_idle=0.2, batch_max=1.0, rebatch=1.0):
            store.create(store.resource("v1", "Pod"), pod("stuck", cpu="1"))
            batches = await wait_for_events(
                jetstream_log, PendingBatch, lambda b: len(b) >= 2, timeout=5, what="the pod batched twice"
            )
            assert [[p["metadata"]["name"] for p in b.pods] for b in batches[:2]] == [["stuck"], ["stuck"]]
            gap = (batches[1].window_opened_at - batches[0].decided_at).total_seconds()
            assert gap == 1.0  # it joined again exactly at its re-batch time


async def test_a_window_larger_than_one_message_goes_out_in_parts(jetstream_log: JetStreamEventLog) -> None:
    async with running_sandbox("fast") as sandbox:
        store = sandbox.workload_store
        async with running_watcher(sandbox, jetstream_log, batch_idle=0.3, batch_max_bytes=12_288):
            store.create(store.resource("apps/v1", "Deployment"), deployment("wide", 30, cpu="1"))
            batches = await wait_for_events(
                jetstream_log,
                PendingBatch,
                lambda b: sum(len(x.pods) for x in b) >= 30,
                what="all 30 pods batched",
            )
            names = [p["metadata"]["name"] for b in batches for p in b.pods]
            assert sorted(names) == sorted(set(names)) and len(names) == 30
            assert len(batches) > 1 and len({b.window_opened_at for b in batches}) == 1
            assert all(len(b.pods) < 30 for b in batches)
            assert [(b.window_part, b.window_parts) for b in batches] == [
                (i + 1, len(batches)) for i in range(len(batches))
            ]
