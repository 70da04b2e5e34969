"""The sandbox's in-memory object store: the etcd *and* the registry logic of a Kubernetes API server.

One :class:`Store` is one cluster. The HTTP layer (:mod:`devtools.sandbox.server`) and the in-process
controllers (``devtools.sandbox.controllers``) call the same synchronous methods, so both see identical
semantics; only :meth:`Store.watch` is asynchronous (an async iterator).

Design
------
* **Buckets.** Objects live in one dict per storage key (group + plural), keyed by ``(namespace, name)``
  (namespace ``""`` for cluster-scoped kinds). Lists sort the keys, which gives the stable etcd-like order
  ``limit``/``continue`` paging needs.
* **Immutable stored objects, copy-on-write.** A stored dict is never mutated after it is committed: every
  write builds a new top-level dict (and new ``metadata``/``status`` dicts where it changes them) and may
  share untouched subtrees with the previous version. That is what lets one committed object be handed to
  every watcher without a per-watcher copy. Callers always get private copies: inputs are copied on the way
  in, and results on the way out (one ``msgspec`` encode/decode round trip, far cheaper than
  ``copy.deepcopy``).
* **Resource versions.** One global counter per store; every committed write takes the next value, which is
  written into ``metadata.resourceVersion`` and into the watch event. Updates carrying a stale
  ``resourceVersion`` fail with :class:`Conflict`; no-op updates do not bump it (as upstream).
* **Watch history.** Each bucket keeps a ring buffer (``history_size`` events) of committed events. A watch
  that starts at resourceVersion *R* replays buffered events newer than *R* and then receives live ones; if
  events newer than *R* were already dropped from the buffer it raises :class:`Expired` (HTTP 410), and the
  client must re-list, which is the reconnect path we want clients to exercise. Each event caches its JSON
  encoding once, so N HTTP watchers cost one encode, not N, and the write's own answer reuses it.
* **Watchers.** Every :class:`Watch` owns an ``asyncio.Queue``; a write delivers the event synchronously to
  every watcher of the bucket whose namespace and selectors match. Under selectors an object moving into or
  out of the selection is reported as ADDED or DELETED, as the real watch cache does. Because delivery is
  synchronous, an idle watcher (empty queue) has seen everything up to the store's current resource version,
  so its BOOKMARK can carry that version safely.
* **Deletion.** Objects with finalizers only get ``deletionTimestamp``; they go when the last finalizer is
  removed. Pods bound to a node (and not terminal) are deleted gracefully: ``deletionTimestamp`` = now + grace
  and ``deletionGracePeriodSeconds`` are set and the simulated kubelet deletes them later with grace 0.
  Removing an object queues background garbage collection of its dependents (``ownerReferences``), run on the
  next event-loop iteration (or at once when no loop is running); ``Orphan`` propagation strips the owner
  reference instead, and ``Foreground`` keeps the owner (``foregroundDeletion`` finalizer) until its
  dependents are gone. Deleting a namespace deletes its contents and removes the namespace once it is empty.
* **Dry run.** Inside ``with store.dry_run():`` every write runs admission, conflicts and patches as usual
  and returns its would-be result, but the commit step stores and publishes nothing (``?dryRun=All``).
* **Custom resources.** A CustomResourceDefinition committed to the store makes its kinds served
  (:mod:`devtools.sandbox.crd_registration`); writes of those kinds are pruned and defaulted by the CRD's
  schema (``fieldValidation=Strict`` refuses unknown fields, ``Warn`` collects warnings the HTTP layer
  returns, see :meth:`Store.field_validation`), then validated by :mod:`devtools.sandbox.admission`. Their
  ``scale`` subresource follows the CRD's replica paths (a NodePool's ``status.nodes``).
* **Subresources.** ``status`` writes touch only ``.status``; main-resource writes keep the old ``.status``
  for kinds that have the subresource, and bump ``metadata.generation`` only when something outside
  ``metadata``/``status`` changed. ``binding``, ``eviction`` and ``scale`` have their own methods
  (:meth:`Store.bind`, :meth:`Store.evict`, :meth:`Store.get_scale`, :meth:`Store.update_scale`).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import json
import random
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import msgspec

from devtools.sandbox import admission, patching
from devtools.sandbox.crd_registration import CustomResources, is_crd
from devtools.sandbox.crds import CLEANUP_FINALIZER, ScalePaths
from devtools.sandbox.errors import (
    AlreadyExists,
    ApiError,
    BadRequest,
    Conflict,
    Expired,
    Forbidden,
    InternalError,
    Invalid,
    MethodNotAllowed,
    NotFound,
    TooManyRequests,
    UnsupportedMediaType,
    object_details,
    qualified,
)
from devtools.sandbox.json_copy import json_copy
from devtools.sandbox.resources import DEFAULT_REGISTRY, Registry, ResourceType
from devtools.sandbox.selectors import (
    FieldSelector,
    LabelSelector,
    from_label_selector_dict,
    parse_field_selector,
    parse_label_selector,
    render_label_selector_dict,
)

__all__ = [
    "AlreadyExists",
    "ApiError",
    "BadRequest",
    "Conflict",
    "Expired",
    "Forbidden",
    "InternalError",
    "Invalid",
    "ListPage",
    "MethodNotAllowed",
    "NotFound",
    "ResourceType",
    "Store",
    "TooManyRequests",
    "UnsupportedMediaType",
    "Watch",
    "WatchEvent",
]

_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder().decode
_NAME_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
_TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})
FOREGROUND_FINALIZER = "foregroundDeletion"
_SYSTEM_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
_META_KEPT_ON_UPDATE = (
    "uid",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generation",
    "namespace",
    "name",
)

# Patch types whose owned bodies are JSON the server decoded: a patch of those builds new dicts along the
# paths it changes and shares the rest with the stored (immutable) object, and the body's values it takes in
# are the store's own, so the result needs no copy of its own. An apply patch's body may be YAML, whose
# timestamps only the copy turns into strings.
_JSON_PATCH_TYPES = frozenset({patching.MERGE_PATCH, patching.STRATEGIC_MERGE_PATCH, patching.JSON_PATCH})

Key = tuple[str, str]  # (namespace or "", name)
ObjectList = list[dict[str, Any]]  # named here because Store.list shadows ``list`` inside the class body


def clone(obj: Any) -> Any:
    """A private deep copy of JSON data (msgspec round trip; several times faster than copy.deepcopy)."""
    try:
        return json_copy(obj)
    except (TypeError, msgspec.EncodeError) as exc:
        raise BadRequest(f"object is not valid JSON data: {exc}") from exc


def rfc3339(timestamp: float | None = None) -> str:
    moment = datetime.fromtimestamp(time.time() if timestamp is None else timestamp, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_rfc3339(value: str) -> float:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


@dataclass(frozen=True)
class WatchEvent:
    type: str  # ADDED | MODIFIED | DELETED | BOOKMARK
    object: dict[str, Any]


@dataclass(frozen=True)
class ListPage:
    items: list[dict[str, Any]]
    resource_version: str
    continue_token: str | None
    remaining_item_count: int | None


class _Event:
    """A committed change. ``obj`` is the immutable stored object; its JSON encoding is computed once."""

    __slots__ = ("_encoded", "obj", "rv", "type")

    def __init__(self, type_: str, obj: dict[str, Any], rv: int) -> None:
        self.type = type_
        self.obj = obj
        self.rv = rv
        self._encoded: dict[str, bytes] = {}

    def encoded_object(self, api_version: str) -> bytes:
        data = self._encoded.get(api_version)
        if data is None:
            obj = self.obj
            if obj.get("apiVersion") != api_version:
                obj = {**obj, "apiVersion": api_version}
            data = self._encoded[api_version] = _encode(obj)
        return data

    def line(self, api_version: str) -> bytes:
        """One newline-terminated watch frame, as the real server streams them."""
        return b'{"type":"' + self.type.encode() + b'","object":' + self.encoded_object(api_version) + b"}\n"

    def retyped(self, type_: str) -> _Event:
        twin = _Event(type_, self.obj, self.rv)
        twin._encoded = self._encoded
        return twin


class _Bucket:
    __slots__ = ("by_node", "compacted_rv", "history", "objects", "rt", "watchers")

    def __init__(self, rt: ResourceType, history_size: int) -> None:
        self.rt = rt
        self.objects: dict[Key, dict[str, Any]] = {}
        # pods only: spec.nodeName -> keys, so "pods on node X" (kubelet, drain) does not scan every pod
        self.by_node: dict[str, set[Key]] | None = {} if (rt.group, rt.plural) == ("", "pods") else None
        self.history: deque[_Event] = deque(maxlen=history_size)
        self.compacted_rv = 0  # events with rv <= this may have been dropped from history
        self.watchers: set[Watch] = set()


_CLOSED = None


class Watch:
    """A stream of changes to one resource type, optionally filtered by namespace and selectors.

    Iterate with ``async for event in watch`` (events are :class:`WatchEvent` with private copies of the
    objects); :meth:`close` ends the iteration. ``next_raw``/``drain_raw`` are the zero-copy interface the
    HTTP layer uses.
    """

    def __init__(
        self,
        store: Store,
        bucket: _Bucket,
        rt: ResourceType,
        namespace: str | None,
        labels: LabelSelector,
        fields: FieldSelector,
        allow_bookmarks: bool,
        bookmark_interval: float,
    ) -> None:
        self._store = store
        self._bucket = bucket
        self.resource_type = rt
        self._namespace = namespace
        self._labels = labels
        self._fields = fields
        self._filtered = not labels.is_empty or not fields.is_empty
        self.allow_bookmarks = allow_bookmarks
        self.bookmark_interval = bookmark_interval
        self._queue: asyncio.Queue[_Event | None] = asyncio.Queue()
        self.closed = False
        self.overflowed = False
        self.max_pending = store.max_pending_events

    # -- delivery (called synchronously by the store) --

    def _matches(self, obj: dict[str, Any]) -> bool:
        return self._labels.matches(obj["metadata"].get("labels")) and self._fields.matches(obj)

    def _offer(self, event: _Event, old: dict[str, Any] | None) -> None:
        if self._namespace is not None and event.obj["metadata"].get("namespace") != self._namespace:
            return
        if self._queue.qsize() >= self.max_pending:
            # A consumer this far behind would hold unbounded memory; end its watch, as the real server
            # terminates slow watchers. The client re-watches from its last resourceVersion (re-lists on 410).
            self.overflowed = True
            self.close()
            return
        if not self._filtered:
            self._queue.put_nowait(event)
            return
        now_in = self._matches(event.obj)
        if event.type == "MODIFIED":
            was_in = old is not None and self._matches(old)
            if was_in and now_in:
                self._queue.put_nowait(event)
            elif now_in:
                self._queue.put_nowait(event.retyped("ADDED"))
            elif was_in:
                self._queue.put_nowait(event.retyped("DELETED"))
        elif now_in:
            self._queue.put_nowait(event)

    # -- consumption --

    def bookmark(self) -> _Event:
        rv = self._store._rv
        rt = self.resource_type
        return _Event(
            "BOOKMARK",
            {"kind": rt.kind, "apiVersion": rt.api_version, "metadata": {"resourceVersion": str(rv)}},
            rv,
        )

    async def next_raw(self, wait_seconds: float | None) -> _Event | None:
        """The next event, or None after ``wait_seconds``; StopAsyncIteration once closed."""
        if self.closed and self._queue.empty():
            raise StopAsyncIteration
        try:
            # A queued event needs no waiting; a wait runs under a timeout scope, which unlike wait_for
            # costs no task of its own (a busy watch waits once per write).
            if not self._queue.empty():
                event = self._queue.get_nowait()
            elif wait_seconds is None:
                event = await self._queue.get()
            else:
                async with asyncio.timeout(wait_seconds):
                    event = await self._queue.get()
        except TimeoutError:
            return None
        if event is _CLOSED:
            raise StopAsyncIteration
        return event

    def drain_raw(self, limit: int = 512) -> list[_Event]:
        """Events already queued (no waiting), up to ``limit``; lets the server batch its socket writes."""
        out: list[_Event] = []
        while len(out) < limit and not self._queue.empty():
            event = self._queue.get_nowait()
            if event is _CLOSED:
                self._queue.put_nowait(_CLOSED)
                break
            out.append(event)
        return out

    def take_queued(self) -> list[WatchEvent]:
        """The events already queued, decoded as :meth:`__anext__` delivers them, without waiting (a reader
        that must be current before it acts: :meth:`Informer.catch_up`)."""
        api_version = self.resource_type.api_version
        return [WatchEvent(e.type, _decode(e.encoded_object(api_version))) for e in self.drain_raw(1 << 30)]

    def __aiter__(self) -> AsyncIterator[WatchEvent]:
        return self

    async def __anext__(self) -> WatchEvent:
        while True:
            event = await self.next_raw(self.bookmark_interval if self.allow_bookmarks else None)
            if event is None:
                if self._queue.empty():
                    event = self.bookmark()
                else:
                    continue
            return WatchEvent(event.type, _decode(event.encoded_object(self.resource_type.api_version)))

    def close(self) -> None:
        """End the watch: events already queued are still delivered, then iteration stops."""
        if not self.closed:
            self.closed = True
            self._bucket.watchers.discard(self)
            self._queue.put_nowait(_CLOSED)

    @property
    def pending(self) -> int:
        return self._queue.qsize()


class Store:
    """One cluster's objects. All methods are synchronous except iterating a :class:`Watch`."""

    def __init__(
        self,
        registry: Registry = DEFAULT_REGISTRY,
        *,
        history_size: int = 10_000,
        bookmark_interval: float = 10.0,
        max_pending_events: int = 100_000,
        name: str = "sandbox",
    ) -> None:
        self.registry = registry.copy()  # this cluster's own: CRDs change what it serves
        self.custom_resources = CustomResources(self)
        self._field_validation = "Ignore"  # what a write does with unknown fields (fieldValidation)
        self._warnings: list[str] | None = None
        self.max_pending_events = max_pending_events  # per watcher; beyond it the watch is ended
        self.name = name
        self.history_size = history_size
        self.bookmark_interval = bookmark_interval
        self._rv = 0
        self._buckets: dict[tuple[str, str], _Bucket] = {}
        self._uids: dict[str, tuple[tuple[str, str], Key]] = {}
        self._dependents: dict[str, set[tuple[tuple[str, str], Key]]] = {}
        self._gc_queue: list[tuple[str, str]] = []  # (owner uid, propagation policy)
        self._gc_scheduled = False
        self._foreground: set[str] = set()  # owners waiting (foregroundDeletion) for their dependents to go
        self._foreground_ready: list[str] = []  # of those, owners whose last dependent just went
        self._dry_run = False
        ns_rt = registry.resource("v1", "Namespace")
        for ns in _SYSTEM_NAMESPACES:
            self.create(ns_rt, {"metadata": {"name": ns}})

    @contextlib.contextmanager
    def dry_run(self) -> Iterator[None]:
        """Within the block, writes validate and answer as usual but change nothing (``dryRun=All``).

        Safe because store calls are synchronous: no other caller can run while the flag is set.
        """
        previous, self._dry_run = self._dry_run, True
        try:
            yield
        finally:
            self._dry_run = previous

    @contextlib.contextmanager
    def field_validation(self, directive: str) -> Iterator[list[str]]:
        """Within the block, custom-resource writes treat unknown fields as ``fieldValidation`` says:
        ``Strict`` refuses them (400), ``Warn`` prunes them and lists a warning per field (yielded),
        ``Ignore`` prunes them silently (in-process callers' default)."""
        if directive not in ("Strict", "Warn", "Ignore"):
            raise BadRequest(
                f'fieldValidation: Unsupported value: "{directive}": supported values: "Ignore", "Strict", '
                '"Warn"'
            )
        warnings: list[str] = []
        previous = self._field_validation, self._warnings
        self._field_validation, self._warnings = directive, warnings
        try:
            yield warnings
        finally:
            self._field_validation, self._warnings = previous

    # ---------------------------------------------------------------- look-ups

    @property
    def resource_version(self) -> str:
        """The store's current (latest committed) resourceVersion."""
        return str(self._rv)

    def resource(self, api_version: str, kind_or_plural: str) -> ResourceType:
        return self.registry.resource(api_version, kind_or_plural)

    def _bucket(self, rt: ResourceType) -> _Bucket:
        bucket = self._buckets.get(rt.storage_key)
        if bucket is None:
            bucket = self._buckets[rt.storage_key] = _Bucket(rt, self.history_size)
        return bucket

    def _drop_bucket(self, rt: ResourceType) -> None:
        """A kind is no longer served: its watches end and what was left of it is forgotten."""
        bucket = self._buckets.pop(rt.storage_key, None)
        if bucket is None:
            return
        for watcher in list(bucket.watchers):
            watcher.close()
        for obj in bucket.objects.values():
            uid = obj["metadata"].get("uid")
            if uid:
                self._uids.pop(uid, None)

    def _key(self, rt: ResourceType, name: str, namespace: str | None) -> Key:
        if not isinstance(name, str) or not name:
            raise BadRequest(f"{rt.plural}: a resource name is required")
        if rt.namespaced:
            if not namespace:
                raise BadRequest(f'{rt.plural} "{name}": a namespace is required for namespaced resources')
            return (namespace, name)
        return ("", name)

    def _stored(self, rt: ResourceType, key: Key) -> dict[str, Any]:
        obj = self._bucket(rt).objects.get(key)
        if obj is None:
            raise self._not_found(rt, key[1])
        return obj

    @staticmethod
    def _not_found(rt: ResourceType, name: str) -> NotFound:
        return NotFound(
            f'{qualified(rt.plural, rt.group)} "{name}" not found',
            details=object_details(rt.plural, rt.group, name),
        )

    def _out(self, rt: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
        """A private copy of a stored object, as ``rt``'s version shows it."""
        out: dict[str, Any] = _decode(self.encoded(rt, obj))
        return out

    def encoded(self, rt: ResourceType, obj: dict[str, Any]) -> bytes:
        """The JSON of a stored object as ``rt``'s version shows it. The object a write just committed
        shares the bytes of its watch event: one encoding serves the write's answer, every watcher and the
        copies in-process informers decode."""
        bucket = self._buckets.get(rt.storage_key)
        if bucket is not None and bucket.history and bucket.history[-1].obj is obj:
            return bucket.history[-1].encoded_object(rt.api_version)
        if obj.get("apiVersion") != rt.api_version:
            obj = {**obj, "apiVersion": rt.api_version}
        return _encode(obj)

    # ---------------------------------------------------------------- commit

    def _commit(
        self, rt: ResourceType, type_: str, key: Key, new: dict[str, Any], old: dict[str, Any] | None
    ) -> dict[str, Any]:
        """Assign the next resourceVersion to ``new`` (whose metadata dict must be private) and publish it."""
        if self._dry_run:
            # dryRun=All: the caller sees the object it would get; nothing is stored, published or collected.
            # Keeping the current resourceVersion is what the real server returns for a dry-run update.
            new["metadata"]["resourceVersion"] = (old or new)["metadata"].get(
                "resourceVersion", str(self._rv)
            )
            return new
        bucket = self._bucket(rt)
        self._rv += 1
        rv = self._rv
        new["metadata"]["resourceVersion"] = str(rv)
        self._keep(bucket, type_, key, new, old)
        self._publish(bucket, _Event(type_, new, rv), old)
        if type_ == "DELETED":
            self._after_removal(rt, key, new["metadata"].get("uid"))
        if is_crd(rt):
            self.custom_resources.committed(type_, new)
        while self._foreground_ready:
            self._finish_foreground(self._foreground_ready.pop())
        return new

    def _keep(
        self, bucket: _Bucket, type_: str, key: Key, new: dict[str, Any], old: dict[str, Any] | None
    ) -> None:
        """Store (or drop, for DELETED) the committed object and update the uid, owner and node indexes."""
        rt = bucket.rt
        uid = new["metadata"].get("uid")
        current = None if type_ == "DELETED" else new
        if current is None:
            del bucket.objects[key]
            if uid:
                self._uids.pop(uid, None)
        else:
            bucket.objects[key] = current
            if uid:
                self._uids[uid] = (rt.storage_key, key)
        self._index_owners(rt.storage_key, key, old, current)
        if bucket.by_node is not None:
            _reindex_node(bucket.by_node, key, old, current)

    @staticmethod
    def _publish(bucket: _Bucket, event: _Event, old: dict[str, Any] | None) -> None:
        """Append the event to the bucket's history and hand it to every watcher."""
        if len(bucket.history) == bucket.history.maxlen:
            bucket.compacted_rv = bucket.history[0].rv
        bucket.history.append(event)
        for watcher in tuple(bucket.watchers):
            watcher._offer(event, old)

    def _after_removal(self, rt: ResourceType, key: Key, uid: str | None) -> None:
        """An object is gone: collect its dependents and finish its namespace if that was being deleted."""
        if uid:
            self._foreground.discard(uid)
            if uid in self._dependents:
                self._queue_gc(uid, "Background")
        if rt.namespaced:
            self._maybe_finish_namespace(key[0])
        if rt.custom is not None:
            self.custom_resources.instance_removed(rt.storage_key)

    def _finish_foreground(self, owner_uid: str) -> None:
        """The owner's dependents are gone: drop its foregroundDeletion finalizer (which may remove it)."""
        self._foreground.discard(owner_uid)
        located = self._uids.get(owner_uid)
        if located is None:
            return
        bucket = self._buckets[located[0]]
        owner = bucket.objects.get(located[1])
        if owner is None or FOREGROUND_FINALIZER not in (owner["metadata"].get("finalizers") or ()):
            return
        new = dict(owner)
        new["metadata"] = dict(owner["metadata"])
        remaining = [f for f in owner["metadata"]["finalizers"] if f != FOREGROUND_FINALIZER]
        if remaining:
            new["metadata"]["finalizers"] = remaining
        else:
            del new["metadata"]["finalizers"]
        self._commit_update(bucket.rt, located[1], new, owner)

    def _index_owners(
        self, storage_key: tuple[str, str], key: Key, old: dict[str, Any] | None, new: dict[str, Any] | None
    ) -> None:
        old_refs = old["metadata"].get("ownerReferences") if old is not None else None
        new_refs = new["metadata"].get("ownerReferences") if new is not None else None
        if not old_refs and not new_refs:
            return  # the common case, kept cheap
        old_owners = {r.get("uid") for r in old_refs or ()}
        new_owners = {r.get("uid") for r in new_refs or ()}
        if old_owners == new_owners:
            return
        for owner in old_owners - new_owners:
            deps = self._dependents.get(owner)
            if deps is not None:
                deps.discard((storage_key, key))
                if not deps:
                    del self._dependents[owner]
                    if owner in self._foreground:
                        self._foreground_ready.append(owner)
        for owner in new_owners - old_owners:
            self._dependents.setdefault(owner, set()).add((storage_key, key))

    # ---------------------------------------------------------------- read

    def get(self, rt: ResourceType, name: str, namespace: str | None = None) -> dict[str, Any]:
        return self._out(rt, self._stored(rt, self._key(rt, name, namespace)))

    def list(
        self,
        rt: ResourceType,
        namespace: str | None = None,
        label_selector: str | LabelSelector | None = None,
        field_selector: str | FieldSelector | None = None,
    ) -> tuple[list[dict[str, Any]], str]:
        page = self.list_page(rt, namespace, label_selector, field_selector)
        return page.items, page.resource_version

    def _selectors(
        self,
        rt: ResourceType,
        label_selector: str | LabelSelector | None,
        field_selector: str | FieldSelector | None,
    ) -> tuple[LabelSelector, FieldSelector]:
        labels = (
            label_selector
            if isinstance(label_selector, LabelSelector)
            else parse_label_selector(label_selector)
        )
        fields = (
            field_selector
            if isinstance(field_selector, FieldSelector)
            else parse_field_selector(
                field_selector, rt.allows_field, resource=qualified(rt.plural, rt.group)
            )
        )
        return labels, fields

    def list_page(
        self,
        rt: ResourceType,
        namespace: str | None = None,
        label_selector: str | LabelSelector | None = None,
        field_selector: str | FieldSelector | None = None,
        limit: int | None = None,
        continue_token: str | None = None,
        *,
        copy: bool = True,
    ) -> ListPage:
        """A (possibly paged) list; ``continue_token`` comes from the previous page. Expired when too old.

        ``copy=False`` returns the stored (immutable, shared) objects for a caller that only serializes them,
        as the HTTP layer does; their ``apiVersion`` may be another served version of the same kind.
        """
        labels, fields = self._selectors(rt, label_selector, field_selector)
        bucket = self._bucket(rt)
        start: Key | None = None
        list_rv = self._rv
        if continue_token:
            start, token_rv = self._decode_continue(continue_token)
            if token_rv < bucket.compacted_rv:
                raise Expired(
                    "The provided continue parameter is too old to display a consistent list result. "
                    "You can start a new list without the continue parameter."
                )
        if limit is not None and limit < 0:
            raise BadRequest(f"limit: Invalid value: {limit}: must be non-negative")
        node = fields.exact("spec.nodeName") if bucket.by_node is not None else None
        keys = sorted(
            bucket.by_node.get(node, ())
            if bucket.by_node is not None and node is not None
            else bucket.objects
        )
        if start is not None:
            import bisect

            keys = keys[bisect.bisect_right(keys, start) :]
        items: list[dict[str, Any]] = []
        next_key: Key | None = None
        remaining = 0
        for key in keys:
            if rt.namespaced and namespace and key[0] != namespace:
                continue
            obj = bucket.objects[key]
            if not labels.matches(obj["metadata"].get("labels")) or not fields.matches(obj):
                continue
            if limit and len(items) >= limit:
                remaining += 1
                continue
            items.append(obj)
            next_key = key
        token = None
        if limit and remaining and next_key is not None:
            token = self._encode_continue(next_key, list_rv)
        out = [self._out(rt, o) for o in items] if copy else items
        return ListPage(out, str(list_rv), token, remaining if token else None)

    @staticmethod
    def _encode_continue(key: Key, rv: int) -> str:
        raw = json.dumps({"v": "tenon.sandbox/1", "rv": rv, "start": list(key)}).encode()
        return base64.urlsafe_b64encode(raw).decode()

    @staticmethod
    def _decode_continue(token: str) -> tuple[Key, int]:
        try:
            data = json.loads(base64.urlsafe_b64decode(token.encode()))
            return (str(data["start"][0]), str(data["start"][1])), int(data["rv"])
        except (ValueError, KeyError, IndexError, TypeError, binascii.Error) as exc:
            raise BadRequest(
                f'continue: Invalid value: "{token}": not a continue token from this server'
            ) from exc

    # ---------------------------------------------------------------- create

    def create(
        self, rt: ResourceType, obj: dict[str, Any], namespace: str | None = None, *, owned: bool = False
    ) -> dict[str, Any]:
        """Create; returns the created object (a private copy).

        ``owned=True`` is for a caller that hands ``obj`` over and only serializes the result (the HTTP
        layer): no defensive copy of the input, and the stored object itself is returned, which must not be
        modified; its ``apiVersion`` may be another served version of the kind.
        """
        if not isinstance(obj, dict):
            raise BadRequest(f"{rt.kind}: the request body must be a JSON object")
        if not owned:
            obj = clone(obj)
        self._check_type(rt, obj)
        meta = obj.get("metadata")
        if meta is None:
            meta = {}
        if not isinstance(meta, dict):
            raise Invalid(f"{rt.kind}: metadata: Invalid value: must be an object")
        meta = dict(meta)
        obj = {**obj, "apiVersion": rt.api_version, "kind": rt.kind, "metadata": meta}
        obj = {"apiVersion": rt.api_version, "kind": rt.kind, **obj}
        self._place_in_namespace(rt, meta, namespace)
        if not meta.get("name"):
            meta["name"] = self._generated_name(rt, meta)
        for server_field in (
            "resourceVersion",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "managedFields",
            "selfLink",
        ):
            meta.pop(server_field, None)
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = rfc3339()
        meta["generation"] = 1
        obj = self._reset_status_on_create(rt, obj)
        obj = admission.admit_priority(rt, obj)
        obj = admission.apply_defaults(rt, obj)
        if rt.custom is not None:
            obj = self._custom_admitted(rt, obj)
        admission.validate(rt, obj)
        key = self._key(rt, meta["name"], meta.get("namespace"))
        if key in self._bucket(rt).objects:
            raise AlreadyExists(
                f'{qualified(rt.plural, rt.group)} "{key[1]}" already exists',
                details=object_details(rt.plural, rt.group, key[1]),
            )
        stored = self._commit(rt, "ADDED", key, obj, None)
        return stored if owned else self._out(rt, stored)

    def _place_in_namespace(self, rt: ResourceType, meta: dict[str, Any], namespace: str | None) -> None:
        """Set ``metadata.namespace`` of a new object (the URL's, else the body's): it must exist and not be
        terminating. Cluster-scoped objects have none."""
        if not rt.namespaced:
            meta.pop("namespace", None)
            return
        body_ns = meta.get("namespace")
        if namespace and body_ns and body_ns != namespace:
            raise BadRequest(
                "the namespace of the provided object does not match the namespace sent on the "
                f"request ({body_ns!r} != {namespace!r})"
            )
        ns = namespace or body_ns
        if not ns:
            raise BadRequest(f"{rt.kind}: metadata.namespace: a namespace is required")
        ns_obj = self._bucket(self.registry.resource("v1", "Namespace")).objects.get(("", ns))
        if ns_obj is None:
            raise NotFound(f'namespaces "{ns}" not found', details=object_details("namespaces", "", ns))
        if ns_obj["metadata"].get("deletionTimestamp"):
            raise Forbidden(
                f'{rt.kind} "{meta.get("name") or ""}" is forbidden: unable to create new content '
                f"in namespace {ns} because it is being terminated"
            )
        meta["namespace"] = ns

    def _generated_name(self, rt: ResourceType, meta: dict[str, Any]) -> str:
        """``generateName`` plus five random characters, avoiding names taken in the namespace."""
        prefix = meta.get("generateName")
        if not prefix or not isinstance(prefix, str):
            raise Invalid(f"{rt.kind}: metadata.name: Required value: name or generateName is required")
        bucket = self._bucket(rt)
        for _ in range(16):
            candidate = prefix + "".join(random.choices(_NAME_SUFFIX_ALPHABET, k=5))
            if (meta.get("namespace", ""), candidate) not in bucket.objects:
                break
        return candidate

    def _check_type(self, rt: ResourceType, obj: dict[str, Any]) -> None:
        kind, api_version = obj.get("kind"), obj.get("apiVersion")
        if kind and kind != rt.kind:
            raise BadRequest(
                f'the kind "{kind}" in the body does not match the resource {rt.plural} ({rt.kind})'
            )
        if api_version and api_version != rt.api_version:
            same_group = rt.group and isinstance(api_version, str) and api_version.split("/")[0] == rt.group
            if not same_group:
                raise BadRequest(
                    f'the apiVersion "{api_version}" in the body does not match {rt.api_version}'
                )

    def _custom_admitted(
        self, rt: ResourceType, obj: dict[str, Any], old: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """A custom resource pruned to its CRD's schema (unknown fields handled as ``fieldValidation``
        says) and defaulted. ``old``: the stored version an update replaces."""
        schema = rt.custom.schema if rt.custom is not None else None
        if schema is None:
            return obj
        admitted = None
        if old is not None and rt.custom is not None and len(self.registry.defined(rt.custom.crd_name)) == 1:
            # A CRD serving one version prunes and defaults every write of the kind by this schema, and a
            # change of the CRD does so again to what is stored (crd_registration): the parts an update
            # shares with the stored object are pruned and defaulted already and need no walk.
            admitted = old
        obj, dropped = schema.prune(obj, admitted)
        if dropped:
            unknown = [f'unknown field "{path}"' for path in dropped]
            if self._field_validation == "Strict":
                raise BadRequest(
                    f'{rt.kind} in version "{rt.version}" cannot be handled as a {rt.kind}: strict decoding '
                    f"error: {', '.join(unknown)}"
                )
            if self._warnings is not None:
                self._warnings.extend(unknown)
        return schema.default(obj, admitted)

    @staticmethod
    def _reset_status_on_create(rt: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
        if is_crd(rt):
            obj.pop("status", None)
            meta = obj["metadata"]
            meta["finalizers"] = list(dict.fromkeys([*(meta.get("finalizers") or ()), CLEANUP_FINALIZER]))
            return obj
        if rt.group == "" and rt.plural == "pods":
            obj["status"] = {"phase": "Pending"}
        elif rt.group == "" and rt.plural == "namespaces":
            obj["status"] = {"phase": "Active"}
        elif rt.group == "" and rt.plural == "nodes":
            pass  # a kubelet registers its node with status in one create
        elif "status" in rt.subresources:
            obj.pop("status", None)
        return obj

    # ---------------------------------------------------------------- update

    def update(
        self,
        rt: ResourceType,
        obj: dict[str, Any],
        subresource: str | None = None,
        namespace: str | None = None,
        *,
        owned: bool = False,
    ) -> dict[str, Any]:
        """Replace an object (PUT). ``status`` replaces only ``.status``. ``owned``: see create."""
        if not isinstance(obj, dict):
            raise BadRequest(f"{rt.kind}: the request body must be a JSON object")
        stored = self._update_owned(rt, obj if owned else clone(obj), subresource, namespace)
        return stored if owned else self._out(rt, stored)

    def _update_owned(
        self, rt: ResourceType, obj: dict[str, Any], subresource: str | None, namespace: str | None
    ) -> dict[str, Any]:
        self._check_type(rt, obj)
        meta = obj.get("metadata")
        if not isinstance(meta, dict):
            raise Invalid(f"{rt.kind}: metadata: Required value")
        if namespace and meta.get("namespace") and meta["namespace"] != namespace:
            raise BadRequest(
                "the namespace of the provided object does not match the namespace sent on the request"
            )
        key = self._key(rt, meta.get("name", ""), namespace or meta.get("namespace"))
        old = self._stored(rt, key)
        self._check_resource_version(rt, key[1], old, meta.get("resourceVersion"))
        if subresource == "status":
            new = self._with_status_of(rt, old, obj)
            if rt.custom is not None:
                new = self._custom_admitted(rt, new, old)
        elif subresource is None:
            new = self._replacement(rt, old, obj, meta)
        else:
            raise NotFound(f'{rt.plural} has no "{subresource}" subresource that accepts updates')
        admission.validate(rt, new, old)
        return self._commit_update(rt, key, new, old)

    @staticmethod
    def _check_resource_version(rt: ResourceType, name: str, old: dict[str, Any], given: Any) -> None:
        """Optimistic concurrency: a write naming another resourceVersion than the stored one conflicts."""
        if given and given != old["metadata"]["resourceVersion"]:
            raise Conflict(
                f'Operation cannot be fulfilled on {qualified(rt.plural, rt.group)} "{name}": the '
                "object has been modified; please apply your changes to the latest version and try again",
                details=object_details(rt.plural, rt.group, name),
            )

    @staticmethod
    def _with_status_of(rt: ResourceType, old: dict[str, Any], obj: dict[str, Any]) -> dict[str, Any]:
        """A ``status`` subresource write: the stored object with only ``.status`` replaced."""
        if "status" not in rt.subresources:
            raise NotFound(f"{rt.plural} has no status subresource")
        new = dict(old)
        new["metadata"] = dict(old["metadata"])
        if obj.get("status") is None:
            new.pop("status", None)
        else:
            new["status"] = obj["status"]
        return new

    def _replacement(
        self, rt: ResourceType, old: dict[str, Any], obj: dict[str, Any], meta: dict[str, Any]
    ) -> dict[str, Any]:
        """A main-resource write: ``obj`` with the server-owned metadata (and status, where it is a
        subresource) kept from ``old``, defaults applied and ``generation`` bumped when the spec changed."""
        new = obj
        new["apiVersion"], new["kind"] = old["apiVersion"], rt.kind
        new_meta = dict(meta)
        for kept in _META_KEPT_ON_UPDATE:
            if kept in old["metadata"]:
                new_meta[kept] = old["metadata"][kept]
            else:
                new_meta.pop(kept, None)
        new["metadata"] = new_meta
        if "status" in rt.subresources:
            if "status" in old:
                new["status"] = old["status"]
            else:
                new.pop("status", None)
        new = admission.apply_defaults(rt, new)
        if rt.custom is not None:
            new = self._custom_admitted(rt, new, old)
        if rt.group == "" and rt.plural == "pods":
            admission.check_pod_spec_update(rt, old, new)
        if _spec_of(new) != _spec_of(old):
            new_meta["generation"] = int(old["metadata"].get("generation", 1)) + 1
        return new

    def _commit_update(
        self, rt: ResourceType, key: Key, new: dict[str, Any], old: dict[str, Any]
    ) -> dict[str, Any]:
        new["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"]
        if new == old:
            return old  # no-op writes do not bump the resourceVersion
        meta = new["metadata"]
        if (
            meta.get("deletionTimestamp")
            and not meta.get("finalizers")
            and not meta.get("deletionGracePeriodSeconds")
        ):
            return self._commit(rt, "DELETED", key, new, old)
        return self._commit(rt, "MODIFIED", key, new, old)

    # ---------------------------------------------------------------- patch

    def patch(
        self,
        rt: ResourceType,
        name: str,
        namespace: str | None,
        body: Any,
        content_type: str,
        subresource: str | None = None,
        *,
        owned: bool = False,
    ) -> dict[str, Any]:
        """Apply a merge, strategic-merge (built-in kinds only) or JSON patch; apply-patch creates if absent.

        ``owned=True`` hands ``body`` over and returns the stored object itself (see :meth:`create`).
        """
        key = self._key(rt, name, namespace)
        media = content_type.split(";", 1)[0].strip().lower()
        if media == patching.APPLY_PATCH and key not in self._bucket(rt).objects and subresource is None:
            if not isinstance(body, dict):
                raise BadRequest("apply patch: the body must be an object")
            body = clone(body)
            body.setdefault("metadata", {})["name"] = name
            return self.create(rt, body, namespace)
        if subresource == "scale":
            return self.patch_scale(rt, name, namespace, body, content_type)
        old = self._stored(rt, key)
        patched = patching.apply_patch(old, body, content_type, allow_strategic=not rt.is_custom)
        if not isinstance(patched, dict) or not isinstance(patched.get("metadata"), dict):
            raise Invalid(f'{rt.kind} "{name}": metadata: Required value: the patch removed metadata')
        if not (owned and media in _JSON_PATCH_TYPES):
            patched = clone(patched)
        meta = patched["metadata"]
        if meta.get("name") != name or (rt.namespaced and meta.get("namespace") != key[0]):
            raise Invalid(
                f'{rt.kind} "{name}": metadata.name: Invalid value: a patch may not change the name or '
                "namespace"
            )
        if subresource not in (None, "status"):
            raise NotFound(f'{rt.plural} has no "{subresource}" subresource that accepts patches')
        stored = self._update_owned(rt, patched, subresource, key[0] or None)
        return stored if owned else self._out(rt, stored)

    # ---------------------------------------------------------------- scale

    def _check_scalable(self, rt: ResourceType) -> None:
        if "scale" not in rt.subresources:
            raise NotFound(f"{qualified(rt.plural, rt.group)} has no scale subresource")

    def get_scale(self, rt: ResourceType, name: str, namespace: str | None = None) -> dict[str, Any]:
        """The ``autoscaling/v1 Scale`` view of a Deployment, ReplicaSet, MachineDeployment or NodePool."""
        self._check_scalable(rt)
        obj = self._stored(rt, self._key(rt, name, namespace))
        meta = obj["metadata"]
        paths = _scale_paths(rt)
        selector: Any = _at(obj, paths.label_selector) if paths.label_selector else None
        if paths.label_selector is None and rt.custom is None:
            selector = (obj.get("spec") or {}).get("selector") or (obj.get("status") or {}).get("selector")
        scale_meta = {
            k: meta[k]
            for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
            if k in meta
        }
        return {
            "kind": "Scale",
            "apiVersion": "autoscaling/v1",
            "metadata": scale_meta,
            "spec": {"replicas": int(_at(obj, paths.spec_replicas) or 0)},
            "status": {
                "replicas": int(_at(obj, paths.status_replicas) or 0),
                "selector": render_label_selector_dict(selector)
                if isinstance(selector, dict)
                else (selector or ""),
            },
        }

    def update_scale(
        self, rt: ResourceType, name: str, namespace: str | None, scale: dict[str, Any]
    ) -> dict[str, Any]:
        self._check_scalable(rt)
        if not isinstance(scale, dict) or not isinstance(scale.get("spec"), dict):
            raise BadRequest(f'Scale "{name}": spec: Required value')
        replicas = scale["spec"].get("replicas")
        if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
            raise Invalid(
                f'Scale "{name}" is invalid: spec.replicas: Invalid value: {replicas!r}: must be greater '
                "than or equal to 0"
            )
        key = self._key(rt, name, namespace)
        old = self._stored(rt, key)
        given_rv = (scale.get("metadata") or {}).get("resourceVersion")
        if given_rv and given_rv != old["metadata"]["resourceVersion"]:
            raise Conflict(
                f'Operation cannot be fulfilled on {qualified(rt.plural, rt.group)} "{name}": the object '
                "has been modified; please apply your changes to the latest version and try again",
                details=object_details(rt.plural, rt.group, name),
            )
        new = _with_value(old, _scale_paths(rt).spec_replicas, replicas)
        new["metadata"] = dict(old["metadata"])
        if new["spec"] != old.get("spec"):
            new["metadata"]["generation"] = int(old["metadata"].get("generation", 1)) + 1
        if rt.custom is not None:
            admission.validate(rt, new, old)  # a scale write is a spec write: the CRD's rules hold for it
        self._commit_update(rt, key, new, old)
        return self.get_scale(rt, name, namespace)

    def patch_scale(
        self, rt: ResourceType, name: str, namespace: str | None, body: Any, content_type: str
    ) -> dict[str, Any]:
        scale = self.get_scale(rt, name, namespace)
        patched = patching.apply_patch(scale, body, content_type, allow_strategic=True)
        return self.update_scale(rt, name, namespace, patched)

    # ---------------------------------------------------------------- delete

    def delete(
        self,
        rt: ResourceType,
        name: str,
        namespace: str | None = None,
        grace_period_seconds: int | None = None,
        propagation_policy: str = "Background",
        preconditions: dict[str, Any] | None = None,
    ) -> dict[str, Any] | None:
        """Delete; returns the object if it still exists (finalizers, graceful pod deletion), None if gone."""
        last, removed = self.delete_with_result(
            rt, name, namespace, grace_period_seconds, propagation_policy, preconditions
        )
        return None if removed else last

    def delete_with_result(
        self,
        rt: ResourceType,
        name: str,
        namespace: str | None = None,
        grace_period_seconds: int | None = None,
        propagation_policy: str = "Background",
        preconditions: dict[str, Any] | None = None,
    ) -> tuple[dict[str, Any], bool]:
        """Delete and return ``(last state, removed)``; the HTTP layer answers with the last state."""
        if propagation_policy not in ("Background", "Foreground", "Orphan"):
            raise BadRequest(
                f'propagationPolicy: Unsupported value: "{propagation_policy}": supported values: '
                '"Background", "Foreground", "Orphan"'
            )
        key = self._key(rt, name, namespace)
        old = self._stored(rt, key)
        self._check_preconditions(rt, name, old, preconditions)
        if propagation_policy == "Orphan":
            self._orphan_dependents(old["metadata"].get("uid"))
        new = dict(old)
        new["metadata"] = dict(old["metadata"])
        grace = self._pod_grace(rt, old, grace_period_seconds)
        if grace > 0:
            return self._delete_gracefully(rt, key, new, old, grace)
        uid = new["metadata"].get("uid", "")
        if propagation_policy == "Foreground" and uid and self._dependents.get(uid):
            return self._delete_in_foreground(rt, key, new, old, uid)
        if new["metadata"].get("finalizers"):
            return self._delete_pending_finalizers(rt, key, new, old)
        return self._delete_now(rt, key, new, old)

    @staticmethod
    def _check_preconditions(
        rt: ResourceType, name: str, old: dict[str, Any], preconditions: dict[str, Any] | None
    ) -> None:
        for field, expected in (preconditions or {}).items():
            if expected and old["metadata"].get(field) != expected:
                raise Conflict(
                    f'Operation cannot be fulfilled on {qualified(rt.plural, rt.group)} "{name}": '
                    f"Precondition failed: {field} in precondition: {expected}, "
                    f"{field} in object meta: {old['metadata'].get(field)}",
                    details=object_details(rt.plural, rt.group, name),
                )

    @staticmethod
    def _pod_grace(rt: ResourceType, old: dict[str, Any], requested: int | None) -> int:
        """How long a deleted object terminates: only a bound, running pod gets any (asked, or its own)."""
        if rt.group != "" or rt.plural != "pods":
            return 0
        spec, status = old.get("spec") or {}, old.get("status") or {}
        if not spec.get("nodeName") or status.get("phase") in _TERMINAL_PHASES:
            return 0
        if requested is not None:
            return max(0, requested)
        return int(spec.get("terminationGracePeriodSeconds", 30) or 0)

    def _delete_gracefully(
        self, rt: ResourceType, key: Key, new: dict[str, Any], old: dict[str, Any], grace: int
    ) -> tuple[dict[str, Any], bool]:
        """A running pod: ``deletionTimestamp`` = now + grace; the kubelet deletes it when it has stopped."""
        meta = new["metadata"]
        current = meta.get("deletionGracePeriodSeconds")
        if meta.get("deletionTimestamp") and current is not None and current <= grace:
            return self._out(rt, old), False  # already terminating at least as fast
        meta["deletionTimestamp"] = rfc3339(time.time() + grace)
        meta["deletionGracePeriodSeconds"] = grace
        return self._out(rt, self._commit(rt, "MODIFIED", key, new, old)), False

    def _delete_in_foreground(
        self, rt: ResourceType, key: Key, new: dict[str, Any], old: dict[str, Any], uid: str
    ) -> tuple[dict[str, Any], bool]:
        """The owner stays, with deletionTimestamp and the foregroundDeletion finalizer, until the garbage
        collector has deleted every dependent; then the finalizer goes and so does the owner."""
        meta = new["metadata"]
        if meta.get("deletionTimestamp") and FOREGROUND_FINALIZER in (meta.get("finalizers") or ()):
            return self._out(rt, old), False
        meta["finalizers"] = [*(meta.get("finalizers") or ()), FOREGROUND_FINALIZER]
        meta.setdefault("deletionTimestamp", rfc3339())
        meta["deletionGracePeriodSeconds"] = 0
        if not self._dry_run:
            self._foreground.add(uid)
        committed = self._commit(rt, "MODIFIED", key, new, old)
        self._queue_gc(uid, "Foreground")
        return self._out(rt, committed), False

    def _delete_pending_finalizers(
        self, rt: ResourceType, key: Key, new: dict[str, Any], old: dict[str, Any]
    ) -> tuple[dict[str, Any], bool]:
        """An object with finalizers only gets ``deletionTimestamp``; it goes when the last one is removed."""
        meta = new["metadata"]
        if meta.get("deletionTimestamp") and meta.get("deletionGracePeriodSeconds") == 0:
            return self._out(rt, old), False
        meta.setdefault("deletionTimestamp", rfc3339())
        meta["deletionGracePeriodSeconds"] = 0
        if rt.group == "" and rt.plural == "namespaces":
            self._start_namespace_deletion(key[1])
        return self._out(rt, self._commit(rt, "MODIFIED", key, new, old)), False

    def _delete_now(
        self, rt: ResourceType, key: Key, new: dict[str, Any], old: dict[str, Any]
    ) -> tuple[dict[str, Any], bool]:
        """Remove now; a namespace first deletes its contents and stays Terminating while some remain."""
        meta = new["metadata"]
        meta.setdefault("deletionTimestamp", rfc3339())
        meta["deletionGracePeriodSeconds"] = 0
        if rt.group == "" and rt.plural == "namespaces":
            new["status"] = {**(old.get("status") or {}), "phase": "Terminating"}
            if self._start_namespace_deletion(key[1]):
                return self._out(rt, self._commit(rt, "MODIFIED", key, new, old)), False
            meta.pop("deletionGracePeriodSeconds", None)
        return self._out(rt, self._commit(rt, "DELETED", key, new, old)), True

    def delete_collection(
        self,
        rt: ResourceType,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        grace_period_seconds: int | None = None,
        propagation_policy: str = "Background",
    ) -> ObjectList:
        items, _ = self.list(rt, namespace, label_selector, field_selector)
        out: ObjectList = []
        for item in items:
            meta = item["metadata"]
            with contextlib.suppress(NotFound):
                last, _removed = self.delete_with_result(
                    rt, meta["name"], meta.get("namespace"), grace_period_seconds, propagation_policy
                )
                out.append(last)
        return out

    # -- namespaces --

    def _start_namespace_deletion(self, namespace: str) -> bool:
        """Delete everything in the namespace; True if something is still terminating there."""
        for bucket in list(self._buckets.values()):
            if not bucket.rt.namespaced:
                continue
            for key in [k for k in bucket.objects if k[0] == namespace]:
                obj = bucket.objects.get(key)
                if obj is None or obj["metadata"].get("deletionTimestamp"):
                    continue
                with contextlib.suppress(NotFound):
                    self.delete_with_result(bucket.rt, key[1], namespace)
        return self._namespace_has_content(namespace)

    def _namespace_has_content(self, namespace: str) -> bool:
        return any(k[0] == namespace for b in self._buckets.values() if b.rt.namespaced for k in b.objects)

    def _maybe_finish_namespace(self, namespace: str) -> None:
        ns_rt = self.registry.resource("v1", "Namespace")
        ns_obj = self._bucket(ns_rt).objects.get(("", namespace))
        if (
            ns_obj is None
            or not ns_obj["metadata"].get("deletionTimestamp")
            or ns_obj["metadata"].get("finalizers")
        ):
            return
        if self._namespace_has_content(namespace):
            return
        new = dict(ns_obj)
        new["metadata"] = dict(ns_obj["metadata"])
        new["metadata"]["deletionGracePeriodSeconds"] = 0
        self._commit(ns_rt, "DELETED", ("", namespace), new, ns_obj)

    # -- garbage collection --

    def _orphan_dependents(self, uid: str | None) -> None:
        if not uid:
            return
        for storage_key, key in list(self._dependents.get(uid, ())):
            bucket = self._buckets[storage_key]
            dep = bucket.objects.get(key)
            if dep is None:
                continue
            new = dict(dep)
            new["metadata"] = dict(dep["metadata"])
            new["metadata"]["ownerReferences"] = [
                r for r in dep["metadata"].get("ownerReferences") or () if r.get("uid") != uid
            ]
            if not new["metadata"]["ownerReferences"]:
                del new["metadata"]["ownerReferences"]
            self._commit_update(bucket.rt, key, new, dep)

    def _queue_gc(self, uid: str, policy: str) -> None:
        if self._dry_run:
            return
        self._gc_queue.append((uid, policy))
        if self._gc_scheduled:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.collect_garbage()
            return
        self._gc_scheduled = True
        loop.call_soon(self.collect_garbage)

    def collect_garbage(self) -> int:
        """Delete dependents whose owners are all gone (or drop the dangling reference). Returns deletions."""
        self._gc_scheduled = False
        deleted = 0
        while self._gc_queue:
            owner_uid, policy = self._gc_queue.pop(0)
            for storage_key, key in list(self._dependents.get(owner_uid, ())):
                bucket = self._buckets[storage_key]
                dep = bucket.objects.get(key)
                if dep is None:
                    continue
                refs = dep["metadata"].get("ownerReferences") or []
                alive = [r for r in refs if r.get("uid") != owner_uid and r.get("uid") in self._uids]
                if alive:
                    new = dict(dep)
                    new["metadata"] = {**dep["metadata"], "ownerReferences": alive}
                    self._commit_update(bucket.rt, key, new, dep)
                    continue
                if dep["metadata"].get("deletionTimestamp") and bucket.rt.plural != "pods":
                    continue
                with contextlib.suppress(ApiError):
                    # dependents of an owner deleted in the foreground are deleted in the foreground too
                    self.delete_with_result(
                        bucket.rt,
                        key[1],
                        key[0] or None,
                        propagation_policy="Foreground" if policy == "Foreground" else "Background",
                    )
                    deleted += 1
        return deleted

    # ---------------------------------------------------------------- pods: binding and eviction

    def bind(
        self, name: str, namespace: str, node_name: str, annotations: dict[str, str] | None = None
    ) -> dict[str, Any]:
        """What ``POST pods/{name}/binding`` does: set ``spec.nodeName`` and ``PodScheduled=True``."""
        rt = self.registry.resource("v1", "Pod")
        if not node_name:
            raise Invalid(f'Binding "{name}" is invalid: target.name: Required value')
        key = self._key(rt, name, namespace)
        old = self._stored(rt, key)
        if old["metadata"].get("deletionTimestamp"):
            raise Conflict(
                f'Operation cannot be fulfilled on pods/binding "{name}": pod {name} is being deleted, '
                "cannot be assigned to a host",
                details=object_details("pods/binding", "", name),
            )
        if (old.get("spec") or {}).get("nodeName"):
            raise Conflict(
                f'Operation cannot be fulfilled on pods/binding "{name}": pod {name} is already assigned '
                f'to node "{old["spec"]["nodeName"]}"',
                details=object_details("pods/binding", "", name),
            )
        new = dict(old)
        new["metadata"] = dict(old["metadata"])
        if annotations:
            new["metadata"]["annotations"] = {**(old["metadata"].get("annotations") or {}), **annotations}
        new["spec"] = {**old["spec"], "nodeName": node_name}
        status = dict(old.get("status") or {})
        conditions = [c for c in status.get("conditions") or () if c.get("type") != "PodScheduled"]
        conditions.append(
            {"type": "PodScheduled", "status": "True", "lastProbeTime": None, "lastTransitionTime": rfc3339()}
        )
        status["conditions"] = conditions
        new["status"] = status
        self._commit(rt, "MODIFIED", key, new, old)
        return _success_status()

    def evict(
        self, name: str, namespace: str, delete_options: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """The eviction subresource: honour PodDisruptionBudgets, then delete the pod gracefully.

        Raises TooManyRequests (429) when a matching budget has ``status.disruptionsAllowed`` 0 or has not
        observed its latest generation, InternalError (500) when more than one budget matches (as upstream).
        """
        pod_rt = self.registry.resource("v1", "Pod")
        pod = self._stored(pod_rt, self._key(pod_rt, name, namespace))
        options = delete_options or {}
        grace = options.get("gracePeriodSeconds")
        preconditions = options.get("preconditions") or None
        phase = (pod.get("status") or {}).get("phase")
        if phase in ("Pending", "Succeeded", "Failed") or pod["metadata"].get("deletionTimestamp"):
            self.delete_with_result(pod_rt, name, namespace, grace, preconditions=preconditions)
            return _success_status()
        pdb_rt = self.registry.resource("policy/v1", "PodDisruptionBudget")
        pdb_bucket = self._bucket(pdb_rt)
        labels = pod["metadata"].get("labels") or {}
        matching = [
            (k, p) for k, p in pdb_bucket.objects.items() if k[0] == namespace and _pdb_selects(p, labels)
        ]
        if len(matching) > 1:
            raise InternalError(
                "This pod has more than one PodDisruptionBudget, which the eviction subresource "
                "does not support."
            )
        if matching:
            key, pdb = matching[0]
            status = pdb.get("status") or {}
            pdb_name = pdb["metadata"]["name"]
            if int(status.get("observedGeneration", 0) or 0) < int(pdb["metadata"].get("generation", 1)):
                raise _too_many(
                    "Cannot evict pod as it would violate the pod's disruption budget.",
                    f"The disruption budget {pdb_name} is still being processed by the server.",
                )
            allowed = int(status.get("disruptionsAllowed", 0) or 0)
            if allowed <= 0:
                raise _too_many(
                    "Cannot evict pod as it would violate the pod's disruption budget.",
                    f"The disruption budget {pdb_name} needs {status.get('desiredHealthy', 0)} healthy "
                    f"pods and has {status.get('currentHealthy', 0)} currently",
                )
            new = dict(pdb)
            new["metadata"] = dict(pdb["metadata"])
            disrupted = dict(status.get("disruptedPods") or {})
            disrupted[name] = rfc3339()
            new["status"] = {**status, "disruptionsAllowed": allowed - 1, "disruptedPods": disrupted}
            self._commit(pdb_rt, "MODIFIED", key, new, pdb)
        self.delete_with_result(pod_rt, name, namespace, grace, preconditions=preconditions)
        return _success_status()

    # ---------------------------------------------------------------- watch

    def watch(
        self,
        rt: ResourceType,
        namespace: str | None = None,
        resource_version: str | None = None,
        label_selector: str | LabelSelector | None = None,
        field_selector: str | FieldSelector | None = None,
        *,
        allow_bookmarks: bool = False,
        bookmark_interval: float | None = None,
    ) -> Watch:
        """A watch; ``resource_version`` None/""/"0" starts with synthetic ADDED events for what exists."""
        labels, fields = self._selectors(rt, label_selector, field_selector)
        bucket = self._bucket(rt)
        ns = namespace if rt.namespaced and namespace else None
        watch = Watch(
            self,
            bucket,
            rt,
            ns,
            labels,
            fields,
            allow_bookmarks,
            self.bookmark_interval if bookmark_interval is None else bookmark_interval,
        )
        if resource_version in (None, "", "0"):
            for key in sorted(bucket.objects):
                obj = bucket.objects[key]
                if ns is not None and key[0] != ns:
                    continue
                if labels.matches(obj["metadata"].get("labels")) and fields.matches(obj):
                    watch._queue.put_nowait(_Event("ADDED", obj, int(obj["metadata"]["resourceVersion"])))
        else:
            try:
                since = int(resource_version)
            except ValueError as exc:
                raise BadRequest(
                    f'resourceVersion: Invalid value: "{resource_version}": must be an integer'
                ) from exc
            if since < bucket.compacted_rv:
                raise Expired(f"too old resource version: {since} ({bucket.compacted_rv + 1})")
            last_by_uid: dict[str, dict[str, Any]] = {}
            for event in bucket.history:
                uid = event.obj["metadata"].get("uid", "")
                if event.rv > since:
                    watch._offer(event, last_by_uid.get(uid) if event.type == "MODIFIED" else None)
                last_by_uid[uid] = event.obj
        bucket.watchers.add(watch)
        return watch

    def watcher_count(self, rt: ResourceType | None = None) -> int:
        if rt is not None:
            return len(self._bucket(rt).watchers)
        return sum(len(b.watchers) for b in self._buckets.values())

    def close_watches(self) -> None:
        """End every open watch (server shutdown)."""
        for bucket in self._buckets.values():
            for watcher in list(bucket.watchers):
                watcher.close()


_DEFAULT_SCALE = ScalePaths(("spec", "replicas"), ("status", "replicas"), None)


def _scale_paths(rt: ResourceType) -> ScalePaths:
    """Where a kind keeps its replicas: its CRD's scale paths, else spec.replicas and status.replicas."""
    custom = rt.custom.scale if rt.custom is not None else None
    return custom or _DEFAULT_SCALE


def _at(obj: Any, path: tuple[str, ...]) -> Any:
    for part in path:
        obj = obj.get(part) if isinstance(obj, dict) else None
    return obj


def _with_value(obj: dict[str, Any], path: tuple[str, ...], value: Any) -> dict[str, Any]:
    """A copy of ``obj`` with ``value`` at ``path`` (the dicts on the way copied, the rest shared)."""
    if len(path) == 1:
        return {**obj, path[0]: value}
    inner = obj.get(path[0])
    return {**obj, path[0]: _with_value(inner if isinstance(inner, dict) else {}, path[1:], value)}


def _node_of(obj: dict[str, Any] | None) -> str:
    return ((obj or {}).get("spec") or {}).get("nodeName") or ""


def _reindex_node(
    index: dict[str, set[Key]], key: Key, old: dict[str, Any] | None, new: dict[str, Any] | None
) -> None:
    before, after = _node_of(old) if old is not None else None, _node_of(new) if new is not None else None
    if before == after:
        return
    if before is not None:
        keys = index.get(before)
        if keys is not None:
            keys.discard(key)
            if not keys:
                del index[before]
    if after is not None:
        index.setdefault(after, set()).add(key)


def _spec_of(obj: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in obj.items() if k not in ("metadata", "status", "apiVersion", "kind")}


def _pdb_selects(pdb: dict[str, Any], labels: dict[str, str]) -> bool:
    try:
        return from_label_selector_dict((pdb.get("spec") or {}).get("selector")).matches(labels)
    except ApiError:
        return False


def _success_status() -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}


def _too_many(message: str, cause: str) -> TooManyRequests:
    return TooManyRequests(message, details={"causes": [{"reason": "DisruptionBudget", "message": cause}]})
