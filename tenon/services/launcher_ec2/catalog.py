"""The catalog of one EC2NodeClass: EC2's instance types as priced, allocatable instance types (pure).

Inputs are what EC2 answered (``DescribeInstanceTypes``, ``DescribeInstanceTypeOfferings``,
``DescribeSpotPriceHistory``), the on-demand price table shipped in ``data/``, the NodeClass as read and
resolved (:mod:`.nodeclass`), the offerings marked unavailable (insufficient capacity, spot interruptions)
and the memory registered nodes reported. The output is :class:`CatalogContent`, exactly what a
``CatalogSnapshot`` (provider ``aws``) carries: entries in the InstanceCatalog format the scheduler reads
(``name``, ``capacity``, ``overhead``, ``labels``, ``offerings``), plus ``sources`` holding the NodeClass's
resolution (subnets, security groups, AMIs), which is what the launcher launches from.

**Which types.** Hardware-virtualized types (Karpenter's filters: previous generations included) of an
architecture one of the NodeClass's AMIs runs (x86_64 -> amd64, arm64), offered in a zone of its subnets, with
an on-demand price in the table, and matching the launcher's ``TENON_EC2_INSTANCE_TYPES`` patterns when set.
What is left out is counted in the snapshot's ``notes``.

**Capacity and overhead** follow Karpenter's formulas (``pkg/providers/instancetype/types.go``):

* memory: ``SizeInMiB`` minus the VM overhead, ``ceil(SizeInMiB x vm_overhead)`` (7.5% by default), unless a
  node of that type already registered for this NodeClass: then the memory it reported (Karpenter's
  discovered-capacity cache);
* pods: the kubelet's ``maxPods`` if set, else the ENI limit ``(ENIs of the default card) x (IPv4 per ENI - 1)
  + 2`` (m5.large: 3 x 9 + 2 = 29); then at most ``podsPerCore x vCPU``;
* ephemeral-storage: the root volume (20Gi unless the NodeClass's block device mappings say otherwise);
* overhead = kube-reserved + system-reserved + eviction threshold. kube-reserved memory ``11 x ENI pods +
  255Mi``, CPU 6% of the first core, 1% of the second, 0.5% of cores 3-4, 0.25% of each core above 4,
  ephemeral-storage 1Gi (the NodeClass's ``kubelet.kubeReserved`` wins per resource); eviction: memory
  100Mi and 10% of the root volume unless ``kubelet.evictionHard`` sets ``memory.available`` /
  ``nodefs.available``.

**Prices.** On-demand from the shipped table. Spot from ``DescribeSpotPriceHistory`` when the answer is
usable: recent (within :data:`SPOT_PRICE_MAX_AGE`) and not below a thousandth of the on-demand price (moto
answers 0.00001 dated 2006 for everything). Otherwise the spot price is *estimated*:
:data:`SPOT_PRICE_MODEL` x the on-demand price; that offering says ``priceEstimated: true`` (and so does its
entry: some price of it is a guess), and a note says how many offerings were estimated and why.

**Availability.** An offering marked unavailable (``(capacity type, type, zone)`` until a moment) is
published with ``available: false`` until then, so the scheduler plans around it (Karpenter's 3-minute
unavailable-offerings cache).
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from proto.events import CatalogSnapshot, KubeObject, SkippedSource
from tenon.core.quantities import parse_quantity
from tenon.core.wellknown import ARCH, INSTANCE_TYPE, OS
from tenon.runtime.eventlog.factories import make_event
from tenon.services.launcher_ec2 import names
from tenon.services.launcher_ec2.nodeclass import NodeClassSpec, Resolution, kube_arch

MIB = 2**20
GIB = 2**30
VM_MEMORY_OVERHEAD = 0.075
SPOT_PRICE_MODEL = 0.35
"""Estimated spot price as a fraction of on-demand, where EC2 gives no usable spot price (documented in
docs/aws.md: spot in us-east-1 mostly trades at 30-40% of on-demand for current generations)."""
SPOT_PRICE_MAX_AGE = timedelta(days=7)
ARCHITECTURES = ("x86_64", "arm64")
ON_DEMAND = "on-demand"
SPOT = "spot"

Mark = tuple[str, str, str]
"""(capacity type, instance type, zone) of an offering."""


def category_family_generation(name: str) -> tuple[str, str, str, str]:
    """``m5d.large`` -> (``m``, ``m5d``, ``5``, ``large``), Karpenter's label values."""
    family, _, size = name.partition(".")
    match = re.match(r"^([a-z]+)(\d+)", family)
    category = match.group(1) if match else family
    generation = match.group(2) if match else ""
    return category, family, generation, size


def eni_limited_pods(described: Mapping[str, Any]) -> int:
    """``(ENIs of the default network card) x (IPv4 addresses per ENI - 1) + 2``."""
    network = described.get("NetworkInfo") or {}
    cards = network.get("NetworkCards") or []
    index = network.get("DefaultNetworkCardIndex") or 0
    enis = next(
        (c.get("MaximumNetworkInterfaces") for c in cards if c.get("NetworkCardIndex") == index),
        network.get("MaximumNetworkInterfaces"),
    )
    per_eni = network.get("Ipv4AddressesPerInterface") or 0
    if not enis or not per_eni:
        return 110
    return int(enis) * (int(per_eni) - 1) + 2


def kube_reserved_cpu_millis(vcpus: int) -> int:
    """6% of the first core, 1% of the second, 0.5% of cores 3-4, 0.25% of each core above 4 (millicores)."""
    millis = 0.0
    for core in range(1, vcpus + 1):
        millis += 60 if core == 1 else 10 if core == 2 else 5 if core <= 4 else 2.5
    return math.ceil(millis)


@dataclass(frozen=True)
class Inputs:
    """Everything a catalog is built from besides the NodeClass."""

    instance_types: Sequence[Mapping[str, Any]]
    zones_of_type: Mapping[str, Iterable[str]]
    on_demand_prices: Mapping[str, float]
    spot_prices: Mapping[tuple[str, str], tuple[float, datetime]] = field(default_factory=dict)
    unavailable: Mapping[Mark, datetime] = field(default_factory=dict)
    discovered_memory: Mapping[str, int] = field(default_factory=dict)
    """Instance type -> the memory capacity (bytes) a registered node of this NodeClass reported."""
    patterns: tuple[str, ...] = ()
    vm_overhead: float = VM_MEMORY_OVERHEAD
    now: datetime | None = None


@dataclass(frozen=True)
class CatalogContent:
    node_class: str
    instance_types: tuple[KubeObject, ...]
    sources: tuple[KubeObject, ...]
    skipped: tuple[SkippedSource, ...]
    notes: tuple[str, ...]

    @property
    def content_hash(self) -> str:
        return content_hash(self.node_class, self.instance_types, self.sources, self.skipped, self.notes)


def content_hash(
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
    return content_hash(
        snapshot.node_class, snapshot.instance_types, snapshot.sources, snapshot.skipped, snapshot.notes
    )


def _quantity_bytes(text: str | None, default: int, whole: int) -> int:
    """A memory/storage amount: a quantity, or a percentage of ``whole``."""
    if text is None:
        return default
    if text.endswith("%"):
        return math.ceil(whole * float(parse_quantity(text[:-1])) / 100)
    return math.ceil(parse_quantity(text))


def _millis(text: str) -> int:
    return math.ceil(parse_quantity(text) * 1000)


def overhead(spec: NodeClassSpec, vcpus: int, eni_pods: int) -> dict[str, int]:
    """kube-reserved + system-reserved + eviction threshold, in canonical units (millicores, bytes)."""
    root = spec.root_volume_bytes
    kube = spec.kubelet.kube_reserved
    reserved = {
        "cpu": _millis(kube["cpu"]) if "cpu" in kube else kube_reserved_cpu_millis(vcpus),
        "memory": _quantity_bytes(kube.get("memory"), (11 * eni_pods + 255) * MIB, 0),
        "ephemeral-storage": _quantity_bytes(kube.get("ephemeral-storage"), GIB, root),
    }
    for resource, text in spec.kubelet.system_reserved.items():
        if resource in reserved:
            amount = _millis(text) if resource == "cpu" else _quantity_bytes(text, 0, root)
            reserved[resource] += amount
    eviction = spec.kubelet.eviction_hard
    reserved["memory"] += _quantity_bytes(eviction.get("memory.available"), 100 * MIB, 0)
    reserved["ephemeral-storage"] += _quantity_bytes(
        eviction.get("nodefs.available"), math.ceil(root * 0.1), root
    )
    return reserved


def _gpus(described: Mapping[str, Any]) -> tuple[str, int, str, str, int] | None:
    """(resource, count, name, manufacturer, memory MiB) of the type's GPUs, if any."""
    gpus = (described.get("GpuInfo") or {}).get("Gpus") or []
    if not gpus:
        return None
    gpu = gpus[0]
    manufacturer = str(gpu.get("Manufacturer") or "")
    resource = {"NVIDIA": "nvidia.com/gpu", "AMD": "amd.com/gpu", "Habana": "habana.ai/gaudi"}.get(
        manufacturer
    )
    if resource is None:
        return None
    count = sum(int(g.get("Count") or 0) for g in gpus)
    memory = int((gpu.get("MemoryInfo") or {}).get("SizeInMiB") or 0)
    return resource, count, str(gpu.get("Name") or "").lower(), manufacturer.lower(), memory


def _labels(described: Mapping[str, Any], name: str, arch: str) -> dict[str, str]:
    category, family, generation, size = category_family_generation(name)
    processor = described.get("ProcessorInfo") or {}
    labels = {
        INSTANCE_TYPE: name,
        ARCH: kube_arch(arch),
        OS: "linux",
        names.LABEL_CATEGORY: category,
        names.LABEL_FAMILY: family,
        names.LABEL_GENERATION: generation,
        names.LABEL_SIZE: size,
        names.LABEL_CPU: str((described.get("VCpuInfo") or {}).get("DefaultVCpus") or 0),
        names.LABEL_MEMORY: str((described.get("MemoryInfo") or {}).get("SizeInMiB") or 0),
        names.LABEL_HYPERVISOR: str(described.get("Hypervisor") or ""),
        names.LABEL_ENCRYPTION_IN_TRANSIT: str(
            bool((described.get("NetworkInfo") or {}).get("EncryptionInTransitSupported"))
        ).lower(),
    }
    if processor.get("Manufacturer"):
        labels[names.LABEL_CPU_MANUFACTURER] = str(processor["Manufacturer"]).lower()
    storage = described.get("InstanceStorageInfo") or {}
    if storage.get("TotalSizeInGB"):
        labels[names.LABEL_LOCAL_NVME] = str(storage["TotalSizeInGB"])
    gpus = _gpus(described)
    if gpus is not None:
        _, count, gpu_name, manufacturer, memory = gpus
        labels.update(
            {
                names.LABEL_GPU_COUNT: str(count),
                names.LABEL_GPU_NAME: gpu_name,
                names.LABEL_GPU_MANUFACTURER: manufacturer,
                names.LABEL_GPU_MEMORY: str(memory),
            }
        )
    return {k: v for k, v in sorted(labels.items()) if v != ""}


def _architecture(described: Mapping[str, Any], runnable: set[str]) -> str | None:
    supported = (described.get("ProcessorInfo") or {}).get("SupportedArchitectures") or []
    return next((a for a in ARCHITECTURES if a in supported and a in runnable), None)


def _format(resource: str, amount: int) -> str:
    if resource == "cpu":
        return str(amount // 1000) if amount % 1000 == 0 else f"{amount}m"
    if resource in ("memory", "ephemeral-storage"):
        for suffix, factor in (("Gi", GIB), ("Mi", MIB), ("Ki", 1024)):
            if amount >= factor and amount % factor == 0:
                return f"{amount // factor}{suffix}"
    return str(amount)


@dataclass
class _Tally:
    no_price: list[str] = field(default_factory=list)
    no_zone: list[str] = field(default_factory=list)
    no_image: list[str] = field(default_factory=list)
    filtered: int = 0
    spot_estimated: int = 0
    spot_observed: int = 0
    unavailable: int = 0
    discovered: int = 0


class _Builder:
    def __init__(self, spec: NodeClassSpec, resolution: Resolution, inputs: Inputs) -> None:
        self.spec = spec
        self.inputs = inputs
        self.zones = {s.zone for s in resolution.subnets}
        self.runnable = {i.architecture for i in resolution.images}
        self.tally = _Tally()

    def wanted(self, described: Mapping[str, Any]) -> bool:
        name = str(described.get("InstanceType") or "")
        if not name:
            return False
        if "hvm" not in (described.get("SupportedVirtualizationTypes") or ["hvm"]):
            self.tally.filtered += 1
            return False
        patterns = self.inputs.patterns
        if patterns and not any(fnmatch.fnmatchcase(name, p) for p in patterns):
            self.tally.filtered += 1
            return False
        return True

    def entry(self, described: Mapping[str, Any]) -> KubeObject | None:
        name = str(described["InstanceType"])
        arch = _architecture(described, self.runnable)
        if arch is None:
            self.tally.no_image.append(name)
            return None
        price = self.inputs.on_demand_prices.get(name)
        if price is None:
            self.tally.no_price.append(name)
            return None
        zones = sorted(set(self.inputs.zones_of_type.get(name, ())) & self.zones)
        if not zones:
            self.tally.no_zone.append(name)
            return None
        capacity, reserved = self.capacity(described, name, arch)
        offerings, estimated = self.offerings(described, name, zones, price)
        return {
            "name": name,
            "capacity": {r: _format(r, a) for r, a in sorted(capacity.items())},
            "overhead": {r: _format(r, a) for r, a in sorted(reserved.items())},
            "labels": _labels(described, name, arch),
            "offerings": offerings,
            "priceEstimated": estimated,
        }

    def capacity(
        self, described: Mapping[str, Any], name: str, arch: str
    ) -> tuple[dict[str, int], dict[str, int]]:
        vcpus = int((described.get("VCpuInfo") or {}).get("DefaultVCpus") or 0)
        size_mib = int((described.get("MemoryInfo") or {}).get("SizeInMiB") or 0)
        memory = self.inputs.discovered_memory.get(name)
        if memory is not None:
            self.tally.discovered += 1
        else:
            memory = (size_mib - math.ceil(size_mib * self.inputs.vm_overhead)) * MIB
        eni = eni_limited_pods(described)
        pods = self.spec.kubelet.max_pods or eni
        if self.spec.kubelet.pods_per_core:
            pods = min(pods, self.spec.kubelet.pods_per_core * vcpus)
        capacity = {
            "cpu": vcpus * 1000,
            "memory": memory,
            "pods": pods,
            "ephemeral-storage": self.spec.root_volume_bytes,
        }
        gpus = _gpus(described)
        if gpus is not None and gpus[1] > 0:
            capacity[gpus[0]] = gpus[1]
        return capacity, overhead(self.spec, vcpus, eni)

    def offerings(
        self, described: Mapping[str, Any], name: str, zones: list[str], on_demand: float
    ) -> tuple[list[dict[str, Any]], bool]:
        classes = described.get("SupportedUsageClasses") or [ON_DEMAND]
        out: list[dict[str, Any]] = []
        estimated = False
        for capacity_type in (SPOT, ON_DEMAND):
            if capacity_type not in classes:
                continue
            for zone in zones:
                price, guessed = on_demand, False
                if capacity_type == SPOT:
                    price, guessed = self.spot_price(name, zone, on_demand)
                    estimated = estimated or guessed
                offering = {
                    "zone": zone,
                    "capacityType": capacity_type,
                    "price": price,
                    "available": self.available(capacity_type, name, zone),
                }
                if guessed:
                    offering["priceEstimated"] = True
                out.append(offering)
        return out, estimated

    def spot_price(self, name: str, zone: str, on_demand: float) -> tuple[float, bool]:
        seen = self.inputs.spot_prices.get((name, zone))
        now = self.inputs.now
        if (
            seen is not None
            and seen[0] >= on_demand / 1000
            and (now is None or now - seen[1] <= SPOT_PRICE_MAX_AGE)
        ):
            self.tally.spot_observed += 1
            return round(seen[0], 6), False
        self.tally.spot_estimated += 1
        return round(on_demand * SPOT_PRICE_MODEL, 6), True

    def available(self, capacity_type: str, name: str, zone: str) -> bool:
        until = self.inputs.unavailable.get((capacity_type, name, zone))
        if until is None or (self.inputs.now is not None and until <= self.inputs.now):
            return True
        self.tally.unavailable += 1
        return False

    def notes(self) -> list[str]:
        tally = self.tally
        notes = []
        for what, found in (
            ("no on-demand price in the shipped us-east-1 table", tally.no_price),
            ("not offered in a zone of the NodeClass's subnets", tally.no_zone),
            ("no AMI of the NodeClass runs their architecture", tally.no_image),
        ):
            if found:
                sample = ", ".join(sorted(found)[:5])
                notes.append(
                    f"{len(found)} instance types left out: {what} "
                    f"({sample}{', ...' if len(found) > 5 else ''})"
                )
        if tally.filtered:
            notes.append(
                f"{tally.filtered} instance types not hardware-virtualized or not matching the launcher's "
                "patterns"
            )
        if tally.spot_estimated:
            notes.append(
                f"{tally.spot_estimated} spot offerings priced by estimate ({SPOT_PRICE_MODEL:g} x "
                "on-demand): EC2 gave no usable spot price (none, older than 7 days, or below a thousandth "
                "of on-demand)"
            )
        if tally.unavailable:
            notes.append(
                f"{tally.unavailable} offerings marked unavailable (insufficient capacity or interruption)"
            )
        if tally.discovered:
            notes.append(f"{tally.discovered} instance types' memory as their registered nodes reported it")
        return notes


def resolution_source(spec: NodeClassSpec, resolution: Resolution) -> KubeObject:
    """The NodeClass's resolution as a catalog source: what the launcher launches from."""
    return {
        "apiVersion": f"{names.GROUP}/v1",
        "kind": "EC2NodeClassResolution",
        "metadata": {"name": spec.name, "generation": spec.generation},
        "status": resolution.to_status(),
        "subnetOfZone": {zone: s.id for zone, s in sorted(resolution.subnet_of_zone().items())},
        "imageOfArchitecture": {
            kube_arch(arch): image.id
            for arch in ARCHITECTURES
            if (image := resolution.image_for(arch)) is not None
        },
    }


def build_catalog(spec: NodeClassSpec, resolution: Resolution, inputs: Inputs) -> CatalogContent:
    """The catalog of a NodeClass that resolved (see the module docstring)."""
    builder = _Builder(spec, resolution, inputs)
    entries = []
    for described in sorted(inputs.instance_types, key=lambda d: str(d.get("InstanceType"))):
        if builder.wanted(described):
            entry = builder.entry(described)
            if entry is not None:
                entries.append(entry)
    return CatalogContent(
        node_class=spec.name,
        instance_types=tuple(entries),
        sources=(resolution_source(spec, resolution),),
        skipped=(),
        notes=tuple(builder.notes()),
    )


def unresolved_catalog(name: str, reasons: Iterable[str]) -> CatalogContent:
    """The (empty) catalog of a NodeClass that cannot launch, saying why (its conditions say it too)."""
    return CatalogContent(
        node_class=name,
        instance_types=(),
        sources=(),
        skipped=tuple(SkippedSource(names.NODECLASS_KIND, name, reason) for reason in reasons),
        notes=(),
    )


def catalog_snapshot(
    content: CatalogContent, *, producer: str, previous_id: str | None, decided_at: datetime | None = None
) -> CatalogSnapshot:
    """The event for ``content``; its id derives from the content hash and the previous snapshot's id."""
    kwargs: dict[str, Any] = {} if decided_at is None else {"decided_at": decided_at}
    return make_event(
        CatalogSnapshot,
        producer=producer,
        key=(content.node_class, content.content_hash, previous_id or ""),
        correlation_id=f"catalog/{content.node_class}",
        provider=names.PROVIDER,
        node_class=content.node_class,
        instance_types=content.instance_types,
        sources=content.sources,
        skipped=content.skipped,
        notes=content.notes,
        **kwargs,
    )


def spot_prices_of(history: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str], tuple[float, datetime]]:
    """The newest spot price per (type, zone) of a ``DescribeSpotPriceHistory`` answer."""
    newest: dict[tuple[str, str], tuple[float, datetime]] = {}
    for item in history:
        try:
            key = (str(item["InstanceType"]), str(item["AvailabilityZone"]))
            price, when = float(item["SpotPrice"]), item["Timestamp"]
        except (KeyError, TypeError, ValueError):
            continue
        if not isinstance(when, datetime) or not math.isfinite(price):
            continue
        if key not in newest or when > newest[key][1]:
            newest[key] = (price, when)
    return newest
