"""Entry point of the ``tenon`` console script.

Subcommands live in their own modules (listed in ``SUBCOMMANDS``); each registers its argparse parser. Exit
codes follow one rule across the tool: 0 success, 1 runtime failure (broker unreachable, cluster error), 2 bad
input or usage (argparse's own convention).

Development tools (``tenon up``, ``tenon sandbox``, ``tenon broker``) are not imported from here: they live in
``devtools`` and plug themselves in through the ``tenon.commands`` entry point group (``pyproject.toml``), so
production code never depends on them and an image without them simply lacks those commands.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys
from collections.abc import Sequence
from importlib.metadata import entry_points

# module path, in the order ``tenon --help`` lists them
SUBCOMMANDS: tuple[str, ...] = (
    "tenon.cli.run",
    "tenon.cli.tap",
    "tenon.cli.replay",
    "tenon.cli.explain",
    "tenon.cli.simulate",
)
PLUGIN_GROUP = "tenon.commands"


def plugin_modules() -> list[str]:
    """Modules of the subcommands installed beside tenon (the development tools), by entry point name."""
    found = entry_points(group=PLUGIN_GROUP)
    return [found[name].value for name in sorted(found.names)]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tenon",
        description="tenon: a Kubernetes node autoscaler speaking Karpenter's API, event-sourced over NATS.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module_path in (*SUBCOMMANDS, *plugin_modules()):
        if importlib.util.find_spec(module_path.split(".")[0]) is None:
            continue  # a plugin whose package is not installed (a production image has no devtools)
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
