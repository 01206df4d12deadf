"""Benchmark: loading a topology is linear in its size (issue 15).

Cases, each generated in memory at two sizes (N and N/4) so the growth shows:

* ``namespaces``: N ``[netns.nsI]`` tables, each with a veth to a hub
  namespace, an address and a route (the hub holds N veth ends);
* ``traffic``: N ``[[traffic]]`` tables on one small network.

Each case is loaded with :func:`flowsim.load_topology_text`; the time is CPU
time (``time.process_time``, so a shared machine's other load counts less),
the two sizes in turn within each round, the best of the rounds, with the
spread (worst / best).  Linear loading
makes the time of N about 4x the time of N/4; a quadratic one, 16x.

Targets: 10,000 namespaces and 20,000 traffic tables each load in at most
5 s of CPU time, and growing the input 4x grows the time at most 6x.
Prints a table; the last line is one JSON object.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from flowsim.config.topology import load_topology_text

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench import interleave  # noqa: E402

TARGET_SECONDS = 5.0
TARGET_GROWTH = 6.0  # time(N) / time(N/4): 4 when linear, 16 when quadratic
CASES = {"namespaces": 10_000, "traffic": 20_000}


def namespaces_text(n: int) -> str:
    """N leaf namespaces, each cabled by a veth to the hub, addressed and routed."""
    parts = ["[netns.hub]\n"]
    for i in range(n):
        a, b = divmod(i, 250)
        parts.append(f"[netns.ns{i}]\ncommands = '''\n"
                     f"ip link add eth0 type veth peer name v{i} netns hub\n"
                     f"ip link set eth0 up\n"
                     f"ip addr add 10.{a}.{b}.2/24 dev eth0\n"
                     f"ip route add default via 10.{a}.{b}.1\n'''\n")
    return "".join(parts)


def traffic_text(n: int) -> str:
    """N UDP traffic tables between two namespaces."""
    parts = ["[netns.a]\ncommands = '''\nip link add eth0 type veth peer name eth0 netns b\n"
             "ip link set eth0 up\nip addr add 10.0.0.1/24 dev eth0\n'''\n"
             "[netns.b]\ncommands = '''\nip link set eth0 up\nip addr add 10.0.0.2/24 dev eth0\n'''\n"]
    for i in range(n):
        parts.append(f'[[traffic]]\nname = "t{i}"\nproto = "udp"\nfrom = "a"\nto = "10.0.0.2"\n'
                     f"dport = {1 + i % 65535}\npackets = 1\n")
    return "".join(parts)


BUILD = {"namespaces": namespaces_text, "traffic": traffic_text}


def loader(text: str):
    """One load of *text* (a side of the comparison)."""
    return lambda: load_topology_text(text, "bench.toml")


def main() -> int:
    repeat = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    print(f"targets: {', '.join(f'{n:,} {case}' for case, n in CASES.items())} load in <= {TARGET_SECONDS} s "
          f"of CPU time each; 4x the input costs <= {TARGET_GROWTH}x the time (linear: 4x)")
    print(f"{'case':<12}{'N':>8}{'best s':>9}{'spread':>8}{'N/4 best s':>12}{'growth':>8}")
    results = {}
    for case, n in CASES.items():
        # N/4 and N in turn within each round (benchmarks/_bench.py), CPU time
        t = interleave({"small": loader(BUILD[case](n // 4)), "big": loader(BUILD[case](n))}, repeat, gc_off=False)
        small, big = t.runs["small"], t.runs["big"]
        growth = min(big) / min(small)
        results[case] = {"n": n, "best_s": round(min(big), 3), "spread": round(max(big) / min(big), 2),
                         "quarter_best_s": round(min(small), 3), "growth_4x": round(growth, 2),
                         "meets_targets": min(big) <= TARGET_SECONDS and growth <= TARGET_GROWTH}
        print(f"{case:<12}{n:>8,}{min(big):>9.2f}{max(big) / min(big):>8.2f}{min(small):>12.2f}{growth:>8.2f}")
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
