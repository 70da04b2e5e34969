"""Why each instance type won or lost for one new node.

For a planned node the solver knows what it must hold (requests of its pods plus DaemonSets), which offerings
its pods accept (zone, capacity type) and which templates every pod on it accepts. :func:`explain_choice` walks
the NodePool's instance types cheapest first and gives each a verdict a user can read: ``chosen``,
``fallback`` (fits, costs more: the launcher may use it if the chosen one has no capacity), or why it lost:
too small (naming the resource), not allowed for these pods (requirements, taints, host ports), no offering in
the zone/capacity type, or the NodePool limit / Cluster API max size. Types more expensive than the chosen one
that would not fit are left out; the list is capped so plans stay readable.
"""

from __future__ import annotations

from collections.abc import Sequence

from tenon.core.packing import Budget
from tenon.core.plan import Considered
from tenon.core.quantities import format_quantity
from tenon.core.templates import OfferKey, Template

MAX_CONSIDERED = 12
MAX_FALLBACKS = 20


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
    """(why the chosen type won, fallback type names cheaper first, verdicts on the others).

    A fallback must offer the chosen offering's zone and capacity type (``offer``): the NodeClaim pins them.
    """
    fallbacks: list[tuple[float, str]] = []
    considered: list[Considered] = []
    ordered = pool_templates  # sorted by (min_price, name) by the caller
    for tpl in ordered:
        if len(fallbacks) >= want_fallbacks and tpl.min_price > price:
            break
        name = tpl.instance_type.name
        priced = tpl.price_for(okeys)
        tprice = None if priced is None else priced[0]
        if tpl is chosen:
            considered.append(Considered(name, price, "chosen: cheapest that fits"))
            continue
        short = [(r, u, a) for r, u, a in zip(resource_names, used, tpl.alloc, strict=True) if u > a]
        if short:
            r, u, a = short[0]
            verdict = (
                f"too small: needs {r}={format_quantity(r, u)}, has {format_quantity(r, a)} after DaemonSets"
            )
        elif tpl.index not in allowed:
            verdict = "not allowed for these pods (requirements, taints or host ports)"
        elif priced is None:
            verdict = "no available offering in the zone/capacity type these pods need"
        elif budget.blocking(tpl):
            verdict = budget.blocking(tpl)
        elif offer is not None and offer not in tpl.offerings:
            verdict = f"no offering in {offer[0] or 'the zone'} ({offer[1]}) where the chosen type is bought"
        else:
            fallbacks.append((tprice or 0.0, name))
            verdict = "fallback: fits, costs more"
        if (tprice is not None and tprice < price) or verdict.startswith("fallback"):
            considered.append(Considered(name, tprice, verdict))
            if len(considered) > 4 * MAX_CONSIDERED:
                del considered[:MAX_CONSIDERED]
    fallbacks.sort()
    names = []
    for _, name in fallbacks:
        if name not in names and name != chosen.instance_type.name:
            names.append(name)
    cheaper = [c for c in considered if c.price is not None and c.price < price]
    rest = [c for c in considered if c not in cheaper]
    kept = (cheaper[-MAX_CONSIDERED // 2 :] + rest)[:MAX_CONSIDERED]
    because = (
        f"{chosen.instance_type.name} at {price:g}/h is the cheapest type that fits "
        f"{', '.join(f'{r}={format_quantity(r, u)}' for r, u in zip(resource_names, used, strict=True) if u)}"
    )
    if chosen.instance_type.price_estimated:
        because += " (price estimated from its resources: no tenon.sh/price-per-hour annotation)"
    return because, names, kept
