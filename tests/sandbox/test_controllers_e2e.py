"""End to end through HTTP with kubernetes-asyncio: the scenario node autoscalers live in.

A Deployment scaled to 8 stays Pending/Unschedulable with no nodes; a MachineDeployment in the management
cluster is scaled up (merge patch, as cluster-autoscaler does), its Machines boot, Nodes join the workload
cluster and the pods run; then the MachineDeployment is scaled down with one Machine marked for deletion,
and exactly that Machine and its Node go.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from collections import Counter
from typing import Any

import pytest

from devtools.sandbox.testing import running_sandbox
from tests.sandbox.controller_support import deployment, node

pytestmark = pytest.mark.integration

GROUP, VERSION = "cluster.x-k8s.io", "v1beta2"
KUBECTL = shutil.which("kubectl") or "/usr/bin/kubectl"


async def poll(check: Any, timeout: float = 10.0, what: str = "condition") -> Any:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        result = await check()
        if result:
            return result
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


async def test_unschedulable_pods_run_once_cluster_api_nodes_join() -> None:
    from kubernetes_asyncio import client

    async with running_sandbox("fast") as sandbox:
        assert sandbox.controllers_running
        async with sandbox.api_client() as workload_api, sandbox.api_client("management") as management_api:
            apps: Any = client.AppsV1Api(workload_api)  # dict bodies and _content_type: untyped in the stubs
            core = client.CoreV1Api(workload_api)
            capi: Any = client.CustomObjectsApi(management_api)
            await apps.create_namespaced_deployment("default", deployment("web", 1, cpu="1"))
            await apps.patch_namespaced_deployment_scale("web", "default", {"spec": {"replicas": 8}})

            async def unschedulable() -> bool:
                pods = (await core.list_namespaced_pod("default", label_selector="app=web")).items
                return len(pods) == 8 and all(
                    any(
                        c.type == "PodScheduled" and c.reason == "Unschedulable"
                        for c in p.status.conditions or []
                    )
                    for p in pods
                )

            await poll(unschedulable, what="8 Unschedulable pods")

            await capi.create_namespaced_custom_object(
                GROUP,
                VERSION,
                "default",
                "machinedeployments",
                {
                    "apiVersion": f"{GROUP}/{VERSION}",
                    "kind": "MachineDeployment",
                    "metadata": {
                        "name": "c3-16",
                        "annotations": {
                            "capacity.cluster-autoscaler.kubernetes.io/cpu": "8",
                            "capacity.cluster-autoscaler.kubernetes.io/memory": "30Gi",
                        },
                    },
                    "spec": {
                        "clusterName": "ovh",
                        "replicas": 0,
                        "selector": {"matchLabels": {}},
                        "template": {
                            "spec": {
                                "clusterName": "ovh",
                                "bootstrap": {},
                                "infrastructureRef": {"kind": "OpenStackMachineTemplate", "name": "c3-16"},
                            }
                        },
                    },
                },
            )
            await capi.patch_namespaced_custom_object(
                GROUP,
                VERSION,
                "default",
                "machinedeployments",
                "c3-16",
                {"spec": {"replicas": 2}},
                _content_type="application/merge-patch+json",
            )

            async def all_running() -> bool:
                pods = (await core.list_namespaced_pod("default", label_selector="app=web")).items
                return len(pods) == 8 and all(p.status.phase == "Running" for p in pods)

            await poll(all_running, what="all 8 pods Running on the new nodes")
            nodes = (await core.list_node()).items
            assert len(nodes) == 2
            assert all(n.metadata.labels["node.kubernetes.io/instance-type"] == "c3-16" for n in nodes)

            machines = (await capi.list_namespaced_custom_object(GROUP, VERSION, "default", "machines"))[
                "items"
            ]
            assert {m["status"]["phase"] for m in machines} == {"Running"}
            target = machines[0]["metadata"]["name"]
            await capi.patch_namespaced_custom_object(
                GROUP,
                VERSION,
                "default",
                "machines",
                target,
                {"metadata": {"annotations": {"cluster.x-k8s.io/delete-machine": "yes"}}},
                _content_type="application/merge-patch+json",
            )
            await capi.patch_namespaced_custom_object(
                GROUP,
                VERSION,
                "default",
                "machinedeployments",
                "c3-16",
                {"spec": {"replicas": 1}},
                _content_type="application/merge-patch+json",
            )

            async def marked_gone() -> bool:
                names = {
                    m["metadata"]["name"]
                    for m in (
                        await capi.list_namespaced_custom_object(GROUP, VERSION, "default", "machines")
                    )["items"]
                }
                node_names = {n.metadata.name for n in (await core.list_node()).items}
                return target not in names and target not in node_names and len(names) == 1

            await poll(marked_gone, what="the marked machine and its node removed")


async def kubectl(kubeconfig: Any, home: Any, *args: str) -> tuple[int, str, str]:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "NO_PROXY": "127.0.0.1"}
    process = await asyncio.create_subprocess_exec(
        KUBECTL,
        "--kubeconfig",
        str(kubeconfig),
        "--cache-dir",
        str(home / "cache"),
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    out, err = await asyncio.wait_for(process.communicate(), 60)
    return process.returncode or 0, out.decode(), err.decode()


@pytest.mark.skipif(not os.access(KUBECTL, os.X_OK), reason="kubectl is not installed")
async def test_kubectl_drain_moves_pods_while_the_budget_holds(tmp_path: Any) -> None:
    async with running_sandbox("fast") as sandbox:
        store = sandbox.workload_store
        for name in ("a", "b"):
            store.create(store.resource("v1", "Node"), node(name, cpu="4"))
        store.create(store.resource("apps/v1", "Deployment"), deployment("web", 3, cpu="1"))
        store.create(
            store.resource("policy/v1", "PodDisruptionBudget"),
            {
                "metadata": {"name": "web", "namespace": "default"},
                "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}},
            },
        )

        def running_on() -> list[str]:
            pods = store.list(store.resource("v1", "Pod"), label_selector="app=web")[0]
            return sorted(
                p["spec"]["nodeName"]
                for p in pods
                if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
            )

        async def settled() -> bool:
            return len(running_on()) == 3

        await poll(settled, what="3 pods running")
        # the node holding two or three of the pods (least-allocated spreading usually gives a, b, a, but
        # which node turns Ready first decides it): evicting its pods at once would leave one healthy pod,
        # so the budget answers 429 and kubectl waits for the replacement
        crowded = Counter(running_on()).most_common(1)[0][0]
        other = "b" if crowded == "a" else "a"
        code, out, err = await kubectl(
            sandbox.workload_kubeconfig, tmp_path, "drain", crowded, "--ignore-daemonsets", "--timeout=30s"
        )
        assert code == 0, err
        assert f"node/{crowded} cordoned" in out + err and "drained" in out + err
        assert "violate the pod's disruption budget" in err
        assert store.get(store.resource("v1", "Node"), crowded)["spec"]["unschedulable"] is True

        async def moved() -> bool:
            return running_on() == [other] * 3

        await poll(moved, what=f"all pods running on {other}")
