"""The kube client reads the environment once, when it connects, not before every request; a request
carries the credentials and body, and its answer or refusal comes back as the server gave it."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from tenon.runtime.kube.client import load_kube

KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {{server: "https://127.0.0.1:6443", insecure-skip-tls-verify: true{proxy}}}
users:
- name: u
  user: {{token: secret}}
contexts:
- name: x
  context: {{cluster: c, user: u}}
current-context: x
"""


def kubeconfig(tmp_path: Path, proxy: str = "") -> str:
    path = tmp_path / "kubeconfig"
    path.write_text(KUBECONFIG.format(proxy=f", proxy-url: {proxy!r}" if proxy else ""))
    return str(path)


@asynccontextmanager
async def rest_client(tmp_path: Path, proxy: str = "") -> AsyncIterator[Any]:
    """The REST client of a kube loaded from a kubeconfig in ``tmp_path`` (closed on exit)."""
    kube = await load_kube(kubeconfig(tmp_path, proxy))
    try:
        yield kube.api.rest_client
    finally:
        await kube.close()


@pytest.fixture(autouse=True)
def no_proxy_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)


async def test_the_session_does_not_look_up_the_environment_per_request(tmp_path: Path) -> None:
    async with rest_client(tmp_path) as rest:
        assert rest.pool_manager.trust_env is False
        assert rest.proxy is None


async def test_a_proxy_in_the_environment_is_used_for_the_api_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://user:pw@127.0.0.1:3128")
    async with rest_client(tmp_path) as rest:
        assert rest.proxy == "http://127.0.0.1:3128"
        assert rest.proxy_headers["Proxy-Authorization"].startswith("Basic ")


async def test_no_proxy_for_the_api_server_when_no_proxy_names_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:3128")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    async with rest_client(tmp_path) as rest:
        assert rest.proxy is None


async def test_the_kubeconfig_proxy_wins_over_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:3128")
    async with rest_client(tmp_path, proxy="http://127.0.0.1:8888") as rest:
        assert rest.proxy == "http://127.0.0.1:8888"


@asynccontextmanager
async def recording_api_server(answers: dict[str, tuple[int, bytes]]) -> AsyncIterator[tuple[str, list[Any]]]:
    """A loopback HTTP server answering each path from ``answers``; yields its URL and the requests seen."""
    from aiohttp import web

    seen: list[Any] = []

    async def handle(request: web.Request) -> web.Response:
        seen.append((request.method, request.path_qs, dict(request.headers), await request.read()))
        status, body = answers[request.path]
        return web.Response(status=status, body=body, content_type="application/json")

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}", seen
    finally:
        await runner.cleanup()


async def test_a_request_carries_the_token_body_and_service_and_its_answer_comes_back_decoded(
    tmp_path: Path,
) -> None:
    from tenon.runtime.kube import PODS

    answer = b'{"kind": "Pod", "metadata": {"name": "web-1"}, "status": {"nominatedNodeName": "n1"}}'
    async with recording_api_server({"/api/v1/namespaces/shop/pods/web-1/status": (200, answer)}) as (
        url,
        seen,
    ):
        path = tmp_path / "kubeconfig"
        path.write_text(KUBECONFIG.format(proxy="").replace("https://127.0.0.1:6443", url))
        kube = await load_kube(str(path), component="scheduler")
        try:
            patched = await kube.patch(
                PODS, "web-1", {"status": {"nominatedNodeName": "n1"}}, namespace="shop", subresource="status"
            )
        finally:
            await kube.close()
    assert patched["status"] == {"nominatedNodeName": "n1"}
    method, path_qs, headers, body = seen[0]
    assert (method, path_qs) == ("PATCH", "/api/v1/namespaces/shop/pods/web-1/status")
    assert headers["Authorization"] == "Bearer secret"
    assert headers["Content-Type"] == "application/merge-patch+json"
    assert headers["User-Agent"] == "tenon-scheduler"  # the audit log tells the services apart
    assert json.loads(body) == {"status": {"nominatedNodeName": "n1"}}


async def test_a_refusal_carries_the_servers_reason_and_message(tmp_path: Path) -> None:
    from tenon.runtime.kube import NODES, KubeApiError

    status = b'{"kind": "Status", "reason": "Conflict", "message": "the object has been modified"}'
    async with recording_api_server({"/api/v1/nodes/n1": (409, status)}) as (url, _):
        path = tmp_path / "kubeconfig"
        path.write_text(KUBECONFIG.format(proxy="").replace("https://127.0.0.1:6443", url))
        kube = await load_kube(str(path))
        try:
            with pytest.raises(KubeApiError) as refused:
                await kube.patch(NODES, "n1", {"metadata": {"labels": {"a": "b"}}})
        finally:
            await kube.close()
    assert (refused.value.status, refused.value.reason) == (409, "Conflict")
    assert "the object has been modified" in str(refused.value)
