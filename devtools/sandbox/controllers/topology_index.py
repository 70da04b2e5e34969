"""Pod (anti-)affinity terms and memoised "matching pods per topology domain" counts for the scheduler.

Topology spread and inter-pod (anti-)affinity all ask the same question: *in each topology domain (zone,
hostname, ...), how many bound pods match this selector in these namespaces?* Answering it by scanning the
namespace's pods for every pending pod made a 10,000-pod benchmark mix crawl, because the pods of one workload
share a handful of selectors. :class:`TopologyIndex` memoises each answer per
``(namespaces, selector, topology key, eligible nodes)`` and keeps it exact:

* it is thrown away whenever :class:`ClusterState` moves its ``topology_version`` (a bound pod's node, labels
  or termination changed; a node was added, removed, relabelled or retainted);
* pods the scheduler books in between (``ClusterState.assume``) are listed in ``state.booked`` and added to
  every memoised count they match, so decisions later in the same cycle see them, as before.

The same goes for the symmetric anti-affinity check: existing pods' required anti-affinity terms are grouped
by ``(namespaces, selector, topology key)`` with the set of domains where such a pod runs, so a pending pod
checks a few groups instead of every anti-affine pod. Eligible-node sets for topology spread (nodes passing
the pod's node affinity and, with ``nodeTaintsPolicy: Honor``, its tolerations) are memoised the same way.

Terms follow the API: a term without ``labelSelector`` matches nothing; ``matchLabelKeys`` /
``mismatchLabelKeys`` add ``In`` / ``NotIn`` requirements on the pod's own label values; namespaces default
to the pod's own, an empty ``namespaceSelector`` means all namespaces, and a non-empty one selects namespaces
by their ``kubernetes.io/metadata.name`` label only (the cache holds no Namespace objects).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from devtools.sandbox.controllers.cluster_state import ClusterState, NodeInfo, PodEntry
from devtools.sandbox.controllers.predicates import is_terminating, match_label_selector


@dataclass(frozen=True)
class Term:
    topology_key: str
    selector: Mapping[str, Any]
    namespaces: frozenset[str] | None  # None = all namespaces

    @property
    def selector_key(self) -> str:
        return repr(sorted((k, repr(v)) for k, v in self.selector.items()))


def affinity_terms(pod: Mapping[str, Any], kind: str, known_namespaces: Iterable[str]) -> list[Term]:
    """Required ``podAffinity``/``podAntiAffinity`` terms of ``pod``, with matchLabelKeys folded in."""
    spec = pod.get("spec") or {}
    section = (spec.get("affinity") or {}).get(kind) or {}
    namespace = (pod.get("metadata") or {}).get("namespace") or "default"
    labels = (pod.get("metadata") or {}).get("labels") or {}
    terms: list[Term] = []
    for raw in section.get("requiredDuringSchedulingIgnoredDuringExecution") or []:
        selector = raw.get("labelSelector")
        if selector is None:
            continue  # a term with no selector matches no pod
        expressions = list(selector.get("matchExpressions") or [])
        for key in raw.get("matchLabelKeys") or []:
            if key in labels:
                expressions.append({"key": key, "operator": "In", "values": [labels[key]]})
        for key in raw.get("mismatchLabelKeys") or []:
            if key in labels:
                expressions.append({"key": key, "operator": "NotIn", "values": [labels[key]]})
        merged = {"matchLabels": selector.get("matchLabels") or {}, "matchExpressions": expressions}
        ns_selector = raw.get("namespaceSelector")
        namespaces: frozenset[str] | None
        if (
            ns_selector is not None
            and not ns_selector.get("matchLabels")
            and not ns_selector.get("matchExpressions")
        ):
            namespaces = None
        else:
            listed = set(raw.get("namespaces") or [])
            if ns_selector is not None:
                listed |= {
                    ns
                    for ns in known_namespaces
                    if match_label_selector(ns_selector, {"kubernetes.io/metadata.name": ns})
                }
            namespaces = frozenset(listed or {namespace})
        terms.append(Term(raw.get("topologyKey") or "", merged, namespaces))
    return terms


def term_matches(term: Term, pod: Mapping[str, Any]) -> bool:
    meta = pod.get("metadata") or {}
    if term.namespaces is not None and (meta.get("namespace") or "default") not in term.namespaces:
        return False
    return match_label_selector(term.selector, meta.get("labels"))


def cached_anti_terms(entry: PodEntry, state: ClusterState) -> list[Term]:
    """An existing pod's anti-affinity terms, parsed once per pod version."""
    terms = entry.cache.get("anti_terms")
    if terms is None:
        terms = affinity_terms(entry.pod, "podAntiAffinity", state.pods_by_namespace)
        entry.cache["anti_terms"] = terms
    return terms  # type: ignore[no-any-return]


@dataclass
class _Count:
    term: Term
    eligible: frozenset[str] | None  # node names whose pods count; None = every node
    skip_terminating: bool
    by_domain: Counter[str]


@dataclass
class _AntiGroup:
    term: Term
    domains: set[str]


class TopologyIndex:
    def __init__(self, state: ClusterState) -> None:
        self.state = state
        self._version = -1
        self._applied = 0
        self._counts: dict[tuple[Any, ...], _Count] = {}
        self._eligible: dict[tuple[Any, ...], tuple[frozenset[str], frozenset[str]]] = {}
        self._anti: dict[tuple[Any, ...], _AntiGroup] | None = None

    @classmethod
    def of(cls, state: ClusterState) -> TopologyIndex:
        index = state.derived.get("topology")
        if index is None:
            index = state.derived["topology"] = cls(state)
        return index  # type: ignore[no-any-return]

    # ------------------------------------------------------------------------------------------ freshness
    def _sync(self) -> None:
        state = self.state
        if self._version != state.topology_version:
            self._version = state.topology_version
            self._counts.clear()
            self._eligible.clear()
            self._anti = None
            self._applied = len(state.booked)
            return
        for entry, info in state.booked[self._applied :]:
            self._book(entry, info)
        self._applied = len(state.booked)

    def _book(self, entry: PodEntry, info: NodeInfo) -> None:
        for count in self._counts.values():
            if count.eligible is not None and info.name not in count.eligible:
                continue
            if count.skip_terminating and is_terminating(entry.pod):
                continue
            value = info.labels.get(count.term.topology_key)
            if value is not None and term_matches(count.term, entry.pod):
                count.by_domain[value] += 1
        if self._anti is not None and entry.key in self.state.anti_affinity_pods:
            self._add_anti_terms(entry, info)

    # -------------------------------------------------------------------------------------------- queries
    def eligible_nodes(
        self, key: tuple[Any, ...], topology_key: str, accepts: Callable[[NodeInfo], bool]
    ) -> tuple[frozenset[str], frozenset[str]]:
        """(node names, domains) of nodes with ``topology_key`` that ``accepts`` (memoised by ``key``)."""
        self._sync()
        found = self._eligible.get(key)
        if found is None:
            names = [
                info.name
                for info in self.state.nodes.values()
                if topology_key in info.labels and accepts(info)
            ]
            domains = frozenset(self.state.nodes[name].labels[topology_key] for name in names)
            found = self._eligible[key] = (frozenset(names), domains)
        return found

    def domain_counts(
        self,
        term: Term,
        *,
        eligible_key: tuple[Any, ...] | None = None,
        eligible: frozenset[str] | None = None,
        skip_terminating: bool = False,
    ) -> Counter[str]:
        """Pods matching ``term`` per value of its topology key (only on ``eligible`` nodes, if given)."""
        self._sync()
        key = (term.namespaces, term.selector_key, term.topology_key, eligible_key, skip_terminating)
        count = self._counts.get(key)
        if count is None:
            by_domain: Counter[str] = Counter()
            for entry, info in self.state.bound_pods_in_namespaces(term.namespaces):
                if eligible is not None and info.name not in eligible:
                    continue
                if skip_terminating and is_terminating(entry.pod):
                    continue
                value = info.labels.get(term.topology_key)
                if value is not None and term_matches(term, entry.pod):
                    by_domain[value] += 1
            count = self._counts[key] = _Count(term, eligible, skip_terminating, by_domain)
        return count.by_domain

    def blocked_by_existing(self, pod: Mapping[str, Any]) -> set[tuple[str, str]]:
        """(topology key, domain) pairs where a running pod's required anti-affinity rejects ``pod``."""
        self._sync()
        if self._anti is None:
            self._anti = {}
            for key in self.state.anti_affinity_pods:
                entry = self.state.pods.get(key)
                info = (
                    self.state.nodes.get(entry.node_name) if entry is not None and entry.node_name else None
                )
                if entry is not None and info is not None:
                    self._add_anti_terms(entry, info)
        blocked: set[tuple[str, str]] = set()
        for group in self._anti.values():
            if group.domains and term_matches(group.term, pod):
                blocked.update((group.term.topology_key, domain) for domain in group.domains)
        return blocked

    def _add_anti_terms(self, entry: PodEntry, info: NodeInfo) -> None:
        assert self._anti is not None
        for term in cached_anti_terms(entry, self.state):
            value = info.labels.get(term.topology_key)
            if value is None:
                continue
            group_key = (term.namespaces, term.selector_key, term.topology_key)
            group = self._anti.get(group_key)
            if group is None:
                group = self._anti[group_key] = _AntiGroup(term, set())
            group.domains.add(value)
