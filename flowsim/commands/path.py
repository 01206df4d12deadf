"""``flowsim path``: the device path a flow would use, as ``nft_flow_route`` resolves it.

Without ``--src`` one direction is resolved: the route to ``--dst`` in
``--netns``, its neighbour, the ``dev_fill_forward_path`` stack and the
``nft_dev_path_info`` aggregate, checked against the namespace's flowtable.
With ``--src`` the whole ``nft_flow_route`` runs for a flow ``src → dst``
forwarded through the namespace (no NAT; the packet came in on the device
routing back to ``src``), showing both directions and the per-direction
route the flow's tuples would be built from.

Exit status: 0 when the path (or flow) resolves, 1 when it does not, 2 on
bad input, 3 on an internal error (a flowsim bug: ``--debug`` shows it).
"""

from __future__ import annotations

import argparse
import ipaddress
import json

import flowsim.cli
from flowsim.commands._args import QUIET_HELP, load_topology_cli
from flowsim.errors import ConfigError
from flowsim.kernel.flowtable.path import (
    CtTuple, DirPath, FlowRoute, FlowtableRef, PathInfo, nft_flow_route, resolve_path, ruleset_flowtables,
)
from flowsim.profiles import profile_from_cli
from flowsim.schemas import schema_id

__all__ = ["register", "run"]


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "path", help="resolve a flow's device path (dev_fill_forward_path -> nft_flow_route)",
        description=__doc__.split("\n\n")[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("topology", help="topology file (TOML)")
    p.add_argument("--netns", required=True, help="the router namespace (the one with the flowtable)")
    p.add_argument("--dst", required=True, help="destination address")
    p.add_argument("--src", help="source address: resolve both directions with nft_flow_route")
    p.add_argument("--flowtable", help="flowtable name (default: the first one in the namespace's ruleset)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("-q", "--quiet", action="store_true", help=QUIET_HELP)
    flowsim.cli.add_profile_args(p)
    p.set_defaults(func=run)


def _addr(text: str, option: str):
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        raise ConfigError(f"bad address {text!r} for {option}", value=text, expected="an IPv4 or IPv6 address") from None


def _flowtable(ns, name: str | None) -> FlowtableRef:
    tables = ruleset_flowtables(ns.nft.text) if ns.nft is not None else []
    if name is None:
        return tables[0] if tables else FlowtableRef("(none)", frozenset())
    for ft in tables:
        if ft.name == name:
            return ft
    raise ConfigError(f"no flowtable {name!r} in namespace {ns.name}", value=name,
                      expected="one of " + (", ".join(t.name for t in tables) or "(none declared)"))


def run(args) -> int:
    profile = profile_from_cli(args.profile, args.settings)
    topo = load_topology_cli(args.topology, args.quiet)
    ns = topo.netns(args.netns)
    dst = _addr(args.dst, "--dst")
    ft = _flowtable(ns, args.flowtable)
    head = {"schema": schema_id("path"), "topology": args.topology, "netns": ns.name, "profile": profile.name,
            "flowtable": {"name": ft.name, "devices": sorted(ft.devices), "hw_offload": ft.hw_offload}}
    if args.src is None:
        p = resolve_path(ns, ns.fib.lookup(dst), dst, ft, profile)
        out = {**head, **_dir_json(ns, p)}
        failed = p.error is not None
        text = [_head_text(head), *_dir_text(ns, p)]
    else:
        src = _addr(args.src, "--src")
        if src.version != dst.version:
            raise ConfigError("--src and --dst differ in family", value=args.src, expected="one address family")
        back = ns.fib.lookup(src)
        in_dev = back.dev if not back.error else None
        fr = nft_flow_route(topo, ns.name, (CtTuple(src, dst), CtTuple(dst, src)), 0, in_dev, ft, profile)
        out = {**head, **_flow_json(ns, fr)}
        failed = fr.error is not None
        text = [_head_text(head), *_flow_text(ns, fr, src, dst)]
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        print("\n".join(text))
    return 1 if failed else 0


# ---------------------------------------------------------------------- JSON

def _dir_json(ns, p: DirPath | None) -> dict:
    if p is None:
        return {"route": None, "stack": [], "info": PathInfo().to_json(ns), "error": None, "warnings": [],
                "skipped": True}
    return {"route": p.route.to_json(), "daddr": str(p.daddr),
            "neighbour": None if p.nexthop is None else {
                "addr": str(p.nexthop), "lladdr": p.ha,
                "state": p.neigh_state.name.lower() if p.neigh_state is not None else None},
            "stack": [e.to_json() for e in p.stack],
            "info": {**(p.info or PathInfo()).to_json(ns), "xmit_type": p.xmit_type.name.lower()},
            "error": p.error.to_json() if p.error else None, "warnings": list(p.warnings)}


def _flow_json(ns, fr: FlowRoute) -> dict:
    orig = _dir_json(ns, fr.paths[0])
    return {**orig, "reply": _dir_json(ns, fr.paths[1]),
            "flow": {"created": fr.error is None, "error": fr.error.to_json() if fr.error else None,
                     "tuple": [rd.to_json() for rd in fr.tuple]}}


# ---------------------------------------------------------------------- text

def _head_text(head: dict) -> str:
    ft = head["flowtable"]
    return (f"netns {head['netns']}, profile {head['profile']}, flowtable {ft['name']} "
            f"{{{', '.join(ft['devices'])}}}" + (" (hw offload)" if ft["hw_offload"] else ""))


def _devname(ns, name: str | None) -> str:
    if name is None:
        return "-"
    dev = ns.devices.get(name)
    return f"{name} ({dev.ifindex})" if dev is not None else name


def _dir_text(ns, p: DirPath | None, title: str | None = None) -> list[str]:
    lines = [title] if title else []
    if p is None:
        return lines + ["  not resolved (the profile only resolves paths when both directions are NEIGH)"]
    lines.append(f"  route      {p.route}")
    if p.nexthop is not None:
        state = p.neigh_state.name.lower() if p.neigh_state is not None else "-"
        lines.append(f"  neighbour  {p.nexthop} lladdr {p.ha or '-'} {state}")
    elif not p.route.error:
        lines.append(f"  neighbour  skipped ({p.route.dev} is not an Ethernet device)")
    lines.append("  stack:")
    for i, e in enumerate(p.stack):
        extra = " ".join(f"{k}={v}" for k, v in e.recorded().items())
        lines.append(f"    {i}  {e.type.name:<9} {e.dev:<10} {extra}".rstrip())
    if not p.stack:
        lines.append("    (empty)")
    info = p.info or PathInfo()
    lines += [
        "  info:",
        f"    indev     {_devname(ns, info.indev)}",
        f"    outdev    {_devname(ns, info.outdev)}",
        f"    encap     {', '.join(str(e) for e in info.encaps) or '-'}"
        + (f" (ingress_vlans 0x{info.ingress_vlans:x})" if info.ingress_vlans else ""),
        f"    tun       {info.tun or '-'}",
        f"    xmit      {p.xmit_type.name.lower()}" + (" needs_gso_segment" if info.needs_gso_segment else ""),
        f"    h_source  {info.h_source}",
        f"    h_dest    {info.h_dest}",
    ]
    lines += [f"  warning: {w}" for w in p.warnings]
    lines.append(f"  error: {p.error}" if p.error else "  error: none")
    return lines


def _flow_text(ns, fr: FlowRoute, src, dst) -> list[str]:
    lines = _dir_text(ns, fr.paths[0], f"original ({src} -> {dst}):")
    lines += _dir_text(ns, fr.paths[1], f"reply ({dst} -> {src}):")
    lines.append("flow route:")
    for d, rd in enumerate(fr.tuple):
        name = ("original", "reply")[d]
        encap = ", ".join(str(e) for e in rd.in_encaps[:rd.in_num_encaps]) or "-"
        lines.append(f"  {name:<8} in: ifindex {rd.in_ifindex} encap {encap} tun {rd.in_tun or '-'}")
        lines.append(f"  {'':<8} out: ifindex {rd.out_ifindex} xmit {rd.xmit_type.name.lower()}"
                     f" dst {rd.dst or '-'}" +
                     (f" h_source {rd.out_h_source} h_dest {rd.out_h_dest}" if rd.xmit_type.name == "DIRECT" else ""))
    lines.append(f"flow: not created: {fr.error}" if fr.error else "flow: created")
    return lines
