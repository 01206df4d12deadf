"""``flowsim run``: run a topology's traffic through the simulated kernels and print the report.

The topology's ``[[traffic]]`` tables are played on a virtual clock through
every namespace's stack: the flowtable fast path where a flowtable hooks a
device, the slow path (nftables, conntrack, NAT, routing, bridges, VLAN,
PPPoE, tunnels) everywhere else.  The report counts packets injected,
delivered, dropped (by reason) and in flight — they always add up — and
shows per flowtable the fast-path and slow-path packets with the reasons,
per traffic direction the packets sent and delivered and how many took
the fast path, the conntrack entries and the nft named counters.

``--replay NETNS:DEV=CAPTURE`` (repeatable) injects the frames of a pcap or
pcapng at that device as received from its wire, merged by timestamp with
the other captures (or paced by ``--replay-rate``), next to the traffic
tables (``--no-traffic``: the captures alone); frames the device sent are
skipped.  The report lists per frame the flowtable verdicts and its fate,
and per capture the counts (see ``flowsim.sim.replay``).

Exit status: 0 after a run, 2 on bad input (one line on stderr), 3 on an
internal error (a flowsim bug: ``flowsim --debug run …`` shows its traceback).
"""

from __future__ import annotations

import argparse
import json

import flowsim.cli
from flowsim.commands._args import headlen_type, load_topology_cli, number_type, seconds_type
from flowsim.errors import ConfigError
from flowsim.profiles import profile_from_cli
from flowsim.sim.progress import SimProgress, progress_enabled
from flowsim.sim.report import build_report, format_report
from flowsim.sim.simulation import Simulation

__all__ = ["register", "run"]


_seconds = seconds_type("--duration")
_headlen = headlen_type("--headlen")
_rate = number_type(float, "--replay-rate", "packets per second, e.g. 1000", 1e-300, "a rate > 0")


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "run", help="run a topology's traffic and report fast path / slow path per flowtable and traffic",
        description=__doc__.split("\n\n")[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("topology", help="topology file (TOML)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--pcap-dir", metavar="DIR", help="write one pcap per (namespace, device) into DIR")
    p.add_argument("--pcapng", metavar="FILE",
                   help="write every device's frames into one pcapng FILE: an interface NETNS/DEV per device, "
                        "direction and packet id per frame, the flowtable verdict (fastpath / slowpath REASON / "
                        "drop REASON) as the comment of each frame the hook saw")
    p.add_argument("--html", metavar="FILE",
                   help="also write one self-contained HTML page to FILE: the topology picture, flowtables, "
                        "traffic, the explain answers, conntrack and a plot of fast path vs slow path over time")
    p.add_argument("--duration", type=_seconds, metavar="S",
                   help="stop after S seconds of virtual time (GC runs every second up to it); "
                        "default: when the traffic is done")
    p.add_argument("--headlen", type=_headlen, metavar="N",
                   help="bytes of each received frame in the skb's linear area (default: all)")
    p.add_argument("--no-flowtables", action="store_true",
                   help="skip the flowtable hooks and `flow add` (the pure slow path)")
    p.add_argument("--replay", action="append", default=[], metavar="NETNS:DEV=CAPTURE",
                   help="inject the frames of the pcap/pcapng CAPTURE at device DEV of namespace NETNS as received "
                        "from its wire (frames DEV sent are skipped); repeatable: captures merge by timestamp")
    p.add_argument("--replay-rate", type=_rate, metavar="PPS",
                   help="pace the replayed frames evenly at PPS frames per second instead of their timestamps")
    p.add_argument("--no-traffic", action="store_true",
                   help="leave out the topology's [[traffic]] tables (with --replay: the captures alone)")
    p.add_argument("-q", "--quiet", action="store_true",
                   help="no progress bar (it is drawn on stderr only when stderr is a terminal)")
    flowsim.cli.add_profile_args(p)
    p.set_defaults(func=run)


def run(args) -> int:
    profile = profile_from_cli(args.profile, args.settings)
    topo = load_topology_cli(args.topology, getattr(args, "quiet", False))
    replays = getattr(args, "replay", None) or []
    no_traffic = getattr(args, "no_traffic", False)
    if getattr(args, "replay_rate", None) is not None and not replays:
        raise ConfigError("--replay-rate without --replay", expected="--replay NETNS:DEV=CAPTURE")
    if not replays:
        if no_traffic:
            raise ConfigError("--no-traffic without --replay: nothing to run", expected="--replay NETNS:DEV=CAPTURE")
        if not topo.traffic:
            raise ConfigError(f"{args.topology}: no [[traffic]] tables", value=args.topology,
                              expected="a topology with at least one [[traffic]] table, or --replay")
    replay = None
    if replays:
        from flowsim.sim.replay import Replay, load_replay

        replay = Replay(load_replay(replays, topo, args.replay_rate), args.replay_rate)
    sim = Simulation(topo, profile, flowtables=not args.no_flowtables, headlen=args.headlen,
                     pcap_dir=args.pcap_dir, pcapng=args.pcapng, traffic=[] if no_traffic else None, replay=replay)
    recorder = None
    if args.html:
        from flowsim.sim.html import PathRecorder

        recorder = PathRecorder()
        sim.kernel.path_tap = recorder
    bar = progress_enabled(getattr(args, "quiet", False))
    with SimProgress.for_simulation(sim, args.duration, enabled=bar) as progress:
        sim.run(args.duration, progress=progress)
    report = build_report(sim)
    if recorder is not None:
        from flowsim.sim.explain import explain
        from flowsim.sim.html import html_report, topology_svg

        page = html_report(report, explain(sim), recorder.samples, topology_svg(topo))
        with open(args.html, "w", encoding="utf-8") as f:
            f.write(page)
    if args.json:
        print(json.dumps(report, indent=2, default=str))
    else:
        print(format_report(report), end="")
    return 0
