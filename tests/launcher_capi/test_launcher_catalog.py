"""The catalog a ClusterAPINodeClass offers: pure building, then publication and Events against the
sandbox."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from devtools.sandbox.testing import running_sandbox
from proto.events import CatalogSnapshot
from tenon.core.catalog import instance_types_from_catalog
from tenon.core.wellknown import CAPACITY_PREFIX, PRICE_PER_HOUR
from tenon.runtime.eventlog.jetstream import JetStreamEventLog
from tenon.services.launcher_capi.catalog import (
    SKIPPED_EVENT_REASON,
    MachineDeploymentKey,
    NodeClassInvalid,
    build_catalog,
    catalog_snapshot,
)
from tenon.services.launcher_capi.openstack import Flavor
from tests.launcher_capi.launcher_support import (
    catalog_events,
    machine_deployment,
    md_rt,
    nodeclass,
    publish_nodeclasses,
    running_launcher,
)
from tests.support.waiting import until


def test_every_member_becomes_an_exact_instance_type_and_a_broken_one_is_skipped_by_name() -> None:
    broken = machine_deployment("c3-4", annotations={CAPACITY_PREFIX + "cpu": "two"})
    outsider = machine_deployment("other")
    outsider["metadata"]["labels"]["cluster.x-k8s.io/cluster-name"] = "another-cluster"
    big = machine_deployment(
        "c3-16", replicas=3, max_size=5, annotations={CAPACITY_PREFIX + "memory": "15.5Gi"}
    )
    content = build_catalog(nodeclass(), [broken, machine_deployment("c3-8"), big, outsider])

    assert [t["name"] for t in content.instance_types] == ["c3-16", "c3-8"]
    assert [(s.namespace, s.name) for s in content.skipped] == [("default", "c3-4")]
    assert "MachineDeployment default/c3-4" in content.skipped[0].reason
    assert CAPACITY_PREFIX + "cpu" in content.skipped[0].reason
    assert [md["metadata"]["name"] for md, _ in content.skipped_objects] == ["c3-4"]
    assert content.targets == {
        ("c3-16", "zone-a"): MachineDeploymentKey("default", "c3-16"),
        ("c3-8", "zone-a"): MachineDeploymentKey("default", "c3-8"),
    }
    entry = content.instance_types[0]
    assert entry["maxNew"] == 2
    assert entry["offerings"] == [
        {"zone": "zone-a", "capacityType": "on-demand", "price": 0.192, "available": True}
    ]
    assert entry["machineDeployment"] == {"namespace": "default", "name": "c3-16"}
    # the entries are InstanceCatalog entries: the scheduler's parser reads them back to the same numbers
    parsed = instance_types_from_catalog(
        {"metadata": {"name": "x"}, "spec": {"instanceTypes": list(content.instance_types)}}
    )
    assert parsed[0].capacity["memory"] == int(15.5 * 2**30)
    assert parsed[0].capacity["cpu"] == 8000 and parsed[0].capacity["pods"] == 110
    assert [s["metadata"]["name"] for s in content.sources] == ["c3-16", "c3-4", "c3-8"]


def test_content_hash_follows_prices_and_replicas_but_not_status_or_launch_records() -> None:
    md = machine_deployment("c3-8", replicas=1, max_size=4)
    base = build_catalog(nodeclass(), [md]).content_hash
    with_status = copy.deepcopy(md)
    with_status["status"] = {"replicas": 1, "readyReplicas": 1}
    with_status["metadata"]["resourceVersion"] = "999"
    with_status["metadata"]["annotations"]["tenon.sh/scaled-up-for"] = "claim-a"  # the launcher's own record
    assert build_catalog(nodeclass(), [with_status]).content_hash == base
    repriced = copy.deepcopy(md)
    repriced["metadata"]["annotations"][PRICE_PER_HOUR] = "0.2"
    assert build_catalog(nodeclass(), [repriced]).content_hash != base
    grown = copy.deepcopy(md)
    grown["spec"]["replicas"] = 4
    content = build_catalog(nodeclass(), [grown])
    assert content.content_hash != base
    assert content.instance_types[0]["maxNew"] == 0
    assert content.instance_types[0]["offerings"][0]["available"] is False


def test_snapshot_ids_are_deterministic_but_a_return_to_old_content_gets_a_new_id() -> None:
    a = build_catalog(nodeclass(), [machine_deployment("c3-8")])
    b = build_catalog(nodeclass(), [machine_deployment("c3-8", annotations={PRICE_PER_HOUR: "0.5"})])
    first = catalog_snapshot(a, producer="launcher-capi", previous_id=None)
    assert catalog_snapshot(a, producer="launcher-capi", previous_id=None).id == first.id
    second = catalog_snapshot(b, producer="launcher-capi", previous_id=first.id)
    again = catalog_snapshot(a, producer="launcher-capi", previous_id=second.id)
    assert len({first.id, second.id, again.id}) == 3
    assert again.instance_types == first.instance_types and again.provider == "cluster-api"


def test_two_deployments_offering_the_same_type_and_zone_are_ambiguous() -> None:
    twin = machine_deployment(
        "c3-8-b", annotations={CAPACITY_PREFIX + "labels": "node.kubernetes.io/instance-type=c3-8"}
    )
    content = build_catalog(nodeclass(), [machine_deployment("c3-8"), twin])
    assert [t["name"] for t in content.instance_types] == ["c3-8"]
    assert content.skipped[0].name == "c3-8-b"
    assert "like MachineDeployment default/c3-8" in content.skipped[0].reason


def test_openstack_flavors_fill_missing_capacity_and_a_bad_selector_names_the_field() -> None:
    bare = machine_deployment("c3-8")
    for key in (CAPACITY_PREFIX + "cpu", CAPACITY_PREFIX + "memory", PRICE_PER_HOUR):
        del bare["metadata"]["annotations"][key]
    assert build_catalog(nodeclass(), [bare]).instance_types == ()
    content = build_catalog(
        nodeclass(), [bare], flavors={"c3-8": Flavor("c3-8", 4, 8192, 80)}, prices={"c3-8": 0.096}
    )
    entry = content.instance_types[0]
    assert entry["capacity"]["cpu"] == "4" and entry["capacity"]["memory"] == "8Gi"
    assert entry["offerings"][0]["price"] == 0.096 and entry["priceEstimated"] is False
    assert any("from OpenStack flavor 'c3-8'" in note for note in content.notes)

    broken = nodeclass()
    broken["spec"]["scalableResourceSelector"] = {"matchLabels": ["not", "a", "map"]}
    with pytest.raises(NodeClassInvalid, match=r"spec\.scalableResourceSelector\.matchLabels"):
        build_catalog(broken, [bare])


async def _snapshots(event_log: JetStreamEventLog) -> list[CatalogSnapshot]:
    return [e for e in await catalog_events(event_log) if isinstance(e, CatalogSnapshot)]


async def test_published_at_start_and_on_price_change_with_an_event_on_the_broken_deployment(
    jetstream_log: JetStreamEventLog,
) -> None:
    async with running_sandbox() as sb:
        store = sb.management_store
        store.create(
            md_rt(store), machine_deployment("c3-4", annotations={CAPACITY_PREFIX + "memory": "lots"})
        )
        store.create(md_rt(store), machine_deployment("c3-8"))
        store.create(md_rt(store), machine_deployment("c3-16"))
        await publish_nodeclasses(jetstream_log, nodeclass())
        async with running_launcher(jetstream_log, sb):
            first = (await until(lambda: _snapshots(jetstream_log), what="a catalog"))[0]
            assert sorted(t["name"] for t in first.instance_types) == ["c3-16", "c3-8"]
            assert [s.name for s in first.skipped] == ["c3-4"] and "memory" in first.skipped[0].reason

            def skip_events() -> list[dict[str, Any]]:
                items = store.list(store.resource("v1", "Event"), "default")[0]
                return [e for e in items if e.get("reason") == SKIPPED_EVENT_REASON]

            events = await until(skip_events, what="a Warning Event on c3-4")
            assert len(events) == 1
            assert events[0]["involvedObject"]["kind"] == "MachineDeployment"
            assert events[0]["involvedObject"]["name"] == "c3-4"
            assert events[0]["type"] == "Warning" and CAPACITY_PREFIX + "memory" in events[0]["message"]

            md = store.get(md_rt(store), "c3-8", "default")
            md["metadata"]["annotations"][PRICE_PER_HOUR] = "0.08"
            store.update(md_rt(store), md)
            snapshots = await until(lambda: _len_at_least(jetstream_log, 2), what="a second catalog")
            prices = {t["name"]: t["offerings"][0]["price"] for t in snapshots[-1].instance_types}
            assert prices == {"c3-8": 0.08, "c3-16": 0.192}
            assert len(skip_events()) == 1


async def _len_at_least(event_log: JetStreamEventLog, count: int) -> list[CatalogSnapshot] | None:
    snapshots = await _snapshots(event_log)
    return snapshots if len(snapshots) >= count else None


async def test_an_unchanged_catalog_is_published_again_well_inside_the_retention(
    jetstream_log: JetStreamEventLog,
) -> None:
    async with running_sandbox() as sb:
        store = sb.management_store
        store.create(md_rt(store), machine_deployment("c3-8"))
        await publish_nodeclasses(jetstream_log, nodeclass())
        async with running_launcher(jetstream_log, sb, resync=1.0):
            first = (await until(lambda: _snapshots(jetstream_log), what="a catalog"))[0]
            again = (await until(lambda: _len_at_least(jetstream_log, 2), what="a re-published catalog"))[1]
    # the same content, as a new event (its id follows the previous one), a resync interval later
    assert again.instance_types == first.instance_types and again.sources == first.sources
    assert again.id != first.id and (again.decided_at - first.decided_at).total_seconds() >= 1.0
