"""Core ``v1`` Events written by the simulated components, aggregated like the real event recorder.

The real scheduler records ``FailedScheduling`` (Warning) and ``Scheduled`` (Normal) events on pods; people
and tools read them with ``kubectl describe`` / ``kubectl get events``. The recorder keeps one Event per
(object uid, reason): the first occurrence creates it, later ones bump ``count`` and ``lastTimestamp`` and
replace the message, instead of creating thousands of objects for a pod that stays pending. To stay cheap
with 10,000 pending pods, a repeat with the same message is only written once ``min_interval`` seconds have
passed since the last write of that Event.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from devtools.sandbox.controllers.clock import now_rfc3339
from devtools.sandbox.controllers.informer import StoreLike
from devtools.sandbox.errors import ApiError, NotFound

log = logging.getLogger(__name__)


class EventRecorder:
    def __init__(self, store: StoreLike, component: str, min_interval: float = 30.0) -> None:
        self.store = store
        self.component = component
        self.min_interval = min_interval
        self.rt = store.resource("v1", "Event")
        # uid -> reason -> (event name, namespace, message, loop time of last write, count)
        self._seen: dict[str, dict[str, tuple[str, str, str, float, int]]] = {}

    def forget(self, uid: str) -> None:
        """Drop what is remembered about an object that is gone (its Events stay in the store)."""
        self._seen.pop(uid, None)

    def record(self, obj: dict[str, Any], event_type: str, reason: str, message: str) -> None:
        """Create or bump the Event for ``obj``; failures are logged, never raised: events are best-effort."""
        meta = obj.get("metadata") or {}
        uid = str(meta.get("uid") or meta.get("name"))
        namespace = meta.get("namespace") or "default"
        now = asyncio.get_running_loop().time()
        stamp = now_rfc3339()
        seen = self._seen.get(uid, {}).get(reason)
        try:
            if seen is None:
                name = f"{meta.get('name')}.{time.time_ns():x}"
                self.store.create(
                    self.rt,
                    {
                        "apiVersion": "v1",
                        "kind": "Event",
                        "metadata": {"name": name, "namespace": namespace},
                        "involvedObject": {
                            "apiVersion": obj.get("apiVersion", "v1"),
                            "kind": obj.get("kind", ""),
                            "name": meta.get("name"),
                            "namespace": meta.get("namespace"),
                            "uid": meta.get("uid"),
                            "resourceVersion": meta.get("resourceVersion"),
                        },
                        "reason": reason,
                        "message": message,
                        "type": event_type,
                        "count": 1,
                        "firstTimestamp": stamp,
                        "lastTimestamp": stamp,
                        "source": {"component": self.component},
                        "reportingComponent": self.component,
                        "reportingInstance": f"{self.component}-sandbox",
                    },
                    namespace,
                )
                self._seen.setdefault(uid, {})[reason] = (name, namespace, message, now, 1)
                return
            name, namespace, last_message, last_write, count = seen
            if last_message == message and now - last_write < self.min_interval:
                return
            event = self.store.get(self.rt, name, namespace)
            event["message"] = message
            event["count"] = count + 1
            event["lastTimestamp"] = stamp
            self.store.update(self.rt, event)
            self._seen.setdefault(uid, {})[reason] = (name, namespace, message, now, count + 1)
        except NotFound:
            self._seen.get(uid, {}).pop(reason, None)
        except ApiError as err:
            log.debug("sandbox %s: event %s on %s not recorded: %s", self.component, reason, uid, err)
