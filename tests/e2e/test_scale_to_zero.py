"""Scale to zero end to end: delete the workload, every node goes, every claim ends Terminated, once."""

from __future__ import annotations

import asyncio
from collections import Counter

from devtools.stack import LocalStack
from tenon.runtime.kube import MACHINEDEPLOYMENTS, MACHINES, NODECLAIMS, NODEPOOLS, NODES
from tenon.runtime.kube.resources import DEPLOYMENTS
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
    await asyncio.sleep(1.0)  # anything done twice would show up now
    events = [r["event"] for r in await asyncio.to_thread(tap_json, stack) if "event" in r]
    claims = {e["nodeclaim"] for e in events if e["type"] == "NodeClaimPlanned"}
    assert len(claims) == 2
    steps = Counter((e["nodeclaim"], e["type"]) for e in events if e.get("nodeclaim") in claims)
    for claim in claims:
        for step in ("DisruptionRequested", "NodeClaimDrained", "NodeClaimTerminated"):
            assert steps[(claim, step)] == 1, (claim, step, steps)
    decisions = [e for e in events if e["type"] == "DisruptionDecision"]
    assert {c["nodeclaim"] for d in decisions for c in d["candidates"]} == claims
    assert all(d["method"] == "emptiness" and d["budget"] for d in decisions)
    await kube.close()
    await management.close()
