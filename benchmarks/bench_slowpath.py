"""Benchmark: the simulated slow path, whole runs of the shipped topologies.

For each topology the traffic runs once with the flowtable hooks absent
(``flowtables=False``: every packet crosses every namespace through the
ordinary stack) and once with them, the two in turn, twice; the numbers are
packets injected per CPU-second (``time.process_time``, best of the rounds, with
the spread) and the cost of one device hop (a frame received on a device, or
transmitted by one) in microseconds.

Target (issue 4): a full run of any shipped topology under about 2 s.
Prints a table; the last line is one JSON object.
"""

from __future__ import annotations

import gc
import json
import sys
import time
from pathlib import Path

from flowsim.config.topology import load_topology
from flowsim.sim.simulation import Simulation

TOPOLOGIES = Path(__file__).resolve().parent.parent / "topologies"
TARGET_SECONDS = 2.0
ROUNDS = 2


def measure(path: Path, flowtables: bool) -> tuple[float, int, int]:
    """(CPU seconds, packets injected, device hops) of one run (the load and set-up not counted)."""
    topo = load_topology(path)
    hops = [0]
    sim = Simulation(topo, flowtables=flowtables)

    def counting_capture(netns, dev, frame):
        hops[0] += 1

    sim.kernel.capture = counting_capture  # counts every rx and tx on a device without writing files
    gc.collect()
    t0 = time.process_time()
    sim.run()
    dt = time.process_time() - t0
    return dt, sim.kernel.ledger.totals()["injected"], hops[0]


def main() -> int:
    print(f"target: a full run of any shipped topology under {TARGET_SECONDS:g} s of CPU time "
          f"(best of {ROUNDS} rounds, flowtables off and on in turn within each round)")
    rows, worst = [], 0.0
    for path in sorted(TOPOLOGIES.glob("*.toml")):
        runs: dict[bool, list[tuple[float, int, int]]] = {False: [], True: []}
        for _ in range(ROUNDS):
            for flowtables in (False, True):
                runs[flowtables].append(measure(path, flowtables))
        for flowtables in (False, True):
            dt, pkts, hops = min(runs[flowtables])
            spread = max(r[0] for r in runs[flowtables]) / max(dt, 1e-9)
            worst = max(worst, dt)
            rows.append((path.stem, "on" if flowtables else "off", dt, pkts, pkts / max(dt, 1e-9),
                         1e6 * dt / max(hops, 1), spread))
    print(f"{'topology':28} {'ft':3} {'CPU s':>8} {'packets':>8} {'pkts/s':>9} {'us/hop':>7} {'spread':>7}")
    for name, ft, dt, pkts, pps, hop, spread in rows:
        print(f"{name:28} {ft:3} {dt:8.3f} {pkts:8d} {pps:9.0f} {hop:7.1f} {spread:7.2f}")
    slow = [r for r in rows if r[1] == "off"]
    result = {"worst_run_cpu_seconds": round(worst, 3), "target_seconds": TARGET_SECONDS,
              "slowpath_pps": round(sum(r[3] for r in slow) / sum(r[2] for r in slow)),
              "slowpath_us_per_hop": round(sum(r[5] for r in slow) / len(slow), 1),
              "meets_targets": worst <= TARGET_SECONDS}
    print(json.dumps(result))
    return 0 if worst <= TARGET_SECONDS else 1


if __name__ == "__main__":
    sys.exit(main())
