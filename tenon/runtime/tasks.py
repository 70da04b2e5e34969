"""Ending a service's background tasks for good: :func:`cancel_and_wait`.

On Python 3.11 a cancellation can be lost: ``asyncio.wait_for`` returns the result of an inner future that
completed in the same turn as the cancel, and the cancel is gone (fixed in 3.12). nats-py awaits every request
with it, so a loop that publishes (the EC2 launcher's instance poll) could miss the cancel of its term's end
and run on, and its term's stop waited for it for good: a test's 30 s bound caught it in two of four full CI
runs one evening. A task still running a moment after its cancel is cancelled again until it ends.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

AGAIN_AFTER_S = 0.5
"""Seconds after which a task that has not ended is cancelled again."""


async def cancel_and_wait(tasks: Iterable[asyncio.Task[Any]], again_after: float = AGAIN_AFTER_S) -> None:
    """Cancel ``tasks`` and wait until every one has ended (cancelled again while one runs on); what they
    raised is retrieved, not raised: they are being stopped."""
    tasks = list(tasks)
    pending = {task for task in tasks if not task.done()}
    for task in pending:
        task.cancel()
    while pending:
        _, pending = await asyncio.wait(pending, timeout=again_after)
        for task in pending:
            task.cancel()
    for task in tasks:
        if not task.cancelled():
            task.exception()  # retrieved, so nothing logs it as never retrieved
