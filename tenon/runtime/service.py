"""How every tenon service process runs: logs, broker, leader election, signals, graceful stop.

A service is an async function ``work(ctx)`` that runs only while its replica is the leader of the service's
group (so two replicas never act twice) and returns when ``ctx.stopping`` is set. :func:`serve` wires the rest:
JSON logs, a provisioned event log, the election, SIGINT/SIGTERM to a clean stop.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from tenon.runtime.eventlog.connection import ConnectionSettings
from tenon.runtime.eventlog.jetstream import JetStreamEventLog
from tenon.runtime.eventlog.tracing import configure_tracing
from tenon.runtime.leader import LeaderElection
from tenon.runtime.logs import configure_logging

log = logging.getLogger("tenon.service")


@dataclass
class ServiceContext:
    name: str
    identity: str
    event_log: JetStreamEventLog
    stopping: asyncio.Event = field(default_factory=asyncio.Event)


Work = Callable[[ServiceContext], Awaitable[None]]


def default_identity(name: str) -> str:
    return os.environ.get("TENON_IDENTITY") or f"{name}@{socket.gethostname()}:{os.getpid()}"


async def serve(
    name: str,
    work: Work,
    *,
    connection: ConnectionSettings | None = None,
    lease_ttl: float = 6.0,
    identity: str | None = None,
) -> None:
    """Run ``work`` as the leader of ``name`` until SIGINT/SIGTERM."""
    identity = identity or default_identity(name)
    connection = connection or ConnectionSettings.from_env(name=f"tenon-{name}")
    event_log = await JetStreamEventLog.connect(connection)
    ctx = ServiceContext(name, identity, event_log)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, ctx.stopping.set)
    election = LeaderElection(event_log.js, group=name, identity=identity, ttl=lease_ttl)

    async def lead() -> None:
        await work(ctx)

    log.info("starting", extra={"identity": identity, "broker": connection.describe()})
    campaign = asyncio.create_task(election.run(lead))
    stop = asyncio.create_task(ctx.stopping.wait())
    await asyncio.wait({campaign, stop}, return_when=asyncio.FIRST_COMPLETED)
    if not campaign.done():
        if election.is_leader:
            # let the leader's work see ``stopping`` and drain before the campaign is torn down
            try:
                await asyncio.wait_for(asyncio.shield(campaign), timeout=30)
            except TimeoutError:
                campaign.cancel()
        else:
            campaign.cancel()
        await asyncio.gather(campaign, return_exceptions=True)
    stop.cancel()
    await event_log.close()
    log.info("stopped", extra={"identity": identity})


def run_service(name: str, work: Work) -> int:
    configure_logging(name)
    configure_tracing(name)
    asyncio.run(serve(name, work))
    return 0


def workload_service_main(
    name: str,
    work: Callable[[ServiceContext, str | None], Awaitable[None]],
    description: str,
    argv: list[str] | None = None,
) -> int:
    """``python -m tenon.services.<name> [--kubeconfig PATH]`` for a service that talks to the workload cluster."""
    parser = argparse.ArgumentParser(
        prog=f"python -m tenon.services.{name.replace('-', '_')}", description=description
    )
    parser.add_argument(
        "--kubeconfig",
        default=os.environ.get("TENON_KUBECONFIG"),
        help="kubeconfig of the workload cluster (default: TENON_KUBECONFIG, else in-cluster)",
    )
    args = parser.parse_args(argv)

    async def run(ctx: ServiceContext) -> None:
        await work(ctx, args.kubeconfig)

    return run_service(name, run)
