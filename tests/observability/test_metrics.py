"""tenon's metrics are exposed under Karpenter's names, types and labels (so Karpenter's dashboards and alerts
read them), plus tenon's own; and the exposition is what prometheus-client renders, not hand-written text."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tenon.runtime.observability import metrics

# (object, family name as exposed, Prometheus type, label names): Karpenter v1's where the meaning is the same
EXPECTED: list[tuple[Any, str, str, tuple[str, ...]]] = [
    (metrics.NODECLAIMS_CREATED, "karpenter_nodeclaims_created", "counter",
     ("reason", "nodepool", "min_values_relaxed")),
    (metrics.NODECLAIMS_TERMINATED, "karpenter_nodeclaims_terminated", "counter",
     ("nodepool", "capacity_type", "zone")),
    (metrics.NODES_CREATED, "karpenter_nodes_created", "counter", ("nodepool", "zone")),
    (metrics.NODES_TERMINATED, "karpenter_nodes_terminated", "counter", ("nodepool", "zone")),
    (metrics.PODS_STATE, "karpenter_pods_state", "gauge", metrics.POD_STATE_LABELS),
    (metrics.SCHEDULING_DURATION, "karpenter_scheduler_scheduling_duration_seconds", "histogram",
     ("controller",)),
    (metrics.SCHEDULING_QUEUE_DEPTH, "karpenter_scheduler_queue_depth", "gauge",
     ("controller", "scheduling_id")),
    (metrics.DISRUPTION_DECISIONS, "karpenter_voluntary_disruption_decisions", "counter",
     ("decision", "reason", "consolidation_type")),
    (metrics.CLOUDPROVIDER_DURATION, "karpenter_cloudprovider_duration_seconds", "histogram",
     ("controller", "method", "provider")),
    (metrics.NODEPOOL_COST, "karpenter_nodepools_cost_total", "gauge", ("nodepool",)),
    (metrics.CONSUMER_LAG, "tenon_eventlog_consumer_lag", "gauge", ("consumer",)),
    (metrics.DEADLETTERS, "tenon_deadletters", "counter", ("consumer",)),
    (metrics.DECISIONS, "tenon_decisions", "counter", ("service", "type")),
    (metrics.NODECLAIMS_BY_PHASE, "tenon_nodeclaims", "gauge", ("phase", "nodepool")),
]  # fmt: skip


def _record(metric: Any, kind: str, labels: dict[str, str]) -> None:
    if isinstance(metric, metrics.KeyedSeries):
        metric.set("test", [labels[name] for name in metric.labelnames])
        return
    child = metric.labels(**labels)
    if kind == "counter":
        child.inc()
    elif kind == "gauge":
        child.set(3)
    else:
        child.observe(0.2)


def _families() -> dict[str, Any]:
    return {f.name: f for f in text_string_to_metric_families(generate_latest(metrics.REGISTRY).decode())}


@pytest.mark.parametrize(("metric", "family", "kind", "labels"), EXPECTED, ids=[e[1] for e in EXPECTED])
def test_exposed_with_karpenters_name_type_and_labels(
    metric: Any, family: str, kind: str, labels: tuple[str, ...]
) -> None:
    values = {label: f"test-{label}" for label in labels}
    _record(metric, kind, values)
    found = _families()[family]
    assert found.type == kind
    sample_name = {"counter": f"{family}_total", "gauge": family, "histogram": f"{family}_count"}[kind]
    matching = [s for s in found.samples if s.name == sample_name and s.labels == values]
    assert len(matching) == 1, [s.name for s in found.samples]
    assert matching[0].value >= 1


def test_histograms_use_karpenters_duration_buckets() -> None:
    metrics.SCHEDULING_DURATION.labels(controller="provisioner").observe(0.12)
    buckets = [
        s.labels["le"]
        for s in _families()["karpenter_scheduler_scheduling_duration_seconds"].samples
        if s.name.endswith("_bucket") and s.labels.get("controller") == "provisioner"
    ]
    assert buckets[:4] == ["0.005", "0.01", "0.025", "0.05"]
    assert buckets[-2:] == ["600.0", "+Inf"]
    assert len(buckets) == len(metrics.DURATION_BUCKETS) + 1


def test_no_created_timestamps_and_the_process_collectors_are_there() -> None:
    metrics.NODES_CREATED.labels(nodepool="default", zone="z1").inc()
    families = _families()
    samples = [s.name for family in families.values() for s in family.samples]
    assert "karpenter_nodes_created_total" in samples
    assert not [name for name in samples if name.endswith("_created")]
    assert {"python_info", "process_resident_memory_bytes"} <= set(families)


def test_a_keyed_series_is_replaced_by_its_keys_next_labels_and_gone_with_none() -> None:
    gauge = metrics.KeyedSeries(
        "test_keyed_state", "a test gauge", ("name", "phase"), metrics.CollectorRegistry()
    )

    def exposed() -> list[tuple[dict[str, str], float]]:
        [family] = gauge.collect()
        return [(dict(s.labels), s.value) for s in family.samples]

    gauge.set("a", ("a", "Pending"))
    gauge.set("b", ("b", "Pending"))
    gauge.set("a", ("a", "Running"))
    assert sorted(exposed(), key=lambda e: e[0]["name"]) == [
        ({"name": "a", "phase": "Running"}, 1.0),
        ({"name": "b", "phase": "Pending"}, 1.0),
    ]
    gauge.set("b", None)
    gauge.set("never-set", None)
    assert exposed() == [({"name": "a", "phase": "Running"}, 1.0)]
    with pytest.raises(ValueError, match="test_keyed_state: 1 label values for 2 names"):
        gauge.set("c", ("c",))
