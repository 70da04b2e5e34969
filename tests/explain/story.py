"""Event logs for the explain tests, built with the real scheduler planner on the Cluster API demo.

The cluster is ``deploy/examples/capi-demo`` (one NodePool over MachineDeployments c3-4 / c3-8 / c3-16 at
$0.05 / $0.10 / $0.20 per hour, 2 / 4 / 8 vCPU, and a 100m DaemonSet), published as the snapshots pod-watcher
and launcher-capi would publish. Pending pods go through ``planner.plan_batch`` exactly as the scheduler
service runs it, so the ``NodeClaimPlanned`` explanations under test are the scheduler's own, not written by
hand.

:class:`Story` keeps the log: every event gets the next stream sequence and a broker time the test chooses
(seconds after a fixed start), and the projection is folded as the scheduler would fold it.
"""

from __future__ import annotations

from contextlib import suppress
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

from proto import events as ev
from proto import registry
from tenon.domain.explain import LoggedEvent
from tenon.domain.nodeclaim import ImpossibleStory
from tenon.domain.projection import ClusterProjection
from tenon.runtime.eventlog.factories import make_event
from tenon.services.scheduler import planner

DEMO = Path(__file__).parents[2] / "deploy" / "examples" / "capi-demo"
START = datetime(2026, 11, 29, 10, 0, 0, tzinfo=UTC)


def demo_objects(name: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all((DEMO / name).read_text()) if doc]


def pending_pod(name: str, cpu: str, namespace: str = "default") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}", "labels": {"app": name}},
        "spec": {"containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": cpu}}}]},
        "status": {
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
        },
    }


def bound_pod(pod: dict[str, Any], node: str) -> dict[str, Any]:
    bound = {**pod, "spec": {**pod["spec"], "nodeName": node}, "status": {"phase": "Running"}}
    return bound


class Story:
    """A log under construction: the CAPI demo seeded, then whatever the test appends."""

    def __init__(self, start: datetime = START) -> None:
        self.start = start
        self.log: list[LoggedEvent] = []
        self.projection = ClusterProjection()
        self._batches = 0
        nodepool_file = demo_objects("nodepool.yaml")
        self.add(
            make_event(
                ev.NodePoolsSnapshot,
                producer="pod-watcher",
                key=("np",),
                decided_at=self.start,
                nodepools=tuple(d for d in nodepool_file if d["kind"] == "NodePool"),
            ),
            at=0,
        )
        self.add(
            make_event(
                ev.NodeClassesSnapshot,
                producer="pod-watcher",
                key=("nc",),
                decided_at=self.start,
                nodeclasses=tuple(d for d in nodepool_file if d["kind"] == "ClusterAPINodeClass"),
            ),
            at=0,
        )
        self.add(
            make_event(
                ev.DaemonSetsSnapshot,
                producer="pod-watcher",
                key=("ds",),
                decided_at=self.start,
                daemonsets=tuple(demo_objects("daemonset.yaml")),
            ),
            at=0,
        )
        self.add(
            make_event(
                ev.CatalogSnapshot,
                producer="launcher-capi",
                key=("catalog",),
                decided_at=self.start,
                provider="cluster-api",
                node_class="default",
                instance_types=(),
                sources=tuple(demo_objects("machinedeployments.yaml")),
            ),
            at=0,
        )

    def add(self, event: ev.Event, *, at: float) -> LoggedEvent:
        """Append ``event`` as stored ``at`` seconds after START."""
        record = LoggedEvent(len(self.log) + 1, self.start + timedelta(seconds=at), event)
        self.log.append(record)
        with suppress(ImpossibleStory):  # in the log, but the scheduler dead-letters it instead of folding
            self.projection.apply(event, record.sequence)
        return record

    def pending(self, pods: list[dict[str, Any]], *, at: float) -> ev.PendingBatch:
        self._batches += 1
        batch_id = f"batch-{self._batches}"
        batch = make_event(
            ev.PendingBatch,
            producer="pod-watcher",
            key=(batch_id,),
            decided_at=self.start + timedelta(seconds=at),
            correlation_id=batch_id,
            batch_id=batch_id,
            pods=tuple(pods),
            window_opened_at=self.start + timedelta(seconds=at - 1),
            window_closed_by="idle",
        )
        self.add(batch, at=at)
        return batch

    def plan(self, batch: ev.PendingBatch, *, at: float) -> tuple[list[ev.NodeClaimPlanned], ev.BatchPlanned]:
        """What the scheduler appends for ``batch``: its NodeClaimPlanned events, then the BatchPlanned."""
        outcome = planner.plan_batch(self.projection, batch)
        return self._record_outcome(outcome, at)

    def replan(
        self, abandoned: ev.NodeClaimAbandoned, *, at: float
    ) -> tuple[list[ev.NodeClaimPlanned], ev.BatchPlanned]:
        outcome = planner.replan_abandoned(self.projection, abandoned)
        return self._record_outcome(outcome, at)

    def _record_outcome(
        self, outcome: planner.BatchOutcome, at: float
    ) -> tuple[list[ev.NodeClaimPlanned], ev.BatchPlanned]:
        claims: list[ev.NodeClaimPlanned] = []
        answer: ev.BatchPlanned | None = None
        for event in outcome.events:
            self.add(event, at=at)
            if isinstance(event, ev.NodeClaimPlanned):
                claims.append(event)
            elif isinstance(event, ev.BatchPlanned):
                answer = event
        assert answer is not None, "the planner answered no BatchPlanned"
        return claims, answer

    def claim_event(
        self,
        event_type: type[ev.NodeClaimEvent],
        claim: str,
        *,
        at: float,
        producer: str | None = None,
        **fields: Any,
    ) -> ev.NodeClaimEvent:
        event = make_event(
            event_type,
            producer=producer or registry.first_writer(event_type),
            key=(claim, event_type.__name__, at),
            decided_at=self.start + timedelta(seconds=at),
            correlation_id=claim,
            nodeclaim=claim,
            **fields,
        )
        self.add(event, at=at)
        return event

    def decision(
        self,
        *,
        at: float,
        method: str = "emptiness",
        reason: str = "empty for 30s",
        budget: str = "default: nodes 10%",
        candidates: tuple[ev.DisruptionCandidate, ...] = (),
        blocked: tuple[ev.BlockedCandidate, ...] = (),
    ) -> ev.DisruptionDecision:
        event = make_event(
            ev.DisruptionDecision,
            producer="disruption",
            key=("decision", at),
            decided_at=self.start + timedelta(seconds=at),
            method=method,
            candidates=candidates,
            reason=reason,
            budget=budget,
            blocked=blocked,
        )
        self.add(event, at=at)
        return event

    def bound(self, pod: dict[str, Any], node: str, *, at: float) -> ev.BoundPodObserved:
        event = make_event(
            ev.BoundPodObserved,
            producer="pod-watcher",
            key=(pod["metadata"]["uid"], at, "added"),
            decided_at=self.start + timedelta(seconds=at),
            change="added",
            pod=bound_pod(pod, node),
        )
        self.add(event, at=at)
        return event
