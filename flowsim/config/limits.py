"""Bounds on what a topology file gives: a run's virtual time is at most :data:`MAX_VIRTUAL_TIME`, the file at
most :data:`MAX_FILE_BYTES`.

Theory of operation
-------------------
Virtual time is not free: the 1-second GC tick and idle stretches cost real
time, so a ``start = 1e7`` or a ``rate = 1e-300`` runs for minutes or
forever, and ``nan`` compares false with everything, so a ``start = nan``
slipped through ``>= 0`` checks and ran at time 0.  Every time the file
gives (``[[traffic]]`` ``start``, the span ``packets / rate`` of a flow's
sends, ``[[event]]`` ``at``) must be a finite number of seconds within
``0 … MAX_VIRTUAL_TIME`` (a million seconds: eleven and a half days of
virtual time, far beyond any flowtable timeout: the longest, TCP's
established conntrack timeout, is five days).  :func:`seconds_problem`
says what is wrong with one value, for the reader's located
:class:`~flowsim.errors.TopologyError`.

A file is read through :func:`read_bounded`: at most :data:`MAX_FILE_BYTES`
(64 MiB, some fifty times the text of a router with a full IPv4 routing
table), so that a path naming an endless device (``/dev/zero``,
``/dev/urandom``) is one error instead of a read that fills the memory.
A pipe (``flowsim run <(make-topology)``) is read like a file.

This module imports nothing from :mod:`flowsim.config`.
"""

from __future__ import annotations

import math
from pathlib import Path

__all__ = ["MAX_VIRTUAL_TIME", "SECONDS_EXPECTED", "seconds_problem", "is_number", "MAX_FILE_BYTES", "read_bounded",
           "size_text"]

MAX_VIRTUAL_TIME = 1e6  # seconds
MAX_FILE_BYTES = 64 << 20
SECONDS_EXPECTED = f"a finite number of seconds, 0 to {MAX_VIRTUAL_TIME:.0f} (a run's virtual time is bounded)"


def is_number(value) -> bool:
    """An int or a float from TOML (bool is not a number here)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def seconds_problem(value) -> str | None:
    """None if *value* is a time a run can reach, else what is wrong with it."""
    if not is_number(value):
        return "not a number"
    if isinstance(value, float) and not math.isfinite(value):
        return "not finite"
    if value < 0:
        return "negative"
    if value > MAX_VIRTUAL_TIME:
        return f"beyond {MAX_VIRTUAL_TIME:.0f} s"
    return None


def read_bounded(path: Path | str, limit: int = MAX_FILE_BYTES, what: str = "a topology file") -> bytes:
    """The bytes of the file *path*; OSError as ``open`` raises it, ValueError when it holds more than *limit*
    bytes (the message says so, for the caller's error naming the file)."""
    with open(path, "rb") as fh:
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise ValueError(f"more than {size_text(limit)}, the most {what} may hold")
    return data


def size_text(n: int) -> str:
    """*n* bytes as a bound is written: ``64 MiB``, or ``1,000 bytes`` when not a whole number of MiB."""
    return f"{n >> 20} MiB" if n and not n & 0xFFFFF else f"{n:,} bytes"
