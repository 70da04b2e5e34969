"""``tenon --help`` and every subcommand's ``--help`` read as plain text: no reStructuredText markup."""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator

import pytest

from tenon.cli.main import build_parser, main, plain
from tenon.services import SERVICES

MARKUP = re.compile(r"`|:(?:mod|class|func|meth|data|attr|exc|ref|doc):")
"""A backquote (``literal``, `interpreted`, the end of a role) or a Sphinx role's name."""


def commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    """Every command line that has its own help: the parser's, then each subcommand's, recursively."""
    yield path
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, subparser in action.choices.items():
                yield from commands(subparser, (*path, name))


def help_of(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exited:
        main([*argv, "--help"])
    assert exited.value.code == 0, f"tenon {' '.join(argv)} --help exited {exited.value.code}"
    return capsys.readouterr().out


def test_every_help_reads_as_plain_text(capsys: pytest.CaptureFixture[str]) -> None:
    lines = [*commands(build_parser()), *(("run", service) for service in SERVICES)]
    assert ("explain",) in lines and ("tap",) in lines and ("replay",) in lines  # the walk found them
    for argv in lines:
        text = help_of(list(argv), capsys)
        assert text.startswith("usage: tenon"), f"tenon {' '.join(argv)} --help printed no usage"
        found = [line for line in text.splitlines() if MARKUP.search(line)]
        assert not found, f"tenon {' '.join(argv)} --help shows markup: {found}"


def test_the_words_stay_when_the_markup_goes(capsys: pytest.CaptureFixture[str]) -> None:
    text = help_of(["explain"], capsys)
    # from the docstring's ``tenon explain NODECLAIM`` and :mod:`tenon.domain.explain`
    assert "tenon explain NODECLAIM / tenon explain --pod NS/NAME: why, from the event log alone." in text
    assert "The story is put together by tenon.domain.explain (pure)" in text
    assert "Exit codes: 0 explained, 1 broker error" in text


def test_plain_keeps_the_text_a_reader_should_see() -> None:
    assert plain("``tenon tap --json``") == "tenon tap --json"
    assert plain(":mod:`tenon.domain.explain` and :class:`~tenon.domain.nodeclaim.NodeClaim`") == (
        "tenon.domain.explain and NodeClaim"
    )
    assert plain(":func:`the solver <tenon.core.solve>`, **never**") == "the solver, never"
    assert plain("subjects like 'tenon.nodeclaim.*' stay as they are") == (
        "subjects like 'tenon.nodeclaim.*' stay as they are"
    )
    assert plain("JSON shape::\n\n    {}") == "JSON shape:\n\n    {}"
