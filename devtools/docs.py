"""Generated parts of the documentation: ``python -m devtools.docs`` (``make docs``) rewrites them in place.

README.md's settings table is rendered from the services' settings declarations (:mod:`tenon.runtime.settings`),
between ``<!-- settings:start -->`` and ``<!-- settings:end -->``; a test fails when it is stale, so the table
and the code cannot drift apart.
"""

from __future__ import annotations

import sys
from pathlib import Path

from tenon.runtime.settings import markdown_table
from tenon.services import SERVICES, definition

README = Path(__file__).resolve().parents[1] / "README.md"
START, END = "<!-- settings:start -->", "<!-- settings:end -->"


def settings_table() -> str:
    return markdown_table([(name, definition(name).settings) for name in SERVICES])


def rendered(text: str) -> str:
    """``text`` (README.md) with its settings table brought up to date."""
    head, found, rest = text.partition(START)
    _, found_end, tail = rest.partition(END)
    if not (found and found_end):
        raise ValueError(f"README.md lacks the {START} ... {END} markers")
    return f"{head}{START}\n{settings_table()}\n{END}{tail}"


def main() -> int:
    text = README.read_text()
    fresh = rendered(text)
    if fresh != text:
        README.write_text(fresh)
        print("README.md: settings table updated")
    return 0


if __name__ == "__main__":
    sys.exit(main())
