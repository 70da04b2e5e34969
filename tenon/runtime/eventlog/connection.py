"""How a service reaches the broker: servers, credentials, TLS, reconnect policy.

Settings come from flags or the environment (``TENON_NATS_URL``, ``TENON_NATS_USER``/``_PASSWORD``,
``TENON_NATS_TOKEN``, ``TENON_NATS_CREDS`` (a ``.creds`` file: JWT + nkey seed), ``TENON_NATS_NKEY_SEED``
(a seed file), ``TENON_NATS_TLS_CA``/``_CERT``/``_KEY``), so the same image runs against a local broker and a
secured cluster. Secrets are never logged: ``describe()`` shows which methods are in use, not their values.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


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
    reconnect_wait: float = 0.25

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
            "reconnect_time_wait": self.reconnect_wait,
            "allow_reconnect": True,
        }
        if self.user is not None:
            options["user"] = self.user
            options["password"] = self.password or ""
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
