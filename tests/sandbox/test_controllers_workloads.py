"""The workload cluster's controllers against the in-process store: what a user of the sandbox would see."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import pytest

from devtools.sandbox.controllers import daemonsets
from devtools.sandbox.controllers.daemonsets import POD_EVENT_BATCH, DaemonSetController
from devtools.sandbox.controllers.disruption_budgets import budget_status
from devtools.sandbox.controllers.nodes_gc import eviction_delay
from devtools.sandbox.errors import TooManyRequests
from devtools.sandbox.profiles import get_profile
from devtools.sandbox.store import Store
from tests.sandbox.controller_support import (
    condition,
    deployment,
    node,
    pod,
    pods_of,
    rt,
    running_controllers,
    wait_for,
)


async def test_deployment_pods_wait_unschedulable_then_run_when_nodes_join() -> None:
    async with running_controllers() as store:
        store.create(rt(store, "apps/v1", "Deployment"), deployment("web", 8, cpu="1"))

        def all_unschedulable() -> bool:
            pods = pods_of(store, "app=web")
            return len(pods) == 8 and all(
                (c := condition(p, "PodScheduled")) is not None and c["reason"] == "Unschedulable"
                for p in pods
            )

        await wait_for(all_unschedulable, what="8 Unschedulable pods")
        pods = pods_of(store, "app=web")
        assert all(p["status"]["phase"] == "Pending" and not p["spec"].get("nodeName") for p in pods)
        assert condition(pods[0], "PodScheduled")["message"] == "no nodes available to schedule pods"  # type: ignore[index]
        owner = pods[0]["metadata"]["ownerReferences"][0]
        assert owner["kind"] == "ReplicaSet" and pods[0]["metadata"]["name"].startswith(owner["name"] + "-")
        events = store.list(rt(store, "v1", "Event"))[0]
        assert any(e["reason"] == "FailedScheduling" and e["type"] == "Warning" for e in events)

        # one small node: 3 fit, the rest report why not
        store.create(rt(store, "v1", "Node"), node("small", cpu="3"))
        await wait_for(
            lambda: sum(p["status"]["phase"] == "Running" for p in pods_of(store, "app=web")) == 3,
            what="3 pods running on the small node",
        )
        pending = [p for p in pods_of(store, "app=web") if not p["spec"].get("nodeName")]
        await wait_for(
            lambda: all(
                "1 Insufficient cpu" in (condition(p, "PodScheduled") or {}).get("message", "")
                for p in (
                    store.get(rt(store, "v1", "Pod"), x["metadata"]["name"], "default") for x in pending
                )
            ),
            what="Insufficient cpu on the remaining pods",
        )

        store.create(rt(store, "v1", "Node"), node("big", cpu="8"))
        await wait_for(
            lambda: all(p["status"]["phase"] == "Running" for p in pods_of(store, "app=web")),
            what="all 8 pods Running",
        )
        running = pods_of(store, "app=web")
        assert {p["spec"]["nodeName"] for p in running} == {"small", "big"}
        assert all(condition(p, "Ready")["status"] == "True" for p in running)  # type: ignore[index]
        assert all(p["status"].get("podIP") for p in running)
        scheduled = [e for e in store.list(rt(store, "v1", "Event"))[0] if e["reason"] == "Scheduled"]
        assert len(scheduled) == 8
        assert scheduled[0]["message"].startswith("Successfully assigned default/web-")
        deploy = await wait_for(
            lambda: (
                (d := store.get(rt(store, "apps/v1", "Deployment"), "web", "default"))["status"].get(
                    "readyReplicas"
                )
                == 8
                and d
            ),
            what="deployment status readyReplicas 8",
        )
        assert deploy["status"]["replicas"] == 8


async def test_deployment_scale_down_deletes_pending_pods_first() -> None:
    async with running_controllers() as store:
        store.create(rt(store, "v1", "Node"), node("n", cpu="2"))
        store.create(rt(store, "apps/v1", "Deployment"), deployment("web", 4, cpu="1"))
        await wait_for(
            lambda: sum(p["status"]["phase"] == "Running" for p in pods_of(store, "app=web")) == 2,
            what="2 of 4 running",
        )
        running = {
            p["metadata"]["name"] for p in pods_of(store, "app=web") if p["status"]["phase"] == "Running"
        }
        d = store.get(rt(store, "apps/v1", "Deployment"), "web", "default")
        d["spec"]["replicas"] = 2
        store.update(rt(store, "apps/v1", "Deployment"), d)
        await wait_for(lambda: len(pods_of(store, "app=web")) == 2, what="scaled down to 2 pods")
        assert {p["metadata"]["name"] for p in pods_of(store, "app=web")} == running


async def test_node_boots_not_ready_then_becomes_ready() -> None:
    async with running_controllers() as store:
        store.create(rt(store, "v1", "Node"), node("n1"))
        registered = await wait_for(
            lambda: condition(n := store.get(rt(store, "v1", "Node"), "n1"), "Ready") and n,
            what="registration",
        )
        assert condition(registered, "Ready")["status"] == "False"  # type: ignore[index]
        assert {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}.items() <= registered["spec"][
            "taints"
        ][0].items()
        assert registered["status"]["allocatable"] == {"cpu": "4", "memory": "16Gi", "pods": "110"}
        ready = await wait_for(
            lambda: (
                (c := condition(n := store.get(rt(store, "v1", "Node"), "n1"), "Ready"))
                and c["status"] == "True"
                and n
            ),
            what="Ready=True",
        )
        assert not any(t["key"] == "node.kubernetes.io/not-ready" for t in ready["spec"].get("taints") or [])
        assert ready["status"]["capacity"]["cpu"] == "4"
        leases = rt(store, "coordination.k8s.io/v1", "Lease")
        lease = await wait_for(lambda: store.list(leases, "kube-node-lease")[0], what="node lease")
        assert lease[0]["spec"]["holderIdentity"] == "n1"
        store.delete(rt(store, "v1", "Node"), "n1")
        await wait_for(
            lambda: not store.list(leases, "kube-node-lease")[0], what="lease collected with its node"
        )


async def test_graceful_deletion_waits_then_removes_the_pod() -> None:
    async with running_controllers() as store:
        pods_rt = rt(store, "v1", "Pod")
        store.create(rt(store, "v1", "Node"), node("n"))
        store.create(pods_rt, pod("p", terminationGracePeriodSeconds=30))
        await wait_for(
            lambda: store.get(pods_rt, "p", "default")["status"]["phase"] == "Running", what="Running"
        )
        store.delete(pods_rt, "p", "default")
        assert store.get(pods_rt, "p", "default")["metadata"]["deletionTimestamp"]  # still there, terminating
        await wait_for(lambda: not pods_of(store), what="pod removed after the (capped) grace period")


async def test_daemonset_gets_a_pod_on_each_new_matching_node() -> None:
    async with running_controllers() as store:
        ds = deployment("agent", 0, cpu="100m")
        ds["kind"] = "DaemonSet"
        del ds["spec"]["replicas"]
        ds["spec"]["template"]["spec"]["nodeSelector"] = {"role": "worker"}
        store.create(rt(store, "apps/v1", "DaemonSet"), ds)
        store.create(rt(store, "v1", "Node"), node("w1", labels={"role": "worker"}))
        store.create(rt(store, "v1", "Node"), node("infra", labels={"role": "infra"}))
        await wait_for(
            lambda: (
                [
                    p["spec"].get("nodeName")
                    for p in pods_of(store, "app=agent")
                    if p["status"]["phase"] == "Running"
                ]
                == ["w1"]
            ),
            what="agent on w1",
        )
        store.create(rt(store, "v1", "Node"), node("w2", labels={"role": "worker"}))
        await wait_for(
            lambda: (
                sorted(
                    p["spec"].get("nodeName")
                    for p in pods_of(store, "app=agent")
                    if p["status"]["phase"] == "Running"
                )
                == ["w1", "w2"]
            ),
            what="agent on w2",
        )
        status = await wait_for(
            lambda: (
                (s := store.get(rt(store, "apps/v1", "DaemonSet"), "agent", "default")["status"]).get(
                    "numberReady"
                )
                == 2
                and s
            ),
            what="ds status",
        )
        assert status["desiredNumberScheduled"] == 2
        assert not any(p["spec"].get("nodeName") == "infra" for p in pods_of(store))


async def test_a_node_relabelled_out_of_a_daemonsets_selector_loses_its_pod() -> None:
    """The DaemonSet controller remembers which nodes its pods belong on only while neither object changed."""
    async with running_controllers() as store:
        ds = deployment("agent", 0, cpu="100m")
        ds["kind"] = "DaemonSet"
        del ds["spec"]["replicas"]
        ds["spec"]["template"]["spec"]["nodeSelector"] = {"role": "worker"}
        store.create(rt(store, "apps/v1", "DaemonSet"), ds)
        nodes_rt = rt(store, "v1", "Node")
        store.create(nodes_rt, node("w1", labels={"role": "worker"}))
        store.create(nodes_rt, node("w2", labels={"role": "worker"}))

        def running_on() -> list[str]:
            pods = pods_of(store, "app=agent")
            return sorted(p["spec"]["nodeName"] for p in pods if p["status"]["phase"] == "Running")

        await wait_for(lambda: running_on() == ["w1", "w2"], what="agent on w1 and w2")
        w1 = store.get(nodes_rt, "w1")
        w1["metadata"]["labels"]["role"] = "infra"
        store.update(nodes_rt, w1)
        await wait_for(
            lambda: [p["spec"].get("nodeName") for p in pods_of(store, "app=agent")] == ["w2"],
            what="agent gone from the relabelled w1",
        )


async def test_pdb_blocks_eviction_until_enough_pods_are_healthy() -> None:
    async with running_controllers() as store:
        store.create(rt(store, "v1", "Node"), node("n", cpu="8"))
        store.create(rt(store, "apps/v1", "Deployment"), deployment("web", 3, cpu="1"))
        pdb_rt = rt(store, "policy/v1", "PodDisruptionBudget")
        store.create(
            pdb_rt,
            {
                "metadata": {"name": "web", "namespace": "default"},
                "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "web"}}},
            },
        )
        status = await wait_for(
            lambda: (
                (s := store.get(pdb_rt, "web", "default").get("status") or {}).get("currentHealthy") == 3
                and s
            ),
            what="3 healthy pods",
        )
        assert (status["expectedPods"], status["desiredHealthy"], status["disruptionsAllowed"]) == (3, 2, 1)
        victim, other = [p["metadata"]["name"] for p in pods_of(store, "app=web")][:2]
        store.evict(victim, "default")
        with pytest.raises(TooManyRequests):
            store.evict(other, "default")


def test_pdb_arithmetic() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)

    def ready_pod(name: str, ready: bool = True) -> dict:
        item = pod(name, labels={"app": "x"})
        item["status"] = {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        }
        return item

    pods = [ready_pod("a"), ready_pod("b"), ready_pod("c"), ready_pod("d", ready=False)]
    budget = {
        "metadata": {"name": "b", "namespace": "default", "generation": 2},
        "spec": {"minAvailable": "50%"},
    }
    scale = lambda p: ("rs", 6)  # noqa: E731 - the pods' ReplicaSet wants 6
    status, _ = budget_status(budget, pods, scale, now)
    assert (status["expectedPods"], status["desiredHealthy"], status["currentHealthy"]) == (6, 3, 3)
    assert status["disruptionsAllowed"] == 0 and status["observedGeneration"] == 2
    status, _ = budget_status({**budget, "spec": {"minAvailable": 2}}, pods, scale, now)
    assert (status["expectedPods"], status["disruptionsAllowed"]) == (4, 1)
    # a pod the store just evicted no longer counts as healthy until it is gone (or 2 minutes pass)
    recent = {
        **budget,
        "spec": {"minAvailable": 2},
        "status": {"disruptedPods": {"a": (now - timedelta(seconds=30)).strftime("%Y-%m-%dT%H:%M:%SZ")}},
    }
    status, expiry = budget_status(recent, pods, scale, now)
    assert status["currentHealthy"] == 2 and status["disruptionsAllowed"] == 0
    assert expiry == pytest.approx(90)
    with pytest.raises(ValueError, match=r"poddisruptionbudget default/b: spec.maxUnavailable"):
        budget_status({**budget, "spec": {"maxUnavailable": "lots"}}, pods, scale, now)


async def test_noexecute_taint_evicts_and_orphans_are_collected() -> None:
    async with running_controllers() as store:
        nodes_rt = rt(store, "v1", "Node")
        store.create(nodes_rt, node("n"))
        store.create(
            rt(store, "v1", "Pod"), pod("stays", tolerations=[{"key": "drain", "operator": "Exists"}])
        )
        store.create(rt(store, "v1", "Pod"), pod("goes"))
        await wait_for(
            lambda: len([p for p in pods_of(store) if p["status"]["phase"] == "Running"]) == 2,
            what="both running",
        )
        n = store.get(nodes_rt, "n")
        n["spec"]["taints"] = [{"key": "drain", "effect": "NoExecute"}]
        store.update(nodes_rt, n)
        await wait_for(lambda: [p["metadata"]["name"] for p in pods_of(store)] == ["stays"], what="eviction")
        store.delete(nodes_rt, "n")
        await wait_for(lambda: not pods_of(store), what="orphan pod collected")


def test_noexecute_eviction_delay_honours_toleration_seconds() -> None:
    taints = [{"key": "drain", "effect": "NoExecute"}, {"key": "soft", "effect": "NoSchedule"}]
    assert eviction_delay(pod("p"), taints) == 0.0  # untolerated: now
    assert eviction_delay(pod("p", tolerations=[{"key": "drain", "operator": "Exists"}]), taints) is None
    timed = pod("p", tolerations=[{"key": "drain", "operator": "Exists", "tolerationSeconds": 30}])
    assert eviction_delay(timed, taints) == 30.0
    assert eviction_delay(pod("p"), [{"key": "soft", "effect": "NoSchedule"}]) is None


async def test_malformed_affinity_is_a_scheduler_error_not_unschedulable() -> None:
    async with running_controllers() as store:
        store.create(rt(store, "v1", "Node"), node("n"))
        bad = pod(
            "bad",
            affinity={
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {"matchExpressions": [{"key": "zone", "operator": "Near", "values": ["a"]}]}
                        ]
                    }
                }
            },
        )
        try:
            store.create(rt(store, "v1", "Pod"), bad)
        except Exception as err:  # the API server may already reject it; then there is nothing to schedule
            pytest.skip(f"rejected at admission: {err}")
        cond = await wait_for(
            lambda: condition(store.get(rt(store, "v1", "Pod"), "bad", "default"), "PodScheduled"),
            what="PodScheduled condition",
        )
        assert cond["status"] == "False" and cond["reason"] == "SchedulerError"
        assert "pod default/bad" in cond["message"] and "operator: unknown operator 'Near'" in cond["message"]


async def test_relabelling_a_blocking_pod_lets_an_anti_affine_pod_schedule_promptly() -> None:
    anti = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"role": "db"}}, "topologyKey": "kubernetes.io/hostname"}
            ]
        }
    }
    async with running_controllers() as store:
        pods_rt = rt(store, "v1", "Pod")
        store.create(rt(store, "v1", "Node"), node("n"))
        store.create(pods_rt, pod("first", labels={"role": "db"}))
        await wait_for(
            lambda: store.get(pods_rt, "first", "default")["spec"].get("nodeName"), what="first bound"
        )
        store.create(pods_rt, pod("second", labels={"role": "db"}, affinity=anti))
        await wait_for(
            lambda: (
                "anti-affinity"
                in (
                    (condition(store.get(pods_rt, "second", "default"), "PodScheduled") or {}).get("message")
                    or ""
                )
            ),
            what="second blocked by anti-affinity",
        )
        first = store.get(pods_rt, "first", "default")
        first["metadata"]["labels"] = {"role": "cache"}
        store.update(pods_rt, first)
        # well before the 5 s periodic retry of the fast profile
        await wait_for(
            lambda: store.get(pods_rt, "second", "default")["spec"].get("nodeName") == "n",
            timeout=2.0,
            what="second bound after the relabel",
        )


def test_a_daemonset_that_takes_long_to_sync_is_synced_less_often_after_its_pods_change(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A sync walks every node and pod of the set; after one that took t, the next waits 10 t (50 ms at
    least), so a large cluster's DaemonSet does not take the sandbox's thread from the API server."""
    controller = DaemonSetController(Store(), get_profile("fast"))
    costs = iter((0.02, 0.001))
    clock = [0.0]  # the syncs' cost on a clock of the test's own: a loaded machine stretches a real one

    def spend(key: str) -> None:
        clock[0] += next(costs)

    monkeypatch.setattr(daemonsets, "time", SimpleNamespace(perf_counter=lambda: clock[0]))
    monkeypatch.setattr(controller, "_reconcile", spend)
    assert controller._wait("kube-system/agent") == POD_EVENT_BATCH
    controller.reconcile("kube-system/agent")
    assert controller._wait("kube-system/agent") == pytest.approx(10 * 0.02)
    controller.reconcile("kube-system/agent")
    assert controller._wait("kube-system/agent") == POD_EVENT_BATCH
