"""Progress bars for long runs: tqdm on stderr, never a byte on stdout.

Theory of operation
-------------------
The commands print their result on stdout (a report, JSON, CSV), so a bar
may only ever write to stderr, and only when someone is watching: it is
drawn when it is not switched off (``--quiet``) *and* stderr is a terminal
(:func:`progress_enabled`).  Piped, redirected or captured by a test or a
notebook, stderr is not a terminal and nothing is drawn.

Three bars, all context managers that close themselves:

:class:`SimProgress`
    one :class:`~flowsim.sim.simulation.Simulation` run, measured in seconds of
    *virtual* time.  It is the ``progress`` hook of
    :meth:`Simulation.run() <flowsim.sim.simulation.Simulation.run>`, which calls it
    with the clock every few hundred events, at each idle GC tick and at
    the end.  Its total is the run's ``duration`` or, without one, the
    traffic's expected end (:func:`expected_end`: the last table's start
    plus the span of its packets); it grows if the run goes past it (the
    handshake, teardown and link delays add a little).
:func:`count_bar`
    runs of a sweep, counted as their results come back.
:class:`LoadProgress`
    a topology's command lines as :func:`~flowsim.config.topology.load_topology`
    replays them (its ``progress`` callback: config does not import sim, it
    only calls what it is given).  Small files load in an instant, so the
    bar appears only for a file of at least :data:`LOAD_MIN_COMMANDS`
    command lines (thousands of generated ``ip`` lines).

A bar that is not drawn is a :class:`HiddenBar`, not a disabled tqdm: tqdm
is imported only to draw, because its import and the multiprocessing lock
every tqdm takes, even disabled, cost ~25 ms CPU of each command's start-up.

    >>> with SimProgress(10.0, enabled=False) as hook:
    ...     hook(2.5)
    ...     hook.n
    2.5
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import IO, TYPE_CHECKING

if TYPE_CHECKING:
    from tqdm import tqdm

__all__ = ["progress_enabled", "expected_end", "SimProgress", "count_bar", "LoadProgress", "HiddenBar",
           "VIRTUAL_FORMAT", "LOAD_MIN_COMMANDS"]

LOAD_MIN_COMMANDS = 1000  # fewer command lines load in well under a second: no bar
VIRTUAL_FORMAT = "{desc}: {percentage:3.0f}%|{bar}| {n:.3f}/{total:.3f} s virtual [{elapsed}<{remaining}]"


def progress_enabled(quiet: bool = False, stream: IO | None = None) -> bool:
    """True when a bar should be drawn: not *quiet* and *stream* (default stderr) is a terminal."""
    if quiet:
        return False
    stream = sys.stderr if stream is None else stream
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except (ValueError, OSError):  # a closed stream
        return False


class HiddenBar:
    """A bar that draws nothing: what the bars here use of tqdm's interface (``total``, ``update``, ``close``,
    a context manager), without importing tqdm."""

    def __init__(self, total: float):
        self.total = total

    def update(self, n: float = 1) -> None:
        pass

    def close(self) -> None:
        pass

    def __enter__(self) -> HiddenBar:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _drawn(total: float, **tqdm_args) -> tqdm:
    """A tqdm bar of *total* (the one place tqdm is imported)."""
    from tqdm import tqdm

    return tqdm(total=total, **tqdm_args)


def expected_end(specs: Iterable, duration: float | None = None) -> float:
    """Virtual time a run should end at: *duration*, else the latest ``start + packets × gap`` of *specs*."""
    if duration is not None:
        return float(duration)
    return max((s.start + s.packets * s.gap for s in specs), default=0.0)


class SimProgress:
    """A bar over virtual seconds; call it with the clock (the ``progress`` hook of ``Simulation.run``)."""

    def __init__(self, total: float, *, enabled: bool | None = None, stream: IO | None = None,
                 desc: str = "simulating"):
        stream = sys.stderr if stream is None else stream
        on = progress_enabled(stream=stream) if enabled is None else enabled
        total = max(float(total), 1e-9)
        self.bar = _drawn(total, file=stream, leave=False, desc=desc, bar_format=VIRTUAL_FORMAT,
                          dynamic_ncols=True) if on else HiddenBar(total)
        self.n = 0.0

    @classmethod
    def for_simulation(cls, sim, duration: float | None = None, **kwargs) -> SimProgress:
        """A bar sized for *sim*'s traffic (or *duration*)."""
        return cls(expected_end(sim.specs, duration), **kwargs)

    def __call__(self, now: float) -> None:
        if now > self.bar.total:
            self.bar.total = now
        if now > self.n:
            self.bar.update(now - self.n)
            self.n = now

    def close(self) -> None:
        self.bar.close()

    def __enter__(self) -> SimProgress:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def count_bar(total: int, *, desc: str = "runs", enabled: bool | None = None,
              stream: IO | None = None) -> tqdm | HiddenBar:
    """A bar counting *total* items (``bar.update(1)`` per finished one); a :class:`HiddenBar` when disabled."""
    stream = sys.stderr if stream is None else stream
    on = progress_enabled(stream=stream) if enabled is None else enabled
    return _drawn(total, file=stream, leave=False, desc=desc, unit="run", dynamic_ncols=True) if on else HiddenBar(total)


class LoadProgress:
    """A bar over the command lines of a topology; call it with ``(done, total)`` (``load_topology``'s
    ``progress``).  Created lazily: nothing is drawn for fewer than *minimum* command lines.

    >>> with LoadProgress(enabled=False) as hook:
    ...     hook(3, 5000)
    ...     hook.n
    3
    """

    def __init__(self, *, enabled: bool | None = None, stream: IO | None = None, desc: str = "loading topology",
                 minimum: int = LOAD_MIN_COMMANDS):
        self.stream = sys.stderr if stream is None else stream
        self.on = progress_enabled(stream=self.stream) if enabled is None else enabled
        self.desc, self.minimum = desc, minimum
        self.bar: tqdm | None = None
        self.n = 0

    def __call__(self, done: int, total: int) -> None:
        if self.bar is None:
            if not self.on or total < self.minimum:
                self.n = done
                return
            self.bar = _drawn(total, file=self.stream, leave=False, desc=self.desc, unit="cmd",
                              dynamic_ncols=True)
        if total != self.bar.total:
            self.bar.total = total
        if done > self.n:
            self.bar.update(done - self.n)
        self.n = done

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()

    def __enter__(self) -> LoadProgress:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
