"""The store's API semantics, driven in-process (the same methods the HTTP layer and controllers call)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from devtools.sandbox.errors import (
    AlreadyExists,
    BadRequest,
    Conflict,
    Expired,
    Forbidden,
    Invalid,
    NotFound,
    TooManyRequests,
    UnsupportedMediaType,
)
from devtools.sandbox.store import Store
from tests.sandbox.conftest import node_manifest, pod_manifest

SMP = "application/strategic-merge-patch+json"
MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"


@pytest.fixture
def store() -> Store:
    return Store(history_size=32, bookmark_interval=0.05)


def test_create_assigns_identity_and_generate_name(store: Store) -> None:
    pods = store.resource("v1", "Pod")
    created = store.create(
        pods, {**pod_manifest(""), "metadata": {"generateName": "web-", "namespace": "default"}}
    )
    meta = created["metadata"]
    assert meta["name"].startswith("web-") and len(meta["name"]) == len("web-") + 5
    assert meta["uid"] and meta["creationTimestamp"].endswith("Z")
    assert int(meta["resourceVersion"]) == int(store.resource_version)
    assert created["status"] == {"phase": "Pending"}  # status is the server's on create
    with pytest.raises(AlreadyExists, match=f'pods "{meta["name"]}" already exists'):
        store.create(pods, {**pod_manifest(meta["name"])})
    with pytest.raises(NotFound, match='namespaces "nowhere" not found'):
        store.create(pods, pod_manifest("a", namespace="nowhere"))


def test_invalid_objects_are_rejected_naming_the_field(store: Store) -> None:
    pods, nodes = store.resource("v1", "Pod"), store.resource("v1", "Node")
    bad_pod = pod_manifest("nocontainers")
    bad_pod["spec"]["containers"] = []
    with pytest.raises(Invalid, match=r'Pod "nocontainers" is invalid: spec.containers'):
        store.create(pods, bad_pod)
    tainted = node_manifest("n1")
    tainted["spec"]["taints"] = [{"key": "k", "effect": "Sometimes"}]
    with pytest.raises(Invalid, match=r"spec.taints\[0\].effect"):
        store.create(nodes, tainted)
    owned = pod_manifest("owned")
    owned["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs"}]
    with pytest.raises(Invalid, match=r"metadata.ownerReferences\[0\].uid"):
        store.create(pods, owned)
    with pytest.raises(Invalid, match=r"metadata\.name"):
        store.create(nodes, node_manifest("Not_A_Name"))
    with pytest.raises(Invalid, match=r"metadata\.labels\[zone\]"):
        store.create(nodes, node_manifest("n2", {"zone": "eu west"}))
    with pytest.raises(Invalid, match=r"metadata\.labels\[-bad\]"):
        store.create(nodes, node_manifest("n2", {"-bad": "x"}))
    assert store.create(
        nodes,
        node_manifest(
            "n2", {"topology.kubernetes.io/zone": "eu-west-1a", "node-role.kubernetes.io/worker": ""}
        ),
    )


def test_a_pods_priority_is_the_one_its_class_gives_as_the_priority_admission_computes_it(
    store: Store,
) -> None:
    pods = store.resource("v1", "Pod")
    agent = pod_manifest("agent", namespace="kube-system")
    agent["spec"]["priorityClassName"] = "system-node-critical"
    assert store.create(pods, agent)["spec"]["priority"] == 2_000_001_000
    assert store.create(pods, pod_manifest("plain"))["spec"]["priority"] == 0
    unknown = pod_manifest("unknown")
    unknown["spec"]["priorityClassName"] = "high"
    with pytest.raises(
        Forbidden, match='pods "unknown" is forbidden: no PriorityClass with name high was found'
    ):
        store.create(pods, unknown)
    chosen = pod_manifest("chosen")
    chosen["spec"]["priority"] = 1000
    with pytest.raises(Forbidden, match=r"the integer value of priority \(1000\) must not be provided"):
        store.create(pods, chosen)
    with pytest.raises(NotFound):
        store.get(pods, "chosen", "default")


def test_stale_update_conflicts_and_status_is_a_separate_subresource(store: Store) -> None:
    deployments = store.resource("apps/v1", "Deployment")
    created = store.create(
        deployments,
        {
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}}},
            "status": {"replicas": 99},
        },
    )
    assert "status" not in created and created["metadata"]["generation"] == 1
    with_status = dict(created, status={"replicas": 2})
    updated = store.update(deployments, with_status, subresource="status")
    assert updated["status"] == {"replicas": 2} and updated["metadata"]["generation"] == 1
    with pytest.raises(Conflict, match="the object has been modified"):
        store.update(deployments, created)  # created's resourceVersion is stale now
    spec_change = dict(updated, spec={**updated["spec"], "replicas": 3}, status={"replicas": 0})
    after = store.update(deployments, spec_change)
    assert after["spec"]["replicas"] == 3 and after["metadata"]["generation"] == 2
    assert after["status"] == {"replicas": 2}  # the main resource ignores .status
    rv = store.resource_version
    same = store.update(deployments, after)
    assert same["metadata"]["resourceVersion"] == after["metadata"]["resourceVersion"] == rv  # no-op write


def test_pod_spec_is_immutable_except_through_binding(store: Store) -> None:
    pods = store.resource("v1", "Pod")
    pod = store.create(pods, pod_manifest("p"))
    pod["spec"]["nodeName"] = "n1"
    with pytest.raises(Invalid, match="binding subresource"):
        store.update(pods, pod)
    store.bind("p", "default", "n1")
    bound = store.get(pods, "p", "default")
    assert bound["spec"]["nodeName"] == "n1"
    assert {"type": "PodScheduled", "status": "True"}.items() <= bound["status"]["conditions"][0].items()
    with pytest.raises(Conflict, match="already assigned"):
        store.bind("p", "default", "n2")


def test_strategic_merge_patch_uses_merge_keys(store: Store) -> None:
    pods, nodes = store.resource("v1", "Pod"), store.resource("v1", "Node")
    pod = pod_manifest("p")
    pod["spec"]["containers"].append({"name": "sidecar", "image": "side:1"})
    pod["metadata"]["finalizers"] = ["a/one"]
    store.create(pods, pod)
    patched = store.patch(
        pods,
        "p",
        "default",
        {
            "metadata": {
                "finalizers": ["b/two"],
                "ownerReferences": [
                    {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "u1"}
                ],
            },
            "spec": {"containers": [{"name": "sidecar", "image": "side:2"}]},
        },
        SMP,
    )
    assert [(c["name"], c["image"]) for c in patched["spec"]["containers"]] == [
        ("app", "registry.example/app:1"),
        ("sidecar", "side:2"),
    ]
    assert patched["metadata"]["finalizers"] == ["a/one", "b/two"]  # set union, not replacement
    patched = store.patch(
        pods,
        "p",
        "default",
        {
            "metadata": {
                "ownerReferences": [
                    {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs2", "uid": "u2"}
                ]
            }
        },
        SMP,
    )
    assert [r["uid"] for r in patched["metadata"]["ownerReferences"]] == ["u1", "u2"]
    patched = store.patch(
        pods, "p", "default", {"metadata": {"$deleteFromPrimitiveList/finalizers": ["a/one"]}}, SMP
    )
    assert patched["metadata"]["finalizers"] == ["b/two"]
    deployments = store.resource("apps/v1", "Deployment")
    store.create(
        deployments,
        {
            "metadata": {"name": "d", "namespace": "default"},
            "spec": {"template": {"spec": {"containers": pod["spec"]["containers"]}}},
        },
    )
    trimmed = store.patch(
        deployments,
        "d",
        "default",
        {"spec": {"template": {"spec": {"containers": [{"name": "sidecar", "$patch": "delete"}]}}}},
        SMP,
    )
    assert [c["name"] for c in trimmed["spec"]["template"]["spec"]["containers"]] == ["app"]

    node = node_manifest("n1")
    node["spec"]["taints"] = [{"key": "a", "effect": "NoSchedule"}]
    store.create(nodes, node)
    node_after = store.patch(
        nodes, "n1", None, {"spec": {"taints": [{"key": "b", "effect": "NoExecute"}]}}, SMP
    )
    assert node_after["spec"]["taints"] == [{"key": "b", "effect": "NoExecute"}]  # taints: atomic list
    status_after = store.patch(
        nodes,
        "n1",
        None,
        {
            "status": {
                "conditions": [{"type": "DiskPressure", "status": "False"}],
                "addresses": [{"type": "Hostname", "address": "n1"}],
            }
        },
        SMP,
        subresource="status",
    )
    assert [c["type"] for c in status_after["status"]["conditions"]] == ["Ready", "DiskPressure"]
    assert [a["type"] for a in status_after["status"]["addresses"]] == ["InternalIP", "Hostname"]


def test_merge_patch_replaces_lists_and_json_patch_applies_operations(store: Store) -> None:
    nodes = store.resource("v1", "Node")
    store.create(nodes, node_manifest("n1", {"zone": "a"}))
    merged = store.patch(nodes, "n1", None, {"metadata": {"labels": {"zone": None, "team": "x"}}}, MERGE)
    assert merged["metadata"]["labels"] == {"kubernetes.io/hostname": "n1", "team": "x"}
    merged = store.patch(
        nodes,
        "n1",
        None,
        {"status": {"addresses": [{"type": "Hostname", "address": "h"}]}},
        MERGE,
        subresource="status",
    )
    assert merged["status"]["addresses"] == [{"type": "Hostname", "address": "h"}]
    patched = store.patch(
        nodes,
        "n1",
        None,
        [
            {"op": "add", "path": "/spec/unschedulable", "value": True},
            {"op": "test", "path": "/metadata/labels/team", "value": "x"},
        ],
        JSON_PATCH,
    )
    assert patched["spec"]["unschedulable"] is True
    with pytest.raises(Invalid):
        store.patch(
            nodes, "n1", None, [{"op": "test", "path": "/metadata/labels/team", "value": "y"}], JSON_PATCH
        )
    with pytest.raises(BadRequest, match="list of operations"):
        store.patch(nodes, "n1", None, {"spec": {"unschedulable": False}}, JSON_PATCH)
    stale = {"metadata": {"resourceVersion": "1"}, "spec": {"unschedulable": False}}
    with pytest.raises(Conflict):
        store.patch(nodes, "n1", None, stale, MERGE)


def test_custom_resources_refuse_strategic_merge_patch(store: Store) -> None:
    nodepools = store.resource("karpenter.sh/v1", "NodePool")
    store.create(nodepools, {"metadata": {"name": "default"}, "spec": {"limits": {"cpu": "10"}}})
    with pytest.raises(UnsupportedMediaType):
        store.patch(nodepools, "default", None, {"spec": {"weight": 5}}, SMP)
    assert store.patch(nodepools, "default", None, {"spec": {"weight": 5}}, MERGE)["spec"]["weight"] == 5


def test_label_and_field_selectors(store: Store) -> None:
    pods = store.resource("v1", "Pod")
    store.create(pods, pod_manifest("a", labels={"app": "web", "tier": "fe"}))
    store.create(pods, pod_manifest("b", labels={"app": "web"}))
    store.create(pods, pod_manifest("c", labels={"app": "db"}))
    store.bind("a", "default", "n1")

    def names(**kwargs: Any) -> list[str]:
        items, _ = store.list(pods, **kwargs)
        return [i["metadata"]["name"] for i in items]

    assert names(label_selector="app=web") == ["a", "b"]
    assert names(label_selector="app in (web,db),!tier") == ["b", "c"]
    assert names(label_selector="app!=web") == ["c"]
    assert names(field_selector="spec.nodeName=n1") == ["a"]
    assert names(field_selector="spec.nodeName==,status.phase!=Running") == ["b", "c"]
    assert names(field_selector="metadata.name!=b", label_selector="tier") == ["a"]
    with pytest.raises(BadRequest, match=r'field label not supported: "spec\.image"'):
        names(field_selector="spec.image=x")
    with pytest.raises(BadRequest, match="unable to parse"):
        names(label_selector="app in (web")
    with pytest.raises(BadRequest):
        names(field_selector="nonsense")


def test_limit_and_continue_page_through_everything_once(store: Store) -> None:
    events = store.resource("v1", "Event")
    for i in range(7):
        store.create(
            events,
            {
                "metadata": {"name": f"e{i}", "namespace": "default"},
                "involvedObject": {"kind": "Pod", "name": "p"},
            },
        )
    seen, token, pages = [], None, 0
    while True:
        page = store.list_page(events, "default", limit=3, continue_token=token)
        seen += [i["metadata"]["name"] for i in page.items]
        pages += 1
        token = page.continue_token
        if token is None:
            break
        assert page.remaining_item_count == 7 - len(seen)
    assert seen == [f"e{i}" for i in range(7)] and pages == 3
    with pytest.raises(BadRequest, match="continue"):
        store.list_page(events, "default", limit=3, continue_token="garbage!")


def test_expired_continue_token_is_410() -> None:
    store = Store(history_size=4)
    events = store.resource("v1", "Event")
    for i in range(4):
        store.create(events, {"metadata": {"name": f"e{i}", "namespace": "default"}, "involvedObject": {}})
    token = store.list_page(events, limit=2).continue_token
    assert token
    for i in range(8):
        store.create(events, {"metadata": {"name": f"f{i}", "namespace": "default"}, "involvedObject": {}})
    with pytest.raises(Expired):
        store.list_page(events, limit=2, continue_token=token)


def test_finalizers_hold_deletion_until_removed(store: Store) -> None:
    nodeclaims = store.resource("karpenter.sh/v1", "NodeClaim")
    store.create(
        nodeclaims, {"metadata": {"name": "nc", "finalizers": ["karpenter.sh/termination"]}, "spec": {}}
    )
    remaining = store.delete(nodeclaims, "nc")
    assert remaining is not None and remaining["metadata"]["deletionTimestamp"]
    assert store.get(nodeclaims, "nc")["metadata"]["deletionTimestamp"]
    store.patch(nodeclaims, "nc", None, {"metadata": {"finalizers": None}}, MERGE)
    with pytest.raises(NotFound):
        store.get(nodeclaims, "nc")


def test_graceful_pod_deletion_and_immediate_for_unbound(store: Store) -> None:
    pods = store.resource("v1", "Pod")
    store.create(pods, pod_manifest("bound", grace=20))
    store.bind("bound", "default", "n1")
    store.create(pods, pod_manifest("pending"))
    assert store.delete(pods, "pending", "default") is None
    terminating = store.delete(pods, "bound", "default")
    assert terminating is not None and terminating["metadata"]["deletionGracePeriodSeconds"] == 20
    assert store.delete(pods, "bound", "default", grace_period_seconds=0) is None  # what the kubelet does
    assert store.list(pods)[0] == []


async def test_owner_references_are_garbage_collected_in_the_background(store: Store) -> None:
    replicasets, pods = store.resource("apps/v1", "ReplicaSet"), store.resource("v1", "Pod")
    rs = store.create(
        replicasets,
        {
            "metadata": {"name": "rs", "namespace": "default"},
            "spec": {"selector": {"matchLabels": {"a": "b"}}},
        },
    )
    ref = {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "name": "rs",
        "uid": rs["metadata"]["uid"],
        "controller": True,
    }
    for name in ("p1", "p2"):
        pod = pod_manifest(name)
        pod["metadata"]["ownerReferences"] = [ref]
        store.create(pods, pod)
    orphan_rs = store.create(replicasets, {"metadata": {"name": "keep", "namespace": "default"}, "spec": {}})
    kept = pod_manifest("kept")
    kept["metadata"]["ownerReferences"] = [{**ref, "name": "keep", "uid": orphan_rs["metadata"]["uid"]}]
    store.create(pods, kept)

    store.delete(replicasets, "rs", "default")
    assert len(store.list(pods)[0]) == 3  # background: dependents go on the next loop iteration
    await asyncio.sleep(0)
    assert [p["metadata"]["name"] for p in store.list(pods)[0]] == ["kept"]
    store.delete(replicasets, "keep", "default", propagation_policy="Orphan")
    await asyncio.sleep(0)
    survivor = store.get(pods, "kept", "default")
    assert "ownerReferences" not in survivor["metadata"]


def test_eviction_honours_pod_disruption_budgets(store: Store) -> None:
    pods, pdbs = store.resource("v1", "Pod"), store.resource("policy/v1", "PodDisruptionBudget")
    for name in ("a", "b"):
        store.create(pods, pod_manifest(name, labels={"app": "web"}))
        store.bind(name, "default", "n1")
        pod = store.get(pods, name, "default")
        store.update(pods, {**pod, "status": {**pod["status"], "phase": "Running"}}, subresource="status")
    pdb = store.create(
        pdbs,
        {
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}},
        },
    )
    pdb = store.update(
        pdbs,
        {
            **pdb,
            "status": {
                "observedGeneration": 1,
                "disruptionsAllowed": 0,
                "currentHealthy": 2,
                "desiredHealthy": 2,
                "expectedPods": 2,
            },
        },
        subresource="status",
    )
    with pytest.raises(TooManyRequests) as blocked:
        store.evict("a", "default")
    assert blocked.value.code == 429
    assert (
        "needs 2 healthy pods and has 2 currently"
        in blocked.value.to_status()["details"]["causes"][0]["message"]
    )
    assert not store.get(pods, "a", "default")["metadata"].get("deletionTimestamp")

    store.update(pdbs, {**pdb, "status": {**pdb["status"], "disruptionsAllowed": 1}}, subresource="status")
    assert store.evict("a", "default")["status"] == "Success"
    assert store.get(pods, "a", "default")["metadata"][
        "deletionTimestamp"
    ]  # graceful: the kubelet finishes it
    after = store.get(pdbs, "web", "default")["status"]
    assert after["disruptionsAllowed"] == 0 and "a" in after["disruptedPods"]
    with pytest.raises(TooManyRequests):
        store.evict("b", "default")


def test_deleting_a_namespace_deletes_its_contents(store: Store) -> None:
    namespaces, pods = store.resource("v1", "Namespace"), store.resource("v1", "Pod")
    store.create(namespaces, {"metadata": {"name": "team"}})
    store.create(pods, pod_manifest("p", namespace="team"))
    store.delete(namespaces, "team")
    assert store.list(pods, "team")[0] == []
    with pytest.raises(NotFound):
        store.get(namespaces, "team")


async def test_watch_replays_from_a_resource_version_and_expires_when_too_old(store: Store) -> None:
    pods = store.resource("v1", "Pod")
    store.create(pods, pod_manifest("a"))
    _, rv = store.list(pods)
    store.create(pods, pod_manifest("b"))
    store.patch(pods, "a", "default", {"metadata": {"labels": {"x": "1"}}}, MERGE)
    watch = store.watch(pods, resource_version=rv)
    events = [await asyncio.wait_for(watch.__anext__(), 1) for _ in range(2)]
    assert [(e.type, e.object["metadata"]["name"]) for e in events] == [("ADDED", "b"), ("MODIFIED", "a")]
    watch.close()
    for i in range(40):
        store.create(pods, pod_manifest(f"n{i}"))
    with pytest.raises(Expired, match=f"too old resource version: {rv}"):
        store.watch(pods, resource_version=rv)


async def test_watch_with_selector_reports_objects_leaving_and_entering(store: Store) -> None:
    pods = store.resource("v1", "Pod")
    store.create(pods, pod_manifest("a", labels={"app": "web"}))
    watch = store.watch(
        pods, "default", label_selector="app=web", allow_bookmarks=True, bookmark_interval=0.05
    )
    first = await asyncio.wait_for(watch.__anext__(), 1)
    assert (first.type, first.object["metadata"]["name"]) == ("ADDED", "a")  # synthetic initial event
    store.patch(pods, "a", "default", {"metadata": {"labels": {"app": "db"}}}, MERGE)
    store.patch(pods, "a", "default", {"metadata": {"labels": {"app": "web"}}}, MERGE)
    store.create(pods, pod_manifest("other", labels={"app": "db"}))
    got = [await asyncio.wait_for(watch.__anext__(), 1) for _ in range(3)]
    assert [e.type for e in got] == ["DELETED", "ADDED", "BOOKMARK"]
    assert got[2].object["metadata"]["resourceVersion"] == store.resource_version
    got[1].object["metadata"]["labels"]["mutated"] = "yes"  # private copy: the store is unaffected
    assert "mutated" not in store.get(pods, "a", "default")["metadata"]["labels"]
    watch.close()
    with pytest.raises(StopAsyncIteration):
        await watch.__anext__()


async def test_a_watcher_too_far_behind_is_ended_not_buffered_forever() -> None:
    store = Store(max_pending_events=3)
    pods = store.resource("v1", "Pod")
    watch = store.watch(pods, resource_version=store.resource_version)
    for i in range(5):
        store.create(pods, pod_manifest(f"p{i}"))
    received = [event.object["metadata"]["name"] async for event in watch]
    assert received == ["p0", "p1", "p2"] and watch.overflowed
    assert store.watcher_count(pods) == 0
    resumed = store.watch(
        pods, resource_version=store.get(pods, "p2", "default")["metadata"]["resourceVersion"]
    )
    assert [(await resumed.__anext__()).object["metadata"]["name"] for _ in range(2)] == ["p3", "p4"]


async def test_foreground_deletion_keeps_the_owner_until_dependents_are_gone(store: Store) -> None:
    deployments, replicasets = (
        store.resource("apps/v1", "Deployment"),
        store.resource("apps/v1", "ReplicaSet"),
    )
    pods = store.resource("v1", "Pod")
    deployment = store.create(deployments, {"metadata": {"name": "web", "namespace": "default"}, "spec": {}})

    def ref(owner: dict[str, Any]) -> list[dict[str, Any]]:
        return [
            {
                "apiVersion": owner["apiVersion"],
                "kind": owner["kind"],
                "name": owner["metadata"]["name"],
                "uid": owner["metadata"]["uid"],
                "blockOwnerDeletion": True,
            }
        ]

    rs = store.create(
        replicasets,
        {
            "metadata": {"name": "web-1", "namespace": "default", "ownerReferences": ref(deployment)},
            "spec": {},
        },
    )
    pod = pod_manifest("web-1-a", grace=30)
    pod["metadata"]["ownerReferences"] = ref(rs)
    store.create(pods, pod)
    store.bind("web-1-a", "default", "n1")  # bound: deleted gracefully, the kubelet finishes it

    waiting = store.delete(deployments, "web", "default", propagation_policy="Foreground")
    assert waiting is not None and waiting["metadata"]["finalizers"] == ["foregroundDeletion"]
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert store.get(replicasets, "web-1", "default")["metadata"]["finalizers"] == ["foregroundDeletion"]
    assert store.get(pods, "web-1-a", "default")["metadata"]["deletionTimestamp"]
    assert store.get(deployments, "web", "default")  # still there: its dependents are not gone yet
    store.delete(pods, "web-1-a", "default", grace_period_seconds=0)  # the kubelet's final delete
    assert store.list(replicasets)[0] == [] and store.list(deployments)[0] == []


def test_dry_run_validates_and_answers_but_changes_nothing(store: Store) -> None:
    pods = store.resource("v1", "Pod")
    store.create(pods, pod_manifest("p"))
    rv = store.resource_version
    with store.dry_run():
        would_be = store.patch(pods, "p", "default", {"metadata": {"labels": {"x": "1"}}}, MERGE)
        assert would_be["metadata"]["labels"] == {"x": "1"}
        assert store.delete(pods, "p", "default") is None  # unbound: would be removed at once
        with pytest.raises(Invalid):
            store.create(pods, {**pod_manifest("bad"), "spec": {"containers": []}})
    assert store.resource_version == rv
    assert store.get(pods, "p", "default")["metadata"]["labels"] == {}
