"""Replaying a recorded range of the log through a service's pure decider, and comparing with what it decided.

Every service that decides keeps its logic as a :class:`~tenon.runtime.decider.Decider`. ``tenon replay`` runs
the same decider offline over a recorded range, with no broker writes and no cluster, and compares what it
decides now with what was recorded then. The replay walks the log as the live runtime did:

* **Inputs** (records on the decider's input subjects) are folded in log order and decided; the service's
  recorded answers to an input (its events whose ``causationId`` is the input's id) are compared with the
  replayed ones, then folded right after the input, as the live service folds its own decisions before its
  next input (and not again where they sit in the log). Feeding the recorded answers back, not the replayed
  ones, keeps every decision compared against the world the live service saw: one divergence shows as one
  difference, not a cascade.
* **Ticks**: decisions taken on a clock tick carry ``basis``, the last input sequence their state covered.
  They
  are replayed right after that input, with the tick's own time (``decidedAt``), and compared with the tick's
  recorded decisions and the answers to those.
* **External** decisions (neither causation nor basis: a user's ``kubectl delete nodeclaim`` seen by a watch)
  have no recorded input to decide from; they are folded where they sit and counted, not compared.
* A replayed decision with an id the service had already recorded earlier, or that its claim would refuse, is
  not a difference: the live runtime does not record it twice.
* A replayed decision the service never recorded, but that one of its later events names as the action it
  followed (``after``: the Cluster API launcher's observation of an object it did not patch because its
  premises had changed), was decided live too and dropped by the executor: counted as dropped, not as a
  difference. The log says so; without such an event a dropped decision is a difference.
* Events a service writes about what it saw rather than what it decided (the event types of its decider's
  ``observations``: the Cluster API launcher's ``MachineObserved``, ...) are inputs like any other: decided,
  never counted as external decisions.
* A decider that checks its own output (``replays_itself = True``: the pod-watcher's batching, whose inputs
  are
  recorded inside its PendingBatch events) is compared against the input record itself.
* A decider that ``decides_on_batches`` (:mod:`tenon.runtime.decider`) answered a whole fetched batch on its
  last input, and the log does not say where batches began. Its decisions are level-triggered, so the replay
  still decides at every input, and:

  - an input with recorded answers is compared with them exactly (every input up to it is folded, as the live
    runtime had folded its whole batch);
  - an input the live runtime certainly decided on is compared too, answered or not: one it
    ``decided_alone``, and one a tick's ``basis`` names (a tick runs between batches, so the runtime had
    decided on that input);
  - any other input with no recorded answer may have been in the middle of a batch: what the replay decides
    there is *owed*, and the debt is settled by the next input that is compared (the batch's answer, checked
    exactly, answers whatever is still owed then) or that owes nothing (what was owed became moot before the
    batch could end). A debt still open at the end of the range is a difference: the live service owed
    those decisions and recorded none.

Decisions are compared without ``decidedAt`` (the only envelope field that legitimately differs).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec

from proto import subjects
from proto.codec import UndecodableEvent
from proto.events import Event, NodeClaimEvent
from tenon.domain.nodeclaim import NodeClaim
from tenon.runtime.decider import Decider, decided_alone, decides_on_batches
from tenon.runtime.eventlog.records import LogRecord


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
    external: int = 0
    """Recorded decisions with no input to replay them from (a user's action seen by a watch)."""
    ticks_outside: int = 0
    """Tick decisions whose state began before the range read (replay from earlier to check them)."""
    dropped: int = 0
    """Replayed decisions the live executor dropped, as a later event of the service says (``after``)."""

    @property
    def differing(self) -> list[DecisionComparison]:
        return [c for c in self.comparisons if not c.same]


def _comparable(events: Iterable[Event]) -> list[dict[str, Any]]:
    out = []
    for event in events:
        body = msgspec.to_builtins(event)
        body.pop("decidedAt", None)
        out.append(body)
    return sorted(out, key=lambda body: str(body.get("id")))


@dataclass
class _Recording:
    """The service's own decisions in the range, sorted by what they answer."""

    answers: dict[str, list[tuple[int, Event]]] = field(default_factory=lambda: defaultdict(list))
    ticks: dict[int, dict[Any, list[tuple[int, Event]]]] = field(default_factory=lambda: defaultdict(dict))
    external: set[str] = field(default_factory=set)
    dropped: set[str] = field(default_factory=set)
    """Decisions never recorded that an event of the service names as the action it followed (``after``):
    decided live, then dropped by the executor."""

    @property
    def tick_bases(self) -> set[int]:
        """Input sequences a tick's state covered: the live runtime had decided on each of them."""
        return set(self.ticks)

    @classmethod
    def of(cls, decider: Decider[Any], decoded: Sequence[tuple[LogRecord, Event]]) -> _Recording:
        recording = cls()
        tick_ids: dict[str, tuple[int, Any]] = {}
        observations = tuple(getattr(decider, "observations", ()))
        recorded: set[str] = set()
        followed: set[str] = set()
        for record, event in decoded:
            if event.producer == decider.name:
                recorded.add(event.id)
                after = getattr(event, "after", None)
                if isinstance(after, str):
                    followed.add(after)
            if event.producer != decider.name or isinstance(event, observations):
                continue
            if event.causation_id is None and event.basis is not None:
                key = (event.decided_at, event.basis)
                recording.ticks[event.basis].setdefault(key, []).append((record.sequence, event))
                if not _is_input(decider, record):  # an input's answers answer it when it is handled
                    tick_ids[event.id] = (event.basis, key)
            elif event.causation_id in tick_ids:
                basis, key = tick_ids[event.causation_id]
                recording.ticks[basis][key].append((record.sequence, event))
            elif event.causation_id is not None:
                recording.answers[event.causation_id].append((record.sequence, event))
            else:
                recording.external.add(event.id)
        recording.dropped = followed - recorded
        return recording


class _Replayer:
    def __init__(self, decider: Decider[Any], decoded: Sequence[tuple[LogRecord, Event]]) -> None:
        self.decider = decider
        self.state = decider.initial_state()
        self.recording = _Recording.of(decider, decoded)
        self.folded: set[str] = set()
        self.recorded_so_far: set[str] = set()
        self.awaiting: list[tuple[int, Event]] = []
        self.dropped: set[str] = set()
        self.report = ReplayReport()
        self.per_batch = decides_on_batches(decider)
        self.decided_at = self.recording.tick_bases
        self.owed: tuple[int, str, list[Event]] | None = None
        """For a batch decider, a debt no answer has settled yet: the first input that owed it (its sequence
        and type) and what is owed as of the latest input."""

    def _fold(self, event: Event, sequence: int) -> None:
        if event.id in self.folded:
            return
        self.folded.add(event.id)
        try:
            self.state = self.decider.evolve(self.state, event, sequence)
        except Exception:  # ImpossibleStory, or an input no fold can take: the live runtime refused it too
            pass

    def _worth_comparing(self, decisions: Iterable[Event]) -> list[Event]:
        """Replayed decisions the live runtime would have recorded. A claim's decision is judged against the
        claim as the answer's earlier decisions leave it, as the live runtime records them one after the
        other: a Node Ready when it joins is Registered and Initialized by one answer, and the Initialized
        is no refusal once the Registered before it is in the story."""
        kept = []
        claims = self.decider.claims(self.state)
        ahead: dict[str, NodeClaim] = {}
        for decision in decisions:
            if decision.id in self.recorded_so_far:
                continue
            if decision.id in self.recording.dropped:
                self.dropped.add(decision.id)
                continue
            if isinstance(decision, NodeClaimEvent):
                claim = ahead.get(decision.nodeclaim) or claims.get(decision.nodeclaim)
                if claim is not None:
                    if claim.refusal(decision) is not None:
                        continue
                    ahead[decision.nodeclaim] = _after(claim, decision)
            kept.append(decision)
        return kept

    def _settle(self, recorded: list[tuple[int, Event]]) -> None:
        for sequence, answer in recorded:
            self._fold(answer, sequence)
            self.recorded_so_far.add(answer.id)

    def input(self, record: LogRecord, event: Event) -> None:
        if getattr(self.decider, "replays_itself", False) and event.producer == self.decider.name:
            # its decisions are its inputs: those recorded since its last answer are what the next answer must
            # reproduce (a window sent as several parts is answered, whole, on its last part)
            self.awaiting.append((record.sequence, event))
            replayed = list(self.decider.decide(self.state, event))
            self._fold(event, record.sequence)
            if replayed:
                self._compare(self.awaiting[0][0], type(event).__name__, replayed, self.awaiting)
                self.awaiting = []
            return
        if event.id in self.recording.external:
            self.report.external += 1
            self._fold(event, record.sequence)
            self.recorded_so_far.add(event.id)
            return
        self._fold(event, record.sequence)
        replayed = self._worth_comparing(self.decider.decide(self.state, event))
        recorded = self.recording.answers.get(event.id, [])
        if self.per_batch and not recorded and not self._decided_live(record, event):
            if not replayed:
                self.owed = None  # owes nothing here: whatever was owed before became moot
            else:  # owed since the first input that owed, what is owed as of this one
                since = self.owed or (record.sequence, type(event).__name__, replayed)
                self.owed = (since[0], since[1], replayed)
            return
        self.owed = None  # the batch's answer, compared exactly, settles what was owed in it
        self._compare(record.sequence, type(event).__name__, replayed, recorded)
        self._settle(recorded)

    def _decided_live(self, record: LogRecord, event: Event) -> bool:
        """Whether the live runtime is known to have decided on this input (not just folded it)."""
        return record.sequence in self.decided_at or decided_alone(self.decider, event)

    def close(self) -> None:
        """The end of the range: what is still awaited or owed was never recorded."""
        if self.awaiting:  # recorded, and no replayed answer reproduced them
            first, event = self.awaiting[0]
            self._compare(first, type(event).__name__, [], self.awaiting)
        if self.owed is not None:
            sequence, kind, owed = self.owed
            self._compare(sequence, f"{kind} (owed to the end of the range)", owed, [])

    def ticks_after(self, sequence: int) -> None:
        for (moment, basis), recorded in sorted(self.recording.ticks.pop(sequence, {}).items()):
            decided = [
                msgspec.structs.replace(d, basis=basis) if d.causation_id is None else d
                for d in self.decider.tick(self.state, moment)
            ]
            self._compare(sequence, "tick", self._worth_comparing(decided), recorded)
            self._settle(recorded)

    def _compare(
        self, sequence: int, kind: str, replayed: list[Event], recorded: list[tuple[int, Event]]
    ) -> None:
        if replayed or recorded:
            comparison = DecisionComparison(sequence, kind, replayed, [event for _, event in recorded])
            self.report.comparisons.append(comparison)


def _after(claim: NodeClaim, decision: NodeClaimEvent) -> NodeClaim:
    """A copy of ``claim`` with ``decision`` in its story (the claim in the state is left as it is)."""
    scratch = claim.copy()
    scratch.apply(decision)
    return scratch


def _is_input(decider: Decider[Any], record: LogRecord) -> bool:
    return any(subjects.matches(f, record.subject) for f in decider.inputs)


def replay(decider: Decider[Any], records: Iterable[LogRecord]) -> ReplayReport:
    """Run ``decider`` over ``records`` (already limited to the range wanted) and compare its decisions."""
    decoded: list[tuple[LogRecord, Event]] = []
    undecodable: list[int] = []
    count = 0
    for record in records:
        count += 1
        try:
            decoded.append((record, record.decode()))
        except UndecodableEvent:
            undecodable.append(record.sequence)
    replayer = _Replayer(decider, decoded)
    replayer.report.records_read = count
    replayer.report.undecodable = undecodable
    replayer.ticks_after(0)
    for record, event in decoded:
        if _is_input(decider, record):
            replayer.input(record, event)
            replayer.ticks_after(record.sequence)
        elif event.producer == decider.name and event.id in replayer.recording.external:
            replayer.report.external += 1
            replayer._fold(event, record.sequence)
    replayer.close()
    replayer.report.ticks_outside = sum(len(groups) for groups in replayer.recording.ticks.values())
    replayer.report.dropped = len(replayer.dropped)
    return replayer.report
