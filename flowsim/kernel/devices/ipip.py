"""IPv4-in-IPv4 tunnels and ``ipip_fill_forward_path`` (net/ipv4/ipip.c, 6.19).

``ip link add NAME type ipip [local A] [remote B] [dev D] [ttl N] [tos T] [nopmtudisc]``.
MTU as ``ip_tunnel_bind_dev`` computes it: the underlay device's MTU (route
to ``remote``, else ``dev``) minus the 20-byte outer header; 1480 without one.
``dev_addr`` is the 4-byte local address (ARPHRD_TUNNEL).

Resolver (``ipip_fill_forward_path``, net/ipv4/ipip.c; exists from 6.19 — profile switch ``ipip_fill_forward_path``):
an IPv4 output route lookup to ``remote`` (no source, TOS 0, no oif); an error
route is returned as is; otherwise ``DEV_PATH_TUN`` with tun.src = local,
tun.dst = remote, l3_proto = IPPROTO_IPIP, and ``ctx.dev`` moves to the
route's output device (the underlay).
"""

from __future__ import annotations

import errno
import ipaddress
from typing import ClassVar

import attrs

from flowsim.kernel.devices.base import (
    ETH_P_IP, IPPROTO_IPIP, Args, DevPathType, NetDevice, PathCtx, PathEntry, PathError, PathTun, parse_kind_args,
)

__all__ = ["IpipDevice", "KINDS", "parse_args", "create", "fill_forward_path", "tunnel_args",
           "underlay_mtu"]

KINDS = ("ipip",)
IPV4_MIN_MTU = 68


@attrs.define(slots=True, eq=False)
class IpipDevice(NetDevice):
    """An ipip tunnel; ``lower`` is the optional bound ``dev``."""

    LINK_TYPE: ClassVar[str] = "tunnel"

    local: ipaddress.IPv4Address | None = None
    remote: ipaddress.IPv4Address | None = None
    ttl: int = 0

    def dev_addr(self) -> bytes:
        return (self.local or ipaddress.IPv4Address(0)).packed

    def describe(self) -> str:
        return f"ipip remote {self.remote or 'any'} local {self.local or 'any'}"


def tunnel_args(family: int) -> dict:
    """The keywords ipip, gre and ip6tnl share (iproute2 link_iptnl.c / link_ip6tnl.c)."""
    return {
        "local": ("local", lambda a, k: a.addr(k, family)),
        "remote": ("remote", lambda a, k: a.addr(k, family)),
        "dev": ("dev", lambda a, k: a.name(k)),
        "ttl": ("ttl", _ttl),
        "hoplimit": ("ttl", _ttl),
        "tos": ("_tos", lambda a, k: a.next("a TOS value or inherit")),
        "pmtudisc": ("_pmtudisc", None),
        "nopmtudisc": ("_nopmtudisc", None),
    }


def _ttl(args: Args, keyword: str) -> int:
    if args.peek() == "inherit":
        args.next("inherit")
        return 0
    return args.int(keyword, 0, 255)


def parse_args(args: Args, kind: str) -> dict:
    table = tunnel_args(4)
    table["mode"] = ("_mode", lambda a, k: a.choice(k, {"ipip": "ipip", "any": "any", "mplsip": "mplsip"}))
    return parse_kind_args(args, table, kind)


def underlay_mtu(topo, netns: str, remote, link: str | None) -> int | None:
    """The MTU of the device a tunnel would leave through (``ip_tunnel_bind_dev``), if any."""
    ns = topo.netns(netns)
    if remote is not None:
        route = ns.fib.lookup(remote)
        if not route.error and route.dev is not None:
            return ns.devices[route.dev].mtu
    if link is not None and link in ns.devices:
        return ns.devices[link].mtu
    return None


def create(topo, cmd, req, opts) -> NetDevice:
    link = opts.get("dev")
    if link is not None:
        topo.require_device(cmd.netns, link, cmd)
    base = underlay_mtu(topo, cmd.netns, opts.get("remote"), link) or 1500
    dev = topo.new_device(IpipDevice, cmd, netns=req.netns, name=req.name, kind="ipip",
                          mtu=req.mtu or max(base - 20, IPV4_MIN_MTU), local=opts.get("local"),
                          remote=opts.get("remote"), ttl=opts.get("ttl", 0), lower=link)
    dev.mac = None
    return dev


def fill_forward_path(ctx: PathCtx) -> PathEntry | PathError:
    """Mirrors ipip_fill_forward_path.

    7.3 (switch ``tunnel_resolver_family_check``) first refuses a packet that is not IPv4
    (``ctx->ether_type``); its ``collect_md`` and TOS-inherit refusals are not modelled (flowsim's ipip
    has neither).  7.3 (switch ``tunnel_route=resolver``) looks the route up with the tunnel's local
    address and link too, and hands it to the flowtable as ``path->tun.dst``.
    """
    tun = ctx.dev
    assert isinstance(tun, IpipDevice)  # dev_fill_forward_path calls the resolver of the device's own kind
    if ctx.profile.tunnel_resolver_family_check and ctx.ether_type != ETH_P_IP:
        return ctx.fail(-errno.EOPNOTSUPP, "ipip_fill_forward_path",
                        f"packet ethertype {ctx.ether_type:#06x} is not IPv4 (7.3)")
    remote = tun.remote or ipaddress.IPv4Address(0)
    keep = ctx.profile.tunnel_route == "resolver"
    # ip_route_output(net, daddr, saddr, dscp, link, RT_SCOPE_UNIVERSE): 7.3 passes saddr and link, ≤ 7.2 zeros
    route = ctx.ns.fib.lookup(remote, saddr=tun.local, oif=tun.lower) if keep else ctx.ns.fib.lookup(remote)
    if route.error:
        return ctx.fail(route.error, "ipip_fill_forward_path", f"no route to tunnel remote {remote}")
    entry = PathEntry(DevPathType.TUN, tun.name, tun.ifindex,
                      tun=PathTun(tun.local or ipaddress.IPv4Address(0), remote, IPPROTO_IPIP,
                                  route if keep else None))
    ctx.dev = ctx.ns.devices[route.dev]
    return entry
