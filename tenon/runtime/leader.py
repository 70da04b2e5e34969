"""Leader election on a NATS KV lease, so a service can run as several replicas without acting twice.

The lease is a key (the service name) in the ``tenon_leases`` bucket, whose TTL expires a key that is not
renewed. A candidate ``create``s the key (fails while another holds it); the leader ``update``s it with the
revision it last wrote every TTL/3 (a compare-and-swap: if anything else wrote it, leadership is lost). On loss,
the leader's work is cancelled *before* anyone else can acquire the key (the other side waits for expiry), so
two replicas never work at once as long as a renewal round trip is shorter than TTL/3. Pattern from
choria-io's election on JetStream KV; see ../shared/reference notes on NATS.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from nats.js import JetStreamContext
from nats.js.errors import BucketNotFoundError, KeyWrongLastSequenceError, NotFoundError
from nats.js.kv import KeyValue

log = logging.getLogger("tenon.leader")

BUCKET = "tenon_leases"


async def lease_bucket(js: JetStreamContext, ttl: float) -> KeyValue:
    try:
        return await js.key_value(BUCKET)
    except (BucketNotFoundError, NotFoundError):
        return await js.create_key_value(bucket=BUCKET, ttl=ttl, history=1)


class LeaderElection:
    def __init__(self, js: JetStreamContext, *, group: str, identity: str, ttl: float = 10.0) -> None:
        self.js = js
        self.group = group
        self.identity = identity
        self.ttl = ttl
        self.is_leader = False
        self.terms = 0

    async def run(self, lead: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Campaign forever; while leader, run ``lead()`` (cancelled when leadership is lost)."""
        kv = await lease_bucket(self.js, self.ttl)
        interval = self.ttl / 3
        while True:
            revision = await self._acquire(kv)
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
                        revision = await kv.update(self.group, self.identity.encode(), last=revision)
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
            await asyncio.sleep(interval)

    async def _acquire(self, kv: KeyValue) -> int | None:
        try:
            revision: int = await kv.create(self.group, self.identity.encode())
            return revision
        except KeyWrongLastSequenceError:
            return None
        except Exception as exc:  # broker unavailable: keep campaigning
            log.warning("campaign failed", extra={"group": self.group, "error": str(exc)})
            return None

    async def _release(self, kv: KeyValue, revision: int) -> None:
        with contextlib.suppress(Exception):
            await kv.delete(self.group, last=revision)
