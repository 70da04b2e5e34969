"""The decider runtime: rebuild -> follow -> decide(state, input) -> execute, the same for every service.

A service that decides from the log is three things (see :mod:`tenon.services`):

* a **decider** (:class:`Decider`): pure. ``evolve`` folds an event into the state, ``decide`` answers an
  input
  with decisions (events), ``tick`` decides what time alone makes true (a timeout, a node empty long enough).
  ``tenon replay`` runs exactly this, offline.
* an **executor** (:class:`Executor`): the I/O a decision needs around its recording (patch a Node before
  ``Registered`` is recorded, create the NodeClaim object after ``Planned`` is), and any background work.
* a **settings** object (:mod:`tenon.runtime.settings`).

:class:`DeciderRuntime` does everything else, the same way for every service:

1. **Rebuild** the state: the latest snapshot (:mod:`.eventlog.snapshots`) if its format is the decider's,
   then the log's tail after it. Records up to the durable consumer's ack floor were handled before and are
   folded; later records are left for the consumer (folded and *decided* when it delivers them), except the
   service's own decisions, folded at once as the live service did when it made them. Rebuild cost is the tail
   since the last snapshot, not the log's history.
2. **Follow** the decider's inputs with a durable consumer, in log order (a decision must see every record
   before its input): fold, decide, carry out and record each decision, fold the decision at once (the next
   input must see it), then ack. A record the aggregate refuses (an impossible story) is dead-lettered with
   the reason, never acted on. A decision on a claim that moved on meanwhile is deferred: decisions are
   level-triggered, so it is decided again when the conflicting event is folded.
3. **Tick** every ``tick_seconds``: ``decider.tick(state, now)``; its decisions carry ``basis`` (the last
   sequence the state covered) so a replay decides them from the same state.
4. **Snapshot** the state every ``snapshot_every`` handled records or ``snapshot_interval`` seconds, in the
   background (the state is encoded synchronously, so it is consistent).

A **standby** replica (:class:`tenon.runtime.service.DeciderWork`) runs step 1 ahead of its term and again
every third of the lease (:meth:`DeciderRuntime.catch_up`: what the leader has handled since, then the
decider's optional ``warm(state)`` builds the caches its first decision would otherwise build), so a term that
begins on it folds a short tail and decides at once. From the term on, its consumer alone folds.

A kind of decision that has been seen to take long (on a large cluster, seconds) runs in a worker thread while
the runtime holds its lock (nothing folds meanwhile): it must not stop the event loop, where the leadership
lease is renewed, the broker's heartbeats answered and the health endpoint's heartbeat kept. Quick ones go
back to the loop, where they do not queue for the GIL; ticks, whose cost swings, stay in the thread.

Executors with inputs from outside the log (a user's ``kubectl delete nodeclaim``) call :meth:`submit`; such
decisions carry neither causation nor basis, and a replay reports them as external.

**Deciding on batches** (opt-in, ``decides_on_batches = True``). A decider whose ``decide`` is level-triggered
(what it answers is a function of the whole state; the input gives only the answer's cause and moment) is not
asked once per record: the runtime folds every record of a fetched batch and decides once, on its last input,
so a burst of 200 ``NodeClaimPlanned`` costs one decision (one MachineDeployment patch), not 200. An input
whose answer is about the input itself (a ``PendingBatch`` to plan) is named by the decider's
``decided_alone(event)``: the batch is cut right after it and it is decided on the state as of itself.
``tenon replay`` knows the rule (:mod:`tenon.runtime.replay`): an answer recorded on an input reproduces when
every input up to it is folded, and an input answered by nothing owes nothing by the batch's end. A decider
that can answer a little later says how much with ``batch_linger`` (seconds): under a stream of records its
consumer waits that long after a short batch, so the next one is larger (disruption, whose consolidation waits
seconds anyway, spends 10-50 % less CPU on the 1,000-pod run with 10 ms, by machine). It may say it as a
method of the state: disruption does not wait while a command it confirmed waits for budget.

**Carrying out** a call's decisions: in order, except that decisions on different aggregates run together.
The decider's ``lane(decision)`` names the aggregate a decision belongs to (default: its claim, for claim
events); decisions of one lane keep their order, and a decision with no lane (None) waits for everything
before it and holds back everything after it. So the Registered of 100 claims (a Node patch and an append
each) take one round trip's time, not 100.

**Carrying out behind** (opt-in, the decider's ``carried_out_behind(decision)``). A lane whose every decision
the decider names is carried out in a task of its own, and the consumer goes on to the next inputs at once:
the scheduler's registrations, each a few requests to a busy API server, no longer hold back the Nodes that
join meanwhile (they waited for the whole carry-out, then for their own batch's: ``Launched -> Registered``'s
p99 was two such batches). What keeps the story straight:

* a lane's decisions keep their order: a later decision of a lane still behind (another step of its claim)
  waits for it; one decided again (level-triggered) while it is behind is not carried out twice;
* an input ``decided_alone``, a tick and a barrier wait until nothing is behind, so they are decided (or
  carried out) on the whole state, as ``tenon replay`` decides them. Except a tick of a decider that
  ``ticks_by_lane`` (its tick decides each lane from that lane's own story: the scheduler's timeouts, each
  claim's phase and age): it is decided at once, and what it decides for a lane still behind is dropped (the
  next tick decides it again, on the whole story). Waiting, the tick held the consumer back for the whole
  wave of registrations behind (a second on the 1,000-pod run, every other tick);
* the state is not folded into while a decision is made in a worker thread;
* a lane behind that fails is retried in place, then dropped loudly, as an input's decisions are; the term's
  end cancels what is still behind (its decisions are decided again by the next term, level-triggered).

Only decisions whose deciding does not depend on other claims' steps in flight may be carried out behind: the
scheduler's ``Registered`` and ``Initialized`` (each claim's step is decided from its own claim and Node).
And what the decider decides next must not depend on whether a decision behind is folded yet: ``tenon
replay`` folds each answer right after its input, so an input the live runtime decided with a decision still
behind is replayed with it folded. The scheduler's ``Initialized`` is judged the same either way (a Node
observed before its registration patch showed is judged as that patch leaves it, folded or not); when it was
not, the scale-to-zero e2e test's replay found an Initialized recorded on an input the replay did not decide
it on.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Generic, Protocol, TypeVar

import msgspec

from proto import events as ev
from proto import registry, subjects
from proto.codec import UndecodableEvent
from tenon.domain.nodeclaim import ClaimBook, ImpossibleStory
from tenon.runtime.claims import append_claim_event
from tenon.runtime.collector import collector_paused
from tenon.runtime.eventlog import (
    ConcurrencyConflict,
    ConsumerSettings,
    EventLog,
    LogRecord,
    PermanentError,
    PublishResult,
)
from tenon.runtime.observability import metrics, recording

log = logging.getLogger("tenon.runtime")

S = TypeVar("S")


class Decider(Protocol[S]):
    name: str
    """The service; also the ``producer`` of its decisions and the name of its durable consumer."""
    inputs: tuple[str, ...]
    """Subject filters it follows."""
    state_format: str
    """Names the snapshot encoding of the state, with a version (``scheduler/3``): a snapshot of any other
    format is ignored and the state rebuilt from the log."""

    def initial_state(self) -> S: ...

    def evolve(self, state: S, event: ev.Event, sequence: int) -> S:
        """Fold ``event`` (stored at ``sequence``). May raise :class:`ImpossibleStory`."""
        ...

    def decide(self, state: S, event: ev.Event) -> Sequence[ev.Event]:
        """Decisions answering ``event``, with ``event`` already folded into ``state``."""
        ...

    def tick(self, state: S, now: datetime) -> Sequence[ev.Event]:
        """Decisions that time alone makes true at ``now`` (empty for a decider with none)."""
        ...

    def claims(self, state: S) -> ClaimBook:
        """The state's NodeClaims (what an append on a claim expects comes from here)."""
        ...

    def encode(self, state: S) -> bytes: ...

    def decode(self, data: bytes) -> S: ...


Lane = Hashable | None
"""What a decision belongs to for carrying out: decisions of different lanes are independent (None: a barrier,
ordered against every other decision)."""


def claim_lane(decision: ev.Event) -> Lane:
    """The default lanes: a claim event belongs to its claim; anything else is a barrier."""
    return ("nodeclaim", decision.nodeclaim) if isinstance(decision, ev.NodeClaimEvent) else None


def decides_on_batches(decider: object) -> bool:
    """Whether ``decider`` decides once per batch of inputs (see the module docstring)."""
    return bool(getattr(decider, "decides_on_batches", False))


def batch_linger(decider: object, state: object) -> float:
    """Seconds the decider's consumer waits after a short batch (:attr:`.ConsumerSettings.linger`): a decider
    that can answer tens of milliseconds later says so with ``batch_linger``, and decides on fewer, larger
    batches under a stream of records. ``batch_linger`` is a number, or a method asked with the state after
    each batch, for a decider whose answers can wait only at times."""
    linger = getattr(decider, "batch_linger", 0.0)
    return float(linger(state) if callable(linger) else linger)


def decided_alone(decider: object, event: ev.Event) -> bool:
    """Whether a batch-deciding ``decider`` answers ``event`` on the state as of itself (a cut in a batch)."""
    alone = getattr(decider, "decided_alone", None)
    return bool(alone(event)) if alone is not None else False


def carried_out_behind(decider: object, decision: ev.Event) -> bool:
    """Whether ``decision``'s carrying out may go on while the next inputs are decided (see the module
    docstring)."""
    behind = getattr(decider, "carried_out_behind", None)
    return bool(behind(decision)) if behind is not None else False


def ticks_by_lane(decider: object) -> bool:
    """Whether ``decider``'s tick decides each lane from that lane's own state alone (see the module
    docstring)."""
    return bool(getattr(decider, "ticks_by_lane", False))


def keyed_steps(decider: object, decisions: Sequence[ev.Event]) -> list[list[tuple[Lane, list[ev.Event]]]]:
    """``decisions`` as steps carried out one after the other, each step a set of lanes (with their keys)
    carried out together, each lane in order: a barrier is a step of its own."""
    lane_of = getattr(decider, "lane", None) or claim_lane
    steps: list[list[tuple[Lane, list[ev.Event]]]] = []
    current: dict[Hashable, list[ev.Event]] = {}
    for decision in decisions:
        lane = lane_of(decision)
        if lane is None:
            if current:
                steps.append(list(current.items()))
                current = {}
            steps.append([(None, [decision])])
        else:
            current.setdefault(lane, []).append(decision)
    if current:
        steps.append(list(current.items()))
    return steps


def lanes(decider: object, decisions: Sequence[ev.Event]) -> list[list[list[ev.Event]]]:
    """:func:`keyed_steps` without the keys."""
    return [[lane for _, lane in step] for step in keyed_steps(decider, decisions)]


class Executor(Protocol):
    async def start(self, runtime: DeciderRuntime[Any]) -> None:
        """Begin background work (object writers, watches); called after the rebuild."""

    async def stop(self) -> None: ...

    async def prepare(self, decision: ev.Event) -> bool:
        """Side effects that must precede recording ``decision``; False drops it (it is decided again
        later)."""
        ...

    async def recorded(self, decision: ev.Event, cause: ev.Event | None) -> None:
        """Side effects that follow recording (never on the decision path's critical section for long)."""

    async def observed(self, event: ev.Event) -> None:
        """After an input was folded and decided (e.g. keep an object in step with the state)."""

    async def ticked(self, now: datetime) -> None:
        """After a tick's decisions were recorded."""


class BaseExecutor:
    """An executor that does nothing; subclass and override what the service needs."""

    async def start(self, runtime: DeciderRuntime[Any]) -> None:
        return None

    async def stop(self) -> None:
        return None

    async def prepare(self, decision: ev.Event) -> bool:
        return True

    async def recorded(self, decision: ev.Event, cause: ev.Event | None) -> None:
        return None

    async def observed(self, event: ev.Event) -> None:
        return None

    async def ticked(self, now: datetime) -> None:
        return None


@dataclass(frozen=True)
class RuntimeSettings:
    tick_seconds: float = 2.0
    snapshot_every: int = 1000
    snapshot_interval: float = 60.0
    max_deliver: int = 8
    batch: int = 1024
    """Records fetched and handed over at once (one fetch, one round of acks). A decider that decides on
    batches decides on the last of them, so a larger batch is a fresher state to decide on: with 256, the
    scheduler of the 1,000-pod run decided its registrations on Nodes observed before they turned Ready, and
    initialized them a whole carry-out later (Registered -> Initialized p99 1.37 s; 0.93 s with 1,024)."""


_RETRY_DELAYS = (0.2, 0.5, 1.0, 2.0, 5.0, 10.0)
"""Between attempts at carrying out one input's decisions (under half a minute in all: the consumer's ack
wait)."""


class _SnapshotEnvelope(msgspec.Struct, frozen=True):
    handled: int
    prefolded: list[str]
    state: bytes


_RECENT_DECISIONS = 20_000
SNAPSHOT_SHARE = 0.02
"""At most this share of a service's time goes to encoding snapshots: a snapshot waits, after the last one,
fifty times what encoding that one took. A small state is still snapshotted every ``snapshot_every`` records;
a large one less often, so snapshots cost in step with the work, not with the state's size (the scheduler's
projection of a 10,000-pod cluster took 0.1-0.2 s to encode, every thousand records: 7 % of its CPU in the
scale run). A failover replays more records from the log instead, each far cheaper than an encode."""
LONG_DECISION_S = 0.05
TICK = "tick"
"""The kind of a tick's decisions (:meth:`DeciderRuntime._decided`); an input's kind is its type."""
"""CPU seconds from which a kind of decision is made off the event loop (``DeciderRuntime._decided``)."""


class DeciderRuntime(Generic[S]):
    def __init__(
        self,
        decider: Decider[S],
        executor: Executor,
        event_log: EventLog,
        settings: RuntimeSettings | None = None,
        *,
        claim_gauges: bool = False,
        long_kinds: set[Hashable] | None = None,
    ) -> None:
        self.decider = decider
        self.executor = executor
        self.event_log = event_log
        self.settings = settings or RuntimeSettings()
        self.state: S = decider.initial_state()
        self.handled = 0
        """Every input at or below this sequence has been folded and decided."""
        self.folded = 0
        """The highest input sequence folded (a redelivered input is decided again, not folded again)."""
        self.prefolded: set[str] = set()
        """Ids of own decisions folded when they were made, whose records the consumer has yet to deliver."""
        self.lock = asyncio.Lock()
        self.refused = 0
        """Records refused as impossible stories (dead-lettered)."""
        self._recent: OrderedDict[str, None] = OrderedDict()
        self._snapshot_handled = 0
        self._snapshot_at = time.monotonic()
        self._snapshot_cost = 0.0
        """Seconds the last snapshot took to encode."""
        self._snapshot_task: asyncio.Task[None] | None = None
        self.rebuilt = asyncio.Event()
        self.claim_gauges = claim_gauges
        """Publish the claims gauges (``tenon_nodeclaims``, pool cost) from this state: one service does, so
        that summing them over processes counts each claim once."""
        self._gauges_at = 0.0
        self._leading = False
        """A term has begun here: its consumer folds from then on, a standby's catch-up no more."""
        self._warmed = False
        self._broken: str | None = None
        self._long: set[Hashable] = long_kinds if long_kinds is not None else set()
        """Kinds of decision (input types, ``"tick"``) whose last one took long enough to be decided off the
        event loop."""
        self._behind: dict[Lane, asyncio.Task[None]] = {}
        """Lanes being carried out behind the deciding (:func:`carried_out_behind`), the last task of each."""
        self._behind_ids: dict[Lane, set[str]] = {}
        """The decisions of each lane behind: decided again meanwhile, they are not carried out again."""
        self._no_thread_deciding = asyncio.Event()
        self._no_thread_deciding.set()
        """Clear while a decision is made in a worker thread: the state is not folded into meanwhile."""

    @property
    def name(self) -> str:
        return self.decider.name

    # --- 1. rebuild -----------------------------------------------------------------------------------------

    async def rebuild(self) -> None:
        """The term's rebuild: the snapshot and the tail, or (on a runtime a standby kept warm) the tail."""
        self._leading = True
        async with self.lock:
            await self._rebuild()

    async def catch_up(self) -> bool:
        """A standby's step (while another replica leads): fold what the leader has handled since the last
        step, then let the decider warm what its first decision would otherwise build. False once a term has
        begun on this runtime: its consumer folds from then on, and folding here too would fold twice."""
        async with self.lock:
            if self._leading:
                return False
            folded = await self._rebuild()
            warm = getattr(self.decider, "warm", None)
            if warm is not None and (folded or not self._warmed):
                started = time.perf_counter()
                await asyncio.to_thread(warm, self.state)
                self._warmed = True
                log.debug(
                    "state warmed",
                    extra={"service": self.name, "ms": round((time.perf_counter() - started) * 1000)},
                )
        return True

    async def _rebuild(self) -> int:
        """Fold the snapshot (first time only) and the log after what is folded; the records folded. A
        rebuild that failed part-way leaves records folded beyond what ``handled`` says, which another pass
        would fold again: the runtime refuses to go on, and its owner starts a fresh one."""
        if self._broken is not None:
            raise RuntimeError(f"{self.name}: an earlier rebuild failed part-way ({self._broken})")
        try:
            return await self._fold_log()
        except BaseException as exc:
            self._broken = f"{type(exc).__name__}: {exc}"
            raise

    async def _fold_log(self) -> int:
        started = time.perf_counter()
        warm = self.rebuilt.is_set()
        source = "warm standby" if warm else await self._load_snapshot()
        floor = await self.event_log.consumer_ack_floor(self.name)
        bounds = await self.event_log.bounds()
        if self.handled and bounds.first_sequence > self.handled + 1:
            log.error(
                "the log no longer holds what followed the snapshot: state may miss events",
                extra={
                    "service": self.name,
                    "snapshot_covers": self.handled,
                    "log_starts": bounds.first_sequence,
                },
            )
        folded = own = 0
        self._held: dict[str, list[tuple[int, ev.Event]]] = {}
        if self.decider.inputs and bounds.last_sequence > self.handled:
            # one read in log order (the inputs' filters interleave), filtered here
            async for record in self.event_log.read(
                subjects.ALL_EVENTS, start_sequence=self.handled + 1, stop_sequence=bounds.last_sequence
            ):
                if not any(subjects.matches(f, record.subject) for f in self.decider.inputs):
                    continue
                folded_here, own_here = self._rebuild_record(record, floor)
                folded += folded_here
                own += own_here
        self.handled = max(self.handled, min(floor, bounds.last_sequence))
        self.folded = self.handled
        gc.freeze()  # the rebuilt state lives as long as the term: later collections need not walk it again
        self._snapshot_handled = self.handled
        self.rebuilt.set()
        log.log(
            logging.DEBUG if warm and not self._leading else logging.INFO,
            "state rebuilt",
            extra={
                "service": self.name,
                "from": source,
                "ack_floor": floor,
                "tail_events": folded,
                "own_beyond_floor": own,
                "ms": round((time.perf_counter() - started) * 1000),
            },
        )
        return folded

    def _rebuild_record(self, record: LogRecord, floor: int) -> tuple[int, int]:
        event = record.event
        if event is None or self._prefolded(event, record.sequence, floor):
            return 0, 0
        untrusted = registry.refusal(record.subject, event)
        if untrusted is not None:
            log.warning("untrusted event skipped at rebuild", extra={"service": self.name, "why": untrusted})
            return 0, 0
        if record.sequence <= floor:
            return (1, 0) if self._rebuild_fold(event, record.sequence) else (0, 0)
        if event.producer != self.name:
            # not handled yet: the consumer delivers it and it is decided then; a claim's step is kept aside
            # in case one of our own decisions on that claim follows (that decision was made after it)
            if isinstance(event, ev.NodeClaimEvent):
                self._held.setdefault(event.nodeclaim, []).append((record.sequence, event))
            return 0, 0
        # our own decision, made before the consumer's ack reached the broker: folded now, as the live service
        # folded it, after the steps of its claim that came before it
        folded = 0
        if isinstance(event, ev.NodeClaimEvent):
            for sequence, earlier in self._held.pop(event.nodeclaim, []):
                if self._rebuild_fold(earlier, sequence):
                    self.prefolded.add(earlier.id)
                    folded += 1
        if self._rebuild_fold(event, record.sequence):
            self.prefolded.add(event.id)
            folded += 1
        return folded, 1

    def _prefolded(self, event: ev.Event, sequence: int, floor: int) -> bool:
        """Whether ``event`` was folded already (an own decision beyond the floor at an earlier step);
        forgotten once the floor passes it, since its record will not be delivered here then."""
        if event.id not in self.prefolded:
            return False
        if sequence <= floor:
            self.prefolded.discard(event.id)
        return True

    def _rebuild_fold(self, event: ev.Event, sequence: int) -> bool:
        reason = self._evolve(event, sequence)
        if reason is not None:
            log.warning("impossible event skipped at rebuild", extra={"service": self.name, "why": reason})
            return False
        return True

    def _evolve(self, event: ev.Event, sequence: int) -> str | None:
        """Fold ``event`` into the state; why it was refused, if it was. Whatever ``evolve`` raises refuses
        the event, not the service: an input the decider cannot fold (a story its aggregate refuses, or an
        object no kube-apiserver would serve that a check missed) must not stop every input after it."""
        try:
            self.state = self.decider.evolve(self.state, event, sequence)
        except ImpossibleStory as exc:
            return str(exc)
        except Exception as exc:  # a hostile or malformed input that reached a fold: loud, then refused
            log.exception(
                "folding an event failed; refused",
                extra={"service": self.name, "sequence": sequence, "type": type(event).__name__},
            )
            return f"{type(event).__name__} could not be folded: {type(exc).__name__}: {exc}"
        return None

    async def _load_snapshot(self) -> str:
        stored = await self.event_log.snapshots().load(self.name)
        if stored is None:
            return "log"
        if stored.manifest.format != self.decider.state_format:
            log.warning(
                "snapshot of another format ignored; rebuilding from the log",
                extra={
                    "service": self.name,
                    "format": stored.manifest.format,
                    "wanted": self.decider.state_format,
                },
            )
            return "log"
        try:
            # millions of new objects: a collection pass every thousand of them would cost seconds
            with collector_paused():
                envelope = msgspec.msgpack.decode(stored.data, type=_SnapshotEnvelope)
                state = self.decider.decode(envelope.state)
        except (msgspec.DecodeError, msgspec.ValidationError, ValueError, TypeError) as exc:
            log.warning(
                "unreadable snapshot ignored; rebuilding from the log",
                extra={"service": self.name, "error": str(exc)},
            )
            return "log"
        self.state, self.handled, self.prefolded = state, envelope.handled, set(envelope.prefolded)
        return f"snapshot {stored.manifest.generation} (covers {envelope.handled})"

    # --- 2. follow ------------------------------------------------------------------------------------------

    async def handle(self, record: LogRecord) -> None:
        """One record (what a batch of one does); a refused record raises :class:`PermanentError`."""
        refused = await self.handle_batch([record])
        if refused:
            raise PermanentError(refused[record.sequence])

    async def handle_batch(self, records: list[LogRecord]) -> dict[int, str]:
        """Records in log order: fold each, decide, carry out; returns the ones refused (sequence -> reason),
        which the consumer dead-letters. A decider that ``decides_on_batches`` decides once per batch, on its
        last input, and at each input it ``decided_alone`` (see the module docstring)."""
        refused: dict[int, str] = {}
        handled: list[ev.Event] = []
        per_batch = decides_on_batches(self.decider)
        async with self.lock:
            undecided: ev.Event | None = None
            reached = self.handled
            for record in records:
                if record.sequence <= self.handled:
                    continue  # handled before this leader's rebuild, or in a batch redelivered
                reached = record.sequence
                event = self._fold_input(record, refused)
                if event is None:
                    if undecided is None:
                        self.handled = max(self.handled, record.sequence)
                    continue
                handled.append(event)
                alone = decided_alone(self.decider, event)
                if per_batch and not alone:
                    undecided = event  # decided with the rest of the batch
                    continue
                if alone:
                    await self._caught_up_behind()  # decided on the state as of itself, all of it
                await self._decide_and_carry_out(event)
                self.handled, undecided = record.sequence, None
            if undecided is not None:
                await self._decide_and_carry_out(undecided)
                self.handled = max(self.handled, reached)
        for event in handled:
            await self.executor.observed(event)
        self._maybe_snapshot()
        self._maybe_refresh_gauges()
        return refused

    def _fold_input(self, record: LogRecord, refused: dict[int, str]) -> ev.Event | None:
        """The record's event, folded; None (and the reason in ``refused``) when it cannot be trusted."""
        try:
            event = record.decode()
        except UndecodableEvent as exc:
            refused[record.sequence] = f"undecodable: {exc}"
            return None
        reason = registry.refusal(record.subject, event)
        if reason is None and event.id in self.prefolded:
            self.prefolded.discard(event.id)
        elif reason is None and record.sequence > self.folded:
            reason = self._evolve(event, record.sequence)
        if reason is not None:
            self.refused += 1
            log.warning(
                "event refused", extra={"service": self.name, "sequence": record.sequence, "why": reason}
            )
            refused[record.sequence] = f"permanent failure: {reason}"
            return None
        self.folded = max(self.folded, record.sequence)
        return event

    async def _decide_and_carry_out(self, event: ev.Event) -> None:
        """Decide on ``event`` and carry the decisions out, retrying in place: the consumer must not move past
        an input whose decisions failed (a later input decided first would break the log's order). After the
        last attempt the decisions are dropped, loudly: the decider decides them again (level-triggered), and
        the pod-watcher offers still-pending pods again."""
        started = time.perf_counter()
        decisions = await self._decided(type(event), lambda: list(self.decider.decide(self.state, event)))
        recording.decided(event, time.perf_counter() - started)
        await self._retried(lambda: self._carry_out(decisions, event), input=type(event).__name__)

    async def _retried(self, carry_out: Callable[[], Awaitable[None]], **dropped: str) -> None:
        """``carry_out()``, tried again in place after each of :data:`_RETRY_DELAYS`; after the last attempt
        the decisions are dropped, loudly (``dropped`` names what in the log line). A cancellation and an
        impossible story are raised at once."""
        for attempt, delay in enumerate((*_RETRY_DELAYS, None), start=1):
            try:
                await carry_out()
                return
            except (asyncio.CancelledError, ImpossibleStory):
                raise
            except Exception as exc:
                if delay is None:
                    log.error(
                        "decisions dropped after repeated failures",
                        extra={"service": self.name, **dropped, "error": str(exc)},
                    )
                    return
                log.warning(
                    "carrying out decisions failed, retrying",
                    extra={"service": self.name, "attempt": attempt, "retry_in_s": delay, "error": str(exc)},
                )
                await asyncio.sleep(delay)

    async def submit(self, decisions: Sequence[ev.Event], cause: ev.Event | None = None) -> None:
        """Record decisions that come from outside the log (or from the executor's own observations)."""
        async with self.lock:
            await self._carry_out(list(decisions), cause)

    # --- 3. tick --------------------------------------------------------------------------------------------

    async def tick(self, now: datetime | None = None) -> None:
        moment = now or datetime.now(UTC)
        async with self.lock:
            due = await self._tick_decisions(moment)
            decisions = [
                msgspec.structs.replace(d, basis=self.handled) if d.causation_id is None else d for d in due
            ]
            await self._carry_out(decisions, None)
        await self.executor.ticked(moment)
        self._maybe_refresh_gauges(force=True)

    async def _tick_decisions(self, moment: datetime) -> list[ev.Event]:
        """The tick's decisions, on the whole state (after every lane behind), except for a decider that
        ``ticks_by_lane``: decided at once, without what it decides for a lane still behind (decided again by
        the next tick, on that lane's whole story)."""

        def decide() -> list[ev.Event]:
            return list(self.decider.tick(self.state, moment))

        if self._behind and ticks_by_lane(self.decider):
            steps = keyed_steps(self.decider, await self._decided(TICK, decide))
            # a barrier may depend on any lane: then decided again on the whole state
            if all(key is not None for step in steps for key, _ in step):
                return [d for step in steps for key, lane in step if key not in self._behind for d in lane]
        await self._caught_up_behind()
        return await self._decided(TICK, decide)

    async def _tick_forever(self) -> None:
        while True:
            await asyncio.sleep(self.settings.tick_seconds)
            try:
                await self.tick()
            except Exception:  # a tick must not end the service; the next one decides again
                log.exception("tick failed", extra={"service": self.name})

    # --- carrying out ---------------------------------------------------------------------------------------

    async def _carry_out(self, decisions: list[ev.Event], cause: ev.Event | None) -> None:
        if not decisions:
            return
        started = time.perf_counter()
        for step in keyed_steps(self.decider, decisions):
            if step[0][0] is None:
                await self._caught_up_behind()  # a barrier: after everything before it
            here = []
            for key, lane in step:
                if key is not None and all(carried_out_behind(self.decider, d) for d in lane):
                    # a step decided again (level-triggered) while its lane is behind is already on its way:
                    # under a wave of joining Nodes every input decided a hundred such steps again
                    fresh = [d for d in lane if d.id not in self._behind_ids.get(key, ())]
                    if fresh:
                        self._carry_out_behind(key, fresh, cause)
                else:
                    here.append(self._carry_out_lane(lane, cause, after=self._behind.get(key)))
            if len(here) == 1:
                await here[0]
                continue
            # every lane runs to its end before a failure is raised: a retry must not race a running lane
            outcomes = await asyncio.gather(*here, return_exceptions=True)
            for outcome in outcomes:
                if isinstance(outcome, BaseException):
                    raise outcome
        metrics.DECISION_DURATION.labels(service=self.name).observe(time.perf_counter() - started)
        log.info(
            "decided",
            extra={
                "service": self.name,
                "input": type(cause).__name__ if cause else "tick",
                "decisions": [type(d).__name__ for d in decisions],
                "ms": round((time.perf_counter() - started) * 1000),
            },
        )

    async def _carry_out_lane(
        self, lane: list[ev.Event], cause: ev.Event | None, *, after: asyncio.Task[None] | None = None
    ) -> None:
        if after is not None:
            await asyncio.wait([after])  # the lane's decisions behind, first (that task raises nothing)
        for decision in lane:
            await self._carry_out_one(decision, cause)

    def _carry_out_behind(self, key: Lane, lane: list[ev.Event], cause: ev.Event | None) -> None:
        """Carry ``lane`` out in a task of its own, after the lane's earlier decisions still behind; retried
        in place as an input's decisions are, then dropped loudly (decided again, level-triggered)."""
        before = self._behind.get(key)

        async def carry_out() -> None:
            try:
                await self._retried(lambda: self._carry_out_lane(lane, cause, after=before), lane=str(key))
            except ImpossibleStory as exc:
                log.error(
                    "decisions dropped: an impossible story",
                    extra={"service": self.name, "lane": str(key), "error": str(exc)},
                )

        def done(finished: asyncio.Task[None]) -> None:
            if self._behind.get(key) is finished:
                del self._behind[key]
                self._behind_ids.pop(key, None)

        task = asyncio.create_task(carry_out(), name=f"{self.name}:behind:{key}")
        task.add_done_callback(done)
        self._behind[key] = task
        self._behind_ids.setdefault(key, set()).update(d.id for d in lane)

    async def _caught_up_behind(self) -> None:
        """Until no lane is carried out behind the deciding."""
        while self._behind:
            await asyncio.wait(list(self._behind.values()))

    async def _stop_behind(self) -> None:
        tasks = list(self._behind.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._behind.clear()
        self._behind_ids.clear()

    async def _carry_out_one(self, decision: ev.Event, cause: ev.Event | None) -> None:
        if decision.id in self._recent or self._held_by_its_claim(decision):
            return  # recorded already (the same situation decided again, here or by an earlier term)
        if not await self.executor.prepare(decision):
            return
        result = await self._record(decision)
        if result is None:
            return
        self._remember(decision.id)
        metrics.DECISIONS.labels(service=self.name, type=type(decision).__name__).inc()
        if not self._no_thread_deciding.is_set():
            await self._no_thread_deciding.wait()  # a lane behind: never fold under a deciding thread
        try:
            self.state = self.decider.evolve(self.state, decision, result.sequence)
        except ImpossibleStory:
            pass  # a duplicate of what the state already holds (the consumer folded its record first)
        claim = None
        if isinstance(decision, ev.NodeClaimEvent):
            claim = self.decider.claims(self.state).get(decision.nodeclaim)
        recording.recorded(decision, claim, cause)
        if result.sequence > self.folded:  # the consumer has yet to deliver it
            self.prefolded.add(decision.id)
        await self.executor.recorded(decision, cause)

    def _held_by_its_claim(self, decision: ev.Event) -> bool:
        """A claim event already in its claim's story: an input an earlier term decided and recorded the
        answer to, but did not ack, is decided again by the next term, whose rebuild folded that answer
        (its side effects are not carried out twice, nor is the claim's refusal logged as an error)."""
        if not isinstance(decision, ev.NodeClaimEvent):
            return False
        claim = self.decider.claims(self.state).get(decision.nodeclaim)
        return claim is not None and claim.holds(decision)

    async def _record(self, decision: ev.Event) -> PublishResult | None:
        if not isinstance(decision, ev.NodeClaimEvent):
            return await self.event_log.publish(registry.subject_of(decision), decision)
        claim = self.decider.claims(self.state).get(decision.nodeclaim)
        problem = claim.refusal(decision) if claim is not None else None
        if problem is not None:
            log.error(
                "decision refused by its own claim: not recorded",
                extra={"nodeclaim": decision.nodeclaim, "event": type(decision).__name__, "why": problem},
            )
            return None
        expected = claim.last_sequence if claim is not None else 0
        try:
            return await append_claim_event(self.event_log, decision, expected=expected)
        except ConcurrencyConflict as conflict:
            log.info(
                "decision deferred: the claim moved on",
                extra={
                    "nodeclaim": decision.nodeclaim,
                    "event": type(decision).__name__,
                    "why": str(conflict),
                },
            )
            return None

    def _remember(self, event_id: str) -> None:
        self._recent[event_id] = None
        if len(self._recent) > _RECENT_DECISIONS:
            self._recent.popitem(last=False)

    # --- 4. snapshots ---------------------------------------------------------------------------------------

    async def _decided(self, kind: Hashable, decide: Callable[[], list[ev.Event]]) -> list[ev.Event]:
        """``decide()`` on the event loop while decisions of its kind are quick; in a worker thread once one
        took :data:`LONG_DECISION_S` of CPU, until one takes a fifth of that again, except ticks, which stay
        in the thread. A thread costs every decision a wait for the GIL while the loop is busy (a convoy of
        small ones adds up to seconds); a long decision on the loop stops the lease renewal, the broker's
        heartbeats and the health heartbeat (the scale run lost the scheduler's lease again and again at
        10,000 pods, each loss a rebuild). A tick's cost swings from microseconds to seconds (disruption's
        idle tick, then a consolidation round), so a quick one says nothing of the next: back on the loop
        after quick ones, the first round of the scale run's scale-down held it past disruption's lease,
        twice."""
        if kind in self._long:
            self._no_thread_deciding.clear()
            try:
                decisions, cpu = await asyncio.to_thread(_timed, decide)
            finally:
                self._no_thread_deciding.set()
            if cpu < LONG_DECISION_S / 5 and kind != TICK:
                self._long.discard(kind)
        else:
            decisions, cpu = _timed(decide)
            if cpu >= LONG_DECISION_S:
                self._long.add(kind)
        return decisions

    def _maybe_refresh_gauges(self, force: bool = False) -> None:
        """At most once a second while inputs flow (a pass over every claim), and at every tick."""
        if not self.claim_gauges or (not force and time.monotonic() - self._gauges_at < 1.0):
            return
        self._gauges_at = time.monotonic()
        recording.claims_gauges(self.decider.claims(self.state).values())

    def _maybe_snapshot(self, force: bool = False) -> None:
        if self._snapshot_task is not None and not self._snapshot_task.done():
            return
        fresh = self.handled - self._snapshot_handled
        due = fresh >= self.settings.snapshot_every or (
            fresh > 0 and time.monotonic() - self._snapshot_at >= self.settings.snapshot_interval
        )
        if not (due or (force and fresh > 0)):
            return
        since = time.monotonic() - self._snapshot_at
        if not force and since < self._snapshot_cost / SNAPSHOT_SHARE:
            return
        started = time.perf_counter()
        data = msgspec.msgpack.encode(
            _SnapshotEnvelope(self.handled, sorted(self.prefolded), self.decider.encode(self.state))
        )
        self._snapshot_cost = time.perf_counter() - started
        self._snapshot_handled, self._snapshot_at = self.handled, time.monotonic()
        self._snapshot_task = asyncio.create_task(self._save_snapshot(data, self.handled))

    async def _save_snapshot(self, data: bytes, covers: int) -> None:
        try:
            manifest = await self.event_log.snapshots().save(
                self.name, data, format=self.decider.state_format, covers=covers
            )
            log.info("snapshot saved", extra={"service": self.name, "covers": covers, "bytes": manifest.size})
        except Exception:  # the next snapshot tries again; the log still holds everything
            log.exception("snapshot failed", extra={"service": self.name})

    async def _snapshot_forever(self) -> None:
        while True:
            await asyncio.sleep(max(1.0, self.settings.snapshot_interval / 4))
            self._maybe_snapshot()

    # --- the whole term -------------------------------------------------------------------------------------

    async def run(self, stopping: asyncio.Event) -> None:
        """One leadership term: rebuild, start, follow and tick until ``stopping`` is set."""
        await self.rebuild()
        await self.executor.start(self)
        runner = None
        tasks = [asyncio.create_task(self._snapshot_forever(), name=f"{self.name}:snapshots")]
        if self.settings.tick_seconds > 0:
            tasks.append(asyncio.create_task(self._tick_forever(), name=f"{self.name}:tick"))
        try:
            if self.decider.inputs:
                runner = self.event_log.ordered_consumer(
                    ConsumerSettings(
                        self.name,
                        self.decider.inputs,
                        max_concurrency=1,
                        max_deliver=self.settings.max_deliver,
                        backoff=(0.2, 0.5, 1.0, 2.0, 5.0),
                        fetch_batch=self.settings.batch,
                        linger=lambda: batch_linger(self.decider, self.state),
                    ),
                    self.handle_batch,
                )
                await runner.start()
            await stopping.wait()
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            if runner is not None:
                await runner.stop()
            await self._stop_behind()
            await self.executor.stop()
            self._maybe_snapshot(force=True)
            if self._snapshot_task is not None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(self._snapshot_task, timeout=10)


def _timed(decide: Callable[[], list[ev.Event]]) -> tuple[list[ev.Event], float]:
    """The decisions and the CPU seconds the deciding thread spent on them (not time spent waiting for the
    GIL)."""
    started = time.thread_time()
    decisions = decide()
    return decisions, time.thread_time() - started
