"""A recorded launcher run replays to the same decisions: ``tenon replay launcher-capi --diff`` finds none.

The launcher runs in this event loop against a real broker and the sandbox: claims launch (one fails over from
a full MachineDeployment), one is abandoned, one drained and terminated, a Machine bound to a claim that
exists nowhere is removed and one whose NodeClaim object exists is kept; the launcher is stopped half-way and
a new term rebuilds from its snapshot and the log's tail. Then the whole log goes through the decider offline
(:func:`tenon.runtime.replay.replay`, what ``tenon replay`` runs), and every decision the live service
recorded is decided again, the same.
"""

from __future__ import annotations

import functools
from datetime import UTC, datetime
from typing import Any

from devtools.sandbox.testing import SandboxHandle, running_sandbox
from proto import events as ev
from tenon.core.wellknown import NODECLAIM
from tenon.runtime.eventlog.jetstream import JetStreamEventLog
from tenon.runtime.replay import replay
from tenon.services.launcher_capi.decider import CapiLauncherDecider
from tests.launcher_capi.launcher_support import (
    abandoned,
    append_claim_event,
    claim_events,
    machine_deployment,
    machine_rt,
    machines_of,
    md_rt,
    nodeclass,
    planned,
    publish_nodeclasses,
    replicas_of,
    running_launcher,
)
from tests.launcher_capi.test_launcher_evidence import decision, nodeclaim_object
from tests.support.events import build_event
from tests.support.services import caught_up
from tests.support.waiting import until


async def story(event_log: JetStreamEventLog, claim: str) -> list[str]:
    return [type(e).__name__ for e in await claim_events(event_log, claim)]


async def has_step(event_log: JetStreamEventLog, claim: str, step: str) -> bool:
    return step in await story(event_log, claim)


def bind_by_hand(sb: SandboxHandle, md: str, claim: str) -> dict[str, Any]:
    """Mark one of ``md``'s Machines as tenon's, for a claim the launcher never heard of."""
    store = sb.management_store
    machine = next(
        m for m in machines_of(store, md) if NODECLAIM not in (m["metadata"].get("annotations") or {})
    )
    machine["metadata"].setdefault("annotations", {})[NODECLAIM] = claim
    store.update(machine_rt(store), machine)
    return machine


async def first_term(jetstream_log: JetStreamEventLog, sb: SandboxHandle) -> None:
    store = sb.management_store
    async with running_launcher(jetstream_log, sb, leak_grace=0.3) as runtime:
        # claim-a: c3-8 is full (max size 1, one replica), so it fails over to c3-16
        await append_claim_event(jetstream_log, planned("claim-a", "c3-8", "c3-16"))
        await append_claim_event(jetstream_log, planned("claim-b", "c3-4"))
        for claim in ("claim-a", "claim-b"):
            await until(functools.partial(has_step, jetstream_log, claim, "NodeClaimLaunched"), what=claim)
        assert await story(jetstream_log, "claim-a") == [
            "NodeClaimPlanned",
            "NodeClaimLaunchFailed",
            "NodeClaimLaunched",
        ]
        await until(lambda: caught_up(runtime), what="first term settled")
        # claim-b is abandoned: its Machine goes
        await append_claim_event(jetstream_log, abandoned("claim-b"))
        await until(lambda: replicas_of(store, "c3-4") == 1, what="claim-b's replica gone")
        await until(lambda: len(machines_of(store, "c3-4")) == 1, what="claim-b's Machine gone")
        await until(lambda: caught_up(runtime), what="first term settled")


async def second_term(jetstream_log: JetStreamEventLog, sb: SandboxHandle) -> None:
    store = sb.management_store
    async with running_launcher(jetstream_log, sb, leak_grace=0.3) as runtime:
        assert runtime.state.claims["claim-a"].launched is not None  # rebuilt from the snapshot and the tail
        # claim-a is drained by the disruption service: its Machine goes, then its story ends
        launched = runtime.state.claims["claim-a"].launched
        requested = build_event(
            ev.DisruptionRequested,
            "request-a",
            at=datetime.now(UTC),
            nodeclaim="claim-a",
            method="emptiness",
            reason="empty",
            node=launched.machine,
        )
        await append_claim_event(jetstream_log, requested)
        await append_claim_event(
            jetstream_log,
            build_event(ev.NodeClaimDrained, "drain-a", at=datetime.now(UTC), nodeclaim="claim-a", node="n"),
        )
        await until(lambda: has_step(jetstream_log, "claim-a", "NodeClaimTerminated"), what="a terminated")
        assert replicas_of(store, "c3-16") == 0
        # the Machines the MDs had before tenon, bound by hand to claims nobody planned: one leaked, one whose
        # NodeClaim object exists
        sb.workload_store.create(
            sb.workload_store.resource("karpenter.sh/v1", "NodeClaim"), nodeclaim_object("claim-elsewhere")
        )
        leaked = bind_by_hand(sb, "c3-8", "claim-never")
        kept = bind_by_hand(sb, "c3-4", "claim-elsewhere")
        await until(lambda: decision(jetstream_log, leaked, ev.MachineRemovalDecided), what="leak removed")
        await until(lambda: replicas_of(store, "c3-8") == 0, what="the leak's replica removed")
        await until(lambda: decision(jetstream_log, kept, ev.MachineKept), what="a Machine kept")
        assert replicas_of(store, "c3-4") == 1
        await until(lambda: caught_up(runtime), what="second term settled")
        # a write the launcher defers (a MachineDeployment's records) is owed at the end of the range: the run
        # ends once a plan has nothing left to do, as a replay's end of range expects
        await until(
            lambda: not runtime.decider.tick(runtime.state, datetime.now(UTC)), what="nothing left to plan"
        )


async def test_a_recorded_run_replays_to_the_same_decisions(jetstream_log: JetStreamEventLog) -> None:
    async with running_sandbox() as sb:
        store = sb.management_store
        store.create(md_rt(store), machine_deployment("c3-8", replicas=1, max_size=1))
        store.create(md_rt(store), machine_deployment("c3-16"))
        store.create(md_rt(store), machine_deployment("c3-4", replicas=1))
        await until(
            lambda: len(machines_of(store, "c3-8")) == 1 and len(machines_of(store, "c3-4")) == 1,
            what="the Machines the MDs had before tenon",
        )
        await publish_nodeclasses(jetstream_log, nodeclass())
        await first_term(jetstream_log, sb)
        await second_term(jetstream_log, sb)

    records = [r async for r in jetstream_log.read()]
    report = replay(CapiLauncherDecider(), records)
    assert not report.differing, "\n".join(line for c in report.differing for line in c.differences())
    kinds = {type(d).__name__ for c in report.comparisons for d in c.recorded}
    assert {
        "MachineDeploymentScaled",
        "MachineBound",
        "MachineRemovalDecided",
        "MachineKept",
        "NodeClaimLaunched",
        "NodeClaimLaunchFailed",
        "NodeClaimTerminated",
    } <= kinds
    assert report.undecodable == [] and report.external == 0
