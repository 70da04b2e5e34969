"""``tenon explain NODECLAIM`` / ``tenon explain --pod NS/NAME``: why, from the event log alone.

Why a NodeClaim exists (the batch and pods it answers, every instance type considered with its price and why
it lost), where it is in its life, and why it was or was not disrupted; for a pod, what each batch that held
it led to and where it ended. The story is put together by :mod:`tenon.domain.explain` (pure); the command
reads only the subjects it needs, through ordered consumers that leave nothing behind on the server (like
``tenon tap``), and hands the decoded events over.

What it reads, and why it stays cheap on a long log:

* a claim: its own history ``tenon.nodeclaim.<claim>.*`` first. ``NodeClaimPlanned`` carries the decision
  time of the event it answers, so ``tenon.pending`` and ``tenon.scheduling.batch`` are read from a few
  minutes before that (clock skew between hosts) rather than from the start of the log, the PendingBatch no
  further than the plan itself, and ``tenon.disruption.decision`` from the plan on (a decision cannot precede
  its claim). The time bound is a shortcut only: when it misses the batch or its answer, the subject is read
  again whole;
* a pod: its own subject ``tenon.cluster.pod.<ns>.<pod>``, the batches (``--since`` bounds the search), the
  answers to them, then the subjects of the claims those answers planned, and the disruption decisions.

Exit codes: 0 explained, 1 broker error (one line on stderr), 2 bad usage, 3 not in the log.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
from collections.abc import Iterable
from contextlib import aclosing
from datetime import datetime, timedelta
from typing import Any

from proto import events as ev
from proto import subjects
from proto.codec import UndecodableEvent
from tenon.cli.natsopts import add_connection_arguments, parse_time, settings_from_args
from tenon.domain.eventviews import pods_of
from tenon.domain.explain import (
    LoggedEvent,
    NodeClaimExplanation,
    PodExplanation,
    explain_nodeclaim,
    explain_pod,
    parse_pod_key,
    replan_batch_id,
    replanned_claim,
)
from tenon.runtime.eventlog.jetstream import JetStreamEventLog
from tenon.runtime.eventlog.records import EventLogError, LogRecord

EXIT_NOT_FOUND = 3
CLOCK_SKEW = timedelta(minutes=5)
"""How far before a plan's decision time its batch may have been stored (hosts' clocks differ)."""


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "explain",
        help="why a NodeClaim exists, where it is in its life, why it was (not) disrupted; or a pod's story",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("nodeclaim", nargs="?", metavar="NODECLAIM", help="the NodeClaim to explain")
    what.add_argument("--pod", metavar="NS/NAME", help="explain a pod instead: the batches that held it")
    parser.add_argument("-o", "--output", choices=("text", "json"), default="text", help="output format")
    parser.add_argument(
        "--since",
        type=parse_time,
        metavar="TIME",
        help="with --pod: only look at batches from this time on (RFC 3339 or an age like 2h; default: all)",
    )
    add_connection_arguments(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # the client logs every failed connect attempt; the one-line error below says it all
    client_log = logging.getLogger("tenon.eventlog.jetstream")
    level = client_log.level
    client_log.setLevel(logging.ERROR)
    try:
        return _run(args)
    finally:
        client_log.setLevel(level)  # as it was: a caller in the same process (a test) keeps its logs


def _run(args: argparse.Namespace) -> int:
    if args.pod is not None:
        try:
            parse_pod_key(args.pod)
        except ValueError as exc:
            print(f"tenon explain: {exc}", file=sys.stderr)
            return 2
    try:
        explanation = asyncio.run(explain(args))
    except EventLogError as exc:
        print(f"tenon explain: {exc}", file=sys.stderr)
        return 1
    if args.output == "json":
        print(json.dumps(explanation.to_json(), indent=2, sort_keys=True))
    else:
        print(explanation.text())
    return 0 if explanation.found else EXIT_NOT_FOUND


async def explain(args: argparse.Namespace) -> NodeClaimExplanation | PodExplanation:
    settings = settings_from_args(args, name="tenon-explain", fail_fast=True)
    event_log = await JetStreamEventLog.connect(settings, provision=False)
    try:
        await (
            event_log.last_sequence()
        )  # a broker no tenon service has provisioned is an error, not "not found"
        if args.pod is not None:
            return await explain_pod_from_log(event_log, args.pod, since=args.since)
        return await explain_nodeclaim_from_log(event_log, args.nodeclaim)
    except EventLogError:
        raise
    except Exception as exc:  # the client's assorted timeouts and protocol errors: one line, not a traceback
        raise EventLogError(f"reading {subjects.EVENTS_STREAM}: {str(exc) or type(exc).__name__}") from None
    finally:
        await event_log.close()


def logged_events(records: Iterable[LogRecord]) -> tuple[list[LoggedEvent], int]:
    """The records as the explanation takes them (log order kept), and how many were read in all: a record
    that does not decode is left out (``tenon tap`` shows it) but counted."""
    out: list[LoggedEvent] = []
    count = 0
    for record in records:
        count += 1
        try:
            out.append(LoggedEvent(record.sequence, record.recorded_at, record.decode()))
        except UndecodableEvent:
            continue
    return out, count


class _Reader:
    """Reads subjects into one pile of records (each sequence once), counting what it read."""

    def __init__(self, event_log: JetStreamEventLog) -> None:
        self.event_log = event_log
        self.records: dict[int, LogRecord] = {}

    async def read(
        self,
        subject: str,
        *,
        start_sequence: int | None = None,
        start_time: datetime | None = None,
        stop_sequence: int | None = None,
    ) -> list[LogRecord]:
        read: list[LogRecord] = []
        # every subject read here is exact, so the last message on it is known: stopping there saves read()'s
        # one-second wait for more, and an empty subject is not read at all
        last = await self.event_log.last_subject_sequence(subject)
        if last == 0 or (start_sequence is not None and start_sequence > last):
            return read
        stop_sequence = last if stop_sequence is None else min(stop_sequence, last)
        # read() is an async generator: closing it on the way out deletes the ordered consumer at once
        async with aclosing(
            self.event_log.read(  # type: ignore[type-var]
                subject, start_sequence=start_sequence, start_time=start_time, stop_sequence=stop_sequence
            )
        ) as records:
            async for record in records:
                read.append(record)
                self.records.setdefault(record.sequence, record)
        return read

    def logged(self) -> tuple[list[LoggedEvent], int]:
        return logged_events(self.records[s] for s in sorted(self.records))


def _first_planned(records: list[LogRecord]) -> tuple[int, ev.NodeClaimPlanned] | None:
    for record in records:
        event = record.event
        if isinstance(event, ev.NodeClaimPlanned):
            return record.sequence, event
    return None


def _answers_batch(record: LogRecord, planned: ev.NodeClaimPlanned) -> bool:
    event = record.event
    return isinstance(event, ev.PendingBatch) and (
        event.id == planned.causation_id or event.batch_id == planned.batch_id
    )


def _answers_claim(record: LogRecord, claim: str) -> bool:
    event = record.event
    return isinstance(event, ev.BatchPlanned) and claim in event.nodeclaims


async def _read_claim_context(reader: _Reader, found: tuple[int, ev.NodeClaimPlanned] | None) -> None:
    """The batch, its answer and the disruption decisions around a plan (the whole subjects without one).

    The time bound is only a shortcut: when it misses (clocks further apart than CLOCK_SKEW, a scheduler
    that answered late), the subject is read again without it, so the answer never depends on the clocks.
    """
    if found is None:
        await reader.read(subjects.PENDING)
        await reader.read(subjects.BATCH_DECISIONS)
        await reader.read(subjects.DISRUPTION_DECISIONS)
        return
    sequence, planned = found
    since = planned.decided_at - CLOCK_SKEW
    if replanned_claim(planned.batch_id) is None:  # a re-plan answers an abandoned claim, not a batch
        batches = await reader.read(subjects.PENDING, start_time=since, stop_sequence=sequence)
        if not any(_answers_batch(r, planned) for r in batches):
            await reader.read(subjects.PENDING, stop_sequence=sequence)
    answers = await reader.read(subjects.BATCH_DECISIONS, start_time=since)
    if not any(_answers_claim(r, planned.nodeclaim) for r in answers):
        await reader.read(subjects.BATCH_DECISIONS)
    await reader.read(subjects.DISRUPTION_DECISIONS, start_sequence=sequence)


async def explain_nodeclaim_from_log(event_log: JetStreamEventLog, name: str) -> NodeClaimExplanation:
    reader = _Reader(event_log)
    own = await reader.read(subjects.nodeclaim(name))
    await _read_claim_context(reader, _first_planned(own))
    records, searched = reader.logged()
    return explain_nodeclaim(name, records, searched)


async def explain_pod_from_log(
    event_log: JetStreamEventLog, pod: str, *, since: datetime | None = None
) -> PodExplanation:
    """The pod's subject, the batches that held it (from ``since``), their answers, the claims planned for it
    (and for the re-plans of those claims), and the disruption decisions from the first of them on."""
    namespace, name = parse_pod_key(pod)
    reader = _Reader(event_log)
    await reader.read(subjects.bound_pod(namespace, name))
    holding = _batches_holding(await reader.read(subjects.PENDING, start_time=since), pod)
    if holding or since is not None:
        answers = await _read_answers(reader, holding, since)
        planned = await _read_claims_for_pod(reader, answers, pod, set(holding))
        if planned:
            await reader.read(subjects.DISRUPTION_DECISIONS, start_sequence=min(planned))
    records, searched = reader.logged()
    return explain_pod(pod, records, searched)


def _batches_holding(batches: list[LogRecord], pod: str) -> dict[str, datetime]:
    """Batch id -> decision time, for the PendingBatches that held ``pod``."""
    holding: dict[str, datetime] = {}
    for record in batches:
        event = record.event
        if isinstance(event, ev.PendingBatch) and pod in pods_of(event):
            holding[event.batch_id] = event.decided_at
    return holding


async def _read_answers(
    reader: _Reader, holding: dict[str, datetime], since: datetime | None
) -> list[ev.BatchPlanned]:
    """The scheduler's answers from a little before the first batch that held the pod (or from ``since``);
    all of them when that time bound missed the answer to one of those batches."""
    start = (min(holding.values()) - CLOCK_SKEW) if holding else since
    answers = _batch_answers(await reader.read(subjects.BATCH_DECISIONS, start_time=start))
    if start is not None and not set(holding) <= {a.batch_id for a in answers}:
        answers = _batch_answers(await reader.read(subjects.BATCH_DECISIONS))
    return answers


def _batch_answers(records: list[LogRecord]) -> list[ev.BatchPlanned]:
    return [event for r in records if isinstance(event := r.event, ev.BatchPlanned)]


async def _read_claims_for_pod(
    reader: _Reader, answers: list[ev.BatchPlanned], pod: str, wanted: set[str]
) -> list[int]:
    """Read the claims the answers to the ``wanted`` batches planned; the sequences of those planned for
    ``pod``. A claim planned for it brings in its re-plan's batch (``replan-<claim>``), and an answer that
    places the pod itself (on existing room, or unschedulable) is wanted too, until nothing new turns up."""
    claims_read: set[str] = set()
    planned: list[int] = []
    progress = True
    while progress:
        progress = False
        for claim in _new_claims(answers, wanted, claims_read):
            claims_read.add(claim)
            found = _first_planned(await reader.read(subjects.nodeclaim(claim)))
            if found and pod in found[1].pods:
                planned.append(found[0])
                wanted.add(replan_batch_id(claim))
                progress = True
        naming = {a.batch_id for a in answers if pod in pods_of(a)} - wanted
        if naming:
            wanted |= naming
            progress = True
    return planned


def _new_claims(answers: list[ev.BatchPlanned], wanted: set[str], read: set[str]) -> list[str]:
    found = [c for a in answers if a.batch_id in wanted for c in a.nodeclaims if c not in read]
    return list(dict.fromkeys(found))
