"""Running the sandbox: two clusters, two HTTP servers, two kubeconfigs and the simulated controllers.

A :class:`Sandbox` hosts, in one process and one event loop,

* a **workload** cluster (pods, nodes, Deployments, Karpenter's NodePools and NodeClaims, ...) and
* a **management** cluster (Cluster API MachineDeployments and Machines),

each a :class:`~devtools.sandbox.store.Store` served by its own aiohttp server on its own port, exactly as
tenon's services see them in the field (two kubeconfigs). Both stores serve every registered kind; which
cluster holds what is the controllers' convention, not a restriction.

Before anything is served, the CustomResourceDefinitions of ``SandboxConfig.crds`` are created in the
workload cluster, as installing tenon does: by default every CRD under ``deploy/crds`` (NodePool, NodeClaim,
EC2NodeClass, ClusterAPINodeClass, InstanceCatalog), so those kinds are validated, pruned and defaulted by
the schemas tenon ships. A CRD the API server would refuse stops the start with :class:`CrdInstallError`,
naming the file and the field. With ``crds=()`` (the default of ``running_sandbox``) the workload cluster
serves the store's schema-less stand-ins for Karpenter's kinds instead.

The controllers (``devtools.sandbox.controllers.run_controllers``: Deployment/ReplicaSet/DaemonSet/PDB
controllers, the simulated kube-scheduler, kubelet, node lifecycle and Cluster API) run as one background task
against both stores, in-process, with the chosen :class:`~devtools.sandbox.profiles.TimingProfile`. If that
package is not importable the sandbox serves the API alone (``controllers=False`` forces that).

Shutdown order matters for a clean exit: stop the controllers, end every open watch (so streaming handlers
return), then close the servers. :func:`run` wires SIGINT/SIGTERM to that and returns the exit code.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import importlib
import logging
import signal
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from aiohttp import web

from devtools.sandbox.crds import crd_files, load_crd_documents
from devtools.sandbox.errors import ApiError
from devtools.sandbox.kubeconfig import write_kubeconfig
from devtools.sandbox.profiles import TimingProfile, get_profile
from devtools.sandbox.server import ServerConfig, build_app
from devtools.sandbox.store import Store

log = logging.getLogger(__name__)

DEFAULT_DIR = Path("~/.tenon/sandbox")
DEPLOY_CRDS = Path(__file__).resolve().parents[2] / "deploy" / "crds"
"""The CRDs tenon ships (``deploy/crds``), which the sandbox installs in its workload cluster by default."""
ControllersEntry = Callable[[Store, Store, TimingProfile], Awaitable[None]]


@dataclass(frozen=True)
class SandboxConfig:
    host: str = "127.0.0.1"
    port: int = 6443  # 0: pick a free port
    management_port: int = 6444  # 0: pick a free port
    kubeconfig: Path = field(default_factory=lambda: DEFAULT_DIR / "workload.kubeconfig")
    management_kubeconfig: Path = field(default_factory=lambda: DEFAULT_DIR / "management.kubeconfig")
    profile: str = "field"
    time_scale: float = 1.0
    controllers: bool = True
    history_size: int = 10_000
    watch_max_seconds: float = 300.0  # the real server uses 1800-3600 s; shorter so reconnect paths run
    bookmark_interval: float = 10.0
    crds: tuple[Path, ...] = (DEPLOY_CRDS,)  # files or directories of CRDs created in the workload cluster


class CrdInstallError(Exception):
    """A CRD given to the sandbox could not be installed (the message names the file and the field)."""


def install_crds(store: Store, paths: tuple[Path, ...]) -> list[str]:
    """Create every CRD found in ``paths`` (files, or directories searched recursively) in ``store``;
    returns their names. An existing CRD of the same name is left as it is."""
    crd_rt = store.resource("apiextensions.k8s.io/v1", "CustomResourceDefinition")
    names: list[str] = []
    for root in paths:
        if not root.exists():
            raise CrdInstallError(f"sandbox: CRDs: {root}: no such file or directory")
        for path in crd_files(root):
            try:
                documents = load_crd_documents([path])
            except (OSError, yaml.YAMLError) as err:
                raise CrdInstallError(f"sandbox: CRDs: {path}: {str(err).splitlines()[0]}") from err
            for doc in documents:
                name = str((doc.get("metadata") or {}).get("name") or "")
                try:
                    store.create(crd_rt, doc)
                except ApiError as err:
                    if err.code == 409:
                        continue
                    raise CrdInstallError(f"sandbox: CRDs: {path}: {err.message}") from err
                names.append(name)
    return names


def load_controllers() -> ControllersEntry | None:
    """The controllers' entry point, or None while that package is absent."""
    try:
        module = importlib.import_module("devtools.sandbox.controllers")
    except ImportError as exc:
        log.warning("sandbox: controllers unavailable (%s); serving the API only", exc)
        return None
    entry: ControllersEntry | None = getattr(module, "run_controllers", None)
    if entry is None:
        log.warning("sandbox: devtools.sandbox.controllers has no run_controllers yet; serving the API only")
    return entry


class Sandbox:
    """Both clusters of one sandbox. ``await start()``, then ``await stop()`` (idempotent)."""

    def __init__(self, config: SandboxConfig) -> None:
        self.config = config
        self.profile = get_profile(config.profile, config.time_scale)
        self.workload_store = Store(
            history_size=config.history_size, bookmark_interval=config.bookmark_interval, name="workload"
        )
        self.management_store = Store(
            history_size=config.history_size, bookmark_interval=config.bookmark_interval, name="management"
        )
        self.installed_crds = install_crds(self.workload_store, tuple(Path(p) for p in config.crds))
        self.workload_url = ""
        self.management_url = ""
        self.workload_kubeconfig = Path(config.kubeconfig).expanduser()
        self.management_kubeconfig = Path(config.management_kubeconfig).expanduser()
        self._runners: list[web.AppRunner] = []
        self._controllers: asyncio.Task[None] | None = None
        self.controllers_running = False

    async def _serve(self, store: Store, port: int) -> str:
        server_config = ServerConfig(
            watch_max_seconds=self.config.watch_max_seconds, bookmark_interval=self.config.bookmark_interval
        )
        runner = web.AppRunner(build_app(store, server_config), access_log=None)
        await runner.setup()
        self._runners.append(runner)
        site = web.TCPSite(runner, self.config.host, port, shutdown_timeout=1.0)
        await site.start()
        host, bound_port = runner.addresses[0][:2]
        return f"http://{host}:{bound_port}"

    async def start(self) -> None:
        try:
            self.workload_url = await self._serve(self.workload_store, self.config.port)
            self.management_url = await self._serve(self.management_store, self.config.management_port)
        except BaseException:
            await self.stop()
            raise
        write_kubeconfig(self.workload_kubeconfig, self.workload_url, "tenon-sandbox-workload")
        write_kubeconfig(self.management_kubeconfig, self.management_url, "tenon-sandbox-management")
        entry = load_controllers() if self.config.controllers else None
        if entry is not None:
            self._controllers = asyncio.create_task(self._run_controllers(entry), name="sandbox-controllers")
            self.controllers_running = True
        log.info(
            "sandbox: workload %s (%s), management %s (%s), profile %s x%s, controllers %s",
            self.workload_url,
            self.workload_kubeconfig,
            self.management_url,
            self.management_kubeconfig,
            self.profile.name,
            self.config.time_scale,
            "on" if self.controllers_running else "off",
        )

    async def _run_controllers(self, entry: ControllersEntry) -> None:
        try:
            await entry(self.workload_store, self.management_store, self.profile)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("sandbox: controllers stopped with an error")
            self.controllers_running = False

    async def stop(self) -> None:
        if self._controllers is not None:
            self._controllers.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._controllers
            self._controllers = None
            self.controllers_running = False
        self.workload_store.close_watches()
        self.management_store.close_watches()
        runners, self._runners = self._runners, []
        for runner in runners:
            await runner.cleanup()

    async def __aenter__(self) -> Sandbox:
        await self.start()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.stop()


async def serve_until_stopped(
    config: SandboxConfig, stop: asyncio.Event, on_ready: Callable[[Sandbox], None] | None = None
) -> None:
    async with Sandbox(config) as sandbox:
        if on_ready is not None:
            on_ready(sandbox)
        await stop.wait()


COLLECTOR_THRESHOLDS = (50_000, 50, 50)
"""``gc.set_threshold`` of a sandbox process. Every request and every controller step makes dicts that live as
long as the object they belong to, and the default pace (a pass every 700 net allocations) walked the growing
stores again and again: in-process, 1,000 pod status patches with two watchers took 0.76 s of CPU, 0.21 s of
it in 120 collector passes, and 0.40 s with these thresholds. The startup's objects (modules, CRD schemas)
are frozen out of every pass once the sandbox serves."""


def run(config: SandboxConfig, on_ready: Callable[[Sandbox], None] | None = None) -> int:
    """Serve until SIGINT or SIGTERM; returns the process exit code (0 on a clean stop, 1 if start failed,
    2 if a CRD it was given is invalid). The process's collector is paced for a server
    (:data:`COLLECTOR_THRESHOLDS`)."""
    gc.set_threshold(*COLLECTOR_THRESHOLDS)

    def ready(sandbox: Sandbox) -> None:
        gc.freeze()
        if on_ready is not None:
            on_ready(sandbox)

    async def main() -> int:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        try:
            await serve_until_stopped(config, stop, ready)
        except CrdInstallError as exc:
            log.error("%s", exc)
            return 2
        except OSError as exc:
            log.error("sandbox: cannot start: %s", exc)
            return 1
        return 0

    return asyncio.run(main())
