"""Connecting as one of tenon's NATS identities (:class:`devtools.nats_permissions.Identities`), and what the
broker says when it refuses one."""

from __future__ import annotations

import logging

import pytest

from devtools.nats_permissions import Identities
from tenon.runtime.eventlog.connection import ConnectionSettings
from tenon.runtime.eventlog.jetstream import JetStreamEventLog
from tests.support.waiting import until


def as_user(url: str, identities: Identities, user: str) -> ConnectionSettings:
    return ConnectionSettings(
        servers=tuple(url.split(",")),
        name=f"trust-{user}",
        user=user,
        password=identities.passwords[user],
        max_reconnect_attempts=0,
    )


async def connect_as(
    url: str, identities: Identities, user: str, *, provision: bool = False
) -> JetStreamEventLog:
    return await JetStreamEventLog.connect(as_user(url, identities, user), provision=provision)


async def broker_said(caplog: pytest.LogCaptureFixture, words: str, timeout: float = 5.0) -> str:
    """The first warning the client logged that holds ``words`` (the broker reports a refused publish on the
    connection, asynchronously); AssertionError naming what it did log when none came within ``timeout``."""

    def said() -> str | None:
        for record in caplog.records:
            message = record.getMessage()
            if record.levelno >= logging.WARNING and words.lower() in message.lower():
                return message
        return None

    try:
        return await until(said, timeout, interval=0.02, what=f"the broker saying {words!r}")
    except AssertionError:
        logged = [r.getMessage() for r in caplog.records]
        raise AssertionError(f"the broker never said {words!r}; the client logged {logged}") from None
