"""One readable line per event, for ``tenon tap`` and ``tenon replay``."""

from __future__ import annotations

from typing import Any

import msgspec

from proto import events as ev
from tenon.runtime.eventlog.records import LogRecord


def summary(event: ev.Event) -> str:
    """What the event says, in a few words."""
    match event:
        case ev.PendingBatch():
            return f"batch {event.batch_id}: {len(event.pods)} pending pod(s), closed by {event.window_closed_by}"
        case ev.NodeObserved():
            return f"node {event.node.get('metadata', {}).get('name')} {event.change}"
        case ev.BoundPodObserved():
            meta = event.pod.get("metadata", {})
            node = event.pod.get("spec", {}).get("nodeName")
            return f"pod {meta.get('namespace')}/{meta.get('name')} on {node} {event.change}"
        case ev.NodePoolsSnapshot():
            return "nodepools: " + ", ".join(n.get("metadata", {}).get("name", "?") for n in event.nodepools)
        case ev.NodeClassesSnapshot():
            return "nodeclasses: " + ", ".join(
                n.get("metadata", {}).get("name", "?") for n in event.nodeclasses
            )
        case ev.DaemonSetsSnapshot():
            listed = ", ".join(
                f"{d.get('metadata', {}).get('namespace')}/{d.get('metadata', {}).get('name')}"
                for d in event.daemonsets
            )
            return "daemonsets: " + (listed or "none")
        case ev.BatchPlanned():
            parts = [f"{len(event.nodeclaims)} new claim(s)"]
            if event.existing:
                parts.append(f"{len(event.existing)} pod(s) on existing room")
            if event.unschedulable:
                parts.append(f"{len(event.unschedulable)} unschedulable")
            return f"batch {event.batch_id}: " + ", ".join(parts) + f", ${event.total_price_per_hour:.4f}/h"
        case ev.CatalogSnapshot():
            return f"catalog {event.node_class} ({event.provider}): {len(event.instance_types)} type(s)" + (
                f", {len(event.skipped)} skipped" if event.skipped else ""
            )
        case ev.NodeClaimPlanned():
            c = event.choice
            return (
                f"claim {event.nodeclaim} planned: {c.instance_type} {c.capacity_type} {c.zone or 'any zone'} "
                f"${c.price_per_hour:.4f}/h for {len(event.pods)} pod(s) [nodepool {event.nodepool}]"
            )
        case ev.NodeClaimLaunched():
            return f"claim {event.nodeclaim} launched: {event.instance_type} as {event.provider_id}"
        case ev.NodeClaimLaunchFailed():
            return f"claim {event.nodeclaim} launch of {event.instance_type} failed: {event.reason}"
        case ev.NodeClaimRegistered():
            return f"claim {event.nodeclaim} registered as node {event.node}"
        case ev.NodeClaimInitialized():
            return f"claim {event.nodeclaim} initialized (node {event.node} ready)"
        case ev.NodeClaimAbandoned():
            return f"claim {event.nodeclaim} abandoned: {event.reason}"
        case ev.DisruptionRequested():
            return f"claim {event.nodeclaim} disruption requested ({event.method}): {event.reason}"
        case ev.NodeClaimDrained():
            return f"claim {event.nodeclaim} drained: {len(event.evicted)} pod(s) evicted"
        case ev.NodeClaimTerminated():
            return f"claim {event.nodeclaim} terminated: {event.reason}"
        case ev.InterruptionNotice():
            return f"{event.kind} for {event.provider_id}"
        case ev.DisruptionDecision():
            names = ", ".join(c.nodeclaim for c in event.candidates) or "none"
            return f"{event.method}: {names} ({event.reason}; budget {event.budget})"
        case ev.DeadLetter():
            return f"dead letter from {event.consumer} (#{event.original_sequence} {event.original_subject}): {event.error}"
    return type(event).__name__


def line(record: LogRecord) -> str:
    stamp = record.recorded_at.strftime("%H:%M:%S.%f")[:-3]
    try:
        event = record.decode()
    except Exception as exc:
        return f"#{record.sequence:<6} {stamp}  {'?':<14} {'UNDECODABLE':<22} {record.subject}  {exc}"
    return f"#{record.sequence:<6} {stamp}  {event.producer:<14} {type(event).__name__:<22} {summary(event)}"


def as_json(record: LogRecord) -> dict[str, Any]:
    body: dict[str, Any] = {
        "sequence": record.sequence,
        "subject": record.subject,
        "recordedAt": record.recorded_at.isoformat(),
        "headers": dict(record.headers),
    }
    try:
        body["event"] = msgspec.to_builtins(record.decode())
    except Exception as exc:
        body["error"] = str(exc)
        body["data"] = record.data.decode("utf-8", errors="replace")
    return body


def mentions_nodeclaim(event: ev.Event, name: str) -> bool:
    """Whether ``event`` is about the NodeClaim ``name`` (its own subject, or named as a candidate)."""
    if getattr(event, "nodeclaim", None) == name or event.correlation_id == name:
        return True
    if isinstance(event, ev.DisruptionDecision):
        return any(c.nodeclaim == name for c in event.candidates) or any(
            b.nodeclaim == name for b in event.blocked
        )
    return False
