"""Helpers for the pod-watcher's integration tests: run a watcher term against the sandbox, read the log."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any, TypeVar

from devtools.sandbox.testing import SandboxHandle
from proto import subjects
from proto.events import Event
from tenon.runtime.eventlog.interface import EventLog
from tenon.runtime.kube.client import load_kube
from tenon.runtime.kube.resources import Kube
from tenon.services.pod_watcher.service import PodWatcher, PodWatcherSettings
from tests.support.waiting import until

E = TypeVar("E", bound=Event)


@contextlib.asynccontextmanager
async def running_watcher(
    sandbox: SandboxHandle, event_log: EventLog, *, kube_class: type[Kube] = Kube, **settings: Any
) -> AsyncIterator[PodWatcher]:
    """One leadership term of the pod-watcher against the sandbox's workload cluster (stopped on exit)."""
    kube = await load_kube(str(sandbox.workload_kubeconfig))
    if kube_class is not Kube:
        kube = kube_class(kube.api)
    values: dict[str, Any] = {"batch_idle": 0.5, "batch_max": 5.0, **settings}
    watcher = PodWatcher(
        kube, event_log, PodWatcherSettings(kubeconfig=str(sandbox.workload_kubeconfig), **values)
    )
    stopping = asyncio.Event()
    task = asyncio.create_task(watcher.run(stopping))
    try:
        yield watcher
    finally:
        stopping.set()
        try:
            await asyncio.wait_for(task, 10)
        finally:
            await kube.close()


async def logged(event_log: EventLog, event_type: type[E]) -> list[E]:
    """Every event of this type in the log, in log order."""
    return [e async for r in event_log.read(subjects.ALL_EVENTS) if isinstance(e := r.event, event_type)]


async def wait_for_events(
    event_log: EventLog,
    event_type: type[E],
    check: Callable[[list[E]], bool],
    *,
    timeout: float = 10.0,
    what: str = "events",
) -> list[E]:
    """Wait until the events of ``event_type`` in the log satisfy ``check``."""

    async def satisfied() -> list[E] | None:
        events = await logged(event_log, event_type)
        return events if check(events) else None

    found: list[E] = await until(satisfied, timeout, interval=0.1, what=what)
    return found


def summary(event: Event) -> str:
    for field_name in ("node", "pod"):
        obj = getattr(event, field_name, None)
        if isinstance(obj, dict):
            return f"{type(event).__name__}({getattr(event, 'change', '')} {obj['metadata']['name']})"
    return type(event).__name__
