"""Volume topology: a pod with a zonal volume gets a node where that volume can be attached.

A pending pod's PersistentVolumeClaims (named in ``spec.volumes``, or made from a generic ephemeral volume's
template as ``<pod>-<volume>``) add node requirements to every term of its required node affinity, as
Karpenter's ``VolumeTopology`` does:

* a claim **bound** to a PersistentVolume (``spec.volumeName``): the volume's
  ``spec.nodeAffinity.required`` terms;
* a claim **not bound yet**: its StorageClass (``spec.storageClassName``; absent: the default class, annotated
  ``storageclass.kubernetes.io/is-default-class: "true"``, the last by name when several are): with
  ``volumeBindingMode: WaitForFirstConsumer``, its ``allowedTopologies`` (the volume is made where the pod
  lands); with ``Immediate``, the pod waits for the volume to be bound first and nothing is bought for it
  (as Karpenter).

A claim being deleted or ``Lost``, a volume being deleted, a claim without a class that is not bound: the pod
cannot start, and it is reported unschedulable with the reason. An object the input does not hold is
treated as Karpenter treats a missing one (the pod is unschedulable) **when the input holds objects of that
kind at all**; an input without any PersistentVolumeClaim (or PersistentVolume, or StorageClass) is one that
does not model volumes, and its pods are planned without volume topology: the scheduler service does not
give volumes to the core yet, and a what-if file need not list them.

The alternatives multiply (each volume's terms are ANDed with each term of the pod's affinity); at most
:data:`MAX_TERMS` terms are kept, the rest dropped (a pod with so many alternatives is not narrowed by them).

**Attach limits, where known.** A CSI driver limits how many of its volumes one node attaches. Where the input
says so (an instance type's capacity, or a Node's allocatable, lists ``attachable-volumes-csi-<driver>``,
:data:`tenon.core.wellknown.ATTACHABLE_VOLUMES`), each pending pod requests one of that resource per volume
of the driver (the volume's ``spec.csi.driver``, else its class's ``provisioner``), so a node holds no more
pods than it can attach volumes for; a type or Node that does not list it is not limited. A volume shared by
several pods on one node is counted once per pod: on the safe side.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace

from tenon.core.model import ClusterInput, PersistentVolume, Pod, PodVolume, StorageClass, VolumeClaim
from tenon.core.requirements import Requirement
from tenon.core.wellknown import ATTACHABLE_VOLUMES

MAX_TERMS = 64
Terms = tuple[tuple[Requirement, ...], ...]
Found = tuple[Terms, str]  # the node terms a volume requires, and its CSI driver ("" when not known)


def _cross(left: Terms, right: Terms) -> Terms:
    """Every term of ``left`` ANDed with every term of ``right`` (an AND of two ORs)."""
    crossed = tuple(a + b for a in left for b in right)
    return crossed if len(crossed) <= MAX_TERMS else left


@dataclass
class _Volumes:
    claims: dict[tuple[str, str], VolumeClaim]
    volumes: dict[str, PersistentVolume]
    classes: dict[str, StorageClass]
    default: StorageClass | None
    known: tuple[bool, bool, bool]  # the input holds claims, volumes, classes

    @classmethod
    def of(cls, inputs: ClusterInput) -> _Volumes:
        defaults = sorted((c for c in inputs.storage_classes if c.default), key=lambda c: c.name)
        return cls(
            {(c.namespace, c.name): c for c in inputs.volume_claims},
            {v.name: v for v in inputs.volumes},
            {c.name: c for c in inputs.storage_classes},
            defaults[-1] if defaults else None,
            (bool(inputs.volume_claims), bool(inputs.volumes), bool(inputs.storage_classes)),
        )

    def terms(self, pod: Pod, volume: PodVolume) -> Found | str:
        """The node terms ``volume`` requires (``((),)``: none) and its driver, or why the pod cannot
        start."""
        name = f"{pod.name}-{volume.claim}" if volume.ephemeral else volume.claim
        claim = self.claims.get((pod.namespace, name))
        if claim is None:
            if volume.ephemeral:  # the claim is made from the template when the pod is created
                return self._class_terms(volume.storage_class, f"ephemeral volume {volume.claim}")
            if self.known[0]:
                return f"PersistentVolumeClaim {pod.namespace}/{name} not found"
            return ((),), ""
        what = f"PersistentVolumeClaim {claim.namespace}/{claim.name}"
        if claim.deleting:
            return f"{what} is being deleted"
        if claim.phase == "Lost":
            return f"{what} is Lost (its volume is gone)"
        if claim.volume_name:
            return self._volume_terms(claim.volume_name, what)
        return self._class_terms(claim.storage_class, what)

    def _volume_terms(self, name: str, what: str) -> Found | str:
        volume = self.volumes.get(name)
        if volume is None:
            return f"{what}: PersistentVolume {name} not found" if self.known[1] else (((),), "")
        if volume.deleting:
            return f"{what}: PersistentVolume {name} is being deleted"
        return volume.node_affinity or ((),), volume.driver

    def _class_terms(self, class_name: str | None, what: str) -> Found | str:
        if class_name == "":
            return f"{what} is not bound and has no StorageClass to provision it"
        sc = self.default if class_name is None else self.classes.get(class_name)
        if sc is None:
            if not self.known[2]:
                return ((),), ""
            wanted = "a default StorageClass" if class_name is None else f"StorageClass {class_name}"
            return f"{what} is not bound and {wanted} is not found"
        if not sc.wait_for_first_consumer:
            return (
                f"{what} is not bound yet (StorageClass {sc.name} binds Immediately): waiting for its volume"
            )
        return sc.allowed_topologies or ((),), sc.provisioner


def attach_limited(inputs: ClusterInput) -> frozenset[str]:
    """The ``attachable-volumes-csi-<driver>`` resources some instance type or Node of the input lists."""
    types = [it for catalog in inputs.catalogs.values() for it in catalog]
    types += [mdt.instance_type for mdt in inputs.machine_deployments]
    listed = {r for it in types for r in it.capacity} | {r for n in inputs.nodes for r in n.allocatable}
    return frozenset(r for r in listed if r.startswith(ATTACHABLE_VOLUMES))


def with_volume_topology(inputs: ClusterInput) -> tuple[ClusterInput, dict[str, str]]:
    """``inputs`` with every pending pod's volume terms in its node affinity (and its volume attachments in
    its requests, for the drivers whose limits are known), and the pods whose volumes keep them from
    starting, with why."""
    if not any(p.volumes and not p.node_name for p in inputs.pods):
        return inputs, {}
    known = _Volumes.of(inputs)
    limited = attach_limited(inputs)
    failures: dict[str, str] = {}
    pods: list[Pod] = []
    for pod in inputs.pods:
        if pod.volumes and not pod.node_name:
            found = _pod_terms(known, pod, pod.volumes)
            if isinstance(found, str):
                failures[pod.key] = found
            else:
                pod = _with_volumes(pod, *found, limited)
        pods.append(pod)
    return replace(inputs, pods=tuple(pods)), failures


def _with_volumes(pod: Pod, terms: Terms, drivers: Counter[str], limited: frozenset[str]) -> Pod:
    attachments = {
        f"{ATTACHABLE_VOLUMES}{d}": n for d, n in drivers.items() if f"{ATTACHABLE_VOLUMES}{d}" in limited
    }
    if terms == ((),) and not attachments:
        return pod
    requests = {**pod.requests, **attachments} if attachments else pod.requests
    return replace(pod, node_affinity=_cross(pod.node_affinity, terms), requests=requests)


def _pod_terms(known: _Volumes, pod: Pod, volumes: Sequence[PodVolume]) -> tuple[Terms, Counter[str]] | str:
    terms: Terms = ((),)
    drivers: Counter[str] = Counter()
    for volume in volumes:
        found = known.terms(pod, volume)
        if isinstance(found, str):
            return found
        terms = _cross(terms, found[0])
        if found[1]:
            drivers[found[1]] += 1
    return terms, drivers
