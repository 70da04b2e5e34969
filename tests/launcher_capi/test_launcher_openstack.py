"""A ClusterAPINodeClass naming an OpenStack cloud: Nova flavors fill the catalog, and claims launch from it.

The cloud is ``devtools.openstack_stub.OpenStackStub`` (a real Keystone v3 + Nova flavors server on a
loopback port, in its own thread); the launcher runs in this event loop against the sandbox.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from devtools.broker import free_port
from devtools.openstack_stub import OpenStackStub, nova_flavor
from devtools.sandbox.testing import running_sandbox
from proto.events import CatalogSnapshot, NodeClaimLaunched
from tenon.core.wellknown import CAPACITY_PREFIX, PRICE_PER_HOUR
from tenon.runtime.eventlog.jetstream import JetStreamEventLog
from tests.launcher_capi.launcher_support import (
    append_claim_event,
    catalog_events,
    claim_events,
    machine_deployment,
    md_rt,
    nodeclass,
    planned,
    publish_nodeclasses,
    replicas_of,
    running_launcher,
)
from tests.support.waiting import until

pytestmark = pytest.mark.filterwarnings("ignore::PendingDeprecationWarning:openstack")


@pytest.fixture(autouse=True)
def _loopback_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """requests honours proxy variables; with them unset every call stays on 127.0.0.1."""
    for name in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("OS_CLIENT_CONFIG_FILE", raising=False)


@pytest.fixture
def cloud() -> Iterator[OpenStackStub]:
    with OpenStackStub(
        flavors=[
            nova_flavor("c3-8", vcpus=4, ram_mib=8192, disk_gib=80),
            nova_flavor("c3-16", vcpus=8, ram_mib=16384, disk_gib=160),
        ]
    ) as stub:
        yield stub


def openstack_nodeclass(name: str, auth_url: str, stub: OpenStackStub) -> dict[str, Any]:
    obj = nodeclass(name)
    obj["spec"]["openstack"] = {
        "auth": {
            "authURL": auth_url,
            "username": stub.username,
            "password": stub.password,
            "projectName": stub.project_name,
        },
        "timeoutSeconds": 2,
        "prices": {"c3-8": "0.096", "c3-16": "0.192"},
    }
    return obj


def bare(name: str) -> dict[str, Any]:
    """An MD that states no capacity and no price: the flavor and the price table must supply them."""
    md = machine_deployment(name)
    for key in (CAPACITY_PREFIX + "cpu", CAPACITY_PREFIX + "memory", PRICE_PER_HOUR):
        del md["metadata"]["annotations"][key]
    return md


async def snapshot_of(event_log: JetStreamEventLog, node_class: str) -> CatalogSnapshot | None:
    events = [e for e in await catalog_events(event_log, node_class) if isinstance(e, CatalogSnapshot)]
    return events[-1] if events else None


async def test_flavors_fill_the_catalog_and_an_unreachable_cloud_is_noted(
    jetstream_log: JetStreamEventLog,
    cloud: OpenStackStub,
) -> None:
    async with running_sandbox() as sb:
        store = sb.management_store
        store.create(md_rt(store), bare("c3-8"))
        store.create(md_rt(store), bare("c3-16"))
        dead = f"http://127.0.0.1:{free_port()}/identity"
        await publish_nodeclasses(
            jetstream_log,
            openstack_nodeclass("default", cloud.auth_url, cloud),
            openstack_nodeclass("unreachable", dead, cloud),
        )
        async with running_launcher(jetstream_log, sb):
            snapshot = await until(
                lambda: snapshot_of(jetstream_log, "default"), what="the OpenStack catalog"
            )
            by_name = {t["name"]: t for t in snapshot.instance_types}
            assert sorted(by_name) == ["c3-16", "c3-8"]
            assert (
                by_name["c3-8"]["capacity"]["cpu"] == "4" and by_name["c3-8"]["capacity"]["memory"] == "8Gi"
            )
            assert by_name["c3-8"]["capacity"]["ephemeral-storage"] == "80Gi"
            assert by_name["c3-16"]["offerings"][0]["price"] == 0.192
            assert any("OpenStack flavor 'c3-8'" in note for note in snapshot.notes)

            broken = await until(lambda: snapshot_of(jetstream_log, "unreachable"), what="the other catalog")
            assert broken.instance_types == ()
            assert any("OpenStack flavors not read" in note and dead in note for note in broken.notes)
            assert {s.name for s in broken.skipped} == {"c3-8", "c3-16"}

            await append_claim_event(jetstream_log, planned("claim-os", "c3-16"))
            launched = await until(lambda: _launched(jetstream_log, "claim-os"), what="claim-os Launched")
            assert launched.instance_type == "c3-16" and replicas_of(store, "c3-16") == 1


async def _launched(event_log: JetStreamEventLog, claim: str) -> NodeClaimLaunched | None:
    return next((e for e in await claim_events(event_log, claim) if isinstance(e, NodeClaimLaunched)), None)
