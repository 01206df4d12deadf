"""The run loop's event queue (flowsim.sim.simulation.Simulation.at / run): a heap of the distinct times, each
with its bucket of events in the order scheduled, runs exactly what a heap of (time, order, fn, *args) runs.

Random scripts whose events schedule more events (many at the same instant, at the running instant itself,
across GC ticks), as cancellable timers or plain events, and cancel timers: the order and the clock of every
event equal the reference heap's, with and without a duration that cuts the run.
"""

from __future__ import annotations

import heapq
import random
from pathlib import Path

import pytest

from flowsim.config.topology import load_topology
from flowsim.kernel.stack.core import Timer
from flowsim.sim.simulation import Simulation

TOPO = Path(__file__).resolve().parent.parent / "topologies" / "selftest.toml"
DELAYS = (0.0, 0.0, 0.0, 0.25, 0.5, 1.0, 1.5, 2.75)


class Script:
    """Events that log themselves and, from one seeded RNG, schedule children and cancel timers: two engines
    that run events in the same order draw the same numbers and log the same lines."""

    def __init__(self, seed: int, schedule, now, limit: int = 400) -> None:
        self.rnd = random.Random(seed)
        self.schedule, self.now = schedule, now
        self.log: list[tuple[int, float]] = []
        self.timers: list[Timer] = []
        self.next_id = 0
        self.limit = limit

    def start(self) -> None:
        for _ in range(12):
            self.spawn(self.rnd.choice(DELAYS))

    def spawn(self, delay: float) -> None:
        if self.next_id >= self.limit:
            return
        eid, self.next_id = self.next_id, self.next_id + 1
        if self.rnd.random() < 0.3:
            timer = Timer(self.fire, eid)
            self.timers.append(timer)
            self.schedule(self.now() + delay, timer)
        else:
            self.schedule(self.now() + delay, self.fire, eid)

    def fire(self, eid: int) -> None:
        self.log.append((eid, self.now()))
        for _ in range(self.rnd.randrange(4)):
            self.spawn(self.rnd.choice(DELAYS))
        if self.timers and self.rnd.random() < 0.25:
            self.timers[self.rnd.randrange(len(self.timers))].cancel()


def reference(seed: int, duration: float | None) -> tuple[list[tuple[int, float]], float]:
    """The heap of (time, order, fn, *args) the queue replaced, with its skip of cancelled timers: the log, and
    the clock at the end (a cancelled timer does not move it)."""
    q: list = []
    order = [0]
    clock = [0.0]

    def schedule(t, fn, *args):
        heapq.heappush(q, (t, order[0], fn, *args))
        order[0] += 1

    script = Script(seed, schedule, lambda: clock[0])
    script.start()
    while q:
        t, _, fn, *args = q[0]
        if fn.__class__ is Timer and fn.cancelled:
            heapq.heappop(q)
            continue
        if duration is not None and t > duration:
            break
        heapq.heappop(q)
        clock[0] = t
        fn(*args)
    return script.log, clock[0]


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("duration", [None, 4.0])
def test_the_bucketed_queue_runs_what_the_heap_ran(seed, duration):
    sim = Simulation(load_topology(TOPO), traffic=[])
    k = sim.kernel
    script = Script(seed, sim.at, lambda: k.now)
    script.start()
    sim.run(duration=duration)
    expected, end = reference(seed, duration)
    assert len(expected) > 20
    assert script.log == expected
    assert sim.end == (end if duration is None else duration)
    if duration is not None:  # what the cut left is still queued, as the heap still held it
        assert sim.queue and min(sim.queue) > duration
