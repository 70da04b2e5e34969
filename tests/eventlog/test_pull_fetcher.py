"""A fetch from a durable consumer answers as soon as something is there, hands out at most its batch and the
rest on the next fetch in order, is not ended by an earlier request's end, and says when the consumer is
missing (:mod:`tenon.runtime.eventlog.pull`)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import nats
import pytest
from nats.aio.client import Client
from nats.js.api import AckPolicy, ConsumerConfig

from devtools.broker import LocalNatsServer
from tenon.runtime.eventlog.pull import PullFetcher
from tenon.runtime.eventlog.records import EventLogError

STREAM, DURABLE = "PULLTEST", "reader"


@pytest.fixture
async def client(nats_server: LocalNatsServer) -> AsyncIterator[Client]:
    connection = await nats.connect(nats_server.url)
    js = connection.jetstream()
    await js.add_stream(name=STREAM, subjects=["pulltest.>"])
    await js.add_consumer(STREAM, ConsumerConfig(durable_name=DURABLE, ack_policy=AckPolicy.ALL))
    try:
        yield connection
    finally:
        await connection.close()


async def fetcher(client: Client, durable: str = DURABLE) -> PullFetcher:
    pull = PullFetcher(client, STREAM, durable)
    await pull.open()
    return pull


async def test_a_fetch_answers_with_the_first_message_without_waiting_for_its_batch(client: Client) -> None:
    pull = await fetcher(client)
    waiting = asyncio.create_task(pull.fetch(64, timeout=60.0))
    await asyncio.sleep(0.05)  # the request is with the server, waiting
    await client.jetstream().publish("pulltest.a", b"first")
    messages = await asyncio.wait_for(waiting, 10.0)  # not the fetch's 60 s: it did not wait for 63 more
    assert [m.data for m in messages] == [b"first"]


async def test_a_batch_is_handed_out_at_most_whole_and_the_rest_by_the_next_fetches_in_order(
    client: Client,
) -> None:
    js = client.jetstream()
    for index in range(150):
        await js.publish("pulltest.a", str(index).encode())
    pull = await fetcher(client)
    sizes, seen = [], []
    while len(seen) < 150:
        messages = await pull.fetch(64, timeout=5.0)
        sizes.append(len(messages))
        seen += [int(m.data) for m in messages]
    assert sizes == [64, 64, 22]
    assert seen == list(range(150))
    assert await pull.fetch(64, timeout=0.2) == []  # nothing more: the fetch gives up at its deadline


async def test_the_end_of_an_earlier_request_does_not_end_a_fetch(client: Client) -> None:
    pull = await fetcher(client)
    # a request of an earlier fetch, as if it had given up: its 404 reaches the fetcher's inbox now
    stale = {"batch": 1, "no_wait": True}
    await client.publish(
        f"$JS.API.CONSUMER.MSG.NEXT.{STREAM}.{DURABLE}",
        json.dumps(stale).encode(),
        reply=f"{pull._inbox}.0",
    )
    await client.flush()
    waiting = asyncio.create_task(pull.fetch(8, timeout=60.0))
    await asyncio.sleep(0.05)
    await client.jetstream().publish("pulltest.a", b"after")
    messages = await asyncio.wait_for(waiting, 10.0)
    assert [m.data for m in messages] == [b"after"]


async def test_a_missing_consumer_is_an_error_that_names_it(client: Client) -> None:
    pull = await fetcher(client, durable="nobody")
    with pytest.raises(EventLogError, match="503 no responders: the consumer is missing"):
        await pull.fetch(8, timeout=5.0)
