"""``tenon tap`` and ``tenon replay`` as a user runs them, against a real broker."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Sequence
from datetime import UTC, datetime

import pytest

from devtools.broker import LocalNatsServer, free_port
from proto import registry, subjects
from proto.events import Event, InstanceChoice, NodeClaimLaunched, NodeClaimPlanned, NodeObserved
from tenon.cli.main import main
from tenon.domain.nodeclaim import ClaimBook
from tenon.runtime.eventlog.connection import ConnectionSettings
from tenon.runtime.eventlog.factories import make_event
from tenon.runtime.eventlog.jetstream import JetStreamEventLog


class LaunchDecider:
    """A tiny decider for the tests: launch whatever instance type was planned (or a forced one)."""

    name = "launcher-test"
    inputs = (subjects.NODECLAIMS,)
    state_format = "launcher-test/1"

    def __init__(self, force_type: str | None = None) -> None:
        self.force_type = force_type

    def initial_state(self) -> set[str]:
        return set()

    def tick(self, state: set[str], now: datetime) -> Sequence[Event]:
        return ()

    def claims(self, state: set[str]) -> ClaimBook:
        return ClaimBook()

    def encode(self, state: set[str]) -> bytes:
        return json.dumps(sorted(state)).encode()

    def decode(self, data: bytes) -> set[str]:
        return set(json.loads(data))

    def evolve(self, state: set[str], event: Event, sequence: int = 0) -> set[str]:
        if isinstance(event, NodeClaimLaunched):
            return state | {event.nodeclaim}
        return state

    def decide(self, state: set[str], event: Event) -> Sequence[Event]:
        if not isinstance(event, NodeClaimPlanned) or event.nodeclaim in state:
            return []
        return [
            make_event(
                NodeClaimLaunched,
                producer=self.name,
                key=(event.id,),
                causation=event,
                decided_at=event.decided_at,
                nodeclaim=event.nodeclaim,
                provider_id=f"test:///{event.nodeclaim}",
                instance_type=self.force_type or event.choice.instance_type,
            )
        ]


def changed_decider() -> LaunchDecider:
    return LaunchDecider(force_type="c3-16")


def plan(claim: str, instance_type: str = "c3-8") -> NodeClaimPlanned:
    return NodeClaimPlanned(
        id=f"plan-{claim}",
        decided_at=datetime(2026, 11, 29, 10, 0, tzinfo=UTC),
        producer="scheduler",
        correlation_id=claim,
        nodeclaim=claim,
        nodepool="default",
        node_class="default",
        choice=InstanceChoice(instance_type, None, "on-demand", 0.2),
        fallbacks=(),
        pods=(f"default/{claim}-pod",),
        requirements=(),
        labels={},
    )


async def record_a_run(url: str) -> None:
    """What a live system would have written: plans, the launcher's answers, an unrelated observation."""
    event_log = await JetStreamEventLog.connect(ConnectionSettings(servers=(url,)))
    live = LaunchDecider()
    state = live.initial_state()
    node = make_event(
        NodeObserved, producer="pod-watcher", key=("n1",), change="added", node={"metadata": {"name": "n1"}}
    )
    await event_log.publish(subjects.node("n1"), node)
    for claim in ("c1", "c2"):
        planned = plan(claim)
        await event_log.publish(registry.subject_of(planned), planned)
        for decision in live.decide(state, planned):
            await event_log.publish(registry.subject_of(decision), decision)
            state = live.evolve(state, decision)
    await event_log.close()


@pytest.fixture
def recorded(nats_server: LocalNatsServer) -> str:
    asyncio.run(record_a_run(nats_server.url))
    return nats_server.url


def test_tap_prints_a_line_per_event_and_filters(recorded: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tap", "--server", recorded, "--no-follow"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 5
    assert "NodeClaimPlanned" in lines[1] and "claim c1 planned: c3-8" in lines[1]
    assert "claim c1 launched: c3-8 as test:///c1" in lines[2]

    assert main(["tap", "--server", recorded, "--no-follow", "--nodeclaim", "c2", "--json"]) == 0
    records = [json.loads(line) for line in capsys.readouterr().out.strip().splitlines()]
    assert [r["event"]["type"] for r in records] == ["NodeClaimPlanned", "NodeClaimLaunched"]
    assert all(r["event"]["nodeclaim"] == "c2" for r in records)

    assert main(["tap", "--server", recorded, "--no-follow", "--type", "NodeObserved"]) == 0
    assert capsys.readouterr().out.count("\n") == 1

    assert (
        main(
            ["tap", "--server", recorded, "--no-follow", "--from-seq", "4", "--subject", "tenon.nodeclaim.>"]
        )
        == 0
    )
    assert capsys.readouterr().out.count("\n") == 2


def test_tap_follows_live_events_without_durable_state(nats_server: LocalNatsServer) -> None:
    asyncio.run(record_a_run(nats_server.url))
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tenon.cli.main",
            "tap",
            "--server",
            nats_server.url,
            "--type",
            "NodeObserved",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stderr is not None
        assert "following TENON_EVENTS from #6" in process.stderr.readline()  # connected, waiting for new

        async def publish_and_look() -> list[str | None]:
            event_log = await JetStreamEventLog.connect(ConnectionSettings(servers=(nats_server.url,)))
            event = make_event(
                NodeObserved,
                producer="pod-watcher",
                key=("live",),
                change="added",
                node={"metadata": {"name": "live-node"}},
            )
            await event_log.publish(subjects.node("live-node"), event)
            for _ in range(100):  # tap subscribes right after saying it follows
                consumers = await event_log.js.consumers_info(subjects.EVENTS_STREAM)
                if consumers:
                    break
                await asyncio.sleep(0.05)
            await event_log.close()
            return [c.config.durable_name for c in consumers]

        durable_names = asyncio.run(publish_and_look())
        assert process.stdout is not None
        line = process.stdout.readline()
        assert "node live-node added" in line  # only new events: the recorded n1 is not replayed
        assert durable_names == [None]  # tap's own consumer, ephemeral: no durable state on the server
    finally:
        process.terminate()
        process.wait(timeout=10)


def test_tap_against_an_unreachable_broker_fails_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    port = free_port()
    code = main(["tap", "--server", f"nats://127.0.0.1:{port}", "--connect-timeout", "0.5"])
    err = capsys.readouterr().err.strip()
    assert code == 1
    assert len(err.splitlines()) == 1 and err.startswith("tenon tap: cannot reach NATS at nats://127.0.0.1")


def test_replay_reproduces_recorded_decisions(recorded: str, capsys: pytest.CaptureFixture[str]) -> None:
    decider = f"{__name__}:LaunchDecider"
    assert main(["replay", decider, "--server", recorded, "--diff"]) == 0
    out = capsys.readouterr().out
    assert out.count("= #") == 2 and "0 differ from the log" in out


def test_replay_diff_shows_where_a_changed_decider_differs(
    recorded: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert (
        main(["replay", f"{__name__}:changed_decider", "--server", recorded, "--diff", "--from-seq", "4"])
        == 1
    )
    out = capsys.readouterr().out
    assert "≠ #4 NodeClaimPlanned" in out
    assert "instanceType: recorded 'c3-8', replay 'c3-16'" in out
    assert "#2" not in out  # outside the range


def test_replay_from_a_tap_recording_offline(
    recorded: str, tmp_path, capsys: pytest.CaptureFixture[str]
) -> None:  # type: ignore[no-untyped-def]
    assert main(["tap", "--server", recorded, "--no-follow", "--json"]) == 0
    recording = tmp_path / "run.jsonl"
    recording.write_text(capsys.readouterr().out)
    assert main(["replay", f"{__name__}:LaunchDecider", "--input", str(recording), "--diff", "--json"]) == 0
    results = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["same"] for r in results] == [True, True]
    assert results[0]["decisions"][0]["instanceType"] == "c3-8"


def test_replay_of_an_unknown_service_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", "no-such-service"]) == 2
    assert "unknown service 'no-such-service'" in capsys.readouterr().err
