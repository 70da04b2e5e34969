"""Least data: what the pod-watcher records of a Pod, a Node or a DaemonSet is what scheduling reads; a secret
in a container's environment, its args or an annotation never reaches the log."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from devtools.sandbox.testing import running_sandbox
from proto import subjects
from proto.events import BoundPodObserved, DaemonSetsSnapshot, NodeObserved, PendingBatch
from tenon.core import parse_objects
from tenon.core.wellknown import DO_NOT_DISRUPT
from tenon.runtime.eventlog.jetstream import JetStreamEventLog
from tenon.services.pod_watcher.views import daemonset_view, node_view, pod_view
from tests.pod_watcher.support import running_watcher, wait_for_events

SECRET = "hunter2-s3cr3t-value"


def full_pod_spec() -> dict[str, Any]:
    """A pod spec using every field scheduling reads, and secrets wherever Kubernetes lets people put them."""
    return {
        "priority": 2_000_000_000,
        "priorityClassName": "system-cluster-critical",  # the sandbox serves only the built-in classes
        "nodeSelector": {"disk": "ssd"},
        "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]}]}
                    ]
                }
            },
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "labelSelector": {"matchLabels": {"app": "web"}},
                        "topologyKey": "kubernetes.io/hostname",
                    }
                ]
            },
        },
        "topologySpreadConstraints": [
            {
                "maxSkew": 1,
                "topologyKey": "topology.kubernetes.io/zone",
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": {"app": "web"}},
            }
        ],
        "schedulingGates": [{"name": "example.com/wait"}],
        "overhead": {"cpu": "100m"},
        "containers": [
            {
                "name": "app",
                "image": "registry.example.com/app:1",
                "command": ["/bin/app", f"--token={SECRET}"],
                "args": [f"--password={SECRET}"],
                "env": [
                    {"name": "DB_PASSWORD", "value": SECRET},
                    {"name": "FROM_SECRET", "valueFrom": {"secretKeyRef": {"name": "db", "key": "pw"}}},
                ],
                "envFrom": [{"secretRef": {"name": "all-of-it"}}],
                "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"memory": "2Gi"}},
                "ports": [{"containerPort": 8080}, {"containerPort": 9090, "hostPort": 9090}],
                "livenessProbe": {"exec": {"command": ["check", SECRET]}},
            }
        ],
        "initContainers": [
            {
                "name": "sidecar",
                "image": "proxy:1",
                "restartPolicy": "Always",
                "env": [{"name": "API_KEY", "value": SECRET}],
                "resources": {"requests": {"cpu": "100m"}},
            }
        ],
        "volumes": [
            {"name": "data", "persistentVolumeClaim": {"claimName": "data-web-0"}},
            {"name": "creds", "secret": {"secretName": "db"}},
            {"name": "config", "configMap": {"name": "app-config"}},
            {
                "name": "scratch",
                "ephemeral": {
                    "volumeClaimTemplate": {
                        "metadata": {"annotations": {"note": SECRET}},
                        "spec": {"storageClassName": "fast", "resources": {"requests": {"storage": "1Gi"}}},
                    }
                },
            },
        ],
    }


def full_pod() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "web-0",
            "namespace": "shop",
            "uid": "u-web-0",
            "resourceVersion": "7",
            "labels": {"app": "web"},
            "annotations": {
                DO_NOT_DISRUPT: "true",
                "kubectl.kubernetes.io/last-applied-configuration": json.dumps({"env": SECRET}),
                "vault.example.com/token": SECRET,
            },
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "StatefulSet",
                    "name": "web",
                    "uid": "u-sts",
                    "controller": True,
                }
            ],
            "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:env": SECRET}}],
        },
        "spec": full_pod_spec(),
        "status": {
            "phase": "Pending",
            "nominatedNodeName": "n9",
            "conditions": [
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/3 nodes"}
            ],
            "podIP": "10.0.0.9",
        },
    }


def test_a_pod_keeps_what_scheduling_reads_and_loses_every_secret() -> None:
    original = full_pod()
    view = pod_view(original)
    assert SECRET not in json.dumps(view)
    assert original == full_pod()  # the watched object is left alone
    spec = view["spec"]
    assert spec["containers"] == [
        {
            "name": "app",
            "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"memory": "2Gi"}},
            "ports": [{"containerPort": 9090, "hostPort": 9090}],
        }
    ]
    assert spec["initContainers"] == [
        {"name": "sidecar", "restartPolicy": "Always", "resources": {"requests": {"cpu": "100m"}}}
    ]
    assert spec["volumes"] == [
        {"name": "data", "persistentVolumeClaim": {"claimName": "data-web-0"}},
        {
            "name": "scratch",
            "ephemeral": {
                "volumeClaimTemplate": {
                    "spec": {"storageClassName": "fast", "resources": {"requests": {"storage": "1Gi"}}}
                }
            },
        },
    ]
    for kept in ("affinity", "tolerations", "topologySpreadConstraints", "nodeSelector", "schedulingGates"):
        assert spec[kept] == original["spec"][kept]
    assert (spec["priority"], spec["priorityClassName"], spec["overhead"]) == (
        2_000_000_000,
        "system-cluster-critical",
        {"cpu": "100m"},
    )
    meta = view["metadata"]
    assert meta["annotations"] == {DO_NOT_DISRUPT: "true"}
    assert meta["ownerReferences"] == original["metadata"]["ownerReferences"]
    assert (meta["labels"], meta["uid"], meta["resourceVersion"]) == ({"app": "web"}, "u-web-0", "7")
    assert "managedFields" not in meta
    assert view["status"] == {
        "phase": "Pending",
        "nominatedNodeName": "n9",
        "conditions": original["status"]["conditions"],
    }
    assert pod_view(view) == view  # a view of a view changes nothing (what recovery restores)


def test_a_view_leaves_out_what_is_not_where_an_object_should_be_and_never_raises() -> None:
    """A batched pod is viewed when its window closes, long after its change was read: a misshapen part
    must be dropped then, not end the batch."""
    odd = full_pod()
    odd["metadata"]["labels"] = ["app", "web"]
    odd["spec"]["containers"][0]["resources"] = "lots"
    odd["spec"]["volumes"] = [{"name": "e", "ephemeral": {"volumeClaimTemplate": {"spec": ["x"]}}}, "junk"]
    odd["status"] = ["not", "an", "object"]
    view = pod_view(odd)
    assert "labels" not in view["metadata"]
    assert "resources" not in view["spec"]["containers"][0]
    assert view["spec"]["volumes"] == [{"name": "e", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}}]
    assert view["status"] == {}


def test_the_scheduling_core_reads_the_same_pod_from_the_view_as_from_the_whole_object() -> None:
    whole = parse_objects([("whole", 0, full_pod())]).pods
    reduced = parse_objects([("view", 0, pod_view(full_pod()))]).pods
    assert whole == reduced and len(whole) == 1
    assert whole[0].requests and whole[0].host_ports and whole[0].topology_spread


def test_a_daemonset_keeps_its_pods_scheduling_needs_not_their_configuration() -> None:
    daemonset = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {
            "name": "agent",
            "namespace": "kube-system",
            "uid": "u-agent",
            "annotations": {"x": SECRET},
        },
        "spec": {
            "selector": {"matchLabels": {"app": "agent"}},
            "template": {"metadata": {"labels": {"app": "agent"}}, "spec": full_pod_spec()},
        },
        "status": {"numberReady": 3},
    }
    view = daemonset_view(daemonset)
    assert SECRET not in json.dumps(view)
    whole = parse_objects([("whole", 0, daemonset)]).daemon_sets
    assert whole == parse_objects([("view", 0, view)]).daemon_sets and len(whole) == 1


def test_a_node_keeps_what_scheduling_and_disruption_read_not_its_addresses_or_images() -> None:
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": "n1",
            "uid": "u-n1",
            "resourceVersion": "3",
            "labels": {"topology.kubernetes.io/zone": "a"},
            "annotations": {DO_NOT_DISRUPT: "true", "node.alpha.kubernetes.io/ttl": "0", "cred": SECRET},
            "finalizers": ["example.com/keep"],
        },
        "spec": {
            "providerID": "openstack:///n1",
            "taints": [{"key": "k", "effect": "NoSchedule"}],
            "podCIDR": "x",
        },
        "status": {
            "capacity": {"cpu": "4"},
            "allocatable": {"cpu": "3900m"},
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "lastHeartbeatTime": "2026-01-01T00:00Z",
                }
            ],
            "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
            "images": [{"names": ["app:1"]}],
            "nodeInfo": {"kubeletVersion": "v1.31.0"},
        },
    }
    view = node_view(node)
    assert SECRET not in json.dumps(view)
    assert view["metadata"]["annotations"] == {DO_NOT_DISRUPT: "true"}
    assert view["metadata"]["finalizers"] == [
        "example.com/keep"
    ]  # a merge patch of finalizers needs them all
    assert view["spec"] == {"providerID": "openstack:///n1", "taints": [{"key": "k", "effect": "NoSchedule"}]}
    assert view["status"] == {
        "capacity": {"cpu": "4"},
        "allocatable": {"cpu": "3900m"},
        "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
    }
    assert parse_objects([("n", 0, node)]).nodes == parse_objects([("v", 0, view)]).nodes


def unschedulable(store: Any, name: str) -> None:
    """Mark a pod as the kube-scheduler would (the sandbox runs without controllers here)."""
    pods = store.resource("v1", "Pod")
    created = store.get(pods, name, "shop")
    created["status"] = {
        "phase": "Pending",
        "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/1"}
        ],
    }
    store.update(pods, created, "status")


@pytest.mark.integration
async def test_a_secret_in_a_container_env_value_never_reaches_the_log(
    jetstream_log: JetStreamEventLog,
) -> None:
    async with running_sandbox(controllers=False) as sandbox:
        store = sandbox.workload_store
        store.create(
            store.resource("v1", "Namespace"),
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shop"}},
        )
        node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": "n1", "annotations": {"cred": SECRET}},
            "status": {"capacity": {"cpu": "1"}, "conditions": [{"type": "Ready", "status": "True"}]},
        }
        store.create(store.resource("v1", "Node"), node)
        pending = full_pod()
        for field in ("uid", "resourceVersion", "managedFields", "ownerReferences"):
            del pending["metadata"][field]
        pending.pop("status")
        store.create(store.resource("v1", "Pod"), pending)
        unschedulable(store, "web-0")
        bound = copy.deepcopy(pending)
        bound["metadata"]["name"] = "web-1"
        bound["spec"]["nodeName"] = "n1"
        store.create(store.resource("v1", "Pod"), bound)
        store.create(
            store.resource("apps/v1", "DaemonSet"),
            {
                "apiVersion": "apps/v1",
                "kind": "DaemonSet",
                "metadata": {"name": "agent", "namespace": "shop"},
                "spec": {
                    "selector": {"matchLabels": {"app": "agent"}},
                    "template": {"metadata": {"labels": {"app": "agent"}}, "spec": full_pod_spec()},
                },
            },
        )
        async with running_watcher(sandbox, jetstream_log):
            # one pending pod was listed when the watch started, the other arrives through the watch
            later = copy.deepcopy(pending)
            later["metadata"]["name"] = "web-2"
            store.create(store.resource("v1", "Pod"), later)
            unschedulable(store, "web-2")
            batches = await wait_for_events(
                jetstream_log,
                PendingBatch,
                lambda b: sum(len(batch.pods) for batch in b) >= 2,
                what="the batches of both pending pods",
            )
            await wait_for_events(
                jetstream_log, BoundPodObserved, lambda e: len(e) == 1, what="the bound pod"
            )
            await wait_for_events(jetstream_log, NodeObserved, lambda e: len(e) == 1, what="the node")
            [daemonsets] = await wait_for_events(
                jetstream_log, DaemonSetsSnapshot, lambda e: len(e) == 1, what="the DaemonSets"
            )
        stored = [record async for record in jetstream_log.read(subjects.ALL_EVENTS)]
        assert stored and all(SECRET.encode() not in record.data for record in stored)
        batched = {pod["metadata"]["name"]: pod for batch in batches for pod in batch.pods}
        assert sorted(batched) == ["web-0", "web-2"]
        for pod in batched.values():
            assert pod["spec"]["containers"][0]["resources"]["requests"] == {"cpu": "500m", "memory": "1Gi"}
            assert pod["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"] == "data-web-0"
            assert pod["metadata"]["annotations"] == {DO_NOT_DISRUPT: "true"}
        assert daemonsets.daemonsets[0]["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]
