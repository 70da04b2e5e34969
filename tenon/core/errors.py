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
        message = f"{where} ({obj}): {field}: {problem}" if field else f"{where} ({obj}): {problem}"
        super().__init__(one_line(message))


_ESCAPES = {c: f"\\x{c:02x}" for c in (*range(32), 0x7F, 0x85)} | {
    ord("\n"): "\\n",
    ord("\r"): "\\r",
    ord("\t"): "\\t",
    0x2028: "\\u2028",
    0x2029: "\\u2029",
}


def one_line(text: str) -> str:
    """``text`` with every character that could end a line (or hide one) escaped: field paths hold the
    input's own keys, which may hold anything."""
    return text.translate(_ESCAPES)
