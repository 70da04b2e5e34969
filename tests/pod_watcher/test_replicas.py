"""Two replicas through ``tenon.runtime.service.serve``: one publishes; when it stops the other takes over,
repeating nothing it already published and missing nothing that changes afterwards."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest

from devtools.broker import LocalNatsServer
from devtools.sandbox.testing import running_sandbox
from proto import subjects
from proto.events import BoundPodObserved, Event, NodeObserved, NodePoolsSnapshot, PendingBatch
from tenon.runtime.eventlog.jetstream import JetStreamEventLog
from tenon.runtime.service import ServiceContext, ServiceDefinition, serve
from tenon.services.pod_watcher.service import SERVICE, PodWatcherSettings, work
from tests.pod_watcher.support import logged, wait_for_events
from tests.sandbox.controller_support import deployment, node, pod
from tests.support.waiting import until

pytestmark = pytest.mark.integration

MERGE = "application/merge-patch+json"


def observation_keys(events: list[Event]) -> list[tuple[str, str, str, str]]:
    out: list[tuple[str, str, str, str]] = []
    for e in events:
        if isinstance(e, NodeObserved | BoundPodObserved):
            obj = e.node if isinstance(e, NodeObserved) else e.pod
            out.append(
                (type(e).__name__, obj["metadata"]["uid"], obj["metadata"]["resourceVersion"], e.change)
            )
    return out


async def all_events(event_log: JetStreamEventLog) -> list[Event]:
    return [e async for r in event_log.read(subjects.ALL_EVENTS) if (e := r.event) is not None]


def ready(obj: dict[str, Any]) -> bool:
    conditions = (obj.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


async def test_two_replicas_one_leader_takeover_repeats_nothing(
    nats_server: LocalNatsServer, jetstream_log: JetStreamEventLog
) -> None:
    async with running_sandbox("fast") as sandbox:
        store = sandbox.workload_store
        contexts: dict[str, ServiceContext] = {}

        async def recorded_work(ctx: ServiceContext, settings: PodWatcherSettings) -> None:
            contexts[ctx.identity] = ctx
            await work(ctx, settings)

        definition = ServiceDefinition(SERVICE.name, SERVICE.description, PodWatcherSettings, recorded_work)
        replicas = {
            identity: asyncio.create_task(
                serve(
                    definition,
                    PodWatcherSettings(
                        nats_url=nats_server.url,
                        kubeconfig=str(sandbox.workload_kubeconfig),
                        identity=identity,
                        lease_ttl=1.5,
                        health_port=0,
                        health_host="127.0.0.1",
                        batch_idle=0.3,
                        batch_max=3.0,
                        rebatch=30.0,
                    ),
                )
            )
            for identity in ("replica-a", "replica-b")
        }
        try:
            store.create(store.resource("v1", "Node"), node("small", cpu="500m"))  # too small for the pods
            store.create(store.resource("apps/v1", "Deployment"), deployment("inflate", 3, cpu="1"))
            pools = store.resource("karpenter.sh/v1", "NodePool")
            general = {
                "apiVersion": "karpenter.sh/v1",
                "kind": "NodePool",
                "metadata": {"name": "general"},
                "spec": {"limits": {"cpu": "100"}, "template": {"spec": {"requirements": []}}},
            }
            store.create(pools, general)
            await wait_for_events(
                jetstream_log,
                PendingBatch,
                lambda b: sum(len(x.pods) for x in b) == 3,
                what="the 3 pods batched",
            )
            await wait_for_events(
                jetstream_log, NodePoolsSnapshot, lambda s: len(s) == 1, what="a NodePool snapshot"
            )
            await wait_for_events(
                jetstream_log,
                NodeObserved,
                lambda e: bool(e) and ready(e[-1].node),
                what="the node published Ready (so the kubelet changes nothing during the takeover)",
            )
            assert len(contexts) == 1  # only the leader ever worked
            (leader,) = contexts
            before = await all_events(jetstream_log)

            contexts[leader].stopping.set()
            await asyncio.wait_for(replicas[leader], 10)
            follower = await until(
                lambda: next((i for i in contexts if i != leader), None), what="the other replica taking over"
            )

            # changes made after the takeover, one per path: each must be published, and nothing else
            store.patch(
                store.resource("v1", "Node"), "small", None, {"metadata": {"labels": {"team": "blue"}}}, MERGE
            )
            store.patch(pools, "general", None, {"spec": {"limits": {"cpu": "50"}}}, MERGE)
            store.create(store.resource("v1", "Pod"), pod("marker", cpu="1"))
            await wait_for_events(
                jetstream_log,
                NodeObserved,
                lambda e: any(x.node["metadata"]["labels"].get("team") == "blue" for x in e),
                what="the new leader publishing the node's change",
            )
            await wait_for_events(
                jetstream_log, NodePoolsSnapshot, lambda s: len(s) >= 2, what="the new NodePools content"
            )
            await wait_for_events(
                jetstream_log,
                PendingBatch,
                lambda b: any(p["metadata"]["name"] == "marker" for x in b for p in x.pods),
                what="the new pending pod batched",
            )

            after = (await all_events(jetstream_log))[len(before) :]
            assert Counter(type(e).__name__ for e in after) == {
                "NodeObserved": 1,
                "NodePoolsSnapshot": 1,
                "PendingBatch": 1,
            }
            [marker_batch] = [e for e in after if isinstance(e, PendingBatch)]
            assert [p["metadata"]["name"] for p in marker_batch.pods] == ["marker"]
            [pools_now] = [e for e in after if isinstance(e, NodePoolsSnapshot)]
            assert pools_now.nodepools[0]["spec"]["limits"] == {"cpu": "50"}

            keys = observation_keys(await all_events(jetstream_log))
            assert len(keys) == len(set(keys))  # no observation twice
            batched = Counter(
                p["metadata"]["uid"] for b in await logged(jetstream_log, PendingBatch) for p in b.pods
            )
            assert set(batched.values()) == {1}  # no pod batched twice (the re-batch delay has not passed)
            assert follower != leader
        finally:
            for ctx in contexts.values():
                ctx.stopping.set()
            for task in replicas.values():
                if not task.done():
                    task.cancel()
            results: list[Any] = await asyncio.gather(*replicas.values(), return_exceptions=True)
        # a replica ends by stopping cleanly (exit code 0) or, never having led, by being cancelled
        assert all(r == 0 or isinstance(r, asyncio.CancelledError) for r in results), results
