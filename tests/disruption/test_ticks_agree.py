"""The decider with its shortcuts (a tick with nothing due returns at once; deleted Nodes found without a
walk) decides exactly what a decider doing the whole work every time decides, over an hour and a half of a
cluster's life: pods come and go (some with ``do-not-disrupt`` for a while), nodes are bought for pending pods
(some of which never come), a budget window opens and closes, nodes expire, a NodePool's template changes,
a catalog drops a type, a user deletes a Node, a spot notice arrives; what disruption requests is drained and
terminated, what it asks to replace is planned and initialized. The Drifted condition the executor keeps
names what drift names."""

from __future__ import annotations

import heapq
import itertools
import random
from datetime import datetime, timedelta
from typing import Any

from proto import events as ev
from tenon.core.wellknown import DO_NOT_DISRUPT
from tenon.domain.disruption import drift
from tenon.domain.nodeclaim import ImpossibleStory
from tenon.services.disruption.decider import DisruptionDecider
from tenon.services.disruption.due import due_index
from tenon.services.disruption.projection_view import DisruptionState, build_view
from tests.disruption.clusters import SIZES, catalog, node, nodepool, pod
from tests.support.events import T0, build_event

SETTLE = timedelta(seconds=5)
CPUS = {name: cpu for name, cpu, _, _ in SIZES}


def pools(batch_label: str = "a") -> tuple[dict[str, Any], ...]:
    window = {"nodes": "0", "schedule": "*/15 * * * *", "duration": "4m"}
    default = nodepool("default", budgets=[{"nodes": "50%"}, window], consolidateAfter="40s")
    default["spec"]["template"]["spec"]["expireAfter"] = "45m"
    batch = nodepool(
        "batch", budgets=[{"nodes": "1"}], consolidationPolicy="WhenEmpty", consolidateAfter="90s"
    )
    batch["spec"]["template"]["metadata"] = {"labels": {"team": batch_label}}
    batch["spec"]["template"]["spec"]["expireAfter"] = "20m"
    return default, batch


class Story:
    """The cluster's side: events due at moments, and how the world answers disruption's decisions."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.queue: list[tuple[datetime, int, ev.Event]] = []
        self.order = itertools.count()
        self.ids = itertools.count()
        self.nodes: dict[str, tuple[str, str]] = {}
        """Node -> (its claim, its instance type), once initialized."""
        self.pods: dict[str, str] = {}
        """Pod name -> its node."""
        self.provider_ids: dict[str, str] = {}

    def at(self, moment: datetime, event: ev.Event) -> None:
        heapq.heappush(self.queue, (moment, next(self.order), event))

    def due(self, now: datetime) -> list[ev.Event]:
        out = []
        while self.queue and self.queue[0][0] <= now:
            out.append(heapq.heappop(self.queue)[2])
        return out

    def uid(self, prefix: str) -> str:
        return f"{prefix}-{next(self.ids)}"

    # --- what the cluster does ------------------------------------------------------------------------------

    def facts(self) -> None:
        self.at(T0, build_event(ev.NodePoolsSnapshot, "pools", at=T0, nodepools=pools()))
        self.at(T0, self.catalog(T0, SIZES))

    def catalog(self, at: datetime, sizes: list[tuple[str, int, int, float]]) -> ev.CatalogSnapshot:
        types = tuple(catalog(sizes)["spec"]["instanceTypes"])
        return build_event(
            ev.CatalogSnapshot,
            self.uid("catalog"),
            at=at,
            provider="static",
            node_class="default",
            instance_types=types,
        )

    def claim(
        self, start: datetime, name: str, pool: str, choice: ev.InstanceChoice, pods: tuple[str, ...]
    ) -> None:
        """A claim planned at ``start``, its machine and Node up 5-15 s later."""
        node_name, provider_id = f"node-{name}", f"p://{name}"
        self.provider_ids[name] = provider_id
        steps: list[tuple[int, ev.Event]] = [
            (
                0,
                build_event(
                    ev.NodeClaimPlanned,
                    self.uid("planned"),
                    at=start,
                    nodeclaim=name,
                    nodepool=pool,
                    node_class="default",
                    choice=choice,
                    fallbacks=(),
                    pods=pods,
                    requirements=(),
                    labels={},
                ),
            ),
            (
                5,
                build_event(
                    ev.NodeClaimLaunched,
                    self.uid("launched"),
                    at=start + timedelta(seconds=5),
                    nodeclaim=name,
                    provider_id=provider_id,
                    instance_type=choice.instance_type,
                    zone="z1",
                    capacity_type="on-demand",
                ),
            ),
            (
                10,
                build_event(
                    ev.NodeClaimRegistered,
                    self.uid("registered"),
                    at=start + timedelta(seconds=10),
                    nodeclaim=name,
                    node=node_name,
                    provider_id=provider_id,
                ),
            ),
            (
                10,
                self.node_event(
                    start + timedelta(seconds=10), node_name, choice.instance_type, pool, "added"
                ),
            ),
            (
                15,
                build_event(
                    ev.NodeClaimInitialized,
                    self.uid("initialized"),
                    at=start + timedelta(seconds=15),
                    nodeclaim=name,
                    node=node_name,
                ),
            ),
        ]
        for delay, event in steps:
            self.at(start + timedelta(seconds=delay), event)
        self.nodes[node_name] = (name, choice.instance_type)

    def node_event(
        self, at: datetime, name: str, kind: str, pool: str, change: str, **extra: Any
    ) -> ev.Event:
        obj = node(name, kind, CPUS[kind], CPUS[kind] * 2, pool=pool)
        obj["spec"] = {"providerID": self.provider_ids.get(name.removeprefix("node-"), "")}
        obj["metadata"].update(extra)
        return build_event(ev.NodeObserved, self.uid("node"), at=at, change=change, node=obj)

    def bind(self, at: datetime, name: str, node_name: str, millis: int, **annotations: str) -> None:
        obj = pod(name, node_name, f"{millis}m", "256Mi", annotations=annotations or None)
        obj["status"]["startTime"] = at.isoformat()
        self.pods[name] = node_name
        self.at(at, build_event(ev.BoundPodObserved, self.uid("bound"), at=at, change="added", pod=obj))

    def unbind(self, at: datetime, name: str) -> None:
        node_name = self.pods.pop(name)
        obj = pod(name, node_name)
        self.at(at, build_event(ev.BoundPodObserved, self.uid("gone"), at=at, change="removed", pod=obj))

    def something_happens(self, now: datetime) -> None:
        roll = self.rng.random()
        nodes = sorted(self.nodes)
        if roll < 0.25 and nodes:
            guarded = {DO_NOT_DISRUPT: "2m"} if self.rng.random() < 0.15 else {}
            millis = self.rng.choice([250, 500, 1000, 1500])
            self.bind(now, self.uid("app"), self.rng.choice(nodes), millis, **guarded)
        elif roll < 0.5 and self.pods:
            self.unbind(now, self.rng.choice(sorted(self.pods)))
        elif roll < 0.58:
            self.bought_for_pending(now)

    def bought_for_pending(self, now: datetime) -> None:
        names = [self.uid("waiting") for _ in range(self.rng.randint(1, 2))]
        pending = tuple(pod(n, None, "500m", "256Mi") for n in names)
        self.at(
            now,
            build_event(
                ev.PendingBatch,
                self.uid("batch"),
                at=now,
                batch_id=self.uid("b"),
                pods=pending,
                window_opened_at=now,
                window_closed_by="idle",
            ),
        )
        claim = self.uid("bought")
        pool = self.rng.choice(["default", "batch"])
        self.claim(
            now + timedelta(seconds=1),
            claim,
            pool,
            ev.InstanceChoice("c-4", "z1", "on-demand", 0.2),
            tuple(f"default/{n}" for n in names),
        )
        if self.rng.random() < 0.5:  # else they never come: the claim is held for them a while, then not
            for n in names:
                self.bind(now + timedelta(seconds=25), n, f"node-{claim}", 500)

    # --- how the world answers decisions --------------------------------------------------------------------

    def answer(self, decisions: list[ev.Event], now: datetime) -> None:
        for decision in decisions:
            if isinstance(decision, ev.DisruptionRequested):
                self.terminate(decision, now)
            elif isinstance(decision, ev.ReplacementsRequested):
                for r in decision.replacements:
                    self.claim(now + timedelta(seconds=2), r.nodeclaim, r.nodepool, r.choice, r.pods)

    def terminate(self, request: ev.DisruptionRequested, now: datetime) -> None:
        node_name = request.node or f"node-{request.nodeclaim}"
        drained_at, gone_at = now + timedelta(seconds=8), now + timedelta(seconds=12)
        for name in [p for p, n in self.pods.items() if n == node_name]:
            self.unbind(drained_at, name)
        self.at(
            drained_at,
            build_event(
                ev.NodeClaimDrained,
                self.uid("drained"),
                at=drained_at,
                nodeclaim=request.nodeclaim,
                node=node_name,
            ),
        )
        self.at(
            gone_at,
            build_event(
                ev.NodeClaimTerminated,
                self.uid("terminated"),
                at=gone_at,
                nodeclaim=request.nodeclaim,
                reason="gone",
            ),
        )
        kind = self.nodes.pop(node_name, (request.nodeclaim, "c-4"))[1]
        self.at(gone_at, self.node_event(gone_at, node_name, kind, "default", "removed"))


def fold(decider: DisruptionDecider, state: DisruptionState, events: list[ev.Event]) -> None:
    for event in events:
        try:
            decider.evolve(state, event)
        except ImpossibleStory:
            pass  # as the runtime: a duplicate of what the state holds


def test_every_tick_and_answer_is_what_the_whole_work_decides() -> None:
    rng = random.Random(16)
    story = Story(rng)
    story.facts()
    for i in range(6):
        pool = ("default", "batch")[i % 2]
        name = f"{pool}-{i}"
        story.claim(T0, name, pool, ev.InstanceChoice(rng.choice(["c-4", "c-8"]), "z1", "on-demand", 0.2), ())
        for j in range(rng.randint(0, 3)):
            story.bind(
                T0 + timedelta(seconds=20), f"{name}-app-{j}", f"node-{name}", rng.choice([250, 500, 1000])
            )
    happenings = {
        25: lambda at: story.at(
            at, build_event(ev.NodePoolsSnapshot, "relabelled", at=at, nodepools=pools("b"))
        ),
        40: lambda at: story.at(at, story.catalog(at, [s for s in SIZES if s[0] != "c-8"])),
        55: lambda at: story.at(at, deleted_node(story, at)),
        65: lambda at: story.at(at, spot_notice(story, at)),
    }
    fast, whole = DisruptionDecider(settle=SETTLE), DisruptionDecider(settle=SETTLE, shortcuts=False)
    ours, theirs = fast.initial_state(), whole.initial_state()
    now, decided = T0, 0
    while now < T0 + timedelta(minutes=90):
        now += timedelta(seconds=rng.randint(1, 12))
        story.something_happens(now)
        minute = int((now - T0).total_seconds() // 60)
        if minute in happenings:
            happenings.pop(minute)(now)
        for event in story.due(now):
            fold(fast, ours, [event])
            fold(whole, theirs, [event])
            answered = list(fast.decide(ours, event))
            assert answered == list(whole.decide(theirs, event)), f"decide on {event.id} at {now}"
            decided += settle(story, (fast, ours), (whole, theirs), answered, now)
        ticked = list(fast.tick(ours, now))
        assert ticked == list(whole.tick(theirs, now)), f"tick at {now}"
        decided += settle(story, (fast, ours), (whole, theirs), ticked, now)
        assert due_index(ours).drifted(ours) == drift.drifted(build_view(theirs, now, with_core=False))
    assert not happenings and decided >= 20  # the story did happen: many decisions were compared


def settle(
    story: Story,
    ours: tuple[DisruptionDecider, DisruptionState],
    theirs: tuple[DisruptionDecider, DisruptionState],
    decisions: list[ev.Event],
    now: datetime,
) -> int:
    fold(*ours, decisions)
    fold(*theirs, decisions)
    story.answer(decisions, now)
    return len(decisions)


def deleted_node(story: Story, at: datetime) -> ev.Event:
    name = sorted(story.nodes)[0]
    return story.node_event(
        at, name, story.nodes[name][1], "default", "modified", deletionTimestamp=at.isoformat()
    )


def spot_notice(story: Story, at: datetime) -> ev.Event:
    claim = story.nodes[sorted(story.nodes)[-1]][0]
    return build_event(
        ev.InterruptionNotice,
        "spot",
        at=at,
        provider_id=story.provider_ids[claim],
        kind="spot-interruption",
        deadline=at + timedelta(minutes=2),
    )
