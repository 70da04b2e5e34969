"""Event log throughput and latency, beside raw nats-py measured in the same run on the same broker.

Publish: sequential publish-and-wait-for-ack (the way a service publishes a decision), N events, for raw
``js.publish`` of pre-encoded bytes with a ``Nats-Msg-Id`` and for :meth:`JetStreamEventLog.publish` (which
also encodes the msgspec event, injects trace context and opens a producer span). Reported: events/s and
p50/p99 publish-ack latency.

Consume: N events through a durable pull consumer with confirmed acks, for raw ``fetch`` + ``ack_sync`` (acks
of a batch in parallel) and for :class:`PullConsumerRunner` (decode in the handler, per-subject ordering,
bounded concurrency). Reported: events/s.

Target: the wrapper within 15% of raw on both.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from datetime import UTC, datetime

import nats
from nats.js.api import AckPolicy, ConsumerConfig

from bench.suite import Suite, Target
from devtools.broker import LocalNatsServer
from proto import subjects
from proto.codec import decode, encode
from proto.events import NodeObserved
from tenon.runtime.eventlog import ConsumerSettings, LogRecord
from tenon.runtime.eventlog.connection import ConnectionSettings
from tenon.runtime.eventlog.jetstream import JetStreamEventLog

NODE = {
    "apiVersion": "v1",
    "kind": "Node",
    "metadata": {"name": "node-0", "labels": {"node.kubernetes.io/instance-type": "c3-8"}},
    "status": {"allocatable": {"cpu": "3900m", "memory": "15Gi", "pods": "110"}},
}


def _event(i: int) -> NodeObserved:
    return NodeObserved(
        id=f"bench-{i}", decided_at=datetime.now(UTC), producer="bench", change="changed", node=NODE
    )


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def _raw_publish(url: str, count: int, offset: int = 0) -> tuple[float, list[float]]:
    client = await nats.connect(url)
    js = client.jetstream()
    payloads = [(f"raw-{offset + i}", encode(_event(offset + i))) for i in range(count)]
    latencies = []
    start = time.perf_counter()
    for i, (msg_id, payload) in enumerate(payloads):
        t0 = time.perf_counter()
        await js.publish(subjects.bound_pod("raw", f"p{i % 50}"), payload, headers={"Nats-Msg-Id": msg_id})
        latencies.append(time.perf_counter() - t0)
    elapsed = time.perf_counter() - start
    await client.close()
    return count / elapsed, latencies


async def _log_publish(url: str, count: int, offset: int = 0) -> tuple[float, list[float]]:
    event_log = await JetStreamEventLog.connect(ConnectionSettings(servers=(url,)), provision=False)
    events = [_event(10_000_000 + offset + i) for i in range(count)]
    latencies = []
    start = time.perf_counter()
    for i, event in enumerate(events):
        t0 = time.perf_counter()
        await event_log.publish(subjects.bound_pod("log", f"p{i % 50}"), event)
        latencies.append(time.perf_counter() - t0)
    elapsed = time.perf_counter() - start
    await event_log.close()
    return count / elapsed, latencies


async def _raw_consume(url: str, count: int, filter_subject: str, durable: str) -> float:
    client = await nats.connect(url)
    js = client.jetstream()
    await js.add_consumer(
        subjects.EVENTS_STREAM,
        ConsumerConfig(durable_name=durable, ack_policy=AckPolicy.EXPLICIT, filter_subject=filter_subject),
    )
    subscription = await js.pull_subscribe_bind(durable, subjects.EVENTS_STREAM)
    done = 0
    start = time.perf_counter()
    while done < count:
        messages = await subscription.fetch(batch=64, timeout=5)
        for message in messages:
            decode(message.data)  # every real consumer decodes what it reads
        await asyncio.gather(*(m.ack_sync(timeout=5) for m in messages))
        done += len(messages)
    elapsed = time.perf_counter() - start
    await client.close()
    return count / elapsed


async def _log_consume(url: str, count: int, filter_subject: str, durable: str) -> float:
    event_log = await JetStreamEventLog.connect(ConnectionSettings(servers=(url,)), provision=False)
    finished = asyncio.Event()
    handled = 0

    async def handler(record: LogRecord) -> None:
        nonlocal handled
        record.decode()
        handled += 1
        if handled >= count:
            finished.set()

    runner = event_log.consumer(
        ConsumerSettings(durable, (filter_subject,), max_concurrency=64, fetch_batch=64), handler
    )
    start = time.perf_counter()
    await runner.start()
    await finished.wait()
    elapsed = time.perf_counter() - start
    await runner.stop()
    await event_log.close()
    return count / elapsed


async def _measure(count: int) -> dict[str, float]:
    with LocalNatsServer() as server:
        event_log = await JetStreamEventLog.connect(ConnectionSettings(servers=(server.url,)))
        await event_log.close()
        await _raw_publish(
            server.url, 200, offset=5_000_000
        )  # warm-up (not consumed: other ids, same subjects)
        # the machine is shared (2 cores): alternate the two sides over rounds and keep each side's best round
        raw_runs, log_runs, raw_consumes, log_consumes = [], [], [], []
        for round_number in range(ROUNDS):
            raw_runs.append(await _raw_publish(server.url, count, offset=round_number * count))
            log_runs.append(await _log_publish(server.url, count, offset=round_number * count))
        for round_number in range(ROUNDS):
            raw_consumes.append(
                await _raw_consume(
                    server.url, count * ROUNDS + 200, "tenon.cluster.pod.raw.*", f"raw-{round_number}"
                )
            )
            log_consumes.append(
                await _log_consume(
                    server.url, count * ROUNDS, "tenon.cluster.pod.log.*", f"log-{round_number}"
                )
            )
    raw_rate, raw_lat = max(raw_runs, key=lambda run: run[0])
    log_rate, log_lat = max(log_runs, key=lambda run: run[0])
    raw_consume, log_consume = max(raw_consumes), max(log_consumes)
    return {
        "raw_publish_per_s": raw_rate,
        "log_publish_per_s": log_rate,
        "raw_publish_p50_ms": statistics.median(raw_lat) * 1000,
        "raw_publish_p99_ms": _percentile(raw_lat, 0.99) * 1000,
        "log_publish_p50_ms": statistics.median(log_lat) * 1000,
        "log_publish_p99_ms": _percentile(log_lat, 0.99) * 1000,
        "raw_consume_per_s": raw_consume,
        "log_consume_per_s": log_consume,
    }


ROUNDS = 5


def run(quick: bool) -> Suite:
    count = 1000 if quick else 5000
    figures = asyncio.run(_measure(count))
    publish_ratio = figures["log_publish_per_s"] / figures["raw_publish_per_s"]
    consume_ratio = figures["log_consume_per_s"] / figures["raw_consume_per_s"]
    suite = Suite(
        title=f"event log vs raw nats-py ({count} events, 1 broker on loopback)",
        columns=["path", "publish events/s", "publish p50 ms", "publish p99 ms", "consume events/s"],
        data={"events": count, **figures, "publish_ratio": publish_ratio, "consume_ratio": consume_ratio},
    )
    suite.rows.append(
        [
            "raw nats-py",
            f"{figures['raw_publish_per_s']:.0f}",
            f"{figures['raw_publish_p50_ms']:.3f}",
            f"{figures['raw_publish_p99_ms']:.3f}",
            f"{figures['raw_consume_per_s']:.0f}",
        ]
    )
    suite.rows.append(
        [
            "tenon event log",
            f"{figures['log_publish_per_s']:.0f}",
            f"{figures['log_publish_p50_ms']:.3f}",
            f"{figures['log_publish_p99_ms']:.3f}",
            f"{figures['log_consume_per_s']:.0f}",
        ]
    )
    suite.targets.append(
        Target(
            "publish overhead vs raw", ">= 85% of raw", f"{publish_ratio:.0%} of raw", publish_ratio >= 0.85
        )
    )
    suite.targets.append(
        Target(
            "consume overhead vs raw", ">= 85% of raw", f"{consume_ratio:.0%} of raw", consume_ratio >= 0.85
        )
    )
    return suite
