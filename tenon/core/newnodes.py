"""New nodes for one NodePool: pack its classes within its limits, honour ``minValues``, make the claims.

* **Limits and caps.** A pool's limits are measured against its Nodes and in-flight claims
  (:func:`tenon.core.rooms.pool_usage`); per-type caps (a Cluster API MachineDeployment's max size) are
  shared by every pool: two pools selecting one MachineDeployment together buy at most what its max size
  allows (the caps left after one pool are what the next one gets).
* **minValues** constrains each NodeClaim, as in Karpenter: the instance types that fit a claim's pods (and
  their offerings) must carry at least ``minValues`` distinct values of the key. A node the packer filled
  past that is split again, its pods regrouped onto nodes that keep enough types; a pod that alone leaves too
  few types cannot use the pool, with the reason.
* **Claims**: each bin becomes a :class:`PlannedNodeClaim` with its cheaper-first fallbacks, the requirements
  a launcher must honour and why its type was chosen (:mod:`.explain`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tenon.core.explain import MAX_FALLBACKS, explain_choice
from tenon.core.model import NodePool
from tenon.core.packing import (
    Bin,
    Budget,
    CommonTemplates,
    PackClass,
    Packer,
    _join_hostname_rules,
    dual_weights,
)
from tenon.core.plan import Considered, PlannedNodeClaim
from tenon.core.quantities import format_quantity
from tenon.core.requirements import Requirement
from tenon.core.templates import OfferKey, Template, fits
from tenon.core.wellknown import CAPACITY_TYPE, INSTANCE_TYPE, NODEPOOL, ZONE

SMALL_PODS = 400  # up to this many pods and ...
SMALL_CLASSES = 16  # ... this many distinct pod classes, a NodePool gets the full portfolio (packing.py)


def pack_pool(
    names: Sequence[str],
    tpls: Sequence[Template],
    pack_classes: list[PackClass],
    remaining: dict[str, int],
    type_caps: dict[str, int],
) -> tuple[Packer, list[Bin]]:
    """The bins one NodePool buys for these classes, within its limits and the shared caps (``type_caps`` is
    updated with what is left); most expensive first."""
    budget = Budget(names, remaining, dict(type_caps))
    demand = [0] * len(names)
    for c in pack_classes:
        for d, amount in enumerate(c.req):
            demand[d] += amount * c.count
    weights = dual_weights(tpls, demand, 0, 1)
    n_pods = sum(len(c.members) for c in pack_classes)
    # The portfolio and deep repacking pay off on small problems and cost too much on large ones.
    small = n_pods <= SMALL_PODS and len(pack_classes) <= SMALL_CLASSES
    packer = Packer(
        tpls,
        budget,
        weights,
        max_candidates=24,
        improve_budget=2500 if small else 60,
        portfolio=small,
    )
    bins = packer.pack(pack_classes, lookahead=True)
    bins = packer.improve(
        bins,
        [PackClass(c.index, c.req, 0, c.okeys, c.matches, c.limits, c.templates) for c in pack_classes],
    )
    bins.sort(key=lambda b: (-b.price, b.template.instance_type.name, sorted(b.contents.items())))
    return packer, bins


# -- minValues ---------------------------------------------------------------------------------------------


def _values(req: Requirement, types: Sequence[Template], okeys: frozenset[OfferKey] | None) -> set[str]:
    """The values of ``req.key`` among ``types`` (for zone and capacity type: among their offerings)."""
    if req.key in (ZONE, CAPACITY_TYPE):
        at = 0 if req.key == ZONE else 1
        return {o[at] for t in types for o in t.offerings if (okeys is None or o in okeys) and o[at]}  # type: ignore[misc]
    return {t.labels[req.key] for t in types if req.key in t.labels}


def _fitting(
    tpls: Sequence[Template], used: Sequence[int], allowed: frozenset[int], okeys: frozenset[OfferKey] | None
) -> list[Template]:
    return [
        t
        for t in tpls
        if t.index in allowed and fits(tuple(used), t.alloc) and t.price_for(okeys) is not None
    ]


def min_values_problem(
    pool: NodePool,
    tpls: Sequence[Template],
    used: Sequence[int],
    allowed: frozenset[int],
    okeys: frozenset[OfferKey] | None,
    offer: OfferKey | None = None,
) -> str:
    """Why a node holding ``used`` leaves too few instance types for the pool's ``minValues`` ("" if not).

    Values of zone and capacity type are counted among the offerings the pods accept; any other key's among
    the types that fit, offered where the claim is bought (``offer``, once chosen: its fallbacks must be).
    """
    types = _fitting(tpls, used, allowed, okeys)
    for req in pool.requirements:
        if req.min_values:
            among = (
                types
                if offer is None or req.key in (ZONE, CAPACITY_TYPE)
                else [t for t in types if offer in t.offerings]
            )
            found = _values(req, among, okeys)
            if len(found) < req.min_values:
                return (
                    f"minValues {req.min_values} for {req.key} not met: only {len(found)} "
                    f"value(s) among the instance types that fit"
                )
    return ""


@dataclass
class _Group:
    used: list[int]
    contents: dict[int, int]
    allowed: frozenset[int]
    okeys: frozenset[OfferKey] | None
    counts: dict[int, int]
    limits: dict[int, int]


class MinValuesSplitter:
    """Splits the nodes of one pool whose pods leave too few instance types for ``minValues``."""

    def __init__(
        self, pool: NodePool, tpls: Sequence[Template], packer: Packer, classes: Sequence[PackClass]
    ):
        self.pool, self.tpls, self.packer, self.classes = pool, tpls, packer, classes

    def bins(self, bins: list[Bin]) -> list[Bin]:
        if not any(r.min_values for r in self.pool.requirements):
            return bins
        out: list[Bin] = []
        for b in bins:
            if not min_values_problem(self.pool, self.tpls, b.used, self._allowed(b.contents), b.okeys):
                out.append(b)
                continue
            self.packer.budget.give_back(b.template, 1)
            out += self._regroup(b)
        return out

    def _allowed(self, contents: dict[int, int]) -> frozenset[int]:
        allowed = frozenset(t.index for t in self.tpls)
        for ci in contents:
            allowed &= self.classes[ci].templates
        return allowed

    def _regroup(self, b: Bin) -> list[Bin]:
        """The bin's units again, each joining the first new node that still keeps enough types."""
        units = sorted(
            (ci for ci, n in b.contents.items() for _ in range(n)),
            key=lambda ci: (tuple(-x for x in self.classes[ci].req), ci),
        )
        groups: list[_Group] = []
        for ci in units:
            if not any(self._join(g, ci) for g in groups):
                group = _Group([0] * len(b.used), {}, self._allowed({}), None, {}, {})
                if self._join(group, ci):
                    groups.append(group)
                else:
                    self.packer.failed[ci] = min_values_problem(
                        self.pool,
                        self.tpls,
                        self.classes[ci].req,
                        self._allowed({ci: 1}),
                        self.classes[ci].okeys,
                    )
        return [made for g in groups if (made := self._bin(g)) is not None]

    def _join(self, g: _Group, ci: int) -> bool:
        c = self.classes[ci]
        used = [u + r for u, r in zip(g.used, c.req, strict=True)]
        allowed = g.allowed & c.templates
        okeys = c.okeys if g.okeys is None else (g.okeys if c.okeys is None else g.okeys & c.okeys)
        if okeys is not None and not okeys:
            return False
        if min_values_problem(self.pool, self.tpls, used, allowed, okeys):
            return False
        counts, limits = dict(g.counts), dict(g.limits)
        if (c.limits or c.matches) and _join_hostname_rules(c, 1, counts, limits) < 1:
            return False
        g.used, g.allowed, g.okeys, g.counts, g.limits = used, allowed, okeys, counts, limits
        g.contents[ci] = g.contents.get(ci, 0) + 1
        return True

    def _bin(self, g: _Group) -> Bin | None:
        down = self.packer.downsize(g.used, g.okeys, g.allowed)
        if down is None:
            for ci in g.contents:
                self.packer.failed[ci] = self.packer._why_not(self.classes[ci])
            return None
        tpl, price, offer = down
        self.packer.budget.take(tpl, 1)
        return Bin(tpl, price, offer, g.used, g.okeys, g.counts, g.limits, g.contents)


# -- claims ------------------------------------------------------------------------------------------------


class ClaimMaker:
    """Turns the bins of one solve into NodeClaims; choices explained once per identical node."""

    def __init__(self, names: Sequence[str]):
        self.names = names
        self._explained: dict[tuple[object, ...], tuple[str, list[str], list[Considered]]] = {}
        self._sorted_templates: dict[str, list[Template]] = {}
        self._formatted: dict[tuple[int, ...], dict[str, str]] = {}
        self._common = CommonTemplates()

    def claim(
        self, pool: NodePool, tpls: Sequence[Template], b: Bin, pods: list[str], classes: Sequence[PackClass]
    ) -> PlannedNodeClaim | str:
        """The claim for ``b`` holding ``pods``, or why it cannot be made."""
        allowed = self._common.of(classes[ci].templates for ci in b.contents)
        assert allowed is not None
        fitting: list[Template] = []
        if any(r.min_values for r in pool.requirements):
            problem = min_values_problem(pool, tpls, b.used, allowed, b.okeys, b.offer)
            if problem:
                return problem
            fitting = _fitting(tpls, b.used, allowed, b.okeys)
        because, fallbacks, considered = self._explain(pool, tpls, b, allowed)
        fallbacks = _unique(fallbacks) if fitting else _unique(fallbacks)[:MAX_FALLBACKS]
        zone, ct = b.offer
        return PlannedNodeClaim(
            node_pool=pool.name,
            instance_type=b.template.instance_type.name,
            zone=zone,
            capacity_type=ct,
            price=b.price,
            price_estimated=b.template.instance_type.price_estimated
            or b.template.instance_type.offering_estimated(zone, ct),
            pods=tuple(sorted(pods)),
            fallbacks=tuple(fallbacks),
            requirements=tuple(self._requirements(pool, b, fallbacks, fitting)),
            requests=self._requests(b),
            chosen_because=because,
            considered=tuple(considered),
        )

    def _explain(
        self, pool: NodePool, tpls: Sequence[Template], b: Bin, allowed: frozenset[int]
    ) -> tuple[str, list[str], list[Considered]]:
        want = max([MAX_FALLBACKS] + [len(tpls) for r in pool.requirements if r.min_values])
        memo_key = (b.template.index, tuple(b.used), b.okeys, allowed, b.offer)
        cached = self._explained.get(memo_key)
        if cached is None:
            ordered = self._sorted_templates.get(pool.name)
            if ordered is None:
                ordered = sorted(tpls, key=lambda t: (t.min_price, t.instance_type.name, t.index))
                self._sorted_templates[pool.name] = ordered
            cached = explain_choice(
                b.template,
                b.price,
                b.used,
                b.okeys,
                allowed,
                ordered,
                self.names,
                Budget(self.names, {}, {}),
                want,
                b.offer,
            )
            self._explained[memo_key] = cached
        return cached

    @staticmethod
    def _requirements(
        pool: NodePool, b: Bin, fallbacks: Sequence[str], fitting: Sequence[Template]
    ) -> list[Requirement]:
        """The pool's requirements, the values its open keys got, the pool, the types, zone and capacity
        type: the offering chosen, or, under a ``minValues`` on zone or capacity type, every one that fits."""
        chosen = dict(b.template.chosen)
        skip = {INSTANCE_TYPE, ZONE, CAPACITY_TYPE, NODEPOOL, *chosen}
        reqs = [r for r in pool.requirements if r.key not in skip]
        reqs += [Requirement(key, "In", (value,)) for key, value in b.template.chosen]
        reqs += [
            Requirement(NODEPOOL, "In", (pool.name,)),
            Requirement(INSTANCE_TYPE, "In", tuple(_unique([b.template.instance_type.name, *fallbacks]))),
        ]
        flexible = {r.key: r for r in pool.requirements if r.min_values and r.key in (ZONE, CAPACITY_TYPE)}
        for at, key in enumerate((ZONE, CAPACITY_TYPE)):
            values = sorted(_values(flexible[key], fitting, b.okeys)) if key in flexible else []
            if not values and b.offer[at]:
                values = [str(b.offer[at])]
            if values:
                reqs.append(Requirement(key, "In", tuple(values)))
        return reqs

    def _requests(self, b: Bin) -> dict[str, str]:
        totals = list(b.used)
        for d, name in enumerate(self.names):
            totals[d] += b.template.daemon_requests.get(name, 0)
        requests = self._formatted.get(tuple(totals))
        if requests is None:
            requests = {n: format_quantity(n, v) for n, v in zip(self.names, totals, strict=True) if v}
            self._formatted[tuple(totals)] = requests
        return requests


def _unique(names: Sequence[str]) -> list[str]:
    """Names once each, first place kept (variants of one type share its name)."""
    return list(dict.fromkeys(names))
