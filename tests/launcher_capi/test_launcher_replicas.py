"""Two launcher processes: one leads and acts, the other waits; when the leader stops, the other takes over.

Both run as in production (``python -m tenon.services.launcher_capi``) against the real broker and the
sandbox's management cluster; their JSON logs say which of them did what.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path

from devtools.broker import LocalNatsServer
from devtools.sandbox.testing import SandboxHandle, running_sandbox
from proto.events import NodeClaimLaunched
from tenon.core.wellknown import NODECLAIM
from tenon.runtime.eventlog.jetstream import JetStreamEventLog
from tests.launcher_capi.launcher_support import (
    append_claim_event,
    catalog_events,
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


def read_log(path: Path) -> list[dict[str, object]]:
    lines = path.read_text().splitlines() if path.exists() else []
    out = []
    for line in lines:
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


def messages(path: Path) -> list[str]:
    return [str(entry.get("msg")) for entry in read_log(path)]


async def start(
    identity: str, nats: LocalNatsServer, sandbox: SandboxHandle, log_path: Path
) -> asyncio.subprocess.Process:
    env = {k: v for k, v in os.environ.items() if k not in PROXY_VARIABLES}
    env.update(
        {
            "TENON_NATS_URL": nats.url,
            "TENON_MANAGEMENT_KUBECONFIG": str(sandbox.management_kubeconfig),
            "TENON_KUBECONFIG": str(sandbox.workload_kubeconfig),
            "TENON_HEALTH_PORT": "0",
            "TENON_IDENTITY": identity,
            "TENON_LOG_FORMAT": "json",
            "NO_PROXY": "127.0.0.1",
        }
    )
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        return await asyncio.create_subprocess_exec(
            sys.executable, "-m", "tenon.services.launcher_capi", env=env, stdout=fd, stderr=fd, cwd=str(REPO)
        )
    finally:
        os.close(fd)


async def stop(process: asyncio.subprocess.Process) -> None:
    if process.returncode is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        await asyncio.wait_for(process.wait(), 20)
    except TimeoutError:
        process.kill()
        await process.wait()


async def launched(event_log: JetStreamEventLog, claim: str) -> int:
    return sum(isinstance(e, NodeClaimLaunched) for e in await claim_events(event_log, claim))


async def test_two_replicas_act_once_and_the_standby_takes_over(
    nats_server: LocalNatsServer,
    jetstream_log: JetStreamEventLog,
    tmp_path: Path,
) -> None:
    logs = {name: tmp_path / f"{name}.log" for name in ("first", "second")}
    async with running_sandbox() as sb:
        store = sb.management_store
        store.create(md_rt(store), machine_deployment("c3-8"))
        await publish_nodeclasses(jetstream_log, nodeclass())
        first = await start("launcher-first", nats_server, sb, logs["first"])
        second = None
        try:
            await until(lambda: catalog_events(jetstream_log), timeout=20, what="the first replica's catalog")
            second = await start("launcher-second", nats_server, sb, logs["second"])
            await until(lambda: "starting" in messages(logs["second"]), timeout=20, what="second replica up")
            await append_claim_event(jetstream_log, planned("claim-1", "c3-8"))
            await until(lambda: launched(jetstream_log, "claim-1"), timeout=20, what="claim-1 Launched")
            assert "became leader" in messages(logs["first"])
            assert "became leader" not in messages(logs["second"])

            await stop(first)  # a clean stop releases the lease: the standby need not wait for it to expire
            await until(
                lambda: "became leader" in messages(logs["second"]),
                timeout=20,
                what="the second replica leads",
            )
            await append_claim_event(jetstream_log, planned("claim-2", "c3-8"))
            await until(lambda: launched(jetstream_log, "claim-2"), timeout=20, what="claim-2 Launched")
            await until(lambda: settled(jetstream_log), timeout=20, what="the standby handled the whole log")
            assert (await launched(jetstream_log, "claim-1"), await launched(jetstream_log, "claim-2")) == (
                1,
                1,
            )
            assert replicas_of(store, "c3-8") == 2
            owners = sorted(m["metadata"]["annotations"][NODECLAIM] for m in machines_of(store, "c3-8"))
            assert owners == ["claim-1", "claim-2"]
            assert "machinedeployment scaled" in messages(logs["second"])
        finally:
            await stop(first)
            if second is not None:
                await stop(second)
