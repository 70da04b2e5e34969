"""Fixtures for the sandbox's tests: a bare sandbox (no controllers) and a kubectl runner.

``crd_sandbox`` is the same bare sandbox with tenon's CRDs (``deploy/crds``) installed in its workload
cluster, as ``tenon sandbox`` starts, and ``crd_kubectl`` drives it.

``api_sandbox`` serves both clusters on free loopback ports with a short watch lifetime, frequent bookmarks
and a small watch history, so reconnect, bookmark and 410 paths are reachable in milliseconds. ``kubectl``
runs the machine's ``/usr/bin/kubectl`` against the workload cluster with a private cache and HOME, through
an asyncio subprocess (the server lives in this event loop, so a blocking call would deadlock).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from devtools.sandbox.runtime import DEPLOY_CRDS
from devtools.sandbox.testing import SandboxHandle, running_sandbox

KUBECTL = shutil.which("kubectl") or "/usr/bin/kubectl"


@pytest.fixture
async def api_sandbox() -> AsyncIterator[SandboxHandle]:
    async with running_sandbox(
        controllers=False, history_size=64, watch_max_seconds=30.0, bookmark_interval=0.2
    ) as sandbox:
        yield sandbox


@pytest.fixture
async def crd_sandbox() -> AsyncIterator[SandboxHandle]:
    async with running_sandbox(controllers=False, crds=(DEPLOY_CRDS,), watch_max_seconds=30.0) as sandbox:
        yield sandbox


@dataclass
class KubectlResult:
    code: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        return json.loads(self.stdout)


KubectlRunner = Callable[..., Awaitable[KubectlResult]]


@pytest.fixture
def kubectl(api_sandbox: SandboxHandle, tmp_path: Path) -> KubectlRunner:
    return kubectl_for(api_sandbox, tmp_path)


@pytest.fixture
def crd_kubectl(crd_sandbox: SandboxHandle, tmp_path: Path) -> KubectlRunner:
    return kubectl_for(crd_sandbox, tmp_path)


def kubectl_for(api_sandbox: SandboxHandle, tmp_path: Path) -> KubectlRunner:
    """kubectl against the sandbox's workload cluster, with a private cache and HOME."""
    if not os.access(KUBECTL, os.X_OK):
        pytest.skip("kubectl is not installed on this machine")
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(tmp_path),
        "KUBECACHEDIR": str(tmp_path / "cache"),
        "NO_PROXY": "127.0.0.1",
        "no_proxy": "127.0.0.1",
    }

    async def run(*args: str, stdin: str | None = None, limit_seconds: float = 30.0) -> KubectlResult:
        process = await asyncio.create_subprocess_exec(
            KUBECTL,
            "--kubeconfig",
            str(api_sandbox.workload_kubeconfig),
            "--cache-dir",
            str(tmp_path / "cache"),
            *args,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env,
        )
        out, err = await asyncio.wait_for(
            process.communicate(stdin.encode() if stdin else None), limit_seconds
        )
        return KubectlResult(process.returncode or 0, out.decode(), err.decode())

    return run


def pod_manifest(
    name: str,
    *,
    namespace: str = "default",
    labels: dict[str, str] | None = None,
    node: str | None = None,
    grace: int | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "app", "image": "registry.example/app:1"}]}
    if node:
        spec["nodeName"] = node
    if grace is not None:
        spec["terminationGracePeriodSeconds"] = grace
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
        "spec": spec,
    }


def node_manifest(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        "spec": {},
        "status": {
            "conditions": [{"type": "Ready", "status": "True"}],
            "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
        },
    }
