"""GRE tunnels (``gre``, and the Ethernet-carrying ``gretap``): no ``ndo_fill_forward_path``.

``ip link add NAME type gre|gretap [local A] [remote B] [dev D] [ttl N] [key K]``.
MTU: underlay minus 24 (IPv4 + GRE header, plus 4 with a key; gretap also
minus 14 for the inner Ethernet header), as ``ip_tunnel_bind_dev`` computes.
Without a resolver the path walk ends on the GRE device itself, which then
must be in the flowtable to be used (``dev_fill_forward_path``).
"""

from __future__ import annotations

import ipaddress

import attrs

from flowsim.kernel.devices.base import Args, NetDevice, mac_for, parse_kind_args
from flowsim.kernel.devices.ipip import IPV4_MIN_MTU, tunnel_args, underlay_mtu

__all__ = ["GreDevice", "KINDS", "parse_args", "create", "fill_forward_path"]

KINDS = ("gre", "gretap")


@attrs.define(slots=True, eq=False)
class GreDevice(NetDevice):
    """A GRE (ARPHRD_IPGRE) or gretap (ARPHRD_ETHER) tunnel."""

    local: ipaddress.IPv4Address | None = None
    remote: ipaddress.IPv4Address | None = None
    key: int | None = None

    @property
    def link_type(self) -> str:
        return "ether" if self.kind == "gretap" else "ipgre"

    def dev_addr(self) -> bytes:
        if self.kind == "gretap":
            return NetDevice.dev_addr(self)
        return (self.local or ipaddress.IPv4Address(0)).packed

    def describe(self) -> str:
        return f"{self.kind} remote {self.remote or 'any'} local {self.local or 'any'}"


def parse_args(args: Args, kind: str) -> dict:
    table = tunnel_args(4)
    for word in ("key", "ikey", "okey"):
        table[word] = ("key", lambda a, k: a.int(k, 0, 0xFFFFFFFF))
    return parse_kind_args(args, table, kind)


def create(topo, cmd, req, opts) -> NetDevice:
    link = opts.get("dev")
    if link is not None:
        topo.require_device(cmd.netns, link, cmd)
    overhead = 24 + (4 if "key" in opts else 0) + (14 if req.kind == "gretap" else 0)
    base = underlay_mtu(topo, cmd.netns, opts.get("remote"), link) or 1500
    dev = topo.new_device(GreDevice, cmd, netns=req.netns, name=req.name, kind=req.kind,
                          address=req.address, mtu=req.mtu or max(base - overhead, IPV4_MIN_MTU),
                          local=opts.get("local"), remote=opts.get("remote"), key=opts.get("key"), lower=link)
    if req.kind == "gre":
        dev.mac = None
    elif dev.mac is None:
        dev.mac = mac_for(req.netns, req.name)
    return dev


fill_forward_path = None
