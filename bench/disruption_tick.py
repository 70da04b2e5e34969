"""The disruption service's tick and ``decide`` on a large cluster with nothing to do, in-process (a helper of
:mod:`bench.disruption`; ``python -m bench.disruption_tick`` runs it alone and prints the figures).

The cluster is what the log says of a provisioning wave's steady part, folded into ``DisruptionState``
through the decider's own ``evolve``: two NodePools (``WhenEmptyOrUnderutilized``, a 10% budget and a
weekday window of 0), their NodeClass and catalog, a DaemonSet, two PodDisruptionBudgets, ``nodes`` claims
through Initialized with their Nodes, ``pods_per_node`` bound pods on each and a batch of pods still pending.
Two shapes:

* ``wave``: ``consolidateAfter: 1h`` (as the scale run sets it while its waves run), so no node is
  consolidatable yet, none is empty, none drifted: every method has nothing to do;
* ``steady``: ``consolidateAfter: 30s`` long past and nodes full: consolidation is eligible and every probe
  of its search fails (the round's most expensive outcome, nothing).

Figures: the fold, the first tick (cold), idle ticks (nothing folded between them, the clock 1 s on), a tick
after one pod binds, a tick after a pending batch, ``decide`` on a pod observation, and the tick as it was
before issue 16 (the whole work every tick: ``DisruptionDecider(shortcuts=False)``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, ParamSpec, TypeVar

from proto import events as ev
from tenon.services.disruption.decider import DisruptionDecider
from tenon.services.disruption.projection_view import DisruptionState
from tests.disruption.clusters import NOW, catalog, node, nodepool, pod
from tests.support.events import build_event

P = ParamSpec("P")
R = TypeVar("R")
TYPES = [("c-2", 2, 4, 0.10), ("c-4", 4, 8, 0.20), ("c-8", 8, 16, 0.40), ("c-16", 16, 32, 0.80)]
START = NOW - timedelta(hours=2)
"""When the claims were planned; their pods bound 4 minutes later."""
TICK_AT = NOW - timedelta(hours=1, minutes=30)
"""Half an hour after the pods bound: ``consolidateAfter: 1h`` has not passed, 30s has."""
SHAPES = {"wave": ("1h", (300, 400, 500)), "steady": ("30s", (1580,))}
"""Shape -> (consolidateAfter, the pods' CPU requests in millicores: c-8 nodes of 5 x 1580m are full)."""


def _pools(consolidate_after: str) -> tuple[dict[str, Any], ...]:
    window = {"nodes": "0", "schedule": "0 9 * * mon-fri", "duration": "8h", "reasons": ["Drifted"]}
    return tuple(
        nodepool(name, budgets=[{"nodes": "10%"}, window], consolidateAfter=consolidate_after)
        for name in ("default", "batch")
    )


def _facts(consolidate_after: str) -> list[ev.Event]:
    nodeclass = {"apiVersion": "x/v1", "kind": "EC2NodeClass", "metadata": {"name": "default"}, "spec": {}}
    daemonset = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "agent", "namespace": "kube-system"},
        "spec": {"template": {"spec": {"containers": [{"name": "a"}]}}},
    }
    pdbs = tuple(
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": f"pdb-{app}", "namespace": "default"},
            "spec": {"selector": {"matchLabels": {"app": app}}, "maxUnavailable": 1},
            "status": {"disruptionsAllowed": 100_000},
        }
        for app in ("web", "api")
    )
    return [
        build_event(ev.NodePoolsSnapshot, "pools", at=START, nodepools=_pools(consolidate_after)),
        build_event(ev.NodeClassesSnapshot, "classes", at=START, nodeclasses=(nodeclass,)),
        build_event(
            ev.CatalogSnapshot,
            "catalog",
            at=START,
            provider="static",
            node_class="default",
            instance_types=tuple(catalog(TYPES)["spec"]["instanceTypes"]),
        ),
        build_event(ev.DaemonSetsSnapshot, "daemonsets", at=START, daemonsets=(daemonset,)),
        build_event(ev.PodDisruptionBudgetsSnapshot, "pdbs", at=START, pdbs=pdbs),
    ]


def _claim_events(i: int, pool: str, pods: tuple[str, ...]) -> list[ev.Event]:
    claim, name = f"{pool}-{i:05d}", f"node-{i:05d}"
    choice = ev.InstanceChoice("c-8", "z1", "on-demand", 0.40)
    at = [START + timedelta(minutes=m) for m in range(4)]
    pid = f"sandbox://{name}"
    return [
        build_event(
            ev.NodeClaimPlanned,
            f"planned-{i}",
            at=at[0],
            nodeclaim=claim,
            nodepool=pool,
            node_class="default",
            choice=choice,
            fallbacks=(),
            pods=pods,
            requirements=(),
            labels={},
        ),
        build_event(
            ev.NodeClaimLaunched,
            f"launched-{i}",
            at=at[1],
            nodeclaim=claim,
            provider_id=pid,
            instance_type="c-8",
            zone="z1",
            capacity_type="on-demand",
        ),
        build_event(
            ev.NodeClaimRegistered, f"registered-{i}", at=at[2], nodeclaim=claim, node=name, provider_id=pid
        ),
        build_event(ev.NodeClaimInitialized, f"initialized-{i}", at=at[3], nodeclaim=claim, node=name),
    ]


def _node_observed(i: int, pool: str) -> ev.NodeObserved:
    name = f"node-{i:05d}"
    obj = node(name, "c-8", 8, 16, pool=pool)
    obj["spec"] = {"providerID": f"sandbox://{name}"}
    at = START + timedelta(minutes=3)
    return build_event(ev.NodeObserved, f"node-{i}", at=at, change="added", node=obj)


def bound(name: str, node_name: str, millis: int, at: datetime) -> ev.BoundPodObserved:
    """A pod observed bound to ``node_name``."""
    app = ("web", "api", "worker")[sum(map(ord, name)) % 3]
    obj = pod(name, node_name, f"{millis}m", "256Mi", labels={"app": app})
    return build_event(ev.BoundPodObserved, f"bound-{name}", at=at, change="added", pod=obj)


def cluster_events(nodes: int, pods_per_node: int, shape: str = "wave", pending: int = 200) -> list[ev.Event]:
    """What the log says of the cluster (see the module docstring), in log order."""
    consolidate_after, millis = SHAPES[shape]
    events = _facts(consolidate_after)
    for i in range(nodes):
        pool = ("default", "batch")[i % 2]
        names = tuple(f"p{i}-{j}" for j in range(pods_per_node))
        events += _claim_events(i, pool, tuple(f"default/{n}" for n in names))
        events.append(_node_observed(i, pool))
        for j, name in enumerate(names):
            events.append(bound(name, f"node-{i:05d}", millis[j % len(millis)], START + timedelta(minutes=4)))
    events.append(pending_batch("waiting", pending, TICK_AT - timedelta(seconds=5)))
    return events


def pending_batch(batch_id: str, count: int, at: datetime) -> ev.PendingBatch:
    pods = tuple(pod(f"{batch_id}-{k}", None, "300m", "256Mi") for k in range(count))
    return build_event(
        ev.PendingBatch,
        f"batch-{batch_id}",
        at=at,
        batch_id=batch_id,
        pods=pods,
        window_opened_at=at - timedelta(seconds=2),
        window_closed_by="idle",
    )


def folded(events: list[ev.Event]) -> tuple[DisruptionDecider, DisruptionState]:
    decider = DisruptionDecider()
    state = decider.initial_state()
    for sequence, event in enumerate(events, start=1):
        state = decider.evolve(state, event, sequence)
    return decider, state


def _timed(call: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> tuple[float, R]:
    started = time.perf_counter()
    result = call(*args, **kwargs)
    return time.perf_counter() - started, result


def measure(
    nodes: int,
    pods_per_node: int,
    shape: str = "wave",
    *,
    idle: int = 20,
    changes: int = 20,
    batches: int = 5,
) -> dict[str, Any]:
    """Seconds per step on a cluster of ``nodes`` x ``pods_per_node`` (medians): ``idle`` ticks, ``changes``
    ticks after a pod binds (and ``decide`` on it), ``batches`` ticks after a pending batch; then the same
    tick doing the whole work (``shortcuts=False``), for comparison."""
    events = cluster_events(nodes, pods_per_node, shape)
    fold, (decider, state) = _timed(folded, events)
    now = TICK_AT
    first, decided = _timed(decider.tick, state, now)
    assert not decided, f"the {shape} cluster has nothing to do, the tick decided {decided}"
    idle_ticks = []
    for _ in range(idle):
        now += timedelta(seconds=1)
        idle_ticks.append(_timed(decider.tick, state, now)[0])
    after_pod, after_batch, decide = [], [], []
    sequence = len(events)
    for k in range(changes):
        now += timedelta(seconds=1)
        sequence += 1
        arrival = bound(f"late-{k}", f"node-{(k * 37) % nodes:05d}", 100, now)
        decider.evolve(state, arrival, sequence)
        decide.append(_timed(decider.decide, state, arrival)[0])
        after_pod.append(_timed(decider.tick, state, now)[0])
    for k in range(batches):
        now += timedelta(seconds=1)
        sequence += 1
        decider.evolve(state, pending_batch(f"more-{k}", 50, now), sequence)
        after_batch.append(_timed(decider.tick, state, now)[0])
    whole, _ = _timed(DisruptionDecider(shortcuts=False).tick, state, now + timedelta(seconds=1))
    return {
        "shape": shape,
        "nodes": nodes,
        "pods": nodes * pods_per_node,
        "fold_seconds": fold,
        "first_tick_seconds": first,
        "idle_tick_seconds": statistics.median(idle_ticks) if idle_ticks else None,
        "idle_tick_max_seconds": max(idle_ticks, default=None),
        "tick_after_pod_seconds": statistics.median(after_pod) if after_pod else None,
        "tick_after_batch_seconds": statistics.median(after_batch) if after_batch else None,
        "decide_seconds": statistics.median(decide) if decide else None,
        "whole_tick_seconds": whole,
    }


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.disruption_tick", description=__doc__)
    parser.add_argument("--nodes", type=int, default=2000)
    parser.add_argument("--pods-per-node", type=int, default=5)
    parser.add_argument("--shape", choices=sorted(SHAPES), action="append")
    parser.add_argument("--repeats", type=int, default=20, help="idle ticks and ticks after a change")
    args = parser.parse_args()
    for shape in args.shape or ["wave"]:
        figures = measure(args.nodes, args.pods_per_node, shape, idle=args.repeats, changes=args.repeats)
        print(json.dumps({k: round(v, 6) if isinstance(v, float) else v for k, v in figures.items()}))


if __name__ == "__main__":
    main()
