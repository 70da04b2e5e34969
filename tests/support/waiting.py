"""Waiting for an observable condition: the one way tests wait (never "sleep, then nothing happened")."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")


async def until(
    predicate: Callable[[], T | Awaitable[T]],
    timeout: float = 15.0,
    *,
    interval: float = 0.05,
    what: str = "condition",
) -> T:
    """The first truthy value of ``predicate()`` (sync or async); AssertionError naming ``what`` on
    timeout."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        value = predicate()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value  # type: ignore[return-value]
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"{what} not met within {timeout:g}s (last value: {value!r})")
        await asyncio.sleep(interval)


def until_sync(
    predicate: Callable[[], Any], timeout: float = 30.0, *, interval: float = 0.1, what: str = "condition"
) -> Any:
    """:func:`until` for code outside an event loop (processes, files)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not met within {timeout:g}s (last value: {value!r})")
        time.sleep(interval)
