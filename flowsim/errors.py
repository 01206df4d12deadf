"""The one exception hierarchy of flowsim.

The data path never raises for a bad packet: it returns a verdict with a
reason (see :mod:`flowsim.reasons`).  Exceptions are for bad configuration,
API misuse, and for modelled *kernel bugs* that a reviewer must see (for
example ``skb_pull`` over bytes that are not in the linear area).  Each class
subclasses the closest builtin and carries the offending value and, where
there is one, the location (file, line).
"""

from __future__ import annotations

__all__ = [
    "FlowsimError",
    "ConfigError",
    "ProfileError",
    "TopologyError",
    "RulesetError",
    "CaptureError",
    "KernelBugError",
    "SkbPullBug",
]


class FlowsimError(Exception):
    """Base class of every error flowsim raises on purpose."""


class ConfigError(FlowsimError, ValueError):
    """A configuration value is wrong.

    ``where`` is ``file:line`` (or just a name) when known, ``value`` the
    offending value, ``expected`` what would have been accepted.
    """

    def __init__(self, message: str, *, where: str | None = None, value=None, expected: str | None = None):
        self.where = where
        self.value = value
        self.expected = expected
        text = message
        if expected:
            text += f" (expected {expected})"
        if where:
            text = f"{where}: {text}"
        super().__init__(text)


class ProfileError(ConfigError):
    """Unknown profile name, unknown switch or bad switch value."""


class TopologyError(ConfigError):
    """A topology file is wrong: names the file, line and command."""

    def __init__(self, message: str, *, file: str | None = None, line: int | None = None,
                 command: str | None = None, value=None, expected: str | None = None):
        self.file = file
        self.line = line
        self.command = command
        where = None
        if file is not None:
            where = f"{file}:{line}" if line is not None else str(file)
        if command:
            message = f"{message} in `{command}`"
        super().__init__(message, where=where, value=value, expected=expected)


class RulesetError(ConfigError):
    """An nftables ruleset is wrong or uses what flowsim does not support."""

    def __init__(self, message: str, *, file: str | None = None, line: int | None = None,
                 column: int | None = None, value=None, expected: str | None = None):
        self.file = file
        self.line = line
        self.column = column
        where = None
        if file is not None or line is not None:
            where = str(file or "<ruleset>")
            if line is not None:
                where += f":{line}"
                if column is not None:
                    where += f":{column}"
        super().__init__(message, where=where, value=value, expected=expected)


class CaptureError(FlowsimError, ValueError):
    """A file given as a capture is not a pcap/pcapng file flowsim can read."""


class KernelBugError(FlowsimError, RuntimeError):
    """The modelled kernel would misbehave here (a real bug, kept visible).

    Raised only where the kernel would corrupt memory or hit BUG(); the
    simulation of the packet stops and the caller reports it.
    """


class SkbPullBug(KernelBugError):
    """``skb_pull`` over bytes that are not in the linear area.

    In the kernel ``skb_pull`` only moves ``skb->data``; pulling past
    ``skb_headlen`` is a bug (``BUG_ON(skb->len < skb->data_len)`` in
    ``__skb_pull``).  The IP6IP6 rx review turned on exactly this: reading the
    outer header with ``skb_header_pointer`` and later ``skb_pull``-ing it.
    """

    def __init__(self, offset: int, length: int, headlen: int):
        self.offset = offset
        self.length = length
        self.headlen = headlen
        super().__init__(
            f"skb_pull({length}) at buffer offset {offset} crosses the linear area "
            f"(headlen {headlen}): the bytes were never pulled into the head"
        )
