"""Which pods are pending, which changes matter, snapshots and ids: literal objects in, events out."""

from __future__ import annotations

import copy
import logging
from typing import Any

import pytest

from proto.events import NodeObserved, NodePoolsSnapshot
from tenon.services.pod_watcher import observations as obs
from tenon.services.pod_watcher.service import NODE_READS, read_pod, readable


def unschedulable_pod(name: str = "web-1", uid: str = "u-web-1", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "default",
            "uid": uid,
            "resourceVersion": "10",
            "managedFields": [{"manager": "kube-controller-manager", "fieldsV1": {"f:spec": {}}}],
        },
        "spec": {"containers": [{"name": "app", "resources": {"requests": {"cpu": "1"}}}], **spec},
        "status": {
            "phase": "Pending",
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": "0/0 nodes are available",
                }
            ],
        },
    }


def node(name: str = "n1", uid: str = "u-n1", rv: str = "5", **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "uid": uid, "resourceVersion": rv, "labels": {"zone": "a", **labels}},
        "spec": {"providerID": f"openstack:///{name}"},
        "status": {
            "allocatable": {"cpu": "4"},
            "capacity": {"cpu": "4"},
            "conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": "2026-01-01T00:00:00Z"}],
        },
    }


def test_an_unschedulable_pod_is_pending() -> None:
    assert obs.is_pending(unschedulable_pod())


@pytest.mark.parametrize(
    ("change", "why"),
    [
        (
            lambda p: p["metadata"].update(ownerReferences=[{"kind": "DaemonSet", "name": "agent"}]),
            "DaemonSet",
        ),
        (lambda p: p["metadata"].update(deletionTimestamp="2026-01-01T00:00:00Z"), "being deleted"),
        (lambda p: p["spec"].update(schedulerName="volcano"), "volcano"),
        (lambda p: p["spec"].update(nodeName="n1"), "bound"),
        (lambda p: p["status"]["conditions"][0].update(reason="SchedulingGated"), "Unschedulable"),
        (lambda p: p["status"].update(conditions=[]), "Unschedulable"),
        (lambda p: p["status"].update(phase="Failed"), "finished"),
    ],
)
def test_pods_tenon_must_not_find_room_for(change: Any, why: str) -> None:
    pod = unschedulable_pod()
    change(pod)
    assert not obs.is_pending(pod)
    assert why in (obs.pending_exclusion(pod) or "")


def test_the_default_scheduler_named_explicitly_is_still_pending() -> None:
    assert obs.is_pending(unschedulable_pod(schedulerName="default-scheduler"))


def test_a_pod_without_uid_is_refused_naming_the_object_and_field() -> None:
    pod = unschedulable_pod()
    del pod["metadata"]["uid"]
    with pytest.raises(obs.InvalidObject, match=r"Pod default/web-1: metadata.uid is missing"):
        obs.uid_of(pod)


def test_trimming_drops_managed_fields_and_leaves_the_original_alone() -> None:
    pod = unschedulable_pod()
    out = obs.trimmed(pod)
    assert "managedFields" not in out["metadata"]
    assert "managedFields" in pod["metadata"]
    assert out["spec"] == pod["spec"]


def test_node_added_changed_heartbeat_ignored_and_removed() -> None:
    tracker = obs.node_tracker()
    added = tracker.observe(node())
    assert isinstance(added, NodeObserved) and added.change == "added"

    heartbeat = node(rv="6")
    heartbeat["status"]["conditions"][0]["lastHeartbeatTime"] = "2026-01-01T00:00:40Z"
    heartbeat["status"]["images"] = [{"names": ["app:1"]}]
    assert tracker.observe(heartbeat) is None

    relabelled = node(rv="7", team="blue")
    changed = tracker.observe(relabelled)
    assert isinstance(changed, NodeObserved) and changed.change == "changed"
    assert changed.node["metadata"]["labels"]["team"] == "blue"

    not_ready = copy.deepcopy(relabelled)
    not_ready["metadata"]["resourceVersion"] = "8"
    not_ready["status"]["conditions"][0]["status"] = "False"
    assert tracker.observe(not_ready) is not None

    removed = tracker.forget(not_ready)
    assert isinstance(removed, NodeObserved) and removed.change == "removed"
    assert tracker.forget(not_ready) is None


@pytest.mark.parametrize(
    "edit",
    [
        lambda n: n["spec"].update(taints=[{"key": "k", "effect": "NoSchedule"}]),
        lambda n: n["spec"].update(unschedulable=True),
        lambda n: n["status"]["allocatable"].update(cpu="3"),
        lambda n: n["metadata"].update(deletionTimestamp="2026-01-01T00:00:00Z"),
        lambda n: n["spec"].update(providerID="openstack:///other"),
    ],
)
def test_node_changes_that_matter(edit: Any) -> None:
    tracker = obs.node_tracker()
    tracker.observe(node())
    changed = node(rv="9")
    edit(changed)
    event = tracker.observe(changed)
    assert event is not None and event.change == "changed"  # type: ignore[attr-defined]


def test_relist_reports_what_vanished_during_the_gap_and_nothing_for_unchanged_objects() -> None:
    tracker = obs.node_tracker()
    tracker.observe(node("n1", "u1"))
    tracker.observe(node("n2", "u2"))
    events = tracker.relisted([node("n1", "u1"), node("n3", "u3")])
    assert sorted((e.change, e.node["metadata"]["name"]) for e in events) == [  # type: ignore[attr-defined]
        ("added", "n3"),
        ("removed", "n2"),
    ]


def test_a_restored_tracker_derives_nothing_for_what_was_already_published() -> None:
    first = obs.node_tracker()
    published = [e for e in [first.observe(node("n1", "u1")), first.observe(node("n2", "u2"))] if e]
    successor = obs.node_tracker()
    for event in published:
        successor.restore(event.change, event.node)  # type: ignore[attr-defined]
    assert successor.relisted([node("n1", "u1"), node("n2", "u2")]) == []


def test_bound_pods_are_tracked_from_binding_to_deletion_and_pending_pods_are_not() -> None:
    tracker = obs.bound_pod_tracker()
    pending = unschedulable_pod()
    assert tracker.observe(pending) is None
    bound = copy.deepcopy(pending)
    bound["spec"]["nodeName"] = "n1"
    bound["metadata"]["resourceVersion"] = "11"
    added = tracker.observe(bound)
    assert added is not None and added.change == "added"  # type: ignore[attr-defined]
    running = copy.deepcopy(bound)
    running["status"]["phase"] = "Running"
    running["status"]["podIP"] = "10.0.0.9"
    running["metadata"]["resourceVersion"] = "12"
    assert tracker.observe(running) is None  # no more room taken running than bound (Karpenter)
    ip_only = copy.deepcopy(running)
    ip_only["status"]["podIP"] = "10.0.0.10"
    assert tracker.observe(ip_only) is None
    terminating = copy.deepcopy(running)
    terminating["metadata"]["deletionTimestamp"] = "2026-11-29T10:00:00Z"
    assert tracker.observe(terminating) is not None
    succeeded = copy.deepcopy(terminating)
    succeeded["status"]["phase"] = "Succeeded"
    finished = tracker.observe(succeeded)
    assert finished is not None and finished.pod["status"]["phase"] == "Succeeded"  # type: ignore[attr-defined]
    assert tracker.forget(running).change == "removed"  # type: ignore[union-attr]


def test_observation_ids_follow_uid_resource_version_and_change() -> None:
    a = obs.node_event("added", node())
    again = obs.node_event("added", node())
    other_change = obs.node_event("changed", node())
    other_version = obs.node_event("added", node(rv="6"))
    assert a.id == again.id
    assert len({a.id, other_change.id, other_version.id}) == 3


def nodepool(name: str, cpu_limit: str = "100", in_use: str = "0") -> dict[str, Any]:
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": name, "uid": f"u-{name}", "resourceVersion": "1"},
        "spec": {"limits": {"cpu": cpu_limit}, "template": {"spec": {"requirements": []}}},
        "status": {"resources": {"cpu": in_use}},
    }


def test_snapshots_go_out_on_content_change_only() -> None:
    state = obs.SnapshotState(obs.NODEPOOLS)
    first = state.decide([nodepool("b"), nodepool("a")])
    assert isinstance(first, NodePoolsSnapshot)
    assert [p["metadata"]["name"] for p in first.nodepools] == ["a", "b"]
    state.published(first, sequence=7)

    bumped = [nodepool("a", in_use="8"), nodepool("b")]
    bumped[0]["metadata"]["resourceVersion"] = "2"
    assert state.decide(bumped) is None  # only the scheduler's own status output and the version moved

    second = state.decide([nodepool("a", cpu_limit="50"), nodepool("b")])
    assert second is not None and second.id != first.id
    state.published(second, sequence=9)

    back = state.decide([nodepool("b"), nodepool("a")])  # the first content again: a new step, a new id
    assert back is not None and back.id not in (first.id, second.id)


def test_two_replicas_deciding_the_same_snapshot_step_derive_the_same_id() -> None:
    one, two = obs.SnapshotState(obs.NODEPOOLS), obs.SnapshotState(obs.NODEPOOLS)
    a, b = one.decide([nodepool("a")]), two.decide([nodepool("a")])
    assert a is not None and b is not None and a.id == b.id


def test_daemonset_status_is_not_content() -> None:
    state = obs.SnapshotState(obs.DAEMONSETS)
    ds = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "agent", "namespace": "kube-system", "uid": "u-ds"},
        "spec": {"template": {"spec": {"containers": [{"name": "a"}]}}},
        "status": {"numberReady": 1},
    }
    first = state.decide([ds])
    assert first is not None
    state.published(first, 3)
    assert state.decide([{**ds, "status": {"numberReady": 5}}]) is None


def test_an_object_recreated_under_the_same_name_during_a_gap_ends_added() -> None:
    tracker = obs.node_tracker()
    tracker.observe(node("n1", "old-uid"))
    events = tracker.relisted([node("n1", "new-uid", rv="40")])
    assert [(e.change, e.node["metadata"]["uid"]) for e in events] == [  # type: ignore[attr-defined]
        ("removed", "old-uid"),
        ("added", "new-uid"),
    ]


def test_a_reassertion_repeats_the_last_published_version_with_an_id_of_its_epoch() -> None:
    tracker = obs.node_tracker()
    added = tracker.observe(node())
    assert added is not None
    heartbeat = node(rv="6")  # not published: the re-assertion repeats what the log holds
    assert tracker.observe(heartbeat) is None
    again = tracker.reassert("u-n1", 41)
    same_epoch = obs.node_tracker()
    same_epoch.restore("added", added.node)  # type: ignore[attr-defined]
    repeat = same_epoch.reassert("u-n1", 41)
    next_epoch = tracker.reassert("u-n1", 42)
    assert isinstance(again, NodeObserved) and again.change == "changed"
    assert again.node == added.node  # type: ignore[attr-defined]
    assert repeat is not None and next_epoch is not None
    assert again.id == repeat.id and len({added.id, again.id, next_epoch.id}) == 3
    assert tracker.reassert("unknown-uid", 41) is None


def test_an_unchanged_snapshot_is_reasserted_only_when_asked_with_an_id_of_its_epoch() -> None:
    state = obs.SnapshotState(obs.NODEPOOLS)
    first = state.decide([nodepool("a")])
    assert isinstance(first, NodePoolsSnapshot)
    state.published(first, sequence=3)
    assert state.decide([nodepool("a")]) is None
    again = state.decide([nodepool("a")], resync=7)
    other_replica = obs.SnapshotState(obs.NODEPOOLS)
    other_replica.published(first, sequence=3)
    repeat = other_replica.decide([nodepool("a")], resync=7)
    assert isinstance(again, NodePoolsSnapshot) and again.nodepools == first.nodepools
    assert repeat is not None and repeat.id == again.id != first.id
    assert (state.decide([nodepool("a")], resync=8) or first).id != again.id


def test_an_object_that_cannot_be_read_is_skipped_with_a_warning_naming_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    no_uid = unschedulable_pod("no-uid")
    del no_uid["metadata"]["uid"]
    odd_status = unschedulable_pod("odd", "u-odd")
    odd_status["status"] = ["not", "a", "mapping"]
    odd_node = node("n-odd", "u-n-odd")
    odd_node["spec"] = "taints?"
    pods = [unschedulable_pod(), no_uid, odd_status, "junk"]
    with caplog.at_level(logging.WARNING, logger="tenon.pod_watcher"):
        readings = [read_pod(pod) for pod in pods]  # type: ignore[arg-type]
        assert [reading is not None for reading in readings] == [True, False, False, False]
        assert [readable(obj, NODE_READS) for obj in (node(), odd_node)] == [True, False]
    good = readings[0]
    assert good is not None and good.pending and good.fingerprint["nodeName"] is None
    assert [getattr(r, "object", None) for r in caplog.records] == [
        "Pod default/no-uid",
        "Pod default/odd",
        "a str, not an object",
        "Node n-odd",
    ]
    assert "metadata.uid is missing" in caplog.records[0].error  # type: ignore[attr-defined]
