"""Replaying a recorded range of the log through a service's pure decision function.

Every service that decides keeps its logic as a :class:`Decider`: a state built from events (``evolve``) and a
function from (state, input event) to the events it would publish (``decide``). The live service wraps the
decider with I/O; ``tenon replay`` runs the same decider offline over a recorded range, with no broker writes
and no cluster, and compares what it decides now with what was recorded then.

How a replay runs: for each record in order, ``evolve`` folds it into the state *as recorded up to that point*,
``decide`` answers it from there, and the service's recorded answers to it are folded right after (as the live
service folds its own decisions before its next input; they are not applied again where they sit in the log).
Feeding the recorded outputs back, rather than the replayed ones, keeps every decision compared against the
world the live service saw, so one divergence shows as one difference instead of a cascade. Decisions must take their clock from the input event (``decided_at``), not from the wall clock, so
the same input gives the same output.

Recorded decisions are matched to inputs by ``causationId``; they are compared without ``decidedAt`` (the
only envelope field that legitimately differs), so a difference in id means the decision differs in what
it answers or how it was keyed.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import msgspec

from proto.events import Event
from tenon.runtime.eventlog.records import LogRecord

DECIDERS: dict[str, str] = {
    "scheduler": "tenon.services.scheduler.decider:SchedulerDecider",
}
"""Service name -> ``module:attribute`` of its decider factory; services add themselves here as they land."""


class Decider(Protocol):
    name: str
    """The producer name the live service writes into its events."""

    def initial_state(self) -> Any: ...

    def evolve(self, state: Any, event: Event) -> Any: ...

    def decide(self, state: Any, event: Event) -> Sequence[Event]:
        """What the service does about ``event``, given ``state`` with ``event`` already folded in."""
        ...


def load_decider(spec: str) -> Decider:
    """A decider by service name (``scheduler``) or import path (``package.module:factory``)."""
    target = DECIDERS.get(spec, spec)
    if ":" not in target:
        known = ", ".join(sorted(DECIDERS)) or "none registered yet"
        raise ValueError(f"unknown service {spec!r} (known: {known}); or give module:attribute")
    module_name, attribute = target.split(":", 1)
    factory = getattr(importlib.import_module(module_name), attribute)
    if isinstance(factory, type) or not hasattr(factory, "decide"):
        factory = factory()  # a class or a factory function
    decider: Decider = factory
    return decider


@dataclass
class DecisionComparison:
    input_sequence: int
    input_type: str
    replayed: list[Event]
    recorded: list[Event]

    @property
    def same(self) -> bool:
        return _comparable(self.replayed) == _comparable(self.recorded)

    def differences(self) -> list[str]:
        """Human-readable field-level differences."""
        lines: list[str] = []
        replayed, recorded = _comparable(self.replayed), _comparable(self.recorded)
        if len(replayed) != len(recorded):
            lines.append(f"recorded {len(recorded)} decision(s), replay made {len(replayed)}")
        for index, (new, old) in enumerate(zip(replayed, recorded, strict=False)):
            for key in sorted(set(new) | set(old)):
                if new.get(key) != old.get(key):
                    lines.append(
                        f"decision {index} {key}: recorded {old.get(key)!r}, replay {new.get(key)!r}"
                    )
        for index, extra in enumerate(replayed[len(recorded) :], start=len(recorded)):
            lines.append(f"decision {index} only in replay: {extra.get('type')} {extra.get('id')}")
        for index, missing in enumerate(recorded[len(replayed) :], start=len(replayed)):
            lines.append(f"decision {index} only in the log: {missing.get('type')} {missing.get('id')}")
        return lines


@dataclass
class ReplayReport:
    comparisons: list[DecisionComparison] = field(default_factory=list)
    undecodable: list[int] = field(default_factory=list)
    records_read: int = 0

    @property
    def differing(self) -> list[DecisionComparison]:
        return [c for c in self.comparisons if not c.same]


def _comparable(events: Iterable[Event]) -> list[dict[str, Any]]:
    out = []
    for event in events:
        body = msgspec.to_builtins(event)
        body.pop("decidedAt", None)
        out.append(body)
    return out


def replay(decider: Decider, records: Iterable[LogRecord]) -> ReplayReport:
    """Run ``decider`` over ``records`` (already limited to the range wanted)."""
    report = ReplayReport()
    state = decider.initial_state()
    decoded: list[tuple[LogRecord, Event]] = []
    for record in records:
        report.records_read += 1
        try:
            decoded.append((record, record.decode()))
        except ValueError:
            report.undecodable.append(record.sequence)
    # the live service folds its own answers to an input right after deciding it, before the next input
    # (they reach the log later, possibly behind other inputs); replay folds the recorded answers at the same
    # point, and not again where they sit in the log
    answers: dict[str, list[Event]] = {}
    for _, event in decoded:
        if event.producer == decider.name and event.causation_id is not None:
            answers.setdefault(event.causation_id, []).append(event)
    folded: set[str] = set()
    for record, event in decoded:
        recorded = answers.get(event.id, [])
        if event.id not in folded:
            state = decider.evolve(state, event)
        replayed = list(decider.decide(state, event))
        report.comparisons.append(
            DecisionComparison(record.sequence, type(event).__name__, replayed, recorded)
        )
        for answer in recorded:
            if answer.id not in folded:
                state = decider.evolve(state, answer)
                folded.add(answer.id)
    # inputs that neither the replay nor the live service answered are not decisions
    report.comparisons = [c for c in report.comparisons if c.replayed or c.recorded]
    return report
