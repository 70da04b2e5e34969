"""An ordered consumer acks a batch with one cumulative ack, and never past a refused record whose dead letter
could not be written: that record and the ones after it come again, nothing is lost."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from datetime import UTC, datetime

from tenon.runtime.eventlog import ConsumerSettings, LogRecord
from tenon.runtime.eventlog.runner import Delivery, PullConsumerRunner
from tests.support.waiting import until


class Recorded:
    """A delivery that notes whether it was acked or nak'ed."""

    def __init__(self, sequence: int, outcomes: dict[int, str]) -> None:
        self.record = LogRecord(sequence, "tenon.cluster.node.n", b"{}", {}, datetime.now(UTC))
        self._outcomes = outcomes

    async def ack(self) -> None:
        self._outcomes[self.record.sequence] = "acked"

    async def nak(self, delay: float) -> None:
        self._outcomes[self.record.sequence] = "nak'ed"


class OneBatch:
    """Hands over records 1-4 once, then nothing."""

    def __init__(self, outcomes: dict[int, str]) -> None:
        self.batch: list[Delivery] = [Recorded(n, outcomes) for n in (1, 2, 3, 4)]

    async def fetch(self, max_messages: int, timeout: float) -> list[Delivery]:
        batch, self.batch = self.batch, []
        if not batch:
            await asyncio.sleep(0.01)
        return batch

    async def close(self) -> None:
        return None


async def test_a_dead_letter_that_cannot_be_written_stops_the_cumulative_ack_before_its_record() -> None:
    outcomes: dict[int, str] = {}
    source = OneBatch(outcomes)

    async def refuse_the_third(records: list[LogRecord]) -> Mapping[int, str]:
        return {3: "impossible story"}

    async def open_source() -> OneBatch:
        return source

    async def broker_away(letter: object) -> None:
        raise ConnectionError("dead-letter stream unavailable")

    runner = PullConsumerRunner(
        stream="TEST",
        settings=ConsumerSettings("ordered", ("tenon.>",), max_concurrency=1),
        handler=None,
        batch_handler=refuse_the_third,
        open_source=open_source,  # type: ignore[arg-type]
        write_dead_letter=broker_away,  # type: ignore[arg-type]
    )
    await runner.start()
    try:
        await until(lambda: len(outcomes) == 3, timeout=10, what="the batch acked and nak'ed")
    finally:
        await runner.stop()
    # one ack, of record 2, covers 1 and 2; the refused record 3 and record 4 after it come again
    assert outcomes == {2: "acked", 3: "nak'ed", 4: "nak'ed"}
    assert runner.dead_lettered == 0
