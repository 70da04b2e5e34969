"""Cost-aware bin packing of pod classes into new nodes: the part that decides what to buy.

Input: *classes* of identical pods (same requests, same feasible templates, same zone/capacity-type
restriction, same hostname features) with counts, and the templates of one NodePool (:mod:`.templates`).
Output: bins, each a template (the instance type to buy, already the cheapest that fits what the bin holds)
with an offering and the count of each class in it.

The algorithm, and why:

1. **Weights.** Each resource gets a price per unit from the dual of the fractional covering LP
   ``min sum(price_t x_t) s.t. sum(alloc_t x_t) >= demand`` (cpu and memory, solved by a one-dimensional
   search over the dual direction). The *value* of a pod is its requests at those prices; the value of all
   pods is the LP lower bound on what any plan costs. A bin's efficiency is ``price / value(contents)``.
2. **Greedy by efficiency.** Repeatedly, for each candidate template, fill an empty node first-fit-decreasing
   (by value) from the remaining classes, *downsize* it to the cheapest template that still fits its contents,
   and score ``price / value``; commit the best-scoring bin. Identical bins are committed in one step as long
   as the classes last (pattern replication), which keeps 20,000 pods fast. Candidates are all templates for
   small catalogs and a spread of sizes (every small one, then geometric) for large ones. Classes are
   bucketed by request vector so a nearly full node skips whole buckets at once.
   For small problems (a few hundred pods) a *portfolio* runs as well: the greedy under other weightings
   (cpu-only, memory-only) and "one type for everything" packings for each candidate type, then downsizing;
   the cheapest result wins. Greedy efficiency alone is myopic (six small nodes can each look efficient when
   one large node holding everything is cheaper); the portfolio covers those cases.
3. **Seeds first.** Pods that limit themselves per node (hostname anti-affinity, hostname spread, host ports)
   need a node each regardless of cost. They are placed first, each in the node that makes room for other
   pods at the lowest *marginal* price (price of the node minus the price of the cheapest node for the seed
   alone, per unit of value added), so the unavoidable nodes are filled before new ones are bought.
4. **Improvement.** Single bins, pairs of bins (and all triples when there are only a few bins) are repacked
   with the same portfolio; a change is kept when it lowers the price. This merges two half-empty nodes into
   one and splits one big node into two cheaper ones (eight 1-vCPU pods: c3-16 + c3-4 rather than three
   c3-8).

Limits are respected while packing: NodePool limits (any resource, ``nodes``) on the capacity of new nodes,
and per-type caps (Cluster API max size). What cannot be packed is returned with the reason.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import accumulate, islice

from tenon.core.templates import OfferKey, Template
from tenon.core.topology import soft_target

INF = 10**18
PAIR_WINDOW = 40  # bins considered for pairwise repacking per round
IMPROVE_WORK = 20000  # node evaluations the improvement phase may spend
PORTFOLIO_SUB_PODS = 40  # repacked groups up to this many pods get the full portfolio
ROLLOUT_OPTIONS = 8  # first nodes tried by the lookahead greedy at each step
TRIPLE_MAX_BINS = 12  # with at most this many bins, triples are repacked too
KNAPSACK_NODES = 400  # search nodes per exact node fill
KNAPSACK_MAX_CLASSES = 12  # exact node fill only for problems with at most this many classes


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

    def __post_init__(self) -> None:
        self.seed = any((soft_target(sid) if sid < 0 else sid) in self.matches for sid, _ in self.limits)
        # the hostname rules as fills check them, worked out once: (limit id, the selector it is about, the
        # limit, how many pods of an item match that selector) and (selector, pods of an item matching it)
        self.limit_rules = tuple(
            (sid, real, lim, self.matches.count(real))
            for sid, lim in self.limits
            for real in (soft_target(sid) if sid < 0 else sid,)
        )
        self.match_counts = tuple(_counted(self.matches).items())


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
        if not self.remaining and not self.type_caps:
            return INF
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
    pts = [
        (t.alloc[cpu] / 1000.0, t.alloc[mem] / 2**30, t.min_price)
        for t in templates
        if t.alloc[cpu] > 0 or t.alloc[mem] > 0
    ]
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


def _copies_that_fit(req: tuple[int, ...], room: list[int], most: int) -> int:
    """How many pods of request ``req`` fit ``room``, at most ``most``."""
    k = most
    for d, r in enumerate(req):
        if r:
            q = room[d] // r
            if q < k:
                k = q
    return k


def _join_hostname_rules(c: PackClass, k: int, counts: dict[int, int], limits: dict[int, int]) -> int:
    """How many of ``k`` items of ``c`` the node's hostname rules let in; when some, they are counted there.

    A limit of ``c`` caps the pods matching its selector (``c``'s own ones included), a limit already on the
    node caps ``c``'s pods when they match it; a node already over one of ``c``'s limits takes none. An item
    of several pods (a unit) lists a selector once per pod matching it, and counts so.
    """
    for sid, real, lim, per_item in c.limit_rules:
        # a soft limit (preferred anti-affinity, negative id) binds c's pods only: not kept on the node
        cap = lim if sid < 0 else min(lim, limits.get(sid, lim))
        have = counts.get(real, 0)
        if per_item:
            k = min(k, (cap - have) // per_item)
        elif have > cap:
            k = 0
    for sid, per_item in c.match_counts:
        lim2 = limits.get(sid)
        if lim2 is not None:
            k = min(k, (lim2 - counts.get(sid, 0)) // per_item)
    if k <= 0:
        return k
    for sid, _, lim, _ in c.limit_rules:
        if sid >= 0:
            limits[sid] = min(lim, limits.get(sid, lim))
    for sid, per_item in c.match_counts:
        counts[sid] = counts.get(sid, 0) + k * per_item
    return k


def _counted(matches: Sequence[int]) -> dict[int, int]:
    """The counts one item adds to a node: a selector once per pod of the item that matches it."""
    counts: dict[int, int] = {}
    for sid in matches:
        counts[sid] = counts.get(sid, 0) + 1
    return counts


def _take(req: tuple[int, ...], k: int, room: list[int], used: list[int]) -> None:
    """``k`` pods of request ``req`` move from ``room`` to ``used``."""
    for d, r in enumerate(req):
        if r:
            room[d] -= r * k
            used[d] += r * k


_Node = tuple[
    tuple[Template, float, OfferKey],  # the template it was downsized to, its price and offering
    dict[int, int],  # class index -> pods of it on the node
    list[int],  # resources used
    frozenset[OfferKey] | None,  # offerings every pod on it accepts (None: any)
    dict[int, int],  # hostname selector id -> matching pods on it
    dict[int, int],  # hostname selector id -> smallest limit set by its pods
]


def _seed_fits(seed: PackClass, tpl: Template) -> bool:
    """Whether one pod of ``seed`` may use ``tpl``, fits its allocatable and accepts one of its offerings."""
    if tpl.index not in seed.templates or any(r > a for r, a in zip(seed.req, tpl.alloc, strict=True)):
        return False
    return seed.okeys is None or bool(seed.okeys & tpl.offerings.keys())


class _NodeChoice:
    """The choice of the next node in one greedy run: the figures it ranks by, computed once per run."""

    def __init__(self, packer: Packer, classes: Sequence[PackClass], weights: Sequence[float]):
        self.packer = packer
        self.weights = weights
        candidates = packer.candidates(classes, weights)
        # per template: price per unit of value when full, the best any node can do
        self.bound = {
            t.index: t.min_price / max(packer.value_of(t.alloc, weights), 1e-12) for t in candidates
        }
        self.best_ratio = min(self.bound.values(), default=float("inf"))
        self.by_bound = sorted(candidates, key=lambda t: (self.bound[t.index], t.min_price, t.index))
        self.value = {c.index: packer.value_of(c.req, weights) for c in classes}
        self.buckets = packer.buckets(classes, weights)
        self._group_of = {c.index: group for _, group in self.buckets for c in group}
        self.seeds = sorted((c for c in classes if c.seed), key=lambda c: (-self.value[c.index], c.index))
        self._next_seed = 0
        self._near: dict[int, tuple[tuple[Template, float, OfferKey] | None, list[Template]]] = {}

    def spent(self, indexes: Iterable[int]) -> None:
        """Of the classes ``indexes``, those with no pods left leave their buckets (and empty buckets go):
        every later fill would step over them, and a large problem's classes run out one by one."""
        emptied = False
        for ci in indexes:
            group = self._group_of[ci]
            if any(c.count <= 0 for c in group):
                group[:] = [c for c in group if c.count > 0]
                emptied = emptied or not group
        if emptied:
            self.buckets = [bucket for bucket in self.buckets if bucket[1]]

    def next_seed(self) -> PackClass | None:
        """The most valuable seed class with pods left, if any."""
        while self._next_seed < len(self.seeds) and self.seeds[self._next_seed].count <= 0:
            self._next_seed += 1
        return self.seeds[self._next_seed] if self._next_seed < len(self.seeds) else None

    def seed_node(self, seed: PackClass) -> _Node | None:
        """The node for one pod of ``seed``: its own cheapest node or a few sizes up, whichever makes room for
        other pods at the lowest marginal price; ``None`` when no node may take it."""
        packer = self.packer
        alone, near = self._seed_sizes(seed)
        if alone is None:
            return None
        base = alone[1]
        okeys = seed.okeys if seed.okeys is None else frozenset(seed.okeys & alone[0].offerings.keys())
        chosen = (
            alone,
            {seed.index: 1},
            list(seed.req),
            okeys,
            _counted(seed.matches),
            {sid: lim for sid, lim in seed.limits if sid >= 0},
        )
        best_score = self.best_ratio * 1.25
        for tpl in near:
            if not packer.budget.allows(tpl):
                continue
            result = packer._evaluate(tpl, self.buckets, seed)
            if result is None:
                continue
            added = packer.value_of(result[2], self.weights) - self.value[seed.index]
            if added <= 0:
                continue
            score = (result[0][1] - base) / added
            if score < best_score - 1e-12:
                best_score, chosen = score, result
            if score <= 1e-12:
                break  # room that comes free with the seed's own node: nothing beats it
        return chosen

    def _seed_sizes(self, seed: PackClass) -> tuple[tuple[Template, float, OfferKey] | None, list[Template]]:
        """The seed's own cheapest node and up to six templates from its price up (cached while buyable)."""
        packer = self.packer
        cached = self._near.get(seed.index)
        if cached is None or (cached[0] is not None and not packer.budget.allows(cached[0][0])):
            alone = packer.downsize(seed.req, seed.okeys, seed.templates)
            near = (
                []
                if alone is None
                else list(
                    islice(
                        (
                            t
                            for t in packer.by_price
                            if t.min_price >= alone[1]
                            and t.index in seed.templates
                            and packer.budget.allows(t)
                        ),
                        6,
                    )
                )
            )
            cached = self._near[seed.index] = (alone, near)
        return cached

    def best_node(self) -> _Node | None:
        """The filled node with the lowest price per value (templates whose bound cannot beat it: untried)."""
        packer = self.packer
        best_key = None
        chosen = None
        for tpl in self.by_bound:
            if best_key is not None and self.bound[tpl.index] > best_key[0]:
                break  # even full, this template could not beat the best node found
            if not packer.budget.allows(tpl):
                continue
            result = packer._evaluate(tpl, self.buckets, None)
            if result is None:
                continue
            val = packer.value_of(result[2], self.weights)
            key = (result[0][1] / max(val, 1e-12), -val, result[0][0].index)
            if best_key is None or key < best_key:
                best_key, chosen = key, result
        return chosen


class CommonTemplates:
    """The templates every class of a node may use, from the classes' sets: classes share a few interned
    sets, so each intersection of them is made once (and is one object, its hash worked out once)."""

    def __init__(self) -> None:
        self._found: dict[frozenset[int], tuple[frozenset[int], list[frozenset[int]]]] = {}

    def of(self, sets: Iterable[frozenset[int]]) -> frozenset[int] | None:
        """``None`` when there is no set."""
        distinct = {id(s): s for s in sets}
        if len(distinct) <= 1:
            return next(iter(distinct.values()), None)
        key = frozenset(distinct)
        found = self._found.get(key)
        if found is None:
            # the sets are kept with their intersection, so their ids are never reused for other sets
            found = self._found[key] = (frozenset.intersection(*distinct.values()), list(distinct.values()))
        return found[0]


class _KnapsackSearch:
    """The depth-first search of :meth:`Packer.knapsack`: how many of each class (in ``order``) fill ``room``
    with the most value; ``room`` is restored when it returns."""

    def __init__(self, order: Sequence[PackClass], weights: Sequence[float], room: list[int]):
        self.order = order
        self.weights = weights
        self.room = room
        self.vals = [sum(w * r for w, r in zip(weights, c.req, strict=False)) for c in order]
        # suffix[i]: the value of every pod of classes i.. (the bound when the room is not what limits)
        self.suffix = [0.0] * (len(order) + 1)
        for i in range(len(order) - 1, -1, -1):
            self.suffix[i] = self.suffix[i + 1] + self.vals[i] * order[i].count
        self.best_val = -1.0
        self.best_counts: list[int] = []
        self.chosen = [0] * len(order)
        self.nodes = 0

    def best(self) -> list[int]:
        self._search(0, 0.0)
        return self.best_counts

    def _search(self, i: int, value: float) -> None:
        if value > self.best_val + 1e-12:
            self.best_val, self.best_counts = value, list(self.chosen)
        if i == len(self.order) or self.nodes >= KNAPSACK_NODES:
            return
        room = self.room
        bound = sum(w * r for w, r in zip(self.weights, room, strict=False))
        if value + min(self.suffix[i], bound) <= self.best_val + 1e-12:
            return
        c = self.order[i]
        req = c.req
        for n in range(_copies_that_fit(req, room, c.count), -1, -1):
            self.nodes += 1
            self.chosen[i] = n
            for d, r in enumerate(req):
                room[d] -= r * n
            self._search(i + 1, value + self.vals[i] * n)
            for d, r in enumerate(req):
                room[d] += r * n
        self.chosen[i] = 0


class Packer:
    """Packs the classes of one NodePool; see the module docstring for the algorithm."""

    def __init__(
        self,
        templates: Sequence[Template],
        budget: Budget,
        weights: Sequence[float],
        max_candidates: int = 24,
        improve_budget: int = 2500,
        portfolio: bool = True,
    ):
        self.by_price = sorted(templates, key=lambda t: (t.min_price, t.instance_type.name, t.index))
        # the most cpu and memory of any template up to each place in price order: the cheap templates that
        # cannot take what a node holds are skipped in one step (a binary search) by downsize
        self._most_cpu = list(accumulate((t.alloc[0] for t in self.by_price), max))
        self._most_memory = list(accumulate((t.alloc[1] for t in self.by_price), max))
        self.budget = budget
        self.weights = list(weights)
        self.max_candidates = max_candidates
        self.improve_budget = improve_budget
        self.portfolio = portfolio
        self.work = 0  # node evaluations so far: bounds the time spent improving
        self._weights: Sequence[float] = self.weights
        self._plain = False
        self._plain_order: list[PackClass] = []
        self.failed: dict[int, str] = {}
        self._classes: dict[int, PackClass] = {}
        self._candidate_cache: dict[tuple[frozenset[int], tuple[float, ...]], list[Template]] = {}
        self._common = CommonTemplates()

    # -- small helpers -------------------------------------------------------------------------------------
    def value_of(self, used: Sequence[int], weights: Sequence[float] | None = None) -> float:
        return sum(w * u for w, u in zip(weights or self.weights, used, strict=False) if w)

    def downsize(
        self, used: Sequence[int], okeys: frozenset[OfferKey] | None, allowed: frozenset[int] | None
    ) -> tuple[Template, float, OfferKey] | None:
        """Cheapest template (and offering) that fits ``used`` among ``allowed`` within the budget."""
        best: tuple[Template, float, OfferKey] | None = None
        start = max(bisect_left(self._most_cpu, used[0]), bisect_left(self._most_memory, used[1]))
        for tpl in self.by_price[start:]:
            if best is not None and tpl.min_price >= best[1]:
                break
            if allowed is not None and tpl.index not in allowed:
                continue
            alloc = tpl.alloc
            if (
                used[0] > alloc[0]
                or used[1] > alloc[1]
                or any(u > a for u, a in zip(used, alloc, strict=True))
            ):
                continue
            priced = tpl.price_for(okeys)
            if priced is None or not self.budget.allows(tpl):
                continue
            if best is None or priced[0] < best[1]:
                best = (tpl, priced[0], priced[1])
        return best

    def candidates(self, classes: Sequence[PackClass], weights: Sequence[float]) -> list[Template]:
        usable: set[int] = set()
        for templates in {id(c.templates): c.templates for c in classes}.values():  # classes share a few
            usable |= templates
        key = (frozenset(usable), tuple(weights))
        cached = self._candidate_cache.get(key)
        if cached is None:
            cached = self._candidates(usable, weights)
            self._candidate_cache[key] = cached
        return [t for t in cached if self.budget.allows(t)]

    def _candidates(self, usable: set[int], weights: Sequence[float]) -> list[Template]:
        tpls = [t for t in self.by_price if t.index in usable]
        if len(tpls) <= self.max_candidates:
            return tpls
        # Keep the templates on the price/value frontier, then a spread of sizes (all small ones, geometric).
        frontier: list[Template] = []
        best_ratio = float("inf")
        value = {t.index: self.value_of(t.alloc, weights) for t in tpls}
        for t in sorted(tpls, key=lambda t: (-value[t.index], t.min_price)):
            ratio = t.min_price / max(value[t.index], 1e-12)
            if ratio < best_ratio * 1.02 or len(frontier) < 2:
                frontier.append(t)
                best_ratio = min(best_ratio, ratio)
        pool = sorted(frontier if len(frontier) >= 4 else tpls, key=lambda t: value[t.index])
        n = len(pool)
        if n <= self.max_candidates:
            return pool
        picks = set(range(min(6, n)))
        k = self.max_candidates - len(picks)
        for i in range(k):
            picks.add(min(n - 1, round(6 + (n - 7) * (i / max(1, k - 1)) ** 1.6)))
        picks.add(n - 1)
        return [pool[i] for i in sorted(picks)]

    @staticmethod
    def buckets(
        classes: Sequence[PackClass], weights: Sequence[float]
    ) -> list[tuple[tuple[int, ...], list[PackClass]]]:
        by_req: dict[tuple[int, ...], list[PackClass]] = {}
        for c in classes:
            by_req.setdefault(c.req, []).append(c)
        return sorted(
            by_req.items(),
            key=lambda item: (
                -sum(w * u for w, u in zip(weights, item[0], strict=False)),
                tuple(-x for x in item[0]),
            ),
        )

    def fill(
        self,
        buckets: Sequence[tuple[tuple[int, ...], list[PackClass]]],
        room: list[int],
        okeys: frozenset[OfferKey] | None,
        counts: dict[int, int],
        limits: dict[int, int],
        contents: dict[int, int],
        tpl_index: int,
        used: list[int],
    ) -> frozenset[OfferKey] | None:
        """First-fit-decreasing into ``room`` (mutated, as are counts/limits/contents/used); ``okeys`` is
        ``None`` or not empty (the offerings every pod put in so far accepts), and so is what is returned."""
        for req, group in buckets:
            # copies of this request the room takes: worked out once per bucket, each take lowers it by its
            # count (each resource's room divided by the request, rounded down, drops by the count taken)
            fit = _copies_that_fit(req, room, INF)
            if fit <= 0:
                continue
            for c in group:
                avail = c.count - contents.get(c.index, 0)
                if avail <= 0 or tpl_index not in c.templates:
                    continue
                c_okeys = c.okeys
                if c_okeys is not None and (not c_okeys if okeys is None else okeys.isdisjoint(c_okeys)):
                    continue  # no offering left that every pod on the node accepts
                k = fit if fit < avail else avail
                if c.limits or c.matches:
                    k = _join_hostname_rules(c, k, counts, limits)
                    if k <= 0:
                        continue
                if c_okeys is not None:
                    okeys = c_okeys if okeys is None else okeys & c_okeys
                contents[c.index] = contents.get(c.index, 0) + k
                _take(req, k, room, used)
                fit -= k
                if fit <= 0:
                    break  # the bucket's classes all have this request: none fits any more
        return okeys

    def knapsack(self, tpl: Template, room: list[int], contents: dict[int, int], used: list[int]) -> None:
        """Fill ``room`` with the most valuable mix of the remaining classes (small problems only).

        A depth-first search over how many of each class, largest value first, pruned by the bound
        ``value so far + min(value of what is left, weights . room left)``, capped at :data:`KNAPSACK_NODES`.
        First-fit-decreasing is myopic: two 3-CPU pods fill 6 of 7.8 CPUs where one 3-CPU and two 2-CPU pods
        fill 7; the difference is a whole node on the field-size scenarios of the bench.
        """
        order = [c for c in self._plain_order if c.count > 0 and tpl.index in c.templates]
        if not order:
            return
        best = _KnapsackSearch(order, self._weights, room).best()
        for c, n in zip(order, best, strict=True):
            if n:
                contents[c.index] = n
                _take(c.req, n, room, used)

    # -- the greedy ----------------------------------------------------------------------------------------
    def _evaluate(self, tpl: Template, buckets, seed: PackClass | None) -> _Node | None:
        """One new node of ``tpl`` filled (after ``seed``, when given) and downsized to the cheapest template
        that takes what went in; ``None`` when nothing went in or nothing can take it."""
        self.work += 1
        room = list(tpl.alloc)
        used = [0] * len(room)
        counts: dict[int, int] = {}
        limits: dict[int, int] = {}
        contents: dict[int, int] = {}
        okeys = None
        if seed is not None:
            if not _seed_fits(seed, tpl):
                return None
            contents[seed.index] = 1
            _take(seed.req, 1, room, used)
            limits.update((sid, lim) for sid, lim in seed.limits if sid >= 0)
            counts.update(_counted(seed.matches))
            okeys = seed.okeys
        if seed is None and self._plain:
            self.knapsack(tpl, room, contents, used)
        else:
            okeys = self.fill(buckets, room, okeys, counts, limits, contents, tpl.index, used)
        if not contents:
            return None
        down = self.downsize(used, okeys, self._templates_for_all(contents))
        if down is None:
            return None
        return down, contents, used, okeys, counts, limits

    def _templates_for_all(self, contents: dict[int, int]) -> frozenset[int] | None:
        """The templates every class in ``contents`` may use."""
        return self._common.of(self._classes[ci].templates for ci in contents)

    def _commit(self, bins: list[Bin], chosen: _Node, once: bool = False) -> int:
        (tpl, price, offer), contents, used, okeys, counts, limits = chosen
        times = 1 if once else min(self._classes[ci].count // n for ci, n in contents.items())
        times = max(1, min(times, self.budget.max_count(tpl)))
        self.budget.take(tpl, times)
        for ci, n in contents.items():
            self._classes[ci].count -= n * times
        for _ in range(times):
            bins.append(Bin(tpl, price, offer, list(used), okeys, dict(counts), dict(limits), dict(contents)))
        return times * sum(contents.values())

    def _greedy(
        self,
        classes: Sequence[PackClass],
        weights: Sequence[float],
        only: Template | None = None,
        exact: bool = False,
    ) -> tuple[list[Bin], dict[int, str]]:
        """Nodes one at a time: the ``only`` template while it can be bought, else the next seed's node, else
        the node with the best price per value; identical nodes are committed together."""
        self._classes = {c.index: c for c in classes}
        self._weights = weights
        # exact per-node fill for small, plain problems (no hostname rules, no zone pins)
        self._plain = (
            exact
            and len(classes) <= KNAPSACK_MAX_CLASSES
            and all(not c.limits and not c.matches and c.okeys is None for c in classes)
        )
        self._plain_order = sorted(classes, key=lambda c: (-self.value_of(c.req, weights), c.index))
        failed: dict[int, str] = {}
        bins: list[Bin] = []
        choice = _NodeChoice(self, classes, weights)
        left = sum(c.count for c in classes)
        while left > 0:
            chosen = None
            if only is not None and self.budget.allows(only):
                chosen = self._evaluate(only, choice.buckets, None)
            seed = choice.next_seed() if chosen is None else None
            if seed is not None:
                chosen = choice.seed_node(seed)
                if chosen is None:  # the seed fits no node that may still be bought
                    failed[seed.index] = self._why_not(seed)
                    left -= seed.count
                    seed.count = 0
                    choice.spent([seed.index])
                    continue
            elif chosen is None:
                chosen = choice.best_node()
            if chosen is None:
                for c in classes:
                    if c.count > 0:
                        failed[c.index] = self._why_not(c)
                        c.count = 0
                break
            left -= self._commit(bins, chosen)
            choice.spent(chosen[1])
        return bins, failed

    def _rollout(
        self, classes: Sequence[PackClass], weights: Sequence[float]
    ) -> tuple[list[Bin], dict[int, str]]:
        """Greedy with one step of lookahead: each node is the candidate whose completion (by the exact-fill
        greedy) costs least. Only for small plain problems (called from the portfolio)."""
        bins: list[Bin] = []
        while any(c.count > 0 for c in classes):
            active = [c for c in classes if c.count > 0]
            self._classes = {c.index: c for c in classes}
            buckets = self.buckets(active, weights)
            options = []
            seen = set()
            for tpl in self.candidates(active, weights):
                for exact in (False, True):
                    self._weights = weights
                    self._plain = exact
                    self._plain_order = sorted(
                        active, key=lambda c: (-self.value_of(c.req, weights), c.index)
                    )
                    opt = self._evaluate(tpl, buckets, None)
                    if opt is None:
                        continue
                    node_key = (opt[0][0].index, tuple(sorted(opt[1].items())))
                    if node_key not in seen:
                        seen.add(node_key)
                        options.append((opt[0][1] / max(self.value_of(opt[2], weights), 1e-12), opt))
            options.sort(key=lambda item: item[0])
            best = None
            for _, opt in options[:ROLLOUT_OPTIONS]:
                counts = {c.index: c.count for c in classes}
                budget = Budget(
                    self.budget.resource_names, dict(self.budget.remaining), dict(self.budget.type_caps)
                )
                trial: list[Bin] = []
                self._classes = {c.index: c for c in classes}
                self._commit(trial, opt, once=True)
                rest, failed = self._greedy(classes, weights, None, exact=True)
                key = (sum(counts[i] for i in failed), opt[0][1] + sum(b.price for b in rest))
                if best is None or key < best[0]:
                    best = (key, opt)
                for c in classes:
                    c.count = counts[c.index]
                self.budget = budget
            if best is None:
                rest, failed = self._greedy(classes, weights, None, exact=True)
                return bins + rest, failed
            self._classes = {c.index: c for c in classes}
            self._commit(bins, best[1], once=True)
        return bins, {}

    def pack(
        self, classes: Sequence[PackClass], portfolio: bool | None = None, lookahead: bool = False
    ) -> list[Bin]:
        """Pack ``classes`` (their counts are consumed); failures go to ``self.failed``."""
        use_portfolio = self.portfolio if portfolio is None else portfolio
        counts = {c.index: c.count for c in classes}
        strategies: list[tuple[Sequence[float], Template | None, bool | None]] = [(self.weights, None, False)]
        if use_portfolio:
            cpu_only = [self.weights[0] or 1.0] + [0.0] * (len(self.weights) - 1)
            mem_only = [0.0, self.weights[1] or 1.0] + [0.0] * (len(self.weights) - 2)
            for fill_exact in (False, True):
                strategies += [(cpu_only, None, fill_exact), (mem_only, None, fill_exact)]
                strategies += [(self.weights, t, fill_exact) for t in self.candidates(classes, self.weights)]
            strategies.append((self.weights, None, True))
            plain = all(not c.limits and not c.matches and c.okeys is None for c in classes)
            if lookahead and plain and sum(counts.values()) <= PORTFOLIO_SUB_PODS:
                strategies.append((self.weights, None, None))  # None: the lookahead greedy
        best: tuple[tuple[int, float], list[Bin], dict[int, str], Budget] | None = None
        start = Budget(self.budget.resource_names, dict(self.budget.remaining), dict(self.budget.type_caps))
        for weights, only, exact in strategies:
            for c in classes:
                c.count = counts[c.index]
            self.budget = Budget(start.resource_names, dict(start.remaining), dict(start.type_caps))
            if exact is None:
                bins, failed = self._rollout(classes, weights)
            else:
                bins, failed = self._greedy(classes, weights, only, exact)
            key = (sum(counts[i] for i in failed), sum(b.price for b in bins))
            if best is None or key < best[0]:
                best = (key, bins, failed, self.budget)
        assert best is not None
        _, bins, failed, self.budget = best
        for c in classes:
            c.count = 0 if c.index not in failed else counts[c.index]
        self.failed.update(failed)
        for c in classes:
            if c.index in failed:
                c.count = 0
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
        """Repack single bins, pairs (and, for a few bins, triples); keep a change that lowers the price."""
        proto = {c.index: c for c in classes}
        tries = 0
        changed = True
        stop_at = self.work + IMPROVE_WORK
        while changed and tries < self.improve_budget and self.work < stop_at:
            changed = False
            n = len(bins)
            # Most wasteful first (price minus the value of what the bin holds); pairs among the worst few.
            order = sorted(range(n), key=lambda i: (-(bins[i].price - self.value_of(bins[i].used)), i))
            worst = order[:PAIR_WINDOW]
            groups: list[tuple[int, ...]] = [(i,) for i in worst]
            groups += [(worst[a], worst[b]) for a in range(len(worst)) for b in range(a + 1, len(worst))]
            if self.portfolio and n <= TRIPLE_MAX_BINS:
                groups += [
                    (order[a], order[b], order[c])
                    for a in range(n)
                    for b in range(a + 1, n)
                    for c in range(b + 1, n)
                ]
            for members in groups:
                if tries >= self.improve_budget or self.work >= stop_at:
                    break
                group = [bins[k] for k in members]
                okeys = [b.okeys for b in group if b.okeys is not None]
                if len(okeys) > 1 and not frozenset.intersection(*okeys):
                    continue
                tries += 1
                old_price = sum(b.price for b in group)
                merged: dict[int, int] = {}
                for b in group:
                    for ci, k in b.contents.items():
                        merged[ci] = merged.get(ci, 0) + k
                for b in group:
                    self.budget.give_back(b.template, 1)
                sub = [
                    PackClass(
                        ci,
                        proto[ci].req,
                        k,
                        proto[ci].okeys,
                        proto[ci].matches,
                        proto[ci].limits,
                        proto[ci].templates,
                    )
                    for ci, k in merged.items()
                ]
                saved_failed = dict(self.failed)
                saved_budget = self.budget
                trial = self.pack(
                    sub, portfolio=self.portfolio and sum(merged.values()) <= PORTFOLIO_SUB_PODS
                )
                ok = len(self.failed) == len(saved_failed)
                self.failed = saved_failed
                new_price = sum(b.price for b in trial)
                if ok and new_price < old_price - 1e-9:
                    bins = [b for k, b in enumerate(bins) if k not in members] + trial
                    changed = True
                    break
                self.budget = saved_budget
                for b in group:
                    self.budget.take(b.template, 1)
        return bins
