"""How the launcher patches a Machine: its premises (the same Machine, with the annotations the decision
read) are held by the API server through JSON patch ``test`` operations, so the Cluster API controller
rewriting the Machine's status meanwhile refuses nothing, while another writer's binding still does."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from devtools.sandbox.testing import running_sandbox
from proto import events as ev
from tenon.core.wellknown import DELETE_MACHINE, NODECLAIM, NODEPOOL
from tenon.runtime.eventlog.memory import InMemoryEventLog
from tenon.services.launcher_capi.executor import LauncherExecutor, annotation_patch
from tests.launcher_capi.launcher_support import running_launcher
from tests.support.events import build_event
from tests.support.waiting import until

KEY = "default/m1"


def machine(annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "cluster.x-k8s.io/v1beta2",
        "kind": "Machine",
        "metadata": {
            "name": "m1",
            "namespace": "default",
            "labels": {"cluster.x-k8s.io/deployment-name": "c3-8"},
            "annotations": dict(annotations or {}),
        },
        "spec": {"clusterName": "demo"},
    }


def bind(claim: str) -> ev.MachineBound:
    return build_event(
        ev.MachineBound,
        f"bind-{claim}",
        namespace="default",
        machine="m1",
        machine_deployment="c3-8",
        nodeclaim=claim,
        nodepool="default",
    )


def count_patches(executor: LauncherExecutor) -> list[str]:
    """The content types of the PATCH requests the executor sends from now on."""
    sent: list[str] = []
    original = executor.management.patch

    async def patch(*args: Any, **kwargs: Any) -> dict[str, Any]:
        sent.append(kwargs.get("content_type", "application/merge-patch+json"))
        result: dict[str, Any] = await original(*args, **kwargs)
        return result

    executor.management.patch = patch  # type: ignore[method-assign]
    return sent


async def written_behind_its_back(
    executor: LauncherExecutor, store: Any, change: Callable[[dict[str, Any]], None]
) -> None:
    """Another writer changes the Machine after the executor cached it; the executor keeps its stale copy
    (as when its patch races the write)."""
    machines = store.resource("cluster.x-k8s.io/v1beta2", "Machine")
    assert executor.watch is not None
    cache = executor.watch.machines
    await until(lambda: KEY in cache.objects, what="the Machine cached")
    stale = copy.deepcopy(cache.objects[KEY])
    fresh = store.get(machines, "m1", "default")
    change(fresh)
    written = store.update(machines, fresh, subresource="status" if "status" in fresh else None)
    version = written["metadata"]["resourceVersion"]
    await until(
        lambda: cache.objects[KEY]["metadata"]["resourceVersion"] == version, what="the watch saw the write"
    )
    cache.objects[KEY] = stale


async def test_a_status_rewritten_by_the_controller_meanwhile_does_not_refuse_a_bind() -> None:
    async with running_sandbox(controllers=False) as sb:
        store = sb.management_store
        store.create(store.resource("cluster.x-k8s.io/v1beta2", "Machine"), machine())
        async with running_launcher(InMemoryEventLog(), sb, workload=False) as runtime:
            executor = runtime.executor
            assert isinstance(executor, LauncherExecutor)
            await written_behind_its_back(
                executor, store, lambda m: m.update(status={"phase": "Provisioning"})
            )
            sent = count_patches(executor)
            assert await executor.prepare(bind("mine"))
            stored = store.get(store.resource("cluster.x-k8s.io/v1beta2", "Machine"), "m1", "default")
            assert stored["metadata"]["annotations"][NODECLAIM] == "mine"
            assert stored["metadata"]["labels"][NODEPOOL] == "default"
            assert stored["status"] == {"phase": "Provisioning"}  # the controller's write is kept
            assert sent == ["application/json-patch+json"]  # one request: not refused on the status write


async def test_a_machine_bound_by_another_writer_meanwhile_keeps_that_binding() -> None:
    async with running_sandbox(controllers=False) as sb:
        store = sb.management_store
        store.create(store.resource("cluster.x-k8s.io/v1beta2", "Machine"), machine())
        async with running_launcher(InMemoryEventLog(), sb, workload=False) as runtime:
            executor = runtime.executor
            assert isinstance(executor, LauncherExecutor)

            def bound_elsewhere(m: dict[str, Any]) -> None:
                m["metadata"]["annotations"][NODECLAIM] = "other"

            await written_behind_its_back(executor, store, bound_elsewhere)
            assert not await executor.prepare(bind("mine"))  # refused on the server, then dropped
            stored = store.get(store.resource("cluster.x-k8s.io/v1beta2", "Machine"), "m1", "default")
            assert stored["metadata"]["annotations"][NODECLAIM] == "other"
            assert NODEPOOL not in stored["metadata"]["labels"]


def test_the_patch_holds_the_annotations_it_was_decided_on_and_escapes_keys() -> None:
    current = machine({NODECLAIM: "a"})
    current["metadata"]["uid"] = "u1"
    ops = annotation_patch(current, {DELETE_MACHINE: "now"}, {})
    assert ops == [
        {"op": "test", "path": "/metadata/uid", "value": "u1"},
        {"op": "test", "path": "/metadata/annotations", "value": {NODECLAIM: "a"}},
        {"op": "add", "path": "/metadata/annotations/" + DELETE_MACHINE.replace("/", "~1"), "value": "now"},
    ]
    # nothing to hold on to: the caller falls back to a resourceVersion precondition
    del current["metadata"]["annotations"]
    assert annotation_patch(current, {DELETE_MACHINE: "now"}, {}) is None
