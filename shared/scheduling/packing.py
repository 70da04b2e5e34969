"""Cost-aware bin packing of pod classes into new nodes: the part that decides what to buy.

Input: *classes* of identical pods (same requests, same feasible templates, same zone/capacity-type
restriction, same hostname features) with counts, and the templates of one NodePool (:mod:`.templates`).
Output: bins, each a template (the instance type to buy, already the cheapest that fits what the bin holds)
with an offering and the count of each class in it.

The algorithm, and why:

1. **Weights.** Each resource gets a price per unit from the dual of the fractional covering LP
   ``min sum(price_t x_t) s.t. sum(alloc_t x_t) >= demand`` (cpu and memory, solved by a one-dimensional search
   over the dual direction). The *value* of a pod is its requests at those prices; the value of all pods is
   the LP lower bound on what any plan costs. A bin's efficiency is ``price / value(contents)``.
2. **Greedy by efficiency.** Repeatedly, for each candidate template, fill an empty node first-fit-decreasing
   (by value) from the remaining classes, *downsize* it to the cheapest template that still fits its contents,
   and score ``price / value``; commit the best-scoring bin. Identical bins are committed in one step as long
   as the classes last (pattern replication), which keeps 20,000 pods fast. Candidates are all templates for
   small catalogs and a spread of sizes (every small one, then geometric) for large ones.
3. **Seeds first.** Pods that limit themselves per node (hostname anti-affinity, hostname spread, host ports)
   need a node each regardless of cost. They are placed first, each in the node that makes room for other
   pods at the lowest *marginal* price (price of the node minus the price of the cheapest node for the seed
   alone, per unit of value added), so the unavoidable nodes are filled before new ones are bought.
4. **Improvement.** Pairs of bins (and single bins) are repacked with the same greedy; a change is kept when
   it lowers the price. This merges two half-empty nodes into one and splits one big node into two cheaper
   ones (eight 1-vCPU pods: c3-16 + c3-4 rather than three c3-8).

Limits are respected while packing: NodePool limits (any resource, ``nodes``) on the capacity of new nodes,
and per-type caps (Cluster API max size). What cannot be packed is returned with the reason.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from shared.scheduling.templates import OfferKey, Template

INF = 10**18


@dataclass
class PackClass:
    index: int
    req: tuple[int, ...]
    count: int
    okeys: frozenset[OfferKey] | None  # offerings allowed (None: any)
    matches: tuple[int, ...]
    limits: tuple[tuple[int, int], ...]
    templates: frozenset[int]
    members: list[list[str]] = field(default_factory=list)  # pod keys per item (a unit may hold several pods)
    value: float = 0.0

    @property
    def seed(self) -> bool:
        return any(sid in self.matches for sid, _ in self.limits)


@dataclass
class Bin:
    template: Template
    price: float
    offer: OfferKey
    used: list[int]
    okeys: frozenset[OfferKey] | None
    counts: dict[int, int]
    limits: dict[int, int]
    contents: dict[int, int]


@dataclass
class Budget:
    """What may still be bought: NodePool limits (remaining) and per-type caps."""

    resource_names: Sequence[str]
    remaining: dict[str, int]  # resource -> remaining amount ("nodes" too); absent: unlimited
    type_caps: dict[str, int]  # instance type source -> remaining count

    def allows(self, tpl: Template, n: int = 1) -> bool:
        return self.max_count(tpl) >= n

    def max_count(self, tpl: Template) -> int:
        best = INF
        for name, left in self.remaining.items():
            need = 1 if name == "nodes" else tpl.capacity.get(name, 0)
            if need > 0:
                best = min(best, left // need)
        cap = self.type_caps.get(tpl.instance_type.source)
        if cap is not None:
            best = min(best, cap)
        return best

    def take(self, tpl: Template, n: int) -> None:
        for name in self.remaining:
            need = 1 if name == "nodes" else tpl.capacity.get(name, 0)
            self.remaining[name] -= need * n
        if tpl.instance_type.source in self.type_caps:
            self.type_caps[tpl.instance_type.source] -= n

    def give_back(self, tpl: Template, n: int) -> None:
        self.take(tpl, -n)

    def blocking(self, tpl: Template) -> str:
        for name, left in sorted(self.remaining.items()):
            need = 1 if name == "nodes" else tpl.capacity.get(name, 0)
            if need > left:
                return f"NodePool limit {name} reached"
        cap = self.type_caps.get(tpl.instance_type.source)
        if cap is not None and cap <= 0:
            return f"{tpl.instance_type.source} is at its max size"
        return ""


def dual_weights(templates: Sequence[Template], demand: Sequence[int], cpu: int, mem: int) -> list[float]:
    """Per-resource prices from the dual of the covering LP over (cpu, memory); zeros elsewhere."""
    weights = [0.0] * len(demand)
    dc, dm = demand[cpu] / 1000.0, demand[mem] / 2**30
    pts = [(t.alloc[cpu] / 1000.0, t.alloc[mem] / 2**30, t.min_price) for t in templates
           if t.alloc[cpu] > 0 or t.alloc[mem] > 0]
    if not pts or (dc <= 0 and dm <= 0):
        return weights

    def objective(theta: float) -> tuple[float, float]:
        ux, uy = math.cos(theta), math.sin(theta)
        lam = min((p / (ux * a + uy * b) for a, b, p in pts if ux * a + uy * b > 0), default=0.0)
        return lam * (ux * dc + uy * dm), lam

    steps = 48
    grid = [math.pi / 2 * i / steps for i in range(steps + 1)]
    best = max(grid, key=lambda th: objective(th)[0])
    lo, hi = max(0.0, best - math.pi / 2 / steps), min(math.pi / 2, best + math.pi / 2 / steps)
    for _ in range(30):
        m1, m2 = lo + (hi - lo) / 3, hi - (hi - lo) / 3
        if objective(m1)[0] < objective(m2)[0]:
            lo = m1
        else:
            hi = m2
    theta = (lo + hi) / 2
    _, lam = objective(theta)
    weights[cpu] = lam * math.cos(theta) / 1000.0
    weights[mem] = lam * math.sin(theta) / 2**30
    return weights


class Packer:
    """Packs the classes of one NodePool group; see the module docstring for the algorithm."""

    def __init__(self, templates: Sequence[Template], budget: Budget, weights: Sequence[float],
                 max_candidates: int = 24, improve_budget: int = 2500):
        self.by_price = sorted(templates, key=lambda t: (t.min_price, t.instance_type.name, t.index))
        self.budget = budget
        self.weights = list(weights)
        self.max_candidates = max_candidates
        self.improve_budget = improve_budget
        self.failed: dict[int, str] = {}

    # -- small helpers -------------------------------------------------------------------------------------
    def value_of(self, used: Sequence[int]) -> float:
        return sum(w * u for w, u in zip(self.weights, used, strict=False) if w)

    def downsize(self, used: Sequence[int], okeys: frozenset[OfferKey] | None, allowed: frozenset[int] | None
                 ) -> tuple[Template, float, OfferKey] | None:
        for tpl in self.by_price:
            if allowed is not None and tpl.index not in allowed:
                continue
            if any(u > a for u, a in zip(used, tpl.alloc, strict=True)):
                continue
            priced = tpl.price_for(okeys)
            if priced is None or not self.budget.allows(tpl):
                continue
            # by_price is ordered by the cheapest offering; a restricted one may cost more: keep scanning
            # only while a cheaper candidate could still exist.
            best = (tpl, priced[0], priced[1])
            for other in self.by_price:
                if other.min_price >= best[1]:
                    break
                if other is tpl or (allowed is not None and other.index not in allowed):
                    continue
                if any(u > a for u, a in zip(used, other.alloc, strict=True)) or not self.budget.allows(other):
                    continue
                op = other.price_for(okeys)
                if op is not None and op[0] < best[1]:
                    best = (other, op[0], op[1])
            return best
        return None

    def candidates(self, classes: Sequence[PackClass]) -> list[Template]:
        usable: set[int] = set()
        for c in classes:
            usable |= c.templates
        tpls = [t for t in self.by_price if t.index in usable and self.budget.allows(t)]
        if len(tpls) <= self.max_candidates:
            return tpls
        by_size = sorted(tpls, key=lambda t: (self.value_of(t.alloc), t.min_price))
        # Keep the non-dominated (more value for less money) ones, then a spread of sizes.
        frontier: list[Template] = []
        best_ratio = INF * 1.0
        for t in sorted(by_size, key=lambda t: (-self.value_of(t.alloc), t.min_price)):
            ratio = t.min_price / max(self.value_of(t.alloc), 1e-12)
            if ratio < best_ratio * 1.02 or len(frontier) < 2:
                frontier.append(t)
                best_ratio = min(best_ratio, ratio)
        pool = sorted(frontier, key=lambda t: self.value_of(t.alloc)) if len(frontier) >= 4 else by_size
        n = len(pool)
        picks = set(range(min(6, n)))
        k = self.max_candidates - len(picks)
        for i in range(k):
            picks.add(min(n - 1, int(round(6 + (n - 7) * (i / max(1, k - 1)) ** 1.6))))
        picks.add(n - 1)
        return [pool[i] for i in sorted(picks)]

    def fill(self, order: Sequence[PackClass], room: list[int], okeys: frozenset[OfferKey] | None,
             counts: dict[int, int], limits: dict[int, int], contents: dict[int, int], tpl_index: int,
             used: list[int]) -> frozenset[OfferKey] | None:
        """First-fit-decreasing into ``room`` (mutated, as are counts/limits/contents/used)."""
        dims = range(len(room))
        for c in order:
            avail = c.count - contents.get(c.index, 0)
            if avail <= 0 or tpl_index not in c.templates:
                continue
            req = c.req
            k = avail
            for d in dims:
                r = req[d]
                if r:
                    q = room[d] // r
                    if q < k:
                        k = q
                        if k <= 0:
                            break
            if k <= 0:
                continue
            new_okeys = okeys
            if c.okeys is not None:
                new_okeys = c.okeys if okeys is None else okeys & c.okeys
                if not new_okeys:
                    continue
            if c.limits or (c.matches and limits):
                for sid, lim in c.limits:
                    cap = min(lim, limits.get(sid, lim))
                    have = counts.get(sid, 0)
                    if sid in c.matches:
                        k = min(k, cap - have)
                    elif have > cap:
                        k = 0
                for sid in c.matches:
                    lim2 = limits.get(sid)
                    if lim2 is not None:
                        k = min(k, lim2 - counts.get(sid, 0))
                if k <= 0:
                    continue
                for sid, lim in c.limits:
                    limits[sid] = min(lim, limits.get(sid, lim))
                for sid in c.matches:
                    counts[sid] = counts.get(sid, 0) + k
            okeys = new_okeys
            contents[c.index] = contents.get(c.index, 0) + k
            for d in dims:
                if req[d]:
                    room[d] -= req[d] * k
                    used[d] += req[d] * k
        return okeys

    # -- the greedy ----------------------------------------------------------------------------------------
    def _evaluate(self, tpl: Template, order: Sequence[PackClass], seed: PackClass | None):
        room = list(tpl.alloc)
        used = [0] * len(room)
        counts: dict[int, int] = {}
        limits: dict[int, int] = {}
        contents: dict[int, int] = {}
        if seed is not None:
            self.fill([seed], room, None, counts, limits, contents, tpl.index, used)
            if not contents:
                return None
            # one seed only: cap it at 1 by undoing extras
            extra = contents[seed.index] - 1
            if extra > 0:
                contents[seed.index] = 1
                for d in range(len(room)):
                    room[d] += seed.req[d] * extra
                    used[d] -= seed.req[d] * extra
                for sid in seed.matches:
                    counts[sid] -= extra
        okeys = self.fill(order, room, seed.okeys if seed is not None else None, counts, limits, contents,
                          tpl.index, used)
        if not contents:
            return None
        allowed: frozenset[int] | None = None
        for ci in contents:
            cls = self._classes[ci]
            allowed = cls.templates if allowed is None else allowed & cls.templates
        down = self.downsize(used, okeys, allowed)
        if down is None:
            return None
        return down, contents, used, okeys, counts, limits

    def pack(self, classes: Sequence[PackClass]) -> list[Bin]:
        self._classes = {c.index: c for c in classes}
        for c in classes:
            c.value = self.value_of(c.req)
        bins: list[Bin] = []
        order = sorted(classes, key=lambda c: (-c.value, -max(c.req), c.index))
        while True:
            active = [c for c in order if c.count > 0]
            if not active:
                break
            cands = self.candidates(active)
            seeds = [c for c in active if c.seed]
            chosen = None
            if seeds and cands:
                seed = seeds[0]
                alone = None
                best_score = INF * 1.0
                for tpl in cands:
                    if tpl.index not in seed.templates:
                        continue
                    result = self._evaluate(tpl, [seed], seed)
                    if result is not None and (alone is None or result[0][1] < alone[0][1]):
                        alone = result
                if alone is not None:
                    base = alone[0][1]
                    best_ratio = min(t.min_price / max(self.value_of(t.alloc), 1e-12) for t in cands)
                    chosen = alone
                    for tpl in cands:
                        if tpl.index not in seed.templates:
                            continue
                        result = self._evaluate(tpl, order, seed)
                        if result is None:
                            continue
                        added = self.value_of(result[2]) - seed.value
                        if added <= 0:
                            continue
                        score = (result[0][1] - base) / added
                        if score < best_score - 1e-12:
                            best_score, best = score, result
                    if best_score <= best_ratio * 1.25:
                        chosen = best
                else:
                    self.failed[seed.index] = self._why_not(seed)
                    seed.count = 0
                    continue
            elif cands:
                best_key = None
                for tpl in cands:
                    result = self._evaluate(tpl, order, None)
                    if result is None:
                        continue
                    value = self.value_of(result[2])
                    key = (result[0][1] / max(value, 1e-12), -value, result[0][0].index)
                    if best_key is None or key < best_key:
                        best_key, chosen = key, result
            if chosen is None:
                for c in active:
                    self.failed[c.index] = self._why_not(c)
                    c.count = 0
                break
            (tpl, price, offer), contents, used, okeys, counts, limits = chosen
            times = min(self._classes[ci].count // n for ci, n in contents.items())
            times = max(1, min(times, self.budget.max_count(tpl)))
            self.budget.take(tpl, times)
            for ci, n in contents.items():
                self._classes[ci].count -= n * times
            for _ in range(times):
                bins.append(Bin(tpl, price, offer, list(used), okeys, dict(counts), dict(limits), dict(contents)))
        return bins

    def _why_not(self, c: PackClass) -> str:
        fitting = [t for t in self.by_price if t.index in c.templates and t.price_for(c.okeys) is not None]
        for t in fitting:
            why = self.budget.blocking(t)
            if why:
                return why
        if not fitting:
            return "no instance type offers the zone/capacity type the pod is pinned to"
        return "no instance type can take it"

    # -- improvement ---------------------------------------------------------------------------------------
    def improve(self, bins: list[Bin], classes: Sequence[PackClass]) -> list[Bin]:
        """Repack single bins and pairs of bins with the greedy; keep every change that lowers the price."""
        proto = {c.index: c for c in classes}
        tries = 0
        changed = True
        while changed and tries < self.improve_budget:
            changed = False
            n = len(bins)
            order = sorted(range(n), key=lambda i: -bins[i].price)
            pairs = [(i, None) for i in order] + [(order[a], order[b]) for a in range(n) for b in range(a + 1, n)]
            for i, j in pairs:
                if tries >= self.improve_budget:
                    break
                tries += 1
                group = [bins[i]] if j is None else [bins[i], bins[j]]
                if j is not None and bins[i].okeys is not None and bins[j].okeys is not None \
                        and not bins[i].okeys & bins[j].okeys:
                    continue
                old_price = sum(b.price for b in group)
                merged: dict[int, int] = {}
                for b in group:
                    for ci, k in b.contents.items():
                        merged[ci] = merged.get(ci, 0) + k
                for b in group:
                    self.budget.give_back(b.template, 1)
                sub = [PackClass(ci, proto[ci].req, k, proto[ci].okeys, proto[ci].matches, proto[ci].limits,
                                 proto[ci].templates) for ci, k in merged.items()]
                saved_failed = dict(self.failed)
                saved_classes = self._classes
                trial = self.pack(sub)
                self._classes = saved_classes
                ok = len(self.failed) == len(saved_failed) and all(c.count == 0 for c in sub)
                self.failed = saved_failed
                new_price = sum(b.price for b in trial)
                if ok and new_price < old_price - 1e-9:
                    keep = [b for k, b in enumerate(bins) if k not in (i, j)]
                    bins = keep + trial
                    changed = True
                    break
                for b in trial:
                    self.budget.give_back(b.template, 1)
                for b in group:
                    self.budget.take(b.template, 1)
        return bins
