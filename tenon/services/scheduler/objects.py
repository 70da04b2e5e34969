"""Keeping the ``karpenter.sh/v1`` NodeClaim objects in step with the claims, off the decision path.

The objects are a view of the event log for ``kubectl`` users, not part of any decision, so the scheduler does
not wait for them: :meth:`NodeClaimObjects.sync` marks a claim dirty and returns at once; a few workers bring
each dirty claim's object to what the projection says *now* (create it with its spec and an Event explaining
it, write its status, or delete it once the claim is over). A claim is never written by two workers at once.

They share the API server with everything on the decision path, so they cost it as little as they can:

* a claim is written ``settle`` seconds (0.5 s) after it became dirty, and the changes meanwhile collapse into
  that one write: a claim that goes Launched, Registered and Initialized within a second is written once, not
  three times;
* they wait while the decision path writes (:meth:`NodeClaimObjects.giving_way`: a registration's
  nominations and Node patch), at most ``longest_wait`` seconds: on the 1,000-pod run their backlog (a
  create, an Event and a status per claim, 150 claims deep) was queued at the API server beside every
  registration;
* the status is written only when it differs from the last one written, as a merge patch on the version the
  last answer had (the conditions list is replaced whole, so the conditions other writers own, disruption's
  ``Drifted``, come from that answer); a conflict (someone else wrote the object meanwhile) reads it and
  writes again. An object is read only when it exists already where this term would create it.

A failed write is retried with backoff.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

from proto import events as ev
from tenon.domain.explain import LoggedEvent, explain_nodeclaim, nodeclaim_event_message
from tenon.domain.projection import ClusterProjection
from tenon.runtime.kube import NODECLAIMS, Kube, KubeApiError
from tenon.runtime.kube.events import post_event
from tenon.runtime.tasks import cancel_and_wait
from tenon.services.scheduler.nodeclaims import CONDITIONS, nodeclaim_spec, nodeclaim_status

log = logging.getLogger("tenon.scheduler.objects")

ENDED = ("Abandoned", "Terminated", "Failed")


class NodeClaimObjects:
    def __init__(
        self,
        kube: Kube,
        state: Callable[[], ClusterProjection],
        *,
        workers: int = 8,
        settle: float = 0.5,
        longest_wait: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.kube = kube
        self._state = state
        self.workers = workers
        self.settle = settle
        self.longest_wait = longest_wait
        self._clock = clock
        self._queue: asyncio.Queue[tuple[float, str]] = asyncio.Queue()
        self._dirty: set[str] = set()
        self._known: dict[str, dict[str, Any]] = {}
        """Claim -> the object as the last write's answer had it."""
        self._written: dict[str, dict[str, Any]] = {}
        """Claim -> the status last written."""
        self._busy: set[str] = set()
        self._causes: dict[str, ev.Event] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._deciding = 0
        self.held_back = 0
        """Workers waiting for the decision path's writes to end (:meth:`giving_way`)."""
        self._quiet = asyncio.Event()
        self._quiet.set()

    @property
    def projection(self) -> ClusterProjection:
        """The scheduler's state as it is now (the runtime replaces it when it rebuilds)."""
        return self._state()

    async def start(self) -> None:
        self._tasks = [
            asyncio.create_task(self._work(), name=f"nodeclaim-objects-{i}") for i in range(self.workers)
        ]

    async def stop(self) -> None:
        await cancel_and_wait(self._tasks)

    @contextlib.contextmanager
    def giving_way(self) -> Iterator[None]:
        """While the decision path writes to the API server (nested blocks count), the objects' workers wait
        before their next write, at most ``longest_wait`` seconds each."""
        self._deciding += 1
        self._quiet.clear()
        try:
            yield
        finally:
            self._deciding -= 1
            if not self._deciding:
                self._quiet.set()

    def sync(self, name: str, *, cause: ev.Event | None = None) -> None:
        if cause is not None:
            self._causes[name] = cause
        if name not in self._dirty:
            self._dirty.add(name)
            self._queue.put_nowait((self._clock() + self.settle, name))

    async def _work(self) -> None:
        while True:
            due, name = await self._queue.get()
            wait = due - self._clock()
            if wait > 0:
                await asyncio.sleep(wait)  # what else happens to the claim meanwhile goes in this write
            if name in self._busy:
                await asyncio.sleep(0.01)  # another worker writes it; look again when it is done
                self._queue.put_nowait((due, name))
                continue
            if self._deciding:
                self.held_back += 1
                try:
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(self.longest_wait):
                            await self._quiet.wait()
                finally:
                    self.held_back -= 1
            self._dirty.discard(name)
            self._busy.add(name)
            try:
                await self._write(name)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning(
                    "NodeClaim object write failed, will retry", extra={"nodeclaim": name, "error": str(exc)}
                )
                await asyncio.sleep(1.0)
                self.sync(name)
            finally:
                self._busy.discard(name)

    async def _write(self, name: str) -> None:
        claim = self.projection.claims.get(name)
        if claim is None or claim.planned is None:
            return
        if claim.phase in ENDED:
            self._known.pop(name, None)
            self._written.pop(name, None)
            current = await self.kube.get_or_none(NODECLAIMS, name)
            if current is not None:
                await self.kube.patch(NODECLAIMS, name, {"metadata": {"finalizers": []}})
                await self.kube.delete(NODECLAIMS, name)
            return
        current = self._known.get(name) or await self._create(name)
        if current is None:
            return
        status = nodeclaim_status(self.projection, claim)
        if self._written.get(name) == status:
            return
        for _ in range(3):
            try:
                answer = await self.kube.patch(
                    NODECLAIMS, name, _status_patch(current, status), subresource="status"
                )
            except KubeApiError as exc:
                if exc.status != 409:
                    raise
                current = await self.kube.get_or_none(NODECLAIMS, name)
                if current is None:
                    return
                continue
            self._known[name], self._written[name] = answer, status
            return
        raise RuntimeError(f"NodeClaim {name} kept changing while its status was written")

    async def _create(self, name: str) -> dict[str, Any] | None:
        claim = self.projection.claims[name]
        assert claim.planned is not None
        try:
            created = await self.kube.create(NODECLAIMS, nodeclaim_spec(self.projection, claim))
        except KubeApiError as exc:
            if exc.status == 409:  # there already (written by an earlier term): as it is now
                existing = await self.kube.get_or_none(NODECLAIMS, name)
                if existing is not None:
                    self._known[name] = existing
                return existing
            raise
        self._known[name] = created
        now = datetime.now(UTC)
        cause = self._causes.pop(name, None)
        story = [LoggedEvent(0, now, e) for e in (cause, claim.planned) if e is not None]
        await post_event(
            self.kube,
            created,
            reason="Planned",
            message=nodeclaim_event_message(explain_nodeclaim(name, story)),
        )
        return created


def _status_patch(current: dict[str, Any], status: dict[str, Any]) -> dict[str, Any]:
    """``status`` as a merge patch on ``current``'s version; a merge patch replaces the conditions list whole,
    so the conditions other writers own (disruption's Drifted) are carried over from ``current``."""
    theirs = [
        c
        for c in ((current.get("status") or {}).get("conditions") or [])
        if isinstance(c, dict) and c.get("type") not in CONDITIONS
    ]
    version = (current.get("metadata") or {}).get("resourceVersion")
    return {
        "metadata": {"resourceVersion": version},
        "status": {**status, "conditions": [*status["conditions"], *theirs]},
    }
