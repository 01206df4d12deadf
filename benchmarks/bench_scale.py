"""Benchmark: one run with a million TCP connections (issue 16's scale row), its time and memory.

The topology is conform-forward.toml (a router with a flowtable between two hosts) whose first TCP table
becomes ``flows = N`` short connections: the handshake, one data segment each way, FIN/ACK teardown — every
one offloaded after the handshake, as in the file.  One run, as ``flowsim run`` would do it: CPU time
(``time.process_time``), the peak resident set size (``ru_maxrss``) above what the process held before the
run (the loaded topology, the imports), both per connection.  A run this long is measured once; use
``--connections`` for a smaller run (the default is the target's million).

Targets: the run completes on this 2-core, 24 GiB machine, at most 4 KB per connection for the whole run.
Prints the targets, the figures; the last line is one JSON object.
"""

from __future__ import annotations

import argparse
import gc
import resource
import sys
import time
from pathlib import Path

import attrs

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench import last_line, targets, verdict  # noqa: E402

from flowsim.config.topology import load_topology  # noqa: E402
from flowsim.sim.report import build_report  # noqa: E402
from flowsim.sim.simulation import Simulation  # noqa: E402
from flowsim.sim.traffic import TrafficSpec  # noqa: E402

TOPOLOGY = Path(__file__).resolve().parent.parent / "topologies" / "conform-forward.toml"
TARGET_BYTES_PER_CONN = 4096
DEFAULT_CONNECTIONS = 1_000_000
PORTS_PER_TABLE = 60_000


def _rss() -> int:
    """Peak resident set size of this process so far, in bytes (ru_maxrss is KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--connections", type=int, default=DEFAULT_CONNECTIONS)
    n = ap.parse_args(argv).connections
    topo = load_topology(TOPOLOGY)
    first = next(i for i, t in enumerate(topo.traffic) if t.proto == "tcp")
    base = TrafficSpec.from_topology(topo.traffic[first], first)
    # a client address has 64,512 ports (flowsim.sim.traffic.client_port wraps): one table per PORTS_PER_TABLE
    # connections, each to its own server port, so that every connection has its own conntrack tuple
    specs = [attrs.evolve(base, name=f"{base.name}-{k}", dport=base.dport + k, packets=1, reply_packets=1,
                          flows=min(PORTS_PER_TABLE, n - k * PORTS_PER_TABLE))
             for k in range((n + PORTS_PER_TABLE - 1) // PORTS_PER_TABLE)]
    targets([f"{DEFAULT_CONNECTIONS:,} connections in one run on this machine, time and memory printed",
             f"a whole run at most {TARGET_BYTES_PER_CONN:,} bytes per connection (peak RSS growth)"])
    gc.collect()
    rss0, t0 = _rss(), time.process_time()
    sim = Simulation(topo, traffic=specs)
    sim.run()
    cpu = time.process_time() - t0
    grown = max(_rss() - rss0, 0)
    report = build_report(sim)
    directions = [d for t in report["traffic"] for d in t["directions"].values()]
    packets = sum(d["sent"] for d in directions)
    fast = sum(d.get("fastpath", 0) for d in directions)
    per_conn = grown / n
    ok = per_conn <= TARGET_BYTES_PER_CONN
    print(f"{n:,} connections, {packets:,} packets ({fast:,} fast-pathed) in {cpu:,.1f} CPU-s "
          f"({packets / cpu:,.0f} packets per CPU-s), peak RSS +{grown / 2**20:,.0f} MiB = "
          f"{per_conn:,.0f} bytes per connection: {verdict(ok)}")
    last_line({"connections": n, "packets": packets, "fastpath": fast, "cpu_s": round(cpu, 2),
               "pps": round(packets / cpu), "rss_growth_bytes": grown, "bytes_per_connection": round(per_conn),
               "meets_targets": ok and n >= DEFAULT_CONNECTIONS})
    return 0


if __name__ == "__main__":
    sys.exit(main())
