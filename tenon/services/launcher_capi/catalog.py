"""The catalog of one ClusterAPINodeClass: its member MachineDeployments as priced instance types (pure).

Input: the NodeClass object, every MachineDeployment the launcher sees in the management cluster, and (when
the NodeClass names an OpenStack cloud) the flavors read from Nova. Output: :class:`CatalogContent`, exactly
what a ``CatalogSnapshot`` carries, plus the map the launcher needs to act on a claim:
``targets[(instance type, zone)] -> MachineDeploymentKey``.

Steps, each a plain function of the previous one's result:

1. **Membership** (:func:`member_machine_deployments`): an MD belongs to the NodeClass when it carries the
   ``node.cluster.x-k8s.io/karpenter-member`` label and matches ``spec.scalableResourceSelector`` (both: the
   Karpenter provider probably loses the membership filter when a selector is set, see the reference notes;
   tenon applies both on purpose).
2. **OpenStack enrichment** (``openstack.enrich_machine_deployments``): fills capacity and price annotations
   the MDs omit. Its notes go into the snapshot's ``notes`` so a person can see where each number came from.
3. **Parsing** (``tenon.core.catalog.machine_deployment_types``): MDs become instance types; an MD
   whose annotations cannot be read is *skipped* with a reason naming it, and the others go on. Two MDs that
   would offer the same instance type in the same zone are ambiguous for the launcher (which one to scale?):
   the second is skipped too, naming the first.
4. **Entries** (:func:`catalog_entry`): each type in the InstanceCatalog entry format (``name``,
   ``capacity``, ``overhead``, ``labels``, ``offerings``) with exact quantities, plus the fields the
   InstanceCatalog format has no place for but the scheduler needs: ``taints``, ``maxNew`` (max size minus
   replicas), ``priceEstimated``, ``source`` and ``machineDeployment`` (namespace/name).

``sources`` are the (enriched) MDs reduced to what decides the catalog (no ``status``, no resourceVersion), so
the content hash changes when a price, a capacity annotation or ``spec.replicas`` changes, and not when the
Cluster API controller rewrites status. The snapshot id derives from that hash and the id of the previous
snapshot on the subject (:func:`catalog_snapshot`), so the same content republished after a restart is dropped
as a duplicate while A -> B -> A within the broker's duplicate window still publishes A again.

Each skipped MD also becomes a Kubernetes Warning Event on that MD (:func:`skipped_machine_deployment_event`),
with a name derived from the MD's uid and the reason, so repeating it after a restart is an AlreadyExists the
caller ignores, not a second Event.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import msgspec

from proto.events import CatalogSnapshot, KubeObject, SkippedSource
from proto.ids import derive_id
from tenon.core import (
    InputError,
    InstanceType,
    LabelSelector,
    SkippedObject,
    machine_deployment_types,
    parse_objects,
)
from tenon.core.quantities import CPU, EPHEMERAL_STORAGE, MEMORY
from tenon.core.wellknown import KARPENTER_MEMBER, SCALED_DOWN_FOR, SCALED_UP_FOR
from tenon.runtime.eventlog.factories import make_event
from tenon.services.launcher_capi.openstack import Flavor, enrich_machine_deployments

NODECLASS_KIND = "ClusterAPINodeClass"
PROVIDER = "cluster-api"
SKIPPED_EVENT_REASON = "TenonMachineDeploymentSkipped"
EVENT_COMPONENT = "tenon-launcher-capi"
BOOKKEEPING_ANNOTATIONS = (SCALED_UP_FOR, SCALED_DOWN_FOR)
"""The launcher's records on an MD (see :mod:`.launching`): they say nothing about what the MD offers."""


@dataclass(frozen=True, order=True)
class MachineDeploymentKey:
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class CatalogContent:
    """What one NodeClass offers now; ``content_hash`` covers everything a snapshot publishes."""

    node_class: str
    instance_types: tuple[KubeObject, ...]
    sources: tuple[KubeObject, ...]
    skipped: tuple[SkippedSource, ...]
    notes: tuple[str, ...]
    targets: Mapping[tuple[str, str | None], MachineDeploymentKey] = field(
        default_factory=dict, compare=False
    )
    """(instance type, zone) -> the MachineDeployment that launches it."""
    skipped_objects: tuple[tuple[KubeObject, str], ...] = field(default=(), compare=False)
    """(MachineDeployment, reason) for each skipped MD, for the Kubernetes Events."""

    @property
    def content_hash(self) -> str:
        return _content_hash(self.node_class, self.instance_types, self.sources, self.skipped, self.notes)


def _content_hash(
    node_class: str,
    instance_types: Iterable[KubeObject],
    sources: Iterable[KubeObject],
    skipped: Iterable[SkippedSource],
    notes: Iterable[str],
) -> str:
    document = {
        "nodeClass": node_class,
        "instanceTypes": list(instance_types),
        "sources": list(sources),
        "skipped": [[s.kind, s.namespace, s.name, s.reason] for s in skipped],
        "notes": list(notes),
    }
    text = json.dumps(document, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def snapshot_content_hash(snapshot: CatalogSnapshot) -> str:
    """The :attr:`CatalogContent.content_hash` of the content a published snapshot carries."""
    return _content_hash(
        snapshot.node_class, snapshot.instance_types, snapshot.sources, snapshot.skipped, snapshot.notes
    )


class Offer(msgspec.Struct, frozen=True):
    """One (instance type, zone) a NodeClass's catalog offers, and the MachineDeployment that launches it."""

    instance_type: str
    zone: str | None
    namespace: str
    machine_deployment: str

    @property
    def key(self) -> MachineDeploymentKey:
        return MachineDeploymentKey(self.namespace, self.machine_deployment)


def offers_of(snapshot: CatalogSnapshot) -> tuple[Offer, ...]:
    """What a published catalog says each (instance type, zone) is launched by: the ``targets`` of the
    :class:`CatalogContent` it was built from, read back from its entries."""
    offers = []
    for entry in snapshot.instance_types:
        md = entry.get("machineDeployment") or {}
        offerings = entry.get("offerings") or []
        zone = offerings[0].get("zone") if offerings and isinstance(offerings[0], Mapping) else None
        if isinstance(md, Mapping) and md.get("name") and entry.get("name"):
            namespace = str(md.get("namespace") or "default")
            offers.append(Offer(str(entry["name"]), zone, namespace, str(md["name"])))
    return tuple(offers)


class NodeClassInvalid(ValueError):
    """A ClusterAPINodeClass the launcher cannot use; the message names it and the field."""


def node_class_selector(nodeclass: Mapping[str, Any]) -> LabelSelector | None:
    """``spec.scalableResourceSelector`` parsed; None when absent. Raises :class:`NodeClassInvalid`."""
    try:
        inputs = parse_objects([("nodeclass", 0, dict(nodeclass))])
    except InputError as err:
        raise NodeClassInvalid(str(err)) from None
    if not inputs.node_classes:
        name = (nodeclass.get("metadata") or {}).get("name")
        raise NodeClassInvalid(f"{NODECLASS_KIND} {name!r}: not a NodeClass")
    return inputs.node_classes[0].selector


def served_node_classes(nodeclasses: Iterable[Mapping[str, Any]]) -> dict[str, KubeObject]:
    """The ClusterAPINodeClasses (by name) among a ``NodeClassesSnapshot``'s objects."""
    out: dict[str, KubeObject] = {}
    for obj in nodeclasses:
        if obj.get("kind") == NODECLASS_KIND and (obj.get("metadata") or {}).get("name"):
            out[str(obj["metadata"]["name"])] = dict(obj)
    return out


def md_key(md: Mapping[str, Any]) -> MachineDeploymentKey:
    meta = md.get("metadata") or {}
    return MachineDeploymentKey(str(meta.get("namespace") or "default"), str(meta.get("name") or ""))


def member_machine_deployments(
    selector: LabelSelector | None, mds: Iterable[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """The MDs with the karpenter-member label that the selector (if any) matches, sorted by
    namespace/name."""
    members = []
    for md in mds:
        labels = {str(k): str(v) for k, v in ((md.get("metadata") or {}).get("labels") or {}).items()}
        if KARPENTER_MEMBER in labels and (selector is None or selector.matches(labels)):
            members.append(dict(md))
    return sorted(members, key=md_key)


def _exact_quantity(resource: str, amount: int) -> str:
    """A canonical amount as a quantity string that parses back to exactly the same integer."""
    if resource == CPU:
        return str(amount // 1000) if amount % 1000 == 0 else f"{amount}m"
    if resource in (MEMORY, EPHEMERAL_STORAGE):
        for suffix, factor in (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
            if amount >= factor and amount % factor == 0:
                return f"{amount // factor}{suffix}"
    return str(amount)


def catalog_entry(it: InstanceType, key: MachineDeploymentKey) -> KubeObject:
    """One instance type in the InstanceCatalog entry format, plus the Cluster API facts the scheduler
    uses."""
    return {
        "name": it.name,
        "capacity": {r: _exact_quantity(r, a) for r, a in sorted(it.capacity.items())},
        "overhead": {r: _exact_quantity(r, a) for r, a in sorted(it.overhead.items())},
        "labels": dict(sorted(it.labels.items())),
        "offerings": [
            {"zone": o.zone, "capacityType": o.capacity_type, "price": o.price, "available": o.available}
            for o in it.offerings
        ],
        "taints": [{"key": t.key, "value": t.value, "effect": t.effect} for t in it.taints],
        "priceEstimated": it.price_estimated,
        "maxNew": it.max_new,
        "source": it.source,
        "machineDeployment": {"namespace": key.namespace, "name": key.name},
    }


def catalog_source(md: Mapping[str, Any]) -> KubeObject:
    """An MD reduced to what decides its instance type (no status, resourceVersion, managedFields or the
    launcher's own bookkeeping annotations, which change with every launch)."""
    meta = md.get("metadata") or {}
    kept_meta = {k: meta[k] for k in ("name", "namespace", "uid", "labels") if k in meta}
    if "annotations" in meta:
        annotations = meta["annotations"] or {}
        kept_meta["annotations"] = {k: v for k, v in annotations.items() if k not in BOOKKEEPING_ANNOTATIONS}
    return {
        "apiVersion": md.get("apiVersion", "cluster.x-k8s.io/v1beta1"),
        "kind": "MachineDeployment",
        "metadata": kept_meta,
        "spec": md.get("spec") or {},
    }


def build_catalog(
    nodeclass: Mapping[str, Any],
    mds: Iterable[Mapping[str, Any]],
    *,
    flavors: Mapping[str, Flavor] | None = None,
    prices: Mapping[str, float] | None = None,
    notes: Iterable[str] = (),
) -> CatalogContent:
    """The catalog of ``nodeclass`` from all MachineDeployments seen. Raises :class:`NodeClassInvalid`.

    ``flavors``/``prices`` come from the NodeClass's OpenStack cloud (None: it names none, or it could not be
    read; the caller says why in ``notes``).
    """
    name = str((nodeclass.get("metadata") or {}).get("name") or "")
    if not name:
        raise NodeClassInvalid(f"{NODECLASS_KIND}: metadata.name is required")
    members = member_machine_deployments(node_class_selector(nodeclass), mds)
    all_notes = list(notes)
    if flavors is not None:
        members, enrich_notes = enrich_machine_deployments(members, dict(flavors), dict(prices or {}))
        all_notes.extend(enrich_notes)
    by_key = {md_key(md): md for md in members}
    types, skipped_objects = machine_deployment_types(members)
    skipped = [_skipped_source(s) for s in skipped_objects]
    skipped_mds: list[tuple[KubeObject, str]] = []
    for s in skipped_objects:
        namespace, _, md_name = s.name.partition("/")
        md = by_key.get(MachineDeploymentKey(namespace, md_name))
        if md is not None:
            skipped_mds.append((md, s.reason))
    entries: list[KubeObject] = []
    targets: dict[tuple[str, str | None], MachineDeploymentKey] = {}
    for mdt in types:
        key = MachineDeploymentKey(mdt.namespace, mdt.name)
        it = mdt.instance_type
        zone = it.offerings[0].zone if it.offerings else None
        first = targets.get((it.name, zone))
        if first is not None:
            reason = (
                f"offers instance type {it.name} in zone {zone or '(none)'} like MachineDeployment {first}, "
                "which comes first; the launcher could not tell which to scale"
            )
            skipped.append(SkippedSource("MachineDeployment", key.name, reason, key.namespace))
            skipped_mds.append((by_key[key], reason))
            continue
        targets[(it.name, zone)] = key
        entries.append(catalog_entry(it, key))
    return CatalogContent(
        node_class=name,
        instance_types=tuple(entries),
        sources=tuple(catalog_source(md) for md in members),
        skipped=tuple(skipped),
        notes=tuple(all_notes),
        targets=targets,
        skipped_objects=tuple(skipped_mds),
    )


def _skipped_source(s: SkippedObject) -> SkippedSource:
    namespace, _, name = s.name.partition("/")
    return SkippedSource(s.kind, name, f"MachineDeployment {s.name}: {s.reason}", namespace)


def catalog_snapshot(
    content: CatalogContent, *, producer: str, previous_id: str | None, decided_at: datetime | None = None
) -> CatalogSnapshot:
    """The event for ``content``; its id derives from the content hash and the previous snapshot's id."""
    kwargs: dict[str, Any] = {}
    if decided_at is not None:
        kwargs["decided_at"] = decided_at
    return make_event(
        CatalogSnapshot,
        producer=producer,
        key=(content.node_class, content.content_hash, previous_id or ""),
        correlation_id=f"catalog/{content.node_class}",
        provider=PROVIDER,
        node_class=content.node_class,
        instance_types=content.instance_types,
        sources=content.sources,
        skipped=content.skipped,
        notes=content.notes,
        **kwargs,
    )


def skipped_machine_deployment_event(
    md: Mapping[str, Any], reason: str, node_class: str, now: str
) -> KubeObject:
    """A Warning Event on a skipped MD, named from its uid and the reason (so a repeat is AlreadyExists)."""
    meta = md.get("metadata") or {}
    uid = str(meta.get("uid") or "")
    digest = derive_id(EVENT_COMPONENT, SKIPPED_EVENT_REASON, uid, meta.get("name"), reason)[:13].replace(
        "-", ""
    )
    namespace = str(meta.get("namespace") or "default")
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{meta.get('name')}.{digest}", "namespace": namespace},
        "involvedObject": {
            "apiVersion": md.get("apiVersion", "cluster.x-k8s.io/v1beta1"),
            "kind": "MachineDeployment",
            "name": meta.get("name"),
            "namespace": namespace,
            "uid": uid or None,
        },
        "reason": SKIPPED_EVENT_REASON,
        "message": f"left out of the catalog of {NODECLASS_KIND} {node_class}: {reason}",
        "type": "Warning",
        "count": 1,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "source": {"component": EVENT_COMPONENT},
        "reportingComponent": EVENT_COMPONENT,
    }
