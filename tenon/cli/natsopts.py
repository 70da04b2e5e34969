"""Broker connection flags shared by every subcommand that talks to NATS (defaults from ``TENON_NATS_*``)."""

from __future__ import annotations

import argparse
import re
from datetime import UTC, datetime, timedelta

from tenon.runtime.eventlog.connection import ConnectionSettings


def add_connection_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("broker connection (defaults from TENON_NATS_* environment variables)")
    group.add_argument("--server", "-s", metavar="URL", help="NATS URL(s), comma-separated (TENON_NATS_URL)")
    group.add_argument("--user", help="user name (TENON_NATS_USER)")
    group.add_argument("--password", help="password (TENON_NATS_PASSWORD)")
    group.add_argument("--token", help="auth token (TENON_NATS_TOKEN)")
    group.add_argument("--creds", metavar="FILE", help="credentials file: JWT + nkey seed (TENON_NATS_CREDS)")
    group.add_argument("--nkey", metavar="FILE", help="nkey seed file (TENON_NATS_NKEY_SEED)")
    group.add_argument("--tls-ca", metavar="FILE", help="CA bundle to verify the server (TENON_NATS_TLS_CA)")
    group.add_argument("--tls-cert", metavar="FILE", help="client certificate (TENON_NATS_TLS_CERT)")
    group.add_argument("--tls-key", metavar="FILE", help="client key (TENON_NATS_TLS_KEY)")
    group.add_argument(
        "--connect-timeout", type=float, default=2.0, metavar="SECONDS", help="give up connecting after this"
    )


def settings_from_args(args: argparse.Namespace, *, name: str, fail_fast: bool) -> ConnectionSettings:
    servers = tuple(s.strip() for s in args.server.split(",")) if args.server else None
    return ConnectionSettings.from_env(
        servers=servers,
        name=name,
        user=args.user,
        password=args.password,
        token=args.token,
        creds_file=args.creds,
        nkey_seed_file=args.nkey,
        tls_ca_file=args.tls_ca,
        tls_cert_file=args.tls_cert,
        tls_key_file=args.tls_key,
        connect_timeout=args.connect_timeout,
        max_reconnect_attempts=0 if fail_fast else -1,
    )


_RELATIVE = re.compile(r"^(\d+(?:\.\d+)?)(s|m|h|d)$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}


def parse_time(text: str) -> datetime:
    """RFC 3339 (``2026-11-29T10:00:00Z``) or an age such as ``90s``, ``15m``, ``2h``, ``1d`` (before now)."""
    match = _RELATIVE.match(text.strip())
    if match:
        return datetime.now(UTC) - timedelta(**{_UNITS[match.group(2)]: float(match.group(1))})
    try:
        moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is neither an RFC 3339 time nor an age like 15m or 2h"
        ) from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)
