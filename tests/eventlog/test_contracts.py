"""Event contracts: round trips, clear reasons for bad payloads, exported schemas kept fresh."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import msgspec
import pytest

from proto import export, subjects
from proto.codec import UndecodableEvent, decode, encode
from proto.events import EVENT_TYPES, InstanceChoice, NodeClaimPlanned, NodeObserved
from proto.ids import derive_id


def planned(**overrides: object) -> NodeClaimPlanned:
    fields: dict[str, object] = {
        "id": derive_id("scheduler", "NodeClaimPlanned", "batch-1", 0),
        "decided_at": datetime(2026, 11, 29, 10, 0, tzinfo=UTC),
        "producer": "scheduler",
        "causation_id": "batch-event",
        "correlation_id": "batch-1",
        "nodeclaim": "default-x7k2p",
        "nodepool": "default",
        "node_class": "default",
        "choice": InstanceChoice("c3-8", None, "on-demand", 0.1),
        "fallbacks": (InstanceChoice("c3-16", None, "on-demand", 0.2),),
        "pods": ("default/inflate-0",),
        "requirements": ({"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},),
        "labels": {"karpenter.sh/nodepool": "default"},
    }
    fields.update(overrides)
    return NodeClaimPlanned(**fields)  # type: ignore[arg-type]


def test_round_trip_keeps_every_field() -> None:
    event = planned()
    assert decode(encode(event)) == event
    wire = json.loads(encode(event))
    assert wire["type"] == "NodeClaimPlanned" and wire["schema"] == 1
    assert wire["causationId"] == "batch-event" and wire["choice"]["instanceType"] == "c3-8"


def test_events_are_immutable() -> None:
    with pytest.raises(AttributeError):
        planned().nodepool = "other"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (b"{not json", "not valid JSON"),
        (b'{"id": "x"}', "no 'type' field"),
        (b'{"type": "NodeClaimPlaned"}', "unknown event type 'NodeClaimPlaned'"),
    ],
)
def test_undecodable_payloads_say_why(payload: bytes, reason: str) -> None:
    with pytest.raises(UndecodableEvent, match=reason):
        decode(payload)


def test_future_schema_version_is_rejected_by_name() -> None:
    wire = json.loads(encode(planned()))
    wire["schema"] = 2
    with pytest.raises(UndecodableEvent, match="NodeClaimPlanned: schema 2 is not supported"):
        decode(json.dumps(wire).encode())


def test_wrong_field_type_names_the_field() -> None:
    wire = json.loads(encode(planned()))
    wire["nodepool"] = 7
    with pytest.raises(UndecodableEvent, match=r"\$\.nodepool"):
        decode(json.dumps(wire).encode())


def test_every_event_carries_the_envelope() -> None:
    for event_type in EVENT_TYPES:
        names = {f.encode_name for f in msgspec.structs.fields(event_type)}
        assert {"id", "decidedAt", "producer", "causationId", "correlationId", "schema"} <= names, event_type


def test_ids_are_deterministic_and_distinct() -> None:
    assert derive_id("scheduler", "NodeClaimPlanned", "b1", 0) == derive_id(
        "scheduler", "NodeClaimPlanned", "b1", 0
    )
    assert derive_id("scheduler", "NodeClaimPlanned", "b1", 0) != derive_id(
        "scheduler", "NodeClaimPlanned", "b1", 1
    )


def test_exported_schemas_are_current() -> None:
    stale = export.stale_files()
    assert stale == [], f"run 'make schemas': stale {stale}"


def test_stale_schema_is_detected(tmp_path) -> None:  # type: ignore[no-untyped-def]
    export.write(tmp_path)
    assert export.stale_files(tmp_path) == []
    (tmp_path / "NodeObserved.v1.json").write_text("{}")
    (tmp_path / "Removed.v1.json").write_text("{}")
    assert export.stale_files(tmp_path) == ["NodeObserved.v1.json", "Removed.v1.json"]


def test_subject_tokens_survive_dotted_names() -> None:
    assert subjects.node("ip-10-0-0-1.ec2.internal") == "tenon.cluster.node.ip-10-0-0-1_ec2_internal"
    assert subjects.matches(subjects.NODES, subjects.node("a.b"))
    assert subjects.matches("tenon.>", "tenon.pending")
    assert not subjects.matches("tenon.cluster.node.*", "tenon.cluster.node.a.b")
    assert not subjects.matches("tenon.>", "tenon")


def test_observation_keeps_the_kubernetes_object_whole() -> None:
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "labels": {"a": "b"}}}
    event = NodeObserved(
        id="i", decided_at=datetime.now(UTC), producer="pod-watcher", change="added", node=node
    )
    assert decode(encode(event)).node == node  # type: ignore[attr-defined]
