"""A sandbox for tests: ``async with running_sandbox() as sandbox: ...``.

Both clusters are served in-process on free loopback ports, with kubeconfigs in a temporary directory that is
removed afterwards. Tests can drive the clusters through HTTP (kubernetes-asyncio via
:meth:`SandboxHandle.api_client`, or ``kubectl --kubeconfig``) and inspect or arrange state directly through
the stores (``sandbox.workload_store.create(...)``), which share semantics with the HTTP API.

The workload cluster serves the store's schema-less stand-ins for Karpenter's kinds unless ``crds`` names
CRDs to install (``crds=(DEPLOY_CRDS,)`` installs the ones tenon ships, as ``tenon sandbox`` does), so a
test sees exactly the validation it asks for.

The controllers run by default when their package is importable; ``controllers=False`` gives a bare API
server whose state changes only when the test changes it. Short watch lifetimes and bookmark intervals can be
set to exercise clients' reconnect paths quickly.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from devtools.sandbox.runtime import Sandbox, SandboxConfig
from devtools.sandbox.store import Store


@dataclass
class SandboxHandle:
    sandbox: Sandbox
    workload_store: Store
    management_store: Store
    workload_kubeconfig: Path
    management_kubeconfig: Path
    workload_url: str
    management_url: str

    @property
    def controllers_running(self) -> bool:
        return self.sandbox.controllers_running

    @contextlib.asynccontextmanager
    async def api_client(self, cluster: str = "workload") -> AsyncIterator[Any]:
        """A kubernetes-asyncio ``ApiClient`` loaded from the cluster's kubeconfig (closed on exit)."""
        from kubernetes_asyncio import client, config

        configuration = client.Configuration()
        path = self.workload_kubeconfig if cluster == "workload" else self.management_kubeconfig
        await config.load_kube_config(config_file=str(path), client_configuration=configuration)
        api = client.ApiClient(configuration)
        try:
            yield api
        finally:
            await api.close()


@contextlib.asynccontextmanager
async def running_sandbox(
    profile: str = "fast",
    *,
    controllers: bool = True,
    time_scale: float = 1.0,
    crds: tuple[Path, ...] = (),
    **overrides: Any,
) -> AsyncIterator[SandboxHandle]:
    """Serve a workload and a management cluster on free loopback ports for the duration of the block.

    ``overrides`` are :class:`~devtools.sandbox.runtime.SandboxConfig` fields (``history_size``,
    ``watch_max_seconds``, ``bookmark_interval``, ...).
    """
    with tempfile.TemporaryDirectory(prefix="tenon-sandbox-") as tmp:
        config = SandboxConfig(
            host="127.0.0.1",
            port=0,
            management_port=0,
            kubeconfig=Path(tmp) / "workload.kubeconfig",
            management_kubeconfig=Path(tmp) / "management.kubeconfig",
            profile=profile,
            time_scale=time_scale,
            controllers=controllers,
            crds=crds,
            **overrides,
        )
        async with Sandbox(config) as sandbox:
            yield SandboxHandle(
                sandbox=sandbox,
                workload_store=sandbox.workload_store,
                management_store=sandbox.management_store,
                workload_kubeconfig=sandbox.workload_kubeconfig,
                management_kubeconfig=sandbox.management_kubeconfig,
                workload_url=sandbox.workload_url,
                management_url=sandbox.management_url,
            )
