"""Publishing each EC2NodeClass's catalog and status: the I/O around :func:`.catalog.build_catalog`.

On a change of the NodeClasses (the pod-watcher's snapshot), of the offerings marked unavailable (a fleet
refused, a spot instance interrupted), when such a mark runs out, and at least every ``refresh`` seconds,
every EC2NodeClass is read (:func:`.nodeclass.read_nodeclass`), resolved against EC2 (subnets, security
groups, AMIs, instance profile), given its launch templates, and its catalog built and published as a
``CatalogSnapshot`` when its content differs from the last one published, and at least every ``resync``
seconds even when it does not (nothing a decision reads may age out of the log). Instance types, their zones
and spot prices are read again every ``types_refresh`` seconds (Karpenter: 12 hours).

Its ``status`` in the workload cluster (subnets, security groups, AMIs, instance profile and the conditions
``SubnetsReady``, ``SecurityGroupsReady``, ``AMIsReady``, ``InstanceProfileReady``, ``ValidationSucceeded``,
``Ready``) is written when it changes, so ``kubectl get ec2nodeclass`` says why a NodeClass cannot launch.

**Size.** A catalog must fit one message of the broker: when it does not, the types with the highest
price per vCPU are left out until it fits, and a note says how many and how to narrow the catalog
(``TENON_EC2_INSTANCE_TYPES``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec

from proto import subjects
from tenon.runtime.eventlog import EventLog
from tenon.runtime.kube import NODES, Kube, KubeApiError
from tenon.runtime.kube.resources import EC2NODECLASSES
from tenon.runtime.observability import recording
from tenon.services.launcher_ec2 import names
from tenon.services.launcher_ec2.aws import Aws, AwsError
from tenon.services.launcher_ec2.catalog import (
    ARCHITECTURES,
    CatalogContent,
    Inputs,
    build_catalog,
    catalog_snapshot,
    spot_prices_of,
    unresolved_catalog,
)
from tenon.services.launcher_ec2.launch_templates import ClusterInfo, launch_template
from tenon.services.launcher_ec2.nodeclass import (
    NodeClassInvalid,
    NodeClassSpec,
    Resolution,
    conditions,
    kube_arch,
    read_nodeclass,
    resolve,
    unusable,
)
from tenon.services.launcher_ec2.observations import PRODUCER, instance_of_provider_id
from tenon.services.launcher_ec2.state import Ec2State

log = logging.getLogger("tenon.launcher_ec2")

MESSAGE_HEADROOM = 64 * 1024
"""Bytes kept free in a catalog message for the envelope and headers."""


@dataclass
class Published:
    content_hash: str
    event_id: str
    at: datetime


@dataclass
class Described:
    """What EC2 offers (read every ``types_refresh``)."""

    at: float = 0.0
    instance_types: list[dict[str, Any]] = field(default_factory=list)
    zones: dict[str, set[str]] = field(default_factory=dict)
    spot: dict[tuple[str, str], tuple[float, datetime]] = field(default_factory=dict)


@dataclass
class PublisherSettings:
    cluster: ClusterInfo
    prices: Mapping[str, float]
    patterns: tuple[str, ...] = ()
    vm_overhead: float = 0.075
    refresh: float = 60.0
    types_refresh: float = 12 * 3600.0
    resync: float = 86400.0


class CatalogPublisher:
    def __init__(
        self,
        event_log: EventLog,
        aws: Aws,
        workload: Kube | None,
        state: Callable[[], Ec2State],
        settings: PublisherSettings,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.event_log = event_log
        self.aws = aws
        self.workload = workload
        self.state = state
        self.settings = settings
        self.clock = clock
        self.wanted = asyncio.Event()
        self.described = Described()
        self.published: dict[str, Published] = {
            name: Published(r.content_hash, r.event_id, r.published_at)
            for name, r in state().catalogs.items()
        }
        self.templates: dict[str, dict[str, Any]] = {}
        """Launch template name -> its data (what ``Ec2FleetRequested`` names; created on first use)."""
        self.statuses: dict[str, dict[str, Any]] = {}
        self.count = 0

    async def run(self) -> None:
        while True:
            wait = min(self.settings.refresh, self._until_next_expiry())
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(0.05, wait)):
                    await self.wanted.wait()
            await asyncio.sleep(0.05)  # a burst of changes makes one catalog
            self.wanted.clear()
            try:
                await self.refresh()
            except Exception as exc:  # AWS or the broker is away: try again shortly
                log.warning("catalog refresh failed", extra={"error": str(exc)})
                await asyncio.sleep(1.0)
                self.wanted.set()

    def _until_next_expiry(self) -> float:
        now = datetime.now(UTC)
        ahead = [(until - now).total_seconds() for until in self.state().active_marks(now).values()]
        return min(ahead, default=self.settings.refresh) + 0.01

    async def refresh(self) -> None:
        nodeclasses = dict(self.state().nodeclasses)
        if not nodeclasses:
            return
        if (
            not self.described.instance_types
            or self.clock() - self.described.at >= self.settings.types_refresh
        ):
            self.described = await asyncio.to_thread(self._describe)
        memory = await self._discovered_memory()
        for name, obj in sorted(nodeclasses.items()):
            content, resolution, generation = await self._catalog_of(name, obj, memory)
            await self._publish(content)
            await self._write_status(name, obj, resolution, generation)

    def _describe(self) -> Described:
        types = self.aws.instance_types(self.settings.patterns)
        zones = self.aws.zones_of_types()
        try:
            spot = spot_prices_of(self.aws.spot_price_history([str(t["InstanceType"]) for t in types]))
        except AwsError as exc:
            log.warning("spot prices not read: spot offerings are estimated", extra={"error": str(exc)})
            spot = {}
        log.info("instance types read", extra={"types": len(types), "spot_prices": len(spot)})
        return Described(self.clock(), types, zones, spot)

    async def _catalog_of(
        self, name: str, obj: dict[str, Any], memory: dict[str, dict[str, int]]
    ) -> tuple[CatalogContent, Resolution, int]:
        try:
            spec = read_nodeclass(obj)
        except NodeClassInvalid as err:
            log.warning("EC2NodeClass unusable", extra={"nodeclass": name, "error": str(err)})
            return unresolved_catalog(name, [str(err)]), unusable(str(err)), _generation(obj)
        resolution = await asyncio.to_thread(self._resolve, spec)
        if not resolution.ready:
            reasons = [f"{kind}: {message}" for kind, (_, message) in sorted(resolution.problems.items())]
            return unresolved_catalog(name, reasons), resolution, spec.generation
        inputs = Inputs(
            self.described.instance_types,
            self.described.zones,
            self.settings.prices,
            self.described.spot,
            self.state().active_marks(datetime.now(UTC)),
            memory.get(name, {}),
            self.settings.patterns,
            self.settings.vm_overhead,
            datetime.now(UTC),
        )
        content = build_catalog(spec, resolution, inputs)
        content = self._with_templates(content, spec, resolution)
        return self._fitted(content), resolution, spec.generation

    def _resolve(self, spec: NodeClassSpec) -> Resolution:
        images, image_problems = self.aws.images(spec)
        profile, profile_problem = self.aws.instance_profile(spec, self.settings.cluster.name)
        return resolve(
            spec,
            subnets=self.aws.subnets(),
            security_groups=self.aws.security_groups(),
            images=images,
            image_problems=image_problems,
            instance_profile=profile,
            instance_profile_problem=profile_problem,
        )

    def _with_templates(
        self, content: CatalogContent, spec: NodeClassSpec, resolution: Resolution
    ) -> CatalogContent:
        templates = {}
        for arch in ARCHITECTURES:
            image = resolution.image_for(arch)
            if image is None:
                continue
            template = launch_template(spec, resolution, image, self.settings.cluster)
            self.templates[template["name"]] = template["data"]
            templates[kube_arch(arch)] = {"name": template["name"], "imageId": image.id}
        sources = tuple({**s, "launchTemplates": templates} for s in content.sources)
        return replace(content, sources=sources)

    def _fitted(self, content: CatalogContent) -> CatalogContent:
        limit = self.event_log.max_message_size - MESSAGE_HEADROOM
        size = len(msgspec.json.encode(content.instance_types)) + len(json.dumps(content.sources))
        if size <= limit:
            return content

        def per_vcpu(entry: Mapping[str, Any]) -> float:
            prices = [float(o.get("price") or 0) for o in entry.get("offerings") or []]
            cpu = float(str((entry.get("capacity") or {}).get("cpu") or "1").rstrip("m") or 1)
            return (min(prices) if prices else 0.0) / max(cpu, 1.0)

        ordered = sorted(content.instance_types, key=per_vcpu)
        kept: list[dict[str, Any]] = []
        used = len(json.dumps(content.sources)) + 1024
        for entry in ordered:
            entry_size = len(msgspec.json.encode(entry)) + 1
            if used + entry_size > limit:
                break
            kept.append(dict(entry))
            used += entry_size
        dropped = len(content.instance_types) - len(kept)
        note = (
            f"{dropped} instance types (the highest price per vCPU) left out: the catalog must fit one "
            "message of "
            f"{self.event_log.max_message_size} bytes; narrow it with TENON_EC2_INSTANCE_TYPES"
        )
        log.warning(
            "catalog trimmed to fit a message", extra={"nodeclass": content.node_class, "dropped": dropped}
        )
        kept.sort(key=lambda e: str(e.get("name")))
        return replace(content, instance_types=tuple(kept), notes=(*content.notes, note))

    async def _publish(self, content: CatalogContent) -> None:
        recording.offerings(content.instance_types)
        now = datetime.now(UTC)
        last = self.published.get(content.node_class)
        fresh = last is not None and now - last.at < timedelta(seconds=self.settings.resync)
        if last is not None and last.content_hash == content.content_hash and fresh:
            return
        event = catalog_snapshot(content, producer=PRODUCER, previous_id=last.event_id if last else None)
        await self.event_log.publish(subjects.catalog(content.node_class), event)
        self.published[content.node_class] = Published(content.content_hash, event.id, event.decided_at)
        self.count += 1
        log.info(
            "catalog published",
            extra={
                "nodeclass": content.node_class,
                "types": len(content.instance_types),
                "skipped": [s.reason for s in content.skipped],
                "why": "changed" if last is None or last.content_hash != content.content_hash else "resync",
            },
        )

    async def _discovered_memory(self) -> dict[str, dict[str, int]]:
        """NodeClass -> instance type -> the memory capacity its registered nodes report (bytes)."""
        if self.workload is None:
            return {}
        try:
            nodes, _ = await self.workload.list(NODES)
        except (KubeApiError, OSError, TimeoutError) as exc:
            log.warning("nodes not read: memory from the formula", extra={"error": str(exc)})
            return {}
        from tenon.core.quantities import parse_quantity

        state = self.state()
        found: dict[str, dict[str, int]] = {}
        for node in nodes:
            instance = state.instances.get(
                instance_of_provider_id(str((node.get("spec") or {}).get("providerID") or "")) or ""
            )
            memory = ((node.get("status") or {}).get("capacity") or {}).get("memory")
            if instance is None or not instance.node_class or memory is None:
                continue
            with contextlib.suppress(ValueError):
                found.setdefault(instance.node_class, {})[instance.instance_type] = int(
                    parse_quantity(memory)
                )
        return found

    async def _write_status(
        self, name: str, obj: dict[str, Any], resolution: Resolution, generation: int
    ) -> None:
        if self.workload is None:
            return
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        previous = (
            ((obj.get("status") or {}).get("conditions"))
            or (self.statuses.get(name) or {}).get("conditions")
            or []
        )
        status = {**resolution.to_status(), "conditions": conditions(resolution, generation, now, previous)}
        if _same_status(self.statuses.get(name), status):
            return
        try:
            await self.workload.patch(EC2NODECLASSES, name, {"status": status}, subresource="status")
        except KubeApiError as exc:
            if exc.status == 404:
                with contextlib.suppress(KubeApiError):
                    await self.workload.patch(EC2NODECLASSES, name, {"status": status})
            else:
                log.warning("EC2NodeClass status not written", extra={"nodeclass": name, "error": str(exc)})
                return
        except (OSError, TimeoutError) as exc:
            log.warning("EC2NodeClass status not written", extra={"nodeclass": name, "error": str(exc)})
            return
        self.statuses[name] = status
        ready: dict[str, Any] = next((c for c in status["conditions"] if c["type"] == names.READY), {})
        log.info(
            "EC2NodeClass status written",
            extra={"nodeclass": name, "ready": ready.get("status"), "why": ready.get("message") or None},
        )


def _same_status(before: Mapping[str, Any] | None, after: Mapping[str, Any]) -> bool:
    if before is None:
        return False

    def stripped(status: Mapping[str, Any]) -> str:
        conds = [
            {k: v for k, v in c.items() if k != "lastTransitionTime"} for c in status.get("conditions") or []
        ]
        return json.dumps({**status, "conditions": conds}, sort_keys=True, default=str)

    return stripped(before) == stripped(after)


def _generation(obj: Mapping[str, Any]) -> int:
    value = (obj.get("metadata") or {}).get("generation")
    return value if isinstance(value, int) else 1
