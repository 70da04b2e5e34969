"""Topology: which pods count for which selector, domains of any label key, hostname limits.

Kubernetes spreads and (anti-)affinities are statements about *counts of matching pods per domain*: the
nodes sharing one value of the constraint's topology key. The solver splits them by the size of the domain:

* **Every key but the hostname is a domain decided per pod, one pod at a time** (:class:`DomainRules`). A key
  is any node label: zone and capacity type vary per offering of a new node, every other key (architecture,
  instance type, a NodePool's own labels...) is fixed per template. Pods are judged *per placement*, as the
  kube-scheduler does: against the counts of the pods running and of those placed before them in this plan,
  never against pods placed later. Each pod in turn goes onto existing room if it can (a room's domain is its
  label), else it is pinned to a domain its new node must be in (:func:`pin_pod`). Pods that only match a
  counted selector (no constraint of their own) are placed and counted first, then pods with only
  preferences (:meth:`DomainRules.rank`), so every later check sees them.

  - spread (``maxSkew``, ``minDomains``): the domain must keep ``count + self - min(count) <= maxSkew``, the
    minimum taken over every domain with a node matching the pod's node affinity, tainted or not (Kubernetes'
    default ``nodeAffinityPolicy: Honor`` and ``nodeTaintsPolicy: Ignore``; with fewer such domains than
    ``minDomains`` the minimum is 0). A node without the key is no candidate (the kube-scheduler's "missing
    required label"). ``ScheduleAnyway`` is held like ``DoNotSchedule`` until the solver relaxes it, as
    Karpenter does (honoured when possible).
  - affinity: the domain must already hold a matching pod, except for the first of a group that matches its
    own selector when no pod anywhere matches (Kubernetes' rule); a node without the key fails it.
  - anti-affinity: no matching pod in the domain, in both directions; a node without the key passes.
  - preferred (anti-)affinity: among the domains the hard rules allow, the one with the highest score wins,
    the score being the kube-scheduler's ``InterPodAffinity``: the weight of every preferred affinity term
    with a matching pod in the domain, minus that of every anti-affinity term. Then the fewest pods counted by
    the pod's spreads, the least loaded, the name.

* **Hostname constraints are limits the packer checks per node** (:class:`HostnameRules`). Each
  hostname-level selector gets an id; a pod *matches* some ids and *limits* some: anti-affinity limits the
  count of matching pods on its node to 1 if the pod matches its own selector, else 0 (a preferred one, until
  relaxed, the same for the pod itself only: :func:`soft_limit`); a hostname spread limits it to
  ``maxSkew`` (``ScheduleAnyway``: softly, until relaxed; the minimum over hostnames is taken as 0, since a
  new empty node is always possible, which makes the rule safe whatever the kube-scheduler's view); a host
  port is a selector matched by its users with limit 1. A node keeps, per id, the count of matching pods and
  the smallest (hard) limit of the pods on it.

Namespaces are part of a selector: spread selectors count the pod's own namespace; affinity terms their
``namespaces`` (default: own) or all of them with an empty ``namespaceSelector``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from tenon.core.model import Pod, PodAffinityTerm, PodShape, TopologySpread, by_shape
from tenon.core.requirements import LabelSelector
from tenon.core.wellknown import HOSTNAME


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


def scope_of(term: PodAffinityTerm) -> ScopedSelector:
    return term_scope(term.selector, term.namespaces, term.all_namespaces)


class _Scope:
    """The selectors of one namespace (or of every namespace), by a label a pod needs to match them (the first
    of their ``matchLabels``), so a pod is checked against the few it may match, not against all of them."""

    def __init__(self) -> None:
        self.by_label: dict[tuple[str, str], list[int]] = defaultdict(list)
        self.others: list[int] = []

    def add(self, sid: int, selector: LabelSelector) -> None:
        if selector.nothing:
            return  # selects no pod
        if selector.match_labels:
            self.by_label[selector.match_labels[0]].append(sid)
        else:
            self.others.append(sid)

    def candidates(self, labels: Mapping[str, str], into: list[int]) -> None:
        into += self.others
        for pair in labels.items():
            found = self.by_label.get(pair)
            if found:
                into += found


class SelectorIndex:
    """Numbers selectors and answers "which of them does this pod match", cached by namespace and labels.

    A pod is checked only against the selectors of its namespace (or of every namespace) that it carries the
    first required label of: a cluster's bound pods would otherwise each be checked against every spread and
    affinity selector of the cluster (measured: 100 million checks for 10,000 pods of 10,000 workloads)."""

    def __init__(self) -> None:
        self.ids: dict[ScopedSelector | tuple[str, int, str], int] = {}
        self.selectors: list[ScopedSelector | tuple[str, int, str]] = []
        self._scopes: dict[str | None, _Scope] = defaultdict(_Scope)  # namespace (None: all) -> selectors
        self._cache: dict[tuple[str, frozenset[tuple[str, str]]], tuple[int, ...]] = {}

    def add(self, sel: ScopedSelector | tuple[str, int, str]) -> int:
        if sel not in self.ids:
            sid = self.ids[sel] = len(self.selectors)
            self.selectors.append(sel)
            if isinstance(sel, ScopedSelector):
                for namespace in (None,) if sel.namespaces is None else sel.namespaces:
                    self._scopes[namespace].add(sid, sel.selector)
            self._cache.clear()
        return self.ids[sel]

    def matching(self, pod: Pod) -> tuple[int, ...]:
        key = (pod.namespace, pod.label_set)
        found = self._cache.get(key)
        if found is None:
            candidates: list[int] = []
            for namespace in (pod.namespace, None):
                scope = self._scopes.get(namespace)
                if scope is not None:
                    scope.candidates(pod.labels, candidates)
            found = tuple(i for i in sorted(candidates) if self._selects(i, pod))
            self._cache[key] = found
        ports = tuple(
            self.ids[("port", p.port, p.protocol)]
            for p in pod.host_ports
            if ("port", p.port, p.protocol) in self.ids
        )
        return found + ports if ports else found

    def _selects(self, sid: int, pod: Pod) -> bool:
        sel = self.selectors[sid]
        return isinstance(sel, ScopedSelector) and sel.selector.matches(pod.labels)

    def describe(self, sid: int) -> str:
        sel = self.selectors[sid]
        if isinstance(sel, tuple):
            return f"host port {sel[1]}/{sel[2]}"
        return sel.selector.describe()


def soft_limit(sid: int) -> int:
    """The limit id of a *soft* limit on selector ``sid``: a preferred anti-affinity binds the pod that has it
    (it may not join a node holding matching pods) but, unlike a required one, not the pods that join after
    it (the kube-scheduler only scores it). Soft ids are negative, so nothing keeps them on a node."""
    return -1 - sid


def soft_target(limit_id: int) -> int:
    """The selector a soft limit id (:func:`soft_limit`) is about."""
    return -1 - limit_id


Features = tuple[tuple[int, ...], tuple[tuple[int, int], ...]]
"""A pod's hostname selector ids matched, and the (selector id, limit) pairs it sets on its node."""


@dataclass
class HostnameRules:
    """Per pod: hostname selector ids it matches and the limits it imposes on its node."""

    index: SelectorIndex = field(default_factory=SelectorIndex)
    _memo: dict[PodShape, Features] = field(default_factory=dict)  # what a pod's spec sets: once per shape

    def register(self, pods: Iterable[Pod]) -> None:
        self._memo.clear()
        seen: set[PodShape] = set()
        for pod in pods:
            if pod.limits_nothing or pod.shape in seen:  # no selector of its own, or registered already
                continue
            seen.add(pod.shape)
            for term in pod.pod_anti_affinity:
                if term.topology_key == HOSTNAME:
                    self.index.add(scope_of(term))
            for _, term in pod.preferred_pod_anti_affinity:
                if term.topology_key == HOSTNAME:
                    self.index.add(scope_of(term))
            for tsc in pod.topology_spread:
                if tsc.topology_key == HOSTNAME:
                    self.index.add(spread_scope(pod, tsc.selector))
            for port in pod.host_ports:
                self.index.add(("port", port.port, port.protocol))

    def features(self, pod: Pod) -> Features:
        found = self._memo.get(pod.shape)
        if found is None:
            found = self._memo[pod.shape] = self._features(pod)
        return found

    def _features(self, pod: Pod) -> Features:
        matches = self.index.matching(pod)
        if pod.limits_nothing:
            return matches, ()
        limits: dict[int, int] = {}
        for term in pod.pod_anti_affinity:
            if term.topology_key == HOSTNAME:
                sid = self.index.ids[scope_of(term)]
                limits[sid] = min(limits.get(sid, 1), 1 if sid in matches else 0)
        for _, term in pod.preferred_pod_anti_affinity:
            if term.topology_key == HOSTNAME:
                sid = self.index.ids[scope_of(term)]
                own = soft_limit(sid)
                limits[own] = min(limits.get(own, 1), 1 if sid in matches else 0)
        for tsc in pod.topology_spread:
            if tsc.topology_key == HOSTNAME:
                sid = self.index.ids[spread_scope(pod, tsc.selector)]
                if (
                    tsc.when_unsatisfiable != "DoNotSchedule"
                ):  # ScheduleAnyway: held by the pod, until relaxed
                    sid = soft_limit(sid)
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
        if sid < 0:  # soft: the pod's own preference, whatever the node holds
            target = soft_target(sid)
            if counts.get(target, 0) + (n if target in matches else 0) > limit:
                return False
            continue
        lim = min(limit, node_limits.get(sid, limit))
        if counts.get(sid, 0) + (n if sid in matches else 0) > lim:
            return False
    for sid in matches:
        node_lim = node_limits.get(sid)
        if node_lim is not None and counts.get(sid, 0) + n > node_lim:
            return False
    return True


# -- domains of every other key ----------------------------------------------------------------------------


class _KeyRules(NamedTuple):
    """One pod's constraints on one topology key, with their selector ids."""

    spreads: list[tuple[TopologySpread, int]]
    affinity: list[tuple[PodAffinityTerm, int]]
    anti: list[tuple[PodAffinityTerm, int]]
    preferred: list[tuple[int, int]]  # (signed weight: + affinity, - anti-affinity, selector id)

    @property
    def hard(self) -> bool:
        return bool(self.spreads or self.affinity or self.anti)


_NO_RULES = _KeyRules([], [], [], [])


def domain_keys(pods: Iterable[Pod]) -> list[str]:
    """Every topology key (but the hostname) some pod's spread or (anti-)affinity names, sorted."""
    keys: set[str] = set()
    seen: set[PodShape] = set()
    for pod in pods:
        if pod.topology_free or pod.shape in seen:
            continue
        seen.add(pod.shape)
        keys.update(t.topology_key for t in pod.topology_spread)
        keys.update(t.topology_key for t in (*pod.pod_affinity, *pod.pod_anti_affinity))
        keys.update(
            t.topology_key for _, t in (*pod.preferred_pod_affinity, *pod.preferred_pod_anti_affinity)
        )
    keys.discard(HOSTNAME)
    return sorted(keys)


Domains = Mapping[str, str | None]  # topology key -> the domain (label value) of a node, None: no such label
Eligible = Callable[[Pod, str, dict[str, str], bool], list[str]]
"""(pod, key, its pins so far, preferences relaxed) -> the domains of ``key`` its new node could be in."""


class DomainRules:
    """The counts of matching pods per domain of every key, and each pod's rules against them.

    Built over every pod that may be counted (pending and running), so the selectors are known; pods are
    counted as they are placed (:meth:`count`).
    """

    def __init__(self, keys: Sequence[str], pods: Iterable[Pod]):
        self.keys = list(keys)
        self.index = SelectorIndex()
        # what a pod's spec sets (its rules, the selectors it matches): worked out once per shape
        self._rules: dict[PodShape, dict[str, _KeyRules]] = {}
        self._matches: dict[PodShape, tuple[int, ...]] = {}
        self._ranks: dict[PodShape, int] = {}
        if self.keys:
            seen: set[PodShape] = set()
            for pod in pods:
                if pod.topology_free or pod.shape in seen:  # nothing to register, or registered already
                    continue
                seen.add(pod.shape)
                for key in self.keys:
                    self._register(pod, key)
        self.counts: dict[tuple[str, int], dict[str, int]] = defaultdict(lambda: defaultdict(int))
        self.totals: dict[int, int] = defaultdict(int)
        self.anti_in: dict[tuple[str, str], list[tuple[int, Pod]]] = defaultdict(list)
        self._stand_ins: dict[PodShape, Pod] = {}
        """One pod per shape counted by :meth:`count_existing`: its memos serve every pod of the shape."""

    def _register(self, pod: Pod, key: str) -> None:
        for tsc in pod.topology_spread:
            if tsc.topology_key == key:
                self.index.add(spread_scope(pod, tsc.selector))
        for term in (*pod.pod_affinity, *pod.pod_anti_affinity):
            if term.topology_key == key:
                self.index.add(scope_of(term))
        for _, term in (*pod.preferred_pod_affinity, *pod.preferred_pod_anti_affinity):
            if term.topology_key == key:
                self.index.add(scope_of(term))

    def _matching(self, pod: Pod) -> tuple[int, ...]:
        found = self._matches.get(pod.shape)
        if found is None:
            found = self._matches[pod.shape] = self.index.matching(pod)
        return found

    def rules(self, pod: Pod, key: str) -> _KeyRules:
        found = self._rules.get(pod.shape)
        if found is None:
            found = self._rules[pod.shape] = {k: self._key_rules(pod, k) for k in self.keys}
        return found[key]

    def _key_rules(self, pod: Pod, key: str) -> _KeyRules:
        terms = (*pod.pod_affinity, *pod.pod_anti_affinity)
        weighted = (*pod.preferred_pod_affinity, *pod.preferred_pod_anti_affinity)
        if not pod.topology_spread and not terms and not weighted:
            return _NO_RULES
        ids = self.index.ids
        anti = pod.preferred_pod_anti_affinity
        return _KeyRules(
            [(t, ids[spread_scope(pod, t.selector)]) for t in pod.topology_spread if t.topology_key == key],
            [(t, ids[scope_of(t)]) for t in pod.pod_affinity if t.topology_key == key],
            [(t, ids[scope_of(t)]) for t in pod.pod_anti_affinity if t.topology_key == key],
            [(w, ids[scope_of(t)]) for w, t in pod.preferred_pod_affinity if t.topology_key == key]
            + [(-w, ids[scope_of(t)]) for w, t in anti if t.topology_key == key],
        )

    def concerned(self, pod: Pod) -> bool:
        """Whether the pod has a rule on some key or is counted by one."""
        return bool(self._matching(pod)) or any(
            self.rules(pod, key).hard or self.rules(pod, key).preferred for key in self.keys
        )

    def rank(self, pod: Pod) -> int:
        """Order of placement: pods merely counted first, then those with only preferences, then spreads and
        anti-affinity, affinity last (to join their anchors). A pod without hard rules of its own goes before
        every pod with a spread, so none of them can unbalance a spread already judged: the plan holds in its
        final state too, whatever order the kube-scheduler then binds the pods in."""
        found = self._ranks.get(pod.shape)
        if found is None:
            found = self._ranks[pod.shape] = self._rank(pod)
        return found

    def _rank(self, pod: Pod) -> int:
        rules = [self.rules(pod, key) for key in self.keys]
        if any(r.affinity for r in rules):
            return 3
        if any(r.spreads or r.anti for r in rules):
            return 2
        return 1 if any(r.preferred for r in rules) else 0

    def count(self, pod: Pod, domains: Domains, n: int = 1) -> None:
        """``pod`` (``n`` pods of its shape) is placed in ``domains``: it counts for the selectors it matches,
        its anti-affinity holds there."""
        matching = self._matching(pod)
        for key in self.keys:
            dom = domains.get(key)
            if dom is None:
                continue
            for sid in matching:
                self.counts[(key, sid)][dom] += n
            for _, sid in self.rules(pod, key).anti:
                self.anti_in[(key, dom)].append((sid, pod))
        for sid in matching:
            self.totals[sid] += n

    def count_existing(self, pods: Iterable[Pod], domains: Domains) -> None:
        """The pods on one existing node (bound, nominated to it, bought with it) counted there, the pods of
        one shape in one step through one stand-in (a pod's anti-affinity is only ever checked against
        another pod, and none of these is a pod being placed)."""
        for pod, n in by_shape(pods):
            self.count(self._stand_ins.setdefault(pod.shape, pod), domains, n)

    # -- judging one domain ------------------------------------------------------------------------------
    def violation(self, pod: Pod, key: str, dom: str | None, counted_in: Sequence[str]) -> str:
        """Why ``pod`` may not be in ``dom`` of ``key`` ("" when it may); ``None``: the node lacks the key."""
        rules = self.rules(pod, key)
        matches = set(self._matching(pod))
        if dom is None:
            if rules.spreads or rules.affinity:
                return f"its topology constraints on {key} need a node labelled {key}"
            return ""
        why = self._spread_violation(key, rules, matches, dom, counted_in) if rules.spreads else ""
        if rules.affinity:
            why = self._affinity_violation(key, rules, matches, dom) or why
        if rules.anti:
            why = self._anti_affinity_violation(key, rules, dom) or why
        if self.anti_in.get((key, dom)):
            why = self._others_anti_affinity_violation(pod, key, matches, dom) or why
        return why

    def _spread_violation(
        self, key: str, rules: _KeyRules, matches: set[int], dom: str, counted_in: Sequence[str]
    ) -> str:
        reason = ""
        for tsc, sid in rules.spreads:
            counts = self.counts[(key, sid)]
            low = 0 if len(counted_in) < tsc.min_domains else min((counts[d] for d in counted_in), default=0)
            after = counts[dom] + (1 if sid in matches else 0)
            if after - low > tsc.max_skew:
                reason = (
                    f"topology spread on {key} (maxSkew {tsc.max_skew}, "
                    f"{tsc.selector.describe()}) cannot be met in any {key} it can use"
                )
        return reason

    def _affinity_violation(self, key: str, rules: _KeyRules, matches: set[int], dom: str) -> str:
        """A domain without a matching pod, unless no matching pod exists yet and the pod matches itself."""
        reason = ""
        for term, sid in rules.affinity:
            if self.counts[(key, sid)][dom] == 0 and not (self.totals[sid] == 0 and sid in matches):
                reason = f"pod affinity on {key} ({term.selector.describe()}): no matching pod can be joined"
        return reason

    def _anti_affinity_violation(self, key: str, rules: _KeyRules, dom: str) -> str:
        reason = ""
        for term, sid in rules.anti:
            if self.counts[(key, sid)][dom] > 0:
                reason = f"pod anti-affinity on {key} ({term.selector.describe()}): every {key} is taken"
        return reason

    def _others_anti_affinity_violation(self, pod: Pod, key: str, matches: set[int], dom: str) -> str:
        for sid, other in self.anti_in[(key, dom)]:
            if sid in matches and other is not pod:
                return f"another pod's anti-affinity on {key} excludes it from every {key} it can use"
        return ""

    def allows(self, pod: Pod, domains: Domains, counted_in: Mapping[str, Sequence[str]]) -> bool:
        """Whether a node in ``domains`` is allowed for ``pod`` by its rules on every key."""
        return not any(
            self.violation(pod, key, domains.get(key), counted_in.get(key, ())) for key in self.keys
        )

    def _score(self, pod: Pod, key: str, dom: str) -> tuple[int, int, int, str]:
        """Lower is better: preferred (anti-)affinity score negated, spread counts, load, name."""
        rules = self.rules(pod, key)
        preference = sum(w for w, sid in rules.preferred if self.counts[(key, sid)][dom] > 0)
        spread = sum(self.counts[(key, sid)][dom] for _, sid in rules.spreads)
        load = sum(self.counts[(key, sid)][dom] for sid in self._matching(pod))
        return (-preference, spread, load, dom)

    def pin(
        self, pod: Pod, key: str, eligible: Sequence[str], counted_in: Sequence[str]
    ) -> tuple[str | None, str]:
        """The best domain of ``key`` among ``eligible`` the pod's rules allow, or ``None`` and why not."""
        valid = []
        reason = ""
        for dom in eligible:
            why = self.violation(pod, key, dom, counted_in)
            if why:
                reason = why
            else:
                valid.append(self._score(pod, key, dom))
        if not valid:
            return None, reason or f"no node offers a {key} for its topology constraints"
        return min(valid)[3], ""


@dataclass
class DomainOutcome:
    pins: dict[str, dict[str, str]]  # pod key -> {topology key: domain}
    failures: dict[str, str]  # pod key -> reason
    relaxed: set[str]  # pods pinned only once their preferences were dropped


def pin_pod(
    rules: DomainRules,
    pod: Pod,
    eligible: Eligible,
    counted_in: Callable[[Pod, str], Sequence[str]],
    outcome: DomainOutcome,
) -> None:
    """Pin one pod concerned by a domain rule to one domain per key and count it there (into ``outcome``). A
    pod whose preferred node affinity leaves no domain its rules allow is tried again with its preferences
    relaxed (Karpenter's order: preferences go before a spread is given up)."""
    pins, reason = _pin_one(rules, pod, eligible, counted_in, relaxed=False)
    if pins is None:
        pins, reason = _pin_one(rules, pod, eligible, counted_in, relaxed=True)
        if pins is not None:
            outcome.relaxed.add(pod.key)
    if pins is None:
        outcome.failures[pod.key] = reason
        return
    rules.count(pod, pins)
    if pins:
        outcome.pins[pod.key] = pins


def _pin_one(
    rules: DomainRules,
    pod: Pod,
    eligible: Eligible,
    counted_in: Callable[[Pod, str], Sequence[str]],
    relaxed: bool,
) -> tuple[dict[str, str] | None, str]:
    """The pod's domain on every key, each key narrowed by the ones before it; ``None`` and why on failure."""
    pins: dict[str, str] = {}
    for key in rules.keys:
        options = eligible(pod, key, pins, relaxed)
        key_rules = rules.rules(pod, key)
        if not options:
            if key_rules.spreads or key_rules.affinity:
                return None, f"no node it can use is labelled {key}, which its topology constraints need"
            continue  # counted nowhere on this key: its nodes do not have it
        dom, reason = rules.pin(pod, key, options, counted_in(pod, key))
        if dom is None:
            return None, reason
        pins[key] = dom
    return pins, ""
