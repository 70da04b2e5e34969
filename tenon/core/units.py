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

from tenon.core.model import Pod
from tenon.core.packing import PackClass
from tenon.core.templates import OfferKey, Template, fits
from tenon.core.topology import scope_of
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
    """Union-find over pod keys."""

    def __init__(self, pods: Sequence[Pod]):
        self.parent = {p.key: p.key for p in pods}

    def find(self, k: str) -> str:
        while self.parent[k] != k:
            self.parent[k] = self.parent[self.parent[k]]
            k = self.parent[k]
        return k

    def join(self, a: str, b: str) -> None:
        self.parent[self.find(a)] = self.find(b)


def hostname_affinity_groups(
    pods: Sequence[Pod], fits_together: Callable[[list[Pod]], bool] | None = None
) -> list[list[Pod]]:
    """Pods bound together by required pod affinity on hostname (transitively), then by preferred hostname
    affinity, heaviest first, when ``fits_together`` says the merged group still fits a node."""
    groups = _Groups(pods)
    for pod in pods:
        for term in pod.pod_affinity:
            if term.topology_key == HOSTNAME:
                sel = scope_of(term)
                for other in pods:
                    if other is not pod and sel.matches(other):
                        groups.join(other.key, pod.key)
    preferred = sorted(
        (
            (w, pod.key, t)
            for pod in pods
            for w, t in pod.preferred_pod_affinity
            if t.topology_key == HOSTNAME
        ),
        key=lambda x: (-x[0], x[1]),
    )
    if preferred and fits_together is not None:
        _join_preferred(pods, groups, preferred, fits_together)
    members: dict[str, list[Pod]] = defaultdict(list)
    for pod in pods:
        members[groups.find(pod.key)].append(pod)
    return list(members.values())


def _join_preferred(
    pods: Sequence[Pod], groups: _Groups, preferred: Sequence[Any], fits_together: Callable[[list[Pod]], bool]
) -> None:
    by_key = {p.key: p for p in pods}
    for _, key, term in preferred:
        sel = scope_of(term)
        for other in pods:
            if other.key == key or not sel.matches(other) or groups.find(other.key) == groups.find(key):
                continue
            merged = [p for p in pods if groups.find(p.key) in (groups.find(key), groups.find(other.key))]
            if fits_together(merged):
                groups.join(other.key, by_key[key].key)
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
        self._offers: dict[tuple[frozenset[OfferKey], str | None, str | None], frozenset[OfferKey]] = {}

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
        templates, cache = self.templates, self._offers
        out: Feasibility = {}
        for i, offers in feasible.items():
            if labelled and any(templates[i].labels.get(k) != v for k, v in labelled):
                continue
            key = (offers, zone, capacity_type)
            kept = cache.get(key)
            if kept is None:
                kept = cache[key] = frozenset(
                    o
                    for o in offers
                    if (zone is None or o[0] == zone) and (capacity_type is None or o[1] == capacity_type)
                )
            if kept:
                out[i] = kept
        return out


_ClassKey = tuple[object, ...]  # everything that matters for packing: vector, offers, features, templates


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
        interned: dict[frozenset[int], frozenset[int]] = {}
        for i, k in enumerate(here):
            vec, okeys, matches, limits, feasible = self.shape[k]
            tset = frozenset(feasible) & tpl_ids
            members = list(self.classes[k])
            out.append(
                PackClass(
                    i, vec, len(members), okeys, matches, limits, interned.setdefault(tset, tset), members
                )
            )
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
        next_keys = []
        for k in self.keys:
            if k in leftover:
                self.classes[k] = leftover[k]
                next_keys.append(k)
            elif k not in here:
                next_keys.append(k)
        self.keys = next_keys
