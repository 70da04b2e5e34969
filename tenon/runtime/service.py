"""How every tenon service process runs: settings, logs, broker, leader election, signals, loud failures.

A service is a :class:`ServiceDefinition`: its name, its settings class (a dataclass of
:func:`.settings.setting` fields that extends :class:`CommonSettings`) and its ``work(ctx, settings)``, an
async function that runs only while its replica leads the service's group (so two replicas never act twice)
and returns when ``ctx.stopping`` is set. A service that decides from the log builds its work with
:func:`decider_work` from a decider and an executor (:mod:`.decider`); that is the usual case, and such a
replica is a warm standby while it does not lead: its state is rebuilt before it campaigns and kept caught up,
so a failover is a decision, not a rebuild.

:func:`main` does the rest, identically for every service: settings from flags and the environment (a bad
value is one line naming the variable, exit 2), JSON logs, traces, a provisioned event log with the configured
retention, the election, SIGINT/SIGTERM to a clean stop. When the leader's work fails it says why (with the
traceback), gives up the lease and campaigns again after a backoff; after ``max_failures`` failures in a row
the process exits 1 so that its supervisor restarts it rather than leaving it alive and useless.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import sys
from collections.abc import Awaitable, Callable, Coroutine, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from tenon.runtime.collector import pace_for_service
from tenon.runtime.decider import BaseExecutor, Decider, DeciderRuntime, Executor, RuntimeSettings
from tenon.runtime.eventlog.connection import ConnectionSettings
from tenon.runtime.eventlog.interface import EventLog
from tenon.runtime.eventlog.jetstream import JetStreamEventLog
from tenon.runtime.eventlog.provisioning import default_streams
from tenon.runtime.eventlog.records import EventLogError
from tenon.runtime.eventlog.tracing import configure_tracing
from tenon.runtime.leader import LeaderElection, ServiceFailed
from tenon.runtime.logs import configure_logging
from tenon.runtime.observability import Observability, ObservabilityConfigError
from tenon.runtime.settings import SettingsError, load, setting

log = logging.getLogger("tenon.service")

DAY = 86400.0


@dataclass(frozen=True)
class CommonSettings:
    """What every service reads: the broker, the event log's retention, identity, leadership, snapshots."""

    nats_url: str = setting("TENON_NATS_URL", "nats://127.0.0.1:4222", "NATS servers, comma-separated")
    nats_user: str | None = setting("TENON_NATS_USER", None, "NATS user (with TENON_NATS_PASSWORD)")
    nats_password: str | None = setting("TENON_NATS_PASSWORD", None, "NATS password")
    nats_token: str | None = setting("TENON_NATS_TOKEN", None, "NATS token")
    nats_creds: str | None = setting("TENON_NATS_CREDS", None, "NATS .creds file (JWT + nkey)", kind="path")
    nats_nkey_seed: str | None = setting("TENON_NATS_NKEY_SEED", None, "NATS nkey seed file", kind="path")
    nats_tls_ca: str | None = setting(
        "TENON_NATS_TLS_CA", None, "CA bundle for the broker's TLS", kind="path"
    )
    nats_tls_cert: str | None = setting("TENON_NATS_TLS_CERT", None, "client certificate (mTLS)", kind="path")
    nats_tls_key: str | None = setting("TENON_NATS_TLS_KEY", None, "client key (mTLS)", kind="path")
    events_max_age: float = setting(
        "TENON_EVENTS_MAX_AGE",
        14 * DAY,
        "how long the event log keeps events (snapshots and resyncs keep state beyond it)",
        kind="duration",
        minimum=1,
    )
    events_replicas: int = setting(
        "TENON_EVENTS_REPLICAS",
        1,
        "replicas of the event streams (3 on a NATS cluster)",
        kind="int",
        minimum=1,
        maximum=5,
    )
    events_duplicate_window: float = setting(
        "TENON_EVENTS_DUPLICATE_WINDOW",
        120.0,
        "how long the broker remembers event ids to drop repeats (at most the max age)",
        kind="duration",
        minimum=0.1,
    )
    identity: str | None = setting(
        "TENON_IDENTITY", None, "this replica's name in the election (default host:pid)"
    )
    lease_ttl: float = setting(
        "TENON_LEASE_TTL",
        6.0,
        "leadership lease; a dead leader is replaced after it",
        kind="duration",
        minimum=1,
    )
    max_failures: int = setting(
        "TENON_MAX_FAILURES",
        5,
        "failed leadership terms in a row before the process exits 1",
        kind="int",
        minimum=1,
    )
    snapshot_every: int = setting(
        "TENON_SNAPSHOT_EVERY",
        1000,
        "snapshot the service's state after this many handled events",
        kind="int",
        minimum=1,
    )
    snapshot_interval: float = setting(
        "TENON_SNAPSHOT_INTERVAL",
        60.0,
        "... or this long after the last snapshot",
        kind="duration",
        minimum=0.1,
    )
    health_port: int = setting(
        "TENON_HEALTH_PORT",
        8081,
        "port of /healthz, /readyz and /metrics (0: any free port)",
        kind="int",
        minimum=0,
        maximum=65535,
    )
    health_host: str | None = setting(
        "TENON_HEALTH_HOST", None, "address the health port listens on (default: all)"
    )
    log_format: str = setting("TENON_LOG_FORMAT", "json", "json, or text for a terminal")
    log_level: str = setting("TENON_LOG_LEVEL", "INFO", "DEBUG, INFO, WARNING or ERROR")

    def __post_init__(self) -> None:
        if self.log_format not in ("json", "text"):
            raise SettingsError(f"TENON_LOG_FORMAT: {self.log_format!r} is not json or text")
        if self.log_level.upper() not in ("DEBUG", "INFO", "WARNING", "ERROR"):
            raise SettingsError(f"TENON_LOG_LEVEL: {self.log_level!r} is not DEBUG, INFO, WARNING or ERROR")

    def connection(self, name: str) -> ConnectionSettings:
        return ConnectionSettings(
            servers=tuple(s.strip() for s in self.nats_url.split(",") if s.strip()),
            name=name,
            user=self.nats_user,
            password=self.nats_password,
            token=self.nats_token,
            creds_file=self.nats_creds,
            nkey_seed_file=self.nats_nkey_seed,
            tls_ca_file=self.nats_tls_ca,
            tls_cert_file=self.nats_tls_cert,
            tls_key_file=self.nats_tls_key,
        )

    def runtime(self, tick_seconds: float = 0.0) -> RuntimeSettings:
        return RuntimeSettings(
            tick_seconds=tick_seconds,
            snapshot_every=self.snapshot_every,
            snapshot_interval=self.snapshot_interval,
        )

    @property
    def resync_interval(self) -> float:
        """How often writers of cluster facts re-assert them: well inside the log's retention."""
        return max(1.0, self.events_max_age / 4)


def in_cluster_or(kubeconfig: str | None, variable: str = "TENON_KUBECONFIG") -> None:
    """For a setting that names a cluster: without a kubeconfig, the service must be running in a cluster (its
    service account); anywhere else it cannot work, and says so before it starts."""
    if kubeconfig is None and not os.environ.get("KUBERNETES_SERVICE_HOST"):
        raise SettingsError(f"{variable}: not set and not running in a cluster: say which cluster to use")


SettingsT = TypeVar("SettingsT", bound=CommonSettings)


@dataclass
class ServiceContext:
    name: str
    identity: str
    event_log: EventLog
    stopping: asyncio.Event = field(default_factory=asyncio.Event)
    observability: Observability | None = None
    """Where the leader's work adds its readiness checks (None when run without a health port, in tests)."""
    warm: DeciderRuntime[Any] | None = None
    """The runtime a standby keeps caught up for this replica's next term (see :class:`DeciderWork`)."""
    leading: bool = False
    """A term of this replica is under way (its standby steps aside)."""
    long_kinds: set[Hashable] = field(default_factory=set)
    """Kinds of decision seen to take long in any of this replica's runtimes: decided off the event loop in
    every later one too (:meth:`DeciderRuntime._decided`)."""

    def readiness(self, name: str, check: Callable[[], tuple[bool, str]]) -> None:
        if self.observability is not None:
            self.observability.add_readiness_check(name, check)


Work = Callable[[ServiceContext, Any], Awaitable[None]]
Standby = Callable[[ServiceContext, SettingsT, asyncio.Event], Coroutine[Any, Any, None]]


@dataclass(frozen=True)
class ServiceDefinition(Generic[SettingsT]):
    name: str
    description: str
    settings: type[SettingsT]
    work: Callable[[ServiceContext, SettingsT], Awaitable[None]]
    decider: Callable[[SettingsT], Decider[Any]] | None = None
    """The pure decision function, for ``tenon replay`` (None: the service decides nothing from the log)."""
    preflight: Callable[[SettingsT], None] | None = None
    """Checks of the environment before the service starts (raise SettingsError: one line, exit 2); not run by
    ``tenon replay``, which needs no cluster."""

    @property
    def standby(self) -> Standby[SettingsT] | None:
        """What a replica does while it does not lead (a decider service keeps its state warm)."""
        return self.work.standby if isinstance(self.work, DeciderWork) else None


class DeciderWork(Generic[SettingsT]):
    """A decider service's work, as a replica runs it: one :class:`DeciderRuntime` per leadership term, and
    between terms (and before the first campaign) a **warm standby**: a runtime rebuilt from the snapshot and
    kept caught up with what the leader has handled, its decider's caches warmed, so that a replica taking the
    lease decides at once instead of rebuilding first (a 5,000-node cluster's first decision after a cold
    rebuild took seconds). A term's runtime is not reused after the term: the next standby rebuilds from the
    snapshot the term wrote as it ended.

    ``make_executor`` returns the executor and a function that releases what it opened (clients).
    ``claim_gauges``: this service publishes the claims gauges (one service does)."""

    def __init__(
        self,
        make_decider: Callable[[SettingsT], Decider[Any]],
        make_executor: Callable[
            [ServiceContext, SettingsT, Decider[Any]],
            Awaitable[tuple[Executor, Callable[[], Awaitable[None]]]],
        ],
        tick_seconds: Callable[[SettingsT], float],
        claim_gauges: bool,
    ) -> None:
        self.make_decider = make_decider
        self.make_executor = make_executor
        self.tick_seconds = tick_seconds
        self.claim_gauges = claim_gauges

    def _runtime(self, ctx: ServiceContext, settings: SettingsT, executor: Executor) -> DeciderRuntime[Any]:
        return DeciderRuntime(
            self.make_decider(settings),
            executor,
            ctx.event_log,
            settings.runtime(self.tick_seconds(settings)),
            claim_gauges=self.claim_gauges,
            long_kinds=ctx.long_kinds,
        )

    async def __call__(self, ctx: ServiceContext, settings: SettingsT) -> None:
        """One term: on the standby's runtime when there is one (the tail since its last step is folded at the
        start of the term), else on a new one (snapshot and tail)."""
        ctx.leading = True
        runtime, ctx.warm = ctx.warm, None
        try:
            if runtime is None:
                runtime = self._runtime(ctx, settings, BaseExecutor())
            executor, close = await self.make_executor(ctx, settings, runtime.decider)
            runtime.executor = executor
            try:
                await runtime.run(ctx.stopping)
            finally:
                await close()
        finally:
            ctx.leading = False

    async def standby(self, ctx: ServiceContext, settings: SettingsT, warmed: asyncio.Event) -> None:
        """Keep ``ctx.warm`` caught up every third of the lease while this replica does not lead; ``warmed``
        is set after the first step, whatever its outcome (a replica that cannot rebuild campaigns anyway and
        its term says why, loudly)."""
        interval = max(0.5, settings.lease_ttl / 3)
        while not ctx.stopping.is_set():
            if not ctx.leading:
                await self._standby_step(ctx, settings)
            warmed.set()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(interval):  # not wait_for: on 3.11 it can swallow a cancel
                    await ctx.stopping.wait()

    async def _standby_step(self, ctx: ServiceContext, settings: SettingsT) -> None:
        """One catch-up. The runtime is offered to a term before it starts (a term that begins meanwhile takes
        it and waits for the step, rather than rebuilding a second state beside it)."""
        runtime = ctx.warm = ctx.warm or self._runtime(ctx, settings, BaseExecutor())
        try:
            await runtime.catch_up()
        except Exception as exc:  # the broker away: the next step (or the term) starts afresh
            log.warning("standby could not catch up", extra={"service": ctx.name, "error": str(exc)})
            if ctx.warm is runtime:
                ctx.warm = None


def decider_work(
    make_decider: Callable[[SettingsT], Decider[Any]],
    make_executor: Callable[
        [ServiceContext, SettingsT, Decider[Any]], Awaitable[tuple[Executor, Callable[[], Awaitable[None]]]]
    ],
    tick_seconds: Callable[[SettingsT], float] = lambda _: 0.0,
    *,
    claim_gauges: bool = False,
) -> DeciderWork[SettingsT]:
    """A decider service's work (see :class:`DeciderWork`)."""
    return DeciderWork(make_decider, make_executor, tick_seconds, claim_gauges)


def default_identity(name: str) -> str:
    return f"{name}@{socket.gethostname()}:{os.getpid()}"


async def serve(definition: ServiceDefinition[SettingsT], settings: SettingsT) -> int:
    """Run ``definition`` as the leader of its group until SIGINT/SIGTERM; the process exit code."""
    identity = settings.identity or default_identity(definition.name)
    observability = Observability(settings.health_port, definition.name, host=settings.health_host or "")
    await observability.start()  # probes answer while the broker is reached and the state rebuilt
    try:
        return await _serve(definition, settings, identity, observability)
    finally:
        await observability.stop()


async def _serve(
    definition: ServiceDefinition[SettingsT], settings: SettingsT, identity: str, observability: Observability
) -> int:
    connection = settings.connection(f"tenon-{definition.name}")
    streams = default_streams(
        replicas=settings.events_replicas,
        max_age=settings.events_max_age,
        duplicate_window=min(settings.events_duplicate_window, settings.events_max_age),
    )
    event_log = await JetStreamEventLog.connect(connection, streams)
    ctx = ServiceContext(definition.name, identity, event_log, observability=observability)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, ctx.stopping.set)
    election = LeaderElection(
        event_log,
        group=definition.name,
        identity=identity,
        ttl=settings.lease_ttl,
        max_failures=settings.max_failures,
    )

    async def lead() -> None:
        await definition.work(ctx, settings)

    log.info("starting", extra={"identity": identity, "broker": connection.describe()})
    code = 0
    standing = await _stand_by(definition, ctx, settings)
    campaign = asyncio.create_task(election.run(lead))
    stop = asyncio.create_task(ctx.stopping.wait())
    await asyncio.wait({campaign, stop}, return_when=asyncio.FIRST_COMPLETED)
    if campaign.done():
        code = _campaign_outcome(campaign)
    elif election.is_leader:
        # let the leader's work see ``stopping`` and drain before the campaign is torn down
        try:
            await asyncio.wait_for(asyncio.shield(campaign), timeout=30)
        except TimeoutError:
            campaign.cancel()
    else:
        campaign.cancel()
    await asyncio.gather(campaign, return_exceptions=True)
    stop.cancel()
    if standing is not None:
        standing.cancel()
        await asyncio.gather(standing, return_exceptions=True)
    await event_log.close()
    log.info("stopped", extra={"identity": identity, "exit_code": code})
    return code


async def _stand_by(
    definition: ServiceDefinition[SettingsT], ctx: ServiceContext, settings: SettingsT
) -> asyncio.Task[None] | None:
    """Start the replica's standby and wait for its first step: a replica campaigns once its state is rebuilt,
    so the lease never goes to a replica that would hold it while rebuilding (a warm one is waiting)."""
    standby = definition.standby
    if standby is None:
        return None
    warmed = asyncio.Event()
    task = asyncio.create_task(standby(ctx, settings, warmed), name=f"standby:{definition.name}")
    ready = asyncio.create_task(warmed.wait())
    await asyncio.wait({task, ready, asyncio.create_task(ctx.stopping.wait())}, return_when="FIRST_COMPLETED")
    ready.cancel()
    return task


def _campaign_outcome(campaign: asyncio.Task[None]) -> int:
    if campaign.cancelled():
        return 0
    error = campaign.exception()
    if isinstance(error, ServiceFailed):
        log.error("giving up: the service keeps failing", extra={"why": str(error)})
        return 1
    if error is not None:
        log.error("the election failed", exc_info=error)
        return 1
    return 0


def main(definition: ServiceDefinition[Any], argv: Sequence[str] | None = None) -> int:
    """``tenon run <service>`` and ``python -m tenon.services.<service>``."""
    try:
        settings = load(
            definition.settings,
            argv,
            prog=f"tenon run {definition.name}",
            description=definition.description,
        )
        if definition.preflight is not None:
            definition.preflight(settings)
    except SettingsError as exc:
        print(f"tenon run {definition.name}: {exc}", file=sys.stderr)
        return 2
    configure_logging(definition.name, settings.log_level, settings.log_format)
    configure_tracing(definition.name)
    pace_for_service()
    try:
        return asyncio.run(serve(definition, settings))
    except ObservabilityConfigError as exc:
        print(f"tenon run {definition.name}: {exc}", file=sys.stderr)
        return 2
    except EventLogError as exc:  # the broker cannot be reached or provisioned: one line, not a traceback
        log.error("cannot go on without the event log", extra={"error": str(exc)})
        print(f"tenon run {definition.name}: {exc}", file=sys.stderr)
        return 1
