"""What the fuzzers found, pinned: well-formed events from a valid identity whose objects no kube-apiserver
would serve (a name that is a list, a node name that is a number, an object nested a thousand deep). Each
test says what must happen; those marked ``xfail`` fail today for the reason given and name the code that
must change (strict: the day it is fixed, the mark must go)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from proto import events as ev
from proto import registry, subjects
from proto.codec import UndecodableEvent, decode, encode
from tenon.domain.nodeclaim import ImpossibleStory
from tenon.runtime.decider import BaseExecutor
from tenon.runtime.eventlog.memory import InMemoryEventLog
from tenon.services.launcher_capi.decider import CapiLauncherDecider
from tenon.services.scheduler.decider import SchedulerDecider
from tests.support.events import build_event
from tests.support.objects import demo_facts, pending_pod
from tests.support.services import running
from tests.support.waiting import until


def node_named_by_a_list() -> ev.NodeObserved:
    node = {"apiVersion": "v1", "kind": "Node", "metadata": ["n1"], "spec": {}, "status": {}}
    return build_event(ev.NodeObserved, "node-list", change="added", node=node)


def bound_pod_on_node(node_name: Any) -> ev.BoundPodObserved:
    pod = pending_pod("p1", "100m")
    pod["spec"]["nodeName"] = node_name
    pod["status"] = {"phase": "Running"}
    return build_event(ev.BoundPodObserved, f"pod-on-{node_name!r}", change="added", pod=pod)


def machine(**changes: Any) -> ev.MachineObserved:
    obj: dict[str, Any] = {
        "apiVersion": "cluster.x-k8s.io/v1beta1",
        "kind": "Machine",
        "metadata": {"name": "m1", "namespace": "default", "labels": {}, "annotations": {}},
        "spec": {},
    }
    obj.update(changes)
    return build_event(ev.MachineObserved, f"machine-{sorted(changes)}", change="added", machine=obj)


def folds_or_refuses(decider: Any, event: ev.Event) -> None:
    """What the runtime needs of ``evolve``: the event is folded, or refused as an impossible story."""
    state = decider.initial_state()
    try:
        decider.evolve(state, decode(encode(event)), 1)
    except ImpossibleStory:
        pass


def test_an_object_nested_a_thousand_deep_is_undecodable_not_a_crash() -> None:
    deep = b'{"a":' * 1000 + b"1" + b"}" * 1000
    data = (
        b'{"type":"NodeObserved","schema":1,"id":"x","decidedAt":"2026-11-29T10:00:00Z","producer":"pod-watcher",'
        b'"change":"added","node":' + deep + b"}"
    )
    with pytest.raises(UndecodableEvent):
        decode(data)


@pytest.mark.xfail(strict=True, raises=AttributeError, reason="tenon/domain/projection.py object_key")
def test_the_scheduler_refuses_a_node_named_by_a_list() -> None:
    folds_or_refuses(SchedulerDecider(), node_named_by_a_list())


@pytest.mark.xfail(strict=True, raises=TypeError, reason="tenon/domain/projection.py _bound_pod_observed")
def test_the_scheduler_refuses_a_pod_bound_to_a_list() -> None:
    folds_or_refuses(SchedulerDecider(), bound_pod_on_node(["n1"]))


@pytest.mark.xfail(strict=True, raises=AttributeError, reason="launcher_capi/observations.py ref_of")
def test_the_launcher_refuses_a_machine_whose_metadata_is_text() -> None:
    folds_or_refuses(CapiLauncherDecider(), machine(metadata="m1"))


@pytest.mark.xfail(
    strict=True, raises=ValueError, reason="tenon/domain/projection.py: last_pod_activity keyed by a number"
)
def test_the_schedulers_snapshot_survives_a_pod_bound_to_a_number() -> None:
    decider = SchedulerDecider()
    state = decider.evolve(decider.initial_state(), decode(encode(bound_pod_on_node(5))), 1)
    decider.decode(decider.encode(state))


@pytest.mark.xfail(
    strict=True,
    raises=ValueError,
    reason="launcher_capi/observations.py machine_view: a label that is a number",
)
def test_the_launchers_snapshot_survives_a_machine_whose_deployment_label_is_a_number() -> None:
    decider = CapiLauncherDecider()
    labeled = machine(
        metadata={"name": "m1", "namespace": "default", "labels": {"cluster.x-k8s.io/deployment-name": 5}}
    )
    state = decider.evolve(decider.initial_state(), decode(encode(labeled)), 1)
    decider.decode(decider.encode(state))


async def test_a_fact_the_scheduler_cannot_fold_is_dead_lettered_and_the_next_batch_planned() -> None:
    event_log = InMemoryEventLog()
    for fact in demo_facts():
        await event_log.publish(registry.subject_of(fact), fact)
    await event_log.publish(subjects.node("n1"), node_named_by_a_list())
    batch = build_event(
        ev.PendingBatch,
        "after-the-poison",
        batch_id="after-the-poison",
        pods=(pending_pod("p1", "1"),),
        window_opened_at=datetime.now(UTC),
        window_closed_by="idle",
    )
    await event_log.publish(subjects.PENDING, batch)
    async with running(SchedulerDecider(), BaseExecutor(), event_log) as runtime:

        async def answered() -> bool:
            planned = [r async for r in event_log.read(subjects.BATCH_DECISIONS)]
            return any(isinstance(r.event, ev.BatchPlanned) for r in planned)

        await until(answered, 5, what="the batch after the poison planned")
        letters = [r async for r in event_log.read(subjects.DEADLETTERS, stream=subjects.DEADLETTER_STREAM)]
        assert len(letters) == 1 and runtime.refused == 1
