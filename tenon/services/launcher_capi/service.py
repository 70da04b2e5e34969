"""The Cluster API launcher service: its decider (:mod:`.decider`), its executor (:mod:`.executor`), its
settings.

``tenon run launcher-capi`` (= ``python -m tenon.services.launcher_capi``) runs it as the leader of its group;
a second replica waits. ``--help`` lists every setting with its variable.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from proto import registry
from tenon.runtime.decider import Decider, Executor
from tenon.runtime.kube import Kube, load_kube
from tenon.runtime.service import (
    CommonSettings,
    ServiceContext,
    ServiceDefinition,
    decider_work,
    in_cluster_or,
)
from tenon.runtime.settings import SettingsError, format_duration, setting
from tenon.services.launcher_capi.decider import CapiLauncherDecider
from tenon.services.launcher_capi.executor import LauncherExecutor

log = logging.getLogger("tenon.launcher_capi")


@dataclass(frozen=True)
class LauncherCapiSettings(CommonSettings):
    kubeconfig: str | None = setting(
        "TENON_KUBECONFIG",
        None,
        "the workload cluster's kubeconfig (where NodeClaim objects are looked for; default: in-cluster)",
        kind="path",
    )
    management_kubeconfig: str | None = setting(
        "TENON_MANAGEMENT_KUBECONFIG",
        None,
        "the Cluster API management cluster's kubeconfig (default: the workload cluster's)",
        kind="path",
    )
    namespace: str | None = setting(
        "TENON_CAPI_NAMESPACE", None, "watch MachineDeployments and Machines in this namespace only"
    )
    leak_grace: float = setting(
        "TENON_LAUNCHER_LEAK_GRACE",
        600.0,
        "how long a Machine bound to a NodeClaim tenon does not know waits before tenon looks for evidence "
        "that it leaked (it is removed only on that evidence)",
        kind="duration",
        minimum=0,
    )
    launch_timeout: float = setting(
        "TENON_LAUNCH_TIMEOUT",
        300.0,
        "a claim not launched this long after it was planned is abandoned",
        kind="duration",
        minimum=1,
    )
    flavor_refresh: float = setting(
        "TENON_LAUNCHER_FLAVOR_REFRESH",
        600.0,
        "how often OpenStack flavors are read again",
        kind="duration",
        minimum=1,
    )
    catalog_resync: float | None = setting(
        "TENON_LAUNCHER_RESYNC",
        None,
        "how often an unchanged catalog is published again (default: a quarter of TENON_EVENTS_MAX_AGE)",
        kind="duration",
        minimum=1,
    )
    tick: float = setting(
        "TENON_LAUNCHER_TICK",
        2.0,
        "how often the launcher decides without news (leak grace, decisions dropped on a conflict)",
        kind="duration",
        minimum=0.05,
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.catalog_resync is not None and self.catalog_resync >= self.events_max_age:
            raise SettingsError(
                f"TENON_LAUNCHER_RESYNC: {format_duration(self.catalog_resync)} is not shorter than "
                f"TENON_EVENTS_MAX_AGE {format_duration(self.events_max_age)}: "
                "the catalog would age out of the log"
            )

    @property
    def resync(self) -> float:
        """How often an unchanged catalog is re-published: well inside the log's retention."""
        return self.catalog_resync or self.resync_interval


def make_decider(settings: LauncherCapiSettings) -> CapiLauncherDecider:
    return CapiLauncherDecider()


@dataclass
class Clusters:
    management: Kube
    workload: Kube | None
    """Where NodeClaim objects are looked for (None: nowhere, and Machines bound to claims tenon does not know
    are kept, since no NodeClaim object can be ruled out)."""
    secrets: Kube
    """Where the Secrets a NodeClass names are read: the workload cluster when TENON_KUBECONFIG names it
    beside a management cluster, else the management cluster (as deploy/management-cluster grants)."""

    async def close(self) -> None:
        await self.management.close()
        for other in {id(k): k for k in (self.workload, self.secrets) if k is not None}.values():
            if other is not self.management:
                await other.close()


async def open_clusters(settings: LauncherCapiSettings) -> Clusters:
    management = await load_kube(
        settings.management_kubeconfig or settings.kubeconfig, component=registry.LAUNCHER_CAPI
    )
    if not settings.management_kubeconfig:
        return Clusters(management, management, management)  # one cluster is both
    if settings.kubeconfig:
        workload = await load_kube(settings.kubeconfig, component=registry.LAUNCHER_CAPI)
        return Clusters(management, workload, workload)
    try:
        return Clusters(management, await load_kube(None, component=registry.LAUNCHER_CAPI), management)
    except Exception as exc:  # outside a cluster, with only a management kubeconfig
        log.warning(
            "no workload cluster: set TENON_KUBECONFIG so that leaked Machines can be removed",
            extra={"error": str(exc)},
        )
        return Clusters(management, None, management)


async def make_executor(
    ctx: ServiceContext, settings: LauncherCapiSettings, decider: Decider[object]
) -> tuple[Executor, Callable[[], Awaitable[None]]]:
    clusters = await open_clusters(settings)
    executor = LauncherExecutor(
        clusters.management,
        workload=clusters.workload,
        secrets=clusters.secrets,
        namespace=settings.namespace,
        leak_grace=settings.leak_grace,
        launch_timeout=settings.launch_timeout,
        flavor_refresh=settings.flavor_refresh,
        resync=settings.resync,
    )
    return executor, clusters.close


SERVICE = ServiceDefinition(
    name=registry.LAUNCHER_CAPI,
    description="Turn planned NodeClaims into Cluster API Machines; offer MachineDeployments as a catalog.",
    settings=LauncherCapiSettings,
    work=decider_work(make_decider, make_executor, lambda s: s.tick),
    decider=make_decider,
    preflight=lambda settings: in_cluster_or(
        settings.management_kubeconfig or settings.kubeconfig, "TENON_MANAGEMENT_KUBECONFIG"
    ),
)
