"""Generated parts of the documentation: ``python -m devtools.docs`` (``make docs``) rewrites them in place.

README.md's settings table is rendered from the services' settings declarations
(:mod:`tenon.runtime.settings`), between ``<!-- settings:start -->`` and ``<!-- settings:end -->``; a test
fails when it is stale, so the table and the code cannot drift apart.
"""

from __future__ import annotations

import sys
from pathlib import Path

from devtools import nats_permissions
from proto import registry
from tenon.runtime.settings import markdown_table
from tenon.services import SERVICES, definition

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PROTO_README = ROOT / "proto" / "README.md"


def settings_table() -> str:
    return markdown_table([(name, definition(name).settings) for name in SERVICES])


def permissions_table() -> str:
    lines = ["| event | subject | written by | read by |", "|---|---|---|---|"]
    for spec in registry.SPECS:
        readers = ", ".join(spec.readers) or "people (`tenon tap`, `tenon explain`)"
        lines.append(f"| `{spec.type.__name__}` | `{spec.subject}` | {', '.join(spec.writers)} | {readers} |")
    return "\n".join(lines)


NATS_CONFIG = ROOT / "deploy" / "components" / "nats" / "nats.yaml"


def nats_users() -> str:
    return nats_permissions.users_block(nats_permissions.deployment_passwords())


GENERATED = (
    (README, "<!-- settings:start -->", "<!-- settings:end -->", settings_table),
    (PROTO_README, "<!-- permissions:start -->", "<!-- permissions:end -->", permissions_table),
    (
        NATS_CONFIG,
        "# permissions:start (generated from proto/registry.py by make docs)",
        "        # permissions:end",
        nats_users,
    ),
)


def rendered(text: str, start: str, end: str, table: str) -> str:
    """``text`` with the part between its ``start`` and ``end`` markers brought up to date."""
    head, found, rest = text.partition(start)
    _, found_end, tail = rest.partition(end)
    if not (found and found_end):
        raise ValueError(f"the document lacks the {start} ... {end} markers")
    return f"{head}{start}\n{table}\n{end}{tail}"


def stale() -> list[str]:
    """The generated documents that differ from what the code says now."""
    return [
        str(path.relative_to(ROOT))
        for path, start, end, make in GENERATED
        if rendered(path.read_text(), start, end, make()) != path.read_text()
    ]


def main() -> int:
    for path, start, end, make in GENERATED:
        text = path.read_text()
        fresh = rendered(text, start, end, make())
        if fresh != text:
            path.write_text(fresh)
            print(f"{path.relative_to(ROOT)}: generated part updated")
    return 0


if __name__ == "__main__":
    sys.exit(main())
