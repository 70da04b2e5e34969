"""Scale to zero end to end: delete the workload, every node goes, every claim ends Terminated, once."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections import Counter

from devtools.stack import LocalStack
from proto import registry
from tenon.runtime.eventlog.connection import ConnectionSettings
from tenon.runtime.eventlog.jetstream import JetStreamEventLog
from tenon.runtime.kube import MACHINEDEPLOYMENTS, MACHINES, NODECLAIMS, NODEPOOLS, NODES
from tenon.runtime.kube.resources import DEPLOYMENTS
from tenon.services import definition
from tests.e2e.test_provisioning import provision, tap_json, until


async def test_deleting_the_workload_returns_the_pool_to_zero(stack: LocalStack) -> None:
    kube, management = await provision(stack, "workload-eight-1cpu.yaml", "small")
    # the demo pool waits 30s of emptiness; a shorter wait keeps the test short, the path is the same
    await kube.patch(NODEPOOLS, "default", {"spec": {"disruption": {"consolidateAfter": "1s"}}})
    await kube.delete(DEPLOYMENTS, "small", "default")

    async def empty() -> bool:
        nodes, _ = await kube.list(NODES)
        claims, _ = await kube.list(NODECLAIMS)
        machines, _ = await management.list(MACHINES)
        mds, _ = await management.list(MACHINEDEPLOYMENTS)
        return not nodes and not claims and not machines and not any(m["spec"]["replicas"] for m in mds)

    await until(empty, timeout=60, what="no node, claim or machine left and every MachineDeployment at 0")
    await until(lambda: settled(stack), timeout=30, what="every service caught up with the log")
    recording = await asyncio.to_thread(tap_json, stack)
    events = [r["event"] for r in recording if "event" in r]
    claims = {e["nodeclaim"] for e in events if e["type"] == "NodeClaimPlanned"}
    assert len(claims) == 2
    steps = Counter((e["nodeclaim"], e["type"]) for e in events if e.get("nodeclaim") in claims)
    for claim in claims:
        for step in ("DisruptionRequested", "NodeClaimDrained", "NodeClaimTerminated"):
            assert steps[(claim, step)] == 1, (claim, step, steps)
    decisions = [e for e in events if e["type"] == "DisruptionDecision"]
    assert {c["nodeclaim"] for d in decisions for c in d["candidates"]} == claims
    assert all(d["method"] == "emptiness" and d["budget"] for d in decisions)
    # every service's decisions over the whole run replay to the same, offline, from the recording
    path = stack.run_dir / "recording.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in recording))
    for service in stack.services:
        replayed = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "tenon.cli.main", "replay", service, "--input", str(path), "--diff"],
            capture_output=True,
            text=True,
            timeout=120,
            env=stack.env(),  # the settings the services ran with (a decision depends on its settings)
        )
        assert replayed.returncode == 0, (service, replayed.stdout[-3000:], replayed.stderr[-2000:])
        assert "0 differ from the log" in replayed.stdout.splitlines()[-1], (service, replayed.stdout[-500:])
    await kube.close()
    await management.close()


async def settled(stack: LocalStack) -> bool:
    """Whether every service of the stack that follows the log has handled all of its inputs stored so far."""
    event_log = await JetStreamEventLog.connect(
        ConnectionSettings(servers=(stack.nats_url,)), provision=False
    )
    try:
        for name in stack.services:
            decider = definition(name).decider
            inputs = registry.inputs_of(name)
            if decider is None or not inputs:
                continue
            newest = max([await event_log.last_subject_sequence(f) for f in inputs], default=0)
            if await event_log.consumer_ack_floor(name) < newest:
                return False
        return True
    finally:
        await event_log.close()
