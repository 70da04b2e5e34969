"""The one error type for bad input: it names where the problem is, so a user can fix it in one go."""

from __future__ import annotations


class InputError(ValueError):
    """Invalid input. ``str()`` reads ``FILE document N (Kind ns/name): field.path: what is wrong``."""

    def __init__(self, source: str, index: int | None, kind: str, name: str, field: str, problem: str):
        self.source = source
        self.index = index
        self.kind = kind
        self.name = name
        self.field = field
        self.problem = problem
        where = source if index is None else f"{source} document {index}"
        obj = f"{kind} {name}".strip() or "object"
        super().__init__(f"{where} ({obj}): {field}: {problem}" if field else f"{where} ({obj}): {problem}")
