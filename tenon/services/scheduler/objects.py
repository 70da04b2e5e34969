"""Keeping the ``karpenter.sh/v1`` NodeClaim objects in step with the claims, off the decision path.

The objects are a view of the event log for ``kubectl`` users, not part of any decision, so the scheduler does
not wait for them: :meth:`NodeClaimObjects.sync` marks a claim dirty and returns at once; a few workers bring
each dirty claim's object to what the projection says *now* (create it with its spec and an Event explaining
it, write its status, or delete it once the claim is over). Several changes to one claim while it waits
collapse into one write, and a claim is never written by two workers at once. A failed write is retried with
backoff.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from proto import events as ev
from tenon.domain.explain import LoggedEvent, explain_nodeclaim, nodeclaim_event_message
from tenon.domain.projection import ClusterProjection
from tenon.runtime.kube import NODECLAIMS, Kube, KubeApiError
from tenon.runtime.kube.events import post_event
from tenon.services.scheduler.nodeclaims import CONDITIONS, nodeclaim_spec, nodeclaim_status

log = logging.getLogger("tenon.scheduler.objects")

ENDED = ("Abandoned", "Terminated", "Failed")


class NodeClaimObjects:
    def __init__(self, kube: Kube, state: Callable[[], ClusterProjection], *, workers: int = 8) -> None:
        self.kube = kube
        self._state = state
        self.workers = workers
        self._queue: asyncio.Queue[str] = asyncio.Queue()
        self._dirty: set[str] = set()
        self._busy: set[str] = set()
        self._causes: dict[str, ev.Event] = {}
        self._tasks: list[asyncio.Task[None]] = []

    @property
    def projection(self) -> ClusterProjection:
        """The scheduler's state as it is now (the runtime replaces it when it rebuilds)."""
        return self._state()

    async def start(self) -> None:
        self._tasks = [
            asyncio.create_task(self._work(), name=f"nodeclaim-objects-{i}") for i in range(self.workers)
        ]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def sync(self, name: str, *, cause: ev.Event | None = None) -> None:
        if cause is not None:
            self._causes[name] = cause
        if name not in self._dirty:
            self._dirty.add(name)
            self._queue.put_nowait(name)

    async def _work(self) -> None:
        while True:
            name = await self._queue.get()
            if name in self._busy:
                await asyncio.sleep(0.01)  # another worker writes it; look again when it is done
                self._queue.put_nowait(name)
                continue
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
            current = await self.kube.get_or_none(NODECLAIMS, name)
            if current is not None:
                await self.kube.patch(NODECLAIMS, name, {"metadata": {"finalizers": []}})
                await self.kube.delete(NODECLAIMS, name)
            return
        current = await self.kube.get_or_none(NODECLAIMS, name)
        if current is None:
            current = await self._create(name)
            if current is None:
                return
        status = nodeclaim_status(self.projection, claim)
        # a merge patch replaces the list whole: keep the conditions other writers own (disruption's Drifted)
        theirs = [
            c
            for c in ((current.get("status") or {}).get("conditions") or [])
            if isinstance(c, dict) and c.get("type") not in CONDITIONS
        ]
        status["conditions"] = [*status["conditions"], *theirs]
        await self.kube.patch(NODECLAIMS, name, {"status": status}, subresource="status")

    async def _create(self, name: str) -> dict[str, Any] | None:
        claim = self.projection.claims[name]
        assert claim.planned is not None
        try:
            created = await self.kube.create(NODECLAIMS, nodeclaim_spec(self.projection, claim))
        except KubeApiError as exc:
            if exc.status == 409:
                return None
            raise
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
