"""The health and metrics server answers kubelet and Prometheus as documented: liveness follows the service's
event loop, readiness follows the registered checks, metrics render from the registry."""

from __future__ import annotations

import asyncio
import threading
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator

import aiohttp
import pytest
from prometheus_client import CollectorRegistry, Counter
from prometheus_client.parser import text_string_to_metric_families

from tenon.runtime.observability import Observability, ObservabilityConfigError, port_from_env


@pytest.fixture
async def server() -> AsyncIterator[Observability]:
    observability = Observability(
        0,
        "scheduler",
        host="127.0.0.1",
        registry=CollectorRegistry(),
        heartbeat_seconds=0.05,
        stall_seconds=0.3,
        check_timeout=0.3,
    )
    async with observability:
        yield observability


async def get(server: Observability, path: str, **headers: str) -> tuple[int, str, str]:
    async with (
        aiohttp.ClientSession() as session,
        session.get(server.url + path, headers=headers, timeout=aiohttp.ClientTimeout(total=10)) as response,
    ):
        return response.status, await response.text(), response.headers.get("Content-Type", "")


async def test_port_zero_binds_a_free_port_that_is_readable(server: Observability) -> None:
    assert server.port > 0
    assert server.url == f"http://127.0.0.1:{server.port}"
    status, body, _ = await get(server, "/healthz")
    assert (status, body) == (200, "ok\n")


async def test_readiness_with_no_checks_is_ready(server: Observability) -> None:
    status, body, _ = await get(server, "/readyz")
    assert status == 200
    assert body.endswith("scheduler: readyz check passed\n")


async def test_readiness_flips_with_a_check_and_lists_only_failing_ones(server: Observability) -> None:
    connected = {"nats": False}
    server.add_readiness_check("nats", lambda: (connected["nats"], "not connected to NATS"))
    server.add_readiness_check("leader", lambda: (True, ""))

    status, body, _ = await get(server, "/readyz")
    assert status == 503
    assert body.splitlines() == ["[-]nats failed: not connected to NATS", "scheduler: readyz check failed"]

    connected["nats"] = True
    status, body, _ = await get(server, "/readyz")
    assert status == 200

    status, body, _ = await get(server, "/readyz?verbose")
    assert body.splitlines() == ["[+]nats ok", "[+]leader ok", "scheduler: readyz check passed"]


async def test_async_checks_that_raise_or_hang_fail_with_the_reason(server: Observability) -> None:
    async def synced() -> tuple[bool, str]:
        return False, "caches not synced: nodes"

    async def hangs() -> tuple[bool, str]:
        await asyncio.Event().wait()
        return True, ""

    def broken() -> tuple[bool, str]:
        raise RuntimeError("lost the connection")

    server.add_readiness_check("caches", synced)
    server.add_readiness_check("leader", hangs)
    server.add_readiness_check("nats", broken)
    status, body, _ = await get(server, "/readyz")
    assert status == 503
    assert body.splitlines() == [
        "[-]caches failed: caches not synced: nodes",
        "[-]leader failed: no answer within 0.3 s",
        "[-]nats failed: check raised RuntimeError: lost the connection",
        "scheduler: readyz check failed",
    ]
    server.remove_readiness_check("leader")
    server.remove_readiness_check("nats")
    server.add_readiness_check("caches", lambda: (True, ""))  # same name: replaces the failing one
    status, _, _ = await get(server, "/readyz")
    assert status == 200


def _fetch_in_thread(url: str, after: threading.Event, delay: float, into: dict[str, object]) -> None:
    after.wait()
    time.sleep(delay)  # this thread's own pause, while the service loop is blocked
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            into["status"], into["body"] = response.status, response.read().decode()
    except urllib.error.HTTPError as err:
        into["status"], into["body"] = err.code, err.read().decode()


def hog_the_loop(seconds: float) -> None:
    """A handler that blocks its event loop (the bug liveness exists to catch)."""
    time.sleep(seconds)


async def test_liveness_fails_while_the_service_loop_is_blocked_and_recovers(server: Observability) -> None:
    blocked = threading.Event()
    seen: dict[str, object] = {}
    probe = threading.Thread(target=_fetch_in_thread, args=(server.url + "/healthz", blocked, 0.8, seen))
    probe.start()
    blocked.set()
    hog_the_loop(2.0)
    await asyncio.to_thread(probe.join)
    assert seen["status"] == 503
    assert "scheduler: event loop stalled, no heartbeat for" in str(seen["body"])

    # once the loop turns again the heartbeat resumes and liveness passes
    for _ in range(100):
        status, _, _ = await get(server, "/healthz")
        if status == 200:
            break
        await asyncio.sleep(0.05)
    assert status == 200


async def test_metrics_render_the_registry_as_prometheus_text_and_openmetrics(server: Observability) -> None:
    created = Counter(
        "karpenter_nodeclaims_created_total", "created", ["nodepool", "reason"], registry=server.registry
    )
    created.labels(nodepool="default", reason="provisioned").inc(2)

    status, body, content_type = await get(server, "/metrics")
    assert status == 200
    assert content_type.startswith("text/plain")
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(body)
        for s in family.samples
    }
    assert (
        samples[("karpenter_nodeclaims_created_total", (("nodepool", "default"), ("reason", "provisioned")))]
        == 2
    )
    assert ("tenon_event_loop_lag_seconds", ()) in samples

    status, body, content_type = await get(server, "/metrics", Accept="application/openmetrics-text")
    assert content_type.startswith("application/openmetrics-text")
    assert body.rstrip().endswith("# EOF")


async def test_a_busy_port_is_a_clear_error_naming_the_setting(server: Observability) -> None:
    clash = Observability(server.port, "disruption", host="127.0.0.1", registry=CollectorRegistry())
    with pytest.raises(ObservabilityConfigError, match=r"TENON_HEALTH_PORT: cannot serve .*127\.0\.0\.1:\d+"):
        await clash.start()
    status, _, _ = await get(server, "/healthz")  # the first server is unaffected
    assert status == 200


async def test_stop_closes_the_port() -> None:
    observability = Observability(0, "pod-watcher", host="127.0.0.1", registry=CollectorRegistry())
    await observability.start()
    url = observability.url
    await observability.stop()
    with pytest.raises(aiohttp.ClientConnectionError):
        async with aiohttp.ClientSession() as session, session.get(url + "/healthz"):
            pass


def test_port_comes_from_the_environment() -> None:
    assert port_from_env({}) == 8081
    assert port_from_env({"TENON_HEALTH_PORT": "0"}) == 0
    assert port_from_env({"TENON_HEALTH_PORT": " 9090 "}) == 9090
    for bad in ("http", "-1", "70000"):
        with pytest.raises(ObservabilityConfigError, match=rf"TENON_HEALTH_PORT: .* got '{bad}'"):
            port_from_env({"TENON_HEALTH_PORT": bad})
    observability = Observability(service="x", env={"TENON_HEALTH_PORT": "9191", "TENON_HEALTH_HOST": "::1"})
    assert (observability.port, observability.host) == (9191, "::1")
    assert observability.url == "http://[::1]:9191"
