"""The simulated Cluster API controllers: MachineDeployment -> Machines -> Nodes in the workload cluster.

Runs against two stores (they may be the same object): the **management** cluster holding
``cluster.x-k8s.io`` MachineDeployments and Machines (v1beta1 and v1beta2 share storage in the sandbox; this
controller reads through v1beta2 and writes status fields both versions' readers understand), and the
**workload** cluster where the Nodes appear.

**MachineDeployments.** Machines are owned directly by their MachineDeployment (``ownerReferences``,
``controller: true``; no MachineSet layer), named ``<md>-<5 chars>`` and labelled
``cluster.x-k8s.io/deployment-name`` and ``cluster.x-k8s.io/cluster-name`` plus the template's labels. The
controller keeps ``spec.replicas`` Machines that are not being deleted; on scale-down it deletes in
:func:`deletion_order` (the ``cluster.x-k8s.io/delete-machine`` annotation first). ``spec.replicas`` unset
means the autoscaler ``min-size`` annotation, else 1. Paused MachineDeployments (``spec.paused`` or the
``cluster.x-k8s.io/paused`` annotation) are left alone. Status: replicas, readyReplicas,
availableReplicas, updatedReplicas/upToDateReplicas, observedGeneration, selector, phase (ScalingUp,
ScalingDown, Running).

**Machines** walk the phases Cluster API reports, timed from when this controller first saw them (the
profile's durations): ``Pending`` -> ``Provisioning`` after ``machine_bootstrap`` (bootstrap data ready) ->
``Provisioned`` after ``machine_provision`` (``spec.providerID`` = ``openstack:///<uuid>``, infrastructure
ready) -> ``Running`` once ``node_join`` later the Node has been created in the workload cluster
(:func:`node_for_machine`, registered NotReady by :func:`registered_node`; the kubelet makes it Ready) and
``status.nodeRef`` points at it. Every Machine gets the ``machine.cluster.x-k8s.io`` finalizer: deleting it
shows phase ``Deleting``, deletes its Node, and ``machine_delete`` seconds later removes the finalizer so the
Machine goes. Deleting a Node does not touch its Machine, and the Node is not re-created (the Machine keeps
its ``nodeRef`` to the missing Node, as a real one would until remediated).

A MachineDeployment whose annotations cannot be turned into a Node (bad quantity, bad taint) leaves its
Machines ``Provisioned`` with a ``NodeCreationFailed`` Warning Event naming the annotation; the next resync
retries.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import Any

from devtools.sandbox.controllers.clock import now_rfc3339
from devtools.sandbox.controllers.conditions import set_condition
from devtools.sandbox.controllers.events import EventRecorder
from devtools.sandbox.controllers.informer import (
    CLOUD_SLICE_CAP_S,
    InformerFactory,
    StoreLike,
    WorkQueue,
    object_key,
    run_worker,
)
from devtools.sandbox.controllers.kubelet import registered_node
from devtools.sandbox.controllers.machine_nodes import (
    CLUSTER_NAME_LABEL,
    delete_policy,
    deletion_order,
    node_for_machine,
)
from devtools.sandbox.controllers.ownership import OwnerIndex, controller_ref, owner_reference
from devtools.sandbox.controllers.predicates import is_terminating, node_is_ready
from devtools.sandbox.errors import AlreadyExists, NotFound
from devtools.sandbox.json_copy import json_copy
from devtools.sandbox.profiles import TimingProfile
from tenon.core.wellknown import DEPLOYMENT_NAME, PAUSED

log = logging.getLogger(__name__)

MACHINE_FINALIZER = "machine.cluster.x-k8s.io"
MIN_SIZE_ANNOTATION = "cluster.x-k8s.io/cluster-api-autoscaler-node-group-min-size"
PROVIDER_ID_PREFIX = "openstack:///"
MAX_MACHINE_WRITES_PER_RECONCILE = 200
MACHINE_EVENT_BATCH = 0.05  # seconds a Machine event may wait: a burst of them, one MachineSet sync


def md_desired_replicas(md: dict[str, Any]) -> int:
    replicas = (md.get("spec") or {}).get("replicas")
    if replicas is not None:
        return int(replicas)
    minimum = ((md.get("metadata") or {}).get("annotations") or {}).get(MIN_SIZE_ANNOTATION)
    try:
        return int(minimum) if minimum is not None else 1
    except ValueError:
        return 1


def is_paused(md: dict[str, Any]) -> bool:
    annotations = (md.get("metadata") or {}).get("annotations") or {}
    return bool((md.get("spec") or {}).get("paused")) or PAUSED in annotations


def machine_from_template(md: dict[str, Any]) -> dict[str, Any]:
    meta = md["metadata"]
    spec = md.get("spec") or {}
    template = json_copy(spec.get("template") or {})
    template_meta = template.get("metadata") or {}
    machine_spec = template.get("spec") or {}
    cluster = spec.get("clusterName") or machine_spec.get("clusterName") or ""
    machine_spec["clusterName"] = cluster
    labels = {
        **(template_meta.get("labels") or {}),
        DEPLOYMENT_NAME: meta["name"],
        CLUSTER_NAME_LABEL: cluster,
    }
    return {
        "apiVersion": md.get("apiVersion") or "cluster.x-k8s.io/v1beta2",
        "kind": "Machine",
        "metadata": {
            "generateName": f"{meta['name']}-",
            "namespace": meta.get("namespace"),
            "labels": labels,
            "annotations": dict(template_meta.get("annotations") or {}),
            "ownerReferences": [owner_reference(md)],
            "finalizers": [MACHINE_FINALIZER],
        },
        "spec": machine_spec,
    }


class ClusterApiController:
    def __init__(
        self,
        management: StoreLike,
        workload: StoreLike,
        profile: TimingProfile,
        management_informers: InformerFactory | None = None,
        workload_informers: InformerFactory | None = None,
    ) -> None:
        self.management = management
        self.management_informers = management_informers or InformerFactory(management, profile.resync_period)
        self.workload_informers = workload_informers or (
            self.management_informers
            if workload is management
            else InformerFactory(workload, profile.resync_period)
        )
        self._owned_factories = {
            id(f): f
            for f, given in (
                (self.management_informers, management_informers),
                (self.workload_informers, workload_informers),
            )
            if given is None
        }
        self.workload = workload
        self.profile = profile
        self.md_rt = management.resource("cluster.x-k8s.io/v1beta2", "MachineDeployment")
        self.machine_rt = management.resource("cluster.x-k8s.io/v1beta2", "Machine")
        self.nodes_rt = workload.resource("v1", "Node")
        self.deployments = self.management_informers.informer(self.md_rt, "machinedeployments")
        self.machines = self.management_informers.informer(self.machine_rt, "machines")
        self.nodes = self.workload_informers.informer(self.nodes_rt, "nodes")
        self.machines_by_owner = OwnerIndex("MachineDeployment")
        self._md_key_by_uid: dict[str, str] = {}
        self._machine_by_node: dict[str, str] = {}
        self.first_seen: dict[str, float] = {}
        self.deleting_since: dict[str, float] = {}
        self.node_index = 0
        self.events = EventRecorder(management, "machine-controller")
        self.deployments.add_handler(self._on_md)
        self.machines.add_handler(self._on_machine)
        self.nodes.add_handler(self._on_node)
        self.queue = WorkQueue()

    def _now(self) -> float:
        return asyncio.get_running_loop().time()

    # ------------------------------------------------------------------------------------------- handlers
    def _on_md(self, event_type: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        uid = obj["metadata"].get("uid")
        if event_type == "DELETED":
            self._md_key_by_uid.pop(uid, None)
            return
        self._md_key_by_uid[uid] = object_key(obj)
        self.queue.add(("md", object_key(obj)))

    def _on_machine(self, event_type: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        key = object_key(obj)
        owner = self.machines_by_owner.handle(key, obj, event_type == "DELETED")
        if event_type == "DELETED":
            self.first_seen.pop(key, None)
            self.deleting_since.pop(key, None)
            self._delete_node_of(obj)
        else:
            self._machine_by_node[obj["metadata"]["name"]] = key
            self.queue.add(("machine", key))
        if owner is not None and owner in self._md_key_by_uid:
            # a wave of Machines changing: one MachineSet sync over them all, not one per Machine
            self.queue.add(("md", self._md_key_by_uid[owner]), MACHINE_EVENT_BATCH)

    def _on_node(self, event_type: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        if event_type == "MODIFIED" and old is not None and node_is_ready(old) == node_is_ready(obj):
            return
        machine_key = self._machine_by_node.get(obj["metadata"]["name"])
        if machine_key is not None:
            self.queue.add(("machine", machine_key))

    # ------------------------------------------------------------------------------------------ reconcile
    def reconcile(self, item: tuple[str, str]) -> float | None:
        kind, key = item
        return self._sync_md(key) if kind == "md" else self._sync_machine(key)

    def _owned(self, md: dict[str, Any]) -> list[dict[str, Any]]:
        return [
            self.machines.objects[k]
            for k in self.machines_by_owner.dependents(md["metadata"]["uid"])
            if k in self.machines.objects
        ]

    def _sync_md(self, key: str) -> float | None:
        md = self.deployments.objects.get(key)
        if md is None or is_terminating(md) or is_paused(md):
            return None
        desired = md_desired_replicas(md)
        active = [m for m in self._owned(md) if not is_terminating(m)]
        again: float | None = None
        if len(active) < desired:
            missing = desired - len(active)
            if missing > MAX_MACHINE_WRITES_PER_RECONCILE:
                missing, again = MAX_MACHINE_WRITES_PER_RECONCILE, 0.0
            for _ in range(missing):
                created = self.management.create(self.machine_rt, machine_from_template(md))
                self.machines.observe_write(object_key(created), created)
        elif len(active) > desired:
            for machine in deletion_order(active, delete_policy(md))[: len(active) - desired]:
                meta = machine["metadata"]
                try:
                    last = self.management.delete(self.machine_rt, meta["name"], meta.get("namespace"))
                except NotFound:
                    last = None
                self.machines.observe_write(object_key(machine), last)
        self._write_md_status(md, desired)
        return again

    def _write_md_status(self, md: dict[str, Any], desired: int) -> None:
        active = [m for m in self._owned(md) if not is_terminating(m)]
        ready = 0
        for machine in active:
            node_name = ((machine.get("status") or {}).get("nodeRef") or {}).get("name")
            node = self.nodes.objects.get(node_name) if node_name else None
            if node is not None and node_is_ready(node):
                ready += 1
        count = len(active)
        phase = "ScalingUp" if count < desired else "ScalingDown" if count > desired else "Running"
        selector = (
            ",".join(
                f"{k}={v}"
                for k, v in sorted(
                    ((md.get("spec") or {}).get("selector") or {}).get("matchLabels", {}).items()
                )
            )
            or f"{DEPLOYMENT_NAME}={md['metadata']['name']}"
        )
        status = {
            "replicas": count,
            "readyReplicas": ready,
            "availableReplicas": ready,
            "updatedReplicas": count,
            "upToDateReplicas": count,
            "unavailableReplicas": max(0, desired - ready),
            "observedGeneration": md["metadata"].get("generation", 1),
            "selector": selector,
            "phase": phase,
        }
        current = md.get("status") or {}
        if any(current.get(k) != v for k, v in status.items()):
            fresh = json_copy(md)
            fresh["status"] = {**current, **status}
            updated = self.management.update(self.md_rt, fresh, subresource="status")
            self.deployments.observe_write(object_key(updated), updated)

    def _md_of(self, machine: dict[str, Any]) -> dict[str, Any] | None:
        ref = controller_ref(machine)
        namespace = machine["metadata"].get("namespace")
        if ref is not None and ref.get("kind") == "MachineDeployment":
            return self.deployments.objects.get(f"{namespace}/{ref.get('name')}")
        name = (machine["metadata"].get("labels") or {}).get(DEPLOYMENT_NAME)
        return self.deployments.objects.get(f"{namespace}/{name}") if name else None

    def _sync_machine(self, key: str) -> float | None:
        machine = self.machines.objects.get(key)
        if machine is None:
            return None
        now = self._now()
        if is_terminating(machine):
            return self._finish_deletion(key, machine, now)
        elapsed = now - self.first_seen.setdefault(key, now)
        status = json_copy(machine.get("status") or {})
        spec = machine.get("spec") or {}
        profile = self.profile
        if elapsed < profile.machine_bootstrap:
            self._write_machine_status(key, machine, {**status, "phase": "Pending"})
            return profile.machine_bootstrap - elapsed
        if elapsed < profile.machine_provision and not spec.get("providerID"):
            status.update(
                {
                    "phase": "Provisioning",
                    "bootstrapReady": True,
                    "initialization": {
                        **(status.get("initialization") or {}),
                        "bootstrapDataSecretCreated": True,
                    },
                }
            )
            self._write_machine_status(key, machine, status)
            return profile.machine_provision - elapsed
        if not spec.get("providerID"):
            fresh = json_copy(machine)
            fresh["spec"]["providerID"] = f"{PROVIDER_ID_PREFIX}{uuid.uuid4()}"
            fresh["spec"].setdefault("bootstrap", {}).setdefault(
                "dataSecretName", machine["metadata"]["name"]
            )
            machine = self.management.update(self.machine_rt, fresh)
            self.machines.observe_write(key, machine)
            spec = machine["spec"]
        join_at = profile.machine_provision + profile.node_join
        if not status.get("nodeRef"):
            status.update(
                {
                    "phase": "Provisioned",
                    "bootstrapReady": True,
                    "infrastructureReady": True,
                    "initialization": {"bootstrapDataSecretCreated": True, "infrastructureProvisioned": True},
                }
            )
            if spec.get("failureDomain"):
                status["failureDomain"] = spec["failureDomain"]
            if elapsed < join_at:
                self._write_machine_status(key, machine, status)
                return join_at - elapsed
            node = self._create_node(machine)
            if node is None:
                self._write_machine_status(key, machine, status)
                return None
            status["nodeRef"] = {
                "apiVersion": "v1",
                "kind": "Node",
                "name": node["metadata"]["name"],
                "uid": node["metadata"].get("uid"),
            }
            status["addresses"] = [
                {"type": "InternalIP", "address": a.get("address")}
                for a in (node.get("status") or {}).get("addresses") or []
                if a.get("type") == "InternalIP"
            ]
            status["nodeInfo"] = (node.get("status") or {}).get("nodeInfo")
        node_name = status["nodeRef"].get("name")
        node_obj = self.nodes.objects.get(node_name)
        ready = node_obj is not None and node_is_ready(node_obj)
        status["phase"] = "Running"
        status_holder = {"status": status}
        set_condition(
            status_holder,
            "NodeHealthy",
            "True" if ready else "False",
            "" if ready else ("NodeNotFound" if node_obj is None else "NodeNotReady"),
        )
        set_condition(status_holder, "Ready", "True" if ready else "False", "" if ready else "NodeNotReady")
        self._write_machine_status(key, machine, status)
        return None

    def _create_node(self, machine: dict[str, Any]) -> dict[str, Any] | None:
        md = self._md_of(machine)
        try:
            node = node_for_machine(machine, md)
        except ValueError as err:
            self.events.record(machine, "Warning", "NodeCreationFailed", str(err))
            log.warning("sandbox cluster-api: %s", err)
            return None
        self.node_index += 1
        node = registered_node(node, 10_000 + self.node_index)
        try:
            created = self.workload.create(self.nodes_rt, node)
        except AlreadyExists:
            created = self.workload.get(self.nodes_rt, node["metadata"]["name"])
        self.nodes.observe_write(created["metadata"]["name"], created)
        return created

    def _write_machine_status(self, key: str, machine: dict[str, Any], status: dict[str, Any]) -> None:
        if status == (machine.get("status") or {}):
            return
        fresh = json_copy(machine)
        fresh["status"] = status
        if status.get("phase") != (machine.get("status") or {}).get("phase"):
            fresh["status"]["lastUpdated"] = now_rfc3339()
        updated = self.management.update(self.machine_rt, fresh, subresource="status")
        self.machines.observe_write(key, updated)

    def _delete_node_of(self, machine: dict[str, Any]) -> None:
        node_name = ((machine.get("status") or {}).get("nodeRef") or {}).get("name")
        if not node_name:
            return
        node = self.nodes.objects.get(node_name)
        if node is not None and (node.get("spec") or {}).get("providerID") not in (
            None,
            (machine.get("spec") or {}).get("providerID"),
        ):
            return  # a different node took the name
        try:
            last = self.workload.delete(self.nodes_rt, node_name)
        except NotFound:
            last = None
        self.nodes.observe_write(node_name, last)

    def _finish_deletion(self, key: str, machine: dict[str, Any], now: float) -> float | None:
        since = self.deleting_since.setdefault(key, now)
        status = json_copy(machine.get("status") or {})
        if status.get("phase") != "Deleting":
            status["phase"] = "Deleting"
            self._write_machine_status(key, machine, status)
            machine = self.machines.objects.get(key, machine)
        self._delete_node_of(machine)
        remaining = since + self.profile.machine_delete - now
        if remaining > 0:
            return remaining
        finalizers = machine["metadata"].get("finalizers") or []
        if MACHINE_FINALIZER in finalizers:
            fresh = json_copy(machine)
            fresh["metadata"]["finalizers"] = [f for f in finalizers if f != MACHINE_FINALIZER]
            try:
                updated = self.management.update(self.machine_rt, fresh)
            except NotFound:
                return None
            self.machines.observe_write(key, None if not fresh["metadata"]["finalizers"] else updated)
        return None

    async def run(self) -> None:
        try:
            await self.management_informers.start(self.deployments, self.machines)
            await self.workload_informers.start(self.nodes)
            await run_worker("cluster-api", self.queue, self.reconcile, fair_up_to=CLOUD_SLICE_CAP_S)
        finally:
            for factory in self._owned_factories.values():
                await factory.stop()
