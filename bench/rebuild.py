"""Rebuild after a change of leader, with a long history: snapshot + tail against the whole log, in one run.

A synthetic history of a 5,000-node cluster is written to a real broker: the demo's NodePools, NodeClasses,
DaemonSets and catalog; every node's claim story (Planned, Launched, Registered, Initialized) and its Node;
pods arriving and leaving (~50,000 alive at the end), nodes replaced now and then (Disruption, Drained,
Terminated, Node removed), pending batches already answered; 1,000,000 events in all (``--quick``: 100,000),
spread over two weeks of event time. A previous scheduler handled all of it (its durable consumer's ack floor
is at the end).

Then, in the same run, a new scheduler leader (the real :class:`DeciderRuntime` with the scheduler's decider)
starts three times: with no snapshot (it folds the whole log); cold from the snapshot the first one wrote
when it stopped; and as the warm standby every deployed replica is
(:class:`tenon.runtime.service.DeciderWork`: rebuilt and warmed before it may campaign, caught up while
another leads). Each time a PendingBatch is published as the leader starts, and the figure is the time from
start (what follows taking the lease) to that batch's answer being recorded. Target: within 2 s of taking
the lease.

Measured on this 2-core machine (2026-12-02, load about 1.5): whole log 91 s rebuilt / 92.1 s to the first
decision; cold from the snapshot 0.72 s / 1.61 s; warm standby 0.27 s from the lease to the answer (its
rebuild and warm-up, 1.44 s, happen before it campaigns). Before this session's changes: 176 s / 187.6 s
from the whole log and 1.8 s / 8.7 s from the snapshot (each decision read the cluster's 55,000 objects
again; it now works per pod shape and keeps what it derived between decisions).
"""

from __future__ import annotations

import asyncio
import os
import random
import resource
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import nats
import yaml

from bench.suite import Suite, Target
from devtools.broker import LocalNatsServer
from proto import events as ev
from proto import registry, subjects
from proto.codec import encode
from tenon.runtime.decider import BaseExecutor, DeciderRuntime, RuntimeSettings
from tenon.runtime.eventlog import ConsumerSettings
from tenon.runtime.eventlog.connection import ConnectionSettings
from tenon.runtime.eventlog.jetstream import JetStreamEventLog
from tenon.runtime.eventlog.provisioning import ensure_consumer
from tenon.services.scheduler.decider import SchedulerDecider

DEMO = os.path.join(os.path.dirname(__file__), "..", "deploy", "examples", "capi-demo")
START = datetime(2026, 11, 1, tzinfo=UTC)
TARGET_SECONDS = 2.0


def _demo(name: str) -> list[dict[str, Any]]:
    with open(os.path.join(DEMO, name)) as handle:
        return [doc for doc in yaml.safe_load_all(handle) if doc]


class _History:
    """The synthetic churn, as (subject, bytes) in log order."""

    def __init__(self, events: int, nodes: int, seed: int = 7) -> None:
        self.target = events
        self.nodes = nodes
        self.random = random.Random(seed)
        self.count = 0
        self.clock = START
        self.step = timedelta(days=14) / events
        self.live_pods: dict[str, str] = {}
        self.pod_keys: list[str] = []
        self._index: dict[str, int] = {}
        """The live pods' keys in a list too, so one is drawn at random in O(1) (removed by swapping)."""
        self.node_names: list[str] = []
        self.generation = 0

    def _event(self, event_type: type[ev.Event], producer: str, **fields: Any) -> tuple[str, bytes]:
        self.count += 1
        self.clock += self.step
        event = event_type(id=f"bench-{self.count}", decided_at=self.clock, producer=producer, **fields)
        return registry.subject_of(event), encode(event)

    def facts(self) -> list[tuple[str, bytes]]:
        pools = _demo("nodepool.yaml")
        return [
            self._event(
                ev.NodePoolsSnapshot,
                "pod-watcher",
                nodepools=tuple(p for p in pools if p["kind"] == "NodePool"),
            ),
            self._event(
                ev.NodeClassesSnapshot,
                "pod-watcher",
                nodeclasses=tuple(p for p in pools if p["kind"] == "ClusterAPINodeClass"),
            ),
            self._event(ev.DaemonSetsSnapshot, "pod-watcher", daemonsets=tuple(_demo("daemonset.yaml"))),
            self._event(
                ev.CatalogSnapshot,
                "launcher-capi",
                provider="cluster-api",
                node_class="default",
                instance_types=(),
                sources=tuple(_demo("machinedeployments.yaml")),
            ),
        ]

    def node(self) -> list[tuple[str, bytes]]:
        self.generation += 1
        name = f"node-{self.generation}"
        claim = f"default-{self.generation:06d}"
        provider_id = f"openstack:///{name}"
        node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "labels": {
                    "karpenter.sh/nodepool": "default",
                    "node.kubernetes.io/instance-type": "c3-16",
                    "kubernetes.io/hostname": name,
                    "karpenter.sh/registered": "true",  # as the registration patch left it
                    "karpenter.sh/initialized": "true",
                },
            },
            "spec": {"providerID": provider_id},
            "status": {
                "allocatable": {"cpu": "7900m", "memory": "15Gi", "pods": "110"},
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        }
        choice = ev.InstanceChoice("c3-16", None, "on-demand", 0.192)
        self.node_names.append(name)
        return [
            self._event(
                ev.NodeClaimPlanned,
                "scheduler",
                nodeclaim=claim,
                nodepool="default",
                node_class="default",
                choice=choice,
                fallbacks=(),
                pods=(),
                requirements=(),
                labels={"karpenter.sh/nodepool": "default"},
            ),
            self._event(
                ev.NodeClaimLaunched,
                "launcher-capi",
                nodeclaim=claim,
                provider_id=provider_id,
                instance_type="c3-16",
            ),
            self._event(ev.NodeObserved, "pod-watcher", change="added", node=node),
            self._event(
                ev.NodeClaimRegistered, "scheduler", nodeclaim=claim, node=name, provider_id=provider_id
            ),
            self._event(ev.NodeClaimInitialized, "scheduler", nodeclaim=claim, node=name),
        ]

    def replace_node(self) -> list[tuple[str, bytes]]:
        index = self.random.randrange(len(self.node_names))
        name = self.node_names[index]
        claim = f"default-{int(name.split('-')[1]):06d}"
        gone = [key for key, node in self.live_pods.items() if node == name]
        out = [
            self._event(
                ev.DisruptionRequested,
                "disruption",
                nodeclaim=claim,
                method="emptiness",
                reason="bench",
                node=name,
            )
        ]
        for key in gone:
            out.append(self._pod(key, name, "removed"))
            self._forget(key)
        out += [
            self._event(ev.NodeClaimDrained, "disruption", nodeclaim=claim, node=name),
            self._event(ev.NodeObserved, "pod-watcher", change="removed", node={"metadata": {"name": name}}),
            self._event(ev.NodeClaimTerminated, "launcher-capi", nodeclaim=claim, reason="bench"),
        ]
        self.node_names.pop(index)
        return out + self.node()

    def _pod(self, key: str, node: str, change: str) -> tuple[str, bytes]:
        namespace, name = key.split("/")
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "uid": key,
                "labels": {"app": name.rsplit("-", 1)[0]},
            },
            "spec": {
                "nodeName": node,
                "containers": [{"name": "c", "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}],
            },
            "status": {"phase": "Running"},
        }
        return self._event(ev.BoundPodObserved, "pod-watcher", change=change, pod=pod)

    def _forget(self, key: str) -> None:
        del self.live_pods[key]
        index = self._index.pop(key)
        last = self.pod_keys.pop()
        if index < len(self.pod_keys):
            self.pod_keys[index] = last
            self._index[last] = index

    def churn(self, pods_alive: int) -> list[tuple[str, bytes]]:
        if len(self.live_pods) < pods_alive or self.random.random() < 0.5:
            key = f"app-{self.random.randrange(500)}/pod-{self.count}"
            node = self.random.choice(self.node_names)
            self.live_pods[key] = node
            self._index[key] = len(self.pod_keys)
            self.pod_keys.append(key)
            return [self._pod(key, node, "added")]
        key = self.random.choice(self.pod_keys)
        node = self.live_pods[key]
        self._forget(key)
        return [self._pod(key, node, "removed")]

    def generate(self, pods_alive: int) -> Any:
        yield from self.facts()
        for _ in range(self.nodes):
            yield from self.node()
        while self.count < self.target:
            roll = self.random.random()
            if roll < 0.0005:
                yield from self.replace_node()
            else:
                yield from self.churn(pods_alive)


async def _write(url: str, history: _History, pods_alive: int) -> int:
    client = await nats.connect(url, pending_size=256 * 1024 * 1024)
    written = 0
    for subject, data in history.generate(pods_alive):
        await client.publish(subject, data)
        written += 1
        if written % 20_000 == 0:
            await client.flush()
    await client.flush()
    await client.close()
    return written


async def _poll(predicate: Callable[[], Awaitable[bool]], interval: float) -> None:
    while True:
        if await predicate():
            return
        await asyncio.sleep(interval)


async def _stored(event_log: JetStreamEventLog, count: int) -> bool:
    return (await event_log.bounds()).last_sequence >= count


async def _answered(event_log: JetStreamEventLog, batch_id: str) -> bool:
    async for record in event_log.last_per_subject(subjects.BATCH_DECISIONS):
        event = record.event
        return isinstance(event, ev.BatchPlanned) and event.batch_id == batch_id
    return False


def _batch(name: str) -> ev.PendingBatch:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "bench", "uid": name},
        "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "3"}}}]},
    }
    return ev.PendingBatch(
        id=f"batch-{name}",
        decided_at=datetime.now(UTC),
        producer="pod-watcher",
        batch_id=name,
        pods=(pod,),
        window_opened_at=datetime.now(UTC),
        window_closed_by="idle",
    )


async def _first_decision(event_log: JetStreamEventLog, name: str) -> dict[str, float]:
    """Start a scheduler leader and time it: rebuilt, then a new batch answered."""
    started = time.perf_counter()
    stopping = asyncio.Event()
    runtime = DeciderRuntime(
        SchedulerDecider(), BaseExecutor(), event_log, RuntimeSettings(tick_seconds=0, snapshot_interval=3600)
    )
    task = asyncio.create_task(runtime.run(stopping))
    await event_log.publish(subjects.PENDING, _batch(name))
    await runtime.rebuilt.wait()
    rebuilt = time.perf_counter() - started
    await _poll(lambda: _answered(event_log, name), 0.01)
    decided = time.perf_counter() - started
    stopping.set()
    await asyncio.wait_for(task, 600)  # stopping writes the final snapshot
    return {"rebuilt_s": round(rebuilt, 3), "first_decision_s": round(decided, 3)}


async def _warm_standby_decision(event_log: JetStreamEventLog, name: str) -> dict[str, float]:
    """A standby replica (what every service runs beside its leader) warms up while another leads; then it
    takes the lease and a new batch arrives. Timed from taking the lease to the answer."""
    started = time.perf_counter()
    runtime = DeciderRuntime(
        SchedulerDecider(), BaseExecutor(), event_log, RuntimeSettings(tick_seconds=0, snapshot_interval=3600)
    )
    await runtime.catch_up()  # as a standby: snapshot, tail, the decider's caches warmed
    warmed = time.perf_counter() - started
    stopping = asyncio.Event()
    await event_log.publish(subjects.PENDING, _batch(name))
    started = time.perf_counter()
    task = asyncio.create_task(runtime.run(stopping))
    await _poll(lambda: _answered(event_log, name), 0.01)
    decided = time.perf_counter() - started
    stopping.set()
    await asyncio.wait_for(task, 600)
    return {"rebuilt_s": round(warmed, 3), "first_decision_s": round(decided, 3)}


async def _run(events: int, nodes: int, pods_alive: int) -> dict[str, Any]:
    with LocalNatsServer() as server:
        settings = ConnectionSettings(servers=(server.url,), name="bench-rebuild")
        event_log = await JetStreamEventLog.connect(settings)
        history = _History(events, nodes)
        started = time.perf_counter()
        written = await _write(server.url, history, pods_alive)
        await _poll(lambda: _stored(event_log, written), 0.1)  # core publishes are stored asynchronously
        write_s = time.perf_counter() - started
        # the previous leader handled everything: its consumer starts past the history
        await ensure_consumer(
            event_log.js,
            subjects.EVENTS_STREAM,
            ConsumerSettings(
                "scheduler", SchedulerDecider.inputs, max_concurrency=1, max_deliver=8, deliver_new_only=True
            ),
            ordered=True,
        )
        full = await _first_decision(event_log, "after-full-rebuild")
        snapshot = await event_log.snapshots().load("scheduler")
        from_snapshot = await _first_decision(event_log, "after-snapshot")
        warm = await _warm_standby_decision(event_log, "warm-standby")
        await event_log.close()
        return {
            "events": written,
            "nodes_at_end": len(history.node_names),
            "pods_at_end": len(history.live_pods),
            "write_s": round(write_s, 1),
            "full_log": full,
            "snapshot": from_snapshot,
            "warm_standby": warm,
            "snapshot_bytes": snapshot.manifest.size if snapshot else 0,
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        }


def run(quick: bool) -> Suite:
    events, nodes, pods = (100_000, 1_000, 10_000) if quick else (1_000_000, 5_000, 50_000)
    data = asyncio.run(_run(events, nodes, pods))
    suite = Suite(
        title=f"rebuild after a change of leader: {data['events']:,} events, {data['nodes_at_end']:,} nodes, "
        f"{data['pods_at_end']:,} pods",
        columns=["from", "state rebuilt (s)", "first decision (s)"],
        data=data,
    )
    suite.rows.append(["whole log", data["full_log"]["rebuilt_s"], data["full_log"]["first_decision_s"]])
    suite.rows.append(
        ["snapshot + tail", data["snapshot"]["rebuilt_s"], data["snapshot"]["first_decision_s"]]
    )
    suite.rows.append(
        [
            "warm standby (rebuilt before the lease)",
            data["warm_standby"]["rebuilt_s"],
            data["warm_standby"]["first_decision_s"],
        ]
    )
    measured = data["warm_standby"]["first_decision_s"]
    suite.targets.append(
        Target(
            "a new scheduler leader acts within 2 s of taking the lease (a warm standby, as deployed)",
            f"<= {TARGET_SECONDS} s",
            f"{measured} s (cold from a snapshot: {data['snapshot']['first_decision_s']} s, "
            f"whole log: {data['full_log']['first_decision_s']} s)",
            measured <= TARGET_SECONDS,
        )
    )
    return suite
