"""Two replicas through ``tenon.runtime.service.serve``: one publishes; when it stops the other takes over, repeating
nothing it already published and missing nothing that changes afterwards."""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from typing import Any

import pytest

from devtools.sandbox.testing import running_sandbox
from proto import subjects
from proto.events import BoundPodObserved, Event, NodeObserved, NodePoolsSnapshot, PendingBatch
from tenon.runtime.eventlog.connection import ConnectionSettings
from tenon.runtime.eventlog.jetstream import JetStreamEventLog
from tenon.runtime.service import ServiceContext, serve
from tenon.services.pod_watcher.service import SERVICE_NAME, PodWatcherSettings, make_work
from tests.pod_watcher.support import logged, wait_for_events, wait_until
from tests.sandbox.controller_support import deployment, node

pytestmark = pytest.mark.integration


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


async def test_two_replicas_one_leader_takeover_repeats_nothing(
    nats_settings: ConnectionSettings, jetstream_log: JetStreamEventLog
) -> None:
    async with running_sandbox("fast") as sandbox:
        store = sandbox.workload_store
        settings = PodWatcherSettings(
            kubeconfig=str(sandbox.workload_kubeconfig),
            batch_idle_seconds=0.3,
            batch_max_seconds=3.0,
            rebatch_seconds=30.0,
        )
        contexts: dict[str, ServiceContext] = {}
        work = make_work(settings)

        async def recorded_work(ctx: ServiceContext) -> None:
            contexts[ctx.identity] = ctx
            await work(ctx)

        replicas = {
            identity: asyncio.create_task(
                serve(SERVICE_NAME, recorded_work, connection=nats_settings, lease_ttl=1.5, identity=identity)
            )
            for identity in ("replica-a", "replica-b")
        }
        try:
            store.create(store.resource("v1", "Node"), node("small", cpu="500m"))  # too small for the pods
            store.create(store.resource("apps/v1", "Deployment"), deployment("inflate", 3, cpu="1"))
            store.create(
                store.resource("karpenter.sh/v1", "NodePool"),
                {
                    "apiVersion": "karpenter.sh/v1",
                    "kind": "NodePool",
                    "metadata": {"name": "general"},
                    "spec": {"template": {"spec": {"requirements": []}}},
                },
            )
            await wait_for_events(
                jetstream_log,
                PendingBatch,
                lambda b: sum(len(x.pods) for x in b) == 3,
                what="the 3 pods batched",
            )
            await wait_for_events(
                jetstream_log, NodePoolsSnapshot, lambda s: len(s) >= 1, what="a NodePool snapshot"
            )
            await wait_until(
                lambda: any(
                    c.get("type") == "Ready" and c.get("status") == "True"
                    for c in store.get(store.resource("v1", "Node"), "small")["status"]["conditions"]
                ),
                what="the node Ready (so the kubelet changes nothing during the takeover)",
            )
            await asyncio.sleep(0.5)
            assert len(contexts) == 1  # only the leader ever worked
            (leader,) = contexts
            before = await all_events(jetstream_log)

            stopped_at = asyncio.get_running_loop().time()
            contexts[leader].stopping.set()
            await asyncio.wait_for(replicas[leader], 10)
            follower = await wait_until(
                lambda: next((i for i in contexts if i != leader), None),
                timeout=5,
                what="the other replica taking over",
            )
            took_over = asyncio.get_running_loop().time() - stopped_at
            assert took_over < 3.0

            await asyncio.sleep(1.5)  # the new leader recovered, listed everything and settled
            after_takeover = await all_events(jetstream_log)
            assert [type(e).__name__ for e in after_takeover[len(before) :]] == []

            store.patch(
                store.resource("v1", "Node"),
                "small",
                None,
                {"metadata": {"labels": {"team": "blue"}}},
                "application/merge-patch+json",
            )
            await wait_for_events(
                jetstream_log,
                NodeObserved,
                lambda e: any(x.node["metadata"]["labels"].get("team") == "blue" for x in e),
                what="the new leader publishing a change made after the takeover",
            )

            everything = await all_events(jetstream_log)
            keys = observation_keys(everything)
            assert len(keys) == len(set(keys))  # no observation twice
            batched = Counter(
                p["metadata"]["uid"] for b in await logged(jetstream_log, PendingBatch) for p in b.pods
            )
            assert set(batched.values()) == {1}  # no pod batched twice (the re-batch delay has not passed)
            assert len(await logged(jetstream_log, NodePoolsSnapshot)) == 1
            assert follower != leader
        finally:
            for ctx in contexts.values():
                ctx.stopping.set()
            for task in replicas.values():
                if not task.done():
                    task.cancel()
            results: list[Any] = await asyncio.gather(*replicas.values(), return_exceptions=True)
            with contextlib.suppress(Exception):
                for result in results:
                    if isinstance(result, Exception):
                        raise result
