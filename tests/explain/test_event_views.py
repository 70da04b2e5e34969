"""The table of event types ``tenon tap``, ``tenon replay`` and ``tenon explain`` print from covers every
event type: a new type in ``proto/events.py`` without an entry fails here, by name."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import msgspec.inspect as mi
import pytest

from proto import events as ev
from proto import registry
from tenon.domain import eventviews
from tests.support.events import build_event

T0 = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)


def sample_value(info: mi.Type) -> Any:
    """The plainest value of a field's type: enough to build any event without knowing it."""
    match info:
        case mi.StrType():
            return "x"
        case mi.IntType():
            return 1
        case mi.FloatType():
            return 0.5
        case mi.BoolType():
            return False
        case mi.DateTimeType():
            return T0
        case mi.LiteralType():
            return info.values[0]
        case mi.UnionType():
            return sample_value(next(t for t in info.types if not isinstance(t, mi.NoneType)))
        case mi.VarTupleType() | mi.TupleType() | mi.ListType():
            return ()
        case mi.DictType() | mi.AnyType():
            return {}
        case mi.StructType():
            return sample(info.cls)
    raise AssertionError(f"no sample value for {info!r}: teach sample_value this type")


def sample(struct: type[Any]) -> Any:
    info = mi.type_info(struct)
    assert isinstance(info, mi.StructType)
    return struct(**{f.name: sample_value(f.type) for f in info.fields if f.required})


def test_every_event_type_has_an_entry() -> None:
    missing = [t.__name__ for t in ev.EVENT_TYPES if t not in eventviews.BY_TYPE]
    assert not missing, (
        f"event types without an entry in tenon/domain/eventviews.py: {', '.join(missing)}; "
        "give each a one-line summary (and the NodeClaims and pods it concerns) so tap, replay and explain "
        "can print it"
    )
    stray = [t.__name__ for t in eventviews.BY_TYPE if t not in ev.EVENT_TYPES]
    assert not stray, f"tenon/domain/eventviews.py has entries for types proto/events.py lacks: {stray}"
    assert set(eventviews.BY_TYPE) == set(registry.BY_TYPE)  # keyed like proto/registry.py
    assert len(eventviews.VIEWS) == len(eventviews.BY_TYPE)  # no type listed twice


@pytest.mark.parametrize("event_type", ev.EVENT_TYPES, ids=lambda t: t.__name__)
def test_every_event_reads_as_one_line(event_type: type[ev.Event]) -> None:
    event = sample(event_type)
    line = eventviews.summary(event)
    assert line and "\n" not in line and line != event_type.__name__
    assert all(isinstance(name, str) for name in eventviews.nodeclaims_of(event))
    assert all(isinstance(pod, str) for pod in eventviews.pods_of(event))
    view = eventviews.view_of(event_type)
    if issubclass(event_type, ev.NodeClaimEvent):
        assert eventviews.nodeclaims_of(event) == ("x",)
        step, detail = eventviews.claim_step(event, None)
        assert step and detail and "\n" not in detail
    else:
        assert view.claim_step is None


def test_a_type_without_an_entry_is_named() -> None:
    class NodeClaimTeleported(ev.NodeClaimEvent, frozen=True, kw_only=True, tag=True):
        pass

    with pytest.raises(KeyError, match=r"NodeClaimTeleported is missing from tenon/domain/eventviews\.py"):
        eventviews.summary(NodeClaimTeleported(id="e", decided_at=T0, producer="p", nodeclaim="c"))


def test_the_claims_and_pods_an_event_concerns() -> None:
    answer = build_event(
        ev.BatchPlanned,
        "answer",
        batch_id="b1",
        nodeclaims=("default-a",),
        existing=(ev.PodPlacement("default/small", "default-b", kind="NodeClaim"),),
        unschedulable=(ev.UnschedulablePod("default/huge", "too big"),),
    )
    assert eventviews.nodeclaims_of(answer) == ("default-a", "default-b")
    assert eventviews.pods_of(answer) == ("default/small", "default/huge")
    decision = build_event(
        ev.DisruptionDecision,
        "decision",
        method="emptiness",
        candidates=(ev.DisruptionCandidate("default-a", "n1", "default", "empty"),),
        reason="empty for 30s",
        budget="default: nodes 10%",
        blocked=(ev.BlockedCandidate("default-c", "n3", "a pod without a controller"),),
    )
    assert eventviews.concerns_nodeclaim(decision, "default-c")
    assert not eventviews.concerns_nodeclaim(decision, "default-b")
    observed = build_event(ev.NodeObserved, "n", change="added", node={"metadata": {"name": "n1"}})
    assert eventviews.summary(observed) == "node n1 added"
    assert not eventviews.concerns_nodeclaim(observed, "default-a")


def test_a_launch_as_a_fallback_says_so_in_the_claims_life() -> None:
    plan = build_event(
        ev.NodeClaimPlanned,
        "plan",
        nodeclaim="default-a",
        nodepool="default",
        node_class="default",
        choice=ev.InstanceChoice("c3-8", None, "on-demand", 0.1),
        fallbacks=(ev.InstanceChoice("c3-16", None, "on-demand", 0.2),),
        pods=("default/big",),
        requirements=(),
        labels={},
    )
    launched = build_event(
        ev.NodeClaimLaunched,
        "launched",
        nodeclaim="default-a",
        provider_id="openstack:///m-1",
        instance_type="c3-16",
    )
    assert eventviews.summary(launched) == "claim default-a launched: c3-16 as openstack:///m-1"
    assert eventviews.claim_step(launched, plan) == (
        "Launched",
        "as openstack:///m-1; launched as fallback c3-16 instead of c3-8",
    )
    assert eventviews.claim_step(launched, None) == ("Launched", "c3-16 as openstack:///m-1")
