"""tenon's Prometheus metrics: Karpenter's names and labels where the meaning is the same, ``tenon_*`` else.

Every metric lives in :data:`REGISTRY` (not prometheus-client's global one, so nothing else in the process
leaks into ``/metrics``), which also carries the process and platform collectors. A service records what it
decides through these objects, e.g. ``NODECLAIMS_CREATED.labels(reason="provisioned", nodepool="default",
min_values_relaxed="false").inc()``; :class:`tenon.runtime.observability.Observability` serves them.

Names, types, labels and buckets follow Karpenter v1 (``kubernetes-sigs/karpenter`` ``pkg/metrics``,
``pkg/controllers/**/metrics.go``; ``aws/karpenter-provider-aws`` for the interruption and offering metrics),
so Karpenter's dashboards and alerts read tenon unchanged.

Who records what: the decider runtime, as decisions are recorded (:mod:`.recording`): NodeClaims created,
disrupted and terminated, Nodes created and terminated (each once, by the service that owns the step), the
provisioning simulation's duration, unschedulable pods, disruption commands confirmed, decisions and their
duration; the scheduler alone the claims by phase and each pool's cost; consumers their lag and dead letters;
every AWS call the cloud provider duration and errors (``tenon.runtime.aws``); the interruption handler its
messages; the pod-watcher ``karpenter_pods_state``, the queue depth (the pods waiting to be scheduled) and the
pools' usage (their Nodes' capacity) and limits; launcher-ec2 the offering gauges, from each catalog it
builds.
Declared for Karpenter's dashboards but **not recorded yet** (they stay empty):
``karpenter_voluntary_disruption_eligible_nodes`` and ``_decision_evaluation_duration_seconds``,
``karpenter_nodepools_allowed_disruptions``, and on Cluster API the offering gauges and the cloud provider
metrics of its calls.

Karpenter v1 renamed the scheduling queue depth to ``karpenter_scheduler_queue_depth`` (it was
``karpenter_provisioner_scheduling_queue_depth`` before v1); tenon uses the v1 name. Counters are declared
with their ``_total`` suffix as exposed.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator, Sequence

import prometheus_client
from prometheus_client import (
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector


class KeyedSeries(Collector):
    """A gauge with at most one series per key (a pod), of value 1, kept as plain label values and rendered
    at scrape time. prometheus-client's Gauge made a child object per label set and validated the labels on
    every ``labels()`` call: 29 us per change of a 13-label series, a tenth of the pod-watcher's time while
    1,000 pods started; a dict write here. A scrape renders every series (Karpenter's collector does too)."""

    def __init__(
        self, name: str, documentation: str, labelnames: Sequence[str], registry: CollectorRegistry
    ) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self._series: dict[Hashable, tuple[str, ...]] = {}
        registry.register(self)

    def set(self, key: Hashable, labels: Sequence[str] | None) -> None:
        """``key``'s series is now ``labels`` (one value per label name), or gone (None)."""
        if labels is None:
            self._series.pop(key, None)
            return
        if len(labels) != len(self.labelnames):
            raise ValueError(f"{self.name}: {len(labels)} label values for {len(self.labelnames)} names")
        self._series[key] = tuple(labels)

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(self.name, self.documentation, labels=self.labelnames)
        for labels in list(self._series.values()):
            family.add_metric(labels, 1.0)
        yield family


# The ``*_created`` series (a counter's creation timestamp) only double the exposition; Karpenter has none.
prometheus_client.disable_created_metrics()

REGISTRY = CollectorRegistry()
"""Every tenon metric, plus the process and platform collectors."""
for _collector in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
    REGISTRY.register(_collector)

DURATION_BUCKETS = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0,
    1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5, 6, 7, 8, 9, 10, 15, 20, 25, 30, 40, 50, 60, 120, 150,
    300, 450, 600,
)  # fmt: skip
"""Karpenter's ``metrics.DurationBuckets()``: scheduling and disruption durations."""
DEFAULT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
"""client_golang's ``DefBuckets``, which Karpenter's cloud provider histogram uses."""

# --- NodeClaims and Nodes (Karpenter pkg/metrics/metrics.go) ------------------------------------------------
NODECLAIMS_CREATED = Counter(
    "karpenter_nodeclaims_created_total",
    "Number of nodeclaims created in total. Labeled by reason the nodeclaim was created, the owning "
    "nodepool, and if min values was relaxed for this nodeclaim.",
    ["reason", "nodepool", "min_values_relaxed"],
    registry=REGISTRY,
)
NODECLAIMS_TERMINATED = Counter(
    "karpenter_nodeclaims_terminated_total",
    "Number of nodeclaims terminated in total. Labeled by the owning nodepool, capacity type, and zone.",
    ["nodepool", "capacity_type", "zone"],
    registry=REGISTRY,
)
NODECLAIMS_DISRUPTED = Counter(
    "karpenter_nodeclaims_disrupted_total",
    "Number of nodeclaims disrupted in total. Labeled by reason the nodeclaim was disrupted, the owning "
    "nodepool, the capacity type, the consolidation policy, and the termination mode.",
    ["reason", "nodepool", "capacity_type", "consolidation_policy", "termination_mode"],
    registry=REGISTRY,
)
NODES_CREATED = Counter(
    "karpenter_nodes_created_total",
    "Number of nodes created in total. Labeled by owning nodepool and zone.",
    ["nodepool", "zone"],
    registry=REGISTRY,
)
NODES_TERMINATED = Counter(
    "karpenter_nodes_terminated_total",
    "Number of nodes terminated in total. Labeled by owning nodepool and zone.",
    ["nodepool", "zone"],
    registry=REGISTRY,
)

# --- Pods (Karpenter pkg/controllers/metrics/pod) -----------------------------------------------------------
POD_STATE_LABELS = (
    "name",
    "namespace",
    "owner",
    "node",
    "scheduled",
    "nodepool",
    "zone",
    "arch",
    "capacity_type",
    "instance_type",
    "phase",
    "ready",
    "managed",
)
PODS_STATE = KeyedSeries(
    "karpenter_pods_state",
    "Pod state is the current state of pods. Labeled by the pod name, namespace, owner, node, nodepool name, "
    "zone, architecture, capacity type, instance type, pod phase, and pod readiness.",
    POD_STATE_LABELS,
    registry=REGISTRY,
)

# --- Scheduling (Karpenter pkg/controllers/provisioning/scheduling/metrics.go) ------------------------------
SCHEDULING_DURATION = Histogram(
    "karpenter_scheduler_scheduling_duration_seconds",
    "Duration of scheduling simulations used for deprovisioning and provisioning in seconds.",
    ["controller"],
    buckets=DURATION_BUCKETS,
    registry=REGISTRY,
)
SCHEDULING_QUEUE_DEPTH = Gauge(
    "karpenter_scheduler_queue_depth",
    "The number of pods currently waiting to be scheduled.",
    ["controller", "scheduling_id"],
    registry=REGISTRY,
)
UNSCHEDULABLE_PODS = Gauge(
    "karpenter_scheduler_unschedulable_pods_count",
    "The number of unschedulable Pods.",
    ["controller"],
    registry=REGISTRY,
)

# --- NodePools (Karpenter pkg/controllers/metrics/nodepool) -------------------------------------------------
NODEPOOL_USAGE = Gauge(
    "karpenter_nodepools_usage",
    "The amount of resources that have been provisioned for a nodepool. Labeled by nodepool name and "
    "resource type.",
    ["resource_type", "nodepool"],
    registry=REGISTRY,
)
NODEPOOL_LIMIT = Gauge(
    "karpenter_nodepools_limit",
    "Limits specified on the nodepool that restrict the quantity of resources provisioned. Labeled by "
    "nodepool name and resource type.",
    ["resource_type", "nodepool"],
    registry=REGISTRY,
)
NODEPOOL_COST = Gauge(
    "karpenter_nodepools_cost_total",
    "Total cost per hour of the nodepool's nodes from tenon's catalog (the price of each claim's offering). "
    "Not an authoritative source for billing.",
    ["nodepool"],
    registry=REGISTRY,
)

# --- Voluntary disruption (Karpenter pkg/controllers/disruption/metrics.go) ---------------------------------
DISRUPTION_DECISIONS = Counter(
    "karpenter_voluntary_disruption_decisions_total",
    "Number of disruption decisions performed. Labeled by disruption decision, reason, and consolidation "
    "type.",
    ["decision", "reason", "consolidation_type"],
    registry=REGISTRY,
)
DISRUPTION_ELIGIBLE_NODES = Gauge(
    "karpenter_voluntary_disruption_eligible_nodes",
    "Number of nodes eligible for disruption. Labeled by disruption reason.",
    ["reason"],
    registry=REGISTRY,
)
DISRUPTION_EVALUATION_DURATION = Histogram(
    "karpenter_voluntary_disruption_decision_evaluation_duration_seconds",
    "Duration of the disruption decision evaluation process in seconds. Labeled by method and consolidation "
    "type.",
    ["reason", "consolidation_type"],
    buckets=DURATION_BUCKETS,
    registry=REGISTRY,
)
NODEPOOL_ALLOWED_DISRUPTIONS = Gauge(
    "karpenter_nodepools_allowed_disruptions",
    "The number of nodes for a given NodePool that can be concurrently disrupting at a point in time. "
    "Labeled by NodePool and reason.",
    ["nodepool", "reason"],
    registry=REGISTRY,
)

# --- Cloud provider (Karpenter pkg/cloudprovider/metrics; AWS provider pkg/controllers/metrics) -------------
CLOUDPROVIDER_DURATION = Histogram(
    "karpenter_cloudprovider_duration_seconds",
    "Duration of cloud provider method calls. Labeled by the controller, method name and provider.",
    ["controller", "method", "provider"],
    buckets=DEFAULT_BUCKETS,
    registry=REGISTRY,
)
CLOUDPROVIDER_ERRORS = Counter(
    "karpenter_cloudprovider_errors_total",
    "Total number of errors returned from CloudProvider calls.",
    ["controller", "method", "provider", "error"],
    registry=REGISTRY,
)
OFFERING_PRICE_ESTIMATE = Gauge(
    "karpenter_cloudprovider_instance_type_offering_price_estimate",
    "Instance type offering estimated hourly price used when making informed decisions on node cost "
    "calculation, based on instance type, capacity type, and zone.",
    ["instance_type", "capacity_type", "zone"],
    registry=REGISTRY,
)
OFFERING_AVAILABLE = Gauge(
    "karpenter_cloudprovider_instance_type_offering_available",
    "Instance type offering availability, based on instance type, capacity type, and zone.",
    ["instance_type", "capacity_type", "zone"],
    registry=REGISTRY,
)

# --- Interruption (AWS provider pkg/controllers/interruption/metrics.go) ------------------------------------
INTERRUPTION_RECEIVED = Counter(
    "karpenter_interruption_received_messages_total",
    "Count of messages received from the SQS queue. Broken down by message type.",
    ["message_type"],
    registry=REGISTRY,
)
INTERRUPTION_DELETED = Counter(
    "karpenter_interruption_deleted_messages_total",
    "Count of messages deleted from the SQS queue.",
    registry=REGISTRY,
)
INTERRUPTION_QUEUE_DURATION = Histogram(
    "karpenter_interruption_message_queue_duration_seconds",
    "Amount of time an interruption message is on the queue before it is processed.",
    buckets=DURATION_BUCKETS,
    registry=REGISTRY,
)

# --- tenon's own --------------------------------------------------------------------------------------------
NODECLAIMS_BY_PHASE = Gauge(
    "tenon_nodeclaims",
    "NodeClaims by lifecycle phase (Planned, Launched, Registered, Initialized, Disrupting) and nodepool, as "
    "the scheduler's projection of the event log has them.",
    ["phase", "nodepool"],
    registry=REGISTRY,
)
CONSUMER_LAG = Gauge(
    "tenon_eventlog_consumer_lag",
    "Messages in the event log that a durable consumer has not yet handled (JetStream num_pending plus "
    "unacknowledged).",
    ["consumer"],
    registry=REGISTRY,
)
DEADLETTERS = Counter(
    "tenon_deadletters_total",
    "Messages a consumer gave up on and moved to the dead-letter stream. Labeled by the consumer.",
    ["consumer"],
    registry=REGISTRY,
)
DECISIONS = Counter(
    "tenon_decisions_total",
    "Decisions a service recorded on the event log. Labeled by the service and the event type decided.",
    ["service", "type"],
    registry=REGISTRY,
)
DECISION_DURATION = Histogram(
    "tenon_decision_duration_seconds",
    "From an input event's arrival to its decisions being recorded. Labeled by the service.",
    ["service"],
    buckets=DURATION_BUCKETS,
    registry=REGISTRY,
)
