"""VXLAN devices: Ethernet over UDP, no ``ndo_fill_forward_path``.

``ip link add NAME type vxlan id VNI [remote A | group A] [local A] [dev D]
[dstport P]``.  MTU: the lower device's (or 1500) minus 50 for an IPv4
underlay, minus 70 for IPv6.  The walk ends on the VXLAN device.
"""

from __future__ import annotations

import ipaddress

import attrs

from flowsim.kernel.devices.base import Args, NetDevice, parse_kind_args

__all__ = ["VxlanDevice", "KINDS", "parse_args", "create", "fill_forward_path"]

KINDS = ("vxlan",)


@attrs.define(slots=True, eq=False)
class VxlanDevice(NetDevice):
    """A VXLAN device."""

    vni: int = 0
    remote: ipaddress.IPv4Address | ipaddress.IPv6Address | None = None
    local: ipaddress.IPv4Address | ipaddress.IPv6Address | None = None
    dstport: int = 4789

    def describe(self) -> str:
        return f"vxlan id {self.vni} remote {self.remote or 'none'} dstport {self.dstport}"


_ARGS = {
    "id": ("vni", lambda a, k: a.int(k, 0, (1 << 24) - 1)),
    "vni": ("vni", lambda a, k: a.int(k, 0, (1 << 24) - 1)),
    "remote": ("remote", lambda a, k: a.addr(k)),
    "group": ("remote", lambda a, k: a.addr(k)),
    "local": ("local", lambda a, k: a.addr(k)),
    "dev": ("dev", lambda a, k: a.name(k)),
    "dstport": ("dstport", lambda a, k: a.int(k, 0, 65535)),
    "ttl": ("_ttl", lambda a, k: a.int(k, 0, 255)),
    "nolearning": ("_nolearning", None),
}


def parse_args(args: Args, kind: str) -> dict:
    opts = parse_kind_args(args, _ARGS, kind)
    if "vni" not in opts:
        raise args.cmd.error("vxlan needs an id", expected="'id VNI'")
    return opts


def create(topo, cmd, req, opts) -> NetDevice:
    link = opts.get("dev")
    base = topo.require_device(cmd.netns, link, cmd).mtu if link else 1500
    remote = opts.get("remote") or opts.get("local")
    overhead = 70 if remote is not None and remote.version == 6 else 50
    return topo.new_device(VxlanDevice, cmd, netns=req.netns, name=req.name, kind="vxlan",
                           address=req.address, mtu=req.mtu or base - overhead, vni=opts["vni"],
                           remote=opts.get("remote"), local=opts.get("local"),
                           dstport=opts.get("dstport", 4789), lower=link)


fill_forward_path = None
