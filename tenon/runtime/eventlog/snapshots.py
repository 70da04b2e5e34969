"""Where services keep snapshots of their state, so a rebuild reads a snapshot and the log's tail, not
history.

A snapshot is opaque bytes plus a small manifest (what it covers, in which format) under a name (the service).
:class:`SnapshotStore` is the interface; :class:`JetStreamSnapshotStore` and :class:`InMemorySnapshotStore`
implement it.

On JetStream a snapshot lives in its own stream, ``TENON_SNAPSHOTS`` (``tenon.snapshot.>``), never in the
event log: it must not age out while it is the latest (the stream has no max age), and it may be larger than
one message, so it is written as chunks on ``tenon.snapshot.<name>.<generation>.<index>`` followed by its
manifest on ``tenon.snapshot.<name>.manifest`` (the stream keeps one message per subject). A reader takes the
last manifest and fetches its chunks by sequence (direct gets, in parallel), then checks their SHA-256: a
torn or missing snapshot reads as none, never as a wrong one. Generations older than the previous one are
purged after a new manifest is written, so the store holds at most two snapshots per name.
"""

from __future__ import annotations

import abc
import asyncio
import hashlib
import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import msgspec
from nats.js import JetStreamContext
from nats.js.api import DiscardPolicy, RetentionPolicy, StorageType, StreamConfig
from nats.js.errors import NotFoundError

from proto import subjects
from tenon.runtime.eventlog.direct import get_message
from tenon.runtime.eventlog.records import EventLogError

log = logging.getLogger("tenon.eventlog.snapshots")

STREAM = "TENON_SNAPSHOTS"
SUBJECTS = "tenon.snapshot.>"


class Manifest(msgspec.Struct, frozen=True, rename="camel"):
    name: str
    generation: int
    format: str
    """What the bytes are (e.g. ``scheduler/3``: the writer's state format and its version)."""
    covers: int
    """The event log sequence the snapshot's state covers."""
    taken_at: datetime
    size: int
    sha256: str
    chunks: tuple[int, ...] = ()
    """Stream sequences of the chunks, in order (JetStream only)."""


@dataclass(frozen=True)
class StoredSnapshot:
    manifest: Manifest
    data: bytes


class SnapshotStore(abc.ABC):
    @abc.abstractmethod
    async def save(self, name: str, data: bytes, *, format: str, covers: int) -> Manifest: ...

    @abc.abstractmethod
    async def load(self, name: str) -> StoredSnapshot | None:
        """The newest intact snapshot under ``name``, or None (none, or it could not be read whole)."""

    @abc.abstractmethod
    async def delete(self, name: str) -> None:
        """Forget every snapshot under ``name`` (an operator's tool, and the tests')."""


def _manifest(
    name: str, generation: int, data: bytes, fmt: str, covers: int, chunks: tuple[int, ...]
) -> Manifest:
    return Manifest(
        name=name,
        generation=generation,
        format=fmt,
        covers=covers,
        taken_at=datetime.now(UTC),
        size=len(data),
        sha256=hashlib.sha256(data).hexdigest(),
        chunks=chunks,
    )


class InMemorySnapshotStore(SnapshotStore):
    def __init__(self) -> None:
        self._snapshots: dict[str, StoredSnapshot] = {}

    async def save(self, name: str, data: bytes, *, format: str, covers: int) -> Manifest:
        previous = self._snapshots.get(name)
        generation = previous.manifest.generation + 1 if previous else 1
        manifest = _manifest(name, generation, data, format, covers, ())
        self._snapshots[name] = StoredSnapshot(manifest, bytes(data))
        return manifest

    async def load(self, name: str) -> StoredSnapshot | None:
        return self._snapshots.get(name)

    async def delete(self, name: str) -> None:
        self._snapshots.pop(name, None)


class JetStreamSnapshotStore(SnapshotStore):
    def __init__(self, js: JetStreamContext, *, chunk_size: int, replicas: int = 1) -> None:
        self.js = js
        self.chunk_size = max(64 * 1024, chunk_size)
        self.replicas = replicas
        self._provisioned = False

    async def _provision(self) -> None:
        if self._provisioned:
            return
        config = StreamConfig(
            name=STREAM,
            subjects=[SUBJECTS],
            retention=RetentionPolicy.LIMITS,
            storage=StorageType.FILE,
            num_replicas=self.replicas,
            max_msgs_per_subject=1,
            discard=DiscardPolicy.OLD,
            allow_direct=True,
        )
        try:
            await self.js.stream_info(STREAM)
        except NotFoundError:
            await self.js.add_stream(config)
        self._provisioned = True

    @staticmethod
    def _subject(name: str, *rest: object) -> str:
        return ".".join(["tenon.snapshot", subjects.token(name), *(str(part) for part in rest)])

    async def _last_manifest(self, name: str) -> Manifest | None:
        try:
            message = await self.js.get_last_msg(STREAM, self._subject(name, "manifest"))
        except NotFoundError:
            return None
        try:
            return msgspec.json.decode(message.data or b"", type=Manifest)
        except msgspec.DecodeError as exc:
            log.warning("unreadable snapshot manifest ignored", extra={"snapshot": name, "error": str(exc)})
            return None

    async def save(self, name: str, data: bytes, *, format: str, covers: int) -> Manifest:
        await self._provision()
        previous = await self._last_manifest(name)
        generation = previous.generation + 1 if previous else 1
        sequences = []
        for index, start in enumerate(range(0, max(len(data), 1), self.chunk_size)):
            ack = await self.js.publish(
                self._subject(name, generation, index), data[start : start + self.chunk_size]
            )
            sequences.append(int(ack.seq))
        manifest = _manifest(name, generation, data, format, covers, tuple(sequences))
        await self.js.publish(self._subject(name, "manifest"), msgspec.json.encode(manifest))
        if generation > 2:
            await self._purge(self._subject(name, generation - 2, ">"))
        return manifest

    async def _purge(self, subject: str) -> None:
        try:
            await self.js.purge_stream(STREAM, subject=subject)
        except Exception as exc:  # an old generation left behind costs space, not correctness
            log.warning(
                "could not purge an old snapshot generation", extra={"subject": subject, "error": str(exc)}
            )

    async def load(self, name: str) -> StoredSnapshot | None:
        await self._provision()
        manifest = await self._last_manifest(name)
        if manifest is None:
            return None
        try:
            parts = await asyncio.gather(*(get_message(self.js, STREAM, seq) for seq in manifest.chunks))
        except NotFoundError:
            log.warning(
                "snapshot chunks missing: ignored",
                extra={"snapshot": name, "generation": manifest.generation},
            )
            return None
        data = b"".join(part.data or b"" for part in parts)[: manifest.size]
        if hashlib.sha256(data).hexdigest() != manifest.sha256:
            log.warning(
                "snapshot checksum mismatch: ignored",
                extra={"snapshot": name, "generation": manifest.generation},
            )
            return None
        return StoredSnapshot(manifest, data)

    async def delete(self, name: str) -> None:
        """Unlike the purge of an old generation after a save, a refused delete raises: whoever asked for it
        (an operator, a test) must not believe the snapshot gone (the broker lets only its owner purge it)."""
        await self._provision()
        try:
            await self.js.purge_stream(STREAM, subject=self._subject(name, ">"))
        except Exception as exc:
            raise EventLogError(f"could not delete the snapshots of {name}: {exc}") from exc


def describe(manifest: Manifest) -> dict[str, Any]:
    """The manifest as log fields."""
    return {
        "snapshot": manifest.name,
        "generation": manifest.generation,
        "format": manifest.format,
        "covers": manifest.covers,
        "bytes": manifest.size,
    }
