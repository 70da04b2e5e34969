"""Disruption budgets (pure), as Karpenter reads ``spec.disruption.budgets``: how many of a NodePool's nodes
may be disrupted at once, right now, for a reason; and every problem of a NodePool's disruption fields, in one
line each naming the field, for the NodePool's ``ValidationSucceeded`` condition.

A budget is ``{nodes, schedule?, duration?, reasons?}``:

* ``nodes``: a count (``"5"``) or a percentage of the pool's nodes (``"10%"``, rounded **up**, so 10% of 5
  nodes allows 1), as Karpenter's pattern ``^((100|[0-9]{1,2})%|[0-9]+)$`` says;
* ``schedule`` + ``duration`` (both or neither): the budget is active from each match of the standard cron
  ``schedule`` (UTC; 5 fields with names such as ``mon-fri`` and ``jan``, or ``@yearly``, ``@annually``,
  ``@monthly``, ``@weekly``, ``@daily``, ``@midnight``, ``@hourly``; read by the maintained ``cronsim``
  library) for ``duration`` (``30m``, ``1h30m``; hours and minutes only, as Karpenter). Without a schedule
  it is always active. Activity is Karpenter's test: the first match after ``now - duration`` is not after
  ``now``: one step of the cron iterator, whatever the duration (``100000h`` costs what ``1h`` costs);
* ``reasons``: ``Empty``, ``Underutilized``, ``Drifted``; without, the budget applies to every reason.

The allowance for a reason is the minimum over the active budgets that apply to it, minus the pool's nodes
already being disrupted or not Ready (never below 0); no budget applies: no limit. No ``budgets`` field means
Karpenter's default ``[{nodes: "10%"}]``. **An invalid budget allows nothing** for any reason (Karpenter
fails closed the same way) and the allowance says why; the same reasons make ``ValidationSucceeded`` false,
so a typo is never silent.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from cronsim import CronSim, CronSimError

from tenon.domain.disruption.durations import DurationError, parse_duration

REASONS = ("Empty", "Underutilized", "Drifted")
DEFAULT_BUDGETS: tuple[dict[str, Any], ...] = ({"nodes": "10%"},)
MAX_BUDGETS = 50
POLICIES = ("WhenEmpty", "WhenEmptyOrUnderutilized")
MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_NODES = re.compile(r"(?:100|[0-9]{1,2})%|[0-9]{1,9}")
_BUDGET_DURATION = re.compile(r"(?:[0-9]+h)?(?:[0-9]+m)?(?:0s)?")
LOOKBACK_LIMIT = timedelta(days=366 * 100)
"""How far back a schedule is searched at most: every valid cron expression matches within a century, so a
longer duration is active exactly when this one is (and ``datetime`` stays in range)."""


class BudgetError(ValueError):
    """An invalid budget field; ``str()`` is one line naming it."""


@dataclass(frozen=True)
class Budget:
    index: int
    nodes: str
    schedule: str | None = None
    duration: timedelta | None = None
    reasons: frozenset[str] | None = None

    def applies_to(self, reason: str) -> bool:
        return self.reasons is None or reason in self.reasons

    def active(self, now: datetime) -> bool:
        if self.schedule is None or self.duration is None:
            return True
        checkpoint = now - min(self.duration, LOOKBACK_LIMIT)
        return next(CronSim(MACROS.get(self.schedule, self.schedule), checkpoint)) <= now

    def limit(self, total: int) -> int:
        if self.nodes.endswith("%"):
            return math.ceil(total * int(self.nodes[:-1]) / 100)
        return int(self.nodes)

    def describe(self, pool: str) -> str:
        text = f"NodePool {pool} budget[{self.index}] nodes={self.nodes}"
        if self.schedule is not None:
            text += f" (schedule {self.schedule!r} for {_show(self.duration)})"
        if self.reasons is not None:
            text += f" for {','.join(sorted(self.reasons))}"
        return text


def _show(duration: timedelta | None) -> str:
    seconds = int(duration.total_seconds()) if duration else 0
    hours, minutes = divmod(seconds // 60, 60)
    return (f"{hours}h" if hours else "") + (f"{minutes}m" if minutes or not hours else "")


@dataclass(frozen=True)
class Allowance:
    allowed: int
    """How many more of the pool's nodes may start being disrupted now for the reason (never negative)."""
    budget: str
    """Which budget decided it, as text for decisions and logs."""
    invalid: bool = False
    """True when the pool's budgets cannot be read (nothing is allowed then)."""
    at_once: int | None = None
    """How many of the pool's nodes the budget lets be disrupted at once, those in progress included (None:
    as many as ``allowed``). Full now (``allowed`` 0) but not zero: a command may be prepared that waits for
    room, as an emptiness queue does."""


def _disruption(nodepool: Mapping[str, Any]) -> Mapping[str, Any]:
    spec = nodepool.get("spec")
    disruption = spec.get("disruption") if isinstance(spec, Mapping) else None
    return disruption if isinstance(disruption, Mapping) else {}


def _nodes(raw: Any, where: str) -> str:
    if isinstance(raw, int) and not isinstance(raw, bool) and raw >= 0:
        return str(raw)  # a YAML integer: what was meant is clear
    if not isinstance(raw, str) or not _NODES.fullmatch(raw.strip()):
        raise BudgetError(f"{where}.nodes: {raw!r} is neither a count (5) nor a percentage up to 100% (10%)")
    return raw.strip()


def _schedule(raw: Any, where: str) -> str:
    if not isinstance(raw, str) or not raw.strip():
        raise BudgetError(f"{where}.schedule: {raw!r} is not a cron schedule (like '0 9 * * mon-fri')")
    text = " ".join(raw.split())
    expression = MACROS.get(text, text)
    if expression.startswith("@"):
        raise BudgetError(f"{where}.schedule: {raw!r}: the macros are {', '.join(MACROS)}")
    if len(expression.split(" ")) != 5:
        raise BudgetError(
            f"{where}.schedule: {raw!r} needs 5 fields (minute hour day-of-month month weekday)"
        )
    try:
        CronSim(expression, datetime(2000, 1, 1))
    except (CronSimError, ValueError) as exc:
        raise BudgetError(f"{where}.schedule: {raw!r} is not valid cron ({exc})") from None
    return text


def _duration(raw: Any, where: str) -> timedelta:
    text = raw.strip() if isinstance(raw, str) else ""
    if not text or not _BUDGET_DURATION.fullmatch(text) or text in ("0s",):
        raise BudgetError(f"{where}.duration: {raw!r} is not hours and minutes (like 30m or 1h30m)")
    try:
        duration = parse_duration(text)
    except DurationError as exc:
        raise BudgetError(f"{where}.duration: {exc}") from None
    assert duration is not None
    return duration


def _reasons(raw: Any, where: str) -> frozenset[str] | None:
    if raw is None:
        return None
    if not isinstance(raw, list) or len(raw) > MAX_BUDGETS:
        raise BudgetError(f"{where}.reasons: must be a list of {', '.join(REASONS)}")
    unknown = [r for r in raw if r not in REASONS]
    if unknown:
        raise BudgetError(f"{where}.reasons: {unknown[0]!r} is not one of {', '.join(REASONS)}")
    return frozenset(raw)


def read_budget(index: int, raw: Any) -> Budget:
    where = f"spec.disruption.budgets[{index}]"
    if not isinstance(raw, Mapping):
        raise BudgetError(f"{where}: {raw!r} is not a map like {{nodes: '10%'}}")
    has_schedule, has_duration = raw.get("schedule") is not None, raw.get("duration") is not None
    if has_schedule != has_duration:
        raise BudgetError(f"{where}: 'schedule' must be set with 'duration'")
    return Budget(
        index=index,
        nodes=_nodes(raw.get("nodes", "10%"), where),
        schedule=_schedule(raw["schedule"], where) if has_schedule else None,
        duration=_duration(raw["duration"], where) if has_duration else None,
        reasons=_reasons(raw.get("reasons"), where),
    )


def read_budgets(nodepool: Mapping[str, Any]) -> tuple[tuple[Budget, ...], tuple[str, ...]]:
    """(the budgets that can be read, one line per problem)."""
    raw = _disruption(nodepool).get("budgets")
    if raw is None:
        raw = list(DEFAULT_BUDGETS)
    if not isinstance(raw, list):
        return (), (f"spec.disruption.budgets: {_short(raw)} is not a list of budgets",)
    if len(raw) > MAX_BUDGETS:
        return (), (f"spec.disruption.budgets: {len(raw)} budgets, at most {MAX_BUDGETS}",)
    budgets: list[Budget] = []
    problems: list[str] = []
    for index, item in enumerate(raw):
        try:
            budgets.append(read_budget(index, item))
        except BudgetError as exc:
            problems.append(str(exc))
    return tuple(budgets), tuple(problems)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def policy_problems(nodepool: Mapping[str, Any]) -> list[str]:
    """Problems of the other disruption fields: ``consolidationPolicy``, ``consolidateAfter``, and the
    template's ``expireAfter`` and ``terminationGracePeriod``."""
    problems: list[str] = []
    disruption = _disruption(nodepool)
    policy = disruption.get("consolidationPolicy", "WhenEmptyOrUnderutilized")
    if policy not in POLICIES:
        problems.append(
            f"spec.disruption.consolidationPolicy: {_short(policy)} is not one of {', '.join(POLICIES)}"
        )
    fields = (
        ("spec.disruption.consolidateAfter", disruption.get("consolidateAfter"), True),
        ("spec.template.spec.expireAfter", template_spec(nodepool).get("expireAfter"), True),
        (
            "spec.template.spec.terminationGracePeriod",
            template_spec(nodepool).get("terminationGracePeriod"),
            False,
        ),
    )
    for where, raw, never in fields:
        if raw is None:
            continue
        try:
            parse_duration(raw, allow_never=never)
        except DurationError as exc:
            problems.append(f"{where}: {exc}")
    return problems


def template_spec(nodepool: Mapping[str, Any]) -> Mapping[str, Any]:
    spec = nodepool.get("spec")
    template = spec.get("template") if isinstance(spec, Mapping) else None
    tspec = template.get("spec") if isinstance(template, Mapping) else None
    return tspec if isinstance(tspec, Mapping) else {}


def disruption_problems(nodepool: Mapping[str, Any]) -> list[str]:
    """Every problem of the NodePool's disruption fields (what ``ValidationSucceeded=False`` must say)."""
    return [*read_budgets(nodepool)[1], *policy_problems(nodepool)]


def allowance(
    nodepool: Mapping[str, Any], reason: str, *, total_nodes: int, disrupting: int, now: datetime
) -> Allowance:
    """How many more of the pool's nodes may be disrupted now for ``reason``."""
    name = str((nodepool.get("metadata") or {}).get("name", "?"))
    budgets, problems = read_budgets(nodepool)
    if problems:
        return Allowance(0, f"NodePool {name}: invalid budget, nothing is disrupted: {problems[0]}", True)
    best: tuple[int, Budget] | None = None
    for budget in budgets:
        if not budget.applies_to(reason) or not budget.active(now):
            continue
        limit = budget.limit(total_nodes)
        if best is None or limit < best[0]:
            best = (limit, budget)
    if best is None:
        return Allowance(
            max(0, total_nodes - disrupting),
            f"NodePool {name}: no active budget for {reason}",
            at_once=total_nodes,
        )
    limit, budget = best
    return Allowance(
        max(0, limit - disrupting),
        f"{budget.describe(name)}: {limit} of {total_nodes} at once, {disrupting} in progress",
        at_once=limit,
    )
