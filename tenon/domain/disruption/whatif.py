"""What disruption would do to a cluster given as Kubernetes objects, round after round (pure): the engine
of ``tenon simulate --disruption`` and of the disruption bench.

Objects read: Nodes, Pods (bound ones sit on their node; unbound ones are pending), ``karpenter.sh/v1``
NodeClaims, NodePools, NodeClasses, MachineDeployments and InstanceCatalogs (the prices), DaemonSets,
PodDisruptionBudgets, and what the scheduling core reads besides (volumes, workloads). A Node with a
``karpenter.sh/nodepool`` label and no NodeClaim stands for its own claim (named like the Node). A claim's
price is its ``tenon.sh/price-per-hour`` annotation, else its offering's in the pool's catalog; its age is
its ``creationTimestamp`` and it is Initialized since its ``Initialized`` condition (else its creation).

Each round runs expiration (forceful) and then :func:`.rounds.decide_round` on the cluster as the rounds
before left it: candidates leave, their pods go where the simulation put them (replacements join as new
Nodes named ``<nodepool>-r<round>-<i>``), pods of an expired node go where the core would place them.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from tenon.core import ClusterInput, assemble, instance_types_for_node_pool, parse_object
from tenon.core.wellknown import CAPACITY_TYPE, HOSTNAME, INSTANCE_TYPE, NODEPOOL, PRICE_PER_HOUR, ZONE
from tenon.domain.disruption import expiration
from tenon.domain.disruption.commands import Command
from tenon.domain.disruption.consolidation import TENON, Rules
from tenon.domain.disruption.rounds import decide_round
from tenon.domain.disruption.simulation import Repacker
from tenon.domain.disruption.view import ClaimFacts, ClusterView, KubeObject, meta, node_labels, pod_key, spec

MAX_ROUNDS = 1000


def _time(raw: Any, default: datetime) -> datetime:
    if isinstance(raw, datetime):
        return raw
    try:
        return datetime.fromisoformat(str(raw).replace("Z", "+00:00")) if raw else default
    except ValueError:
        return default


def _initialized(obj: Mapping[str, Any]) -> Any:
    for condition in (obj.get("status") or {}).get("conditions") or []:
        if isinstance(condition, Mapping) and condition.get("type") == "Initialized":
            return condition.get("lastTransitionTime") if condition.get("status") == "True" else False
    return None


@dataclass
class Cluster:
    """The objects of a what-if, by kind, mutated round after round."""

    now: datetime
    nodes: dict[str, KubeObject] = field(default_factory=dict)
    pods: dict[str, KubeObject] = field(default_factory=dict)
    nodeclaims: dict[str, KubeObject] = field(default_factory=dict)
    nodepools: dict[str, KubeObject] = field(default_factory=dict)
    nodeclasses: dict[str, KubeObject] = field(default_factory=dict)
    pdbs: list[KubeObject] = field(default_factory=list)
    others: list[KubeObject] = field(default_factory=list)
    """Catalogs, MachineDeployments, DaemonSets, volumes, workloads: read by the core as they are."""
    _fixed: list[ClusterInput] = field(default_factory=list)

    @classmethod
    def of(cls, objects: Iterable[Mapping[str, Any]], now: datetime) -> Cluster:
        cluster = cls(now)
        for obj in objects:
            cluster.add(copy.deepcopy(dict(obj)))
        cluster._fixed = [parse_object("cluster", i, o) for i, o in enumerate(cluster.others)]
        cluster._fixed += [parse_object("cluster", 0, o) for o in cluster.nodepools.values()]
        cluster._fixed += [parse_object("cluster", 0, o) for o in cluster.nodeclasses.values()]
        return cluster

    def add(self, obj: dict[str, Any]) -> None:
        kind, name = obj.get("kind"), str(meta(obj).get("name"))
        if kind == "Node":
            self.nodes[name] = obj
        elif kind == "Pod":
            self.pods[pod_key(obj)] = obj
        elif kind == "NodeClaim":
            self.nodeclaims[name] = obj
        elif kind == "NodePool":
            self.nodepools[name] = obj
        elif kind in ("ClusterAPINodeClass", "EC2NodeClass"):
            self.nodeclasses[name] = obj
        elif kind == "PodDisruptionBudget":
            self.pdbs.append(obj)
        else:
            self.others.append(obj)

    def core(self) -> ClusterInput:
        parts = list(self._fixed)
        parts += [parse_object("cluster", 0, n) for n in self.nodes.values()]
        parts += [parse_object("cluster", 0, p) for p in self.pods.values()]
        parts += [parse_object("cluster", 0, c) for c in self.nodeclaims.values() if not _on_a_node(c, self)]
        return assemble(parts)

    def view(self) -> ClusterView:
        core = self.core()
        prices = _prices(core)
        view = ClusterView(
            now=self.now,
            nodes=dict(self.nodes),
            nodepools=dict(self.nodepools),
            nodeclasses=dict(self.nodeclasses),
            pdbs=list(self.pdbs),
            core=core,
        )
        for pod in self.pods.values():
            node = spec(pod).get("nodeName")
            if node:
                view.pods_by_node.setdefault(str(node), []).append(pod)
            else:
                view.pending_pods.append(pod)
        for claim in self._claims(prices):
            view.claims[claim.name] = claim
        return view

    def _claims(self, prices: Mapping[tuple[str, str, str | None, str], float]) -> list[ClaimFacts]:
        found: dict[str, ClaimFacts] = {}
        claimed_nodes = set()
        for name, obj in sorted(self.nodeclaims.items()):
            node = (obj.get("status") or {}).get("nodeName")
            claimed_nodes.add(node)
            found[name] = self._facts(name, obj, str(node) if node else None, prices)
        for name, node in sorted(self.nodes.items()):
            if name not in claimed_nodes and NODEPOOL in node_labels(node):
                found.setdefault(name, self._facts(name, node, name, prices))
        return list(found.values())

    def _facts(
        self,
        name: str,
        obj: Mapping[str, Any],
        node: str | None,
        prices: Mapping[tuple[str, str, str | None, str], float],
    ) -> ClaimFacts:
        labels = node_labels(obj)
        if node and node in self.nodes:
            labels = {**labels, **node_labels(self.nodes[node])}
        pool, itype = labels.get(NODEPOOL, ""), labels.get(INSTANCE_TYPE, "")
        zone, capacity = labels.get(ZONE), labels.get(CAPACITY_TYPE, "on-demand")
        created = _time(meta(obj).get("creationTimestamp"), self.now)
        initialized = _initialized(obj)
        annotated = (meta(obj).get("annotations") or {}).get(PRICE_PER_HOUR)
        try:
            listed = prices.get((pool, itype, zone, capacity), 0.0)
            price = float(annotated) if annotated is not None else listed
        except ValueError:
            price = prices.get((pool, itype, zone, capacity), 0.0)
        return ClaimFacts(
            name=name,
            nodepool=pool,
            node=node if node in self.nodes else None,
            instance_type=itype,
            zone=zone,
            capacity_type=capacity,
            price=price,
            created_at=created,
            initialized_at=None if initialized is False else _time(initialized, created),
            labels=labels,
        )


def _on_a_node(claim: Mapping[str, Any], cluster: Cluster) -> bool:
    return (claim.get("status") or {}).get("nodeName") in cluster.nodes


def _prices(core: ClusterInput) -> dict[tuple[str, str, str | None, str], float]:
    """(pool, type, zone, capacity type) -> price, and (pool, type, None, capacity type) -> the cheapest."""
    out: dict[tuple[str, str, str | None, str], float] = {}
    for pool in core.node_pools:
        types = instance_types_for_node_pool(core, pool)[0]
        for t in types:
            for o in t.offerings:
                out[(pool.name, t.name, o.zone, o.capacity_type)] = o.price
                cheapest = out.get((pool.name, t.name, None, o.capacity_type))
                if cheapest is None or o.price < cheapest:
                    out[(pool.name, t.name, None, o.capacity_type)] = o.price
    return out


# --- applying a round --------------------------------------------------------------------------------------


def _replacement_node(cluster: Cluster, name: str, replacement: Any, core: ClusterInput) -> KubeObject:
    allocatable: dict[str, str] = {}
    for pool in core.node_pools:
        if pool.name != replacement.nodepool:
            continue
        for t in instance_types_for_node_pool(core, pool)[0]:
            if t.name == replacement.choice.instance_type:
                alloc = t.allocatable
                allocatable = {
                    "cpu": f"{alloc.get('cpu', 0)}m",
                    "memory": str(alloc.get("memory", 0)),
                    "pods": str(alloc.get("pods", 110)),
                }
    template = spec(cluster.nodepools.get(replacement.nodepool, {})).get("template") or {}
    labels = {str(k): str(v) for k, v in ((template.get("metadata") or {}).get("labels") or {}).items()}
    labels.update(
        {
            NODEPOOL: replacement.nodepool,
            INSTANCE_TYPE: replacement.choice.instance_type,
            CAPACITY_TYPE: replacement.choice.capacity_type,
            HOSTNAME: name,
        }
    )
    if replacement.choice.zone:
        labels[ZONE] = replacement.choice.zone
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": labels,
            "creationTimestamp": cluster.now.isoformat(),
            "annotations": {PRICE_PER_HOUR: str(replacement.choice.price)},
        },
        "spec": {"taints": list((template.get("spec") or {}).get("taints") or [])},
        "status": {
            "allocatable": allocatable,
            "capacity": allocatable,
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def apply(cluster: Cluster, command: Command, round_number: int, core: ClusterInput) -> list[str]:
    """The cluster after ``command``; the names its replacements were given."""
    names = []
    for index, replacement in enumerate(command.replacements):
        name = f"{replacement.nodepool}-r{round_number}-{index}"
        cluster.nodes[name] = _replacement_node(cluster, name, replacement, core)
        names.append(name)
    gone = {c.node_name for c in command.candidates}
    for key, pod in list(cluster.pods.items()):
        node = spec(pod).get("nodeName")
        if node not in gone:
            continue
        destination = command.destinations.get(key)
        if destination is None:
            del cluster.pods[key]  # DaemonSet and mirror pods go with their node
            continue
        if destination.startswith("new:"):
            destination = names[int(destination[4:])]
        cluster.pods[key] = {**pod, "spec": {**spec(pod), "nodeName": destination}}
    for candidate in command.candidates:
        cluster.nodes.pop(candidate.node_name, None)
        cluster.nodeclaims.pop(candidate.name, None)
    return names


def _expiration_command(view: ClusterView) -> Command | None:
    command = expiration.decide(view)
    if command is None or view.core is None:
        return command
    outcome = Repacker(view).simulate(list(command.candidates))
    from dataclasses import replace

    from tenon.domain.disruption.commands import replacement_of

    return replace(
        command,
        replacements=tuple(replacement_of(r) for r in outcome.replacements),
        destinations=outcome.destinations,
    )


def round_json(command: Command, names: Sequence[str], blocked: Iterable[Any]) -> dict[str, Any]:
    return {
        "method": command.method,
        "reason": command.reason,
        "detail": command.detail,
        "candidates": [c.node_name for c in command.candidates],
        "replacements": [
            {
                "name": name,
                "nodePool": r.nodepool,
                "instanceType": r.choice.instance_type,
                "zone": r.choice.zone,
                "capacityType": r.choice.capacity_type,
                "pricePerHour": round(r.price, 6),
            }
            for name, r in zip(names, command.replacements, strict=True)
        ],
        "podsMoved": list(command.pods_moved),
        "savingsPerHour": round(command.savings, 6),
        "budget": command.budget,
        "blocked": [{"node": b.node, "why": b.why} for b in blocked],
    }


def final_nodes(cluster: Cluster) -> list[dict[str, Any]]:
    view = cluster.view()
    by_node = {c.node: c for c in view.claims.values() if c.node}
    out = []
    for name in sorted(cluster.nodes):
        claim = by_node.get(name)
        out.append(
            {
                "name": name,
                "instanceType": node_labels(cluster.nodes[name]).get(INSTANCE_TYPE),
                "pricePerHour": round(claim.price, 6) if claim else 0.0,
                "pods": sorted(pod_key(p) for p in view.pods_by_node.get(name, [])),
            }
        )
    return out


def run(
    objects: Iterable[Mapping[str, Any]], now: datetime, rounds: int | None, rules: Rules = TENON
) -> dict[str, Any]:
    """Up to ``rounds`` rounds (None: until a round does nothing); the JSON of ``simulate --disruption``."""
    cluster = Cluster.of(objects, now)
    price_before = sum(n["pricePerHour"] for n in final_nodes(cluster))
    played: list[dict[str, Any]] = []
    limit = MAX_ROUNDS if rounds is None else min(rounds, MAX_ROUNDS)
    for number in range(1, limit + 1):
        view = cluster.view()
        command = _expiration_command(view)
        blocked: Sequence[Any] = ()
        if command is None:
            outcome = decide_round(view, rules)
            command, blocked = outcome.command, outcome.blocked
        if command is None:
            break
        assert view.core is not None
        names = apply(cluster, command, number, view.core)
        played.append(round_json(command, names, blocked))
    nodes = final_nodes(cluster)
    return {
        "now": now.isoformat(),
        "rules": rules.name,
        "priceBefore": round(price_before, 6),
        "rounds": played,
        "finalNodes": nodes,
        "finalPricePerHour": round(sum(n["pricePerHour"] for n in nodes), 6),
    }
