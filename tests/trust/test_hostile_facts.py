"""What the fuzzers found, pinned: well-formed events from a valid identity whose objects no kube-apiserver
would serve (a name that is a list, a node name that is a number, an object nested a thousand deep). Each
test says what must happen: the runtime refuses such an event before any decider folds it
(:mod:`proto.objects`), it goes to the dead letters with its reason, and the next input is decided."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from proto import events as ev
from proto import registry, subjects
from proto.codec import UndecodableEvent, decode, encode
from tenon.runtime.decider import BaseExecutor
from tenon.runtime.eventlog.memory import InMemoryEventLog
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


def refusal_of(event: ev.Event) -> str:
    """Why the runtime refuses ``event`` as it arrives (encoded, decoded), before any decider folds it."""
    subject = registry.BY_TYPE[type(event)].subject.replace("*", "x").replace(">", "x")
    reason = registry.refusal(subject, decode(encode(event)))
    assert reason is not None, f"{type(event).__name__} would be folded"
    return reason


def test_an_object_nested_a_thousand_deep_is_undecodable_not_a_crash() -> None:
    deep = b'{"a":' * 1000 + b"1" + b"}" * 1000
    data = (
        b'{"type":"NodeObserved","schema":1,"id":"x","decidedAt":"2026-11-29T10:00:00Z","producer":"pod-watcher",'
        b'"change":"added","node":' + deep + b"}"
    )
    with pytest.raises(UndecodableEvent):
        decode(data)


def test_a_node_named_by_a_list_is_refused_before_the_scheduler_folds_it() -> None:
    assert "NodeObserved.node: metadata must be a map, got list" in refusal_of(node_named_by_a_list())


def test_a_pod_bound_to_a_list_or_a_number_is_refused_naming_spec_node_name() -> None:
    for node_name in (["n1"], 5):
        reason = refusal_of(bound_pod_on_node(node_name))
        assert reason.startswith("BoundPodObserved.pod: spec.nodeName must be a string")


def test_a_machine_whose_metadata_is_text_is_refused_before_the_launcher_folds_it() -> None:
    assert "MachineObserved.machine: metadata must be a map, got str" in refusal_of(machine(metadata="m1"))


def test_a_machine_whose_deployment_label_is_a_number_is_refused_naming_the_label() -> None:
    labeled = machine(
        metadata={"name": "m1", "namespace": "default", "labels": {"cluster.x-k8s.io/deployment-name": 5}}
    )
    assert "metadata.labels.cluster.x-k8s.io/deployment-name must be a string, got int 5" in refusal_of(
        labeled
    )


def test_an_api_server_s_objects_pass_the_check() -> None:
    for fact in demo_facts():
        assert registry.refusal(registry.subject_of(fact), fact) is None
    assert registry.refusal(registry.subject_of(bound_pod_on_node("n1")), bound_pod_on_node("n1")) is None


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
