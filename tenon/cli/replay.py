"""``tenon replay``: run a service's decision function over a recorded range of the log, offline.

Reads the range from the broker (by sequence or time) or from a file written by ``tenon tap --json``, feeds
it to the named service's pure decider, and prints the decisions it makes. With ``--diff`` it compares them
with the decisions recorded in the log and exits 1 if any differ, so it can gate a change to the scheduler:
"would this build have decided what production decided?". Nothing is written anywhere.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import msgspec

from proto import subjects
from tenon.cli import render
from tenon.cli.natsopts import add_connection_arguments, parse_time, settings_from_args
from tenon.runtime import replay as replaying
from tenon.runtime.eventlog.jetstream import JetStreamEventLog
from tenon.runtime.eventlog.records import EventLogError, LogRecord
from tenon.runtime.settings import SettingsError, load
from tenon.services import SERVICES, definition


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "replay",
        help="feed a recorded range of the log to a service's decision function; --diff against the log",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "service",
        metavar="SERVICE",
        help="whose decisions to replay: "
        + ", ".join(SERVICES)
        + " (or module:attribute of a decider to try)",
    )
    source = parser.add_argument_group("range (default: the whole log)")
    source.add_argument("--from-seq", type=int, metavar="N", help="first stream sequence to read")
    source.add_argument("--to-seq", type=int, metavar="N", help="last stream sequence to read")
    source.add_argument(
        "--since", type=parse_time, metavar="TIME", help="first time: RFC 3339 or an age (2h)"
    )
    source.add_argument("--until", type=parse_time, metavar="TIME", help="last time: RFC 3339 or an age")
    source.add_argument(
        "--input",
        type=Path,
        metavar="FILE",
        help="read a recording made by 'tenon tap --json' instead of NATS",
    )
    parser.add_argument(
        "--diff", action="store_true", help="compare with the recorded decisions; exit 1 if any differ"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object per compared input")
    add_connection_arguments(parser)
    parser.set_defaults(func=run)


def load_decider(service: str) -> Any:
    """The service's decider, with the settings its decisions depend on read from the environment; or a
    decider given as ``module:attribute`` (an instance, or a class or function that makes one)."""
    if service not in SERVICES and ":" in service:
        module_name, attribute = service.split(":", 1)
        try:
            target = getattr(importlib.import_module(module_name), attribute)
        except (ImportError, AttributeError) as exc:
            raise SettingsError(f"cannot load decider {service}: {exc}") from None
        return target() if isinstance(target, type) or not hasattr(target, "decide") else target
    if service not in SERVICES:
        raise SettingsError(
            f"unknown service {service!r} (known: {', '.join(SERVICES)}; or module:attribute)"
        )
    found = definition(service)
    if found.decider is None:
        raise SettingsError(f"{service} takes no decisions from the log: there is nothing to replay")
    return found.decider(load(found.settings, [], prog=f"tenon replay {service}"))


def run(args: argparse.Namespace) -> int:
    try:
        decider = load_decider(args.service)
    except SettingsError as exc:
        print(f"tenon replay: {exc}", file=sys.stderr)
        return 2
    try:
        records = read_file(args.input) if args.input else asyncio.run(read_log(args))
    except EventLogError as exc:
        print(f"tenon replay: {exc}", file=sys.stderr)
        return 1
    except (OSError, ValueError) as exc:
        print(f"tenon replay: cannot read {args.input}: {exc}", file=sys.stderr)
        return 2
    records = [r for r in records if in_range(r, args)]
    report = replaying.replay(decider, records)
    print_report(report, args)
    return 1 if args.diff and report.differing else 0


def in_range(record: LogRecord, args: argparse.Namespace) -> bool:
    if args.from_seq is not None and record.sequence < args.from_seq:
        return False
    if args.to_seq is not None and record.sequence > args.to_seq:
        return False
    if args.since is not None and record.recorded_at < args.since:
        return False
    return not (args.until is not None and record.recorded_at > args.until)


async def read_log(args: argparse.Namespace) -> list[LogRecord]:
    settings = settings_from_args(args, name="tenon-replay", fail_fast=True)
    event_log = await JetStreamEventLog.connect(settings, provision=False)
    try:
        return [
            record
            async for record in event_log.read(
                subjects.ALL_EVENTS,
                start_sequence=args.from_seq,
                start_time=args.since,
                stop_sequence=args.to_seq,
            )
        ]
    finally:
        await event_log.close()


def read_file(path: Path) -> list[LogRecord]:
    """Records from ``tenon tap --json`` output (one object per line)."""
    records = []
    for number, text in enumerate(path.read_text().splitlines(), start=1):
        if not text.strip():
            continue
        try:
            body = json.loads(text)
            data = msgspec.json.encode(body["event"]) if "event" in body else body["data"].encode()
            records.append(
                LogRecord(
                    sequence=int(body["sequence"]),
                    subject=body["subject"],
                    data=data,
                    headers=body.get("headers", {}),
                    recorded_at=datetime.fromisoformat(body["recordedAt"]),
                )
            )
        except (KeyError, ValueError, TypeError) as exc:
            raise ValueError(f"line {number}: not a 'tenon tap --json' record ({exc})") from None
    return records


def print_report(report: replaying.ReplayReport, args: argparse.Namespace) -> None:
    for comparison in report.comparisons:
        if args.json:
            print(
                json.dumps(
                    {
                        "inputSequence": comparison.input_sequence,
                        "inputType": comparison.input_type,
                        "decisions": [msgspec.to_builtins(e) for e in comparison.replayed],
                        "same": comparison.same if args.diff else None,
                        "differences": comparison.differences() if args.diff else [],
                    },
                    sort_keys=True,
                )
            )
            continue
        mark = ("=" if comparison.same else "≠") if args.diff else "→"
        decided = len(comparison.replayed)
        print(f"{mark} #{comparison.input_sequence} {comparison.input_type}: {decided} decision(s)")
        for event in comparison.replayed:
            print(f"    {type(event).__name__}: {render.summary(event)}")
        if args.diff and not comparison.same:
            for difference in comparison.differences():
                print(f"    ! {difference}")
    if not args.json:
        tail = f", {len(report.differing)} differ from the log" if args.diff else ""
        undecodable = f", {len(report.undecodable)} undecodable skipped" if report.undecodable else ""
        if report.external:
            undecodable += f", {report.external} external decision(s) not replayable"
        if report.ticks_outside:
            undecodable += f", {report.ticks_outside} tick(s) decided on state before the range"
        if report.dropped:
            undecodable += f", {report.dropped} decided and dropped by the executor (the log says so)"
        decided = len(report.comparisons)
        print(f"{report.records_read} record(s) read, {decided} input(s) decided{tail}{undecodable}")
