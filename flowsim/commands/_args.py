"""Argument checks shared by the sub-commands (not a command: the leading underscore keeps cli.py from loading it).

Every numeric option has a checked ``type=`` (:func:`number_type`, or the
ready-made ones below): its text must convert, be finite (``nan`` and
``inf`` parse as floats but are no count of seconds) and lie in its range;
a bad value is argparse's usage error, exit status 2, naming the option.
Every file option is opened or checked before the work starts
(:func:`readable_file`, :func:`writable_file`), so a typo costs no run.
The commands load their topology with :func:`load_topology_cli`: a bar on
stderr while a large file's command lines replay (a terminal only, not with
``--quiet``; :class:`flowsim.sim.progress.LoadProgress`).
"""

from __future__ import annotations

import argparse
import math
import os
import re
from typing import TYPE_CHECKING

from flowsim.errors import ConfigError

if TYPE_CHECKING:
    from flowsim.config.topology import Topology

__all__ = ["plain", "plain_parser", "int_in_range", "number_type", "seconds_type", "headlen_type", "count_type", "readable_file",
           "writable_file", "load_topology_cli", "QUIET_HELP", "IFINDEX_MAX"]

QUIET_HELP = "no progress bar (it is drawn on stderr only when stderr is a terminal)"
IFINDEX_MAX = 2**31 - 1  # dev->ifindex is an int; dev_index_reserve hands out 1..INT_MAX


_RST_ROLE = re.compile(r":(?:mod|func|class|meth|attr|data|exc|obj):`~?([^`]+)`")
_RST_LITERAL = re.compile(r"``(.+?)``", re.S)


def plain(text: str | None) -> str | None:
    """*text* (a module docstring) as ``--help`` shows it: ``x`` and :mod:`x` become x, ``Example::`` ends in one colon."""
    if not text:
        return text
    text = _RST_ROLE.sub(r"\1", text)
    text = _RST_LITERAL.sub(r"\1", text)
    return re.sub(r"::$", ":", text, flags=re.M)


def plain_parser(parser: argparse.ArgumentParser) -> None:
    """Render the description, epilog and every option's help of *parser* and its sub-parsers with :func:`plain`."""
    parser.description = plain(parser.description)
    parser.epilog = plain(parser.epilog)
    for action in parser._actions:
        if action.help and action.help is not argparse.SUPPRESS:
            action.help = plain(action.help)
        if isinstance(action, argparse._SubParsersAction):
            for choice in action._choices_actions:
                choice.help = plain(choice.help)
            for sub in action.choices.values():
                plain_parser(sub)


def load_topology_cli(path: str, quiet: bool = False) -> Topology:
    """:func:`~flowsim.config.topology.load_topology` with a progress bar over the command lines (stderr,
    a terminal only, none when *quiet* or for a small file).  Imported here, not at the top: cli.py imports
    this module for every command, and the loader pulls in networkx and the whole model (0.4 s CPU of
    start-up for ``flowsim --version`` or ``flowsim tuple``, benchmarks/bench_cli.py)."""
    from flowsim.config.topology import load_topology
    from flowsim.sim.progress import LoadProgress, progress_enabled

    with LoadProgress(enabled=progress_enabled(quiet)) as bar:
        return load_topology(path, progress=bar)


def int_in_range(name: str, text: str, lo: int, hi: int) -> int:
    """*text* as an integer (decimal or 0x…) within [lo, hi], or one ConfigError naming *name*."""
    try:
        value = int(text, 0)
    except ValueError:
        raise ConfigError(f"{name} must be an integer: {text!r}", value=text) from None
    if not lo <= value <= hi:
        raise ConfigError(f"{name} out of range: {value!r}", value=value, expected=f"{lo}..{hi}")
    return value


def number_type(convert, option: str, what: str, minimum, at_least: str, maximum=None, at_most: str | None = None):
    """An argparse ``type=``: *convert* the text, refuse non-finite values, values below *minimum* and above
    *maximum*; messages name *option* and say what was expected."""
    def parse(text: str):
        try:
            value = convert(text)
        except (ValueError, OverflowError):
            raise argparse.ArgumentTypeError(f"bad {option} {text!r} (expected {what})") from None
        if isinstance(value, float) and not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"bad {option} {text!r} (expected a finite number: {what})")
        if value < minimum:
            raise argparse.ArgumentTypeError(f"bad {option} {text!r} (expected {at_least})")
        if maximum is not None and value > maximum:
            raise argparse.ArgumentTypeError(f"bad {option} {text!r} (expected {at_most or f'at most {maximum}'})")
        return value
    return parse


def seconds_type(option: str = "--duration"):
    """Virtual seconds: a finite number >= 0 (the simulation bounds it from above)."""
    return number_type(float, option, "seconds, e.g. 35 or 0.5", 0, "seconds >= 0")


def headlen_type(option: str = "--headlen", minimum: int = 14):
    """Bytes of a received frame in the skb's linear area: at least the Ethernet header (eth_type_trans pulls it)."""
    at_least = "at least 14, the Ethernet header" if minimum == 14 else f"a byte count >= {minimum}"
    return number_type(int, option, "a byte count", minimum, at_least)


def count_type(option: str, minimum: int = 0, maximum: int | None = None, what: str = "a count"):
    """An integer in [minimum, maximum]."""
    at_most = None if maximum is None else f"{what} {minimum}..{maximum}"
    return number_type(int, option, f"{what}, an integer", minimum, at_most or f"{what} >= {minimum}", maximum, at_most)


def readable_file(option: str, path: str) -> str:
    """*path* if it names a file that can be read, else one ConfigError naming *option*."""
    try:
        with open(path, "rb") as fh:
            fh.read(1)
    except OSError as exc:
        raise ConfigError(f"{option} {path}: cannot read: {exc.strerror}", value=path,
                          expected="a readable file") from None
    return path


def writable_file(option: str, path: str) -> str:
    """*path* if it is a file that can be rewritten, or can be created, else one ConfigError naming *option*."""
    parent = os.path.dirname(path) or "."
    if os.path.isdir(path):
        problem = "is a directory"
    elif os.path.exists(path):
        problem = None if os.access(path, os.R_OK | os.W_OK) else "not readable and writable"
    elif not os.path.isdir(parent):
        problem = f"no directory {parent}"
    else:
        problem = None if os.access(parent, os.W_OK) else f"cannot create files in {parent}"
    if problem:
        raise ConfigError(f"{option} {path}: {problem}", value=path, expected="a file flowsim can write")
    return path
