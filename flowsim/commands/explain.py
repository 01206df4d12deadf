"""``flowsim explain TOPOLOGY``: for each connection, was it offloaded — and if not, why, and what to change."""

from __future__ import annotations

import argparse
import json

from flowsim.commands._args import load_topology_cli, seconds_type
from flowsim.profiles import profile_from_cli
from flowsim.sim.explain import explain
from flowsim.schemas import schema_id
from flowsim.sim.progress import SimProgress, progress_enabled
from flowsim.sim.simulation import Simulation

__all__ = ["register", "run"]


def register(sub) -> None:
    from flowsim.cli import add_profile_args

    p = sub.add_parser("explain", help="say why each connection was or was not offloaded",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("topology", metavar="TOPOLOGY", help="topology file (TOML)")
    p.add_argument("--traffic", metavar="NAME", help="only the connections of this traffic table")
    add_profile_args(p)
    p.add_argument("--duration", type=seconds_type(), default=None, metavar="S",
                   help="stop after S seconds of virtual time (default: when the traffic is done)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("-q", "--quiet", action="store_true",
                   help="no progress bar (it is drawn on stderr only when stderr is a terminal)")
    p.set_defaults(func=run)


def run(args) -> int:
    topo = load_topology_cli(args.topology, args.quiet)
    sim = Simulation(topo, profile_from_cli(args.profile, args.settings))
    with SimProgress.for_simulation(sim, args.duration, enabled=progress_enabled(args.quiet)) as bar:
        sim.run(args.duration, progress=bar)
    answers = explain(sim)
    if args.traffic:
        conns = _traffic_connections(sim, args.traffic)
        answers = [a for a in answers if _answer_key(a.original) in conns]
    if args.json:
        print(json.dumps({"schema": schema_id("explain"), "answers": [a.to_dict() for a in answers]}, indent=2, default=str))
    else:
        print(f"profile {sim.profile.name}: {len(answers)} connection(s)")
        for a in answers:
            print(a.text())
    return 0


def _answer_key(original: dict) -> tuple:
    """How an answer's connection is recognised: (proto, client port); GRE, which has none, by its addresses."""
    if original["proto"] == "gre":
        return ("gre", original["src"], original["dst"])
    return (original["proto"], original["sport"])


def _traffic_connections(sim, name: str) -> set[tuple]:
    """The :func:`_answer_key` of each flow of one traffic table."""
    from flowsim.errors import ConfigError

    specs = [s for s in sim.specs if s.name == name]
    if not specs:
        raise ConfigError(f"no traffic named {name!r}", value=name,
                          expected="one of " + ", ".join(s.name for s in sim.specs))
    return {("gre", str(c.client.laddr), str(c.client.raddr)) if c.spec.proto == "gre" else
            (c.spec.proto, c.client.lport) for c in sim.conversations if c.spec.name == name}
