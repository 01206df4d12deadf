"""Every option of every command has help text, and no ``--help`` shows reStructuredText markup."""

from __future__ import annotations

import argparse

import pytest

from flowsim.cli import build_parser


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


PARSER = build_parser()
COMMANDS = _subparsers(PARSER)


def test_every_command_is_listed():
    """The top-level help names every command with a one-line summary."""
    text = PARSER.format_help()
    assert COMMANDS
    for name in COMMANDS:
        assert name in text


@pytest.mark.parametrize("name", [None, *sorted(COMMANDS)])
def test_every_option_has_help(name):
    """Each positional and optional argument of the command says what it is."""
    parser = PARSER if name is None else COMMANDS[name]
    missing = [a.option_strings[0] if a.option_strings else a.dest for a in parser._actions
               if not isinstance(a, argparse._SubParsersAction) and not (a.help and a.help.strip())
               and a.help is not argparse.SUPPRESS]
    assert not missing, f"flowsim {name or ''}: no help for {missing}"


@pytest.mark.parametrize("name", [None, *sorted(COMMANDS)])
def test_help_has_no_rst_markup(name):
    """Descriptions come from module docstrings: their ``x`` and :mod:`x` markup is rendered away."""
    text = (PARSER if name is None else COMMANDS[name]).format_help()
    assert "``" not in text
    assert ":mod:`" not in text and ":func:`" not in text and ":class:`" not in text
