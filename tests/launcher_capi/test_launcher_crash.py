"""SIGKILL the launcher process right after it scaled a MachineDeployment; the restarted one owes nothing
more.

The launcher runs as it does in production (``python -m tenon.services.launcher_capi``, leader election
included) against the real broker and the sandbox's management cluster. The sandbox boots Machines ten times
slower than its fast profile, so the kill lands after the replicas patch and before any providerID (asserted:
a kill that came too late would not test anything).
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest

from devtools.broker import LocalNatsServer
from devtools.sandbox.testing import SandboxHandle, running_sandbox
from proto.events import NodeClaimLaunched
from tenon.core.wellknown import NODECLAIM
from tenon.runtime.eventlog.jetstream import JetStreamEventLog
from tests.launcher_capi.launcher_support import (
    append_claim_event,
    claim_events,
    machine_deployment,
    machines_of,
    md_rt,
    nodeclass,
    planned,
    publish_nodeclasses,
    replicas_of,
    settled,
)
from tests.support.waiting import until

REPO = Path(__file__).resolve().parents[2]
PROXY_VARIABLES = ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "all_proxy", "ALL_PROXY")


async def start_launcher(
    nats: LocalNatsServer, sandbox: SandboxHandle, output: IO[bytes]
) -> asyncio.subprocess.Process:
    env = {k: v for k, v in os.environ.items() if k not in PROXY_VARIABLES}
    env.update(
        {
            "TENON_NATS_URL": nats.url,
            "TENON_MANAGEMENT_KUBECONFIG": str(sandbox.management_kubeconfig),
            "TENON_KUBECONFIG": str(sandbox.workload_kubeconfig),
            "TENON_HEALTH_PORT": "0",
            "NO_PROXY": "127.0.0.1",
        }
    )
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tenon.services.launcher_capi",
        env=env,
        stdout=output,
        stderr=output,
        cwd=str(REPO),
    )


@pytest.fixture
def launcher_output(tmp_path: Path) -> Iterator[IO[bytes]]:
    """Where both launcher processes write their JSON logs (shown when the test fails)."""
    with (tmp_path / "launcher.log").open("wb") as output:
        yield output


async def launched_claims(event_log: JetStreamEventLog, *claims: str) -> dict[str, int]:
    counts = {}
    for claim in claims:
        counts[claim] = sum(isinstance(e, NodeClaimLaunched) for e in await claim_events(event_log, claim))
    return counts


async def test_sigkill_after_scale_up_then_restart_creates_exactly_the_machines_owed(
    nats_server: LocalNatsServer,
    jetstream_log: JetStreamEventLog,
    tmp_path: Path,
    launcher_output: IO[bytes],
) -> None:
    async with running_sandbox(time_scale=10.0) as sb:
        store = sb.management_store
        store.create(md_rt(store), machine_deployment("c3-8"))
        await publish_nodeclasses(jetstream_log, nodeclass())
        first = await start_launcher(nats_server, sb, launcher_output)
        try:
            await append_claim_event(jetstream_log, planned("claim-a", "c3-8"))
            await append_claim_event(jetstream_log, planned("claim-b", "c3-8"))
            await until(lambda: replicas_of(store, "c3-8") >= 1, timeout=20, what="the first scale-up")
            first.send_signal(signal.SIGKILL)
            await first.wait()
        finally:
            if first.returncode is None:
                first.kill()
                await first.wait()
        assert await launched_claims(jetstream_log, "claim-a", "claim-b") == {"claim-a": 0, "claim-b": 0}
        assert all(not m.get("spec", {}).get("providerID") for m in machines_of(store, "c3-8"))

        second = await start_launcher(nats_server, sb, launcher_output)
        try:
            await until(lambda: _all_launched(jetstream_log), timeout=30, what="both claims Launched")
            # everything the restarted launcher saw is handled (observations of the boots included): nothing
            # owed
            await until(lambda: settled(jetstream_log), timeout=30, what="the launcher handled the whole log")
            assert await launched_claims(jetstream_log, "claim-a", "claim-b") == {"claim-a": 1, "claim-b": 1}
            assert replicas_of(store, "c3-8") == 2
            machines = machines_of(store, "c3-8")
            assert len(machines) == 2
            assert sorted(m["metadata"]["annotations"][NODECLAIM] for m in machines) == ["claim-a", "claim-b"]
        finally:
            second.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(second.wait(), 20)
            except TimeoutError:
                second.kill()
                await second.wait()
        assert second.returncode == 0, (tmp_path / "launcher.log").read_text()[-3000:]


async def _all_launched(event_log: JetStreamEventLog) -> bool:
    return set((await launched_claims(event_log, "claim-a", "claim-b")).values()) == {1}
