"""Leader election on a NATS KV lease, so a service can run as several replicas without acting twice.

The lease is a key (the service name) in the ``tenon_leases`` bucket, whose TTL expires a key that is not
renewed. A candidate ``create``s the key (fails while another holds it); the leader ``update``s it with the
revision it last wrote every TTL/3 (a compare-and-swap: if anything else wrote it, leadership is lost). On
loss, the leader's work is cancelled *before* anyone else can acquire the key (the other side waits for
expiry), so two replicas never work at once as long as a renewal round trip is shorter than TTL/3. Pattern
from choria-io's election on JetStream KV; see ../shared/reference notes on NATS.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Callable, Coroutine
from typing import Any

from tenon.runtime.eventlog.interface import EventLog
from tenon.runtime.eventlog.keyvalue import KeyValue, RevisionMismatch

log = logging.getLogger("tenon.leader")

BUCKET = "tenon_leases"


class ServiceFailed(RuntimeError):
    """The leader's work failed ``max_failures`` terms in a row: the process should exit and be restarted."""


class LeaderElection:
    def __init__(
        self, event_log: EventLog, *, group: str, identity: str, ttl: float = 10.0, max_failures: int = 5
    ) -> None:
        self.event_log = event_log
        self.group = group
        self.identity = identity
        self.ttl = ttl
        self.max_failures = max_failures
        self.is_leader = False
        self.terms = 0
        self.rounds = 0
        """Campaign rounds run (leader or standby, this replica knows where it stands once one has run)."""
        self.failures = 0
        """Terms in a row whose work raised (reset by a term that ends cleanly or is lost, not failed)."""

    async def run(self, lead: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Campaign forever; while leader, run ``lead()`` (cancelled when leadership is lost)."""
        kv = await self.event_log.key_value(BUCKET, ttl=self.ttl)
        interval = self.ttl / 3
        while True:
            revision = await self._acquire(kv)
            self.rounds += 1
            if revision is None:
                await asyncio.sleep(interval)
                continue
            self.is_leader = True
            self.terms += 1
            log.info("became leader", extra={"group": self.group, "identity": self.identity})
            work = asyncio.create_task(lead(), name=f"leader:{self.group}")
            try:
                while not work.done():
                    done, _ = await asyncio.wait({work}, timeout=interval)
                    if done:
                        break
                    try:
                        revision = await kv.update(self.group, self.identity.encode(), revision=revision)
                    except Exception as exc:
                        log.warning(
                            "lost leadership",
                            extra={"group": self.group, "identity": self.identity, "error": str(exc)},
                        )
                        break
            finally:
                self.is_leader = False
                if not work.done():
                    work.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await work
            if work.done() and not work.cancelled() and work.exception() is None:
                await self._release(kv, revision)
                return
            if not work.cancelled() and work.exception() is not None:
                await self._release(kv, revision)  # a standby may take over while this one backs off
            await asyncio.sleep(self._after_term(work, interval))

    def _after_term(self, work: asyncio.Task[None], interval: float) -> float:
        """Say why a term ended; how long to wait before campaigning again. Raises :class:`ServiceFailed`
        after ``max_failures`` failed terms in a row."""
        error = None if work.cancelled() else work.exception()
        if error is None:
            self.failures = 0
            return interval
        self.failures += 1
        log.error(
            "the leader's work failed",
            exc_info=error,
            extra={"group": self.group, "identity": self.identity, "failures_in_a_row": self.failures},
        )
        if self.failures >= self.max_failures:
            raise ServiceFailed(f"{self.group}: {self.failures} terms failed in a row; last: {error}")
        return interval * 2 ** min(self.failures, 5) * random.uniform(0.5, 1.0)

    async def _acquire(self, kv: KeyValue) -> int | None:
        try:
            return await kv.create(self.group, self.identity.encode())
        except RevisionMismatch:
            return None
        except Exception as exc:  # broker unavailable: keep campaigning
            log.warning("campaign failed", extra={"group": self.group, "error": str(exc)})
            return None

    async def _release(self, kv: KeyValue, revision: int) -> None:
        with contextlib.suppress(Exception):
            await kv.delete(self.group, revision=revision)
