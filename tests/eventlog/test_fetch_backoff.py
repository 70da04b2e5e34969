"""A consumer whose fetches fail (the broker restarting, electing a leader) waits longer after each failure in
a row, with jitter, and starts again from the shortest wait once a fetch succeeds: every consumer of every
service must not poll a broker that is away four times a second, all in step."""

from __future__ import annotations

import asyncio
import logging

import pytest

from tenon.runtime.eventlog import ConsumerSettings, LogRecord
from tenon.runtime.eventlog.runner import Delivery, PullConsumerRunner
from tests.support.waiting import until


class FlakySource:
    """Fails the fetches numbered in ``failing`` (1-based), answers the others with nothing."""

    def __init__(self, failing: set[int]) -> None:
        self.failing = failing
        self.fetches = 0

    async def fetch(self, max_messages: int, timeout: float) -> list[Delivery]:
        self.fetches += 1
        if self.fetches in self.failing:
            raise ConnectionError("broker away")
        await asyncio.sleep(0.01)
        return []

    async def close(self) -> None:
        return None


async def test_failed_fetches_back_off_and_a_success_starts_over(caplog: pytest.LogCaptureFixture) -> None:
    source = FlakySource(failing={1, 2, 3, 5})

    async def handler(record: LogRecord) -> None:
        return None

    async def open_source() -> FlakySource:
        return source

    async def nowhere(letter: object) -> None:
        return None

    runner = PullConsumerRunner(
        stream="TEST",
        settings=ConsumerSettings("flaky", ("tenon.>",)),
        handler=handler,
        open_source=open_source,  # type: ignore[arg-type]
        write_dead_letter=nowhere,  # type: ignore[arg-type]
    )

    def waits() -> list[tuple[int, float]]:
        return [
            (r.failures, r.retry_in_s)  # type: ignore[attr-defined]
            for r in caplog.records
            if r.getMessage() == "fetch failed, retrying"
        ]

    with caplog.at_level(logging.WARNING, logger="tenon.eventlog.runner"):
        await runner.start()
        try:
            await until(lambda: len(waits()) == 4, timeout=10, what="four failed fetches")
        finally:
            await runner.stop()
    (f1, w1), (f2, w2), (f3, w3), (f4, w4) = waits()
    assert (f1, f2, f3) == (1, 2, 3) and f4 == 1  # the fourth fetch succeeded: the fifth starts over
    assert 0.125 <= w1 <= 0.25 and 0.25 <= w2 <= 0.5 and 0.5 <= w3 <= 1.0 and 0.125 <= w4 <= 0.25
