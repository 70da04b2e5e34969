"""The event log on a 3-node JetStream cluster (R3 streams, every client with its own identity) loses its
stream leader to SIGKILL in the middle of a 1,000-pod burst: nothing acknowledged is lost, nothing is applied
twice, and the scheduler goes on planning.

The pod-watcher's part is played by the test (20 PendingBatches of 50 pods, each published until the broker
acknowledges it, as the pod-watcher retries); the scheduler runs in-process on its own connection. The leader
is killed once 6 batches are acknowledged and the scheduler has answered the first: the remaining 14 are
published through the election while the scheduler works through the first ones."""

from __future__ import annotations

import asyncio
import copy
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import nats.errors
import yaml

from devtools.broker import LocalNatsCluster
from devtools.nats_permissions import Identities
from proto import events as ev
from proto import subjects
from tenon.runtime.decider import BaseExecutor
from tenon.runtime.eventlog import EventLogError, PublishResult
from tenon.runtime.eventlog.connection import ConnectionSettings
from tenon.runtime.eventlog.factories import make_event
from tenon.runtime.eventlog.jetstream import JetStreamEventLog
from tenon.runtime.eventlog.provisioning import default_streams
from tenon.services.scheduler.decider import SchedulerDecider
from tests.support.services import running
from tests.support.waiting import until

DEMO = Path(__file__).parents[2] / "deploy" / "examples" / "capi-demo"
BATCHES = 20
PODS_PER_BATCH = 50
KILL_AFTER = 6
RETRYABLE = (nats.errors.Error, EventLogError, TimeoutError, OSError)


def demo(name: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all((DEMO / name).read_text()) if doc]


async def connect(cluster: LocalNatsCluster, identities: Identities, user: str) -> JetStreamEventLog:
    settings = ConnectionSettings(
        servers=cluster.urls, name=f"failover-{user}", user=user, password=identities.passwords[user]
    )
    return await JetStreamEventLog.connect(
        settings, default_streams(replicas=3), provision=user != "operator"
    )


async def published(
    log: JetStreamEventLog, subject: str, event: ev.Event, timeout: float = 60.0
) -> PublishResult:
    """Publish until the broker acknowledges (the same event id each time: a repeat is dropped as one)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        try:
            return await log.publish(subject, event)
        except RETRYABLE:
            if asyncio.get_running_loop().time() > deadline:
                raise
            await asyncio.sleep(0.2)


async def seed(pod_watcher: JetStreamEventLog, launcher: JetStreamEventLog) -> None:
    """The CAPI demo's NodePool (without its CPU limit) and catalog (MachineDeployments up to 200 each)."""
    nodepools = [d for d in demo("nodepool.yaml") if d["kind"] == "NodePool"]
    for nodepool in nodepools:
        nodepool["spec"].pop("limits", None)
    nodeclasses = [d for d in demo("nodepool.yaml") if d["kind"] == "ClusterAPINodeClass"]
    sources = copy.deepcopy(demo("machinedeployments.yaml"))
    for md in sources:
        md["metadata"]["annotations"]["cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size"] = "200"

    def observed(event_type: type[ev.Event], **fields: Any) -> ev.Event:
        return make_event(event_type, producer="pod-watcher", key=(event_type.__name__,), **fields)

    await published(
        pod_watcher, subjects.NODEPOOLS, observed(ev.NodePoolsSnapshot, nodepools=tuple(nodepools))
    )
    await published(
        pod_watcher, subjects.NODECLASSES, observed(ev.NodeClassesSnapshot, nodeclasses=tuple(nodeclasses))
    )
    await published(pod_watcher, subjects.DAEMONSETS, observed(ev.DaemonSetsSnapshot, daemonsets=()))
    catalog = make_event(
        ev.CatalogSnapshot,
        producer="launcher-capi",
        key=("catalog",),
        provider="cluster-api",
        node_class="default",
        instance_types=(),
        sources=tuple(sources),
    )
    await published(launcher, subjects.catalog("default"), catalog)


def pending_pod(batch: int, index: int) -> dict[str, Any]:
    name = f"burst-{batch}-{index}"
    requests = {"cpu": "100m", "memory": "128Mi"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}", "labels": {"app": "burst"}},
        "spec": {"containers": [{"name": "c", "image": "pause", "resources": {"requests": requests}}]},
        "status": {
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
        },
    }


def pending_batch(batch: int) -> ev.PendingBatch:
    return make_event(
        ev.PendingBatch,
        producer="pod-watcher",
        key=("burst", batch),
        batch_id=f"burst-{batch}",
        pods=tuple(pending_pod(batch, i) for i in range(PODS_PER_BATCH)),
        window_opened_at=datetime.now(UTC),
        window_closed_by="idle",
    )


async def stream_leader(operator: JetStreamEventLog) -> str | None:
    """The node that leads the events stream now (None while it is being elected)."""
    try:
        info = await operator.js.stream_info(subjects.EVENTS_STREAM)
    except RETRYABLE:
        return None
    return info.cluster.leader if info.cluster is not None else None


async def everything(operator: JetStreamEventLog) -> list[tuple[int, ev.Event]] | None:
    """Every event in the log with its sequence (None when the cluster could not answer: an election)."""
    try:
        return [(r.sequence, r.event) async for r in operator.read() if r.event is not None]
    except RETRYABLE:
        return None


async def test_the_stream_leader_killed_under_a_1000_pod_burst(
    nats_cluster: LocalNatsCluster, cluster_identities: Identities
) -> None:
    pod_watcher = await connect(nats_cluster, cluster_identities, "pod-watcher")
    launcher = await connect(nats_cluster, cluster_identities, "launcher-capi")
    scheduler = await connect(nats_cluster, cluster_identities, "scheduler")
    operator = await connect(nats_cluster, cluster_identities, "operator")
    try:
        info = await operator.js.stream_info(subjects.EVENTS_STREAM)
        assert info.config.num_replicas == 3
        await seed(pod_watcher, launcher)
        acked: dict[str, int] = {}
        batches = [pending_batch(b) for b in range(BATCHES)]
        async with running(SchedulerDecider(), BaseExecutor(), scheduler, tick_seconds=0.5) as runtime:
            for batch in batches[:KILL_AFTER]:
                acked[batch.id] = (await published(pod_watcher, subjects.PENDING, batch)).sequence
            # the scheduler follows the burst (its consumer exists, it answered the first batch): kill now
            first = acked[batches[0].id]
            await until(lambda: runtime.handled >= first, 30, what="the scheduler following")
            killed = await until(lambda: stream_leader(operator), what="the stream's leader")
            nats_cluster.kill(killed)
            for batch in batches[KILL_AFTER:]:
                acked[batch.id] = (await published(pod_watcher, subjects.PENDING, batch)).sequence

            async def every_batch_answered() -> list[tuple[int, ev.Event]] | None:
                events = await everything(operator)
                if events is None:
                    return None
                answered = {e.batch_id for _, e in events if isinstance(e, ev.BatchPlanned)}
                return events if answered >= {b.batch_id for b in batches} else None

            events = await until(
                every_batch_answered, 90, interval=0.5, what="a BatchPlanned for every batch"
            )
            new_leader = await until(lambda: stream_leader(operator), what="the stream's new leader")
            assert runtime.refused == 0

        assert new_leader != killed
        # nothing acknowledged is lost, and nothing is stored twice
        stored_at: dict[str, list[int]] = {}
        for sequence, event in events:
            stored_at.setdefault(event.id, []).append(sequence)
        assert {event_id: stored_at.get(event_id) for event_id in acked} == {
            event_id: [sequence] for event_id, sequence in acked.items()
        }
        assert [i for i, sequences in stored_at.items() if len(sequences) > 1] == []
        # nothing applied twice: one answer per batch, one Planned per claim, every pod on exactly one claim
        answers = [e.batch_id for _, e in events if isinstance(e, ev.BatchPlanned)]
        assert sorted(answers) == sorted(b.batch_id for b in batches)
        plans = [e for _, e in events if isinstance(e, ev.NodeClaimPlanned)]
        assert len({p.nodeclaim for p in plans}) == len(plans)
        claims = {p.nodeclaim for p in plans}
        answered = [e for _, e in events if isinstance(e, ev.BatchPlanned)]
        on_room = [placement for answer in answered for placement in answer.existing]
        assert {p.node for p in on_room if p.kind == "NodeClaim"} <= claims  # room on claims planned here
        placed = [pod for plan in plans for pod in plan.pods] + [placement.pod for placement in on_room]
        assert [u.pod for answer in answered for u in answer.unschedulable] == []
        assert len(placed) == len(set(placed)) == BATCHES * PODS_PER_BATCH
    finally:
        for log in (operator, scheduler, launcher, pod_watcher):
            await log.close()
