"""Sandbox API server: write throughput and watch fan-out latency (``make bench``, suite ``sandbox``).

Scenario (issue 4): N pods (1,000; 200 with ``--quick``) are created while 5 watchers observe the pod
collection. Two measurements:

``http``
    The sandbox runs as its own process (``python -m devtools.sandbox --no-controllers``), as it does under an
    end-to-end benchmark. This process opens 5 raw HTTP watch streams, then creates the pods with 32 requests
    in flight over keep-alive connections. Throughput is pods / (last create answered - first create sent).
    Latency is, per pod and watcher, the time from sending the create request to reading that pod's ADDED
    line on the stream, so it includes the HTTP round trip, the store commit and the fan-out.
``in-process``
    The same load on a :class:`~devtools.sandbox.store.Store` called directly, with 5 in-process
    :class:`~devtools.sandbox.store.Watch` consumers: the cost of the store itself, as the sandbox's own
    controllers see it.

Targets: >= 2,000 writes/s and p99 write-to-event latency < 50 ms, on the HTTP path (the stricter one). The
full run also grows the HTTP cluster to 10,000 pods and reports the time of one full ``GET /api/v1/pods``
(an informer's initial list at end-to-end scale); that figure has no target. Because the machine is shared,
the suite also reports the server process's CPU time per write (from ``/proc``) and the load average, which
say whether a slow run was the sandbox or its neighbours.
"""

from __future__ import annotations

import asyncio
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import msgspec

from bench.suite import Suite, Target
from devtools.sandbox.store import Store

WATCHERS = 5
IN_FLIGHT = 32
_decode = msgspec.json.Decoder().decode
_encode = msgspec.json.Encoder().encode


def _pod(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": "bench", "tier": "web"}},
        "spec": {
            "containers": [
                {
                    "name": "app",
                    "image": "registry.example/app:1",
                    "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
                }
            ]
        },
    }


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


def _cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of a process (Linux ``/proc``); None where unavailable."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def _wait_ready(url: str, deadline: float) -> None:
    async with aiohttp.ClientSession() as session:
        while time.monotonic() < deadline:
            try:
                async with session.get(url + "/healthz") as response:
                    if response.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.05)
    raise RuntimeError(f"sandbox at {url} did not become ready")


@dataclass
class _Traffic:
    """What the HTTP run's writers and watchers share: send times, write-to-event latencies, counts."""

    count: int
    sent: dict[str, float] = field(default_factory=dict)
    latencies: list[float] = field(default_factory=list)
    received: list[int] = field(default_factory=lambda: [0] * WATCHERS)
    errors: int = 0
    done: asyncio.Event = field(default_factory=asyncio.Event)


async def _watch_adds(
    session: aiohttp.ClientSession, url: str, rv: str, traffic: _Traffic, index: int
) -> None:
    """One raw watch stream: the latency of every ADDED pod, until all ``count`` pods were seen."""
    async with session.get(
        url + "/api/v1/namespaces/default/pods",
        params={"watch": "true", "resourceVersion": rv, "timeoutSeconds": "600"},
    ) as response:
        while traffic.received[index] < traffic.count:
            line = await response.content.readline()
            if not line:
                break
            now = time.perf_counter()
            event = _decode(line)
            if event["type"] == "ADDED":
                traffic.latencies.append(now - traffic.sent[event["object"]["metadata"]["name"]])
                traffic.received[index] += 1
    if all(r >= traffic.count for r in traffic.received):
        traffic.done.set()


async def _write_pods(
    session: aiohttp.ClientSession, url: str, names: Iterator[str], traffic: _Traffic
) -> None:
    """Create pods one after the other, taking names from the iterator the other writers share."""
    for name in names:
        body = _encode(_pod(name))
        traffic.sent[name] = time.perf_counter()
        async with session.post(
            url + "/api/v1/namespaces/default/pods", data=body, headers={"Content-Type": "application/json"}
        ) as response:
            await response.read()
            if response.status != 201:
                traffic.errors += 1


async def _full_list_seconds(
    session: aiohttp.ClientSession, url: str, list_size: int, traffic: _Traffic
) -> float:
    """Grow to the end-to-end scale (10,000 pods) and time a full list, as an informer's initial sync does."""
    names = iter([f"bulk-{i:05d}" for i in range(max(0, list_size - traffic.count))])
    await asyncio.gather(*(_write_pods(session, url, names, traffic) for _ in range(IN_FLIGHT)))
    timings = []
    for _ in range(3):
        begin = time.perf_counter()
        async with session.get(url + "/api/v1/pods") as response:
            listed = len((await response.json(loads=_decode))["items"])
        timings.append(time.perf_counter() - begin)
    assert listed == list_size, listed
    return min(timings)


async def _http_run(url: str, count: int, list_size: int, server_pid: int) -> dict[str, Any]:
    traffic = _Traffic(count)
    connector = aiohttp.TCPConnector(limit=IN_FLIGHT + WATCHERS + 4)
    timeout = aiohttp.ClientTimeout(total=None, sock_read=None)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        async with session.get(url + "/api/v1/namespaces/default/pods") as response:
            rv = (await response.json())["metadata"]["resourceVersion"]
        watch_tasks = [
            asyncio.create_task(_watch_adds(session, url, rv, traffic, i)) for i in range(WATCHERS)
        ]
        await asyncio.sleep(0.3)  # let the streams open
        names = iter([f"bench-{i:05d}" for i in range(count)])
        cpu_before = _cpu_seconds(server_pid)
        started = time.perf_counter()
        await asyncio.gather(*(_write_pods(session, url, names, traffic) for _ in range(IN_FLIGHT)))
        written = time.perf_counter()
        try:
            await asyncio.wait_for(traffic.done.wait(), 30)
            cpu_after = _cpu_seconds(server_pid)
        finally:
            for task in watch_tasks:
                task.cancel()
            await asyncio.gather(*watch_tasks, return_exceptions=True)
        list_seconds = await _full_list_seconds(session, url, list_size, traffic) if list_size else None
    server_cpu = cpu_after - cpu_before if cpu_before is not None and cpu_after is not None else None
    return {
        "writes": count,
        "errors": traffic.errors,
        "seconds": written - started,
        "latencies": traffic.latencies,
        "events": sum(traffic.received),
        "list_seconds": list_seconds,
        "server_cpu_seconds": server_cpu,
    }


def bench_http(count: int, list_size: int = 0) -> dict[str, Any]:
    port, management_port = _free_port(), _free_port()
    with tempfile.TemporaryDirectory(prefix="tenon-bench-sandbox-") as tmp:
        command = [
            sys.executable,
            "-m",
            "devtools.sandbox",
            "--port",
            str(port),
            "--management-port",
            str(management_port),
            "--kubeconfig",
            str(Path(tmp) / "w.kubeconfig"),
            "--management-kubeconfig",
            str(Path(tmp) / "m.kubeconfig"),
            "--no-controllers",
            "--profile",
            "fast",
        ]
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        url = f"http://127.0.0.1:{port}"
        try:

            async def main() -> dict[str, Any]:
                await _wait_ready(url, time.monotonic() + 20)
                return await _http_run(url, count, list_size, process.pid)

            return asyncio.run(main())
        finally:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def bench_in_process(count: int) -> dict[str, Any]:
    async def main() -> dict[str, Any]:
        store = Store()
        pods = store.resource("v1", "Pod")
        sent: dict[str, float] = {}
        latencies: list[float] = []
        watches = [
            store.watch(pods, "default", resource_version=store.resource_version) for _ in range(WATCHERS)
        ]

        async def consume(index: int) -> int:
            seen = 0
            async for event in watches[index]:
                latencies.append(time.perf_counter() - sent[event.object["metadata"]["name"]])
                seen += 1
                if seen == count:
                    break
            return seen

        consumers = [asyncio.create_task(consume(i)) for i in range(WATCHERS)]
        started = time.perf_counter()
        for i in range(count):
            name = f"bench-{i:05d}"
            sent[name] = time.perf_counter()
            store.create(pods, _pod(name))
            if i % 50 == 49:
                await asyncio.sleep(0)  # let watchers run, as request handling would
        written = time.perf_counter()
        seen = await asyncio.wait_for(asyncio.gather(*consumers), 30)
        for watch in watches:
            watch.close()
        return {
            "writes": count,
            "errors": 0,
            "seconds": written - started,
            "latencies": latencies,
            "events": sum(seen),
        }

    return asyncio.run(main())


def run(quick: bool) -> Suite:
    count = 200 if quick else 1000
    suite = Suite(
        title=f"Sandbox API: {count} pod creates, {WATCHERS} watchers",
        columns=["path", "writes/s", "events", "p50 ms", "p99 ms", "max ms", "errors"],
    )
    list_size = 0 if quick else 10_000
    for label in ("http", "in-process"):
        result = bench_http(count, list_size) if label == "http" else bench_in_process(count)
        latencies_ms = [v * 1000 for v in result["latencies"]]
        rate = result["writes"] / result["seconds"] if result["seconds"] > 0 else float("inf")
        figures = {
            "writes": result["writes"],
            "writes_per_second": round(rate, 1),
            "events_observed": result["events"],
            "events_expected": result["writes"] * WATCHERS,
            "p50_ms": round(statistics.median(latencies_ms), 2) if latencies_ms else None,
            "p99_ms": round(_percentile(latencies_ms, 0.99), 2),
            "max_ms": round(max(latencies_ms), 2) if latencies_ms else None,
            "errors": result["errors"],
        }
        if result.get("server_cpu_seconds"):
            # CPU the server spent per write (including its 5-way fan-out); independent of what else runs
            figures["server_cpu_us_per_write"] = round(result["server_cpu_seconds"] / result["writes"] * 1e6)
            figures["machine_load_1m"] = round(os.getloadavg()[0], 2)
        if result.get("list_seconds") is not None:
            figures["list_pods"] = list_size
            figures["list_ms"] = round(result["list_seconds"] * 1000, 1)
        suite.data[label] = figures
        suite.rows.append(
            [
                label,
                f"{rate:,.0f}",
                f"{result['events']}/{result['writes'] * WATCHERS}",
                figures["p50_ms"],
                figures["p99_ms"],
                figures["max_ms"],
                result["errors"],
            ]
        )
    http = suite.data["http"]
    if "server_cpu_us_per_write" in http:
        suite.rows.append(
            [
                f"http: server CPU/write {http['server_cpu_us_per_write']} us "
                f"(load {http['machine_load_1m']})",
                "",
                "",
                "",
                "",
                "",
                "",
            ]
        )
    if "list_ms" in http:
        suite.rows.append(
            [f"http: list {http['list_pods']:,} pods", "", "", "", f"{http['list_ms']} ms", "", ""]
        )
    complete = http["events_observed"] == http["events_expected"] and http["errors"] == 0
    suite.targets.append(
        Target(
            "sandbox write throughput (HTTP)",
            ">= 2000 writes/s",
            f"{http['writes_per_second']:,.0f} writes/s",
            http["writes_per_second"] >= 2000,
        )
    )
    suite.targets.append(
        Target(
            "sandbox write->watch p99 (HTTP, 5 watchers)",
            "< 50 ms, every event delivered",
            f"{http['p99_ms']} ms, {http['events_observed']}/{http['events_expected']} events",
            complete and http["p99_ms"] < 50,
        )
    )
    return suite
