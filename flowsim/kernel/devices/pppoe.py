"""PPP over Ethernet sessions and ``ppp_fill_forward_path`` → ``pppoe_fill_forward_path``.

iproute2 cannot create PPPoE sessions (pppd does, through a PPPoX socket and
a ppp unit).  flowsim's extension, in the same command style::

    ip link add ppp0 type pppoe dev eth0.7 session 0x1234 peer 02:00:5e:00:00:01

creates the ppp unit ``ppp0`` (ARPHRD_PPP, no MAC) with one connected PPPoE
channel: session id, the access concentrator's MAC (``peer``) and the
Ethernet device the session runs on (``dev``).  Optional flags ``multilink``
(SC_MULTILINK) and ``disconnected`` (socket not PPPOX_CONNECTED) model the
two refusals.  The MTU is the underlying device's minus 8 (PPPoE + PPP
header), as pppd configures it.

Resolver (drivers/net/ppp/ppp_generic.c): ``ppp_fill_forward_path`` refuses multilink (-EOPNOTSUPP)
and units without a channel (-ENODEV), then delegates to the channel:
``pppoe_fill_forward_path`` refuses a dead/unconnected socket (-1), records
``DEV_PATH_PPPOE`` (encap.proto 0x8864, encap.id = session id, encap.h_dest =
peer MAC), copies the peer MAC into ``ctx.daddr`` (so a bridge underneath
looks up the concentrator) and moves ``ctx.dev`` to the Ethernet device.
"""

from __future__ import annotations

import errno
from typing import ClassVar

import attrs

from flowsim.kernel.devices.base import (
    ETH_P_PPP_SES, ZERO_MAC, Args, DevPathType, NetDevice, PathCtx, PathEncap, PathEntry, PathError,
    parse_kind_args,
)
from flowsim.kernel.headers import PPPOE_SES_HLEN  # re-exported: the MTU a PPPoE device loses

__all__ = ["PppDevice", "KINDS", "parse_args", "create", "fill_forward_path", "PPPOE_SES_HLEN"]

KINDS = ("pppoe",)


@attrs.define(slots=True, eq=False)
class PppDevice(NetDevice):
    """A ppp unit whose only channel is a PPPoE session on ``lower``."""

    LINK_TYPE: ClassVar[str] = "ppp"
    GSO: ClassVar[bool] = False  # ppp_setup sets no GSO features: the stack segments before ppp_start_xmit

    session: int = 0
    peer_mac: str | None = None
    connected: bool = True
    multilink: bool = False

    def describe(self) -> str:
        return f"pppoe dev {self.lower} session 0x{self.session:04x} peer {self.peer_mac}"


_ARGS = {
    "dev": ("dev", lambda a, k: a.name(k)),
    "session": ("session", lambda a, k: a.int(k, 1, 0xFFFE)),
    "peer": ("peer_mac", lambda a, k: a.mac(k)),
    "multilink": ("multilink", None),
    "disconnected": ("disconnected", None),
}


def parse_args(args: Args, kind: str) -> dict:
    opts = parse_kind_args(args, _ARGS, kind)
    missing = [k for k in ("dev", "session", "peer_mac") if k not in opts]
    if missing:
        raise args.cmd.error("pppoe needs dev, session and peer",
                             expected="'dev DEV session ID peer MAC' (flowsim extension)")
    return opts


def create(topo, cmd, req, opts) -> NetDevice:
    eth = topo.require_device(cmd.netns, opts["dev"], cmd)
    if eth.link_type != "ether":
        raise cmd.error(f"PPPoE needs an Ethernet device, {eth.name} is {eth.link_type}", value=eth.name,
                        expected="an Ethernet, VLAN, bridge or DSA device")
    dev = topo.new_device(PppDevice, cmd, netns=req.netns, name=req.name, kind="ppp",
                          mtu=req.mtu or eth.mtu - PPPOE_SES_HLEN, session=opts["session"],
                          peer_mac=opts["peer_mac"], lower=eth.name,
                          connected=not opts.get("disconnected", False), multilink=opts.get("multilink", False))
    dev.mac = None
    topo.link_upper(dev, eth, "pppoe", cmd)
    return dev


def fill_forward_path(ctx: PathCtx) -> PathEntry | PathError:
    """Mirrors ppp_fill_forward_path and the channel's pppoe_fill_forward_path."""
    ppp = ctx.dev
    assert isinstance(ppp, PppDevice)  # dev_fill_forward_path calls the resolver of the device's own kind
    if ppp.multilink:
        return ctx.fail(-errno.EOPNOTSUPP, "ppp_fill_forward_path", "multilink PPP")
    if ppp.lower is None:
        return ctx.fail(-errno.ENODEV, "ppp_fill_forward_path", "no channel attached")
    if not ppp.connected:
        return ctx.fail(-1, "pppoe_fill_forward_path", "PPPoE socket not connected")
    entry = PathEntry(DevPathType.PPPOE, ppp.name, ppp.ifindex,
                      encap=PathEncap(ppp.session, ETH_P_PPP_SES, ppp.peer_mac))
    ctx.daddr = ppp.peer_mac or ZERO_MAC  # `peer` is required when the device is created
    ctx.dev = ctx.ns.devices[ppp.lower]
    return entry
