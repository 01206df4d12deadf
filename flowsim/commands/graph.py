"""``flowsim graph``: draw a topology (Graphviz DOT, SVG through Graphviz's dot, or Mermaid).

Namespaces are clusters, devices are nodes (name, kind, addresses), veth pairs
and cables are edges between namespaces, VLAN/PPPoE/DSA uppers and bridge
ports point at their lower device, tunnels are drawn dashed over their
underlay device and to their remote end, and devices listed in a flowtable are
filled and bold. With --path NETNS:DST the dev_fill_forward_path stack that
flowsim path --netns NETNS --dst DST resolves is highlighted in red.

Exit status: 0 when drawn, 2 on bad input (or when dot is missing for svg).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys

import flowsim.cli
from flowsim.commands._args import QUIET_HELP, load_topology_cli
from flowsim.errors import ConfigError
from flowsim.profiles import profile_from_cli
from flowsim.sim.graph import path_for, to_dot, to_mermaid, topology_drawing

__all__ = ["register", "run"]

FORMATS = ("dot", "svg", "mermaid")


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "graph", help="draw a topology: namespaces, devices, links, tunnels, flowtables (DOT, SVG, Mermaid)",
        description=__doc__.split("\n\n")[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("topology", help="topology file (TOML)")
    p.add_argument("--format", choices=FORMATS, default="dot",
                   help="output format: Graphviz dot text (default), svg (runs Graphviz's dot), or a Mermaid flowchart")
    p.add_argument("--path", metavar="NETNS:DST",
                   help="highlight the device path a flow to DST resolves in NETNS, as flowsim path shows it")
    p.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of standard output")
    p.add_argument("-q", "--quiet", action="store_true", help=QUIET_HELP)
    flowsim.cli.add_profile_args(p)
    p.set_defaults(func=run)


def render_svg(dot_text: str) -> str:
    """``dot -Tsvg`` of *dot_text*; a clear error when Graphviz is not installed."""
    exe = shutil.which("dot")
    if exe is None:
        raise ConfigError("--format svg needs Graphviz's dot, which is not installed",
                          expected="the graphviz package (apt-get install graphviz)")
    done = subprocess.run([exe, "-Tsvg"], input=dot_text, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"dot -Tsvg failed: {done.stderr.strip()}")
    return done.stdout


def run(args) -> int:
    profile = profile_from_cli(args.profile, args.settings)
    topo = load_topology_cli(args.topology, args.quiet)
    path = netns = None
    if args.path is not None:
        netns, sep, dst = args.path.partition(":")
        if not sep or not netns or not dst:
            raise ConfigError(f"bad --path {args.path!r}", value=args.path,
                              expected="NETNS:DST, e.g. router:2001:db8:3::2")
        path, _ft = path_for(topo, netns, dst, profile)
    drawing = topology_drawing(topo, args.topology, path, netns)
    if args.format == "mermaid":
        text = to_mermaid(drawing)
    else:
        text = to_dot(drawing)
        if args.format == "svg":
            text = render_svg(text)
    if args.output:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 0
