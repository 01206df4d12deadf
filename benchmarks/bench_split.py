"""Benchmark: where a run's CPU goes, per namespace, and how much the flowtables' fast path can save end to end.

``bench_cli`` measures what the fast path saves on the cover letter's run (``flowsim run --no-flowtables`` against
``flowsim run``, issue 16's "fastpath_saving").  This splits the same run (topologies/ip6ip6-rx.toml, traffic
times 10: 20k packets; in process, without start-up; or the topology given, its traffic times ``--scale``) by
where each frame is received:

* one row per namespace: the CPU time of every frame it received (``Kernel.receive_frame``, the wire's delivery:
  ``netif_receive_frame`` and everything it runs at once — the hook, forwarding, a tunnel, a local socket and the
  ACK it sends);
* "endpoint sends, timers": the rest of the run's events (a conversation's writes, its retransmission and ACK
  timers, the GC ticks) — the remainder of the run's total, so the rows add up to it.

Only the namespaces with a flowtable (the cover letter's router) differ between the sides; the others do the
same work on both.  So the end-to-end saving is bounded: were their packets free with the flowtables on, the run
would still cost what the rest costs, and the saving would be ``total without / (total without - theirs
without)``.  The benchmark prints that bound next to the measured saving and issue 16's 3x, and what the rest
would have to cost for 3x with the flowtable namespaces as they are.

Both sides (with and without the flowtables) run in turn within each round, CPU time, best of the rounds with
the spread (benchmarks/_bench.py); the split shown is the best round's.  A frame's row is timed with
``time.perf_counter`` (45 ns a read; a CPU-time clock is a system call, 440 ns, which would add a tenth to a
frame of 10 µs) and the run's total with the CPU clock: a row is its share of the run's wall time applied to the
run's CPU time (the same figure when the process was not preempted; a preempted round's lost time is spread over
the rows instead of falling on one), and the wall total is printed beside the CPU total so that a preempted round
shows.  The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import collections
import gc
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _bench import Timings, last_line, targets  # noqa: E402
from bench_cli import SCALE, TARGETS, TOPOLOGIES, scaled  # noqa: E402

from flowsim.config.topology import load_topology  # noqa: E402
from flowsim.errors import FlowsimError  # noqa: E402
from flowsim.sim.simulation import Simulation  # noqa: E402

ROUNDS = 5
REST = "endpoint sends, timers"


class SplitRun(NamedTuple):
    """One run: its CPU seconds and their split (namespace → seconds of the frames it received, and :data:`REST`)."""

    cpu_s: float
    split: dict[str, float]
    injected: int
    fastpath: int  # hits of every flowtable
    wall_s: float
    flowtable_netns: list[str]  # the namespaces with a flowtable

    def part(self, namespaces: list[str]) -> float:
        return sum(self.split.get(ns, 0.0) for ns in namespaces)


def split_run(topology: Path, flowtables: bool) -> SplitRun:
    """One run of *topology*, with or without its flowtables."""
    sim = Simulation(load_topology(topology), flowtables=flowtables)
    k = sim.kernel
    spent: collections.Counter = collections.Counter()
    receive = k.receive_frame
    clock = time.perf_counter

    def timed(dev, *args) -> None:  # Kernel.receive_frame is read at every transmit: every frame comes here
        t0 = clock()
        receive(dev, *args)
        spent[dev.netns] += clock() - t0

    k.receive_frame = timed
    gc.collect()
    gc.disable()  # as benchmarks/_bench.py's interleave: the collector's full passes are noise, not the run
    try:
        t0, w0 = time.process_time(), clock()
        sim.run()
        total, wall = time.process_time() - t0, clock() - w0
    finally:
        gc.enable()
    # The frames are timed on the wall clock and the run on the CPU clock: a round preempted during a frame would
    # give that row more than its CPU and the rest less, even below zero (CI's runners do).  So each row is its
    # share of the run's wall time applied to the run's CPU time; the frames' wall times lie within the run's,
    # so the rest is never negative, and the rows add up to the CPU total.
    cpu_per_wall = total / wall if wall > 0 else 0.0
    split = {ns: s * cpu_per_wall for ns, s in sorted(spent.items())}
    split[REST] = max(total - sum(split.values()), 0.0)  # max: a rounding error of the product, not a time
    fastpath = sum(ft.fastpath for st in k.netns.values() for ft in st.flowtables.values())
    return SplitRun(total, split, k.ledger.totals()["injected"], fastpath, wall,
                    sorted(name for name, st in k.netns.items() if st.flowtables))


def measure(topology: Path, rounds: int) -> dict:
    """Both sides, in turn within each round; the best round of each with its split."""
    timings = Timings(["flowtables", "no-flowtables"])
    best: dict[str, SplitRun] = {}
    for _ in range(rounds):
        for name in timings.runs:
            run = split_run(topology, name == "flowtables")
            timings.runs[name].append(run.cpu_s)
            if name not in best or run.cpu_s < best[name].cpu_s:
                best[name] = run
    ft, noft = best["flowtables"], best["no-flowtables"]
    if ft.injected != noft.injected:
        raise SystemExit(f"the sides injected {ft.injected:,} and {noft.injected:,} packets (ICMP errors or "
                         "retransmissions differ with the flowtables): their times are not of the same traffic")
    rows = sorted(set(ft.split) | set(noft.split), key=lambda r: (r == REST, r))
    fast = ft.flowtable_netns
    fast_ft, fast_noft = ft.part(fast), noft.part(fast)  # the flowtable namespaces' frames, with and without
    rest_ft, rest_noft = ft.cpu_s - fast_ft, noft.cpu_s - fast_noft
    target = TARGETS["fastpath_saving"]
    return {
        "packets": ft.injected, "fastpath_hits": ft.fastpath, "flowtable_netns": fast, "rounds": rounds,
        "cpu_s": {"flowtables": round(ft.cpu_s, 4), "no-flowtables": round(noft.cpu_s, 4)},
        "wall_s": {"flowtables": round(ft.wall_s, 4), "no-flowtables": round(noft.wall_s, 4)},
        "spread": {name: round(timings.spread(name), 2) for name in timings.runs},
        "split": {row: {"flowtables": round(ft.split.get(row, 0.0), 4),
                        "no-flowtables": round(noft.split.get(row, 0.0), 4)} for row in rows},
        "saving": round(noft.cpu_s / ft.cpu_s, 3),
        # the flowtable namespaces' frames free with the flowtables: the rest as measured without them
        "saving_bound": round(noft.cpu_s / rest_noft, 3) if rest_noft > 0 else None,
        # T_noft / T_ft >= target  <=>  rest + fast_noft >= target * (rest + fast_ft)
        "rest_for_target_s": round((fast_noft - target * fast_ft) / (target - 1), 4),
        "rest_s": {"flowtables": round(rest_ft, 4), "no-flowtables": round(rest_noft, 4)},
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("topology", nargs="?", type=Path, default=TOPOLOGIES / "ip6ip6-rx.toml",
                   help="the topology to run (default: the cover letter, topologies/ip6ip6-rx.toml)")
    p.add_argument("--rounds", type=int, default=ROUNDS, help=f"rounds, best of them (default {ROUNDS})")
    p.add_argument("--scale", type=int, default=SCALE, help=f"the traffic times this (default {SCALE})")
    args = p.parse_args(argv)
    if args.rounds < 1 or args.scale < 1:
        p.error("--rounds and --scale take a positive integer")
    targets([f"the same run with --no-flowtables, divided by the run with them: >= {TARGETS['fastpath_saving']}x "
             "(bench_cli measures it with start-up; here: in process, split by namespace)"])
    with tempfile.TemporaryDirectory() as tmpdir:
        try:
            topology = scaled(args.topology, Path(tmpdir), args.scale)
        except (OSError, UnicodeDecodeError) as exc:
            p.error(f"cannot read the topology {str(args.topology)!r}: {exc}")
        except ValueError as exc:
            p.error(str(exc))
        try:
            out = measure(topology, args.rounds)
        except FlowsimError as exc:  # a topology that does not load: flowsim's one-line error, not a traceback
            print(f"bench_split: error: {exc}", file=sys.stderr)
            return 2
    n = out["packets"]
    where = ", ".join(out["flowtable_netns"]) or "no namespace: the topology has no flowtable"
    print(f"\n{args.topology.name} x{args.scale}: {n:,} packets injected, {out['fastpath_hits']:,} fast-path hits "
          f"({where}); best of {args.rounds} rounds (spread {out['spread']['flowtables']:.2f} / "
          f"{out['spread']['no-flowtables']:.2f})\n")
    print(f"{'where':<26}{'flowtables':>14}{'no-flowtables':>16}   µs per packet (with / without)")
    for row, cols in [*out["split"].items(), ("total (CPU)", out["cpu_s"]), ("total (wall)", out["wall_s"])]:
        a, b = cols["flowtables"], cols["no-flowtables"]
        print(f"{row:<26}{a:>12.3f} s{b:>14.3f} s   {a / n * 1e6:6.1f} / {b / n * 1e6:6.1f}")
    print(f"\nsaving, in process: {out['saving']:.2f}x (target {TARGETS['fastpath_saving']}x)")
    if not out["flowtable_netns"]:
        last_line(out)
        return 0
    print(f"at most {out['saving_bound']:.2f}x were the packets of {where} free: everything else costs "
          f"{out['rest_s']['no-flowtables']:.3f} s")
    need = out["rest_for_target_s"]
    print(f"{TARGETS['fastpath_saving']}x with {where} as today needs everything else at "
          f"{max(need, 0):.3f} s ({max(need, 0) / out['rest_s']['flowtables']:.0%} of today's)")
    last_line(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
