"""Disruption budgets (pure): how many of a NodePool's nodes may be disrupted at once, right now, for a
reason.

A NodePool's ``spec.disruption.budgets`` is a list of ``{nodes, schedule?, duration?, reasons?}``, as in
Karpenter:

* ``nodes``: a count (``"5"``) or a percentage of the pool's nodes (``"10%"``, rounded **up**);
* ``schedule`` + ``duration``: the budget is active only from each cron match (UTC, 5 fields or ``@hourly``,
  ``@daily``, ``@weekly``, ``@monthly``, ``@yearly``) for ``duration`` (``"30m"``, ``"1h30m"``); without a
  schedule it is always active;
* ``reasons``: the disruption reasons it applies to (``Empty``, ``Underutilized``, ``Drifted``); without, all.

The allowance is the minimum over the active budgets that apply to the reason, minus the pool's nodes already
being disrupted (or NotReady). No budgets means the default ``nodes: 10%``. An invalid budget allows nothing
and says why (a typo must not silently allow everything).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

DEFAULT_BUDGET = {"nodes": "10%"}
_DURATION = re.compile(r"^(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")
_MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_RANGES = ((0, 59), (0, 23), (1, 31), (1, 12), (0, 7))


class BudgetError(ValueError):
    pass


@dataclass(frozen=True)
class Allowance:
    allowed: int
    """How many more nodes may start being disrupted now (never negative)."""
    budget: str
    """Which budget decided it, as text for decisions and logs."""


def parse_duration(text: str) -> timedelta:
    match = _DURATION.match(text.strip())
    if not text.strip() or not match or not any(match.groups()):
        raise BudgetError(f"duration {text!r} is not like 30m or 1h30m")
    hours, minutes, seconds = (int(g) if g else 0 for g in match.groups())
    return timedelta(hours=hours, minutes=minutes, seconds=seconds)


def _field_values(text: str, low: int, high: int) -> set[int]:
    values: set[int] = set()
    for part in text.split(","):
        step = 1
        if "/" in part:
            part, step_text = part.split("/", 1)
            step = int(step_text)
            if step <= 0:
                raise BudgetError(f"cron step {step_text!r} must be positive")
        if part == "*":
            start, end = low, high
        elif "-" in part:
            a, b = part.split("-", 1)
            start, end = int(a), int(b)
        else:
            start = int(part)
            end = start if step == 1 else high
        if start < low or end > high or start > end:
            raise BudgetError(f"cron value {part!r} outside {low}-{high}")
        values.update(range(start, end + 1, step))
    return values


def cron_matches(schedule: str, moment: datetime) -> bool:
    """Whether ``moment`` (to the minute, UTC) is a match of the cron ``schedule``."""
    expression = _MACROS.get(schedule.strip(), schedule.strip())
    fields = expression.split()
    if len(fields) != 5:
        raise BudgetError(f"schedule {schedule!r} needs 5 cron fields (minute hour day month weekday)")
    try:
        minutes, hours, days, months, weekdays = (
            _field_values(f, low, high) for f, (low, high) in zip(fields, _RANGES, strict=True)
        )
    except ValueError as exc:
        raise BudgetError(f"schedule {schedule!r}: {exc}") from None
    weekdays = {d % 7 for d in weekdays}
    cron_weekday = (moment.weekday() + 1) % 7  # cron: 0 = Sunday
    day_ok = moment.day in days
    weekday_ok = cron_weekday in weekdays
    # cron's rule: when both day fields are restricted, either may match
    if fields[2] != "*" and fields[4] != "*":
        day_match = day_ok or weekday_ok
    else:
        day_match = day_ok and weekday_ok
    return moment.minute in minutes and moment.hour in hours and moment.month in months and day_match


def schedule_active(schedule: str, duration: timedelta, now: datetime) -> bool:
    """True when a match of ``schedule`` happened within the last ``duration`` (inclusive of now)."""
    start = now.replace(second=0, microsecond=0)
    minutes = int(duration.total_seconds() // 60)
    return any(cron_matches(schedule, start - timedelta(minutes=m)) for m in range(minutes + 1))


def _node_count(value: Any, total: int) -> int:
    text = str(value).strip()
    if text.endswith("%"):
        try:
            percent = float(text[:-1])
        except ValueError:
            raise BudgetError(f"nodes {text!r} is not a percentage") from None
        if not 0 <= percent <= 100:
            raise BudgetError(f"nodes {text!r} must be between 0% and 100%")
        return math.ceil(total * percent / 100)
    try:
        count = int(text)
    except ValueError:
        raise BudgetError(f"nodes {text!r} is neither a count nor a percentage") from None
    if count < 0:
        raise BudgetError(f"nodes {text!r} is negative")
    return count


def allowance(
    nodepool: Mapping[str, Any], reason: str, *, total_nodes: int, disrupting: int, now: datetime
) -> Allowance:
    """How many more of the pool's nodes may be disrupted now for ``reason``."""
    name = (nodepool.get("metadata") or {}).get("name", "?")
    budgets = ((nodepool.get("spec") or {}).get("disruption") or {}).get("budgets") or [DEFAULT_BUDGET]
    best: tuple[int, str] | None = None
    for index, budget in enumerate(budgets):
        label = f"NodePool {name} budget[{index}] nodes={budget.get('nodes')}"
        try:
            reasons = budget.get("reasons")
            if reasons and reason not in reasons:
                continue
            schedule = budget.get("schedule")
            if schedule:
                if not budget.get("duration"):
                    raise BudgetError("a schedule needs a duration")
                duration = parse_duration(str(budget["duration"]))
                if not schedule_active(str(schedule), duration, now):
                    continue
                label += f" (schedule {schedule!r} for {budget['duration']})"
            limit = _node_count(budget.get("nodes", "10%"), total_nodes)
        except BudgetError as exc:
            return Allowance(0, f"{label}: invalid ({exc}), so nothing is disrupted")
        if best is None or limit < best[0]:
            best = (limit, label)
    if best is None:
        return Allowance(max(0, total_nodes - disrupting), f"NodePool {name}: no budget applies to {reason}")
    limit, label = best
    return Allowance(
        max(0, limit - disrupting), f"{label}: {limit} of {total_nodes} at once, {disrupting} in progress"
    )
