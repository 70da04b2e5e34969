"""List, then watch, forever: a stream of changes that survives disconnects and expired resourceVersions.

``list_and_watch`` yields :class:`Relisted` with the complete current set first (and again after every
re-list), then :class:`WatchChange` for each ADDED / MODIFIED / DELETED. It resumes a closed watch from the
last resourceVersion it saw (bookmarks included), and when the server says that version is too old (410 Gone,
either as an HTTP status or an ERROR event) it lists again: consumers treat ``Relisted`` as "replace your
view", which is the only correct answer to a gap. Transient failures back off exponentially up to a few
seconds.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import msgspec

from tenon.runtime.kube.resources import Kube, KubeApiError, ResourceRef

log = logging.getLogger("tenon.kube.watch")


@dataclass(frozen=True)
class Relisted:
    items: list[dict[str, Any]]
    resource_version: str


@dataclass(frozen=True)
class WatchChange:
    type: str
    object: dict[str, Any]


class _Expired(Exception):
    pass


_decode = msgspec.json.Decoder().decode
"""A watch line to plain dicts and lists, as ``json.loads`` gives, for about half its cost (every change of
every pod passes here). A malformed line raises ``msgspec.DecodeError``, a ``ValueError``."""


async def list_and_watch(
    kube: Kube,
    ref: ResourceRef,
    namespace: str | None = None,
    *,
    label_selector: str | None = None,
    field_selector: str | None = None,
    watch_timeout: int = 300,
) -> AsyncIterator[Relisted | WatchChange]:
    backoff = 0.1
    while True:
        try:
            items, version = await kube.list(
                ref, namespace, label_selector=label_selector, field_selector=field_selector
            )
        except (TimeoutError, KubeApiError, OSError) as exc:
            log.warning("list failed, retrying", extra={"resource": ref.plural, "error": str(exc)})
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 5.0)
            continue
        backoff = 0.1
        yield Relisted(items, version)
        while True:
            try:
                async for change in _watch_once(
                    kube, ref, namespace, version, label_selector, field_selector, watch_timeout
                ):
                    if change.type == "BOOKMARK":
                        version = change.object.get("metadata", {}).get("resourceVersion", version)
                        continue
                    version = change.object.get("metadata", {}).get("resourceVersion", version)
                    yield change
                backoff = 0.1
            except _Expired:
                log.info(
                    "watch expired, re-listing", extra={"resource": ref.plural, "resource_version": version}
                )
                break
            except (TimeoutError, KubeApiError, OSError, ValueError) as exc:
                log.warning("watch failed, resuming", extra={"resource": ref.plural, "error": str(exc)})
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 5.0)


async def _watch_once(
    kube: Kube,
    ref: ResourceRef,
    namespace: str | None,
    version: str,
    label_selector: str | None,
    field_selector: str | None,
    timeout: int,
) -> AsyncIterator[WatchChange]:
    try:
        response = await kube.open_watch(
            ref,
            version,
            namespace,
            label_selector=label_selector,
            field_selector=field_selector,
            timeout_seconds=timeout,
        )
    except KubeApiError as exc:
        if exc.status == 410:
            raise _Expired from None
        raise
    try:
        while True:
            line = await response.content.readline()
            if not line:
                return
            if not line.strip():
                continue
            event = _decode(line)
            kind = event.get("type")
            obj = event.get("object") or {}
            if kind == "ERROR":
                if obj.get("code") == 410:
                    raise _Expired
                raise KubeApiError(
                    int(obj.get("code") or 500), str(obj.get("reason")), str(obj.get("message"))
                )
            obj.setdefault("apiVersion", ref.api_version)
            yield WatchChange(kind, obj)
    finally:
        response.release()
