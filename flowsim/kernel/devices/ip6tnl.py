"""IPv6 tunnels (ip6tnl) and ``ip6_tnl_fill_forward_path`` (net/ipv6/ip6_tunnel.c, 7.0).

``ip link add NAME type ip6tnl [mode ip6ip6|ipip6|any] local A remote B
[dev D] [encaplimit none|N] [hoplimit N] [tclass T] [flowlabel F]``.  The
default mode is ``any`` (iproute2 sends proto 0) and the default encap limit
4, which adds an 8-byte destination-options header on transmit, so the MTU is
the underlay's minus 48 (1452); ``encaplimit none`` (IP6_TNL_F_IGN_ENCAP_LIMIT)
gives minus 40 (1460), as ``ip6_tnl_link_config`` computes.  ``dev_addr`` is
the 16-byte local address (ARPHRD_TUNNEL6).

Resolver (``ip6_tnl_fill_forward_path``, net/ipv6/ip6_tunnel.c; exists from 7.0 — switch ``ip6tnl_fill_forward_path``): an
IPv6 route lookup with only the destination (the remote) set; a route error is
returned; otherwise ``DEV_PATH_TUN`` with tun.src = local, tun.dst = remote,
l3_proto = IPPROTO_IPV6, ``ctx.dev`` = the route's device.  From 7.1.5
(switch ``ip6tnl_requires_encaplimit_none``) tunnels without ``encaplimit
none`` are refused with -EOPNOTSUPP.
"""

from __future__ import annotations

import errno
import ipaddress
from typing import ClassVar

import attrs

from flowsim.kernel.devices.base import (
    ETH_P_IPV6, IPPROTO_IPV6, Args, DevPathType, NetDevice, PathCtx, PathEntry, PathError, PathTun, parse_kind_args,
)
from flowsim.kernel.devices.ipip import tunnel_args, underlay_mtu
from flowsim.kernel.headers import IPV6_MIN_MTU

__all__ = ["Ip6tnlDevice", "KINDS", "parse_args", "create", "fill_forward_path", "IPV6_DEFAULT_TNL_ENCAP_LIMIT"]

KINDS = ("ip6tnl",)
IPV6_DEFAULT_TNL_ENCAP_LIMIT = 4
MODES = {"ip6ip6": "ip6ip6", "ipip6": "ipip6", "ip4ip6": "ipip6", "any": "any"}


@attrs.define(slots=True, eq=False)
class Ip6tnlDevice(NetDevice):
    """An ip6tnl tunnel; ``encaplimit`` None means ``encaplimit none``."""

    LINK_TYPE: ClassVar[str] = "tunnel6"

    mode: str = "any"
    local: ipaddress.IPv6Address | None = None
    remote: ipaddress.IPv6Address | None = None
    encaplimit: int | None = IPV6_DEFAULT_TNL_ENCAP_LIMIT
    ttl: int = 64

    @property
    def ign_encap_limit(self) -> bool:
        """IP6_TNL_F_IGN_ENCAP_LIMIT."""
        return self.encaplimit is None

    def dev_addr(self) -> bytes:
        return (self.local or ipaddress.IPv6Address(0)).packed

    def describe(self) -> str:
        limit = "none" if self.encaplimit is None else str(self.encaplimit)
        return f"ip6tnl {self.mode} remote {self.remote or 'any'} local {self.local or 'any'} encaplimit {limit}"


def _encaplimit(args: Args, keyword: str) -> int | None:
    if args.peek() == "none":
        args.next("none")
        return None
    return args.int(keyword, 0, 255)


def parse_args(args: Args, kind: str) -> dict:
    table = tunnel_args(6)
    table.update({
        "mode": ("mode", lambda a, k: a.choice(k, MODES)),
        "encaplimit": ("encaplimit", _encaplimit),
        "tclass": ("_tclass", lambda a, k: a.next("a traffic class")),
        "flowlabel": ("_flowlabel", lambda a, k: a.next("a flow label")),
    })
    return parse_kind_args(args, table, kind)


def create(topo, cmd, req, opts) -> NetDevice:
    link = opts.get("dev")
    if link is not None:
        topo.require_device(cmd.netns, link, cmd)
    encaplimit = opts.get("encaplimit", IPV6_DEFAULT_TNL_ENCAP_LIMIT)
    overhead = 40 + (0 if encaplimit is None else 8)
    base = underlay_mtu(topo, cmd.netns, opts.get("remote"), link) or 1500
    dev = topo.new_device(Ip6tnlDevice, cmd, netns=req.netns, name=req.name, kind="ip6tnl",
                          mtu=req.mtu or max(base - overhead, IPV6_MIN_MTU), mode=opts.get("mode", "any"),
                          local=opts.get("local"), remote=opts.get("remote"), encaplimit=encaplimit,
                          ttl=opts.get("ttl", 64), lower=link)
    dev.mac = None
    return dev


def fill_forward_path(ctx: PathCtx) -> PathEntry | PathError:
    """Mirrors ip6_tnl_fill_forward_path (with the 7.1.5 encap-limit refusal as a profile switch)."""
    tun = ctx.dev
    assert isinstance(tun, Ip6tnlDevice)  # dev_fill_forward_path calls the resolver of the device's own kind
    func = "ip6_tnl_fill_forward_path"
    # 7.3 order: ctx->ether_type, the USE_ORIG_* flags and collect_md (not modelled: flowsim's ip6tnl has
    # neither), then the encap limit
    if ctx.profile.tunnel_resolver_family_check and ctx.ether_type != ETH_P_IPV6:
        return ctx.fail(-errno.EOPNOTSUPP, func, f"packet ethertype {ctx.ether_type:#06x} is not IPv6 (7.3)")
    if ctx.profile.ip6tnl_requires_encaplimit_none and not tun.ign_encap_limit:
        return ctx.fail(-errno.EOPNOTSUPP, func, "tunnel without 'encaplimit none' (7.1.5)")
    remote = tun.remote or ipaddress.IPv6Address(0)
    keep = ctx.profile.tunnel_route == "resolver"
    # 7.3 looks up the tunnel's own flow (t->fl.u.ip6: saddr, link; fwmark), as does 7.2 with the net-next
    # patch 'use tunnel parameters for fill_forward_path route lookup' (switch ip6tnl_resolver_lookup);
    # ≤ 7.2.13 only the remote
    flow = keep or ctx.profile.ip6tnl_resolver_lookup == "tunnel-flow"
    route = ctx.ns.fib.lookup(remote, saddr=tun.local, oif=tun.lower) if flow else ctx.ns.fib.lookup(remote)
    if route.error:
        return ctx.fail(route.error, func, f"no route to tunnel remote {remote}")
    entry = PathEntry(DevPathType.TUN, tun.name, tun.ifindex,
                      tun=PathTun(tun.local or ipaddress.IPv6Address(0), remote, IPPROTO_IPV6,
                                  route if keep else None))
    ctx.dev = ctx.ns.devices[route.dev]
    return entry
