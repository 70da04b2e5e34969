"""One small HTTP server per process: ``/healthz``, ``/readyz`` and ``/metrics``, for kubelet and Prometheus.

* ``/healthz`` (liveness): 200 while the service's event loop keeps turning. A heartbeat task on that loop
  ticks every ``heartbeat_seconds``; when the last tick is older than ``stall_seconds`` the answer is 503
  saying for how long the loop has been stuck.
* ``/readyz`` (readiness): 200 when every named check the runtime registered passes. A check is a callable
  (plain or async) returning ``(ok, reason)``; one that raises or does not answer within ``check_timeout``
  fails with that as its reason. Checks run on the service's loop, so a loop too busy to run them is not
  ready either. The body lists the failing checks one line each, like the kube-apiserver's ``/readyz``
  (``[-]nats failed: disconnected``); ``?verbose`` lists the passing ones too.
* ``/metrics``: the registry in the Prometheus text format, or OpenMetrics when the scraper asks for it.

The server (aiohttp) runs on an event loop of its own in a daemon thread: a service loop blocked by a long
computation still gets a truthful 503 and its metrics scraped, instead of a probe timeout that says nothing.
The port comes from ``TENON_HEALTH_PORT`` (default 8081; 0 picks a free port, readable as ``.port`` once
started; give a host with it, or each address family may get a port of its own) and the address from
``TENON_HEALTH_HOST`` (default: every interface, IPv4 and IPv6).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector

from tenon.runtime.observability.metrics import REGISTRY

log = logging.getLogger("tenon.observability")

DEFAULT_PORT = 8081
PORT_ENV = "TENON_HEALTH_PORT"
HOST_ENV = "TENON_HEALTH_HOST"

CheckResult = tuple[bool, str]
ReadinessCheck = Callable[[], CheckResult | Awaitable[CheckResult]]
"""``() -> (ok, reason)``, plain or async; ``reason`` says why when not ok (and may be empty when ok)."""


class ObservabilityConfigError(ValueError):
    """A health port or address that cannot be used; the message names the setting."""


def port_from_env(env: Mapping[str, str] | None = None) -> int:
    """``TENON_HEALTH_PORT`` as a port number (default 8081; 0 = any free port)."""
    raw = (os.environ if env is None else env).get(PORT_ENV, "").strip()
    if not raw:
        return DEFAULT_PORT
    try:
        port = int(raw)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise ObservabilityConfigError(f"{PORT_ENV}: must be a port number from 0 to 65535, got {raw!r}")
    return port


@dataclass(frozen=True)
class CheckOutcome:
    name: str
    ok: bool
    reason: str


class _LoopLagCollector(Collector):
    """``tenon_event_loop_lag_seconds``: how late the last heartbeat woke up (a busy loop answers late)."""

    def __init__(self, owner: Observability) -> None:
        self.owner = owner

    def collect(self) -> Iterator[GaugeMetricFamily]:
        yield GaugeMetricFamily(
            "tenon_event_loop_lag_seconds",
            "How much later than scheduled the service's event loop ran its last heartbeat, in seconds.",
            value=self.owner.loop_lag,
        )


class Observability:
    """The health and metrics server of one service process: ``async with Observability(...)``, or
    ``await start()`` / ``await stop()`` on the service's loop. Readiness checks may be added at any time; a
    check added under an existing name replaces it."""

    def __init__(
        self,
        port: int | None = None,
        service: str = "tenon",
        *,
        host: str | None = None,
        registry: CollectorRegistry | None = None,
        heartbeat_seconds: float = 1.0,
        stall_seconds: float = 10.0,
        check_timeout: float = 2.0,
        env: Mapping[str, str] | None = None,
    ) -> None:
        environment = os.environ if env is None else env
        self.service = service
        self.configured_port = port_from_env(environment) if port is None else port
        if not 0 <= self.configured_port <= 65535:
            raise ObservabilityConfigError(
                f"health port: must be from 0 to 65535, got {self.configured_port}"
            )
        self.host = host if host is not None else environment.get(HOST_ENV, "")
        self.registry = registry if registry is not None else REGISTRY
        self.heartbeat_seconds = heartbeat_seconds
        self.stall_seconds = stall_seconds
        self.check_timeout = check_timeout
        self.loop_lag = 0.0
        self._checks: dict[str, ReadinessCheck] = {}
        self._last_beat = time.monotonic()
        self._service_loop: asyncio.AbstractEventLoop | None = None
        self._heartbeat: asyncio.Task[None] | None = None
        self._thread: threading.Thread | None = None
        self._server_loop: asyncio.AbstractEventLoop | None = None
        self._bound_port: int | None = None
        self._start_error: str | None = None
        self._lag_collector = _LoopLagCollector(self)

    # --- readiness (runs on the service's loop) -------------------------------------------------------------
    def add_readiness_check(self, name: str, check: ReadinessCheck) -> None:
        if not name or any(c.isspace() for c in name):
            raise ValueError(f"readiness check name must be a non-empty word, got {name!r}")
        self._checks[name] = check

    def remove_readiness_check(self, name: str) -> None:
        self._checks.pop(name, None)

    async def readiness(self) -> list[CheckOutcome]:
        """Every registered check's outcome, in registration order (run concurrently)."""
        checks = list(self._checks.items())
        results = await asyncio.gather(*(self._run_check(check) for _, check in checks))
        return [
            CheckOutcome(name, ok, reason) for (name, _), (ok, reason) in zip(checks, results, strict=True)
        ]

    async def _run_check(self, check: ReadinessCheck) -> CheckResult:
        try:
            result: Any = check()
            if inspect.isawaitable(result):
                result = await asyncio.wait_for(result, self.check_timeout)
            ok, reason = result
            return bool(ok), str(reason or "")
        except TimeoutError:
            return False, f"no answer within {self.check_timeout:g} s"
        except Exception as exc:
            return False, f"check raised {type(exc).__name__}: {exc}"

    # --- liveness (the heartbeat runs on the service's loop) ------------------------------------------------
    def stalled_for(self) -> float:
        """Seconds since the heartbeat last ticked."""
        return time.monotonic() - self._last_beat

    async def _beat(self) -> None:
        while True:
            expected = time.monotonic() + self.heartbeat_seconds
            await asyncio.sleep(self.heartbeat_seconds)
            now = time.monotonic()
            self.loop_lag = max(0.0, now - expected)
            self._last_beat = now

    # --- HTTP handlers (run on the server's own loop) -------------------------------------------------------
    async def _healthz(self, request: web.Request) -> web.Response:
        if self._heartbeat is None or self._heartbeat.done():
            return web.Response(status=503, text=f"{self.service}: heartbeat not running\n")
        stalled = self.stalled_for()
        if stalled > self.stall_seconds:
            return web.Response(
                status=503, text=f"{self.service}: event loop stalled, no heartbeat for {stalled:.1f} s\n"
            )
        return web.Response(text="ok\n")

    async def _outcomes_from_service_loop(self) -> list[CheckOutcome]:
        loop = self._service_loop
        if loop is None or loop.is_closed():
            return [CheckOutcome("event-loop", False, "the service's event loop is not running")]
        future = asyncio.run_coroutine_threadsafe(self.readiness(), loop)
        budget = self.check_timeout + 1.0
        try:
            return await asyncio.wait_for(asyncio.wrap_future(future), budget)
        except TimeoutError:
            future.cancel()
            return [CheckOutcome("event-loop", False, f"too busy to run the checks within {budget:g} s")]

    async def _readyz(self, request: web.Request) -> web.Response:
        outcomes = await self._outcomes_from_service_loop()
        verbose = "verbose" in request.query
        lines = [
            f"[+]{o.name} ok" if o.ok else f"[-]{o.name} failed: {o.reason or 'not ready'}"
            for o in outcomes
            if verbose or not o.ok
        ]
        ready = all(o.ok for o in outcomes)
        lines.append(f"{self.service}: readyz check {'passed' if ready else 'failed'}")
        return web.Response(status=200 if ready else 503, text="\n".join(lines) + "\n")

    async def _metrics(self, request: web.Request) -> web.Response:
        encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
        response = web.Response(body=encoder(self.registry))
        response.headers["Content-Type"] = content_type
        return response

    def _app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        app.router.add_get("/metrics", self._metrics)
        return app

    # --- the server thread ----------------------------------------------------------------------------------
    def _serve(self, opened: threading.Event) -> None:
        loop = asyncio.new_event_loop()
        self._server_loop = loop
        runner = web.AppRunner(self._app(), access_log=None, handle_signals=False)
        try:
            loop.run_until_complete(runner.setup())
            try:
                # no host: every interface, IPv4 and IPv6 (a pod's IP may be either)
                site = web.TCPSite(runner, self.host or None, self.configured_port)
                loop.run_until_complete(site.start())
            except OSError as exc:
                where = f"{self.host or '*'}:{self.configured_port}"
                self._start_error = (
                    f"{PORT_ENV}: cannot serve health and metrics on {where}: {exc.strerror or exc}"
                )
                return
            self._bound_port = int(runner.addresses[0][1])
            opened.set()
            loop.run_forever()
        finally:
            loop.run_until_complete(runner.cleanup())
            loop.close()
            opened.set()

    # --- lifecycle (called on the service's loop) -----------------------------------------------------------
    @property
    def port(self) -> int:
        """The bound port once started (the one the system picked for 0), else the configured one."""
        return self._bound_port if self._bound_port is not None else self.configured_port

    @property
    def url(self) -> str:
        host = "127.0.0.1" if self.host in ("", "0.0.0.0", "::") else self.host
        return f"http://{f'[{host}]' if ':' in host else host}:{self.port}"

    async def start(self) -> None:
        """Start the heartbeat on the calling loop and the server on its thread; raises
        :class:`ObservabilityConfigError` when the port cannot be bound."""
        if self._thread is not None:
            return
        self._service_loop = asyncio.get_running_loop()
        self._last_beat = time.monotonic()
        self._heartbeat = asyncio.create_task(self._beat(), name=f"heartbeat:{self.service}")
        opened = threading.Event()
        self._start_error = None
        self._thread = threading.Thread(
            target=self._serve, args=(opened,), name=f"observability:{self.service}", daemon=True
        )
        self._thread.start()
        await asyncio.to_thread(opened.wait)
        if self._start_error is not None:
            error = self._start_error
            await self.stop()
            raise ObservabilityConfigError(error)
        try:
            self.registry.register(self._lag_collector)
        except ValueError:
            log.warning("tenon_event_loop_lag_seconds already registered by another server in this process")
        log.info("serving health and metrics", extra={"service": self.service, "address": self.url})

    async def stop(self) -> None:
        if self._heartbeat is not None:
            self._heartbeat.cancel()
            await asyncio.gather(self._heartbeat, return_exceptions=True)
            self._heartbeat = None
        if self._thread is not None:
            loop = self._server_loop
            if loop is not None and not loop.is_closed():
                loop.call_soon_threadsafe(loop.stop)
            await asyncio.to_thread(self._thread.join)
            self._thread = None
            self._server_loop = None
            self._bound_port = None
            try:
                self.registry.unregister(self._lag_collector)
            except KeyError:
                pass  # never registered: another server held the name

    async def __aenter__(self) -> Observability:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()
