"""The simulated kube-scheduler's decision for one pod: which node, or why none (pure logic, no I/O).

:func:`choose_node` runs the default scheduler's filter plugins, in the real framework's order, against
every node of a :class:`ClusterState`, and scores the survivors:

1. ``NodeUnschedulable``: ``spec.unschedulable`` rejects unless the pod tolerates
   ``node.kubernetes.io/unschedulable:NoSchedule`` -> "node(s) were unschedulable".
2. ``NodeName``: a pod that names a node fits only there -> "node(s) didn't match the requested node name".
3. ``TaintToleration``: the first ``NoSchedule``/``NoExecute`` taint not tolerated ->
   "node(s) had untolerated taint {key: value}". The effective taints include ``not-ready`` for nodes no
   kubelet has registered yet (``predicates.node_taints``).
4. ``NodeAffinity``: ``nodeSelector`` and required node affinity ->
   "node(s) didn't match Pod's node affinity/selector"; then ``NodePorts``: a ``hostPort`` (per protocol)
   already claimed on the node -> "node(s) didn't have free ports for the requested pod ports".
5. ``NodeResourcesFit``: pod count against ``allocatable.pods`` ("Too many pods") and every requested
   resource against allocatable minus what the node's pods request ("Insufficient cpu", ...; all of them),
   and again with the waiting pods *nominated* to the node (``status.nominatedNodeName``) of at least the
   pod's priority counted as if they ran there (the framework's ``RunFilterPluginsWithNominatedPods``): room
   the scheduler's preemption, or an autoscaler, said is someone's is not given to another pod.
6. ``PodTopologySpread`` (``DoNotSchedule`` constraints only): the node must carry the topology key
   ("... (missing required label)") and ``matching(domain) + self - globalMin <= maxSkew``, where the domains
   are those of nodes passing the pod's node affinity (``nodeAffinityPolicy`` Honor by default) and, only
   with ``nodeTaintsPolicy: Honor``, its taints; ``globalMin`` is 0 when fewer than ``minDomains`` exist.
7. ``InterPodAffinity`` (required terms): the pod's anti-affinity, existing pods' anti-affinity against it
   (symmetry), and the pod's affinity, with the "first pod of a self-affine set may land" exception.

A node fails on the first plugin that rejects it, and the failure message counts nodes per reason, sorted,
as ``FitError.Error()`` does: ``"0/3 nodes are available: 1 Insufficient cpu, 2 node(s) had untolerated
taint {node.kubernetes.io/not-ready: }."``. With no nodes at all the message is the real scheduler's
"no nodes available to schedule pods".

A pod with a nominated node is tried there first and goes there when it fits (``PreferNominatedNode``, GA
since Kubernetes 1.24). A pod whose required node affinity names its nodes (``matchFields``
``metadata.name In``, a DaemonSet's pods) is tried on those only (NodeAffinity's ``PreFilterResult``), and
filtered against every node just for the message when none takes it. Like kube-scheduler, the search
stops once enough feasible nodes were found (:func:`feasible_nodes_to_find`, the adaptive
``percentageOfNodesToScore``: every node below 100 nodes, 42% of 1,000) and the next pod's search starts
where this one stopped. The per-domain pod counts behind spread and inter-pod affinity come from
``topology_index.TopologyIndex`` (memoised, exact under same-cycle bookings), so a pod with constraints
costs a few dictionary look-ups per node rather than a scan of its namespace. Scoring is
``NodeResourcesFit`` least-allocated (the mean free fraction of cpu and memory after placing the pod), ties
broken by node name, so decisions are deterministic. Preemption is not simulated. Pod affinity terms with a
non-empty ``namespaceSelector`` select namespaces by their ``kubernetes.io/metadata.name`` label only (the
cache holds no Namespace objects); an empty one selects all namespaces.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from devtools.sandbox.controllers.cluster_state import ClusterState, NodeInfo, host_ports, nominated_node
from devtools.sandbox.controllers.predicates import (
    UNSCHEDULABLE_TAINT_KEY,
    match_label_selector,
    node_matches_pod,
    pod_key,
    tolerates,
    untolerated_taint,
    validate_node_affinity,
)
from devtools.sandbox.controllers.topology_index import Term, TopologyIndex, affinity_terms, term_matches

NO_NODES_MESSAGE = "no nodes available to schedule pods"
MIN_FEASIBLE_NODES = 100
_UNSCHEDULABLE_TAINT = {"key": UNSCHEDULABLE_TAINT_KEY, "effect": "NoSchedule"}

Reasons = tuple[str, ...]
"""Why a node cannot take a pod: one filter's reasons (a tuple, so the answers count as dict keys)."""


@dataclass(frozen=True)
class Decision:
    """Where the pod goes (``node_name``), or why it cannot go anywhere (``message``, per-reason counts)."""

    node_name: str | None
    message: str = ""
    reasons: tuple[tuple[str, int], ...] = ()

    @property
    def scheduled(self) -> bool:
        return self.node_name is not None


# ---------------------------------------------------------------------------------- per-pod precompute
class _PodContext:
    """What the per-node filters need, computed once per pod (the framework's PreFilter state)."""

    def __init__(self, pod: Mapping[str, Any], requests: Mapping[str, int], state: ClusterState) -> None:
        validate_node_affinity(pod)  # PreFilter: a malformed term fails the pod, whatever the nodes
        self.pod = pod
        self.requests = requests
        spec = pod.get("spec") or {}
        self.key = pod_key(pod)
        self.tolerations = spec.get("tolerations") or []
        self.node_name = spec.get("nodeName") or ""
        self.tolerates_unschedulable = any(tolerates(t, _UNSCHEDULABLE_TAINT) for t in self.tolerations)
        self.anti_terms = affinity_terms(pod, "podAntiAffinity", state.pods_by_namespace)
        self.affinity_terms = affinity_terms(pod, "podAffinity", state.pods_by_namespace)
        index = TopologyIndex.of(state)
        self.spread = self._spread_constraints(pod, index)
        self._prepare_inter_pod(index)
        affinity = spec.get("affinity") or {}
        self.plain_placement = not spec.get("nodeSelector") and not (affinity.get("nodeAffinity") or {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution"
        )
        self.host_ports = host_ports(pod)
        self.named_nodes = named_nodes(pod)
        # a pod that names no node, has no node selector or affinity and claims no host port can only be
        # kept off a node by the node's own state (unschedulable, taints): the common case, checked inline
        self.anywhere = not self.node_name and bool(self.plain_placement) and not self.host_ports
        self.request_items = [
            (name, amount) for name, amount in requests.items() if name != "pods" and amount > 0
        ]
        self.inter_pod = bool(self.spread or self.anti_terms or self.existing_blocked or self.affinity_terms)
        self.cpu = requests.get("cpu", 0)
        self.memory = requests.get("memory", 0)
        self.priority = int(spec.get("priority") or 0)
        self.state = state
        self.nominations = state.nominated
        self.nominated_node = nominated_node(pod)

    # ----- topology spread
    def _spread_constraints(self, pod: Mapping[str, Any], index: TopologyIndex) -> list[dict[str, Any]]:
        spec = pod.get("spec") or {}
        meta = pod.get("metadata") or {}
        namespace = meta.get("namespace") or "default"
        labels = meta.get("labels") or {}
        affinity_key = repr(
            (
                sorted((spec.get("nodeSelector") or {}).items()),
                ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
                    "requiredDuringSchedulingIgnoredDuringExecution"
                ),
            )
        )
        prepared: list[dict[str, Any]] = []
        for raw in spec.get("topologySpreadConstraints") or []:
            if raw.get("whenUnsatisfiable", "DoNotSchedule") != "DoNotSchedule":
                continue
            key = raw.get("topologyKey") or ""
            selector = dict(raw.get("labelSelector") or {})
            expressions = list(selector.get("matchExpressions") or [])
            for label_key in raw.get("matchLabelKeys") or []:
                if label_key in labels:
                    expressions.append({"key": label_key, "operator": "In", "values": [labels[label_key]]})
            selector = {"matchLabels": selector.get("matchLabels") or {}, "matchExpressions": expressions}
            honor_affinity = raw.get("nodeAffinityPolicy", "Honor") == "Honor"
            honor_taints = raw.get("nodeTaintsPolicy", "Ignore") == "Honor"
            tolerations = self.tolerations

            def accepts(
                info: NodeInfo,
                honor_affinity: bool = honor_affinity,
                honor_taints: bool = honor_taints,
                tolerations: Any = tolerations,
            ) -> bool:
                if honor_affinity and not node_matches_pod(pod, info.name, info.labels):
                    return False
                return not (honor_taints and untolerated_taint(tolerations, info.taints))

            eligible_key = (
                key,
                affinity_key if honor_affinity else None,
                repr(tolerations) if honor_taints else None,
            )
            eligible, domains = index.eligible_nodes(eligible_key, key, accepts)
            counts = index.domain_counts(
                Term(key, selector, frozenset({namespace})),
                eligible_key=eligible_key,
                eligible=eligible,
                skip_terminating=True,
            )
            min_domains = int(raw.get("minDomains") or 1)
            if len(domains) < min_domains:
                global_min = 0
            else:
                global_min = min((counts.get(d, 0) for d in domains), default=0)
            prepared.append(
                {
                    "key": key,
                    "max_skew": int(raw.get("maxSkew") or 1),
                    "counts": counts,
                    "global_min": global_min,
                    "self": 1 if match_label_selector(selector, labels) else 0,
                }
            )
        return prepared

    # ----- inter-pod affinity
    def _prepare_inter_pod(self, index: TopologyIndex) -> None:
        # Domains holding a pod matched by one of our anti-affinity terms.
        self.anti_blocked: list[set[str]] = [
            {domain for domain, count in index.domain_counts(term).items() if count > 0}
            for term in self.anti_terms
        ]
        # Symmetry: running pods whose anti-affinity matches us, as topology key -> the values they hold (by
        # key: a node is checked against each key once, where a list of pairs cost the scale run's churn a
        # pass over 2,000 hostnames for each of 2,000 nodes, for each pod tried)
        self.existing_blocked: dict[str, set[str]] = {}
        for key, value in index.blocked_by_existing(self.pod):
            self.existing_blocked.setdefault(key, set()).add(value)
        # Affinity: per term, the domains holding a matching pod; and whether any such domain exists.
        self.affinity_domains: list[set[str]] = [
            {domain for domain, count in index.domain_counts(term).items() if count > 0}
            for term in self.affinity_terms
        ]
        self.affinity_any = any(self.affinity_domains)
        self.self_affine = all(term_matches(term, self.pod) for term in self.affinity_terms)

    # ----- the filters, one per plugin; each returns None (pass) or its reasons (a tuple)
    def filter(self, info: NodeInfo) -> Reasons | None:
        """Why ``info`` cannot take the pod (the first plugin that rejects it), or None if it can.

        Runs for every node a pod is tried on (10,000 pods x 1,000 nodes in the bench), so the placement
        step is skipped when it cannot fail and NodeResourcesFit is inline.
        """
        if not self.anywhere or info.unschedulable or info.taints:
            failed = self._placement_failure(info)
            if failed is not None:
                return failed
        allocatable, requested = info.allocatable, info.requested
        max_pods = allocatable.get("pods")
        too_many = max_pods is not None and len(info.pod_keys) + 1 > max_pods
        short = [
            name
            for name, amount in self.request_items
            if requested.get(name, 0) + amount > allocatable.get(name, 0)
        ]
        if not too_many and not short and info.name in self.nominations:
            too_many, short = self._short_beside_nominated(info)
        if too_many or short:  # NodeResourcesFit: the pod count, then every resource that is short
            return _fit_failure(too_many, tuple(short))
        if not self.inter_pod:
            return None
        return self._spread_failure(info) or self._anti_affinity_failure(info) or self._affinity_failure(info)

    def _short_beside_nominated(self, info: NodeInfo) -> tuple[bool, list[str]]:
        """NodeResourcesFit with the pods nominated to the node (other than this one, of at least its
        priority) counted as running there."""
        count, held = self.state.nominated_load(info.name, self.priority)
        own = self.nominations[info.name].get(self.key)
        if own is not None:  # the pod itself is nominated here: its own room is not held against it
            count -= 1
            held = {name: amount - own.requests.get(name, 0) for name, amount in held.items()}
        max_pods = info.allocatable.get("pods")
        too_many = max_pods is not None and len(info.pod_keys) + count + 1 > max_pods
        short = [
            name
            for name, amount in self.request_items
            if info.requested.get(name, 0) + held.get(name, 0) + amount > info.allocatable.get(name, 0)
        ]
        return too_many, short

    def _placement_failure(self, info: NodeInfo) -> Reasons | None:
        """NodeUnschedulable, NodeName, TaintToleration, NodeAffinity and NodePorts."""
        if info.unschedulable and not self.tolerates_unschedulable:
            return ("node(s) were unschedulable",)
        if self.node_name and self.node_name != info.name:
            return ("node(s) didn't match the requested node name",)
        taint = untolerated_taint(self.tolerations, info.taints) if info.taints else None
        if taint is not None:
            return (f"node(s) had untolerated taint {{{taint.get('key')}: {taint.get('value') or ''}}}",)
        if not self.plain_placement and not node_matches_pod(self.pod, info.name, info.labels):
            return ("node(s) didn't match Pod's node affinity/selector",)
        if self.host_ports and any(port in info.used_ports for port in self.host_ports):
            return ("node(s) didn't have free ports for the requested pod ports",)
        return None

    def _spread_failure(self, info: NodeInfo) -> Reasons | None:
        """PodTopologySpread (DoNotSchedule constraints)."""
        for constraint in self.spread:
            value = info.labels.get(constraint["key"])
            if value is None:
                return ("node(s) didn't match pod topology spread constraints (missing required label)",)
            skew = constraint["counts"].get(value, 0) + constraint["self"] - constraint["global_min"]
            if skew > constraint["max_skew"]:
                return ("node(s) didn't match pod topology spread constraints",)
        return None

    def _anti_affinity_failure(self, info: NodeInfo) -> Reasons | None:
        """InterPodAffinity: the pod's required anti-affinity, then that of existing pods against it."""
        for term, blocked in zip(self.anti_terms, self.anti_blocked, strict=True):
            if info.labels.get(term.topology_key) in blocked:
                return ("node(s) didn't match pod anti-affinity rules",)
        for key, values in self.existing_blocked.items():
            if info.labels.get(key) in values:
                return ("node(s) didn't satisfy existing pods anti-affinity rules",)
        return None

    def _affinity_failure(self, info: NodeInfo) -> Reasons | None:
        """InterPodAffinity: the pod's required affinity (the first pod of a self-affine set may land)."""
        if not self.affinity_terms:
            return None
        pods_exist = True
        for term, domains in zip(self.affinity_terms, self.affinity_domains, strict=True):
            value = info.labels.get(term.topology_key)
            if value is None:
                return ("node(s) didn't match pod affinity rules",)
            if value not in domains:
                pods_exist = False
        if not pods_exist and not (not self.affinity_any and self.self_affine):
            return ("node(s) didn't match pod affinity rules",)
        return None

    def score(self, info: NodeInfo) -> float:
        """Least-allocated: mean free fraction of cpu and memory once the pod is placed (higher is better)."""
        total = 0.0
        capacity = info.allocatable.get("cpu", 0)
        if capacity > 0:
            total += max(0.0, (capacity - info.requested.get("cpu", 0) - self.cpu) / capacity)
        capacity = info.allocatable.get("memory", 0)
        if capacity > 0:
            total += max(0.0, (capacity - info.requested.get("memory", 0) - self.memory) / capacity)
        return total / 2


@lru_cache(maxsize=256)
def _fit_failure(too_many: bool, short: tuple[str, ...]) -> Reasons:
    """NodeResourcesFit's reasons: the pod count, then each resource that is short (made once per answer)."""
    return (("Too many pods",) if too_many else ()) + tuple(f"Insufficient {name}" for name in sorted(short))


def failure_message(node_count: int, reasons: Counter[str]) -> str:
    if node_count == 0:
        return NO_NODES_MESSAGE
    parts = sorted(f"{count} {reason}" for reason, count in reasons.items())
    return f"0/{node_count} nodes are available: {', '.join(parts)}."


def feasible_nodes_to_find(node_count: int) -> int:
    """kube-scheduler's adaptive ``percentageOfNodesToScore``: stop filtering after this many fit."""
    if node_count < MIN_FEASIBLE_NODES:
        return node_count
    percentage = max(5, 50 - node_count // 125)
    return max(MIN_FEASIBLE_NODES, node_count * percentage // 100)


def nominated_fit(context: _PodContext, state: ClusterState) -> bool:
    """Whether the pod goes to its nominated node (``PreferNominatedNode``): it has one and it fits there."""
    preferred = state.nodes.get(context.nominated_node or "")
    return preferred is not None and not context.node_name and context.filter(preferred) is None


def nominated_node_decision(
    pod: Mapping[str, Any], requests: Mapping[str, int], state: ClusterState
) -> Decision | None:
    """The pod's nominated node when it fits there (before a failure of its equivalence class is reused: a
    nomination is the one thing that class does not share)."""
    if nominated_node(pod) is None:
        return None
    context = _PodContext(pod, requests, state)
    return Decision(context.nominated_node) if nominated_fit(context, state) else None


def named_nodes(pod: Mapping[str, Any]) -> frozenset[str] | None:
    """NodeAffinity's PreFilter result: the only nodes the pod may go to when every required term names them
    (``matchFields`` ``metadata.name`` ``In``, how a DaemonSet pins its pods), or None when a term leaves
    the node open. Terms are ORed, a term's requirements ANDed; as kube-scheduler computes it."""
    required = (((pod.get("spec") or {}).get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    terms = required.get("nodeSelectorTerms") or []
    if not terms:
        return None
    names: set[str] = set()
    for term in terms:
        term_names: set[str] | None = None
        for requirement in term.get("matchFields") or []:
            if requirement.get("key") == "metadata.name" and requirement.get("operator") == "In":
                values = set(requirement.get("values") or [])
                term_names = values if term_names is None else term_names & values
        if term_names is None:
            return None
        names |= term_names
    return frozenset(names)


def _best_named(context: _PodContext, state: ClusterState) -> str | None:
    """The best of the nodes the pod's affinity names that take it (None if none does, or none is named).

    Only those can pass: filtering every node would cost a DaemonSet's rollout O(nodes^2). When none takes
    the pod, :func:`choose_node` still filters every node, for a message that counts each one's reason."""
    if context.named_nodes is None or context.node_name:
        return None
    best: tuple[float, str] | None = None
    for name in context.named_nodes:
        info = state.nodes.get(name)
        if info is None or context.filter(info) is not None:
            continue
        ranked = (-context.score(info), info.name)
        if best is None or ranked < best:
            best = ranked
    return best[1] if best is not None else None


def choose_node(pod: Mapping[str, Any], requests: Mapping[str, int], state: ClusterState) -> Decision:
    """Filter nodes, score the feasible ones, and pick the best (ties: node name).

    Like kube-scheduler, the search starts where the previous pod's stopped (``state.next_start_index``)
    and stops once :func:`feasible_nodes_to_find` nodes fit (all nodes below 100; 42% of 1,000), which keeps
    a 1,000-node cluster affordable and spreads equal pods over the nodes. A pod that fits nowhere is
    checked against every node, so the failure message counts them all.
    """
    context = _PodContext(pod, requests, state)
    if nominated_fit(context, state):
        return Decision(context.nominated_node)
    if (named := _best_named(context, state)) is not None:
        return Decision(named)
    failures: dict[Reasons, int] = {}  # counted by the filter's answer: the same few answers, node after node
    best: tuple[float, str] | None = None
    nodes = state.nodes
    if context.node_name:
        candidates = [nodes[context.node_name]] if context.node_name in nodes else []
        start = 0
    else:
        candidates = state.node_list()
        start = state.next_start_index % len(candidates) if candidates else 0
    wanted = feasible_nodes_to_find(len(candidates))
    found = processed = 0
    count = len(candidates)
    for offset in range(count):
        info = candidates[(start + offset) % count]
        processed += 1
        failed = context.filter(info)
        if failed is not None:
            failures[failed] = failures.get(failed, 0) + 1
            continue
        ranked = (-context.score(info), info.name)
        if best is None or ranked < best:
            best = ranked
        found += 1
        if found >= wanted:
            break
    if not context.node_name and count:
        state.next_start_index = (start + processed) % count
    if best is not None:
        return Decision(best[1])
    return _unplaced(context, nodes, failures)


def _unplaced(context: _PodContext, nodes: Mapping[str, NodeInfo], failures: dict[Reasons, int]) -> Decision:
    """The failure, each reason counted over the nodes that gave it."""
    reasons: Counter[str] = Counter()
    for answer, times in failures.items():
        for reason in answer:
            reasons[reason] += times
    if context.node_name and context.node_name not in nodes:
        reasons["node(s) didn't match the requested node name"] += len(nodes)
    return Decision(None, failure_message(len(nodes), reasons), tuple(sorted(reasons.items())))


def pod_shape_key(pod: Mapping[str, Any], requests: Mapping[str, int]) -> str:
    """Everything :func:`choose_node` reads of a pod but its nomination, as a key: two pods with the same key
    get the same answer from the same cluster state (the pods of one ReplicaSet share one), except that a pod
    that fits its nominated node goes there (:func:`nominated_node_decision`, asked first)."""
    spec = pod.get("spec") or {}
    meta = pod.get("metadata") or {}
    return repr(
        (
            meta.get("namespace"),
            sorted((meta.get("labels") or {}).items()),
            sorted(requests.items()),
            sorted((spec.get("nodeSelector") or {}).items()),
            spec.get("affinity") or {},
            spec.get("tolerations"),
            host_ports(pod),
            spec.get("topologySpreadConstraints"),
            spec.get("nodeName"),
            spec.get("priority"),
        )
    )


def equivalence_key(pod: Mapping[str, Any], requests: Mapping[str, int]) -> str | None:
    """A key shared by pods that must get the same answer within one scheduling cycle, or None.

    Within a cycle, state only changes by pods being booked, which can only make resource fit and
    anti-affinity harder; so once a pod failed, an equivalent pod fails too and need not be re-filtered.
    Pods with topology spread or pod affinity are excluded: booking a pod can make them *easier* (their
    failures hold only until the next booking, see ``Scheduler._schedule_one``).
    """
    spec = pod.get("spec") or {}
    affinity = spec.get("affinity") or {}
    if spec.get("topologySpreadConstraints") or affinity.get("podAffinity") or spec.get("nodeName"):
        return None
    return pod_shape_key(pod, requests)
