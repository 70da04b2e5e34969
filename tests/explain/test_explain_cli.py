"""``tenon explain`` against a real nats-server: the subjects it reads, its output formats and exit codes."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta

import pytest

from devtools.broker import LocalNatsServer, free_port
from proto import events as ev
from proto import registry
from tenon.cli.main import main
from tenon.runtime.eventlog.connection import ConnectionSettings
from tenon.runtime.eventlog.jetstream import JetStreamEventLog
from tests.explain.story import Story, pending_pod

pytestmark = pytest.mark.integration


def publish(server: LocalNatsServer, story: Story) -> None:
    async def go() -> None:
        event_log = await JetStreamEventLog.connect(ConnectionSettings(servers=(server.url,), name="test"))
        try:
            for record in story.log:
                await event_log.publish(registry.subject_of(record.event), record.event)
        finally:
            await event_log.close()

    asyncio.run(go())


def demo_story(start: datetime) -> tuple[Story, str]:
    """The 3-vCPU field case launched and registered, a pod too big for any type, one disruption decision."""
    story = Story(start)
    big = pending_pod("big", "3")
    batch = story.pending([big, pending_pod("huge", "100")], at=0)
    (planned,), _ = story.plan(batch, at=0.1)
    name = planned.nodeclaim
    story.claim_event(
        ev.NodeClaimLaunched,
        name,
        at=1,
        producer="launcher-capi",
        instance_type="c3-8",
        provider_id="openstack:///m-1",
        machine="c3-8-x1",
    )
    story.claim_event(
        ev.NodeClaimRegistered,
        name,
        at=2,
        producer="scheduler",
        node="worker-1",
        provider_id="openstack:///m-1",
    )
    story.bound(big, "worker-1", at=3)
    story.decision(
        at=4,
        reason="empty for 30s",
        budget="default: nodes 10%",
        blocked=(ev.BlockedCandidate(name, "worker-1", "pod default/big is not a DaemonSet pod"),),
    )
    return story, name


def test_explain_a_claim_and_a_pod_from_the_broker(
    nats_server: LocalNatsServer, capsys: pytest.CaptureFixture[str]
) -> None:
    story, name = demo_story(datetime.now(UTC))
    publish(nats_server, story)

    assert main(["explain", name, "-s", nats_server.url]) == 0
    text = capsys.readouterr().out
    assert f"NodeClaim {name}: Registered" in text
    assert "c3-8 won on price" in text
    assert "c3-4" in text and "cheaper, but did not fit: too small: needs cpu=3" in text
    assert "It answers PendingBatch batch-1" in text and "1 unschedulable pod(s)" in text
    assert "considered but blocked: pod default/big is not a DaemonSet pod" in text

    assert main(["explain", name, "-o", "json", "-s", nats_server.url]) == 0
    body = json.loads(capsys.readouterr().out)
    assert body["phase"] == "Registered" and body["choice"]["instanceType"] == "c3-8"
    assert [s["step"] for s in body["life"]] == ["Planned", "Launched", "Registered"]
    # only what it needs: the claim, the batch, the answer, the decision; not the snapshots or the catalog
    assert body["searched"] == 6

    assert main(["explain", "--pod", "default/huge", "-s", nats_server.url]) == 0
    assert "NodePool default: no instance type has cpu=100" in capsys.readouterr().out
    assert main(["explain", "--pod", "default/big", "-o", "json", "-s", nats_server.url]) == 0
    pod = json.loads(capsys.readouterr().out)
    assert pod["boundNode"] == "worker-1" and pod["batches"][0]["nodeclaim"] == name
    assert pod["batches"][0]["claim"]["phase"] == "Registered"

    assert main(["explain", "default-nope", "-s", nats_server.url]) == 3
    assert "no NodeClaim named default-nope in the log (searched" in capsys.readouterr().out
    assert main(["explain", "--pod", "default/ghost", "-o", "json", "-s", nats_server.url]) == 3
    assert json.loads(capsys.readouterr().out)["found"] is False


def test_a_pod_whose_claim_was_abandoned_is_followed_into_the_replan(
    nats_server: LocalNatsServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """The broker holds the pod's batch, the claim it got, that claim's abandonment and the re-plan: explain
    --pod reads from the pod's batch to the re-planned claim, and shows both answers and both claims."""
    story = Story(datetime.now(UTC))
    big = pending_pod("big", "3")
    batch = story.pending([big], at=0)
    (first,), _ = story.plan(batch, at=0.1)
    abandoned = story.claim_event(
        ev.NodeClaimAbandoned,
        first.nodeclaim,
        at=300,
        reason="not registered within 5m",
        pods=("default/big",),
    )
    assert isinstance(abandoned, ev.NodeClaimAbandoned)
    (second,), _ = story.replan(abandoned, at=301)
    publish(nats_server, story)

    assert main(["explain", "--pod", "default/big", "-o", "json", "-s", nats_server.url]) == 0
    body = json.loads(capsys.readouterr().out)
    assert [(b["batchId"], b["outcome"], b["nodeclaim"]) for b in body["batches"]] == [
        ("batch-1", "new-claim", first.nodeclaim),
        (f"replan-{first.nodeclaim}", "new-claim", second.nodeclaim),
    ]
    assert body["batches"][0]["claim"]["phase"] == "Abandoned"
    assert body["batches"][1]["claim"]["origin"]["replanOf"] == first.nodeclaim


def test_a_plan_stamped_far_from_the_broker_clock_is_still_explained(
    nats_server: LocalNatsServer, capsys: pytest.CaptureFixture[str]
) -> None:
    # decision times an hour ahead of the broker's: the time-bounded read misses, the whole-subject one finds
    story, name = demo_story(datetime.now(UTC) + timedelta(hours=1))
    publish(nats_server, story)
    assert main(["explain", name, "-s", nats_server.url]) == 0
    assert "It answers PendingBatch batch-1" in capsys.readouterr().out


def test_an_unreachable_broker_is_one_line_and_exit_1(capsys: pytest.CaptureFixture[str]) -> None:
    url = f"nats://127.0.0.1:{free_port()}"
    assert main(["explain", "default-x", "-s", url, "--connect-timeout", "0.5"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("tenon explain: cannot reach NATS at") and "\n" not in err


def test_a_broker_without_the_tenon_stream_is_an_error_not_a_miss(
    nats_server: LocalNatsServer, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["explain", "default-x", "-s", nats_server.url]) == 1
    assert "stream TENON_EVENTS does not exist on this broker" in capsys.readouterr().err


def test_bad_usage_is_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", "--pod", "no-namespace"]) == 2
    assert "expected NAMESPACE/NAME" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exited:
        main(["explain"])
    assert exited.value.code == 2
