"""``flowsim compare TOPOLOGY --profile A --profile B``: the same traffic under two kernels, side by side."""

from __future__ import annotations

import argparse
import json

from flowsim.commands._args import headlen_type, load_topology_cli, seconds_type
from flowsim.errors import ConfigError
from flowsim.sim.compare import compare
from flowsim.sim.progress import progress_enabled

__all__ = ["register", "run"]


def register(sub) -> None:
    p = sub.add_parser("compare", help="run a topology under two profiles and show what changes",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("topology", metavar="TOPOLOGY", help="topology file (TOML)")
    p.add_argument("--profile", action="append", metavar="P", required=True,
                   help="kernel profile; give it twice (A then B), or once with --set-b to vary one switch")
    p.add_argument("--set", dest="settings", action="append", default=[], metavar="K=V",
                   help="override a switch on both sides")
    p.add_argument("--set-a", action="append", default=[], metavar="K=V", help="override a switch on side A only")
    p.add_argument("--set-b", action="append", default=[], metavar="K=V", help="override a switch on side B only")
    p.add_argument("--headlen", type=headlen_type(), default=None, metavar="N",
                   help="bytes of each received frame in the skb's linear area (shows header access costs)")
    p.add_argument("--duration", type=seconds_type(), default=None, metavar="S",
                   help="stop after S seconds of virtual time (default: when the traffic is done)")
    p.add_argument("--json", action="store_true", help="print one JSON object (schema: flowsim schema compare)")
    p.add_argument("-q", "--quiet", action="store_true",
                   help="no progress bar (it is drawn on stderr only when stderr is a terminal)")
    p.set_defaults(func=run)


def run(args) -> int:
    profiles = list(args.profile)
    if len(profiles) == 1:
        if not args.set_b and not args.set_a:
            raise ConfigError("compare needs two profiles, or one profile and --set-a/--set-b",
                              expected="--profile A --profile B")
        profiles.append(profiles[0])
    if len(profiles) != 2:
        raise ConfigError(f"compare takes two profiles, got {len(profiles)}", value=profiles)
    topo = load_topology_cli(args.topology, args.quiet)   # loaded once, with its own progress bar
    cmp = compare(topo, profiles[0], profiles[1], settings_a=args.settings + args.set_a,
                  settings_b=args.settings + args.set_b, headlen=args.headlen, duration=args.duration,
                  progress=progress_enabled(args.quiet))
    print(json.dumps(cmp.to_dict(), indent=2) if args.json else cmp.text(), end="" if not args.json else "\n")
    return 0
