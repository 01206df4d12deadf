"""What every benchmark here shares: interleaved CPU-time measurement, the spread, the output's last line.

The machine these run on is shared (2 cores, several jobs), so wall-clock time swings 2x.  A benchmark
therefore measures CPU time (``time.process_time`` in process; a child's ``resource.getrusage``
``RUSAGE_CHILDREN`` for a command), runs its sides A, B, … in turn within each round (ABAB…, not
AA…BB…, so a burst of load hits both), keeps the best of the rounds and prints the spread (worst / best)
so a noisy figure shows as one.  Ratios of two sides of the same round are what to compare across
machines.
"""

from __future__ import annotations

import compileall
import gc
import json
import resource
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path


class Timings:
    """CPU seconds per side and round."""

    def __init__(self, names: Sequence[str]) -> None:
        self.runs: dict[str, list[float]] = {name: [] for name in names}

    def best(self, name: str) -> float:
        return min(self.runs[name])

    def spread(self, name: str) -> float:
        """Worst / best of the rounds (1.00 = no noise)."""
        runs = self.runs[name]
        return max(runs) / min(runs) if min(runs) > 0 else float("inf")

    def rate(self, name: str, n: int) -> float:
        """*n* items over the best time: items per CPU-second."""
        return n / self.best(name)

    def describe(self, name: str) -> str:
        return f"best {self.best(name):.3f} s CPU of {len(self.runs[name])} rounds, spread {self.spread(name):.2f}x"


def interleave(sides: dict[str, Callable[[], object]], rounds: int, *, gc_off: bool = True) -> Timings:
    """Run every side once per round, in turn, *rounds* times; the CPU time of each run.

    The cyclic garbage collector is off during a run (as in ``timeit``): its full collections land at
    random points and walk whatever the setup built, which is noise, not the measured work.
    """
    timings = Timings(list(sides))
    for _ in range(rounds):
        for name, fn in sides.items():
            gc.collect()
            if gc_off:
                gc.disable()
            try:
                t0 = time.process_time()
                fn()
                timings.runs[name].append(time.process_time() - t0)
            finally:
                gc.enable()
    return timings


def compile_bytecode(package: Path) -> None:
    """Byte-compile *package* as ``pip install`` does, so that a command's start-up is what an installed
    flowsim pays.  Python reads ``__pycache__`` even under ``PYTHONDONTWRITEBYTECODE=1`` (set on some
    machines, where every run of a source checkout would otherwise recompile ~70 modules, 0.25 s CPU);
    it only never writes it."""
    compileall.compile_dir(str(package), quiet=1)


def child_cpu(argv: Sequence[str], **kwargs) -> float:
    """CPU seconds (user + system) a command took, as its parent's RUSAGE_CHILDREN accounts it; its output
    goes to /dev/null and a failure raises."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(list(argv), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=True, **kwargs)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def interleave_commands(commands: dict[str, Sequence[str]], rounds: int, **kwargs) -> Timings:
    """:func:`interleave` for commands run as a user runs them: the child's CPU time."""
    timings = Timings(list(commands))
    for _ in range(rounds):
        for name, argv in commands.items():
            timings.runs[name].append(child_cpu(argv, **kwargs))
    return timings


def targets(lines: Sequence[str]) -> None:
    """Print the targets (issue 16's table) before the measurements."""
    print("targets (issue 16):")
    for line in lines:
        print(f"  {line}")


def verdict(ok: bool) -> str:
    return "meets target" if ok else "MISSES target"


def last_line(obj: dict) -> None:
    """The one JSON object every benchmark prints last."""
    print(json.dumps(obj, sort_keys=False))
