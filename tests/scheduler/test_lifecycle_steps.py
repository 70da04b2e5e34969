"""A Node Ready by the time its claim is registered is initialized with the same decision, unless a startup
taint of its NodePool still has to go: one hop (the Node's next observation) less between a machine and its
pods."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from devtools.sandbox.testing import running_sandbox
from proto import events as ev
from proto import registry, subjects
from tenon.domain.projection import ClusterProjection
from tenon.runtime.eventlog.memory import InMemoryEventLog
from tenon.runtime.kube import NODES, PODS, Kube, load_kube
from tenon.runtime.replay import replay
from tenon.services.scheduler import lifecycle
from tenon.services.scheduler.decider import SchedulerDecider
from tenon.services.scheduler.service import SchedulerExecutor
from tests.scheduler.test_nodeclaim_objects import CountingKube
from tests.support.events import append_to_claim, build_event, planned_claim
from tests.support.objects import demo_facts, pending_batch, pending_pod
from tests.support.services import running
from tests.support.waiting import until

CLAIM = "default-abcde"


def joined(*, ready: bool) -> dict[str, Any]:
    return {
        "metadata": {"name": "node-a", "labels": {}},
        "spec": {
            "providerID": "p://a",
            "taints": [{"key": "karpenter.sh/unregistered", "effect": "NoExecute"}],
        },
        "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


def launched_claim(*, startup_taints: tuple[dict[str, Any], ...] = ()) -> ClusterProjection:
    projection = ClusterProjection()
    for sequence, event in enumerate(launch_story(startup_taints=startup_taints), start=1):
        projection.apply(event, sequence)
    return projection


def launch_story(*, startup_taints: tuple[dict[str, Any], ...] = ()) -> list[ev.NodeClaimEvent]:
    """The claim's story up to its launch."""
    return [
        planned_claim(CLAIM, labels={"karpenter.sh/nodepool": "default"}, startup_taints=startup_taints),
        build_event(
            ev.NodeClaimLaunched, "launched", nodeclaim=CLAIM, provider_id="p://a", instance_type="c3-8"
        ),
    ]


def decisions_on_join(
    projection: ClusterProjection, node: dict[str, Any], change: str = "added"
) -> list[str]:
    """What the scheduler decides when ``node`` is observed (``change``) right after the claim's story."""
    observed = build_event(ev.NodeObserved, change, change=change, node=node)
    projection.apply(observed, max(c.last_sequence for c in projection.claims.values()) + 1)
    return [type(d).__name__ for d in SchedulerDecider().decide(projection, observed)]


def test_a_node_ready_when_it_joins_is_registered_and_initialized_together() -> None:
    steps = decisions_on_join(launched_claim(), joined(ready=True))
    assert steps == ["NodeClaimRegistered", "NodeClaimInitialized"]


def test_a_node_not_ready_yet_is_only_registered() -> None:
    assert decisions_on_join(launched_claim(), joined(ready=False)) == ["NodeClaimRegistered"]


def test_a_startup_taint_the_registration_puts_on_keeps_it_from_being_initialized() -> None:
    agent = {"key": "example.com/agent-not-ready", "effect": "NoSchedule"}
    steps = decisions_on_join(launched_claim(startup_taints=(agent,)), joined(ready=True))
    assert steps == ["NodeClaimRegistered"]


def registered_claim(*, startup_taints: tuple[dict[str, Any], ...] = ()) -> ClusterProjection:
    """The claim registered on a Node observed not Ready (so not initialized with it)."""
    projection = launched_claim(startup_taints=startup_taints)
    registered = build_event(
        ev.NodeClaimRegistered, "registered", nodeclaim=CLAIM, node="node-a", provider_id="p://a"
    )
    projection.apply(registered, 3)
    return projection


def test_a_registered_claims_node_seen_ready_before_its_registration_patch_showed_is_initialized() -> None:
    # The Registered may be folded before or after this observation (its carrying out goes on behind the
    # deciding): either way the same observation must decide the same Initialized, or `tenon replay`, which
    # folds each answer right after its input, finds a difference.
    not_yet_folded = decisions_on_join(launched_claim(), joined(ready=True))
    folded = decisions_on_join(registered_claim(), joined(ready=True), "modified")
    assert not_yet_folded == ["NodeClaimRegistered", "NodeClaimInitialized"]
    assert folded == ["NodeClaimInitialized"]


def test_a_startup_taint_keeps_a_node_seen_before_its_registration_patch_from_being_initialized() -> None:
    agent = {"key": "example.com/agent-not-ready", "effect": "NoSchedule"}
    assert decisions_on_join(registered_claim(startup_taints=(agent,)), joined(ready=True), "modified") == []


def test_a_startup_taint_removed_after_registration_is_not_judged_put_back() -> None:
    agent = {"key": "example.com/agent-not-ready", "effect": "NoSchedule"}
    registered_node = joined(ready=True)
    registered_node["spec"]["taints"] = []  # the patch took the unregistered taint; the agent, its own
    steps = decisions_on_join(registered_claim(startup_taints=(agent,)), registered_node, "modified")
    assert steps == ["NodeClaimInitialized"]


async def launched_and_observed(node: dict[str, Any]) -> tuple[InMemoryEventLog, int]:
    """A log with the demo's facts, the claim launched, and ``node`` observed (at the sequence returned)."""
    event_log = InMemoryEventLog()
    for fact in demo_facts():
        await event_log.publish(registry.subject_of(fact), fact)
    for event in launch_story():
        await append_to_claim(event_log, event)
    observed = build_event(ev.NodeObserved, "joined", change="added", node=node)
    return event_log, (await event_log.publish(registry.subject_of(observed), observed)).sequence


async def test_registered_and_initialized_together_cost_the_node_one_patch() -> None:
    async with running_sandbox(controllers=False) as sandbox:
        client = await load_kube(str(sandbox.workload_kubeconfig))
        kube = CountingKube(client)
        try:
            node = await kube.create(NODES, {"apiVersion": "v1", "kind": "Node", **joined(ready=True)})
            event_log, _ = await launched_and_observed(node)
            kube.requests.clear()
            executor = SchedulerExecutor(kube)
            async with running(SchedulerDecider(), executor, event_log) as runtime:
                await until(lambda: runtime.state.claims[CLAIM].initialized, what="the claim Initialized")
            labels = (await client.get(NODES, "node-a"))["metadata"]["labels"]
            assert (
                labels["karpenter.sh/registered"] == "true" and labels["karpenter.sh/initialized"] == "true"
            )
            assert kube.requests["PATCH node-a"] == 1
            # one answer holds both steps, and replays to them: the Initialized after the Registered is no
            # refusal (the claim judged as the Registered leaves it, as the runtime recorded them)
            report = replay(SchedulerDecider(), [r async for r in event_log.read()])
            answer = [type(d).__name__ for c in report.comparisons for d in c.recorded]
            assert answer == ["NodeClaimRegistered", "NodeClaimInitialized"]
            assert not report.differing, [c.differences() for c in report.differing]
        finally:
            await client.close()


async def test_registration_does_not_put_back_a_taint_removed_after_the_node_was_observed() -> None:
    """The node lifecycle controller removes ``node.kubernetes.io/not-ready`` when the Node turns Ready, often
    after the observation the registration is decided on: the registration patch, computed from that
    observation, must not write the old taint list back (a NoExecute taint put back evicts pods)."""
    async with running_sandbox(controllers=False) as sandbox:
        client = await load_kube(str(sandbox.workload_kubeconfig))
        kube = CountingKube(client)
        try:
            joining = joined(ready=False)
            joining["spec"]["taints"].append({"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"})
            observed_node = await client.create(NODES, {"apiVersion": "v1", "kind": "Node", **joining})
            await client.patch(
                NODES,
                "node-a",
                {"spec": {"taints": [{"key": "karpenter.sh/unregistered", "effect": "NoExecute"}]}},
            )
            event_log, _ = await launched_and_observed(observed_node)
            async with running(SchedulerDecider(), SchedulerExecutor(kube), event_log) as runtime:
                await until(lambda: runtime.state.claims[CLAIM].registered, what="the claim Registered")
            node = await client.get(NODES, "node-a")
            assert node["spec"].get("taints", []) == []
            assert node["metadata"]["labels"]["karpenter.sh/registered"] == "true"
            assert (
                kube.requests["PATCH node-a"] == 2 and kube.requests["GET node-a"] == 1
            )  # refused, then again
        finally:
            await client.close()


async def test_a_node_that_turned_ready_before_its_registration_patch_is_labelled_initialized_by_it() -> None:
    """Registered alone (the Node was observed not Ready), but the Node turned Ready before the patch: the
    patch, refused and computed again from the Node as it is, carries the initialized label too, so the
    Initialized decided from the Node's next observation costs no request of its own."""
    async with running_sandbox(controllers=False) as sandbox:
        client = await load_kube(str(sandbox.workload_kubeconfig))
        kube = CountingKube(client)
        try:
            observed_node = await client.create(
                NODES, {"apiVersion": "v1", "kind": "Node", **joined(ready=False)}
            )
            ready = {"status": {"conditions": [{"type": "Ready", "status": "True"}]}}
            await client.patch(NODES, "node-a", ready, subresource="status")
            event_log, _ = await launched_and_observed(observed_node)
            async with running(SchedulerDecider(), SchedulerExecutor(kube), event_log) as runtime:
                await until(lambda: runtime.state.claims[CLAIM].registered, what="the claim Registered")
                assert runtime.state.claims[CLAIM].initialized is None
                labels = (await client.get(NODES, "node-a"))["metadata"]["labels"]
                assert labels["karpenter.sh/initialized"] == "true"
                now_ready = build_event(
                    ev.NodeObserved, "ready", change="changed", node=await client.get(NODES, "node-a")
                )
                await event_log.publish(registry.subject_of(now_ready), now_ready)
                await until(lambda: runtime.state.claims[CLAIM].initialized, what="the claim Initialized")
            assert (
                kube.requests["PATCH node-a"] == 2 and kube.requests["GET node-a"] == 1
            )  # refused, then again
        finally:
            await client.close()


async def test_a_node_replaced_under_the_same_name_before_the_patch_is_not_registered() -> None:
    async with running_sandbox(controllers=False) as sandbox:
        client = await load_kube(str(sandbox.workload_kubeconfig))
        try:
            observed_node = await client.create(
                NODES, {"apiVersion": "v1", "kind": "Node", **joined(ready=True)}
            )
            await client.delete(NODES, "node-a")
            stranger = joined(ready=True)
            stranger["spec"]["providerID"] = "p://someone-else"
            await client.create(NODES, {"apiVersion": "v1", "kind": "Node", **stranger})
            event_log, observed_at = await launched_and_observed(observed_node)
            async with running(SchedulerDecider(), SchedulerExecutor(client), event_log) as runtime:
                await until(lambda: runtime.handled >= observed_at, what="the observation handled")
                assert runtime.state.claims[CLAIM].registered is None
            node = await client.get(NODES, "node-a")
            assert "karpenter.sh/registered" not in node["metadata"]["labels"]
            assert node["spec"]["taints"] == stranger["spec"]["taints"]
        finally:
            await client.close()


def test_a_registration_patch_that_replaces_a_list_is_bound_to_the_node_version_it_was_computed_from() -> (
    None
):
    """A merge patch replaces the taint and finalizer lists whole; only such a patch carries the observed
    ``resourceVersion`` (the API server then refuses it if the Node changed since). A patch of labels alone
    merges key by key and needs none."""
    claim = launched_claim().claims[CLAIM]
    joining = {**joined(ready=True), "metadata": {"name": "node-a", "labels": {}, "resourceVersion": "7"}}
    first = lifecycle.registration_patch(claim, joining)
    assert first is not None and first["metadata"]["resourceVersion"] == "7"
    assert first["spec"]["taints"] == [] and first["metadata"]["finalizers"] == ["karpenter.sh/termination"]

    synced = {
        "metadata": {
            "name": "node-a",
            "resourceVersion": "9",
            "labels": {"karpenter.sh/nodepool": "default"},  # karpenter.sh/registered missing
            "finalizers": ["karpenter.sh/termination"],
        },
        "spec": {"providerID": "p://a", "taints": []},
    }
    labels_only = lifecycle.registration_patch(claim, synced)
    assert labels_only == {"metadata": {"labels": {"karpenter.sh/registered": "true"}}}


async def launch_and_join(runtime: Any, event_log: InMemoryEventLog, node: dict[str, Any]) -> str:
    """Once the runtime planned one claim: launched on ``p://a``, and ``node`` observed joining. Its name."""
    [claim] = await until(
        lambda: [n for n, c in runtime.state.claims.items() if c.planned], what="one claim planned"
    )
    launched = build_event(
        ev.NodeClaimLaunched, "l", nodeclaim=claim, provider_id="p://a", instance_type="c3-8"
    )
    await append_to_claim(event_log, launched)
    observed = build_event(ev.NodeObserved, "joined", change="added", node=node)
    await event_log.publish(registry.subject_of(observed), observed)
    return str(claim)


class ChangesTheNodeWhileNominating(CountingKube):
    """Counts the requests; at the first nomination, the test's ``change`` runs first (the Node turns Ready
    while its pods are nominated, as it does under a busy API server)."""

    def __init__(self, inner: Kube, change: Callable[[], Awaitable[None]]) -> None:
        super().__init__(inner)
        self.change: Callable[[], Awaitable[None]] | None = change

    async def request(self, method: str, path: str, **kwargs: Any) -> Any:
        if self.change is not None and method == "PATCH" and "/pods/" in path:
            change, self.change = self.change, None
            await change()
        return await super().request(method, path, **kwargs)


async def test_a_node_observed_again_while_its_pods_are_nominated_is_patched_on_that_observation() -> None:
    """The registration patch is computed from the Node as last observed, not as the decision saw it: no
    refusal, no read, one patch; and the Node, Ready by then, gets the initialized label with it."""
    async with running_sandbox(controllers=False) as sandbox:
        client = await load_kube(str(sandbox.workload_kubeconfig))
        try:
            pod = pending_pod("web-0", "1")
            await client.create(PODS, pod, namespace="default")
            joining = joined(ready=False)
            joining["spec"]["taints"].append({"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"})
            node = await client.create(NODES, {"apiVersion": "v1", "kind": "Node", **joining})
            event_log = InMemoryEventLog()
            for fact in demo_facts():
                await event_log.publish(registry.subject_of(fact), fact)
            await event_log.publish(subjects.PENDING, pending_batch("b", pod, at=datetime.now(UTC)))
            runtimes: list[Any] = []  # the scheduler's, once it runs

            async def turns_ready() -> None:
                await client.patch(
                    NODES, "node-a", {"spec": {"taints": joined(ready=True)["spec"]["taints"]}}
                )
                ready = {"status": {"conditions": [{"type": "Ready", "status": "True"}]}}
                now = await client.patch(NODES, "node-a", ready, subresource="status")
                observed = build_event(ev.NodeObserved, "ready", change="changed", node=now)
                at = (await event_log.publish(registry.subject_of(observed), observed)).sequence
                await until(lambda: runtimes[0].folded >= at, what="the Node's new observation folded")

            kube = ChangesTheNodeWhileNominating(client, turns_ready)
            async with running(SchedulerDecider(), SchedulerExecutor(kube), event_log) as runtime:
                runtimes.append(runtime)
                claim = await launch_and_join(runtime, event_log, node)
                await until(lambda: runtime.state.claims[claim].initialized, what="the claim Initialized")
            stored = await client.get(NODES, "node-a")
            assert stored["spec"].get("taints", []) == []  # the not-ready taint is not put back
            labels = stored["metadata"]["labels"]
            assert (
                labels["karpenter.sh/registered"] == "true" and labels["karpenter.sh/initialized"] == "true"
            )
            assert kube.requests["PATCH node-a"] == 1 and kube.requests["GET node-a"] == 0
        finally:
            await client.close()
