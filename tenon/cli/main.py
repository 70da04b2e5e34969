"""Entry point of the ``tenon`` console script.

Subcommands live in their own modules (listed in ``SUBCOMMANDS``); each registers its argparse parser. Exit
codes follow one rule across the tool: 0 success, 1 runtime failure (broker unreachable, cluster error), 2 bad
input or usage (argparse's own convention).

Development tools (``tenon up``, ``tenon sandbox``, ``tenon broker``) are not imported from here: they live in
``devtools`` and plug themselves in through the ``tenon.commands`` entry point group (``pyproject.toml``), so
production code never depends on them and an image without them simply lacks those commands.

Each subcommand's module docstring is also its ``--help`` description. Docstrings are written for code
readers, in reStructuredText (double backquotes, roles such as ``:mod:``); :class:`PlainHelpParser` prints
them, and every other help text, without that markup, so a terminal shows plain text.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import re
import sys
from collections.abc import Sequence
from typing import Any

# module path, in the order ``tenon --help`` lists them
SUBCOMMANDS: tuple[str, ...] = (
    "tenon.cli.run",
    "tenon.cli.tap",
    "tenon.cli.replay",
    "tenon.cli.explain",
    "tenon.cli.simulate",
)
PLUGIN_GROUP = "tenon.commands"


_ROLE = re.compile(r":(?:[a-z]+:)?[a-z]+:`~?([^`<]*?)\s*(?:<[^`>]*>)?`")
"""``:mod:`x```, ``:class:`~a.b.C```, ``:func:`title <target>```: the text a reader should see."""
_LITERAL = re.compile(r"``(.+?)``", re.DOTALL)
_INTERPRETED = re.compile(r"`([^`]+)`")
_STRONG = re.compile(r"\*\*(.+?)\*\*", re.DOTALL)
_LITERAL_BLOCK = re.compile(r"(?<=\S)::$", re.MULTILINE)


def plain(text: str) -> str:
    """``text`` without reStructuredText markup: roles, literals, strong emphasis, ``::`` before a block."""
    text = _ROLE.sub(lambda m: m.group(1).rsplit(".", 1)[-1] if m.group(0).count("~") else m.group(1), text)
    text = _LITERAL.sub(r"\1", text)
    text = _INTERPRETED.sub(r"\1", text)
    text = _STRONG.sub(r"\1", text)
    return _LITERAL_BLOCK.sub(":", text)


_PLAIN_FORMATTERS: dict[type[argparse.HelpFormatter], type[argparse.HelpFormatter]] = {}


def plain_formatter(formatter_class: type[argparse.HelpFormatter]) -> type[argparse.HelpFormatter]:
    """``formatter_class`` (raw or wrapping) printing descriptions, epilogs and arguments' help as plain
    text."""
    if formatter_class not in _PLAIN_FORMATTERS:

        class Plain(formatter_class):  # type: ignore[valid-type, misc]
            def _format_text(self, text: str) -> str:
                return str(super()._format_text(plain(text)))

            def _expand_help(self, action: argparse.Action) -> str:
                return plain(super()._expand_help(action))

        Plain.__name__ = f"Plain{formatter_class.__name__}"
        _PLAIN_FORMATTERS[formatter_class] = Plain
    return _PLAIN_FORMATTERS[formatter_class]


class PlainHelpParser(argparse.ArgumentParser):
    """An argument parser whose help reads as plain text whatever formatter its caller picked; subcommands'
    parsers (``add_subparsers``) are of the same kind."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs["formatter_class"] = plain_formatter(kwargs.get("formatter_class", argparse.HelpFormatter))
        super().__init__(**kwargs)


BUILT_IN: dict[str, str] = {module.rsplit(".", 1)[-1]: module for module in SUBCOMMANDS}
"""The built-in subcommands' modules by the command's name (its module's last part)."""


def command_modules() -> dict[str, str]:
    """Every subcommand's module by the command's name: the built-ins, then the plugins by their entry
    point's name (a plugin cannot take a built-in's name)."""
    from importlib.metadata import entry_points  # only here: importing it and looking costs ~60 ms

    found = entry_points(group=PLUGIN_GROUP)
    plugins = {name: found[name].value for name in sorted(found.names) if name not in BUILT_IN}
    return BUILT_IN | plugins


def _requested(argv: Sequence[str]) -> list[str]:
    """The modules to import for ``argv``: only the named command's (its imports cost half a second for
    ``tenon simulate`` otherwise; a built-in's without looking plugins up), every one when no known command
    is named (``tenon --help``, a typo)."""
    first = next((arg for arg in argv if not arg.startswith("-")), None)
    if first in BUILT_IN:
        return [BUILT_IN[first]]
    modules = command_modules()
    if first in modules:
        return [modules[first]]
    return list(modules.values())


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The ``tenon`` parser; with ``argv``, only the subcommand it names is imported and registered."""
    parser = PlainHelpParser(
        prog="tenon",
        description="tenon: a Kubernetes node autoscaler speaking Karpenter's API, event-sourced over NATS.",
    )
    subparsers = parser.add_subparsers(
        dest="command", metavar="COMMAND", required=True, parser_class=PlainHelpParser
    )
    for module_path in _requested(argv) if argv is not None else command_modules().values():
        if importlib.util.find_spec(module_path.split(".")[0]) is None:
            continue  # a plugin whose package is not installed (a production image has no devtools)
        importlib.import_module(module_path).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    arguments = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(arguments)
    args = parser.parse_args(arguments)
    try:
        code: int = args.func(args)
    except KeyboardInterrupt:
        return 130
    return code


if __name__ == "__main__":
    sys.exit(main())
