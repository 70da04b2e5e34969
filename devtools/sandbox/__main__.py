"""``python -m devtools.sandbox``: the same as ``tenon sandbox`` (same options)."""

from __future__ import annotations

import argparse
import sys

from devtools.cli import sandbox as sandbox_cli


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devtools.sandbox")
    subparsers = parser.add_subparsers(dest="command")
    sandbox_cli.register(subparsers)
    args = parser.parse_args(["sandbox", *(sys.argv[1:] if argv is None else argv)])
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
