"""The EC2 demos end to end, as a user runs them: ``tenon up --provider ec2 --demo X --exit-when-done --json``
(nats-server, the sandbox, moto's server behind the fault seam, every EC2 service as its own process), and
the JSON each prints (its keys are the contract of issue 11); what the services decided in the interruption
replays to the same from the log."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from devtools.aws import DEFAULT_CLUSTER, DEFAULT_QUEUE
from devtools.broker import LOCAL_MAX_PAYLOAD, LocalNatsServer
from devtools.cli.up import FAST_SETTLE

pytestmark = pytest.mark.integration

TYPES = "c5.*,c5a.*,c6a.*,c6i.*,m5.*,m6a.*,m6i.*,r5.*,r6i.*"
"""A narrower catalog than all of EC2 (the demo NodePool takes c, m and r of generation 5 and later): the
same decisions, described and priced in a fraction of the time."""


def play(demo: str, run_dir: Path) -> dict[str, Any]:
    env = {**os.environ, "TENON_EC2_INSTANCE_TYPES": TYPES}
    command = [sys.executable, "-m", "tenon.cli.main", "up", "--provider", "ec2", "--demo", demo]
    done = subprocess.run(
        [*command, "--exit-when-done", "--json", "--timeout", "120", "--run-dir", str(run_dir)],
        capture_output=True,
        text=True,
        timeout=170,
        env=env,
        check=False,
    )
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-2000:])
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def test_inflate_buys_cheap_instances_and_gives_every_one_back(tmp_path: Path) -> None:
    result = play("inflate", tmp_path)
    claims = result["nodeClaims"]
    assert claims and sum(len(c["pods"]) for c in claims) == 8
    for claim in claims:
        assert claim["instanceType"] and claim["zone"].startswith("us-east-1")
        assert claim["capacityType"] in ("spot", "on-demand")
    timeline = result["timeline"]
    for milestone in ("claimsCreated", "launched", "registered", "initialized", "allPodsRunning"):
        assert timeline[milestone] is not None, milestone
    assert timeline["allNodesRemoved"] > 0 and result["totalPricePerHour"] > 0
    assert result["instances"] == {"before": 0, "running": len(claims), "after": 0}


def replayed(run_dir: Path, service: str, recording: Path) -> str:
    """``tenon replay SERVICE --diff`` over the recording, with the settings the demo's services ran with."""
    env = {
        **os.environ,
        "TENON_CLUSTER_NAME": DEFAULT_CLUSTER,
        "TENON_INTERRUPTION_QUEUE": DEFAULT_QUEUE,
        "TENON_DISRUPTION_SETTLE": FAST_SETTLE,
    }
    command = [sys.executable, "-m", "tenon.cli.main", "replay", service, "--input", str(recording), "--diff"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, env=env, check=False)
    assert done.returncode == 0, (service, done.stdout[-3000:], done.stderr[-2000:])
    return done.stdout.splitlines()[-1]


def from_the_log(run_dir: Path, claim: str) -> tuple[Path, str]:
    """The demo's whole log as JSON lines, and ``tenon explain <claim>``, both read from its broker's store
    (left in the run directory) once the demo is over."""
    path = run_dir / "recording.jsonl"
    with LocalNatsServer(store_dir=run_dir / "jetstream", max_payload=LOCAL_MAX_PAYLOAD) as broker:
        tenon = [sys.executable, "-m", "tenon.cli.main"]
        tapped = subprocess.run(
            [*tenon, "tap", "--server", broker.url, "--no-follow", "--json"],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        explained = subprocess.run(
            [*tenon, "explain", "--server", broker.url, claim],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
    path.write_text(tapped.stdout)
    return path, explained.stdout


def test_a_spot_interruption_is_answered_replacement_first_with_no_pod_lost(tmp_path: Path) -> None:
    result = play("spot-interruption", tmp_path)
    timeline = result["timeline"]
    steps = [
        "noticeReceived",
        "replacementLaunched",
        "replacementInitialized",
        "drainStarted",
        "allPodsRunningAgain",
    ]
    moments = [timeline[step] for step in steps]
    assert all(m is not None for m in moments), timeline
    assert moments == sorted(moments), timeline  # the replacement is ready before the drain starts
    assert timeline["oldNodeRemoved"] is not None
    assert result["interruptedInstanceType"] and result["replacementInstanceType"]
    assert result["replacementClaim"] != result["interruptedClaim"]
    assert result["offeringMarkedUnavailable"] is True
    assert result["podsLost"] == 0
    # the claim's story tells it; what the EC2 services and disruption decided replays to the same
    recording, story = from_the_log(tmp_path, result["interruptedClaim"])
    assert "DisruptionRequested  interruption: " in story
    assert f"spot-interruption of aws:///{result['interruptedZone']}/" in story
    assert f"replacement {result['replacementClaim']} is Initialized" in story
    for service in ("interruption-handler", "disruption", "launcher-ec2"):
        assert "0 differ from the log" in replayed(tmp_path, service, recording), service


def test_refused_capacity_runs_the_claim_on_its_next_choice(tmp_path: Path) -> None:
    result = play("insufficient-capacity", tmp_path)
    refused = result["refused"]
    [claim] = result["nodeClaims"]
    assert [f["instanceType"] for f in claim["launchFailures"]] == [refused["instanceType"]]
    assert "InsufficientInstanceCapacity" in claim["launchFailures"][0]["reason"]
    assert claim["instanceType"] != refused["instanceType"]
    assert result["timeline"]["allPodsRunning"] is not None


def test_a_demo_of_the_other_provider_is_one_line_and_exit_2() -> None:
    command = [sys.executable, "-m", "tenon.cli.main", "up", "--provider", "ec2", "--demo", "drift"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "tenon up: --demo drift: not an ec2 demo (known: inflate, spot-interruption, insufficient-capacity)"
    ]
