"""A small key-value store beside the log: leases for leader election, and little else.

One interface, :class:`KeyValue`, with its two implementations side by side: :class:`JetStreamKeyValue` (a
JetStream KV bucket, whose ``ttl`` expires keys that are not rewritten) and :class:`InMemoryKeyValue` (the
same semantics in a dict, for tests of logic that elects a leader without a broker). Writes are
compare-and-swap on the key's revision, which is what makes a lease safe: ``create`` fails when the key
exists, ``update`` fails when someone wrote it since the revision the writer holds.
"""

from __future__ import annotations

import abc
import time
from dataclasses import dataclass
from typing import Any

from nats.js import JetStreamContext
from nats.js.errors import BucketNotFoundError, KeyNotFoundError, KeyWrongLastSequenceError, NotFoundError

from tenon.runtime.eventlog.records import EventLogError


class RevisionMismatch(EventLogError):
    """A compare-and-swap write found another revision than the writer expected (or the key existed)."""


@dataclass(frozen=True)
class Entry:
    key: str
    value: bytes
    revision: int


class KeyValue(abc.ABC):
    """Keys with revisions; ``create`` and ``update`` are compare-and-swap."""

    @abc.abstractmethod
    async def get(self, key: str) -> Entry | None: ...

    @abc.abstractmethod
    async def create(self, key: str, value: bytes) -> int:
        """Write ``key`` only if it does not exist (or expired); its revision. Else
        :class:`RevisionMismatch`."""

    @abc.abstractmethod
    async def update(self, key: str, value: bytes, *, revision: int) -> int:
        """Write ``key`` only if its revision is still ``revision``. Else :class:`RevisionMismatch`."""

    @abc.abstractmethod
    async def delete(self, key: str, *, revision: int | None = None) -> None: ...


class InMemoryKeyValue(KeyValue):
    def __init__(self, ttl: float | None = None, clock: Any = time.monotonic) -> None:
        self.ttl = ttl
        self.clock = clock
        self._entries: dict[str, tuple[Entry, float]] = {}
        self._revision = 0

    def _live(self, key: str) -> Entry | None:
        found = self._entries.get(key)
        if found is None:
            return None
        entry, written = found
        if self.ttl is not None and self.clock() - written > self.ttl:
            del self._entries[key]
            return None
        return entry

    def _write(self, key: str, value: bytes) -> int:
        self._revision += 1
        self._entries[key] = (Entry(key, value, self._revision), self.clock())
        return self._revision

    async def get(self, key: str) -> Entry | None:
        return self._live(key)

    async def create(self, key: str, value: bytes) -> int:
        if self._live(key) is not None:
            raise RevisionMismatch(f"key {key!r} exists")
        return self._write(key, value)

    async def update(self, key: str, value: bytes, *, revision: int) -> int:
        current = self._live(key)
        if current is None or current.revision != revision:
            raise RevisionMismatch(f"key {key!r} is not at revision {revision}")
        return self._write(key, value)

    async def delete(self, key: str, *, revision: int | None = None) -> None:
        current = self._live(key)
        if current is None:
            return
        if revision is not None and current.revision != revision:
            raise RevisionMismatch(f"key {key!r} is not at revision {revision}")
        del self._entries[key]


class JetStreamKeyValue(KeyValue):
    def __init__(self, kv: Any) -> None:
        self._kv = kv

    @classmethod
    async def open(
        cls, js: JetStreamContext, bucket: str, *, ttl: float | None, replicas: int = 1
    ) -> JetStreamKeyValue:
        try:
            kv = await js.key_value(bucket)
        except (BucketNotFoundError, NotFoundError):
            kv = await js.create_key_value(bucket=bucket, ttl=ttl, history=1, replicas=replicas)
        return cls(kv)

    async def get(self, key: str) -> Entry | None:
        try:
            entry = await self._kv.get(key)
        except (KeyNotFoundError, NotFoundError):
            return None
        if entry.value is None:
            return None
        return Entry(key, bytes(entry.value), int(entry.revision or 0))

    async def create(self, key: str, value: bytes) -> int:
        try:
            return int(await self._kv.create(key, value))
        except KeyWrongLastSequenceError:
            raise RevisionMismatch(f"key {key!r} exists") from None

    async def update(self, key: str, value: bytes, *, revision: int) -> int:
        try:
            return int(await self._kv.update(key, value, last=revision))
        except KeyWrongLastSequenceError:
            raise RevisionMismatch(f"key {key!r} is not at revision {revision}") from None

    async def delete(self, key: str, *, revision: int | None = None) -> None:
        try:
            await self._kv.delete(key, last=revision)
        except KeyWrongLastSequenceError:
            raise RevisionMismatch(f"key {key!r} is not at revision {revision}") from None
        except (KeyNotFoundError, NotFoundError):
            return
