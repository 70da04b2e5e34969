"""The broker's per-service permissions, derived from :mod:`proto.registry`: each service's NATS user may
publish only the events it owns (on their subjects), its own snapshots, dead letters and its lease, and use
the JetStream API it needs to read the log; it may not delete or purge the log.

``make docs`` writes them into ``deploy/components/nats/nats.yaml`` (between ``# permissions:start`` and
``# permissions:end``) and the local stack uses the same function, so the deployment, the tests and the table
in proto/README.md say the same thing.
"""

from __future__ import annotations

from proto import registry, subjects

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


def users_block(password_of: dict[str, str], indent: str = "        ") -> str:
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
            f'{indent}    subscribe: ["_INBOX.>"]',
            f"{indent}  }}",
            f"{indent}}}",
        ]
    return "\n".join(lines)


def deployment_passwords() -> dict[str, str]:
    """How the deployment's config names each user's password (environment variables of the NATS pods)."""
    names = [*registry.SERVICES, "operator"]
    return {name: "$" + name.upper().replace("-", "_") + "_PASSWORD" for name in names}
