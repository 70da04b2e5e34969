"""Entry point of the ``tenon`` console script.

Subcommands live in their own modules (listed in ``SUBCOMMANDS``); each registers its argparse parser. Exit
codes follow one rule across the tool: 0 success, 1 runtime failure (broker unreachable, cluster error), 2 bad
input or usage (argparse's own convention).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

# module path, in the order ``tenon --help`` lists them
SUBCOMMANDS: tuple[str, ...] = (
    "shared.cli.up",
    "shared.cli.run",
    "shared.cli.tap",
    "shared.cli.replay",
    "shared.cli.explain",
    "shared.cli.simulate",
    "shared.cli.sandbox",
    "shared.cli.broker",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tenon",
        description="tenon: a Kubernetes node autoscaler speaking Karpenter's API, event-sourced over NATS.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module_path in SUBCOMMANDS:
        importlib.import_module(module_path).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.func(args)
    except KeyboardInterrupt:
        return 130
    return code


if __name__ == "__main__":
    sys.exit(main())
