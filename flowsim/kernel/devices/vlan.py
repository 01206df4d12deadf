"""802.1Q / 802.1AD VLAN devices and ``vlan_dev_fill_forward_path`` (net/8021q/vlan_dev.c).

``ip link add link DEV name NAME type vlan id N [protocol 802.1Q|802.1ad]``.
A VLAN device takes its real device's MAC and MTU unless given.

Resolver (``vlan_dev_fill_forward_path``, net/8021q/vlan_dev.c): records ``DEV_PATH_VLAN`` with ``encap.id`` = VID and
``encap.proto`` = the VLAN protocol, moves ``ctx.dev`` to the real device,
and pushes ``{id, proto}`` onto ``ctx.vlan``; with two VLANs already in the
context it fails with ``-ENOSPC`` — after ``path`` and ``ctx.dev`` were set,
as the kernel orders it.
"""

from __future__ import annotations

import errno

import attrs

from flowsim.kernel.devices.base import (
    ETH_P_8021AD, ETH_P_8021Q, NET_DEVICE_PATH_VLAN_MAX, Args, DevPathType, Encap, NetDevice, PathCtx,
    PathEncap, PathEntry, PathError, parse_kind_args,
)

__all__ = ["VlanDevice", "KINDS", "parse_args", "create", "fill_forward_path", "VLAN_PROTOCOLS"]

KINDS = ("vlan",)
VLAN_PROTOCOLS = {"802.1Q": ETH_P_8021Q, "802.1q": ETH_P_8021Q, "802.1ad": ETH_P_8021AD, "802.1AD": ETH_P_8021AD}


@attrs.define(slots=True, eq=False)
class VlanDevice(NetDevice):
    """A VLAN device on ``lower`` (its ``real_dev``)."""

    vlan_id: int = 0
    vlan_proto: int = ETH_P_8021Q

    def describe(self) -> str:
        proto = "802.1ad" if self.vlan_proto == ETH_P_8021AD else "802.1Q"
        return f"vlan protocol {proto} id {self.vlan_id}"


_ARGS = {
    "id": ("vlan_id", lambda a, k: a.int(k, 0, 4094)),
    "protocol": ("vlan_proto", lambda a, k: a.choice(k, VLAN_PROTOCOLS)),
}


def parse_args(args: Args, kind: str) -> dict:
    opts = parse_kind_args(args, _ARGS, kind)
    if "vlan_id" not in opts:
        raise args.cmd.error("vlan needs an id", expected="'id N' (0-4094)")
    return opts


def create(topo, cmd, req, opts) -> NetDevice:
    """``vlan_newlink``: the real device, ``vlan_check_real_dev``, the MTU, then ``register_vlan_dev`` (the upper
    link).  The name is checked first, as ``rtnl_newlink`` finds an existing device before the kind runs."""
    if req.link is None:
        raise cmd.error("vlan needs a real device", expected="'link DEV'")
    real = topo.require_device(cmd.netns, req.link, cmd)
    proto = opts.get("vlan_proto", ETH_P_8021Q)
    dev = topo.new_device(VlanDevice, cmd, netns=req.netns, name=req.name, kind="vlan",
                          address=req.address or real.mac, mtu=req.mtu or real.mtu,
                          vlan_id=opts["vlan_id"], vlan_proto=proto)
    # vlan_check_real_dev: NETIF_F_VLAN_CHALLENGED (loopback) or not ARPHRD_ETHER (a tunnel, a PPP unit)
    if real.link_type != "ether":
        raise cmd.error(f"VLANs not supported on device {real.name} ({real.link_type})", value=real.name,
                        expected="an Ethernet device as the real device (vlan_check_real_dev: -EOPNOTSUPP)")
    twin = topo.vlan_upper(real, Encap(opts["vlan_id"], proto))  # vlan_find_dev
    if twin is not None:
        raise cmd.error(f"VLAN device already exists: {twin.name} is {twin.describe()} on {real.name}",
                        value=opts["vlan_id"], expected="a VLAN id not yet used on the real device with that protocol "
                                                        "(vlan_check_real_dev: -EEXIST)")
    if req.mtu and req.mtu > real.mtu:  # netif_reduces_vlan_mtu is for MACsec only
        raise cmd.error(f"MTU {req.mtu} is above the real device {real.name}'s {real.mtu}", value=req.mtu,
                        expected=f"at most {real.mtu} (vlan_newlink: -EINVAL)")
    dev.addr_set = req.address is not None
    topo.link_upper(dev, real, "lower", cmd)
    return dev


def fill_forward_path(ctx: PathCtx) -> PathEntry | PathError:
    """Mirrors vlan_dev_fill_forward_path."""
    vlan = ctx.dev
    assert isinstance(vlan, VlanDevice)  # dev_fill_forward_path calls the resolver of the device's own kind
    entry = PathEntry(DevPathType.VLAN, vlan.name, vlan.ifindex,
                      encap=PathEncap(vlan.vlan_id, vlan.vlan_proto))
    ctx.dev = ctx.ns.devices[vlan.lower]
    if len(ctx.vlans) >= NET_DEVICE_PATH_VLAN_MAX:
        return PathError(-errno.ENOSPC, vlan.name, "vlan_dev_fill_forward_path",
                         f"context already holds {NET_DEVICE_PATH_VLAN_MAX} VLANs")
    ctx.vlans.append(Encap(vlan.vlan_id, vlan.vlan_proto))
    return entry
