"""What the packer packs: units of pods that share a node, with what they may use, grouped into classes.

* A **unit** is one pod, or pods bound together by required pod affinity on the hostname (transitively), and
  by preferred hostname affinity when the merged unit still fits a node (heaviest preference first): they
  go onto one new node. A unit larger than any node is cut as the kube-scheduler would place it: the first
  pod opens a node (no matching pod exists yet), the next ones join while they fit, and the rest cannot start
  (their matching pods are on a full node) (:func:`cut_to_fit`).
* :class:`PinnedFeasibility` narrows a pod's feasible templates and offerings to the domains it was pinned
  to: zone and capacity type per offering, any other key by the template's label.
* :class:`PendingClasses` groups identical units (same requests, offerings, hostname features, templates)
  into classes, and keeps what each NodePool said about those it could not take.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tenon.core.model import Pod, PodAffinityTerm
from tenon.core.packing import PackClass
from tenon.core.templates import OfferKey, Template, fits
from tenon.core.topology import ScopedSelector, scope_of
from tenon.core.wellknown import CAPACITY_TYPE, HOSTNAME, ZONE

Feasibility = dict[int, frozenset[OfferKey]]
Item = tuple[
    list[Pod],  # the pods that must share a node (one, without hostname pod affinity)
    tuple[int, ...],  # their summed requests
    frozenset[OfferKey] | None,  # offerings allowed (None: any)
    tuple[int, ...],  # hostname selector ids matched
    tuple[tuple[int, int], ...],  # hostname limits set
    Feasibility,  # template index -> offerings accepted there
]


class _Groups:
    """Union-find over pods, each group's members kept (the smaller list joins the larger)."""

    def __init__(self, pods: Sequence[Pod]):
        self.parent = {p.key: p.key for p in pods}
        self.members: dict[str, list[Pod]] = {p.key: [p] for p in pods}

    def find(self, k: str) -> str:
        while self.parent[k] != k:
            self.parent[k] = self.parent[self.parent[k]]
            k = self.parent[k]
        return k

    def join(self, a: str, b: str) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra == rb:
            return
        if len(self.members[ra]) > len(self.members[rb]):
            ra, rb = rb, ra
        self.parent[ra] = rb
        self.members[rb] += self.members.pop(ra)


class _ByLabels:
    """Pods by (namespace, labels): a selector is matched once per distinct label set, not once per pod."""

    def __init__(self, pods: Sequence[Pod]):
        self.buckets: dict[tuple[str, frozenset[tuple[str, str]]], list[Pod]] = {}
        for pod in pods:
            self.buckets.setdefault((pod.namespace, pod.label_set), []).append(pod)
        self._found: dict[ScopedSelector, list[Pod]] = {}

    def matching(self, sel: ScopedSelector) -> list[Pod]:
        found = self._found.get(sel)
        if found is None:
            found = [p for bucket in self.buckets.values() if sel.matches(bucket[0]) for p in bucket]
            self._found[sel] = found
        return found


MAX_PREFERRED_TRIES = 8  # groups a preferred hostname affinity term tries to join, at most
Summary = tuple[tuple[int, ...], Feasibility]
"""A group's summed requests and the templates (with offerings) all its pods accept and it fits."""


class Fitting:
    """How groups of pods fit nodes: a pod's own summary, and two summaries put together (an empty
    feasibility: the merged group fits no template)."""

    def __init__(self, of_pod: Callable[[Pod], Summary], templates: Sequence[Template]):
        self.of_pod = of_pod
        self.templates = templates

    def merge(self, a: Summary, b: Summary) -> Summary:
        vec = tuple(x + y for x, y in zip(a[0], b[0], strict=True))
        small, large = (a[1], b[1]) if len(a[1]) <= len(b[1]) else (b[1], a[1])
        feasible = {}
        for i, offers in small.items():
            other = large.get(i)
            if other is not None and fits(vec, self.templates[i].alloc):
                common = offers & other
                if common:
                    feasible[i] = common
        return vec, feasible


def hostname_affinity_groups(pods: Sequence[Pod], fitting: Fitting | None = None) -> list[list[Pod]]:
    """Pods bound together by required pod affinity on hostname (transitively: a pod and every pod its term
    matches), then by preferred hostname affinity, heaviest first, when the merged group still fits a node
    (``fitting``)."""
    groups = _Groups(pods)
    index = _ByLabels(pods)
    joined: set[ScopedSelector] = set()
    for pod in pods:
        for term in pod.pod_affinity:
            if term.topology_key != HOSTNAME:
                continue
            sel = scope_of(term)
            matching = index.matching(sel)
            if sel not in joined:  # every pod a selector matches goes together: once per selector
                joined.add(sel)
                for other in matching[1:]:
                    groups.join(other.key, matching[0].key)
            if matching:
                groups.join(pod.key, matching[0].key)
    preferred = sorted(
        (
            (w, pod.key, t)
            for pod in pods
            for w, t in pod.preferred_pod_affinity
            if t.topology_key == HOSTNAME
        ),
        key=lambda x: (-x[0], x[1]),
    )
    if preferred and fitting is not None:
        _join_preferred(groups, index, preferred, fitting)
    return [list(members) for members in groups.members.values()]


def _join_preferred(
    groups: _Groups, index: _ByLabels, preferred: Sequence[tuple[int, str, PodAffinityTerm]], fitting: Fitting
) -> None:
    """Each preferred term joins its pod's group to the first group of a matching pod that still fits;
    groups are summarized once and summaries merged, so a try costs the templates, not the pods."""
    summaries: dict[str, Summary] = {}

    def summary(root: str) -> Summary:
        found = summaries.get(root)
        if found is None:
            members = groups.members[root]
            found = fitting.of_pod(members[0])
            for pod in members[1:]:
                found = fitting.merge(found, fitting.of_pod(pod))
            summaries[root] = found
        return found

    for _, key, term in preferred:
        tried: set[str] = set()
        for other in index.matching(scope_of(term)):
            mine, theirs = groups.find(key), groups.find(other.key)
            if theirs == mine or theirs in tried:
                continue
            merged = fitting.merge(summary(mine), summary(theirs))
            if merged[1]:
                groups.join(other.key, key)
                summaries[groups.find(key)] = merged
                break
            tried.add(theirs)
            if len(tried) >= MAX_PREFERRED_TRIES:
                break


def cut_to_fit(
    members: Sequence[Pod],
    vec: Mapping[str, tuple[int, ...]],
    feasible: Feasibility,
    templates: Sequence[Template],
) -> tuple[list[Pod], list[Pod]]:
    """The pods of a unit too large for one node that the kube-scheduler would place together (largest first,
    each joining while it fits, on the template that takes the most), and the others."""
    order = sorted(members, key=lambda p: (tuple(-x for x in vec[p.key]), p.key))
    best: tuple[int, float, list[Pod]] = (0, 0.0, [])
    for index in sorted(feasible, key=lambda i: templates[i].alloc, reverse=True)[:50]:
        alloc = templates[index].alloc
        used = [0] * len(alloc)
        taken: list[Pod] = []
        for pod in order:
            after = [u + r for u, r in zip(used, vec[pod.key], strict=True)]
            if fits(tuple(after), alloc):
                used, taken = after, [*taken, pod]
        if len(taken) > best[0] or (len(taken) == best[0] and templates[index].min_price < best[1]):
            best = (len(taken), templates[index].min_price, taken)
    kept = best[2]
    return kept, [p for p in members if p not in kept]


class PinnedFeasibility:
    """A pod's feasible templates and offerings narrowed to the domains it is pinned to."""

    def __init__(self, templates: Sequence[Template]):
        self.templates = templates
        # pods of one spec share their feasibility: narrowed once per (feasibility, pins)
        self._cache: dict[tuple[int, tuple[tuple[str, str], ...]], tuple[Feasibility, Feasibility]] = {}
        # and the same offerings recur across specs: each set filtered once per (zone, capacity type)
        self._offers: dict[tuple[str | None, str | None], dict[frozenset[OfferKey], frozenset[OfferKey]]] = {}

    def narrow(self, feasible: Feasibility, pins: Mapping[str, str]) -> Feasibility:
        if not pins:
            return feasible
        key = (id(feasible), tuple(sorted(pins.items())))
        found = self._cache.get(key)
        if found is None:
            found = (feasible, self._narrowed(feasible, pins))  # kept with its source: ids stay unique
            self._cache[key] = found
        return found[1]

    def _narrowed(self, feasible: Feasibility, pins: Mapping[str, str]) -> Feasibility:
        zone, capacity_type = pins.get(ZONE), pins.get(CAPACITY_TYPE)
        labelled = [(k, v) for k, v in pins.items() if k not in (ZONE, CAPACITY_TYPE)]
        templates = self.templates
        cache = self._offers.setdefault((zone, capacity_type), {})
        out: Feasibility = {}
        for i, offers in feasible.items():
            if labelled and any(templates[i].labels.get(k) != v for k, v in labelled):
                continue
            kept = cache.get(offers)
            if kept is None:
                kept = cache[offers] = frozenset(
                    o
                    for o in offers
                    if (zone is None or o[0] == zone) and (capacity_type is None or o[1] == capacity_type)
                )
            if kept:
                out[i] = kept
        return out


_ClassKey = tuple[  # everything that matters for packing
    tuple[int, ...],  # requests
    frozenset[OfferKey] | None,  # offerings allowed (None: any)
    tuple[int, ...],  # hostname selectors matched
    tuple[tuple[int, int], ...],  # hostname limits set
    frozenset[int],  # templates allowed
]


class PendingClasses:
    """Items not packed yet, grouped into classes of identical items, with what each pool said about them."""

    def __init__(self, items: Sequence[Item]):
        self.classes: dict[_ClassKey, list[list[str]]] = defaultdict(list)  # class -> pod keys per item
        self.shape: dict[_ClassKey, tuple[Any, ...]] = {}  # class -> (vec, okeys, matches, limits, feasible)
        template_sets: dict[int, tuple[Feasibility, frozenset[int]]] = {}  # items share feasibility dicts
        for members, vec, okeys, matches, limits, feasible in items:
            found = template_sets.get(id(feasible))
            if found is None:
                found = template_sets[id(feasible)] = (feasible, frozenset(feasible))
            key = (vec, okeys, matches, limits, found[1])
            self.classes[key].append([p.key for p in members])
            self.shape[key] = (vec, okeys, matches, limits, feasible)
        self.keys = sorted(self.classes, key=lambda k: min(m[0] for m in self.classes[k]))
        self.tried: dict[_ClassKey, dict[str, str]] = {k: {} for k in self.keys}  # class -> pool -> why not

    def pack_classes(self, here: Sequence[_ClassKey], tpl_ids: frozenset[int]) -> list[PackClass]:
        """The classes ``here`` as the packer takes them, limited to one pool's templates ``tpl_ids``."""
        out = []
        # the key holds the templates of the class's feasibility: one intersection per distinct set of them
        in_pool: dict[frozenset[int], frozenset[int]] = {}
        interned: dict[frozenset[int], frozenset[int]] = {}
        for i, k in enumerate(here):
            vec, okeys, matches, limits, _ = self.shape[k]
            tset = in_pool.get(k[4])
            if tset is None:
                tset = k[4] & tpl_ids
                tset = in_pool[k[4]] = interned.setdefault(tset, tset)
            members = list(self.classes[k])
            out.append(PackClass(i, vec, len(members), okeys, matches, limits, tset, members))
        return out

    def keep_leftovers(
        self, pool: str, here: Sequence[_ClassKey], packed: Sequence[PackClass], taken: dict[int, int]
    ) -> None:
        """What ``pool`` did not take stays pending for the next pool, and so do classes it could not use."""
        leftover: dict[_ClassKey, list[list[str]]] = {}
        for ci, c in enumerate(packed):
            rest = c.members[taken[ci] :]
            if rest:
                leftover[here[ci]] = rest
                self.tried[here[ci]].setdefault(pool, "NodePool could not take it")
        offered = set(here)
        next_keys = []
        for k in self.keys:
            if k in leftover:
                self.classes[k] = leftover[k]
                next_keys.append(k)
            elif k not in offered:
                next_keys.append(k)
        self.keys = next_keys
