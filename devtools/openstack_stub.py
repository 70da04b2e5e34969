"""A local Keystone v3 + Nova flavors endpoint, for testing code that uses openstacksdk.

Why a real HTTP server rather than requests-mock or ``openstack.test.fakes``: the code under test
(``tenon.services.launcher_capi.openstack.read_flavors``) is the part most likely to break on a real cloud, in
authentication, service-catalog lookup, version discovery and pagination, and those are exactly the parts the
mocks skip. This stub lets openstacksdk and keystoneauth do all of it over loopback, as against a devstack:

- ``GET  /identity``                    -> Keystone's version list (300 Multiple Choices)
- ``GET  /identity/v3``                 -> the v3 version document
- ``POST /identity/v3/auth/tokens``     -> a token (``X-Subject-Token``) whose service catalog points compute
  and identity at this server; wrong user, password, project or domain -> 401, as Keystone answers
- ``GET  /compute`` and ``/compute/v2.1`` -> Nova's version documents (microversions 2.1 to 2.96)
- ``GET  /compute/v2.1/flavors/detail`` -> the configured flavors, with Nova's ``limit``/``marker`` paging and
  a ``flavors_links`` "next" link when a page is full; ``extra_specs`` inline from microversion 2.61
- ``GET  /compute/v2.1/flavors``        -> the same, ``id``/``name``/``links`` only
- ``GET  /compute/v2.1/flavors/{id}``   -> one flavor (by id or name), 404 when unknown
- ``GET  /compute/v2.1/flavors/{id}/os-extra_specs`` -> its extra specs (what clients before 2.61 ask)

The layout (``/identity``, ``/compute/v2.1``) is devstack's, so the ``auth_url`` is ``<base_url>/identity``.
Compute calls without a token issued by this server get 401. Every request is recorded in ``requests``
(method, path, query) so a test can assert what the client actually did.

The server runs its own asyncio loop in a daemon thread, so it works from synchronous tests (openstacksdk is
blocking) and from async ones alike::

    with OpenStackStub(flavors=[nova_flavor("m1.small", vcpus=1, ram_mib=2048, disk_gib=20)]) as cloud:
        conn = openstack.connect(auth_url=cloud.auth_url, username=cloud.username, ...)

``async with`` works too; it starts and stops the thread without blocking the caller's loop. It binds port 0
on 127.0.0.1 only, so parallel tests never collide and nothing listens beyond loopback.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import threading
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

_KEYSTONE_VERSION = "v3.14"
_NOVA_MAX_MICROVERSION = "2.96"
_EXTRA_SPECS_MICROVERSION = (2, 61)
_UPDATED = "2023-01-01T00:00:00Z"


def nova_flavor(
    name: str,
    *,
    vcpus: int,
    ram_mib: int,
    disk_gib: int,
    extra_specs: Mapping[str, str] | None = None,
    flavor_id: str | None = None,
    ephemeral_gib: int = 0,
    disabled: bool = False,
    is_public: bool = True,
) -> dict[str, Any]:
    """One flavor as Nova's ``/flavors/detail`` returns it (without the links, which the stub adds)."""
    return {
        "id": flavor_id or str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{name}.flavors.stub")),
        "name": name,
        "vcpus": vcpus,
        "ram": ram_mib,
        "disk": disk_gib,
        "swap": 0,
        "OS-FLV-EXT-DATA:ephemeral": ephemeral_gib,
        "OS-FLV-DISABLED:disabled": disabled,
        "os-flavor-access:is_public": is_public,
        "rxtx_factor": 1.0,
        "description": None,
        "extra_specs": dict(extra_specs or {}),
    }


@dataclass(frozen=True)
class RecordedRequest:
    """What the stub saw: enough to assert which calls a client made, never the credentials."""

    method: str
    path: str
    query: dict[str, str]


@dataclass
class OpenStackStub:
    """A Keystone v3 + Nova flavors server on a free loopback port (see the module docstring)."""

    flavors: list[dict[str, Any]] = field(default_factory=list)
    username: str = "tenon"
    password: str = "s3cret"
    project_name: str = "tenon-project"
    user_domain_name: str = "Default"
    project_domain_name: str = "Default"
    region_name: str = "RegionOne"
    #: Nova's ``max_limit``: a flavor list longer than this is paged, as Nova does with its default of 1000.
    page_size: int = 1000
    requests: list[RecordedRequest] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._tokens: set[str] = set()
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self._port: int | None = None
        self.project_id = uuid.uuid5(uuid.NAMESPACE_DNS, f"{self.project_name}.projects.stub").hex
        self.user_id = uuid.uuid5(uuid.NAMESPACE_DNS, f"{self.username}.users.stub").hex

    # -- addresses -------------------------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        if self._port is None:
            raise RuntimeError("OpenStackStub is not running: use it as a context manager or call start()")
        return f"http://127.0.0.1:{self._port}"

    @property
    def auth_url(self) -> str:
        return f"{self.base_url}/identity"

    @property
    def compute_url(self) -> str:
        return f"{self.base_url}/compute/v2.1"

    def clouds_yaml(self, cloud: str = "stub", *, password: str | None = None) -> dict[str, Any]:
        """A ``clouds.yaml`` document (as a dict) naming this server; ``password`` overrides the right one."""
        return {
            "clouds": {
                cloud: {
                    "auth_type": "password",
                    "auth": {
                        "auth_url": self.auth_url,
                        "username": self.username,
                        "password": self.password if password is None else password,
                        "project_name": self.project_name,
                        "user_domain_name": self.user_domain_name,
                        "project_domain_name": self.project_domain_name,
                    },
                    "region_name": self.region_name,
                    "identity_api_version": 3,
                }
            }
        }

    def set_flavors(self, flavors: Iterable[dict[str, Any]]) -> None:
        """Replace the flavor list while the server runs (the next request sees the new list)."""
        with self._lock:
            self.flavors = list(flavors)

    # -- lifecycle -------------------------------------------------------------------------------------------

    def start(self) -> OpenStackStub:
        if self._thread is not None:
            return self
        started = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            try:
                loop.run_until_complete(self._serve())
            except BaseException as exc:  # surfaced to start() so a bind failure is not silent
                failure.append(exc)
                started.set()
                return
            started.set()
            loop.run_forever()
            loop.run_until_complete(self._shutdown())
            loop.close()

        self._thread = threading.Thread(target=run, name="openstack-stub", daemon=True)
        self._thread.start()
        if not started.wait(timeout=10):
            raise RuntimeError("OpenStackStub did not start within 10 s")
        if failure:
            raise RuntimeError(f"OpenStackStub failed to start: {failure[0]}") from failure[0]
        return self

    def stop(self) -> None:
        if self._thread is None or self._loop is None:
            return
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._thread = None
        self._loop = None
        self._port = None

    def __enter__(self) -> OpenStackStub:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    async def __aenter__(self) -> OpenStackStub:
        return await asyncio.to_thread(self.start)

    async def __aexit__(self, *exc_info: object) -> None:
        await asyncio.to_thread(self.stop)

    async def _serve(self) -> None:
        app = web.Application(middlewares=[self._record])
        app.router.add_get("/identity", self._identity_versions)
        app.router.add_get("/identity/", self._identity_versions)
        app.router.add_get("/identity/v3", self._identity_v3)
        app.router.add_get("/identity/v3/", self._identity_v3)
        app.router.add_post("/identity/v3/auth/tokens", self._issue_token)
        app.router.add_get("/compute", self._compute_versions)
        app.router.add_get("/compute/", self._compute_versions)
        app.router.add_get("/compute/v2.1", self._compute_v21)
        app.router.add_get("/compute/v2.1/", self._compute_v21)
        app.router.add_get("/compute/v2.1/flavors/detail", self._list_flavors_detail)
        app.router.add_get("/compute/v2.1/flavors", self._list_flavors_brief)
        app.router.add_get("/compute/v2.1/flavors/{flavor_id}", self._get_flavor)
        app.router.add_get("/compute/v2.1/flavors/{flavor_id}/os-extra_specs", self._get_extra_specs)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        server = site._server
        assert server is not None and isinstance(server, asyncio.base_events.Server)
        self._port = server.sockets[0].getsockname()[1]

    async def _shutdown(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # -- middleware and helpers ------------------------------------------------------------------------------

    @web.middleware
    async def _record(self, request: web.Request, handler: Any) -> web.StreamResponse:
        with self._lock:
            self.requests.append(RecordedRequest(request.method, request.path, dict(request.query)))
        response: web.StreamResponse = await handler(request)
        return response

    def _versioned_link(self, path: str) -> list[dict[str, str]]:
        return [{"rel": "self", "href": f"{self.base_url}{path}"}]

    @staticmethod
    def _unauthorized(message: str) -> web.Response:
        return web.json_response(
            {"error": {"code": 401, "title": "Unauthorized", "message": message}}, status=401
        )

    def _check_token(self, request: web.Request) -> web.Response | None:
        token = request.headers.get("X-Auth-Token", "")
        with self._lock:
            known = token in self._tokens
        if not known:
            return self._unauthorized("The request you have made requires authentication.")
        return None

    @staticmethod
    def _domain_matches(domain: object, name: str) -> bool:
        """Keystone accepts a domain by name or by id; the stub's one domain has id ``default``."""
        if not isinstance(domain, dict):
            return False
        return domain.get("name") == name or domain.get("id") == "default"

    # -- identity --------------------------------------------------------------------------------------------

    def _keystone_v3(self) -> dict[str, Any]:
        return {
            "id": _KEYSTONE_VERSION,
            "status": "stable",
            "updated": _UPDATED,
            "links": self._versioned_link("/identity/v3/"),
            "media-types": [
                {"base": "application/json", "type": "application/vnd.openstack.identity-v3+json"}
            ],
        }

    async def _identity_versions(self, request: web.Request) -> web.Response:
        return web.json_response({"versions": {"values": [self._keystone_v3()]}}, status=300)

    async def _identity_v3(self, request: web.Request) -> web.Response:
        return web.json_response({"version": self._keystone_v3()})

    async def _issue_token(self, request: web.Request) -> web.Response:
        try:
            body = await request.json()
            identity = body["auth"]["identity"]
            user = identity["password"]["user"]
        except (ValueError, KeyError, TypeError):
            return web.json_response(
                {
                    "error": {
                        "code": 400,
                        "title": "Bad Request",
                        "message": "Expecting to find password auth",
                    }
                },
                status=400,
            )
        if "password" not in identity.get("methods", []):
            return self._unauthorized("Only password authentication is offered by this stub.")
        name_ok = user.get("name") == self.username or user.get("id") == self.user_id
        domain_ok = user.get("id") == self.user_id or self._domain_matches(
            user.get("domain"), self.user_domain_name
        )
        if not (name_ok and domain_ok and user.get("password") == self.password):
            return self._unauthorized("The request you have made requires authentication.")
        project = ((body["auth"].get("scope") or {}).get("project")) or {}
        project_ok = project.get("id") == self.project_id or (
            project.get("name") == self.project_name
            and self._domain_matches(project.get("domain"), self.project_domain_name)
        )
        if not project_ok:
            return self._unauthorized(f"User {self.user_id} has no access to project {project}")
        token = uuid.uuid4().hex
        with self._lock:
            self._tokens.add(token)
        now = dt.datetime.now(dt.UTC)
        domain = {"id": "default", "name": self.user_domain_name}
        endpoint_common = {"interface": "public", "region": self.region_name, "region_id": self.region_name}
        payload = {
            "token": {
                "methods": ["password"],
                "user": {"id": self.user_id, "name": self.username, "domain": domain},
                "project": {
                    "id": self.project_id,
                    "name": self.project_name,
                    "domain": {"id": "default", "name": self.project_domain_name},
                },
                "roles": [{"id": "member", "name": "member"}],
                "issued_at": now.strftime("%Y-%m-%dT%H:%M:%S.000000Z"),
                "expires_at": (now + dt.timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%S.000000Z"),
                "catalog": [
                    {
                        "id": "identity",
                        "type": "identity",
                        "name": "keystone",
                        "endpoints": [{"id": "identity-public", "url": self.auth_url, **endpoint_common}],
                    },
                    {
                        "id": "compute",
                        "type": "compute",
                        "name": "nova",
                        "endpoints": [{"id": "compute-public", "url": self.compute_url, **endpoint_common}],
                    },
                ],
            }
        }
        return web.json_response(payload, status=201, headers={"X-Subject-Token": token})

    # -- compute ---------------------------------------------------------------------------------------------

    def _nova_v21(self) -> dict[str, Any]:
        return {
            "id": "v2.1",
            "status": "CURRENT",
            "version": _NOVA_MAX_MICROVERSION,
            "min_version": "2.1",
            "updated": _UPDATED,
            "links": self._versioned_link("/compute/v2.1/"),
        }

    async def _compute_versions(self, request: web.Request) -> web.Response:
        return web.json_response({"versions": [self._nova_v21()]})

    async def _compute_v21(self, request: web.Request) -> web.Response:
        return web.json_response({"version": self._nova_v21()})

    @staticmethod
    def _microversion(request: web.Request) -> tuple[int, int]:
        """The compute microversion the client asked for (2.1 when it asked for none), as Nova reads it."""
        raw = request.headers.get("OpenStack-API-Version", "")
        value = raw.split(" ", 1)[1] if raw.lower().startswith("compute ") else ""
        value = value or request.headers.get("X-OpenStack-Nova-API-Version", "2.1")
        if value == "latest":
            value = _NOVA_MAX_MICROVERSION
        major, _, minor = value.strip().partition(".")
        return int(major), int(minor or 0)

    def _render(self, flavor: dict[str, Any], request: web.Request, *, detail: bool) -> dict[str, Any]:
        links = [
            {"rel": "self", "href": f"{self.compute_url}/flavors/{flavor['id']}"},
            {"rel": "bookmark", "href": f"{self.base_url}/compute/flavors/{flavor['id']}"},
        ]
        if not detail:
            return {"id": flavor["id"], "name": flavor["name"], "links": links}
        rendered = {**flavor, "links": links}
        if self._microversion(request) < _EXTRA_SPECS_MICROVERSION:
            rendered.pop("extra_specs", None)
        return rendered

    def _microversion_headers(self, request: web.Request) -> dict[str, str]:
        major, minor = self._microversion(request)
        return {"OpenStack-API-Version": f"compute {major}.{minor}", "Vary": "OpenStack-API-Version"}

    async def _list(self, request: web.Request, *, detail: bool) -> web.Response:
        if (denied := self._check_token(request)) is not None:
            return denied
        with self._lock:
            flavors = list(self.flavors)
        try:
            limit = min(int(request.query.get("limit", self.page_size)), self.page_size)
        except ValueError:
            return web.json_response(
                {"badRequest": {"code": 400, "message": "limit must be an integer"}}, status=400
            )
        marker = request.query.get("marker")
        start = 0
        if marker is not None:
            ids = [f["id"] for f in flavors]
            if marker not in ids:
                return web.json_response(
                    {"badRequest": {"code": 400, "message": f"marker [{marker}] not found"}}, status=400
                )
            start = ids.index(marker) + 1
        page = flavors[start : start + limit]
        body: dict[str, Any] = {"flavors": [self._render(f, request, detail=detail) for f in page]}
        if len(page) == limit and start + limit < len(flavors):
            suffix = "/detail" if detail else ""
            body["flavors_links"] = [
                {
                    "rel": "next",
                    "href": f"{self.compute_url}/flavors{suffix}?limit={limit}&marker={page[-1]['id']}",
                }
            ]
        return web.json_response(body, headers=self._microversion_headers(request))

    async def _list_flavors_detail(self, request: web.Request) -> web.Response:
        return await self._list(request, detail=True)

    async def _list_flavors_brief(self, request: web.Request) -> web.Response:
        return await self._list(request, detail=False)

    def _find(self, request: web.Request) -> dict[str, Any] | web.Response:
        if (denied := self._check_token(request)) is not None:
            return denied
        flavor_id = request.match_info["flavor_id"]
        with self._lock:
            found = next((f for f in self.flavors if flavor_id in (f["id"], f["name"])), None)
        if found is None:
            return web.json_response(
                {"itemNotFound": {"code": 404, "message": f"Flavor {flavor_id} could not be found."}},
                status=404,
            )
        return found

    async def _get_flavor(self, request: web.Request) -> web.Response:
        found = self._find(request)
        if isinstance(found, web.Response):
            return found
        return web.json_response(
            {"flavor": self._render(found, request, detail=True)}, headers=self._microversion_headers(request)
        )

    async def _get_extra_specs(self, request: web.Request) -> web.Response:
        found = self._find(request)
        if isinstance(found, web.Response):
            return found
        return web.json_response({"extra_specs": dict(found.get("extra_specs") or {})})
