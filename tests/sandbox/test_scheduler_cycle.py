"""One cycle of the simulated kube-scheduler over a backlog: a failure is reused for the pods of the same
shape (no re-filtering of every node per pod), and never beyond the booking that could change the answer."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest

from devtools.sandbox.controllers import scheduler as scheduler_module
from devtools.sandbox.controllers.scheduler import Scheduler
from devtools.sandbox.patching import MERGE_PATCH
from devtools.sandbox.profiles import get_profile
from devtools.sandbox.store import Store
from tests.sandbox.controller_support import condition, node, pod, rt, wait_for

ZONE = "topology.kubernetes.io/zone"


def follows_db() -> dict[str, Any]:
    """Required pod affinity to a ``role: db`` pod's zone (the pod itself is no db: it cannot go first)."""
    return {
        "podAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"role": "db"}}, "topologyKey": ZONE}
            ]
        }
    }


def scheduler_over(store: Store, nodes: list[dict[str, Any]], pods: list[dict[str, Any]]) -> Scheduler:
    """A scheduler whose cache holds the stored nodes and pods (as its informers would deliver them)."""
    sched = Scheduler(store, get_profile("fast"))
    for item in nodes:
        sched._on_node("ADDED", store.create(rt(store, "v1", "Node"), item), None)
    for item in pods:
        sched._on_pod("ADDED", store.create(rt(store, "v1", "Pod"), item), None)
    return sched


def stored(store: Store, name: str) -> dict[str, Any]:
    return store.get(rt(store, "v1", "Pod"), name, "default")


@pytest.fixture
def counted_choices(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    calls: list[str] = []
    choose = scheduler_module.choose_node

    def counting(candidate: Any, requests: Any, state: Any) -> Any:
        calls.append(candidate["metadata"]["name"])
        return choose(candidate, requests, state)

    monkeypatch.setattr(scheduler_module, "choose_node", counting)
    return calls


async def test_a_backlog_of_one_shape_is_filtered_once_and_every_pod_told_why(
    counted_choices: list[str],
) -> None:
    store = Store()
    zone_a = node("n1", cpu="4", labels={ZONE: "a"}, ready=True)
    followers = [pod(f"f{i}", labels={"app": "web"}, affinity=follows_db()) for i in range(20)]
    sched = scheduler_over(store, [zone_a], followers)

    await sched._cycle()

    assert counted_choices == ["f0"]  # the 19 others of the same shape reuse its answer
    for i in range(20):
        scheduled = condition(stored(store, f"f{i}"), "PodScheduled")
        assert scheduled is not None and scheduled["reason"] == "Unschedulable"
        assert "didn't match pod affinity rules" in scheduled["message"]


async def test_a_booking_in_the_cycle_voids_the_reused_failure(counted_choices: list[str]) -> None:
    store = Store()
    zone_a = node("n1", cpu="4", labels={ZONE: "a"}, ready=True)
    # in cycle order: a follower (no db yet: fails), the db (lands), another follower (must land now)
    first = pod("a-follower", labels={"app": "web"}, affinity=follows_db())
    db = pod("b-db", labels={"role": "db"})
    second = pod("c-follower", labels={"app": "web"}, affinity=follows_db())
    sched = scheduler_over(store, [zone_a], [first, db, second])

    await sched._cycle()

    assert not stored(store, "a-follower")["spec"].get("nodeName")
    assert stored(store, "b-db")["spec"]["nodeName"] == "n1"
    assert stored(store, "c-follower")["spec"]["nodeName"] == "n1"
    assert counted_choices == ["a-follower", "b-db", "c-follower"]


async def test_pods_of_one_shape_each_go_to_the_node_they_are_nominated_to(
    counted_choices: list[str],
) -> None:
    """The nomination is what a shape's reused failure does not share: each pod tries its own node first."""
    store = Store()
    nodes = [node(f"n{i}", cpu="1", ready=True) for i in range(3)]
    replicas = [pod(f"r{i}", cpu="800m", labels={"app": "web"}) for i in range(4)]
    for i, replica in enumerate(replicas[1:], start=1):
        replica["status"] = {"nominatedNodeName": f"n{i}"}
    # r0 is not nominated and comes first: n1 and n2 are held for r1 and r2, n0 goes to it
    sched = scheduler_over(store, nodes, replicas)

    await sched._cycle()

    assert [stored(store, f"r{i}")["spec"].get("nodeName") for i in range(4)] == ["n0", "n1", "n2", None]
    # r3's nominated node n3 does not exist: it fails as r0's shape would now, told why
    scheduled = condition(stored(store, "r3"), "PodScheduled")
    assert scheduled is not None and "Insufficient cpu" in scheduled["message"]


async def test_a_node_joining_with_a_taint_no_pending_pod_tolerates_does_not_wake_them() -> None:
    """The real scheduler's queueing hint for taints: a pod rejected for untolerated taints is tried again for
    a Node it may land on, not for every change of a Node it cannot (a joining node changes five times while
    it still carries ``karpenter.sh/unregistered``)."""
    store = Store()
    unregistered = [{"key": "karpenter.sh/unregistered", "effect": "NoExecute"}]
    nodes_rt = rt(store, "v1", "Node")
    sched = scheduler_over(store, [node("n1", ready=True, taints=unregistered)], [pod("web")])
    await sched._cycle()
    waiting = sched.pending["default/web"]
    tried_at = waiting.last_attempt
    assert waiting.due_at(sched._changed_at) == waiting.next_try  # waits for the periodic flush

    sched._on_node("ADDED", store.create(nodes_rt, node("n2", ready=True, taints=unregistered)), None)
    assert sched._changed_at < tried_at and waiting.due_at(sched._changed_at) == waiting.next_try

    # a pending pod that tolerates the taint (too big for n1) is woken by the next such node; the others not
    agent = pod("agent", cpu="64", tolerations=[{"operator": "Exists"}])
    sched._on_pod("ADDED", store.create(rt(store, "v1", "Pod"), agent), None)
    await sched._cycle()
    tolerant = sched.pending["default/agent"]
    sched._on_node("ADDED", store.create(nodes_rt, node("n3", ready=True, taints=unregistered)), None)
    assert tolerant.due_at(sched._changed_at) == tolerant.backoff_until < tolerant.next_try
    assert waiting.due_at(sched._changed_at) == waiting.next_try

    sched._on_node("ADDED", store.create(nodes_rt, node("n4", ready=True)), None)
    assert waiting.due_at(sched._changed_at) == waiting.backoff_until  # an untainted node: every pod is due


async def test_a_node_losing_its_last_taint_wakes_the_pending_pods() -> None:
    store = Store()
    unregistered = [{"key": "karpenter.sh/unregistered", "effect": "NoExecute"}]
    sched = scheduler_over(store, [node("n1", ready=True, taints=unregistered)], [pod("web")])
    await sched._cycle()
    tried_at = sched.pending["default/web"].last_attempt
    nodes_rt = rt(store, "v1", "Node")
    before = store.get(nodes_rt, "n1")
    registered = {**before, "spec": {"taints": []}}
    sched._on_node("MODIFIED", store.update(nodes_rt, registered), before)
    assert sched._changed_at > tried_at
    sched.pending["default/web"].backoff_until = 0.0  # its backoff over
    await sched._cycle()
    assert stored(store, "web")["spec"]["nodeName"] == "n1"


async def test_a_cycle_reads_the_nominations_written_before_the_node_it_decides_on_changed() -> None:
    """tenon nominates a Node's pods, then removes its unregistered taint. Behind a backlog of other pod
    writes, the pod informer still lacks those nominations when the Node informer has the taint gone; the
    cycle reads both as the store has them before it decides, so the first pod in its order does not take
    the room the nominated ones hold (which then land), as a real kube-scheduler, whose informers are
    milliseconds behind the API server, would not let it."""
    store = Store()
    nodes_rt, pods_rt = rt(store, "v1", "Node"), rt(store, "v1", "Pod")
    unregistered = [{"key": "karpenter.sh/unregistered", "effect": "NoExecute"}]
    store.create(nodes_rt, node("n1", cpu="2", ready=True, taints=unregistered))
    waiting = ["a-other", "b-planned", "c-planned"]  # one cycle tries them in this order
    for name in waiting:
        store.create(pods_rt, pod(name, cpu="800m"))
    fillers = [
        store.create(pods_rt, pod(f"filler-{i}", schedulerName="another-scheduler")) for i in range(200)
    ]
    sched = Scheduler(store, get_profile("fast"))
    task = asyncio.create_task(sched.run())
    try:
        await wait_for(
            lambda: all(condition(stored(store, name), "PodScheduled") for name in waiting),
            what="the three pods tried while the node is unregistered",
        )
        loop = asyncio.get_running_loop()
        await wait_for(
            lambda: all(sched.pending[f"default/{name}"].backoff_until < loop.time() for name in waiting),
            what="their backoff over: the node's change makes them due at once",
        )
        for round_ in range(15):  # the backlog: 3,000 writes the pod informer reads in slices
            for filler in fillers:
                store.patch(
                    pods_rt,
                    filler["metadata"]["name"],
                    "default",
                    {"metadata": {"labels": {"round": str(round_)}}},
                    MERGE_PATCH,
                )
        for name in ("b-planned", "c-planned"):
            store.patch(
                pods_rt, name, "default", {"status": {"nominatedNodeName": "n1"}}, MERGE_PATCH, "status"
            )
        store.patch(nodes_rt, "n1", None, {"spec": {"taints": []}}, MERGE_PATCH)

        await wait_for(
            lambda: len([name for name in waiting if stored(store, name)["spec"].get("nodeName")]) == 2,
            what="two of the pods bound to n1 (the room it has)",
        )
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert [stored(store, name)["spec"].get("nodeName") for name in waiting] == [None, "n1", "n1"]
