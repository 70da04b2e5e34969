"""Publishing each ClusterAPINodeClass's catalog: the I/O around :func:`.catalog.build_catalog`.

Whenever the member MachineDeployments or the NodeClasses change, every ClusterAPINodeClass's catalog is built
again (OpenStack flavors read in a thread and cached for ``flavor_refresh`` seconds) and a ``CatalogSnapshot``
is published on ``tenon.catalog.<nodeclass>`` when its content differs from the last one published, and **at
least every ``resync`` seconds even when it does not**: the scheduler and the launcher's own decider read
catalogs from the log, and nothing a decision reads may age out of it. The id derives from the content and the
previous snapshot's id (:func:`.catalog.catalog_snapshot`), so a re-publication is a new event while two
leaders re-publishing the same step derive the same id.

What was published last comes from the launcher's rebuilt state at the start of a term, so a new leader
neither repeats an unchanged catalog nor misses a due one. A MachineDeployment the catalog skips gets a
Warning Event in the management cluster, once.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from proto import subjects
from tenon.runtime.eventlog import EventLog
from tenon.runtime.kube import EVENTS, Kube, KubeApiError
from tenon.runtime.kube.resources import SECRETS
from tenon.services.launcher_capi.catalog import (
    CatalogContent,
    NodeClassInvalid,
    build_catalog,
    catalog_snapshot,
    skipped_machine_deployment_event,
)
from tenon.services.launcher_capi.observations import PRODUCER
from tenon.services.launcher_capi.openstack import (
    Flavor,
    NodeClassError,
    OpenStackError,
    SecretKeyRef,
    load_flavors,
    openstack_settings_from_nodeclass,
)
from tenon.services.launcher_capi.state import CatalogRecord

log = logging.getLogger("tenon.launcher_capi")


@dataclass(frozen=True)
class Published:
    content_hash: str
    event_id: str
    at: datetime


class CatalogPublisher:
    def __init__(
        self,
        event_log: EventLog,
        management: Kube,
        *,
        secrets: Kube | None,
        nodeclasses: Callable[[], Mapping[str, dict[str, Any]]],
        deployments: Callable[[], list[dict[str, Any]]],
        published: Mapping[str, CatalogRecord],
        flavor_refresh: float,
        resync: float,
        settle: float = 0.05,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.event_log = event_log
        self.management = management
        self.secrets = secrets
        """Where the Secrets a NodeClass names are read (None: the management cluster)."""
        self.nodeclasses = nodeclasses
        self.deployments = deployments
        self.flavor_refresh = flavor_refresh
        self.resync = resync
        self.clock = clock
        self.published = {
            name: Published(record.content_hash, record.event_id, record.published_at)
            for name, record in published.items()
        }
        self.settle = settle
        self.count = 0
        self.wanted = asyncio.Event()
        self._flavors: dict[str, tuple[float, str, dict[str, Flavor] | None, str | None]] = {}
        self._events_sent: set[str] = set()

    async def run(self) -> None:
        """Refresh on every change, and at least every flavor refresh or resync interval, until cancelled."""
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(min(self.flavor_refresh, self.resync)):
                    await self.wanted.wait()
            # changes come in bursts (one replica per claim): one catalog for the burst, not one per change
            await asyncio.sleep(self.settle)
            self.wanted.clear()
            try:
                await self.refresh()
            except Exception as exc:  # the broker or the API server is away: try again shortly
                log.warning("catalog refresh failed", extra={"error": str(exc)})
                await asyncio.sleep(1.0)
                self.wanted.set()

    async def refresh(self) -> None:
        mds = self.deployments()
        for name, nodeclass in sorted(self.nodeclasses().items()):
            flavors, prices, notes = await self._openstack_inputs(nodeclass)
            try:
                content = build_catalog(nodeclass, mds, flavors=flavors, prices=prices, notes=notes)
            except NodeClassInvalid as err:
                log.warning("NodeClass unusable", extra={"nodeclass": name, "error": str(err)})
                continue
            await self._publish(content)
            for md, reason in content.skipped_objects:
                await self._record_skipped(md, reason, name)

    async def _publish(self, content: CatalogContent) -> None:
        now = datetime.now(UTC)
        last = self.published.get(content.node_class)
        fresh = last is not None and now - last.at < timedelta(seconds=self.resync)
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
                "skipped": len(content.skipped),
                "why": "changed" if last is None or last.content_hash != content.content_hash else "resync",
            },
        )

    async def _record_skipped(self, md: dict[str, Any], reason: str, nodeclass: str) -> None:
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        event = skipped_machine_deployment_event(md, reason, nodeclass, now)
        name = f"{event['metadata']['namespace']}/{event['metadata']['name']}"
        if name in self._events_sent:
            return
        try:
            await self.management.create(EVENTS, event)
        except KubeApiError as exc:
            if exc.status != 409:
                log.warning("event not recorded", extra={"machinedeployment": name, "error": str(exc)})
                return
        self._events_sent.add(name)

    async def _openstack_inputs(
        self, nodeclass: dict[str, Any]
    ) -> tuple[dict[str, Flavor] | None, dict[str, float] | None, list[str]]:
        name = str(nodeclass["metadata"]["name"])
        try:
            settings = openstack_settings_from_nodeclass(nodeclass)
        except NodeClassError as err:
            return None, None, [f"OpenStack settings ignored: {err}"]
        if settings is None:
            return None, None, []
        fingerprint = json.dumps((nodeclass.get("spec") or {}).get("openstack"), sort_keys=True, default=str)
        cached = self._flavors.get(name)
        now = self.clock()
        if cached is None or cached[1] != fingerprint or now - cached[0] >= self.flavor_refresh:
            try:
                flavors: dict[str, Flavor] | None = await load_flavors(settings, self._read_secret)
                problem = None
            except (NodeClassError, OpenStackError) as err:
                flavors, problem = None, str(err)
            cached = (now, fingerprint, flavors, problem)
            self._flavors[name] = cached
        _, _, flavors, problem = cached
        notes = [f"OpenStack flavors not read, capacity only from annotations: {problem}"] if problem else []
        return (flavors if flavors is not None else {}), dict(settings.prices), notes

    async def _read_secret(self, ref: SecretKeyRef) -> str | None:
        kube = self.secrets or self.management
        secret = await kube.get_or_none(SECRETS, ref.name, ref.namespace)
        if secret is None:
            return None
        if ref.key in (secret.get("stringData") or {}):
            return str(secret["stringData"][ref.key])
        raw = (secret.get("data") or {}).get(ref.key)
        return None if raw is None else base64.b64decode(raw).decode("utf-8")
