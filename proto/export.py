"""Export the JSON Schema of every event to ``proto/schemas/`` (``make schemas``).

One file per event type, ``<Type>.v<schema>.json``, so a consumer written in another language can validate
what it reads, and a reviewer sees a contract change as a diff of these files. ``--check`` exits 1 and lists
the stale files instead of writing (the test suite runs the same comparison).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import msgspec

from proto.events import EVENT_TYPES, Event

SCHEMA_DIR = Path(__file__).parent / "schemas"


def _version(event_type: type[Event]) -> int:
    field = next(f for f in msgspec.structs.fields(event_type) if f.name == "schema")
    return max(field.type.__args__)


def rendered_schemas() -> dict[str, str]:
    """File name -> JSON text, for every event type."""
    files: dict[str, str] = {}
    for event_type in EVENT_TYPES:
        schema = msgspec.json.schema(event_type)
        schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
        schema["$id"] = f"https://tenon.sh/schemas/{event_type.__name__}.v{_version(event_type)}.json"
        name = f"{event_type.__name__}.v{_version(event_type)}.json"
        files[name] = json.dumps(schema, indent=2, sort_keys=True) + "\n"
    return files


def stale_files(directory: Path = SCHEMA_DIR) -> list[str]:
    """Names of schema files that are missing, different from the code, or no longer produced."""
    expected = rendered_schemas()
    present = {p.name for p in directory.glob("*.json")} if directory.exists() else set()
    stale = [n for n, text in expected.items() if n not in present or (directory / n).read_text() != text]
    stale += sorted(present - expected.keys())
    return sorted(stale)


def write(directory: Path = SCHEMA_DIR) -> list[str]:
    directory.mkdir(parents=True, exist_ok=True)
    expected = rendered_schemas()
    for old in directory.glob("*.json"):
        if old.name not in expected:
            old.unlink()
    for name, text in expected.items():
        (directory / name).write_text(text)
    return sorted(expected)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m proto.export", description=__doc__)
    parser.add_argument("--check", action="store_true", help="only report stale files; exit 1 if any")
    args = parser.parse_args(argv)
    if args.check:
        stale = stale_files()
        for name in stale:
            print(f"stale: proto/schemas/{name}", file=sys.stderr)
        return 1 if stale else 0
    for name in write():
        print(f"wrote proto/schemas/{name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
