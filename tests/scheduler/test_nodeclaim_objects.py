"""The NodeClaim objects, kept in step with the claims at little cost to the API server: the steps of a burst
go into one write, an unchanged status is not written again, and a condition another writer owns survives
every write."""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import pytest

from devtools.sandbox.testing import running_sandbox
from proto import events as ev
from tenon.domain.projection import ClusterProjection
from tenon.runtime.kube import NODECLAIMS, Kube, load_kube
from tenon.services.scheduler.objects import NodeClaimObjects
from tests.support.events import build_event, planned_claim
from tests.support.waiting import until

CLAIM = "default-abcde"


class CountingKube(Kube):
    """The sandbox's API, counting the requests made to it."""

    def __init__(self, inner: Kube) -> None:
        super().__init__(inner.api)
        self.requests: Counter[str] = Counter()

    async def request(self, method: str, path: str, **kwargs: Any) -> Any:
        self.requests[f"{method} {path.rsplit('/', 1)[-1]}"] += 1
        return await super().request(method, path, **kwargs)


@pytest.fixture
async def clients() -> AsyncIterator[tuple[CountingKube, Kube]]:
    """The scheduler's client (counted) and the test's own (another writer, and a reader)."""
    async with running_sandbox(controllers=False) as sandbox:
        scheduler = await load_kube(str(sandbox.workload_kubeconfig))
        other = await load_kube(str(sandbox.workload_kubeconfig))
        yield CountingKube(scheduler), other
        await scheduler.close()
        await other.close()


def steps() -> list[ev.NodeClaimEvent]:
    planned = planned_claim(CLAIM)
    launched = build_event(
        ev.NodeClaimLaunched, "launched", nodeclaim=CLAIM, provider_id="p://a", instance_type="c3-8"
    )
    registered = build_event(
        ev.NodeClaimRegistered, "registered", nodeclaim=CLAIM, node="node-a", provider_id="p://a"
    )
    return [planned, launched, registered]


async def conditions(kube: Kube) -> dict[str, str]:
    obj = await kube.get_or_none(NODECLAIMS, CLAIM)
    return {c["type"]: c["status"] for c in ((obj or {}).get("status") or {}).get("conditions") or []}


async def test_a_burst_of_steps_is_one_write_and_another_writer_s_condition_survives(
    clients: tuple[CountingKube, Kube],
) -> None:
    kube, other = clients
    projection = ClusterProjection()
    objects = NodeClaimObjects(kube, lambda: projection, settle=0.3)
    await objects.start()
    try:
        for sequence, step in enumerate(steps(), start=1):
            projection.apply(step, sequence)
            objects.sync(CLAIM)
        await until(lambda: _registered(other), what="the object Registered")
        assert kube.requests[f"POST {NODECLAIMS.plural}"] == 1
        assert kube.requests["PATCH status"] == 1  # Planned, Launched, Registered: one status write
        assert kube.requests[f"GET {CLAIM}"] == 0  # nothing read: the answers say what the object is

        objects.sync(CLAIM)  # nothing changed: nothing written
        # disruption marks the claim Drifted meanwhile (the object's version moves on)
        current = await other.get(NODECLAIMS, CLAIM)
        drifted = {"type": "Drifted", "status": "True", "reason": "NodePoolDrifted", "message": ""}
        await other.patch(
            NODECLAIMS,
            CLAIM,
            {"status": {"conditions": [*current["status"]["conditions"], drifted]}},
            subresource="status",
        )
        initialized = build_event(ev.NodeClaimInitialized, "initialized", nodeclaim=CLAIM, node="node-a")
        projection.apply(initialized, 4)
        objects.sync(CLAIM)

        async def initialized_and_still_drifted() -> bool:
            found = await conditions(other)
            return found.get("Initialized") == "True" and found.get("Drifted") == "True"

        await until(initialized_and_still_drifted, what="Initialized written, Drifted kept")
        assert kube.requests["PATCH status"] == 3  # one refused (the version moved on), written again
    finally:
        await objects.stop()


async def _registered(kube: Kube) -> bool:
    return (await conditions(kube)).get("Registered") == "True"


async def _exists(kube: Kube) -> bool:
    return await kube.get_or_none(NODECLAIMS, CLAIM) is not None


async def test_the_objects_wait_while_the_decision_path_writes(clients: tuple[CountingKube, Kube]) -> None:
    kube, other = clients
    projection = ClusterProjection()
    objects = NodeClaimObjects(kube, lambda: projection, settle=0.0)
    await objects.start()
    try:
        with objects.giving_way():  # a registration's requests in flight
            projection.apply(planned_claim(CLAIM), 1)
            objects.sync(CLAIM)
            await until(lambda: objects.held_back == 1, what="a worker holding the claim's write back")
            assert kube.requests[f"POST {NODECLAIMS.plural}"] == 0
        await until(lambda: _exists(other), what="the object written once the registration is done")
    finally:
        await objects.stop()


async def test_a_decision_path_that_never_quiets_delays_the_objects_without_stopping_them(
    clients: tuple[CountingKube, Kube],
) -> None:
    kube, other = clients
    projection = ClusterProjection()
    objects = NodeClaimObjects(kube, lambda: projection, settle=0.0, longest_wait=0.2)
    await objects.start()
    try:
        with objects.giving_way():
            projection.apply(planned_claim(CLAIM), 1)
            objects.sync(CLAIM)
            await until(lambda: _exists(other), what="the object written after the longest wait")
    finally:
        await objects.stop()
