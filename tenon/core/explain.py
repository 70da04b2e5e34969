"""Why each instance type won or lost for one new node: the facts, and the few words the plan records.

For a planned node the solver knows what it must hold (requests of its pods plus DaemonSets), which offerings
its pods accept (zone, capacity type) and which templates every pod on it accepts. :func:`choice_facts` walks
the NodePool's instance types cheapest first and gives each a :class:`Verdict` as data: ``chosen``,
``fallback`` (fits, costs more: the launcher may use it if the chosen one has no capacity), or why it lost:
too small (which resource, how much is needed, how much it has), not allowed for these pods (requirements,
taints, host ports), no offering in the zone/capacity type, the NodePool limit or Cluster API max size, or no
offering where the chosen type is bought. Types more expensive than the chosen one that would not fit are left
out; the list is capped so plans stay readable.

Why words are made here at all: the plan carries them. ``PlannedNodeClaim.chosen_because`` and each
``Considered.verdict`` are strings in the plan's JSON (``tenon simulate -o json``) and in the ``explanation``
recorded on every ``NodeClaimPlanned`` (keys ``chosen`` and ``considered[].verdict``: part of the event
contract, read back from the log long after the build that wrote them). The core imports nothing of ours,
so it cannot hand its facts to :mod:`tenon.domain.explain` to be phrased; :func:`verdict_words` and
:func:`chosen_words` are the only two places the core phrases them. Everything a person reads beyond these
recorded words (the story of a claim, "cheaper, but did not fit", the fallbacks in order) is phrased by
:mod:`tenon.domain.explain`, which tells outcomes apart by the leading words written here (``chosen``,
``fallback``, ``too small``): change them and old logs still say the old words.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import NamedTuple

from tenon.core.packing import Budget
from tenon.core.plan import Considered
from tenon.core.quantities import format_quantity
from tenon.core.templates import OfferKey, Template

MAX_CONSIDERED = 12
MAX_FALLBACKS = 20


class Reason(StrEnum):
    """What became of one instance type."""

    CHOSEN = "chosen"
    FALLBACK = "fallback"
    TOO_SMALL = "too small"
    NOT_ALLOWED = "not allowed"
    NO_OFFERING = "no offering"
    OVER_BUDGET = "over budget"
    """The NodePool limit is reached, or the type's Cluster API MachineDeployment is at its max size."""
    NOT_WHERE_CHOSEN = "not where the chosen type is bought"


@dataclass(frozen=True)
class Shortfall:
    """The first resource an instance type lacks: what the node needs and what the type has after
    DaemonSets, in the core's base units."""

    resource: str
    needs: int
    has: int

    def needed(self) -> str:
        return format_quantity(self.resource, self.needs)

    def had(self) -> str:
        return format_quantity(self.resource, self.has)


class Verdict(NamedTuple):  # a tuple: one is made for every type looked at, so it must be cheap
    instance_type: str
    price: float | None
    """Its cheapest price among the offerings these pods accept (``None``: no such offering)."""
    reason: Reason
    shortfall: Shortfall | None = None
    budget: str = ""
    """For ``OVER_BUDGET``: which limit (the budget's own words)."""
    offer: OfferKey | None = None
    """For ``NOT_WHERE_CHOSEN``: the chosen type's (zone, capacity type)."""


@dataclass(frozen=True)
class ChoiceFacts:
    chosen: str
    price: float
    price_estimated: bool
    """Priced by tenon's model for want of a price (a MachineDeployment without the annotation)."""
    needs: tuple[tuple[str, int], ...]
    """What the node must hold, per resource (base units), DaemonSets excluded; zero resources left out."""
    fallbacks: tuple[str, ...]
    """Other types that fit, can be bought where the chosen one is, cheaper first."""
    considered: tuple[Verdict, ...]
    offering_estimated: bool = False
    """The chosen offering's price is an estimate its catalog flagged (EC2 gave no usable spot price)."""


def verdict_words(verdict: Verdict) -> str:
    """The verdict as the plan records it (``too small: needs cpu=3, has 1900m after DaemonSets``)."""
    match verdict.reason:
        case Reason.CHOSEN:
            return "chosen: cheapest that fits"
        case Reason.FALLBACK:
            return "fallback: fits, costs more"
        case Reason.TOO_SMALL if (short := verdict.shortfall) is not None:
            return f"too small: needs {short.resource}={short.needed()}, has {short.had()} after DaemonSets"
        case Reason.NOT_ALLOWED:
            return "not allowed for these pods (requirements, taints or host ports)"
        case Reason.NO_OFFERING:
            return "no available offering in the zone/capacity type these pods need"
        case Reason.NOT_WHERE_CHOSEN if verdict.offer is not None:
            zone, capacity_type = verdict.offer
            return f"no offering in {zone or 'the zone'} ({capacity_type}) where the chosen type is bought"
    return verdict.budget or str(verdict.reason)


def chosen_words(facts: ChoiceFacts) -> str:
    """Why the chosen type won, as the plan records it."""
    needs = ", ".join(f"{r}={format_quantity(r, amount)}" for r, amount in facts.needs)
    because = f"{facts.chosen} at {facts.price:g}/h is the cheapest type that fits {needs}"
    if facts.price_estimated:
        because += " (price estimated from its resources: no tenon.sh/price-per-hour annotation)"
    elif facts.offering_estimated:
        because += " (an estimated price: the provider gave no usable figure for this offering)"
    return because


def explain_choice(
    chosen: Template,
    price: float,
    used: Sequence[int],
    okeys: frozenset[OfferKey] | None,
    allowed: frozenset[int],
    pool_templates: Sequence[Template],
    resource_names: Sequence[str],
    budget: Budget,
    want_fallbacks: int = MAX_FALLBACKS,
    offer: OfferKey | None = None,
) -> tuple[str, list[str], list[Considered]]:
    """(why the chosen type won, fallback type names cheaper first, verdicts on the others), in words.

    A fallback must offer the chosen offering's zone and capacity type (``offer``): the NodeClaim pins them.
    """
    facts = choice_facts(
        chosen, price, used, okeys, allowed, pool_templates, resource_names, budget, want_fallbacks, offer
    )
    considered = [Considered(v.instance_type, v.price, verdict_words(v)) for v in facts.considered]
    return chosen_words(facts), list(facts.fallbacks), considered


@dataclass(frozen=True)
class _Node:
    """What every verdict on one planned node is judged against."""

    chosen: Template
    price: float
    used: Sequence[int]
    okeys: frozenset[OfferKey] | None
    allowed: frozenset[int]
    resource_names: Sequence[str]
    budget: Budget
    offer: OfferKey | None


def choice_facts(
    chosen: Template,
    price: float,
    used: Sequence[int],
    okeys: frozenset[OfferKey] | None,
    allowed: frozenset[int],
    pool_templates: Sequence[Template],
    resource_names: Sequence[str],
    budget: Budget,
    want_fallbacks: int = MAX_FALLBACKS,
    offer: OfferKey | None = None,
) -> ChoiceFacts:
    """The verdicts on ``pool_templates`` (sorted by (min_price, name) by the caller) for one planned node."""
    node = _Node(chosen, price, used, okeys, allowed, resource_names, budget, offer)
    fallbacks, considered = _walk(node, pool_templates, want_fallbacks)
    return ChoiceFacts(
        chosen=chosen.instance_type.name,
        price=price,
        price_estimated=chosen.instance_type.price_estimated,
        offering_estimated=offer is not None and chosen.instance_type.offering_estimated(*offer),
        needs=tuple((r, u) for r, u in zip(resource_names, used, strict=True) if u),
        fallbacks=_fallback_names(fallbacks, chosen.instance_type.name),
        considered=_kept(considered, price),
    )


def _walk(
    node: _Node, ordered: Sequence[Template], want_fallbacks: int
) -> tuple[list[tuple[float, str]], list[Verdict]]:
    """Cheapest first, until enough fallbacks are found and the rest cost more than the chosen type."""
    fallbacks: list[tuple[float, str]] = []
    considered: list[Verdict] = []
    for tpl in ordered:
        if len(fallbacks) >= want_fallbacks and tpl.min_price > node.price:
            break
        verdict = _verdict(node, tpl)
        if verdict.reason is Reason.FALLBACK:
            fallbacks.append((verdict.price or 0.0, verdict.instance_type))
        if _worth_showing(verdict, node.price):
            considered.append(verdict)
            if verdict.reason is not Reason.CHOSEN and len(considered) > 4 * MAX_CONSIDERED:
                del considered[:MAX_CONSIDERED]  # the cheapest losers matter least; keep the list bounded
    return fallbacks, considered


def _verdict(node: _Node, tpl: Template) -> Verdict:
    name = tpl.instance_type.name
    if tpl is node.chosen:
        return Verdict(name, node.price, Reason.CHOSEN)
    priced = tpl.price_for(node.okeys)
    tprice = None if priced is None else priced[0]
    short = [(r, u, a) for r, u, a in zip(node.resource_names, node.used, tpl.alloc, strict=True) if u > a]
    if short:
        return Verdict(name, tprice, Reason.TOO_SMALL, shortfall=Shortfall(*short[0]))
    if tpl.index not in node.allowed:
        return Verdict(name, tprice, Reason.NOT_ALLOWED)
    if priced is None:
        return Verdict(name, tprice, Reason.NO_OFFERING)
    blocking = node.budget.blocking(tpl)
    if blocking:
        return Verdict(name, tprice, Reason.OVER_BUDGET, budget=blocking)
    if node.offer is not None and node.offer not in tpl.offerings:
        return Verdict(name, tprice, Reason.NOT_WHERE_CHOSEN, offer=node.offer)
    return Verdict(name, tprice, Reason.FALLBACK)


def _worth_showing(verdict: Verdict, price: float) -> bool:
    """The chosen type, every fallback, and the cheaper types that lost (the dearer losers say nothing)."""
    if verdict.reason is Reason.CHOSEN or verdict.reason is Reason.FALLBACK:
        return True
    return verdict.price is not None and verdict.price < price


def _fallback_names(fallbacks: list[tuple[float, str]], chosen: str) -> tuple[str, ...]:
    names = dict.fromkeys(name for _, name in sorted(fallbacks) if name != chosen)
    return tuple(names)


def _kept(considered: list[Verdict], price: float) -> tuple[Verdict, ...]:
    """At most MAX_CONSIDERED: the dearest half of the cheaper losers, then the chosen type and fallbacks."""
    cheaper = [v for v in considered if v.price is not None and v.price < price]
    rest = [v for v in considered if v.price is None or v.price >= price]
    return tuple((cheaper[-MAX_CONSIDERED // 2 :] + rest)[:MAX_CONSIDERED])
