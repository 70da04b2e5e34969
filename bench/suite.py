"""What a bench suite returns: figures for the JSON file, rows for the table, targets checked."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Target:
    name: str
    goal: str
    measured: str
    met: bool

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "goal": self.goal, "measured": self.measured, "met": self.met}


@dataclass
class Suite:
    title: str
    columns: list[str]
    rows: list[list[Any]] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)
    targets: list[Target] = field(default_factory=list)
