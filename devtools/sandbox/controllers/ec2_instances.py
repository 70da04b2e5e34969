"""The simulated EC2 node lifecycle: instances of the local AWS (moto's server) join the workload cluster as
Nodes, and leave it when they are terminated.

What the kubelet of an EKS node does, reduced to what an autoscaler sees: an instance tagged
``karpenter.sh/nodeclaim`` that is pending or running registers a Node :data:`boot delay
<TimingProfile.machine_provision>` (``machine_provision + node_join`` of the profile) after the sandbox first
saw it; the simulated kubelet then makes it Ready as any other Node. Once the instance is shutting down or
terminated (or gone from the local AWS), its Node is deleted (the cloud node lifecycle controller's job; a
Node held by tenon's finalizer waits for tenon).

**The Node** (:func:`node_for_instance`): named after the instance's private DNS name (as EKS names nodes),
``spec.providerID`` ``aws:///<zone>/<instance-id>``, labels ``node.kubernetes.io/instance-type``,
``topology.kubernetes.io/zone`` and ``region``, ``kubernetes.io/arch`` (from the type's architecture) and
``os``, and the taint ``karpenter.sh/unregistered:NoExecute`` the launch template's user data registers it
with. Capacity and allocatable follow the formulas tenon's EC2 catalog predicts them with (the VM memory
overhead, ENI-limited pods, kube-reserved and the eviction threshold), so a node holds what was planned for
it.

It is enabled when the sandbox is given the local AWS's URL (``TENON_SANDBOX_AWS_ENDPOINT``, set by the local
stack with ``provider="ec2"``).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Mapping
from typing import Any

from devtools.aws import SANDBOX_AWS_ENDPOINT
from devtools.sandbox.controllers.kubelet import registered_node
from devtools.sandbox.errors import AlreadyExists, NotFound
from devtools.sandbox.profiles import TimingProfile
from tenon.core.wellknown import (
    ARCH,
    AWS_NODECLAIM_TAG,
    HOSTNAME,
    INSTANCE_TYPE,
    OS,
    REGION,
    UNREGISTERED_TAINT,
    ZONE,
)
from tenon.services.launcher_ec2.catalog import (
    VM_MEMORY_OVERHEAD,
    eni_limited_pods,
    kube_reserved_cpu_millis,
)

log = logging.getLogger(__name__)

AWS_ENDPOINT_ENV = SANDBOX_AWS_ENDPOINT
"""The local AWS whose instances become Nodes (unset: no EC2 node lifecycle)."""
LIVE_STATES = ("pending", "running")
MIB = 2**20
GIB = 2**30
ROOT_VOLUME = 20 * GIB
"""The root volume a NodeClass gets when it says nothing (tenon's catalog assumes the same)."""


def _arch(described_type: Mapping[str, Any] | None) -> str:
    supported = ((described_type or {}).get("ProcessorInfo") or {}).get("SupportedArchitectures") or []
    return "arm64" if "arm64" in supported and "x86_64" not in supported else "amd64"


def node_resources(described_type: Mapping[str, Any] | None) -> tuple[dict[str, str], dict[str, str]]:
    """(capacity, allocatable) of a node of this type, as the catalog's formulas predict them."""
    described = described_type or {}
    vcpus = int((described.get("VCpuInfo") or {}).get("DefaultVCpus") or 2)
    size_mib = int((described.get("MemoryInfo") or {}).get("SizeInMiB") or 4096)
    memory = (size_mib - math.ceil(size_mib * VM_MEMORY_OVERHEAD)) * MIB
    pods = eni_limited_pods(described)
    reserved_memory = (11 * pods + 255) * MIB + 100 * MIB
    reserved_storage = GIB + ROOT_VOLUME // 10
    capacity = {
        "cpu": str(vcpus),
        "memory": f"{memory // MIB}Mi",
        "pods": str(pods),
        "ephemeral-storage": f"{ROOT_VOLUME // GIB}Gi",
    }
    allocatable = {
        "cpu": f"{vcpus * 1000 - kube_reserved_cpu_millis(vcpus)}m",
        "memory": f"{(memory - reserved_memory) // MIB}Mi",
        "pods": str(pods),
        "ephemeral-storage": str(ROOT_VOLUME - reserved_storage),
    }
    return capacity, allocatable


def provider_id(instance: Mapping[str, Any]) -> str:
    zone = (instance.get("Placement") or {}).get("AvailabilityZone") or ""
    return f"aws:///{zone}/{instance['InstanceId']}"


def node_name(instance: Mapping[str, Any]) -> str:
    return str(instance.get("PrivateDnsName") or instance["InstanceId"])


def node_for_instance(
    instance: Mapping[str, Any], described_type: Mapping[str, Any] | None, region: str
) -> dict[str, Any]:
    """The Node (before the kubelet registers it) an EC2 instance becomes (see the module docstring)."""
    name = node_name(instance)
    zone = str((instance.get("Placement") or {}).get("AvailabilityZone") or "")
    capacity, allocatable = node_resources(described_type)
    labels = {
        INSTANCE_TYPE: str(instance.get("InstanceType") or ""),
        HOSTNAME: name,
        ARCH: _arch(described_type),
        OS: "linux",
        REGION: region,
    }
    if zone:
        labels[ZONE] = zone
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "providerID": provider_id(instance),
            "taints": [{"key": UNREGISTERED_TAINT, "effect": "NoExecute"}],
        },
        "status": {"capacity": capacity, "allocatable": allocatable},
    }


class Ec2InstanceNodes:
    """Instances of the local AWS -> Nodes of the workload cluster (see the module docstring)."""

    def __init__(
        self, workload: Any, profile: TimingProfile, aws_url: str, region: str = "us-east-1"
    ) -> None:
        self.workload = workload
        self.profile = profile
        self.aws_url = aws_url
        self.region = region
        self.nodes_rt = workload.resource("v1", "Node")
        self.poll = min(1.0, max(0.1, profile.machine_provision / 4))
        self.first_seen: dict[str, float] = {}
        self.joined: dict[str, str] = {}
        """Instance id -> the name of the Node it registered (deleted with the instance)."""
        self.types: dict[str, dict[str, Any]] = {}
        self.index = 0
        self._ec2: Any = None

    def _client(self) -> Any:
        if self._ec2 is None:
            from devtools.aws import client

            self._ec2 = client("ec2", self.aws_url, self.region)
        return self._ec2

    def describe(self) -> list[dict[str, Any]]:
        """Blocking: every instance tagged with a NodeClaim, and the types not described yet."""
        ec2 = self._client()
        instances = [
            i
            for page in ec2.get_paginator("describe_instances").paginate(
                Filters=[{"Name": "tag-key", "Values": [AWS_NODECLAIM_TAG]}]
            )
            for r in page["Reservations"]
            for i in r["Instances"]
        ]
        wanted = sorted({i["InstanceType"] for i in instances} - set(self.types))
        if wanted:
            for described in ec2.describe_instance_types(InstanceTypes=wanted)["InstanceTypes"]:
                self.types[described["InstanceType"]] = described
        return instances

    async def run(self) -> None:
        while True:
            try:
                instances = await asyncio.to_thread(self.describe)
            except Exception as exc:  # the local AWS is starting or gone for a moment: look again
                log.warning("sandbox ec2: instances not described: %s", exc)
                await asyncio.sleep(self.poll)
                continue
            self.reconcile(instances, time.monotonic())
            await asyncio.sleep(self.poll)

    def reconcile(self, instances: list[dict[str, Any]], now: float) -> None:
        """Join the instances whose boot delay is over; remove the Nodes of those that went away."""
        boot = self.profile.machine_provision + self.profile.node_join
        live = set()
        for instance in instances:
            instance_id = instance["InstanceId"]
            if instance["State"]["Name"] not in LIVE_STATES:
                continue
            live.add(instance_id)
            since = self.first_seen.setdefault(instance_id, now)
            if instance_id not in self.joined and now - since >= boot:
                self._join(instance)
        for instance_id in [i for i in self.joined if i not in live]:
            self._leave(instance_id, self.joined.pop(instance_id))
        for instance_id in [i for i in self.first_seen if i not in live]:
            del self.first_seen[instance_id]

    def _join(self, instance: dict[str, Any]) -> None:
        self.index += 1
        node = node_for_instance(instance, self.types.get(instance["InstanceType"]), self.region)
        node = registered_node(node, 20_000 + self.index)
        name = node["metadata"]["name"]
        try:
            self.workload.create(self.nodes_rt, node)
        except AlreadyExists:
            existing = self.workload.get(self.nodes_rt, name)
            if (existing.get("spec") or {}).get("providerID") != node["spec"]["providerID"]:
                log.warning("sandbox ec2: node %s exists for another instance", name)
                return
        self.joined[instance["InstanceId"]] = name
        log.info("sandbox ec2: instance %s joined as node %s", instance["InstanceId"], name)

    def _leave(self, instance_id: str, name: str) -> None:
        try:
            node = self.workload.get(self.nodes_rt, name)
        except NotFound:
            return
        if not str((node.get("spec") or {}).get("providerID") or "").endswith(f"/{instance_id}"):
            return  # a different node took the name
        try:
            self.workload.delete(self.nodes_rt, name)
        except NotFound:
            return
        log.info("sandbox ec2: instance %s is gone: node %s deleted", instance_id, name)
