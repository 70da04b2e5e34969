"""How the launcher patches a Machine or a MachineDeployment: its premises (the same object, with the
annotations, and for a MachineDeployment the spec, the decision read) are held by the API server through JSON
patch ``test`` operations, so the Cluster API controller rewriting the object's status meanwhile refuses
nothing, while another writer's binding or scale still does."""

from __future__ import annotations

import contextlib
import copy
from collections.abc import AsyncIterator, Callable
from typing import Any

from devtools.sandbox.testing import running_sandbox
from proto import events as ev
from tenon.core.wellknown import DELETE_MACHINE, NODECLAIM, NODEPOOL, SCALED_DOWN_FOR, SCALED_UP_FOR
from tenon.runtime.eventlog.memory import InMemoryEventLog
from tenon.services.launcher_capi.executor import LauncherExecutor, annotation_patch, deployment_patch
from tests.launcher_capi.launcher_support import machine_deployment, running_launcher
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
    executor: LauncherExecutor,
    store: Any,
    change: Callable[[dict[str, Any]], None],
    *,
    kind: str = "Machine",
    name: str = "m1",
) -> None:
    """Another writer changes the object after the executor cached it; the executor keeps its stale copy
    (as when its patch races the write)."""
    resource = store.resource("cluster.x-k8s.io/v1beta2", kind)
    assert executor.watch is not None
    cache = executor.watch.machines if kind == "Machine" else executor.watch.deployments
    key = f"default/{name}"
    await until(lambda: key in cache.objects, what=f"the {kind} cached")
    stale = copy.deepcopy(cache.objects[key])
    fresh = store.get(resource, name, "default")
    change(fresh)
    written = store.update(resource, fresh, subresource="status" if "status" in fresh else None)
    version = written["metadata"]["resourceVersion"]
    await until(
        lambda: cache.objects[key]["metadata"]["resourceVersion"] == version, what="the watch saw the write"
    )
    cache.objects[key] = stale


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


def scale(runtime: Any, to: int) -> ev.MachineDeploymentScaled:
    believed = runtime.state.deployments["default/c3-8"]
    return build_event(
        ev.MachineDeploymentScaled,
        f"scale-{to}",
        namespace="default",
        machine_deployment="c3-8",
        resource_version=believed.resource_version,
        replicas_from=believed.replicas,
        replicas_to=to,
        scaled_up_for=("default-a", "default-b")[: max(0, to - believed.replicas)],
        reason="a replica for NodeClaim default-a",
    )


@contextlib.asynccontextmanager
async def deployment_changed_behind(
    change: Callable[[dict[str, Any]], None],
) -> AsyncIterator[tuple[Any, LauncherExecutor, Any]]:
    """A launcher whose state knows MachineDeployment c3-8 (1 replica), which another writer then changed
    behind the executor's cached copy; (runtime, executor, store)."""
    async with running_sandbox(controllers=False) as sb:
        store = sb.management_store
        store.create(
            store.resource("cluster.x-k8s.io/v1beta2", "MachineDeployment"),
            machine_deployment("c3-8", replicas=1),
        )
        async with running_launcher(InMemoryEventLog(), sb, workload=False) as runtime:
            executor = runtime.executor
            assert isinstance(executor, LauncherExecutor)
            await until(lambda: "default/c3-8" in runtime.state.deployments, what="the MD in the state")
            await written_behind_its_back(executor, store, change, kind="MachineDeployment", name="c3-8")
            yield runtime, executor, store


def stored_deployment(store: Any) -> dict[str, Any]:
    result: dict[str, Any] = store.get(
        store.resource("cluster.x-k8s.io/v1beta2", "MachineDeployment"), "c3-8", "default"
    )
    return result


async def test_a_status_rewritten_by_the_controller_meanwhile_does_not_refuse_a_scale() -> None:
    """Cluster API rewrites a MachineDeployment's status at every Machine it creates: a scale decided
    meanwhile still goes through, in one request."""
    async with deployment_changed_behind(lambda md: md.update(status={"replicas": 1})) as (
        runtime,
        executor,
        store,
    ):
        sent = count_patches(executor)
        assert await executor.prepare(scale(runtime, 3))
        stored = stored_deployment(store)
        assert stored["spec"]["replicas"] == 3
        assert stored["metadata"]["annotations"][SCALED_UP_FOR] == "default-a,default-b"
        assert stored["status"] == {"replicas": 1}  # the controller's write is kept
        assert sent == ["application/json-patch+json"]  # one request: not refused on the status write


async def test_a_machine_deployment_scaled_by_another_writer_meanwhile_keeps_that_size() -> None:
    def scaled_elsewhere(md: dict[str, Any]) -> None:
        md["spec"]["replicas"] = 5

    async with deployment_changed_behind(scaled_elsewhere) as (runtime, executor, store):
        assert not await executor.prepare(scale(runtime, 2))  # refused on the server, then dropped
        stored = stored_deployment(store)
        assert stored["spec"]["replicas"] == 5
        assert SCALED_UP_FOR not in stored["metadata"]["annotations"]


async def test_a_scale_dropped_after_repeated_conflicts_is_named_in_the_log() -> None:
    """Another controller rewrites the MachineDeployment's annotations under every attempt (nothing a
    decision reads): after the last one the scale is dropped, to be decided again, and the log says so, so
    ``tenon replay --diff`` does not count the decision it makes as a difference."""
    async with deployment_changed_behind(lambda md: md.update(status={"replicas": 1})) as (
        runtime,
        executor,
        store,
    ):
        resource = store.resource("cluster.x-k8s.io/v1beta2", "MachineDeployment")
        original = executor.management.patch

        async def patch_after_another_write(*args: Any, **kwargs: Any) -> dict[str, Any]:
            fresh = store.get(resource, "c3-8", "default")
            fresh["metadata"]["annotations"]["example.com/touched"] = fresh["metadata"]["resourceVersion"]
            store.update(resource, fresh)
            result: dict[str, Any] = await original(*args, **kwargs)
            return result

        executor.management.patch = patch_after_another_write  # type: ignore[method-assign]
        decision = scale(runtime, 3)
        assert not await executor.prepare(decision)

        async def named_in_the_log() -> list[ev.MachineDeploymentObserved]:
            return [
                record.event
                async for record in runtime.event_log.read()
                if isinstance(record.event, ev.MachineDeploymentObserved)
                and record.event.after == decision.id
            ]

        named = await until(named_in_the_log, what="the dropped scale named in the log")
        assert [observed.machine_deployment["metadata"]["name"] for observed in named] == ["c3-8"]
        assert stored_deployment(store)["spec"]["replicas"] == 1


def test_a_scale_holds_the_spec_and_annotations_it_was_decided_on_and_removes_an_empty_record() -> None:
    current = machine_deployment("c3-8", replicas=2, annotations={SCALED_DOWN_FOR: "m9"})
    current["metadata"]["uid"] = "u1"
    held, spec = dict(current["metadata"]["annotations"]), dict(current["spec"])
    ops = deployment_patch(current, 1, {SCALED_UP_FOR: None, SCALED_DOWN_FOR: None})
    assert ops == [
        {"op": "test", "path": "/metadata/uid", "value": "u1"},
        {"op": "test", "path": "/metadata/annotations", "value": held},
        {"op": "test", "path": "/spec", "value": spec},
        {"op": "remove", "path": "/metadata/annotations/" + SCALED_DOWN_FOR.replace("/", "~1")},
        {"op": "add", "path": "/spec/replicas", "value": 1},
    ]
    del current["metadata"]["annotations"]  # nothing to hold on to: a resourceVersion precondition instead
    assert deployment_patch(current, 1, {SCALED_UP_FOR: "default-a"}) is None
