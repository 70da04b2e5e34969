"""Kubernetes Events: the explanation of a decision where ``kubectl describe`` shows it."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

from tenon.runtime.kube.resources import EVENTS, Kube, KubeApiError

log = logging.getLogger("tenon.kube.events")


async def post_event(
    kube: Kube,
    involved: dict[str, Any],
    *,
    reason: str,
    message: str,
    event_type: str = "Normal",
    component: str = "tenon",
) -> None:
    """Record an Event about ``involved`` (a Kubernetes object); failures are logged, never raised: an Event
    is a courtesy to the reader, not part of the decision."""
    meta = involved.get("metadata") or {}
    namespace = meta.get("namespace") or "default"
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    body = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{meta.get('name', 'object')}.", "namespace": namespace},
        "involvedObject": {
            "apiVersion": involved.get("apiVersion"),
            "kind": involved.get("kind"),
            "name": meta.get("name"),
            "namespace": meta.get("namespace"),
            "uid": meta.get("uid"),
        },
        "reason": reason,
        "message": message[:1024],
        "type": event_type,
        "source": {"component": component},
        "reportingComponent": component,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }
    try:
        await kube.create(EVENTS, body, namespace)
    except KubeApiError as exc:
        log.warning("could not record an Event", extra={"object": meta.get("name"), "error": str(exc)})
