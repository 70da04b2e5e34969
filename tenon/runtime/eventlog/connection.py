"""How a service reaches the broker: servers, credentials, TLS, reconnect policy.

Settings come from flags or the environment (``TENON_NATS_URL``, ``TENON_NATS_USER``/``_PASSWORD``,
``TENON_NATS_TOKEN``, ``TENON_NATS_CREDS`` (a ``.creds`` file: JWT + nkey seed), ``TENON_NATS_NKEY_SEED``
(a seed file), ``TENON_NATS_TLS_CA``/``_CERT``/``_KEY``), so the same image runs against a local broker and a
secured cluster. Secrets are never logged: ``describe()`` shows which methods are in use, not their values.

**Reconnects back off with jitter** (:class:`ReconnectBackoff`). When the broker goes away every client of it
notices at once; a fixed short wait (nats-py's ``reconnect_time_wait``, 0.25 s here before) made each one try
and warn four times a second for as long as the broker was gone, all in step. Now the next server is one of
those that failed least in a row (chosen at random: a cluster's clients spread over the nodes still up, and a
dead node is not tried again at once), and the wait before trying it grows with that server's failures in a
row: up to 0.1 s after the first, doubling, up to 5 s, each wait drawn between half and all of its ceiling.
A connection that comes back resets the count. The first connection (before any server answered) is
nats-py's own loop: ``initial_wait`` between rounds, 1 s for services, 0.25 s for tools that try once.
"""

from __future__ import annotations

import os
import random
import ssl
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol


class _PoolServer(Protocol):
    """What nats-py tells a reconnect handler of each server in its pool."""

    reconnects: int
    """Failed attempts on it in a row since it last answered."""


def inbox_prefix(user: str) -> str:
    """Where replies to ``user``'s requests arrive (JetStream API answers, pull consumers' deliveries): a
    prefix of its own, so the broker can let each identity read its own replies and no one else's."""
    return "_INBOX_" + "".join(c if c.isalnum() or c in "-_" else "_" for c in user)


@dataclass(frozen=True)
class ReconnectBackoff:
    """How long a client waits before its next reconnect attempt, and on which server."""

    first: float = 0.1
    """Ceiling of the wait after one failure (the first retry of a server that never failed waits up to it
    too, so the clients of a lost server do not all come back in the same instant)."""
    factor: float = 2.0
    cap: float = 5.0
    """No wait is longer: a broker back after a long outage is found within this."""

    def ceiling(self, failures: int) -> float:
        """The longest wait after ``failures`` failed attempts in a row on the chosen server."""
        if failures <= 0:
            return self.first
        return min(self.cap, self.first * self.factor ** min(failures - 1, 64))

    def delay(self, failures: int, draw: Callable[[], float] = random.random) -> float:
        """Between half and all of :meth:`ceiling` ("equal jitter": never a tight loop, never in step)."""
        ceiling = self.ceiling(failures)
        return ceiling / 2 + draw() * ceiling / 2

    def choose(
        self, servers: Sequence[_PoolServer], draw: Callable[[], float] = random.random
    ) -> tuple[_PoolServer | None, float]:
        """nats-py's ``reconnect_to_server_handler``: one of the servers that failed least in a row, and the
        wait before trying it."""
        if not servers:
            return None, self.cap
        fewest = min(server.reconnects for server in servers)
        candidates = [server for server in servers if server.reconnects == fewest]
        chosen = candidates[min(int(draw() * len(candidates)), len(candidates) - 1)]
        return chosen, self.delay(fewest, draw)

    def handler(self) -> Callable[[list[Any], dict[str, Any]], tuple[Any, float]]:
        def choose_next(servers: list[Any], server_info: dict[str, Any]) -> tuple[Any, float]:
            return self.choose(servers)

        return choose_next


@dataclass(frozen=True)
class ConnectionSettings:
    servers: tuple[str, ...] = ("nats://127.0.0.1:4222",)
    name: str = "tenon"
    user: str | None = None
    password: str | None = None
    token: str | None = None
    creds_file: str | None = None
    nkey_seed_file: str | None = None
    tls_ca_file: str | None = None
    tls_cert_file: str | None = None
    tls_key_file: str | None = None
    connect_timeout: float = 2.0
    max_reconnect_attempts: int = -1
    """-1: keep trying forever (services); tools that must fail fast set 0 (one attempt per server)."""
    reconnect: ReconnectBackoff = field(default_factory=ReconnectBackoff)
    initial_wait: float | None = None
    """Between rounds of the first connection (None: 1 s when trying forever, else 0.25 s)."""

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> ConnectionSettings:
        env = os.environ if env is None else env
        values: dict[str, Any] = {
            "servers": tuple(
                s.strip() for s in env.get("TENON_NATS_URL", "nats://127.0.0.1:4222").split(",")
            ),
            "user": env.get("TENON_NATS_USER"),
            "password": env.get("TENON_NATS_PASSWORD"),
            "token": env.get("TENON_NATS_TOKEN"),
            "creds_file": env.get("TENON_NATS_CREDS"),
            "nkey_seed_file": env.get("TENON_NATS_NKEY_SEED"),
            "tls_ca_file": env.get("TENON_NATS_TLS_CA"),
            "tls_cert_file": env.get("TENON_NATS_TLS_CERT"),
            "tls_key_file": env.get("TENON_NATS_TLS_KEY"),
        }
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)

    def tls_context(self) -> ssl.SSLContext | None:
        if not (self.tls_ca_file or self.tls_cert_file):
            return None
        context = ssl.create_default_context(cafile=self.tls_ca_file)
        if self.tls_cert_file:
            context.load_cert_chain(self.tls_cert_file, self.tls_key_file)
        return context

    def connect_options(self) -> dict[str, Any]:
        """Keyword arguments for ``nats.connect``."""
        options: dict[str, Any] = {
            "servers": list(self.servers),
            "name": self.name,
            "connect_timeout": self.connect_timeout,
            # nats-py reads 0 as "forever"; 1 is its smallest finite budget
            "max_reconnect_attempts": -1
            if self.max_reconnect_attempts < 0
            else max(self.max_reconnect_attempts, 1),
            "reconnect_time_wait": self._initial_wait(),
            "reconnect_to_server_handler": self.reconnect.handler(),
            "allow_reconnect": True,
        }
        if self.user is not None:
            options["user"] = self.user
            options["password"] = self.password or ""
            options["inbox_prefix"] = inbox_prefix(self.user)
        if self.token is not None:
            options["token"] = self.token
        if self.creds_file is not None:
            options["user_credentials"] = self.creds_file
        if self.nkey_seed_file is not None:
            options["nkeys_seed"] = self.nkey_seed_file
        tls = self.tls_context()
        if tls is not None:
            options["tls"] = tls
        return options

    def _initial_wait(self) -> float:
        if self.initial_wait is not None:
            return self.initial_wait
        return 1.0 if self.max_reconnect_attempts < 0 else 0.25

    def describe(self) -> str:
        methods = [
            name
            for name, used in (
                ("user/password", self.user is not None),
                ("token", self.token is not None),
                ("creds", self.creds_file is not None),
                ("nkey", self.nkey_seed_file is not None),
                ("tls", self.tls_ca_file is not None or self.tls_cert_file is not None),
            )
            if used
        ]
        return f"{','.join(self.servers)} ({', '.join(methods) or 'no auth'})"
