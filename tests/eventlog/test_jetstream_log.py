"""The event log against a real nats-server: publish, append, read, consume, faults."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest
from nats.js.api import StreamConfig

from devtools.broker import LocalNatsServer
from proto import subjects
from proto.codec import decode
from proto.events import DeadLetter, NodeClaimLaunched, NodeObserved
from tenon.runtime.eventlog import ConcurrencyConflict, ConsumerSettings, LogRecord, PermanentError
from tenon.runtime.eventlog.connection import ConnectionSettings
from tenon.runtime.eventlog.factories import make_event
from tenon.runtime.eventlog.jetstream import JetStreamEventLog
from tenon.runtime.eventlog.provisioning import default_streams
from tenon.runtime.observability import metrics
from tests.support.waiting import until


def node_event(name: str, version: int = 1) -> NodeObserved:
    return make_event(
        NodeObserved,
        producer="pod-watcher",
        key=(name, version),
        change="added",
        node={"metadata": {"name": name, "resourceVersion": str(version)}},
    )


def launched(claim: str, n: int = 0) -> NodeClaimLaunched:
    return make_event(
        NodeClaimLaunched,
        producer="launcher-capi",
        key=(claim, n),
        nodeclaim=claim,
        provider_id=f"openstack:///{claim}-{n}",
        instance_type="c3-8",
    )


async def wait_until(predicate, timeout: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.02)


async def acknowledged_through(event_log: JetStreamEventLog, durable: str, sequence: int) -> bool:
    """Whether the durable consumer has every record up to ``sequence`` acknowledged and nothing outstanding:
    the broker will deliver none of them again (what "nothing is redelivered" means, observed, not slept
    on)."""
    info = await event_log.js.consumer_info(subjects.EVENTS_STREAM, durable)
    floor = info.ack_floor.stream_seq if info.ack_floor else 0
    return not info.num_ack_pending and not info.num_pending and (floor or 0) >= sequence


async def test_provisioning_is_idempotent_and_applies_changed_settings(
    nats_settings: ConnectionSettings,
) -> None:
    first = await JetStreamEventLog.connect(nats_settings)
    await first.provision()
    second = await JetStreamEventLog.connect(
        nats_settings, default_streams(max_age=3600, duplicate_window=30)
    )
    try:
        info = await second.js.stream_info(subjects.EVENTS_STREAM)
        assert info.config.max_age == 3600
        assert info.config.duplicate_window == 30
        assert sorted(info.config.subjects or []) == sorted(subjects.EVENT_SUBJECTS)
        dead = await second.js.stream_info(subjects.DEADLETTER_STREAM)
        assert dead.config.subjects == [subjects.DEADLETTERS]
    finally:
        await first.close()
        await second.close()


async def test_republishing_an_event_is_deduplicated(jetstream_log: JetStreamEventLog) -> None:
    event = node_event("n1")
    first = await jetstream_log.publish(subjects.node("n1"), event)
    again = await jetstream_log.publish(subjects.node("n1"), event)
    assert not first.duplicate
    assert again.duplicate and again.sequence == first.sequence
    records = [r async for r in jetstream_log.read()]
    assert [r.decode() for r in records] == [event]


async def test_append_detects_a_concurrent_writer(jetstream_log: JetStreamEventLog) -> None:
    subject = subjects.nodeclaim_step("default-abc", "NodeClaimLaunched")
    assert await jetstream_log.last_subject_sequence(subject) == 0
    first = await jetstream_log.append(subject, launched("default-abc", 0), expected_last_sequence=0)
    await jetstream_log.publish(subjects.node("other"), node_event("other"))  # other subjects don't matter
    second = await jetstream_log.append(
        subject, launched("default-abc", 1), expected_last_sequence=first.sequence
    )
    assert await jetstream_log.last_subject_sequence(subject) == second.sequence
    with pytest.raises(ConcurrencyConflict) as conflict:
        await jetstream_log.append(subject, launched("default-abc", 2), expected_last_sequence=first.sequence)
    assert conflict.value.actual == second.sequence
    assert "default-abc" in str(conflict.value) and str(second.sequence) in str(conflict.value)


async def test_read_by_sequence_subject_and_stop(jetstream_log: JetStreamEventLog) -> None:
    for i in range(5):
        await jetstream_log.publish(subjects.node(f"n{i}"), node_event(f"n{i}"))
    await jetstream_log.publish(subjects.nodeclaim_step("c1", "NodeClaimLaunched"), launched("c1"))
    middle = [r.sequence async for r in jetstream_log.read(start_sequence=2, stop_sequence=4)]
    assert middle == [2, 3, 4]
    claims = [r.subject async for r in jetstream_log.read(subjects.NODECLAIMS)]
    assert claims == [subjects.nodeclaim_step("c1", "NodeClaimLaunched")]
    nothing = [r async for r in jetstream_log.read(start_sequence=99)]
    assert nothing == []


async def test_bounds_are_read_while_no_replica_answers_direct_gets(jetstream_log: JetStreamEventLog) -> None:
    """A fresh R3 stream's replicas answer direct gets only once current (a rebuild on a just-started
    cluster met no responder): the stream here allows none at all, and the leader answers instead."""
    first = await jetstream_log.publish(subjects.node("n1"), node_event("n1"))
    await jetstream_log.publish(subjects.node("n2"), node_event("n2"))
    info = await jetstream_log.js.stream_info(subjects.EVENTS_STREAM)
    info.config.allow_direct = False
    await jetstream_log.js.update_stream(info.config)

    bounds = await jetstream_log.bounds()

    assert (bounds.first_sequence, bounds.last_sequence) == (first.sequence, first.sequence + 1)
    assert bounds.first_time is not None


async def test_read_leaves_no_consumer_behind(jetstream_log: JetStreamEventLog) -> None:
    await jetstream_log.publish(subjects.node("n1"), node_event("n1"))
    assert len([r async for r in jetstream_log.read()]) == 1

    async def no_consumer() -> bool:
        info = await jetstream_log.js.stream_info(subjects.EVENTS_STREAM)
        return info.state.consumer_count == 0

    await until(no_consumer, 5, what="the read's consumer gone")


async def test_undecodable_message_is_dead_lettered_and_the_consumer_goes_on(
    jetstream_log: JetStreamEventLog,
) -> None:
    handled: list[str] = []

    async def handler(record: LogRecord) -> None:
        handled.append(record.decode().id)

    await jetstream_log.publish_raw(subjects.node("bad"), b'{"type":"NodeObserved","schema":9}')
    await jetstream_log.publish_raw(subjects.node("worse"), b"\xff\xfe not json")
    good = node_event("good")
    await jetstream_log.publish(subjects.node("good"), good)

    def counted() -> float:
        value = metrics.REGISTRY.get_sample_value("tenon_deadletters_total", {"consumer": "nodes"})
        return value or 0.0

    before = counted()
    runner = jetstream_log.consumer(ConsumerSettings("nodes", (subjects.NODES,)), handler)
    await runner.start()
    await wait_until(lambda: runner.handled == 1 and runner.dead_lettered == 2)
    await runner.stop()
    assert handled == [good.id]
    assert counted() - before == 2

    letters = [
        r.decode() async for r in jetstream_log.read(subjects.DEADLETTERS, stream=subjects.DEADLETTER_STREAM)
    ]
    assert all(isinstance(letter, DeadLetter) for letter in letters)
    by_subject = {letter.original_subject: letter for letter in letters if isinstance(letter, DeadLetter)}
    schema_letter = by_subject[subjects.node("bad")]
    assert "schema 9 is not supported" in schema_letter.error
    assert schema_letter.original_sequence == 1 and schema_letter.consumer == "nodes"
    binary_letter = by_subject[subjects.node("worse")]
    assert binary_letter.data_encoding == "base64" and "not valid JSON" in binary_letter.error

    # all three acknowledged (the dead letters too): the broker will deliver none of them again
    assert await acknowledged_through(jetstream_log, "nodes", 3)


async def test_a_handler_that_always_fails_is_dead_lettered_after_the_configured_attempts(
    jetstream_log: JetStreamEventLog,
) -> None:
    attempts: Counter[int] = Counter()

    async def handler(record: LogRecord) -> None:
        attempts[record.sequence] += 1
        raise RuntimeError("the cloud said no")

    await jetstream_log.publish(subjects.node("n1"), node_event("n1"), headers={"X-Origin": "test"})
    settings = ConsumerSettings("failing", (subjects.NODES,), max_deliver=3, backoff=(0.05,))
    runner = jetstream_log.consumer(settings, handler)
    await runner.start()
    await wait_until(lambda: runner.dead_lettered == 1)
    await runner.stop()
    assert attempts == {1: 3}
    assert await acknowledged_through(jetstream_log, "failing", 1)  # no fourth attempt can come
    [letter] = [r.decode() async for r in jetstream_log.read(stream=subjects.DEADLETTER_STREAM)]
    assert isinstance(letter, DeadLetter)
    assert letter.delivery_count == 3
    assert "RuntimeError: the cloud said no" in letter.error and "3 of 3" in letter.error
    assert letter.headers["X-Origin"] == "test"
    assert decode(letter.data.encode()).id == node_event("n1").id


async def test_permanent_errors_skip_the_retries(jetstream_log: JetStreamEventLog) -> None:
    calls = 0

    async def handler(record: LogRecord) -> None:
        nonlocal calls
        calls += 1
        raise PermanentError("NodePool 'gpu' has no nodeClassRef")

    await jetstream_log.publish(subjects.node("n1"), node_event("n1"))
    runner = jetstream_log.consumer(ConsumerSettings("perm", (subjects.NODES,), max_deliver=5), handler)
    await runner.start()
    await wait_until(lambda: runner.dead_lettered == 1)
    await runner.stop()
    assert calls == 1


async def test_transient_failures_are_retried_until_they_succeed(jetstream_log: JetStreamEventLog) -> None:
    attempts = 0

    async def handler(record: LogRecord) -> None:
        nonlocal attempts
        attempts += 1
        if attempts < 3:
            raise TimeoutError("apiserver slow")

    await jetstream_log.publish(subjects.node("n1"), node_event("n1"))
    runner = jetstream_log.consumer(
        ConsumerSettings("flaky", (subjects.NODES,), max_deliver=5, backoff=(0.05, 0.1)), handler
    )
    await runner.start()
    await wait_until(lambda: runner.handled == 1)
    await runner.stop()
    assert attempts == 3 and runner.dead_lettered == 0


async def test_same_subject_in_order_other_subjects_concurrently(jetstream_log: JetStreamEventLog) -> None:
    running = 0
    peak = 0
    order: dict[str, list[int]] = {}

    async def handler(record: LogRecord) -> None:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.05)
        event = record.decode()
        assert isinstance(event, NodeClaimLaunched)
        order.setdefault(event.nodeclaim, []).append(record.sequence)
        running -= 1

    for n in range(4):
        for claim in ("a", "b", "c", "d"):
            await jetstream_log.publish(
                subjects.nodeclaim_step(claim, "NodeClaimLaunched"), launched(claim, n)
            )
    runner = jetstream_log.consumer(
        ConsumerSettings("ordered", (subjects.NODECLAIMS,), max_concurrency=8), handler
    )
    await runner.start()
    await wait_until(lambda: runner.handled == 16)
    await runner.stop()
    assert all(seqs == sorted(seqs) and len(seqs) == 4 for seqs in order.values())
    assert 1 < peak <= 4  # concurrent across claims, never two of one claim at once


async def test_stop_drains_in_flight_handlers(jetstream_log: JetStreamEventLog) -> None:
    finished: list[int] = []
    started = asyncio.Event()

    async def slow(record: LogRecord) -> None:
        started.set()
        await asyncio.sleep(0.4)
        finished.append(record.sequence)

    await jetstream_log.publish(subjects.node("n1"), node_event("n1"))
    runner = jetstream_log.consumer(ConsumerSettings("draining", (subjects.NODES,)), slow)
    await runner.start()
    await started.wait()
    await runner.stop()
    assert finished == [1] and runner.handled == 1
    assert await acknowledged_through(jetstream_log, "draining", 1)  # acked before stop returned


async def test_broker_restart_loses_nothing_and_repeats_nothing(nats_server: LocalNatsServer) -> None:
    settings = ConnectionSettings(servers=(nats_server.url,), name="restart-test")
    producer = await JetStreamEventLog.connect(settings)
    consumer_log = await JetStreamEventLog.connect(settings)
    effects: Counter[str] = Counter()

    async def handler(record: LogRecord) -> None:
        effects[record.decode().id] += 1
        await asyncio.sleep(0.005)

    runner = consumer_log.consumer(ConsumerSettings("effects", (subjects.NODES,), max_concurrency=4), handler)
    await runner.start()
    published = []
    for i in range(40):
        event = node_event(f"n{i}")
        published.append(event.id)
        await producer.publish(subjects.node(f"n{i}"), event)
    await wait_until(lambda: len(effects) >= 10)

    nats_server.restart()  # same port, same store: durable consumer state survives

    async def publish_after_restart() -> None:
        for i in range(40, 80):
            event = node_event(f"n{i}")
            while True:
                try:
                    await producer.publish(subjects.node(f"n{i}"), event)
                    break
                except Exception:
                    await asyncio.sleep(0.1)  # reconnecting
            published.append(event.id)

    await publish_after_restart()
    await wait_until(lambda: len(effects) == 80, timeout=30)
    # once all 80 are acknowledged nothing can come again: a duplicate would have been handled before that
    await until(lambda: acknowledged_through(consumer_log, "effects", 80), 30, what="all 80 acknowledged")
    await runner.stop()
    await producer.close()
    await consumer_log.close()
    assert set(effects) == set(published)
    assert max(effects.values()) == 1


async def test_trace_context_follows_events_across_consumers(jetstream_log: JetStreamEventLog) -> None:
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test")
    # the eventlog's module-level tracer is a proxy that follows the global provider
    trace.set_tracer_provider(provider)

    batch = node_event("first")

    async def scheduler(record: LogRecord) -> None:
        record.decode()
        await jetstream_log.publish(subjects.nodeclaim_step("c1", "NodeClaimLaunched"), launched("c1"))

    seen: list[LogRecord] = []

    async def launcher(record: LogRecord) -> None:
        seen.append(record)

    with tracer.start_as_current_span("pod-watcher emits"):
        await jetstream_log.publish(subjects.node("first"), batch)
    first = jetstream_log.consumer(ConsumerSettings("sched", (subjects.NODES,)), scheduler)
    second = jetstream_log.consumer(ConsumerSettings("launch", (subjects.NODECLAIMS,)), launcher)
    await first.start()
    await second.start()
    await wait_until(lambda: len(seen) == 1)
    await first.stop()
    await second.stop()
    provider.force_flush()
    spans = exporter.get_finished_spans()
    trace_ids = {span.context.trace_id for span in spans}
    assert len(trace_ids) == 1, [s.name for s in spans]
    names = {span.name for span in spans}
    assert {
        "pod-watcher emits",
        f"{subjects.node('first')} process",
        f"{subjects.nodeclaim_step('c1', 'NodeClaimLaunched')} process",
    } <= names
    assert "traceparent" in seen[0].headers


async def test_user_password_and_token_auth(tmp_path) -> None:  # type: ignore[no-untyped-def]
    config = tmp_path / "auth.conf"
    config.write_text('authorization { user: "tenon", password: "s3cret" }\n')
    with LocalNatsServer(extra_args=("--config", str(config))) as server:
        good = await JetStreamEventLog.connect(
            ConnectionSettings(
                servers=(server.url,), user="tenon", password="s3cret", max_reconnect_attempts=0
            )
        )
        await good.publish(subjects.node("n1"), node_event("n1"))
        await good.close()
        with pytest.raises(Exception, match="cannot reach NATS"):
            await JetStreamEventLog.connect(
                ConnectionSettings(
                    servers=(server.url,), user="tenon", password="wrong", max_reconnect_attempts=0
                )
            )
    with LocalNatsServer(extra_args=("--auth", "t0ken")) as server:
        log_with_token = await JetStreamEventLog.connect(
            ConnectionSettings(servers=(server.url,), token="t0ken", max_reconnect_attempts=0)
        )
        await log_with_token.publish(subjects.node("n1"), node_event("n1"))
        await log_with_token.close()


def test_stream_config_uses_configured_replicas_and_window() -> None:
    events, dead = default_streams(replicas=3, max_age=60, duplicate_window=10)
    config: StreamConfig = events.config()
    assert config.num_replicas == 3 and config.max_age == 60 and config.duplicate_window == 10
    assert (dead.config().max_age or 0) >= 30 * 24 * 3600
