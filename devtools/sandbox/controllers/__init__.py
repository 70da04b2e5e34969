"""The sandbox's controllers: what turns the object store into something that behaves like a cluster.

:func:`run_controllers` runs, until cancelled, one task per simulated component against the **workload**
store (pods, nodes, apps, policy) and the **management** store (Cluster API; it may be the same object):

==========================  =================================================================================
``scheduler.Scheduler``     kube-scheduler: binds pending pods or marks them ``PodScheduled=False``
``kubelet.Kubelet``         kubelets + node lifecycle: nodes NotReady -> Ready, pods Running, graceful deletes
``deployments``             Deployment -> ReplicaSet -> Pods
``daemonsets``              DaemonSet -> a pod per eligible node
``disruption_budgets``      PodDisruptionBudget status (what eviction enforces)
``nodes_gc``                pod GC of orphans and NoExecute taint eviction
``cluster_api``             MachineDeployment -> Machines -> Nodes in the workload cluster
``ec2_instances``           instances of the local AWS -> Nodes (only with ``TENON_SANDBOX_AWS_ENDPOINT``)
==========================  =================================================================================

Every controller is event-driven (list + watch through ``informer.Informer``) with a periodic re-list as a
safety net, and times its simulated delays with the :class:`TimingProfile` it is given. Pure decision code
lives in ``predicates``, ``resource_lists``, ``scheduling_filters``, ``cluster_state``, ``topology_index``,
``machine_nodes`` and the ``*_status`` / builder functions of each module; the classes only move data between
stores and that code. ``informer`` holds the shared plumbing (list+watch caches shared per store, delayed work
queues, workers).

If one controller crashes, :func:`run_controllers` cancels the others and raises, so a broken sandbox fails
loudly instead of silently stopping to schedule.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from devtools.sandbox.controllers.cluster_api import ClusterApiController
from devtools.sandbox.controllers.daemonsets import DaemonSetController
from devtools.sandbox.controllers.deployments import DeploymentController
from devtools.sandbox.controllers.disruption_budgets import DisruptionController
from devtools.sandbox.controllers.ec2_instances import AWS_ENDPOINT_ENV, Ec2InstanceNodes
from devtools.sandbox.controllers.informer import InformerFactory, StoreLike
from devtools.sandbox.controllers.kubelet import Kubelet
from devtools.sandbox.controllers.nodes_gc import PodGarbageCollector
from devtools.sandbox.controllers.scheduler import Scheduler
from devtools.sandbox.profiles import TimingProfile

__all__ = [
    "ClusterApiController",
    "DaemonSetController",
    "DeploymentController",
    "DisruptionController",
    "Ec2InstanceNodes",
    "InformerFactory",
    "Kubelet",
    "PodGarbageCollector",
    "Scheduler",
    "build_controllers",
    "run_controllers",
]


def build_controllers(
    workload: StoreLike,
    management: StoreLike,
    profile: TimingProfile,
    workload_informers: InformerFactory | None = None,
    management_informers: InformerFactory | None = None,
) -> list[Any]:
    """Every controller, constructed but not started (each has ``async run()``), sharing informers."""
    wl = workload_informers or InformerFactory(workload, profile.resync_period)
    mg = management_informers or (
        wl if management is workload else InformerFactory(management, profile.resync_period)
    )
    ec2: list[Any] = []
    if os.environ.get(AWS_ENDPOINT_ENV):  # the local stack's EC2 provider: instances join as Nodes
        ec2.append(Ec2InstanceNodes(workload, profile, os.environ[AWS_ENDPOINT_ENV]))
    return [
        *ec2,
        Scheduler(workload, profile, wl),
        Kubelet(workload, profile, wl),
        DeploymentController(workload, profile, wl),
        DaemonSetController(workload, profile, wl),
        DisruptionController(workload, profile, wl),
        PodGarbageCollector(workload, profile, wl),
        ClusterApiController(management, workload, profile, mg, wl),
    ]


async def run_controllers(workload: StoreLike, management: StoreLike, profile: TimingProfile) -> None:
    """Run every controller until cancelled; if one fails, stop the rest and re-raise its error."""
    wl = InformerFactory(workload, profile.resync_period)
    mg = wl if management is workload else InformerFactory(management, profile.resync_period)
    controllers = build_controllers(workload, management, profile, wl, mg)
    tasks = [asyncio.create_task(c.run(), name=f"sandbox-{type(c).__name__}") for c in controllers]
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        for task in done:
            task.result()
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await wl.stop()
        await mg.stop()
