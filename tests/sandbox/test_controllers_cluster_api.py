"""The simulated Cluster API controller: MachineDeployments -> Machines -> Nodes, scale-down order, phases."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from devtools.sandbox.controllers.machine_nodes import deletion_order, node_for_machine
from tests.sandbox.controller_support import condition, rt, running_controllers, wait_for

CAPACITY = "capacity.cluster-autoscaler.kubernetes.io/"


def machine_deployment(
    name: str,
    replicas: int,
    *,
    karpenter: bool = True,
    version: str = "v1beta2",
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    labels = {"node.cluster.x-k8s.io/karpenter-member": ""} if karpenter else {}
    return {
        "apiVersion": f"cluster.x-k8s.io/{version}",
        "kind": "MachineDeployment",
        "metadata": {
            "name": name,
            "namespace": "default",
            "labels": labels,
            "annotations": {
                CAPACITY + "cpu": "4",
                CAPACITY + "memory": "8Gi",
                CAPACITY + "maxPods": "58",
                CAPACITY + "labels": "flavor=c3-8,node.kubernetes.io/instance-type=c3-8",
                CAPACITY + "taints": "dedicated=batch:NoSchedule",
                **(annotations or {}),
            },
        },
        "spec": {
            "clusterName": "ovh",
            "replicas": replicas,
            "selector": {"matchLabels": {}},
            "template": {
                "metadata": {"labels": {"node-role.kubernetes.io/worker": "", "team": "not-synced"}},
                "spec": {
                    "clusterName": "ovh",
                    "failureDomain": "gra1",
                    "bootstrap": {"configRef": {"kind": "KubeadmConfigTemplate", "name": "b"}},
                    "infrastructureRef": {"kind": "OpenStackMachineTemplate", "name": "c3-8-v1"},
                    "taints": [{"key": "startup", "value": "cni", "effect": "NoSchedule"}],
                },
            },
        },
    }


async def test_machine_deployment_scale_up_phases_and_nodes() -> None:
    async with running_controllers() as store:
        md_rt = rt(store, "cluster.x-k8s.io/v1beta1", "MachineDeployment")
        machine_rt = rt(store, "cluster.x-k8s.io/v1beta1", "Machine")
        nodes_rt = rt(store, "v1", "Node")
        store.create(md_rt, machine_deployment("c3-8", 2, version="v1beta1"))
        phases_seen: set[str] = set()

        def all_running() -> list[dict[str, Any]] | None:
            machines = store.list(machine_rt)[0]
            phases_seen.update(m.get("status", {}).get("phase", "") for m in machines)
            ok = len(machines) == 2 and all(m["status"].get("phase") == "Running" for m in machines)
            return machines if ok else None

        machines = await wait_for(all_running, what="2 Running machines")
        assert {"Provisioning", "Provisioned", "Running"} <= phases_seen
        for machine in machines:
            meta = machine["metadata"]
            assert meta["labels"]["cluster.x-k8s.io/deployment-name"] == "c3-8"
            assert meta["labels"]["cluster.x-k8s.io/cluster-name"] == "ovh"
            assert meta["name"].startswith("c3-8-")
            assert machine["spec"]["providerID"].startswith("openstack:///")
            assert machine["status"]["nodeRef"]["name"] == meta["name"]
        node = store.get(nodes_rt, machines[0]["metadata"]["name"])
        assert node["spec"]["providerID"] == machines[0]["spec"]["providerID"]
        labels = node["metadata"]["labels"]
        assert labels["flavor"] == "c3-8"
        assert labels["node.kubernetes.io/instance-type"] == "c3-8"
        assert labels["topology.kubernetes.io/zone"] == "gra1"
        assert labels["kubernetes.io/hostname"] == node["metadata"]["name"]
        assert "node-role.kubernetes.io/worker" in labels and "team" not in labels
        assert node["status"]["capacity"] == {"cpu": "4", "memory": "8Gi", "pods": "58"}
        assert node["status"]["allocatable"] == node["status"]["capacity"]
        taint_keys = {t["key"] for t in node["spec"]["taints"]}
        assert {"dedicated", "startup", "karpenter.sh/unregistered"} <= taint_keys
        ready = await wait_for(
            lambda: (
                (n := store.get(nodes_rt, node["metadata"]["name"]))
                and (condition(n, "Ready") or {}).get("status") == "True"
                and n
            ),
            what="node Ready",
        )
        assert "node.kubernetes.io/not-ready" not in {t["key"] for t in ready["spec"]["taints"]}
        assert "karpenter.sh/unregistered" in {t["key"] for t in ready["spec"]["taints"]}  # Karpenter's job
        status = await wait_for(
            lambda: (
                (s := store.get(md_rt, "c3-8", "default").get("status") or {}).get("readyReplicas") == 2 and s
            ),
            what="MD readyReplicas 2",
        )
        assert status["replicas"] == 2 and status["phase"] == "Running"


async def test_scale_down_removes_the_marked_machine_and_its_node() -> None:
    async with running_controllers() as store:
        md_rt = rt(store, "cluster.x-k8s.io/v1beta2", "MachineDeployment")
        machine_rt = rt(store, "cluster.x-k8s.io/v1beta2", "Machine")
        nodes_rt = rt(store, "v1", "Node")
        store.create(md_rt, machine_deployment("pool", 3, karpenter=False))
        await wait_for(lambda: len(store.list(nodes_rt)[0]) == 3, what="3 nodes")
        names = sorted(m["metadata"]["name"] for m in store.list(machine_rt)[0])
        target = names[1]
        marked = store.get(machine_rt, target, "default")
        marked["metadata"].setdefault("annotations", {})["cluster.x-k8s.io/delete-machine"] = "2026-11-29"
        store.update(machine_rt, marked)
        md = store.get(md_rt, "pool", "default")
        md["spec"]["replicas"] = 2
        store.update(md_rt, md)
        deleting = await wait_for(
            lambda: [m for m in store.list(machine_rt)[0] if m["metadata"].get("deletionTimestamp")],
            what="a machine deleting",
        )
        assert [m["metadata"]["name"] for m in deleting] == [target]
        await wait_for(
            lambda: (
                sorted(m["metadata"]["name"] for m in store.list(machine_rt)[0])
                == [n for n in names if n != target]
            ),
            what="marked machine gone",
        )
        assert sorted(n["metadata"]["name"] for n in store.list(nodes_rt)[0]) == [
            n for n in names if n != target
        ]
        assert "karpenter.sh/unregistered" not in {
            t["key"] for n in store.list(nodes_rt)[0] for t in n["spec"].get("taints") or []
        }


async def test_deleting_a_node_keeps_the_machine_and_deleting_a_machine_removes_its_node() -> None:
    async with running_controllers() as store:
        md_rt = rt(store, "cluster.x-k8s.io/v1beta2", "MachineDeployment")
        machine_rt = rt(store, "cluster.x-k8s.io/v1beta2", "Machine")
        nodes_rt = rt(store, "v1", "Node")
        store.create(md_rt, machine_deployment("pool", 2))
        await wait_for(lambda: len(store.list(nodes_rt)[0]) == 2, what="2 nodes")
        first, second = sorted(m["metadata"]["name"] for m in store.list(machine_rt)[0])
        store.delete(nodes_rt, first)
        await wait_for(
            lambda: (
                (condition(store.get(machine_rt, first, "default"), "NodeHealthy") or {}).get("reason")
                == "NodeNotFound"
            ),
            what="machine notices its node is gone",
        )
        assert len(store.list(machine_rt)[0]) == 2
        assert [n["metadata"]["name"] for n in store.list(nodes_rt)[0]] == [second]
        store.delete(machine_rt, second, "default")  # the MD replaces it; its node must go
        await wait_for(
            lambda: (
                second not in {n["metadata"]["name"] for n in store.list(nodes_rt)[0]}
                and second not in {m["metadata"]["name"] for m in store.list(machine_rt)[0]}
            ),
            what="machine and node removed",
        )
        await wait_for(
            lambda: (
                len([m for m in store.list(machine_rt)[0] if not m["metadata"].get("deletionTimestamp")]) == 2
            ),
            what="replacement machine",
        )


async def test_bad_capacity_annotation_is_reported_on_the_machine() -> None:
    async with running_controllers() as store:
        md_rt = rt(store, "cluster.x-k8s.io/v1beta2", "MachineDeployment")
        store.create(md_rt, machine_deployment("broken", 1, annotations={CAPACITY + "cpu": "four"}))
        event = await wait_for(
            lambda: next(
                (e for e in store.list(rt(store, "v1", "Event"))[0] if e["reason"] == "NodeCreationFailed"),
                None,
            ),
            what="warning event",
        )
        assert "machinedeployment default/broken" in event["message"]
        assert CAPACITY + "cpu" in event["message"]
        assert event["involvedObject"]["kind"] == "Machine"
        assert not store.list(rt(store, "v1", "Node"))[0]


def test_deletion_order_follows_cluster_api_priorities() -> None:
    def machine(name: str, created: str, node: bool = True, marked: bool = False) -> dict[str, Any]:
        meta: dict[str, Any] = {"name": name, "creationTimestamp": created}
        if marked:
            meta["annotations"] = {"cluster.x-k8s.io/delete-machine": ""}
        return {"metadata": meta, "status": {"nodeRef": {"name": name}} if node else {}}

    machines = [
        machine("old", "2026-01-01T00:00:00Z"),
        machine("new", "2026-06-01T00:00:00Z"),
        machine("booting", "2026-03-01T00:00:00Z", node=False),
        machine("marked", "2026-02-01T00:00:00Z", marked=True),
    ]
    assert [m["metadata"]["name"] for m in deletion_order(machines, "Oldest")] == [
        "marked",
        "booting",
        "old",
        "new",
    ]
    assert [m["metadata"]["name"] for m in deletion_order(machines, "Newest")] == [
        "marked",
        "booting",
        "new",
        "old",
    ]
    assert [m["metadata"]["name"] for m in deletion_order(machines, "Random")][:2] == ["marked", "booting"]


def test_bad_taint_annotation_names_the_machine_deployment() -> None:
    md = machine_deployment("pool", 1, annotations={CAPACITY + "taints": "no-effect"})
    machine = {
        "metadata": {"name": "pool-abcde", "namespace": "default"},
        "spec": {"providerID": "openstack:///x"},
    }
    with pytest.raises(
        ValueError, match=r"machinedeployment default/pool: annotation .*taints: expected key=value:Effect"
    ):
        node_for_machine(machine, md)


async def test_field_profile_keeps_the_measured_order_and_spacing() -> None:
    scale = 0.005  # the field timeline (providerID +64 s, node +72 s, Ready +139 s) at 1/200 speed
    async with running_controllers("field", scale) as store:
        loop = asyncio.get_running_loop()
        machine_rt = rt(store, "cluster.x-k8s.io/v1beta2", "Machine")
        nodes_rt = rt(store, "v1", "Node")
        start = loop.time()
        store.create(
            rt(store, "cluster.x-k8s.io/v1beta2", "MachineDeployment"), machine_deployment("pool", 1)
        )
        seen: dict[str, float] = {}

        def progress() -> bool:
            machines = store.list(machine_rt)[0]
            if machines and machines[0]["spec"].get("providerID"):
                seen.setdefault("provider_id", loop.time() - start)
            nodes = store.list(nodes_rt)[0]
            if nodes:
                seen.setdefault("node", loop.time() - start)
                if (condition(nodes[0], "Ready") or {}).get("status") == "True":
                    seen.setdefault("ready", loop.time() - start)
            return "ready" in seen

        await wait_for(progress, timeout=10.0, what="the machine's node Ready")
        assert seen["provider_id"] >= 64 * scale
        assert seen["node"] >= 72 * scale
        assert seen["ready"] >= 139 * scale
        assert seen["provider_id"] <= seen["node"] <= seen["ready"]
