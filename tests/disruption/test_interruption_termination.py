"""An interrupted node's drain against the sandbox: PodDisruptionBudgets hold it until the notice's deadline,
no longer (the machine goes then, its pods with it)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from proto import events as ev
from proto import subjects
from tenon.runtime.eventlog.jetstream import JetStreamEventLog
from tenon.runtime.kube import PODS, Kube
from tenon.runtime.kube.resources import PODDISRUPTIONBUDGETS
from tests.disruption.test_termination import CLAIM, claim_events, kube, sandbox, seed, start
from tests.support.events import build_event
from tests.support.waiting import until

__all__ = ["kube", "sandbox"]  # the fixtures this module uses


async def test_a_pdb_holds_an_interrupted_drain_until_the_deadline_then_the_pods_go(
    jetstream_log: JetStreamEventLog, kube: Kube
) -> None:
    await seed(jetstream_log, kube)  # one pod under a PDB of maxUnavailable 0: every eviction is refused
    service = start(jetstream_log, kube)
    runtime = await service.__aenter__()

    async def guarded() -> bool:
        pdb = await kube.get(PODDISRUPTIONBUDGETS, "guarded", "default")
        status = pdb.get("status") or {}
        return status.get("currentHealthy") == 1 and status.get("disruptionsAllowed") == 0

    await until(guarded, what="the PDB guarding the running pod")
    deadline = datetime.now(UTC) + timedelta(seconds=3)
    notice = build_event(
        ev.InterruptionNotice,
        "notice-1",
        at=datetime.now(UTC),
        provider_id="p://a",
        kind="spot-interruption",
        deadline=deadline,
    )
    await jetstream_log.publish(subjects.interruption("p"), notice)

    async def drained() -> list[ev.NodeClaimDrained]:
        return [e for e in await claim_events(jetstream_log) if isinstance(e, ev.NodeClaimDrained)]

    [done] = await until(drained, timeout=20, what="the interrupted node drained")
    terminator = runtime.executor.terminator
    assert terminator.evictions_refused >= 1  # the budget was asked, and held, before the deadline
    assert done.decided_at >= deadline and done.grace_period_expired
    assert await kube.get_or_none(PODS, "guarded", "default") is None
    [request] = [e for e in await claim_events(jetstream_log) if isinstance(e, ev.DisruptionRequested)]
    assert request.method == "interruption" and request.nodeclaim == CLAIM
    await service.__aexit__(None, None, None)
