"""The EC2 launcher service: its decider (:mod:`.decider`), its executor (:mod:`.executor`), its settings.

``tenon run launcher-ec2`` (= ``python -m tenon.services.launcher_ec2``) runs it as the leader of its group.
AWS is reached as :mod:`tenon.runtime.aws` says: boto3's usual credential chain in the region
``TENON_AWS_REGION``; ``TENON_AWS_ENDPOINT`` points it at another endpoint (the local AWS of ``tenon up
--provider ec2`` and the tests).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from proto import registry
from tenon.runtime.aws import AwsError, AwsServiceSettings
from tenon.runtime.decider import Decider, Executor
from tenon.runtime.kube import Kube, load_kube
from tenon.runtime.service import ServiceContext, ServiceDefinition, decider_work
from tenon.runtime.settings import SettingsError, format_duration, setting
from tenon.services.launcher_ec2 import names
from tenon.services.launcher_ec2.aws import Aws, AwsSettings
from tenon.services.launcher_ec2.catalog import VM_MEMORY_OVERHEAD
from tenon.services.launcher_ec2.catalog_publisher import PublisherSettings
from tenon.services.launcher_ec2.decider import Ec2LauncherDecider
from tenon.services.launcher_ec2.executor import Ec2Executor
from tenon.services.launcher_ec2.launch_templates import ClusterInfo
from tenon.services.launcher_ec2.shipped import on_demand_prices

log = logging.getLogger("tenon.launcher_ec2")


@dataclass(frozen=True)
class LauncherEc2Settings(AwsServiceSettings):
    kubeconfig: str | None = setting(
        "TENON_KUBECONFIG", None, "the workload cluster's kubeconfig (default: in-cluster)", kind="path"
    )
    cluster_name: str = setting(
        "TENON_CLUSTER_NAME",
        "tenon",
        "the cluster's name: instances are tagged kubernetes.io/cluster/<name>=owned and join it",
    )
    cluster_endpoint: str = setting(
        "TENON_CLUSTER_ENDPOINT",
        "",
        "the API server the nodes join (in their user data); empty: EKS DescribeCluster says",
    )
    cluster_ca: str = setting(
        "TENON_CLUSTER_CA",
        "",
        "the cluster's CA bundle, base64, for the nodes' user data; empty: EKS DescribeCluster says",
    )
    kubernetes_version: str = setting(
        "TENON_KUBERNETES_VERSION", "1.31", "Kubernetes version the AMI aliases resolve for (SSM parameters)"
    )
    instance_types: str = setting(
        "TENON_EC2_INSTANCE_TYPES",
        "",
        "comma-separated patterns (m5.*, c6g.large) of the instance types the catalogs offer (default: all)",
    )
    vm_memory_overhead: float = setting(
        "TENON_EC2_VM_MEMORY_OVERHEAD",
        VM_MEMORY_OVERHEAD,
        "fraction of an instance type's memory taken by the hypervisor until a node of it reports its own",
        kind="float",
        minimum=0,
        maximum=0.5,
    )
    poll: float = setting(
        "TENON_EC2_POLL",
        5.0,
        "how often the cluster's instances are described",
        kind="duration",
        minimum=0.05,
    )
    catalog_refresh: float = setting(
        "TENON_EC2_CATALOG_REFRESH",
        60.0,
        "how often EC2NodeClasses are resolved again (subnets, security groups, AMIs)",
        kind="duration",
        minimum=0.1,
    )
    types_refresh: float = setting(
        "TENON_EC2_TYPES_REFRESH",
        12 * 3600.0,
        "how often instance types, their zones and spot prices are read again",
        kind="duration",
        minimum=1,
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
        if not self.cluster_name.strip():
            raise SettingsError("TENON_CLUSTER_NAME: must not be empty (instances are tagged with it)")

    @property
    def patterns(self) -> tuple[str, ...]:
        return tuple(p.strip() for p in self.instance_types.split(",") if p.strip())

    @property
    def cluster_tag(self) -> str:
        return f"{names.TAG_CLUSTER_PREFIX}{self.cluster_name}"


def make_decider(settings: LauncherEc2Settings) -> Ec2LauncherDecider:
    return Ec2LauncherDecider(settings.cluster_name)


def configured_cluster(settings: LauncherEc2Settings) -> ClusterInfo:
    return ClusterInfo(settings.cluster_name, settings.cluster_endpoint, settings.cluster_ca)


def discovered_cluster(aws: Aws, settings: LauncherEc2Settings) -> ClusterInfo:
    """The cluster the nodes join: the configured endpoint and CA; what is not configured comes from EKS
    (``DescribeCluster``, as Karpenter does), with its service CIDR. A launcher that cannot tell its nodes
    where to join must not launch any: :class:`SettingsError` naming the variables and EKS's answer."""
    configured = configured_cluster(settings)
    if configured.endpoint and configured.certificate_authority:
        return configured
    try:
        eks = aws.cluster(settings.cluster_name)
    except AwsError as exc:
        raise SettingsError(
            f"TENON_CLUSTER_ENDPOINT, TENON_CLUSTER_CA: not set, and EKS does not describe cluster "
            f"{settings.cluster_name!r} (TENON_CLUSTER_NAME): {exc}"
        ) from exc
    log.info("cluster endpoint and CA from EKS", extra={"cluster": settings.cluster_name})
    return ClusterInfo(
        settings.cluster_name,
        configured.endpoint or eks.endpoint,
        configured.certificate_authority or eks.certificate_authority,
        eks.service_cidr or configured.cidr,
    )


def publisher_settings(
    settings: LauncherEc2Settings, cluster: ClusterInfo | None = None
) -> PublisherSettings:
    return PublisherSettings(
        cluster=cluster or configured_cluster(settings),
        prices=on_demand_prices(),
        patterns=settings.patterns,
        vm_overhead=settings.vm_memory_overhead,
        refresh=settings.catalog_refresh,
        types_refresh=settings.types_refresh,
        resync=settings.catalog_resync or settings.resync_interval,
    )


async def make_executor(
    ctx: ServiceContext, settings: LauncherEc2Settings, decider: Decider[object]
) -> tuple[Executor, Callable[[], Awaitable[None]]]:
    workload: Kube | None = None
    try:
        workload = await load_kube(settings.kubeconfig, component=registry.LAUNCHER_EC2)
    except Exception as exc:  # outside a cluster without a kubeconfig: no status, leaks are kept
        log.warning("no workload cluster: NodeClass status is not written", extra={"error": str(exc)})
    aws = Aws(AwsSettings(settings.aws_region, settings.aws_endpoint, settings.kubernetes_version))
    try:
        cluster = await asyncio.to_thread(discovered_cluster, aws, settings)
    except SettingsError:
        if workload is not None:
            await workload.close()
        raise
    executor = Ec2Executor(
        aws,
        publisher_settings(settings, cluster),
        workload=workload,
        cluster_tag=settings.cluster_tag,
        poll=settings.poll,
        leak_grace=settings.leak_grace,
        launch_timeout=settings.launch_timeout,
    )

    async def close() -> None:
        if workload is not None:
            await workload.close()

    return executor, close


SERVICE = ServiceDefinition(
    name=registry.LAUNCHER_EC2,
    description="Turn planned NodeClaims of EC2NodeClasses into EC2 instances; offer EC2's types as a "
    "catalog.",
    settings=LauncherEc2Settings,
    work=decider_work(make_decider, make_executor, lambda s: s.tick),
    decider=make_decider,
)
