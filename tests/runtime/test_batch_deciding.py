"""Deciding on batches: a fetched batch of inputs folded whole and answered once, its decisions on different
claims carried out together, and ``tenon replay`` still finding every answer the same, and a real difference
when there is one."""

from __future__ import annotations

import asyncio
import dataclasses
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any

import msgspec

from proto import events as ev
from proto import registry, subjects
from proto.codec import encode
from tenon.domain.projection import ClusterProjection
from tenon.runtime.decider import BaseExecutor, DeciderRuntime, Lane, claim_lane, lanes
from tenon.runtime.eventlog.memory import InMemoryEventLog
from tenon.runtime.eventlog.records import LogRecord
from tenon.runtime.replay import replay
from tenon.services.launcher_capi.decider import CapiLauncherDecider
from tenon.services.scheduler import lifecycle
from tenon.services.scheduler.decider import SchedulerDecider
from tests.support.events import T0, append_to_claim, build_event
from tests.support.objects import demo_facts, pending_batch, pending_pod
from tests.support.services import caught_up, running
from tests.support.waiting import until

CLAIMS = ("claim-a", "claim-b", "claim-c", "claim-d")


def planned(name: str) -> ev.NodeClaimPlanned:
    return build_event(
        ev.NodeClaimPlanned,
        f"planned-{name}",
        nodeclaim=name,
        nodepool="default",
        node_class="default",
        choice=ev.InstanceChoice("c3-8", None, "on-demand", 0.1),
        fallbacks=(),
        pods=(),
        requirements=(),
        labels={"karpenter.sh/nodepool": "default"},
    )


def launched(name: str) -> ev.NodeClaimLaunched:
    return build_event(
        ev.NodeClaimLaunched,
        f"launched-{name}",
        nodeclaim=name,
        provider_id=f"openstack:///{name}",
        instance_type="c3-8",
    )


def node_joined(name: str) -> ev.NodeObserved:
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": f"node-{name}"},
        "spec": {
            "providerID": f"openstack:///{name}",
            "taints": [{"key": "karpenter.sh/unregistered", "effect": "NoExecute"}],
        },
        "status": {"conditions": [{"type": "Ready", "status": "False"}]},
    }
    return build_event(ev.NodeObserved, f"node-{name}", change="added", node=node)


async def nodes_joined_while_the_scheduler_was_away() -> InMemoryEventLog:
    """Four claims launched and their Nodes joined, all in the log before the scheduler reads any of it."""
    event_log = InMemoryEventLog()
    for fact in demo_facts():
        await event_log.publish(registry.subject_of(fact), fact)
    for name in CLAIMS:
        await append_to_claim(event_log, planned(name))
        await append_to_claim(event_log, launched(name))
    for name in CLAIMS:
        joined = node_joined(name)
        await event_log.publish(registry.subject_of(joined), joined)
    return event_log


class AllAtOnce(BaseExecutor):
    """Lets a Registered be recorded only once every claim's Node patch is under way: carried out one after
    another, the first would wait forever."""

    def __init__(self, expected: int) -> None:
        self.expected = expected
        self.in_flight = 0
        self.peak = 0
        self.all_started = asyncio.Event()

    async def prepare(self, decision: ev.Event) -> bool:
        if isinstance(decision, ev.NodeClaimRegistered):
            self.in_flight += 1
            self.peak = max(self.peak, self.in_flight)
            if self.in_flight == self.expected:
                self.all_started.set()
            await asyncio.wait_for(self.all_started.wait(), timeout=10)
            self.in_flight -= 1
        return True


def registered(event_log: InMemoryEventLog) -> list[ev.NodeClaimRegistered]:
    return [e for e in event_log.events() if isinstance(e, ev.NodeClaimRegistered)]


async def test_a_batch_of_joined_nodes_is_registered_by_one_decision_carried_out_together() -> None:
    event_log = await nodes_joined_while_the_scheduler_was_away()
    last_input = event_log.events()[-1]
    executor = AllAtOnce(len(CLAIMS))
    async with running(SchedulerDecider(), executor, event_log) as runtime:
        await until(lambda: len(registered(event_log)) == len(CLAIMS), what="every claim Registered")
        await until(lambda: caught_up(runtime))
    assert executor.peak == len(CLAIMS)
    answers = registered(event_log)
    # one decision, on the batch's last input, whatever input made each claim's step true
    assert {r.causation_id for r in answers} == {last_input.id}
    assert sorted(r.node for r in answers) == sorted(f"node-{n}" for n in CLAIMS)

    report = replay(SchedulerDecider(), event_log.records())
    assert report.comparisons and not report.differing, [c.differences() for c in report.differing]


async def test_replay_finds_an_answer_of_a_batch_that_differs() -> None:
    event_log = await nodes_joined_while_the_scheduler_was_away()
    async with running(SchedulerDecider(), BaseExecutor(), event_log) as runtime:
        await until(lambda: len(registered(event_log)) == len(CLAIMS), what="every claim Registered")
        await until(lambda: caught_up(runtime))
    records = event_log.records()
    tampered_id = registered(event_log)[1].id

    def tampered(record: LogRecord) -> LogRecord:
        event = record.event
        if event is None or event.id != tampered_id:
            return record
        assert isinstance(event, ev.NodeClaimRegistered)
        forged = msgspec.structs.replace(event, node="node-elsewhere")
        return dataclasses.replace(record, data=encode(forged))

    report = replay(SchedulerDecider(), [tampered(r) for r in records])
    [difference] = report.differing
    assert any("node-elsewhere" in line for line in difference.differences())

    # an answer missing altogether is a difference too, where it was due and, still owed, at the range's end
    report = replay(SchedulerDecider(), [r for r in records if r.event is None or r.event.id != tampered_id])
    due, still_owed = report.differing
    assert "recorded 3 decision(s), replay made 4" in due.differences()
    assert still_owed.input_type.endswith("(owed to the end of the range)")
    assert _ids(still_owed.replayed) == [tampered_id]


async def test_a_debt_never_answered_by_the_end_of_the_range_is_a_difference() -> None:
    event_log = await nodes_joined_while_the_scheduler_was_away()
    # the log ends with nodes joined and no answer at all: every input after the joins owed Registered
    report = replay(SchedulerDecider(), event_log.records())
    [difference] = report.differing
    assert difference.input_type.endswith("(owed to the end of the range)")
    assert sum(isinstance(e, ev.NodeClaimRegistered) for e in difference.replayed) == len(CLAIMS)


async def test_a_batch_to_plan_is_decided_on_the_state_as_of_itself() -> None:
    event_log = InMemoryEventLog()
    for fact in demo_facts():
        await event_log.publish(registry.subject_of(fact), fact)
    await event_log.publish(subjects.PENDING, pending_batch("zero", pending_pod("web-0", "3")))
    async with running(SchedulerDecider(), BaseExecutor(), event_log) as runtime:
        [claim] = await until(lambda: [c.name for c in runtime.state.claims.values() if c.planned])
        await until(lambda: caught_up(runtime))
    # while no scheduler runs: the claim launches, another batch comes, then the claim's Node joins
    await append_to_claim(event_log, launched(claim))
    await event_log.publish(subjects.PENDING, pending_batch("first", pending_pod("web-1", "3")))
    joined = node_joined(claim)
    await event_log.publish(registry.subject_of(joined), joined)
    async with running(SchedulerDecider(), BaseExecutor(), event_log) as runtime:
        await until(lambda: registered(event_log), what="the claim Registered")
        await until(lambda: caught_up(runtime))
    plans = {e.causation_id: e for e in event_log.events() if isinstance(e, ev.BatchPlanned)}
    assert len(plans["batch-first"].nodeclaims) == 1  # web-1 does not fit beside web-0
    # had the second PendingBatch been decided with the whole batch folded, the Node's join would have been
    # seen then, and the claim registered in answer to the PendingBatch
    [answer] = registered(event_log)
    assert answer.causation_id == joined.id
    report = replay(SchedulerDecider(), event_log.records())
    assert not report.differing, [c.differences() for c in report.differing]


def test_decisions_on_other_claims_and_machines_share_a_step_and_a_scale_waits_for_them() -> None:
    def bound(machine: str) -> ev.MachineBound:
        return build_event(
            ev.MachineBound,
            f"bound-{machine}",
            namespace="default",
            machine=machine,
            machine_deployment="c3-8",
            nodeclaim=f"claim-{machine}",
            nodepool="default",
        )

    scaled = build_event(
        ev.MachineDeploymentScaled,
        "scaled",
        namespace="default",
        machine_deployment="c3-8",
        resource_version="1",
        replicas_from=2,
        replicas_to=2,
        reason="records",
    )
    decisions: list[ev.Event] = [launched("claim-a"), launched("claim-b"), bound("m1"), bound("m2"), scaled]
    steps = lanes(CapiLauncherDecider(), decisions)
    assert [[[e.id for e in lane] for lane in step] for step in steps] == [
        [["launched-claim-a"], ["launched-claim-b"], ["bound-m1"], ["bound-m2"]],
        [["scaled"]],
    ]


def _ids(events: list[ev.Event]) -> list[str]:
    return [e.id for e in events]


class HoldsOneRegistration(BaseExecutor):
    """Holds one claim's registration (its Node patch stalls, as under a busy API server) until released, and
    counts the registrations carried out."""

    def __init__(self, held: str) -> None:
        self.held = held
        self.release = asyncio.Event()
        self.prepared: Counter[str] = Counter()

    async def prepare(self, decision: ev.Event) -> bool:
        if isinstance(decision, ev.NodeClaimRegistered):
            self.prepared[decision.nodeclaim] += 1
            if decision.nodeclaim == self.held:
                await asyncio.wait_for(self.release.wait(), timeout=10)
        return True


async def two_launched_claims_and_one_node() -> InMemoryEventLog:
    event_log = InMemoryEventLog()
    for fact in demo_facts():
        await event_log.publish(registry.subject_of(fact), fact)
    for name in ("claim-a", "claim-b"):
        await append_to_claim(event_log, planned(name))
        await append_to_claim(event_log, launched(name))
    joined = node_joined("claim-a")
    await event_log.publish(registry.subject_of(joined), joined)
    return event_log


def sequence_of(event_log: InMemoryEventLog, event: ev.Event) -> int:
    return next(r.sequence for r in event_log.records() if r.event is not None and r.event.id == event.id)


async def test_a_node_that_joins_while_a_registration_is_carried_out_is_registered_without_waiting() -> None:
    event_log = await two_launched_claims_and_one_node()
    executor = HoldsOneRegistration("claim-a")
    async with running(SchedulerDecider(), executor, event_log, tick_seconds=3600) as runtime:
        await until(lambda: executor.prepared["claim-a"] == 1, what="claim-a's registration under way")
        joined = node_joined("claim-b")
        await event_log.publish(registry.subject_of(joined), joined)
        [answer] = await until(lambda: registered(event_log), what="claim-b Registered")
        # decided on node-b's observation and carried out while claim-a's registration still stalls
        assert answer.nodeclaim == "claim-b" and answer.causation_id == joined.id
        executor.release.set()
        await until(lambda: len(registered(event_log)) == 2, what="claim-a Registered")
        await until(lambda: caught_up(runtime))
    # node-b's observation decided claim-a's step again, while it was behind: not carried out twice
    assert executor.prepared == Counter({"claim-a": 1, "claim-b": 1})
    report = replay(SchedulerDecider(), event_log.records())
    assert report.comparisons and not report.differing, [c.differences() for c in report.differing]


class SeesClaimA(SchedulerDecider):
    """Notes what claim-a's phase was when each batch to plan was decided."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []

    def decide(self, state: ClusterProjection, event: ev.Event) -> Sequence[ev.Event]:
        if isinstance(event, ev.PendingBatch):
            self.seen.append(state.claims["claim-a"].phase)
        return super().decide(state, event)


async def test_a_batch_to_plan_waits_for_the_registrations_carried_out_behind() -> None:
    event_log = await two_launched_claims_and_one_node()
    executor = HoldsOneRegistration("claim-a")
    decider = SeesClaimA()
    async with running(decider, executor, event_log, tick_seconds=3600) as runtime:
        await until(lambda: executor.prepared["claim-a"] == 1, what="claim-a's registration under way")
        batch = pending_batch("later", pending_pod("web-0", "1"))
        await event_log.publish(subjects.PENDING, batch)
        await until(lambda: runtime.folded >= sequence_of(event_log, batch), what="the batch folded")
        executor.release.set()
        [plan] = await until(
            lambda: [e for e in event_log.events() if isinstance(e, ev.BatchPlanned)],
            what="the batch planned",
        )
        await until(lambda: caught_up(runtime))
    # planned on the state as of itself, all of it: the registration decided before it, recorded first
    assert decider.seen == ["Registered"]
    [registration] = registered(event_log)
    assert sequence_of(event_log, plan) > sequence_of(event_log, registration)
    report = replay(SchedulerDecider(), event_log.records())
    assert not report.differing, [c.differences() for c in report.differing]


def abandoned(event_log: InMemoryEventLog) -> list[ev.NodeClaimAbandoned]:
    return [e for e in event_log.events() if isinstance(e, ev.NodeClaimAbandoned)]


TIMED_OUT = T0 + lifecycle.REGISTRATION_TIMEOUT + timedelta(minutes=1)
"""A moment past the registration timeout of claims launched at ``T0``."""


@asynccontextmanager
async def claim_a_registration_held(
    decider: SchedulerDecider,
) -> AsyncIterator[tuple[InMemoryEventLog, HoldsOneRegistration, DeciderRuntime[Any]]]:
    """Two launched claims, claim-a's Node joined and its registration under way, held (no ticks but the
    test's own)."""
    event_log = await two_launched_claims_and_one_node()
    executor = HoldsOneRegistration("claim-a")
    async with running(decider, executor, event_log, tick_seconds=3600) as runtime:
        await until(lambda: executor.prepared["claim-a"] == 1, what="claim-a's registration under way")
        yield event_log, executor, runtime


async def test_a_tick_does_not_hold_back_the_nodes_that_join_while_registrations_are_behind() -> None:
    async with claim_a_registration_held(SchedulerDecider()) as (event_log, executor, runtime):
        ticking = asyncio.create_task(runtime.tick(T0 + timedelta(minutes=1)))  # nothing timed out yet
        joined = node_joined("claim-b")
        await event_log.publish(registry.subject_of(joined), joined)
        # the tick did not wait for claim-a's registration, holding the consumer meanwhile
        [answer] = await until(lambda: registered(event_log), what="claim-b Registered")
        assert answer.nodeclaim == "claim-b"
        await asyncio.wait_for(ticking, timeout=5)  # ends while claim-a's registration is still held
        executor.release.set()
        await until(lambda: len(registered(event_log)) == 2, what="claim-a Registered")
        await until(lambda: caught_up(runtime))
    report = replay(SchedulerDecider(), event_log.records())
    assert not report.differing, [c.differences() for c in report.differing]


async def test_a_tick_leaves_a_claim_whose_registration_is_behind_to_the_next_tick() -> None:
    async with claim_a_registration_held(SchedulerDecider()) as (event_log, executor, runtime):
        await runtime.tick(TIMED_OUT)
        # claim-b's Node never joined: abandoned. claim-a's joined and its registration is on its way: as the
        # state folded so far has it, claim-a is only Launched, but the tick does not judge it on that
        assert [e.nodeclaim for e in abandoned(event_log)] == ["claim-b"]
        executor.release.set()
        await until(lambda: len(registered(event_log)) == 1, what="claim-a Registered")
        await until(lambda: caught_up(runtime))
        await runtime.tick(TIMED_OUT)  # claim-a is Registered now: nothing more to abandon
    assert [e.nodeclaim for e in abandoned(event_log)] == ["claim-b"]
    report = replay(SchedulerDecider(), event_log.records())
    assert report.comparisons and not report.differing, [c.differences() for c in report.differing]


class AbandonsAsBarriers(SchedulerDecider):
    """Its abandons are barriers: ordered against every other decision."""

    def lane(self, decision: ev.Event) -> Lane:
        return None if isinstance(decision, ev.NodeClaimAbandoned) else claim_lane(decision)


async def test_a_tick_that_decides_a_barrier_is_decided_on_the_whole_state() -> None:
    async with claim_a_registration_held(AbandonsAsBarriers()) as (event_log, executor, runtime):
        ticking = asyncio.create_task(runtime.tick(TIMED_OUT))
        executor.release.set()
        await ticking
        # a barrier may depend on any lane: the tick waited for claim-a's registration, judged it Registered
        assert [e.nodeclaim for e in abandoned(event_log)] == ["claim-b"]
        await until(lambda: caught_up(runtime))
    report = replay(AbandonsAsBarriers(), event_log.records())
    assert not report.differing, [c.differences() for c in report.differing]
