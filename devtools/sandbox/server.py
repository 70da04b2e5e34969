"""The sandbox's HTTP face: the Kubernetes REST API over one :class:`~devtools.sandbox.store.Store` (aiohttp).

Layers: this module only translates HTTP to store calls and store results (or :class:`ApiError`) to HTTP. All
semantics (resource versions, conflicts, selectors, patches, deletion, eviction) live in the store, so the
in-process controllers and HTTP clients cannot disagree.

Paths
-----
One catch-all route parses ``/api/v1/...`` and ``/apis/{group}/{version}/...`` into
``[namespaces/{ns}/]{plural}[/{name}[/{subresource}]]`` with the resource registry, which is both faster and
simpler than registering hundreds of aiohttp routes. Verbs map as the real server's do: GET (get, list, watch
with ``?watch=true``), POST (create, ``binding``, ``eviction``), PUT (update, ``status``, ``scale``), PATCH
(the three patch types plus apply), DELETE (object or collection).

Watch streaming
---------------
A watch answers 200 with a chunked body of newline-delimited compact JSON events; events already queued are
written in one batch. The server ends a watch after ``timeoutSeconds`` or, without it, after a random time in
``[watch_max_seconds/2, watch_max_seconds]`` (the real server's ``minRequestTimeout`` behaviour, scaled down
so clients' reconnect paths run in tests). ``allowWatchBookmarks`` brings a BOOKMARK every
``bookmark_interval`` seconds when the stream is idle. A resourceVersion older than the kept history answers
200 with a single ``ERROR`` event carrying a 410 ``Expired`` Status, exactly as upstream, which is what makes
kubernetes-asyncio raise ``ApiException(410)`` and clients re-list.

Discovery and OpenAPI
---------------------
Legacy discovery (``/api``, ``/api/v1``, ``/apis``, ``/apis/{g}``, ``/apis/{g}/{v}``) lists every registered
kind with verbs, short names and subresources (``pods/eviction`` names ``policy/v1 Eviction``, which ``kubectl
drain`` checks). ``/openapi/v3`` serves a minimal document per group-version: one ``patch`` operation per kind
with its ``x-kubernetes-group-version-kind`` and the ``fieldValidation`` parameter, which is all ``kubectl
apply`` needs to validate server-side. When the client prefers ``as=Table`` (kubectl get, also with ``-w``),
lists, single objects and watch events are rendered by :mod:`devtools.sandbox.tables`.

Kinds come and go with CustomResourceDefinitions: discovery and OpenAPI are read from the store's registry
on each request (the OpenAPI index is cached per registry generation), and a custom kind's document carries
its CRD's schema under ``components.schemas`` with its ``x-kubernetes-group-version-kind``, which is what
``kubectl explain`` reads. ``fieldValidation`` (``Strict``, ``Warn``, the default for HTTP clients as on a
real server, or ``Ignore``) decides what a write of a custom resource does with fields its schema does not
know; warnings come back as ``Warning: 299`` headers, which kubectl prints.

Errors are always ``kind: Status`` JSON with the right code; unexpected exceptions become a 500 Status with
the exception type and message, never a stack trace (the trace goes to the log).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import msgspec
import yaml
from aiohttp import web

from devtools.sandbox.errors import (
    ApiError,
    BadRequest,
    Expired,
    InternalError,
    MethodNotAllowed,
    NotFound,
)
from devtools.sandbox.protobuf import decode_object, is_protobuf
from devtools.sandbox.resources import MAIN_VERBS, ResourceType
from devtools.sandbox.store import Store
from devtools.sandbox.tables import render_table, wants_table

log = logging.getLogger(__name__)

_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder().decode
_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})
SERVER_VERSION = {
    "major": "1",
    "minor": "32",
    "gitVersion": "v1.32.0-tenon-sandbox",
    "gitCommit": "tenon",
    "gitTreeState": "clean",
    "buildDate": "2026-01-01T00:00:00Z",
    "goVersion": "go1.23",
    "compiler": "gc",
    "platform": "linux/amd64",
}
STORE_KEY: web.AppKey[Store] = web.AppKey("store", Store)


@dataclass(frozen=True)
class ServerConfig:
    watch_max_seconds: float = 1800.0  # watches without timeoutSeconds end after [max/2, max]
    bookmark_interval: float | None = None  # None: the store's bookmark_interval


@dataclass(frozen=True)
class Target:
    """A parsed resource path."""

    rt: ResourceType
    namespace: str | None
    name: str | None
    subresource: str | None


def parse_bool(value: str | None, param: str) -> bool:
    """Go ``strconv.ParseBool`` semantics (the client sends ``True``)."""
    if value is None or value == "":
        return False
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise BadRequest(f'{param}: Invalid value: "{value}": must be a boolean')


def parse_int(value: str | None, param: str) -> int | None:
    if value is None or value == "":
        return None
    try:
        return int(value)
    except ValueError as exc:
        raise BadRequest(f'{param}: Invalid value: "{value}": must be an integer') from exc


def _quoted(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')


def json_response(data: Any, status: int = 200) -> web.Response:
    return web.Response(body=_encode(data), status=status, content_type="application/json")


def error_response(error: ApiError) -> web.Response:
    return json_response(error.to_status(), error.code)


class _WatchFrames:
    """Watch frames: the stored event's own line, or a Table per event for ``kubectl get -w``."""

    def __init__(self, rt: ResourceType, tables: bool, include_object: str) -> None:
        self.rt = rt
        self.tables = tables
        self.include_object = include_object
        self.columns_sent = False  # the first Table carries the column definitions

    def frame(self, event: Any) -> bytes:
        if not self.tables or event.type == "BOOKMARK":
            line: bytes = event.line(self.rt.api_version)
            return line
        table = render_table(
            self.rt, [event.obj], include_object=self.include_object, with_columns=not self.columns_sent
        )
        self.columns_sent = True
        return _encode({"type": event.type, "object": table}) + b"\n"


async def _stream_events(
    request: web.Request,
    response: web.StreamResponse,
    watch: Any,
    frames: _WatchFrames,
    deadline: float,
    bookmark_interval: float | None,
) -> None:
    """Write events (queued ones in one batch) until the deadline, the client leaves or the watch closes;
    with bookmarks, a BOOKMARK every ``bookmark_interval`` seconds of quiet."""
    loop = asyncio.get_running_loop()
    last_bookmark = loop.time()
    while (remaining := deadline - loop.time()) > 0:
        wait = min(remaining, 1.0)
        if bookmark_interval is not None:
            wait = max(0.001, min(wait, last_bookmark + bookmark_interval - loop.time()))
        event = await watch.next_raw(wait)
        if event is not None:
            await response.write(b"".join(frames.frame(e) for e in [event, *watch.drain_raw()]))
            continue
        transport = request.transport
        if transport is None or transport.is_closing():
            return
        if (
            bookmark_interval is not None
            and watch.pending == 0
            and loop.time() - last_bookmark >= bookmark_interval
        ):
            await response.write(frames.frame(watch.bookmark()))
            last_bookmark = loop.time()


class ApiServer:
    """Request handling for one store."""

    def __init__(self, store: Store, config: ServerConfig) -> None:
        self.store = store
        self.config = config
        self.registry = store.registry
        self._openapi_index: tuple[int, dict[str, Any]] | None = None  # (registry generation, index)

    # ------------------------------------------------------------------ routing

    async def dispatch(self, request: web.Request) -> web.StreamResponse:
        """The one route's handler. Every failure leaves as a ``kind: Status`` body, never a stack trace;
        caught here rather than in a middleware, which would cost every request a wrapper of its own."""
        try:
            return await self.route(request)
        except ApiError as error:
            return error_response(error)
        except web.HTTPException:
            raise
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the one place that must not let anything through
            log.exception("sandbox: unexpected error on %s %s", request.method, request.path)
            return error_response(InternalError(f"internal error: {type(exc).__name__}: {exc}"))

    async def route(self, request: web.Request) -> web.StreamResponse:
        parts = [p for p in request.path.split("/") if p]
        if not parts:
            return json_response(
                {"paths": ["/api", "/api/v1", "/apis", "/openapi/v3", "/version", "/healthz"]}
            )
        head = parts[0]
        if head in ("healthz", "livez", "readyz"):
            return web.Response(text="ok")
        if head == "version":
            return json_response(SERVER_VERSION)
        if head == "openapi":
            return self.openapi(parts, request)
        if head == "api":
            if len(parts) == 1:
                return json_response(self.api_versions(request))
            group, version, rest = "", parts[1], parts[2:]
        elif head == "apis":
            if len(parts) == 1:
                return json_response(self.group_list())
            if len(parts) == 2:
                return json_response(self.group(parts[1]))
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            raise NotFound("the server could not find the requested resource")
        if not rest:
            return json_response(self.resource_list(group, version))
        target = self.parse_target(group, version, rest)
        return await self.handle(request, target)

    def parse_target(self, group: str, version: str, rest: list[str]) -> Target:
        if not self.registry.in_group_version(group, version):
            raise NotFound(f"the server could not find the requested resource ({group or 'core'}/{version})")
        if rest[0] == "namespaces" and len(rest) >= 3:
            rt = self.registry.lookup(group, version, rest[2])
            if rt is not None and rt.namespaced:
                if len(rest) > 5:
                    raise NotFound("the server could not find the requested resource")
                return Target(
                    rt, rest[1], rest[3] if len(rest) > 3 else None, rest[4] if len(rest) > 4 else None
                )
            namespaces = self.registry.lookup(group, version, "namespaces")
            if namespaces is None or rest[2] not in namespaces.subresources:
                raise NotFound(
                    f'the server could not find the requested resource: "{rest[2]}" is not served in '
                    f"{group + '/' if group else ''}{version}"
                )
        rt = self.registry.lookup(group, version, rest[0])
        if rt is None or len(rest) > 3:
            raise NotFound(
                f'the server could not find the requested resource: "{"/".join(rest)}" in '
                f"{group + '/' if group else ''}{version}"
            )
        sub = rest[2] if len(rest) > 2 else None
        if sub is not None and sub not in rt.subresources:
            raise NotFound(
                f'the server could not find the requested resource: {rt.plural} has no "{sub}" subresource'
            )
        return Target(rt, None, rest[1] if len(rest) > 1 else None, sub)

    async def handle(self, request: web.Request, target: Target) -> web.StreamResponse:
        dry_run = request.query.get("dryRun") if request.query_string else None
        if request.method == "GET" or (not dry_run and target.rt.custom is None):
            return await self.handle_request(request, target)  # no flags to set: the common case
        if dry_run and dry_run != "All":
            raise BadRequest(f'dryRun: Unsupported value: "{dry_run}": supported values: "All"')
        await request.read()  # the body is read before the flags are set: nothing awaits inside them
        dry = self.store.dry_run() if dry_run else contextlib.nullcontext()
        with self.store.field_validation(request.query.get("fieldValidation") or "Warn") as warnings, dry:
            response = await self.handle_request(request, target)
        for warning in dict.fromkeys(warnings):
            response.headers.add("Warning", f'299 - "{_quoted(warning)}"')
        return response

    async def handle_request(self, request: web.Request, target: Target) -> web.StreamResponse:
        rt, sub = target.rt, target.subresource
        if rt.verbs != MAIN_VERBS:
            self._check_create_only(request.method, target)
            if rt.plural == "bindings" and target.namespace is not None:
                return json_response(self.bind(await self.body(request), target.namespace, None), 201)
        if target.name is None:
            return await self._handle_collection(request, target)
        if sub is not None and sub not in rt.subresources:
            raise NotFound(f'{rt.plural} has no "{sub}" subresource')
        handler = self._object_handlers.get(request.method)
        response = await handler(self, request, target) if handler is not None else None
        if response is None:
            raise MethodNotAllowed(
                f"{request.method} is not supported on {rt.plural}{'/' + sub if sub else ''}"
            )
        return response

    @staticmethod
    def _check_create_only(method: str, target: Target) -> None:
        """Kinds served with fewer verbs (``bindings``) accept only a create on their collection."""
        rt = target.rt
        if not (method == "POST" and target.name is None and "create" in rt.verbs):
            raise MethodNotAllowed(f"{method} is not supported on {rt.plural} (verbs: {', '.join(rt.verbs)})")

    async def _handle_collection(self, request: web.Request, target: Target) -> web.StreamResponse:
        """list, watch, create and deletecollection."""
        method, q, rt, ns = request.method, request.query, target.rt, target.namespace
        if method == "GET":
            if parse_bool(q.get("watch"), "watch"):
                return await self.watch(request, target)
            return self.list_objects(request, target)
        if method == "POST":
            body = await self.body(request)
            return self._object_response(rt, self.store.create(rt, body, ns, owned=True), 201)
        if method == "DELETE":
            options = await self.delete_options(request)
            items = self.store.delete_collection(
                rt, ns, q.get("labelSelector"), q.get("fieldSelector"), options["grace"], options["policy"]
            )
            return json_response(self.list_body(rt, items, self.store.resource_version, None, None))
        raise MethodNotAllowed(f"{method} is not supported on a collection of {rt.plural}")

    async def _get_object(self, request: web.Request, target: Target) -> web.StreamResponse | None:
        rt, ns, name, sub = target.rt, target.namespace, target.name or "", target.subresource
        if sub == "scale":
            return json_response(self.store.get_scale(rt, name, ns))
        if sub not in (None, "status"):
            return None
        obj = self.store.get(rt, name, ns)
        if sub is None and wants_table(request.headers.get("Accept")):
            return json_response(
                render_table(
                    rt,
                    [obj],
                    include_object=request.query.get("includeObject", "Metadata"),
                    list_metadata={"resourceVersion": obj["metadata"].get("resourceVersion", "")},
                )
            )
        return json_response(obj)

    async def _put_object(self, request: web.Request, target: Target) -> web.StreamResponse | None:
        rt, ns, name, sub = target.rt, target.namespace, target.name or "", target.subresource
        body = await self.body(request)
        if sub == "scale":
            return json_response(self.store.update_scale(rt, name, ns, body))
        if sub not in (None, "status"):
            return None
        body_name = (body.get("metadata") or {}).get("name") if isinstance(body, dict) else None
        if body_name != name:
            raise BadRequest(
                f"the name of the object ({body_name}) does not match the name on the URL ({name})"
            )
        return self._object_response(rt, self.store.update(rt, body, sub, ns, owned=True))

    async def _patch_object(self, request: web.Request, target: Target) -> web.StreamResponse | None:
        rt, ns, name = target.rt, target.namespace, target.name or ""
        body = await self.body(request, allow_list=True)
        content_type = request.headers.get("Content-Type", "")
        patched = self.store.patch(rt, name, ns, body, content_type, target.subresource, owned=True)
        return self._object_response(rt, patched)

    async def _post_object(self, request: web.Request, target: Target) -> web.StreamResponse | None:
        """The ``binding`` and ``eviction`` subresources of a pod."""
        ns, name, sub = target.namespace, target.name or "", target.subresource
        body = await self.body(request)
        if ns is None or sub not in ("binding", "eviction"):
            return None
        if sub == "binding":
            return json_response(self.bind(body, ns, name), 201)
        if not isinstance(body, dict):
            raise BadRequest("Eviction: the body must be an object")
        body_name = (body.get("metadata") or {}).get("name")
        if body_name and body_name != name:
            raise BadRequest(f"name in URL does not match name in Eviction object ({body_name} != {name})")
        return json_response(self.store.evict(name, ns, body.get("deleteOptions")), 201)

    async def _delete_object(self, request: web.Request, target: Target) -> web.StreamResponse | None:
        if target.subresource is not None:
            return None
        options = await self.delete_options(request)
        last, _removed = self.store.delete_with_result(
            target.rt,
            target.name or "",
            target.namespace,
            options["grace"],
            options["policy"],
            options["preconditions"],
        )
        return json_response(last)

    _object_handlers: dict[
        str, Callable[[ApiServer, web.Request, Target], Awaitable[web.StreamResponse | None]]
    ] = {
        "GET": _get_object,
        "PUT": _put_object,
        "PATCH": _patch_object,
        "POST": _post_object,
        "DELETE": _delete_object,
    }

    def _object_response(self, rt: ResourceType, stored: dict[str, Any], status: int = 200) -> web.Response:
        """A stored object as the requested version shows it (only ``apiVersion`` differs), in the bytes its
        watch event carries."""
        if stored.get("kind") != rt.kind:
            return json_response(stored, status)  # e.g. an autoscaling/v1 Scale from a scale patch, as it is
        body = self.store.encoded(rt, stored)
        return web.Response(body=body, status=status, content_type="application/json")

    def bind(self, body: Any, namespace: str, pod_name: str | None) -> dict[str, Any]:
        """``pods/{name}/binding`` (pod named in the path) or the ``bindings`` collection (in the body)."""
        if not isinstance(body, dict):
            raise BadRequest("Binding: the body must be an object")
        metadata = body.get("metadata") or {}
        name = pod_name or metadata.get("name")
        if not name:
            raise BadRequest("Binding: metadata.name: Required value (the pod to bind)")
        if pod_name and metadata.get("name") and metadata["name"] != pod_name:
            raise BadRequest(
                f"Binding: metadata.name ({metadata['name']}) does not match the pod in the URL ({pod_name})"
            )
        target_ref = body.get("target")
        if not isinstance(target_ref, dict) or not target_ref.get("name"):
            raise BadRequest(f'Binding "{name}": target.name: Required value')
        return self.store.bind(name, namespace, target_ref["name"], metadata.get("annotations"))

    # ------------------------------------------------------------------ bodies and options

    async def body(self, request: web.Request, *, allow_list: bool = False) -> Any:
        raw = await request.read()
        if not raw.strip():
            raise BadRequest("the request body is empty")
        content_type = request.headers.get("Content-Type", "application/json").split(";")[0].strip().lower()
        if is_protobuf(content_type):
            return decode_object(raw)  # kubectl create namespace|deployment|poddisruptionbudget
        try:
            data = _decode(raw)
        except msgspec.DecodeError as exc:
            if content_type.endswith("yaml"):
                try:
                    data = yaml.safe_load(raw)
                except yaml.YAMLError as yaml_exc:
                    raise BadRequest(f"the request body is not valid YAML: {yaml_exc}") from yaml_exc
            else:
                raise BadRequest(f"the request body is not valid JSON: {exc}") from exc
        if isinstance(data, list) and allow_list:
            return data
        if not isinstance(data, dict):
            if allow_list:
                raise BadRequest("the request body must be a JSON object or, for a JSON patch, a list")
            raise BadRequest("the request body must be a JSON object")
        return data

    async def delete_options(self, request: web.Request) -> dict[str, Any]:
        options: dict[str, Any] = {}
        raw = await request.read()
        if raw.strip():
            try:
                options = _decode(raw)
            except msgspec.DecodeError as exc:
                raise BadRequest(f"DeleteOptions: the request body is not valid JSON: {exc}") from exc
            if not isinstance(options, dict):
                raise BadRequest("DeleteOptions: the request body must be a JSON object")
        q = request.query
        grace = options.get("gracePeriodSeconds")
        if q.get("gracePeriodSeconds"):
            grace = parse_int(q.get("gracePeriodSeconds"), "gracePeriodSeconds")
        if grace is not None and not isinstance(grace, int):
            raise BadRequest("DeleteOptions.gracePeriodSeconds: must be an integer")
        policy = q.get("propagationPolicy") or options.get("propagationPolicy") or "Background"
        if options.get("orphanDependents") is True or parse_bool(
            q.get("orphanDependents"), "orphanDependents"
        ):
            policy = "Orphan"
        return {"grace": grace, "policy": policy, "preconditions": options.get("preconditions")}

    # ------------------------------------------------------------------ list and watch

    def list_body(
        self, rt: ResourceType, items: list[dict[str, Any]], rv: str, token: str | None, remaining: int | None
    ) -> dict[str, Any]:
        metadata: dict[str, Any] = {"resourceVersion": rv}
        if token:
            metadata["continue"] = token
        if remaining is not None:
            metadata["remainingItemCount"] = remaining
        return {"kind": rt.list_kind, "apiVersion": rt.api_version, "metadata": metadata, "items": items}

    def list_objects(self, request: web.Request, target: Target) -> web.Response:
        q = request.query
        limit = parse_int(q.get("limit"), "limit")
        page = self.store.list_page(
            target.rt,
            target.namespace,
            q.get("labelSelector"),
            q.get("fieldSelector"),
            limit=limit or None,
            continue_token=q.get("continue") or None,
            copy=False,
        )
        api_version = target.rt.api_version
        items = [
            item if item.get("apiVersion") == api_version else {**item, "apiVersion": api_version}
            for item in page.items
        ]
        body = self.list_body(
            target.rt, items, page.resource_version, page.continue_token, page.remaining_item_count
        )
        if wants_table(request.headers.get("Accept")):
            return json_response(
                render_table(
                    target.rt,
                    items,
                    include_object=q.get("includeObject", "Metadata"),
                    list_metadata=body["metadata"],
                )
            )
        return json_response(body)

    async def watch(self, request: web.Request, target: Target) -> web.StreamResponse:
        q = request.query
        timeout = parse_int(q.get("timeoutSeconds"), "timeoutSeconds")
        allow_bookmarks = parse_bool(q.get("allowWatchBookmarks"), "allowWatchBookmarks")
        bookmark_interval = self.config.bookmark_interval or self.store.bookmark_interval
        response = web.StreamResponse(
            status=200, headers={"Content-Type": "application/json", "Cache-Control": "no-cache, private"}
        )
        response.enable_chunked_encoding()
        try:
            watch = self.store.watch(
                target.rt,
                target.namespace,
                q.get("resourceVersion"),
                q.get("labelSelector"),
                q.get("fieldSelector"),
                allow_bookmarks=allow_bookmarks,
                bookmark_interval=bookmark_interval,
            )
        except Expired as expired:
            await response.prepare(request)
            await response.write(_encode({"type": "ERROR", "object": expired.to_status()}) + b"\n")
            await response.write_eof()
            return response
        deadline = asyncio.get_running_loop().time() + self._watch_duration(timeout)
        frames = _WatchFrames(
            target.rt, wants_table(request.headers.get("Accept")), q.get("includeObject", "Metadata")
        )
        try:
            await response.prepare(request)
            await _stream_events(
                request, response, watch, frames, deadline, bookmark_interval if allow_bookmarks else None
            )
        except (StopAsyncIteration, ConnectionResetError, ConnectionError):
            pass
        finally:
            watch.close()
        with contextlib.suppress(ConnectionResetError, ConnectionError):
            await response.write_eof()
        return response

    def _watch_duration(self, timeout: int | None) -> float:
        """``timeoutSeconds``, or a random time in [max/2, max] (the real server's minRequestTimeout)."""
        if timeout and timeout > 0:
            return float(timeout)
        return random.uniform(self.config.watch_max_seconds / 2, self.config.watch_max_seconds)

    # ------------------------------------------------------------------ discovery

    def api_versions(self, request: web.Request) -> dict[str, Any]:
        host = request.host or "127.0.0.1"
        return {
            "kind": "APIVersions",
            "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": host}],
        }

    def _group_entry(self, group: str) -> dict[str, Any]:
        versions = self.registry.groups()[group]
        preferred = self.registry.preferred_version(group)
        return {
            "name": group,
            "versions": [{"groupVersion": f"{group}/{v}", "version": v} for v in versions],
            "preferredVersion": {"groupVersion": f"{group}/{preferred}", "version": preferred},
        }

    def group_list(self) -> dict[str, Any]:
        return {
            "kind": "APIGroupList",
            "apiVersion": "v1",
            "groups": [self._group_entry(g) for g in self.registry.groups()],
        }

    def group(self, group: str) -> dict[str, Any]:
        if group not in self.registry.groups():
            raise NotFound(f'the server could not find the requested resource: group "{group}"')
        return {"kind": "APIGroup", "apiVersion": "v1", **self._group_entry(group)}

    def resource_list(self, group: str, version: str) -> dict[str, Any]:
        resources = self.registry.in_group_version(group, version)
        if not resources:
            raise NotFound(f"the server could not find the requested resource ({group or 'core'}/{version})")
        entries: list[dict[str, Any]] = []
        for rt in resources:
            entry: dict[str, Any] = {
                "name": rt.plural,
                "singularName": rt.singular,
                "namespaced": rt.namespaced,
                "kind": rt.kind,
                "verbs": list(rt.verbs),
            }
            if rt.short_names:
                entry["shortNames"] = list(rt.short_names)
            if rt.categories:
                entry["categories"] = list(rt.categories)
            entries.append(entry)
            for sub in sorted(rt.subresources):
                sub_entry: dict[str, Any] = {
                    "name": f"{rt.plural}/{sub}",
                    "singularName": "",
                    "namespaced": rt.namespaced,
                    "kind": rt.kind,
                    "verbs": ["get", "patch", "update"],
                }
                if sub == "scale":
                    sub_entry.update(group="autoscaling", version="v1", kind="Scale")
                elif sub == "eviction":
                    sub_entry.update(group="policy", version="v1", kind="Eviction", verbs=["create"])
                elif sub == "binding":
                    sub_entry.update(kind="Binding", verbs=["create"])
                elif sub == "finalize":
                    sub_entry.update(verbs=["update"])
                entries.append(sub_entry)
        return {
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": f"{group}/{version}" if group else version,
            "resources": entries,
        }

    # ------------------------------------------------------------------ openapi

    def _openapi_prefixes(self) -> dict[str, tuple[str, str]]:
        out: dict[str, tuple[str, str]] = {}
        for rt in self.registry.resources:
            prefix = f"apis/{rt.group}/{rt.version}" if rt.group else f"api/{rt.version}"
            out[prefix] = (rt.group, rt.version)
        return out

    def openapi(self, parts: list[str], request: web.Request) -> web.Response:
        if len(parts) < 2 or parts[1] != "v3":
            raise NotFound("the server serves OpenAPI v3 only (/openapi/v3)")
        prefixes = self._openapi_prefixes()
        if len(parts) == 2:
            generation = self.registry.generation
            if self._openapi_index is None or self._openapi_index[0] != generation:
                index = {
                    "paths": {
                        prefix: {"serverRelativeURL": f"/openapi/v3/{prefix}?hash={self._hash(prefix)}"}
                        for prefix in prefixes
                    }
                }
                self._openapi_index = (generation, index)
            return json_response(self._openapi_index[1])
        prefix = "/".join(parts[2:])
        if prefix not in prefixes:
            raise NotFound(f"no OpenAPI document for {prefix}")
        group, version = prefixes[prefix]
        return json_response(self._openapi_document(group, version))

    def _hash(self, prefix: str) -> str:
        """Changes with the kinds of the group-version and their CRD schemas (kubectl caches by it)."""
        group, version = self._openapi_prefixes()[prefix]
        kinds = [
            (rt.kind, rt.custom.schema.raw if rt.custom and rt.custom.schema else None)
            for rt in self.registry.in_group_version(group, version)
        ]
        digest = hashlib.sha256(f"{prefix}:".encode() + _encode(kinds))
        return digest.hexdigest()[:16].upper()

    @staticmethod
    def _schema_name(rt: ResourceType) -> str:
        """The name the API server gives a kind's schema: the group reversed, the version, the kind."""
        reversed_group = ".".join(reversed(rt.group.split("."))) if rt.group else "io.k8s.api.core"
        return f"{reversed_group}.{rt.version}.{rt.kind}"

    def _openapi_document(self, group: str, version: str) -> dict[str, Any]:
        paths: dict[str, Any] = {}
        schemas: dict[str, Any] = {}
        base = f"/apis/{group}/{version}" if group else f"/api/{version}"
        for rt in self.registry.in_group_version(group, version):
            item = (
                f"{base}/namespaces/{{namespace}}/{rt.plural}/{{name}}"
                if rt.namespaced
                else f"{base}/{rt.plural}/{{name}}"
            )
            gvk = {"group": group, "version": version, "kind": rt.kind}
            paths[item] = {"patch": _patch_operation(rt, gvk)}
            if rt.custom is not None and rt.custom.schema is not None:
                schemas[self._schema_name(rt)] = {
                    **rt.custom.schema.raw,
                    "x-kubernetes-group-version-kind": [gvk],
                }
        return {
            "openapi": "3.0.0",
            "info": {"title": "Kubernetes (tenon sandbox)", "version": "v1.32.0"},
            "paths": paths,
            "components": {"schemas": schemas},
        }


def _patch_operation(rt: ResourceType, gvk: dict[str, str]) -> dict[str, Any]:
    """The patch operation kubectl looks for: its GVK and the ``fieldValidation`` parameter (no request
    body media types, so kubectl computes merge patches for custom kinds, as it must)."""
    return {
        "operationId": f"patch{rt.kind}",
        "x-kubernetes-action": "patch",
        "x-kubernetes-group-version-kind": gvk,
        "parameters": [
            {"name": "fieldValidation", "in": "query", "schema": {"type": "string", "uniqueItems": True}},
            {"name": "fieldManager", "in": "query", "schema": {"type": "string", "uniqueItems": True}},
            {"name": "dryRun", "in": "query", "schema": {"type": "string", "uniqueItems": True}},
        ],
        "responses": {"200": {"description": "OK"}},
    }


def build_app(store: Store, config: ServerConfig | None = None) -> web.Application:
    """An aiohttp application serving ``store`` (one cluster)."""
    server = ApiServer(store, config or ServerConfig())
    app = web.Application(client_max_size=64 * 1024 * 1024)
    app[STORE_KEY] = store
    app.router.add_route("*", "/{tail:.*}", server.dispatch)
    return app
