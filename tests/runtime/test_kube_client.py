"""The kube client reads the environment once, when it connects, not before every request."""

from __future__ import annotations

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
