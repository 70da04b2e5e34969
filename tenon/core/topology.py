"""Topology: which pods count for which selector, zone/capacity-type domains, hostname limits.

Kubernetes spreads and (anti-)affinities are statements about *counts of matching pods per domain*. The solver
splits them by the size of the domain:

* **Zone and capacity-type constraints are decided before packing** (:func:`assign_domains`). Every pending
  pod that has a zone/capacity-type topology spread constraint, a required pod affinity or anti-affinity on
  that key, or that *matches* a selector such a constraint counts, is pinned to one domain, one pod at a time
  in a fixed order, counting the pods already running (bound pods on Nodes) and the ones pinned so far:

  - spread (``maxSkew``, ``minDomains``): the domain must keep ``count + self - min(count) <= maxSkew``, the
    minimum taken over every domain with a node matching the pod's node affinity, tainted or not (Kubernetes'
    default policies; with fewer such domains than ``minDomains`` the minimum is 0); among valid domains the
    least loaded wins, so pinned pods end up balanced (the final state holds the rule, not only the moment of
    placement). ``ScheduleAnyway`` constraints steer the choice but never reject.
  - affinity: the domain must already hold a matching pod, except for the first of a group that matches its
    own selector (Kubernetes' rule), which chooses for the group.
  - anti-affinity: no matching pod in the domain, in both directions.

  Pods matching a counted selector without constraints of their own are pinned too (least loaded), and first,
  so that neither they nor the packer can unbalance a spread behind its back.

* **Hostname constraints are limits the packer checks per node** (:class:`HostnameRules`). Each
  hostname-level selector gets an id; a pod *matches* some ids and *limits* some: anti-affinity limits the
  count of matching pods on its node to 1 if the pod matches its own selector, else 0; a hostname spread
  limits it to ``maxSkew`` (the minimum over hostnames is taken as 0, since a new empty node is always
  possible, which makes the rule safe whatever the kube-scheduler's view); a host port is a selector matched
  by its users with limit 1. A node keeps, per id, the count of matching pods and the smallest limit of the
  pods on it.

Namespaces are part of a selector: spread selectors count the pod's own namespace; affinity terms their
``namespaces`` (default: own) or all of them with an empty ``namespaceSelector``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from tenon.core.model import Pod, PodAffinityTerm, TopologySpread
from tenon.core.requirements import LabelSelector
from tenon.core.wellknown import CAPACITY_TYPE, HOSTNAME, ZONE

DOMAIN_KEYS = (ZONE, CAPACITY_TYPE)


@dataclass(frozen=True)
class ScopedSelector:
    selector: LabelSelector
    namespaces: frozenset[str] | None  # None: every namespace

    def matches(self, pod: Pod) -> bool:
        if self.namespaces is not None and pod.namespace not in self.namespaces:
            return False
        return self.selector.matches(pod.labels)


def spread_scope(pod: Pod, selector: LabelSelector) -> ScopedSelector:
    return ScopedSelector(selector, frozenset((pod.namespace,)))


def term_scope(
    term_selector: LabelSelector, namespaces: Iterable[str], all_namespaces: bool
) -> ScopedSelector:
    return ScopedSelector(term_selector, None if all_namespaces else frozenset(namespaces))


class SelectorIndex:
    """Numbers selectors and answers "which of them does this pod match", cached by namespace and labels."""

    def __init__(self) -> None:
        self.ids: dict[ScopedSelector | tuple[str, int, str], int] = {}
        self.selectors: list[ScopedSelector | tuple[str, int, str]] = []
        self._cache: dict[tuple[str, frozenset[tuple[str, str]]], tuple[int, ...]] = {}

    def add(self, sel: ScopedSelector | tuple[str, int, str]) -> int:
        if sel not in self.ids:
            self.ids[sel] = len(self.selectors)
            self.selectors.append(sel)
            self._cache.clear()
        return self.ids[sel]

    def matching(self, pod: Pod) -> tuple[int, ...]:
        key = (pod.namespace, frozenset(pod.labels.items()))
        found = self._cache.get(key)
        if found is None:
            found = tuple(
                i for i, s in enumerate(self.selectors) if isinstance(s, ScopedSelector) and s.matches(pod)
            )
            self._cache[key] = found
        ports = tuple(
            self.ids[("port", p.port, p.protocol)]
            for p in pod.host_ports
            if ("port", p.port, p.protocol) in self.ids
        )
        return found + ports if ports else found

    def describe(self, sid: int) -> str:
        sel = self.selectors[sid]
        if isinstance(sel, tuple):
            return f"host port {sel[1]}/{sel[2]}"
        return sel.selector.describe()


@dataclass
class HostnameRules:
    """Per pod: hostname selector ids it matches and the limits it imposes on its node."""

    index: SelectorIndex = field(default_factory=SelectorIndex)
    _memo: dict[int, tuple[tuple[int, ...], tuple[tuple[int, int], ...]]] = field(default_factory=dict)

    def register(self, pods: Iterable[Pod]) -> None:
        self._memo.clear()
        for pod in pods:
            for term in pod.pod_anti_affinity:
                if term.topology_key == HOSTNAME:
                    self.index.add(term_scope(term.selector, term.namespaces, term.all_namespaces))
            for tsc in pod.topology_spread:
                if tsc.topology_key == HOSTNAME and tsc.when_unsatisfiable == "DoNotSchedule":
                    self.index.add(spread_scope(pod, tsc.selector))
            for port in pod.host_ports:
                self.index.add(("port", port.port, port.protocol))

    def features(self, pod: Pod) -> tuple[tuple[int, ...], tuple[tuple[int, int], ...]]:
        found = self._memo.get(id(pod))
        if found is None:
            found = self._memo[id(pod)] = self._features(pod)
        return found

    def _features(self, pod: Pod) -> tuple[tuple[int, ...], tuple[tuple[int, int], ...]]:
        matches = self.index.matching(pod)
        limits: dict[int, int] = {}
        for term in pod.pod_anti_affinity:
            if term.topology_key == HOSTNAME:
                sid = self.index.ids[term_scope(term.selector, term.namespaces, term.all_namespaces)]
                limits[sid] = min(limits.get(sid, 1), 1 if sid in matches else 0)
        for tsc in pod.topology_spread:
            if tsc.topology_key == HOSTNAME and tsc.when_unsatisfiable == "DoNotSchedule":
                sid = self.index.ids[spread_scope(pod, tsc.selector)]
                limits[sid] = min(limits.get(sid, tsc.max_skew), tsc.max_skew)
        for port in pod.host_ports:
            limits[self.index.ids[("port", port.port, port.protocol)]] = 1
        return matches, tuple(sorted(limits.items()))


def allows_on_node(
    matches: Sequence[int],
    limits: Sequence[tuple[int, int]],
    counts: dict[int, int],
    node_limits: dict[int, int],
    n: int = 1,
) -> bool:
    """Whether ``n`` pods with these features can join a node holding ``counts`` under ``node_limits``."""
    for sid, limit in limits:
        lim = min(limit, node_limits.get(sid, limit))
        if counts.get(sid, 0) + (n if sid in matches else 0) > lim:
            return False
    for sid in matches:
        node_lim = node_limits.get(sid)
        if node_lim is not None and counts.get(sid, 0) + n > node_lim:
            return False
    return True


@dataclass
class DomainOutcome:
    pins: dict[str, dict[str, str]]  # pod key -> {topology key: domain}
    failures: dict[str, str]  # pod key -> reason


def _domain_constraints(pod: Pod, key: str):
    spreads = [t for t in pod.topology_spread if t.topology_key == key]
    affinity = [t for t in pod.pod_affinity if t.topology_key == key]
    anti = [t for t in pod.pod_anti_affinity if t.topology_key == key]
    return spreads, affinity, anti


def _term_id(index: SelectorIndex, term: PodAffinityTerm) -> int:
    return index.ids[term_scope(term.selector, term.namespaces, term.all_namespaces)]


class _PodRules(NamedTuple):
    """One pod's constraints on one topology key, with their selector ids, and the ids it matches."""

    spreads: list[tuple[TopologySpread, int]]
    affinity: list[tuple[PodAffinityTerm, int]]
    anti: list[tuple[PodAffinityTerm, int]]
    matches: set[int]


class _DomainPinner:
    """Pins pods to the domains of one topology key (zone or capacity type), one pod at a time.

    It keeps, per selector id, the count of matching pods per domain (running and pinned so far), the
    anti-affinity terms of the pods in each domain, and the spreads of pinned pods that a later pod joining
    their domain must keep within ``maxSkew``.
    """

    def __init__(self, key: str, pods: Iterable[Pod]):
        self.key = key
        self.index = SelectorIndex()
        for pod in pods:
            spreads, affinity, anti = _domain_constraints(pod, key)
            for tsc in spreads:
                self.index.add(spread_scope(pod, tsc.selector))
            for term in affinity + anti:
                self.index.add(term_scope(term.selector, term.namespaces, term.all_namespaces))
        self.counts: dict[int, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        self.totals: dict[int, int] = defaultdict(int)
        self.anti_in: dict[str, list[tuple[int, Pod]]] = defaultdict(list)
        # spreads of pods already pinned, by (selector, their domain): a later pod joining that domain must
        # keep them within their maxSkew too, so the final state (not just each moment) honours every spread
        self.active: dict[tuple[int, str], set[tuple[int, tuple[str, ...]]]] = defaultdict(set)

    def count(self, pod: Pod, dom: str, anti: Iterable[PodAffinityTerm]) -> None:
        """``pod`` is in ``dom``: it counts for the selectors it matches, its anti-affinity holds there."""
        for sid in self.index.matching(pod):
            self.counts[sid][dom] += 1
            self.totals[sid] += 1
        for term in anti:
            self.anti_in[dom].append((_term_id(self.index, term), pod))

    def order(self, pending: Sequence[Pod], failures: dict[str, str]) -> list[Pod]:
        """The pods to pin, in the order they are pinned.

        Pods without constraints of their own go first (least loaded domain), so that no later pod can break
        a spread already checked; affinity groups last, to join their anchors.
        """
        todo = []
        for pod in pending:
            if pod.key in failures:
                continue
            spreads, affinity, anti = _domain_constraints(pod, self.key)
            if spreads or affinity or anti or self.index.matching(pod):
                rank = 2 if affinity else (1 if spreads or anti else 0)
                todo.append((rank, pod.key, pod))
        todo.sort(key=lambda item: (item[0], item[1]))
        return [pod for _, _, pod in todo]

    def pin(self, pod: Pod, eligible: list[str], counted_in: list[str]) -> tuple[str | None, str]:
        """The domain ``pod`` is pinned to and counted in, or ``None`` and why no domain would do.

        Among the domains that break no rule, the one with the fewest pods counted by its spreads wins, then
        the least loaded by the selectors it matches, then the name.
        """
        spreads, affinity, anti = _domain_constraints(pod, self.key)
        rules = _PodRules(
            [(tsc, self.index.ids[spread_scope(pod, tsc.selector)]) for tsc in spreads],
            [(term, _term_id(self.index, term)) for term in affinity],
            [(term, _term_id(self.index, term)) for term in anti],
            set(self.index.matching(pod)),
        )
        valid: list[tuple[int, int, str]] = []
        reason = ""
        for dom in eligible:
            why = self._violation(pod, rules, dom, counted_in)
            if why:
                reason = why
                continue
            score_spread = sum(self.counts[sid][dom] for _, sid in rules.spreads)
            valid.append((score_spread, sum(self.counts[sid][dom] for sid in rules.matches), dom))
        if not valid:
            return None, reason
        dom = min(valid)[2]
        for tsc, sid in rules.spreads:
            if tsc.when_unsatisfiable == "DoNotSchedule" and len(counted_in) >= tsc.min_domains:
                self.active[(sid, dom)].add((tsc.max_skew, tuple(counted_in)))
        self.count(pod, dom, anti)
        return dom, ""

    def _violation(self, pod: Pod, rules: _PodRules, dom: str, counted_in: Sequence[str]) -> str:
        """Why ``pod`` may not join ``dom`` ("" when it may): the last rule it would break, in the order
        spreads, affinity, anti-affinity, other pods' anti-affinity, spreads of pods pinned earlier."""
        why = self._spread_violation(rules, dom, counted_in) if rules.spreads else ""
        if rules.affinity:
            why = self._affinity_violation(rules, dom) or why
        if rules.anti:
            why = self._anti_affinity_violation(rules, dom) or why
        if self.anti_in.get(dom):
            why = self._others_anti_affinity_violation(pod, rules.matches, dom) or why
        if self.active:
            why = self._pinned_spread_violation(rules.matches, dom) or why
        return why

    # Each check returns the reason of the *last* rule of its kind that ``dom`` breaks ("" when none).

    def _spread_violation(self, rules: _PodRules, dom: str, counted_in: Sequence[str]) -> str:
        reason = ""
        for tsc, sid in rules.spreads:
            counts = self.counts[sid]
            low = 0 if len(counted_in) < tsc.min_domains else min(counts[d] for d in counted_in)
            after = counts[dom] + (1 if sid in rules.matches else 0)
            if after - low > tsc.max_skew and tsc.when_unsatisfiable == "DoNotSchedule":
                reason = (
                    f"topology spread on {self.key} (maxSkew {tsc.max_skew}, "
                    f"{tsc.selector.describe()}) cannot be met in any {self.key}"
                )
        return reason

    def _affinity_violation(self, rules: _PodRules, dom: str) -> str:
        """A domain without a matching pod, unless no matching pod exists yet and the pod matches itself."""
        reason = ""
        for term, sid in rules.affinity:
            if self.counts[sid][dom] == 0 and not (self.totals[sid] == 0 and sid in rules.matches):
                reason = (
                    f"pod affinity on {self.key} ({term.selector.describe()}): no matching pod can be joined"
                )
        return reason

    def _anti_affinity_violation(self, rules: _PodRules, dom: str) -> str:
        reason = ""
        for term, sid in rules.anti:
            if self.counts[sid][dom] > 0:
                reason = (
                    f"pod anti-affinity on {self.key} ({term.selector.describe()}): every {self.key} is taken"
                )
        return reason

    def _others_anti_affinity_violation(self, pod: Pod, matches: set[int], dom: str) -> str:
        for sid, other in self.anti_in[dom]:
            if sid in matches and other is not pod:
                return f"another pod's anti-affinity on {self.key} excludes it from every {self.key}"
        return ""

    def _pinned_spread_violation(self, matches: set[int], dom: str) -> str:
        """Joining ``dom`` would put the spread of a pod pinned earlier over its ``maxSkew``."""
        reason = ""
        for sid in matches:
            counts = self.counts[sid]
            for max_skew, spread_doms in self.active.get((sid, dom), ()):
                if counts[dom] + 1 - min(counts[d] for d in spread_doms) > max_skew:
                    reason = (
                        f"joining any {self.key} it can use would break the topology spread "
                        f"(maxSkew {max_skew}) of pods already placed"
                    )
        return reason


def assign_domains(
    pending: Sequence[Pod],
    domains_of: dict[str, dict[str, set[str]]],
    placed: Sequence[tuple[Pod, dict[str, str]]],
    spread_domains_of: dict[str, dict[str, set[str]]] | None = None,
) -> DomainOutcome:
    """Pin pods with zone/capacity-type constraints (and the pods those constraints count) to one domain.

    ``domains_of[pod key][topology key]`` is the set of domains the pod could land in; ``spread_domains_of``
    the (larger) set a spread counts for its minimum: Kubernetes' defaults ``nodeAffinityPolicy: Honor`` and
    ``nodeTaintsPolicy: Ignore`` mean every domain with a node matching the pod's node affinity counts,
    tainted or not (default: ``domains_of``). ``placed`` lists pods already running with their domains.
    """
    spread_domains_of = spread_domains_of or {}
    pins: dict[str, dict[str, str]] = defaultdict(dict)
    failures: dict[str, str] = {}
    for key in DOMAIN_KEYS:
        pinner = _DomainPinner(key, list(pending) + [p for p, _ in placed])
        if not pinner.index.selectors:
            continue
        for pod, doms in placed:
            dom = doms.get(key)
            if dom is not None:
                pinner.count(pod, dom, _domain_constraints(pod, key)[2])
        for pod in pinner.order(pending, failures):
            eligible = sorted(d for d in domains_of.get(pod.key, {}).get(key, set()) if d)
            if not eligible:
                spreads, affinity, anti = _domain_constraints(pod, key)
                if affinity or anti or any(t.when_unsatisfiable == "DoNotSchedule" for t in spreads):
                    failures[pod.key] = f"no node offers a {key} for its topology constraints"
                continue
            counted_in = (
                sorted(d for d in spread_domains_of.get(pod.key, {}).get(key, set()) if d) or eligible
            )
            dom, reason = pinner.pin(pod, eligible, counted_in)
            if dom is None:
                failures[pod.key] = reason
            else:
                pins[pod.key][key] = dom
    return DomainOutcome(dict(pins), failures)
