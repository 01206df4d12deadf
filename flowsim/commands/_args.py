"""Argument checks shared by the sub-commands (not a command: the leading underscore keeps cli.py from loading it)."""

from __future__ import annotations

import argparse

from flowsim.errors import ConfigError

__all__ = ["int_in_range", "number_type"]


def int_in_range(name: str, text: str, lo: int, hi: int) -> int:
    """*text* as an integer (decimal or 0x…) within [lo, hi], or one ConfigError naming *name*."""
    try:
        value = int(text, 0)
    except ValueError:
        raise ConfigError(f"{name} must be an integer: {text!r}", value=text) from None
    if not lo <= value <= hi:
        raise ConfigError(f"{name} out of range: {value!r}", value=value, expected=f"{lo}..{hi}")
    return value


def number_type(convert, option: str, what: str, minimum, at_least: str):
    """An argparse ``type=``: *convert* the text, refuse values below *minimum*; messages name *option*."""
    def parse(text: str):
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"bad {option} {text!r} (expected {what})") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"bad {option} {text!r} (expected {at_least})")
        return value
    return parse
