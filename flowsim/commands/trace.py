"""``flowsim trace TOPOLOGY``: the life of chosen packets, hop by hop across namespaces.

Like Open vSwitch's ``ofproto/trace`` or ``nft monitor trace``: device
receive, each hook and chain with the rule that matched and its verdict, the
flowtable hook's steps (tuple, lookup hit or miss, checks, verdict and
reason), NAT rewrites, headers pushed and popped, the egress device and, with
``--hex``, the bytes of every frame sent, with header boundaries.  Packets the
fast path transmits never reach the forward hook: their trace shows it.

Select packets with ``--traffic NAME`` and ``--packet K`` (the K-th packet,
counting from 0, of that traffic), or ``--match EXPR`` where EXPR is a
comma-separated list of ``field=value`` over the packet label: ``traffic``,
``direction`` (original|reply), ``seq``, ``kind`` (syn, synack, data, fin…).
"""

from __future__ import annotations

import argparse
import collections
import json

import attrs

from flowsim.commands._args import count_type, headlen_type, load_topology_cli
from flowsim.errors import ConfigError
from flowsim.profiles import profile_from_cli
from flowsim.schemas import schema_id
from flowsim.sim.compare import hexdump_frame
from flowsim.sim.progress import SimProgress, progress_enabled
from flowsim.sim.simulation import Simulation

__all__ = ["register", "run", "select"]

_FIELDS = ("traffic", "direction", "seq", "kind", "flow")


def register(sub) -> None:
    from flowsim.cli import add_profile_args

    p = sub.add_parser("trace", help="trace chosen packets hop by hop", description=__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("topology", metavar="TOPOLOGY", help="topology file (TOML)")
    p.add_argument("--traffic", metavar="NAME", help="only packets of this traffic table (--packet counts within it)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--packet", type=count_type("--packet", 0, what="a packet index"), metavar="K",
                   help="the K-th packet of the traffic (from 0)")
    g.add_argument("--match", metavar="EXPR", help="field=value[,field=value…] over traffic/direction/seq/kind/flow")
    add_profile_args(p)
    p.add_argument("--headlen", type=headlen_type(), default=None, metavar="N",
                   help="bytes of each received frame in the skb's linear area (default: all)")
    p.add_argument("--hex", action="store_true", help="show the bytes of each frame sent, with header boundaries")
    p.add_argument("--limit", type=count_type("--limit", 1, what="a number of packets"), default=5, metavar="N",
                   help="at most N packets (default 5)")
    p.add_argument("--json", action="store_true", help="print one JSON object (schema: flowsim schema trace)")
    p.add_argument("-q", "--quiet", action="store_true",
                   help="no progress bar (it is drawn on stderr only when stderr is a terminal)")
    p.set_defaults(func=run)


def _parse_match(expr: str | None) -> dict:
    out = {}
    for part in filter(None, (expr or "").split(",")):
        key, sep, value = part.partition("=")
        key = key.strip()
        if not sep or key not in _FIELDS:
            raise ConfigError(f"bad --match term {part!r}", value=part,
                              expected="field=value with field one of " + ", ".join(_FIELDS))
        out[key] = value.strip()
    return out


def select(sim, *, traffic: str | None = None, packet: int | None = None, match: str | None = None) -> list:
    """The PacketTag objects chosen, in the order they were first seen."""
    cond = _parse_match(match)
    if traffic is not None:
        if traffic not in {s.name for s in sim.specs}:
            raise ConfigError(f"no traffic named {traffic!r}", value=traffic,
                              expected="one of " + ", ".join(s.name for s in sim.specs))
        cond["traffic"] = traffic
    tags = [t for t in sim.kernel.ledger.all_tags or () if all(str(getattr(t, k)) == v for k, v in cond.items())]
    if packet is not None:
        if not 0 <= packet < len(tags):
            raise ConfigError(f"--packet {packet} out of range", value=packet, expected=f"0..{len(tags) - 1}")
        tags = [tags[packet]]
    return tags


def run(args) -> int:
    topo = load_topology_cli(args.topology, args.quiet)
    sim = Simulation(topo, profile_from_cli(args.profile, args.settings), tracing=True, headlen=args.headlen)
    with SimProgress.for_simulation(sim, enabled=progress_enabled(args.quiet)) as bar:
        sim.run(progress=bar)
    tags = select(sim, traffic=args.traffic, packet=args.packet, match=args.match)[:args.limit]
    labels = {str(t) for t in tags}
    steps = collections.defaultdict(list)
    for r in sim.kernel.traces:
        if r.packet in labels:
            steps[r.packet].append(r)
    if args.json:
        print(json.dumps({"schema": schema_id("trace"), "profile": sim.profile.name,
                          "packets": [{"packet": str(t), "state": t.state, "reason": t.reason,
                                       "steps": [{"time": r.time, "where": r.where, "what": r.what,
                                                  "details": dict(r.details)} for r in steps[str(t)]]}
                                      for t in tags]}, indent=2))
        return 0
    print(f"profile {sim.profile.name}: {len(tags)} packet(s)")
    for t in tags:
        print(f"\n{t}  → {t.state}" + (f" ({t.reason})" if t.reason else ""))
        for r in steps[str(t)]:
            details = dict(r.details)
            frame = details.pop("frame", None)
            print(f"  {attrs.evolve(r, details=tuple(details.items()))}")
            if args.hex and frame:
                print(f"      {hexdump_frame(bytes.fromhex(frame))}")
    return 0
