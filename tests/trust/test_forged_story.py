"""A forged step from a valid identity, end to end: the local stack (every service its own process, each with
its own NATS identity, no anonymous client) provisions a pod; then disruption's identity, which may write
``NodeClaimDrained``, writes one for the live claim without the ``DisruptionRequested`` that must come first.
The broker stores it (the identity owns the step); every service that reads it refuses it as an impossible
story and dead-letters it with the reason, and nothing acts on it: the Machine, its Node and the pod stay."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from devtools.stack import LocalStack
from proto import events as ev
from proto import subjects
from tenon.core import wellknown
from tenon.runtime.claims import append_claim_event
from tenon.runtime.eventlog.factories import make_event
from tenon.runtime.eventlog.jetstream import JetStreamEventLog
from tenon.runtime.kube import MACHINEDEPLOYMENTS, MACHINES, NODES, PODS
from tests.e2e.test_provisioning import provision
from tests.support.waiting import until
from tests.trust.identities import connect_as

READERS_OF_DRAINED = ("scheduler", "launcher-capi", "disruption")


async def initialized_claim(operator: JetStreamEventLog) -> str | None:
    async for record in operator.read("tenon.nodeclaim.>"):
        if isinstance(record.event, ev.NodeClaimInitialized):
            return record.event.nodeclaim
    return None


async def letters_for(operator: JetStreamEventLog, sequence: int) -> dict[str, ev.DeadLetter]:
    letters: dict[str, ev.DeadLetter] = {}
    async for record in operator.read(subjects.DEADLETTERS, stream=subjects.DEADLETTER_STREAM):
        letter = record.event
        if isinstance(letter, ev.DeadLetter) and letter.original_sequence == sequence:
            letters[letter.consumer] = letter
    return letters


async def steps_after(operator: JetStreamEventLog, claim: str, sequence: int) -> list[str]:
    return [
        type(r.event).__name__
        async for r in operator.read(subjects.nodeclaim(claim), start_sequence=sequence + 1)
    ]


async def test_a_drained_without_disruption_requested_is_dead_lettered_and_not_acted_on(
    tmp_path: Path,
) -> None:
    with LocalStack(profile="fast", run_dir=tmp_path / "run", anonymous=None) as stack:
        kube, management = await provision(stack, "workload-one-3cpu.yaml", "big")
        operator = await connect_as(stack.nats_url, stack.identities, "operator")
        disruption = await connect_as(stack.nats_url, stack.identities, "disruption")
        try:
            claim = await until(lambda: initialized_claim(operator), 30, what="an Initialized claim")
            [machine] = (await management.list(MACHINES))[0]
            [node] = (await kube.list(NODES))[0]

            expected = await operator.last_subject_sequence(subjects.nodeclaim(claim))
            forged = make_event(
                ev.NodeClaimDrained,
                producer="disruption",
                key=(claim, "forged"),
                nodeclaim=claim,
                node=node["metadata"]["name"],
            )
            stored = await append_claim_event(disruption, forged, expected=expected)

            async def every_reader_refused() -> dict[str, ev.DeadLetter] | None:
                letters = await letters_for(operator, stored.sequence)
                return letters if set(READERS_OF_DRAINED) <= set(letters) else None

            letters = await until(every_reader_refused, 30, what="dead letters from every reader of Drained")
            for consumer in READERS_OF_DRAINED:
                assert "no disruption was requested" in letters[consumer].error, letters[consumer].error
            await until(
                lambda: launcher_past(operator, stored.sequence),
                15,
                what="the launcher acked past the forgery",
            )

            # nothing acted on it: same Machine, not marked for deletion, its MachineDeployment unchanged,
            # the Node and the pod still there, and nothing written after the forgery on the claim
            [still] = (await management.list(MACHINES))[0]
            assert still["metadata"]["uid"] == machine["metadata"]["uid"]
            assert wellknown.DELETE_MACHINE not in (still["metadata"].get("annotations") or {})
            replicas = {
                m["metadata"]["name"]: m["spec"]["replicas"]
                for m in (await management.list(MACHINEDEPLOYMENTS))[0]
            }
            assert replicas["c3-8"] == 1
            assert [n["metadata"]["name"] for n in (await kube.list(NODES))[0]] == [node["metadata"]["name"]]
            pods: list[dict[str, Any]] = (await kube.list(PODS, "default", label_selector="app=big"))[0]
            assert [p["status"]["phase"] for p in pods] == ["Running"]
            assert await steps_after(operator, claim, stored.sequence) == []
            assert not stack.dead_services(), stack.dead_services()
        finally:
            await disruption.close()
            await operator.close()
            await kube.close()
            await management.close()


async def launcher_past(operator: JetStreamEventLog, sequence: int) -> bool:
    return await operator.consumer_ack_floor("launcher-capi") >= sequence
