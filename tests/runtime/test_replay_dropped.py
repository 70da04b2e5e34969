"""``tenon replay`` and a decision the live executor dropped: when a later event of the service names it as
the action it followed (``after``), the log says it was decided and dropped, and the replay counts it so;
without that word, a decision the log never recorded is a difference."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from proto import events as ev
from proto import registry, subjects
from proto.codec import encode
from proto.ids import derive_id
from tenon.runtime.eventlog.records import LogRecord
from tenon.runtime.replay import ReplayReport, replay
from tests.support.events import T0, build_event

POOLS = build_event(ev.NodePoolsSnapshot, "pools", nodepools=())


def scale(cause: ev.Event) -> ev.MachineDeploymentScaled:
    return build_event(
        ev.MachineDeploymentScaled,
        derive_id(registry.LAUNCHER_CAPI, "MachineDeploymentScaled", cause.id),
        causation=cause.id,
        namespace="default",
        machine_deployment="c3-8",
        resource_version="1",
        replicas_from=1,
        replicas_to=2,
        reason="a replica for NodeClaim default-a",
    )


def observed_after(action: str) -> ev.MachineDeploymentObserved:
    """What the launcher publishes of a MachineDeployment after its action on it (done or dropped)."""
    md = {"metadata": {"name": "c3-8", "namespace": "default", "uid": "u1"}, "spec": {"replicas": 5}}
    return build_event(
        ev.MachineDeploymentObserved,
        f"observed-after-{action}",
        change="changed",
        machine_deployment=md,
        after=action,
    )


class ScalesOnEveryPoolSnapshot:
    """A decider that answers each NodePoolsSnapshot with one scale (what it decides is beside the point)."""

    name = registry.LAUNCHER_CAPI
    inputs = (subjects.NODEPOOLS,)
    observations = (ev.MachineDeploymentObserved,)

    def initial_state(self) -> dict[str, Any]:
        return {}

    def evolve(self, state: dict[str, Any], event: ev.Event, sequence: int = 0) -> dict[str, Any]:
        return state

    def decide(self, state: dict[str, Any], event: ev.Event) -> list[ev.Event]:
        return [scale(event)] if isinstance(event, ev.NodePoolsSnapshot) else []

    def tick(self, state: dict[str, Any], now: datetime) -> list[ev.Event]:
        return []

    def claims(self, state: dict[str, Any]) -> dict[str, Any]:
        return {}


def replayed(*events: ev.Event) -> ReplayReport:
    records = [LogRecord(n, registry.subject_of(e), encode(e), {}, T0) for n, e in enumerate(events, start=1)]
    return replay(ScalesOnEveryPoolSnapshot(), records)  # type: ignore[arg-type]


def test_a_decision_the_executor_dropped_and_the_log_names_is_counted_as_dropped() -> None:
    report = replayed(POOLS, observed_after(scale(POOLS).id))
    assert report.differing == []
    assert report.dropped == 1


def test_a_decision_the_log_never_recorded_nor_names_is_a_difference() -> None:
    report = replayed(POOLS)
    [difference] = report.differing
    assert difference.differences()[0] == "recorded 0 decision(s), replay made 1"
    assert report.dropped == 0


def test_an_action_recorded_and_then_followed_by_an_observation_is_compared_as_usual() -> None:
    done = scale(POOLS)
    report = replayed(POOLS, done, observed_after(done.id))
    assert report.differing == []
    assert report.dropped == 0
