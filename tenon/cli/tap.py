"""``tenon tap``: follow the event log, the audit tool.

It reads through an ordered consumer (ephemeral, in memory on the server, deleted when tap exits), so auditing
never leaves durable state behind and never competes with the services' consumers. Filters combine: a subject
pattern is applied by the server, event types and NodeClaims by tap. An event is about a NodeClaim when it is
a step of the claim's life, names the claim (a batch answer that planned it or placed pods on it, a disruption
decision), or carries the claim's name as its correlation id.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

from proto import subjects
from proto.events import EVENT_TYPES_BY_NAME
from tenon.cli import render
from tenon.cli.natsopts import add_connection_arguments, parse_time, settings_from_args
from tenon.domain.eventviews import concerns_nodeclaim
from tenon.runtime.eventlog.jetstream import JetStreamEventLog
from tenon.runtime.eventlog.records import EventLogError, LogRecord


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "tap",
        help="follow the event log (audit): live, or from a sequence or time",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    where = parser.add_argument_group("where to start (default: only new events)")
    start = where.add_mutually_exclusive_group()
    start.add_argument("--from-seq", type=int, metavar="N", help="start at stream sequence N")
    start.add_argument(
        "--since", type=parse_time, metavar="TIME", help="start at a time: RFC 3339 or an age like 15m, 2h"
    )
    start.add_argument("--all", action="store_true", help="start at the beginning of the log")
    where.add_argument("--to-seq", type=int, metavar="N", help="stop after stream sequence N")
    where.add_argument(
        "--no-follow", action="store_true", help="stop once caught up instead of waiting for new events"
    )
    what = parser.add_argument_group("what to show")
    what.add_argument(
        "--subject",
        default=subjects.ALL_EVENTS,
        metavar="PATTERN",
        help="NATS subject pattern, e.g. 'tenon.nodeclaim.*' (default: %(default)s)",
    )
    what.add_argument(
        "--type",
        dest="types",
        action="append",
        metavar="TYPE",
        choices=sorted(EVENT_TYPES_BY_NAME),
        help="only events of this type (repeatable), e.g. NodeClaimPlanned",
    )
    what.add_argument("--nodeclaim", metavar="NAME", help="only events about this NodeClaim")
    what.add_argument("--deadletters", action="store_true", help="read the dead-letter stream instead")
    what.add_argument("--json", action="store_true", help="one JSON object per line instead of text")
    add_connection_arguments(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        return asyncio.run(tap(args))
    except EventLogError as exc:
        print(f"tenon tap: {exc}", file=sys.stderr)
        return 1


def wanted(record: LogRecord, args: argparse.Namespace) -> bool:
    if not args.types and not args.nodeclaim:
        return True
    event = record.event
    if event is None:
        return False
    if args.types and type(event).__name__ not in args.types:
        return False
    return not (args.nodeclaim and not concerns_nodeclaim(event, args.nodeclaim))


async def tap(args: argparse.Namespace) -> int:
    settings = settings_from_args(args, name="tenon-tap", fail_fast=True)
    event_log = await JetStreamEventLog.connect(settings, provision=False)
    stream = subjects.DEADLETTER_STREAM if args.deadletters else subjects.EVENTS_STREAM
    subject = (
        subjects.DEADLETTERS if args.deadletters and args.subject == subjects.ALL_EVENTS else args.subject
    )
    try:
        start_sequence = args.from_seq
        if start_sequence is None and not args.since and not args.all:
            if args.no_follow:
                start_sequence = None  # caught up at once means the whole log, like --all
            else:
                start_sequence = await event_log.last_sequence(stream) + 1
        if not args.no_follow:
            where = (
                f"#{start_sequence}"
                if start_sequence
                else (f"{args.since:%Y-%m-%dT%H:%M:%SZ}" if args.since else "the start")
            )
            print(f"tenon tap: following {stream} from {where}; Ctrl-C stops", file=sys.stderr, flush=True)
        async for record in event_log.read(
            subject,
            start_sequence=start_sequence,
            start_time=args.since,
            stop_sequence=args.to_seq,
            follow=not args.no_follow,
            stream=stream,
        ):
            if not wanted(record, args):
                continue
            text = json.dumps(render.as_json(record), sort_keys=True) if args.json else render.line(record)
            print(text, flush=True)
    except KeyboardInterrupt:
        pass
    except Exception as exc:
        if isinstance(exc, EventLogError):
            raise
        raise EventLogError(f"reading {stream}: {exc}") from None
    finally:
        await event_log.close()
    return 0
