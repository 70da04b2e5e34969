"""The broker's per-service permissions, derived from :mod:`proto.registry`: each service's NATS user may
publish only the events it owns (on their subjects), its own snapshots, dead letters and its lease, and use
the JetStream API it needs to read the log; it may not delete or purge the log.

``make docs`` writes them into ``deploy/components/nats/nats.yaml`` (between ``# permissions:start`` and
``# permissions:end``) and the local stack uses the same function, so the deployment, the tests and the table
in proto/README.md say the same thing.

Locally (:class:`Identities`) each run gets fresh random passwords: :meth:`Identities.authorization` is the
nats-server configuration, :meth:`Identities.env` a service process's ``TENON_NATS_USER``/``_PASSWORD``.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field

from proto import registry, subjects
from tenon.runtime.eventlog.connection import inbox_prefix

JETSTREAM_API = (
    "$JS.API.INFO",
    "$JS.API.STREAM.NAMES",
    "$JS.API.STREAM.INFO.*",
    "$JS.API.STREAM.CREATE.*",
    "$JS.API.STREAM.UPDATE.*",
    "$JS.API.STREAM.MSG.GET.*",
    "$JS.API.DIRECT.GET.>",
    "$JS.API.CONSUMER.>",
    "$JS.API.STREAM.PURGE.TENON_SNAPSHOTS",
    "$JS.ACK.>",
    "$JS.FC.>",
    "$KV.tenon_leases.>",
)
"""What every service needs of the JetStream API: read the log, run its consumers, keep its snapshots,
lease."""

OPERATOR_API = (
    "$JS.API.INFO",
    "$JS.API.STREAM.NAMES",
    "$JS.API.STREAM.INFO.*",
    "$JS.API.STREAM.MSG.GET.*",
    "$JS.API.DIRECT.GET.>",
    "$JS.API.CONSUMER.CREATE.>",
    "$JS.API.CONSUMER.DELETE.>",
    "$JS.API.CONSUMER.INFO.>",
    "$JS.API.CONSUMER.MSG.NEXT.>",
    "$JS.FC.>",
)
"""What a person auditing the log needs (``tenon tap``, ``replay``, ``explain``): read, never write."""


def publishes(service: str) -> tuple[str, ...]:
    """Every subject ``service``'s identity may publish on."""
    own = (*registry.writes_of(service), f"tenon.snapshot.{service}.>", subjects.DEADLETTERS)
    return (*own, *JETSTREAM_API)


OPERATOR = "operator"
"""The identity of people auditing the log."""

USERS: tuple[str, ...] = (*registry.SERVICES, OPERATOR)
"""Every NATS user tenon defines: one per service, and the operator."""


def users_block(password_of: Mapping[str, str], indent: str = "        ") -> str:
    """The ``users: [...]`` entries of a nats-server ``authorization`` block: one per service and
    ``operator``."""
    entries = [(service, publishes(service)) for service in registry.SERVICES] + [("operator", OPERATOR_API)]
    lines: list[str] = []
    for user, allowed in entries:
        quoted = ", ".join(f'"{subject}"' for subject in allowed)
        lines += [
            f"{indent}{{",
            f"{indent}  user: {user}, password: {password_of[user]}",
            f"{indent}  permissions: {{",
            f"{indent}    publish: [{quoted}]",
            f"{indent}    subscribe: [{', '.join(json.dumps(inbox) for inbox in inboxes(user))}]",
            f"{indent}  }}",
            f"{indent}}}",
        ]
    return "\n".join(lines)


def inboxes(user: str) -> tuple[str, ...]:
    """Where ``user`` may receive replies: its own inbox prefix (a service reads no other service's replies);
    the operator also the default one, for clients without credentials (``no_auth_user``) and other NATS
    tools, since it may read the whole log anyway."""
    own = f"{inbox_prefix(user)}.>"
    return (own, "_INBOX.>") if user == OPERATOR else (own,)


def deployment_passwords() -> dict[str, str]:
    """How the deployment's config names each user's password (environment variables of the NATS pods)."""
    names = [*registry.SERVICES, "operator"]
    return {name: "$" + name.upper().replace("-", "_") + "_PASSWORD" for name in names}


@dataclass(frozen=True)
class Identities:
    """One NATS user per service and the operator, with passwords made for one run (never written anywhere
    but the broker's configuration in the run's directory and the environment of each service process)."""

    passwords: Mapping[str, str] = field(
        default_factory=lambda: {user: secrets.token_hex(16) for user in USERS}
    )

    def authorization(self, *, anonymous: str | None = None) -> str:
        """nats-server configuration: the ``authorization`` block of :func:`users_block`; with ``anonymous``,
        a client that brings no credentials is that user (``no_auth_user``), e.g. the read-only operator."""
        text = f"authorization {{\n  timeout: 2\n  users: [\n{users_block(self.passwords, '    ')}\n  ]\n}}\n"
        if anonymous is not None:
            if anonymous not in self.passwords:
                raise ValueError(f"no_auth_user {anonymous!r} is not one of {sorted(self.passwords)}")
            text += f"no_auth_user: {anonymous}\n"
        return text

    def env(self, user: str) -> dict[str, str]:
        """The environment that makes a tenon process connect as ``user``."""
        return {"TENON_NATS_USER": user, "TENON_NATS_PASSWORD": self.passwords[user]}

    def cli_args(self, user: str = OPERATOR) -> list[str]:
        """``tenon tap``/``replay``/``explain`` flags that connect as ``user``."""
        return ["--user", user, "--password", self.passwords[user]]
