"""Nodes, bound pods, snapshots and watch expiry: what the scheduler's projection is built from."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from devtools.sandbox.testing import running_sandbox
from proto.events import BoundPodObserved, NodeClassesSnapshot, NodeObserved, NodePoolsSnapshot
from tenon.runtime.eventlog.jetstream import JetStreamEventLog
from tenon.runtime.kube.resources import Kube, KubeApiError
from tests.pod_watcher.support import logged, running_watcher, wait_for_events
from tests.sandbox.controller_support import node, pod
from tests.support.waiting import until

pytestmark = pytest.mark.integration

MERGE = "application/merge-patch+json"


def changes(events: list[NodeObserved]) -> list[tuple[str, str]]:
    return [(e.change, e.node["metadata"]["name"]) for e in events]


async def test_node_added_changed_heartbeat_ignored_removed_and_bound_pods(
    jetstream_log: JetStreamEventLog,
) -> None:
    async with running_sandbox(controllers=False) as sandbox:
        store = sandbox.workload_store
        nodes_rt, pods_rt = store.resource("v1", "Node"), store.resource("v1", "Pod")
        async with running_watcher(sandbox, jetstream_log):
            store.create(nodes_rt, node("n1", ready=True))
            await wait_for_events(
                jetstream_log, NodeObserved, lambda e: changes(e) == [("added", "n1")], what="n1 added"
            )

            store.patch(
                nodes_rt,
                "n1",
                None,
                {
                    "status": {
                        "conditions": [
                            {"type": "Ready", "status": "True", "lastHeartbeatTime": "2026-11-29T10:00:00Z"}
                        ]
                    }
                },
                MERGE,
                "status",
            )
            store.patch(nodes_rt, "n1", None, {"metadata": {"labels": {"team": "blue"}}}, MERGE)
            events = await wait_for_events(
                jetstream_log, NodeObserved, lambda e: len(e) >= 2, what="n1 changed"
            )
            assert changes(events) == [("added", "n1"), ("changed", "n1")]  # the heartbeat made no event
            assert events[1].node["metadata"]["labels"]["team"] == "blue"
            assert "managedFields" not in events[1].node["metadata"]

            store.create(pods_rt, pod("web-1", nodeName="n1"))
            bound = await wait_for_events(
                jetstream_log, BoundPodObserved, lambda e: len(e) >= 1, what="bound pod"
            )
            assert [(e.change, e.pod["metadata"]["name"], e.pod["spec"]["nodeName"]) for e in bound] == [
                ("added", "web-1", "n1")
            ]

            store.delete(nodes_rt, "n1")
            events = await wait_for_events(
                jetstream_log, NodeObserved, lambda e: len(e) >= 3, what="n1 removed"
            )
            assert changes(events)[2] == ("removed", "n1")


class WithoutEC2NodeClasses(Kube):
    """A cluster with Cluster API's NodeClass CRD but not AWS's: the API server answers 404 for the kind."""

    async def request(self, method: str, path: str, **kwargs: Any) -> Any:
        if "/ec2nodeclasses" in path:
            raise KubeApiError(
                404, "NotFound", "the server could not find the requested resource", method, path
            )
        return await super().request(method, path, **kwargs)


def nodepool(name: str, cpu_limit: str = "100") -> dict[str, Any]:
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": name},
        "spec": {
            "limits": {"cpu": cpu_limit},
            "template": {
                "spec": {
                    "nodeClassRef": {
                        "group": "karpenter.cluster.x-k8s.io",
                        "kind": "ClusterAPINodeClass",
                        "name": "default",
                    },
                    "requirements": [],
                }
            },
        },
    }


async def test_snapshots_on_change_only_and_an_absent_kind_does_not_block_the_others(
    jetstream_log: JetStreamEventLog,
) -> None:
    async with running_sandbox(controllers=False) as sandbox:
        store = sandbox.workload_store
        pools_rt = store.resource("karpenter.sh/v1", "NodePool")
        store.create(
            store.resource("karpenter.cluster.x-k8s.io/v1alpha1", "ClusterAPINodeClass"),
            {
                "apiVersion": "karpenter.cluster.x-k8s.io/v1alpha1",
                "kind": "ClusterAPINodeClass",
                "metadata": {"name": "default"},
                "spec": {},
            },
        )
        async with running_watcher(sandbox, jetstream_log, kube_class=WithoutEC2NodeClasses):
            classes = await wait_for_events(
                jetstream_log,
                NodeClassesSnapshot,
                lambda e: len(e) >= 1,
                what="the NodeClasses snapshot despite the missing EC2NodeClass kind",
            )
            assert [c["metadata"]["name"] for c in classes[0].nodeclasses] == ["default"]

            await wait_for_events(
                jetstream_log, NodePoolsSnapshot, lambda e: len(e) == 1, what="empty NodePools"
            )
            store.create(pools_rt, nodepool("general"))
            store.create(pools_rt, nodepool("gpu"))  # inside the debounce: one snapshot with both
            pools = await wait_for_events(
                jetstream_log, NodePoolsSnapshot, lambda e: len(e) >= 2, what="pools"
            )
            assert [[p["metadata"]["name"] for p in s.nodepools] for s in pools] == [[], ["general", "gpu"]]

            store.patch(pools_rt, "general", None, {"status": {"resources": {"cpu": "8"}}}, MERGE, "status")
            store.patch(pools_rt, "general", None, {"spec": {"limits": {"cpu": "50"}}}, MERGE)
            pools = await wait_for_events(
                jetstream_log, NodePoolsSnapshot, lambda e: len(e) >= 3, what="update"
            )
            assert [p["spec"]["limits"]["cpu"] for p in pools[2].nodepools] == ["50", "100"]
            settled = len(await logged(jetstream_log, NodePoolsSnapshot))

        # a new term lists everything again: unchanged content makes no snapshot
        async with running_watcher(sandbox, jetstream_log, kube_class=WithoutEC2NodeClasses) as term:
            source = term.snapshots["nodepools"]
            await until(
                lambda: source.ready and not source.dirty.is_set(), what="the NodePools listed and decided"
            )
            store.create(pools_rt, nodepool("late"))
            pools = await wait_for_events(
                jetstream_log, NodePoolsSnapshot, lambda e: len(e) > settled, what="the new pool"
            )
            assert [[p["metadata"]["name"] for p in s.nodepools] for s in pools[settled:]] == [
                ["general", "gpu", "late"]
            ]
            assert len(await logged(jetstream_log, NodeClassesSnapshot)) == 1
        assert settled == 3


async def test_a_change_made_while_the_watch_was_expired_is_published_after_the_relist(
    jetstream_log: JetStreamEventLog, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="tenon.kube.watch")
    async with running_sandbox(controllers=False, history_size=4, bookmark_interval=60.0) as sandbox:
        store = sandbox.workload_store
        store.max_pending_events = 3  # a burst ends the watch, and the small history makes its resume a 410
        nodes_rt = store.resource("v1", "Node")
        for name in ("keep", "gone", "filler"):
            store.create(nodes_rt, node(name, ready=True))
        async with running_watcher(sandbox, jetstream_log):
            await wait_for_events(
                jetstream_log, NodeObserved, lambda e: len(e) == 3, what="three nodes added"
            )
            # one synchronous burst: noise overflows the watch (it ends after the events it queued), then the
            # changes that matter, which only the history holds; the resume point is older than that history
            for i in range(8):
                store.patch(nodes_rt, "filler", None, {"metadata": {"annotations": {"noise": str(i)}}}, MERGE)
            store.create(nodes_rt, node("new", ready=True))
            store.delete(nodes_rt, "gone")
            store.patch(nodes_rt, "keep", None, {"metadata": {"labels": {"team": "blue"}}}, MERGE)
            await wait_for_events(
                jetstream_log, NodeObserved, lambda e: len(e) >= 6, what="the gap's changes after the re-list"
            )
            # a last change that matters, after the gap: when it is published, everything before it is too
            store.patch(nodes_rt, "filler", None, {"metadata": {"labels": {"marker": "1"}}}, MERGE)
            events = await wait_for_events(
                jetstream_log,
                NodeObserved,
                lambda e: any(x.node["metadata"]["labels"].get("marker") for x in e),
                what="the marker",
            )
            assert sorted(changes(events)[3:-1]) == [
                ("added", "new"),
                ("changed", "keep"),
                ("removed", "gone"),
            ]
            assert changes(events)[-1] == ("changed", "filler")
            assert any(
                "watch expired, re-listing" in r.getMessage() and getattr(r, "resource", "") == "nodes"
                for r in caplog.records
            )
