"""WireGuard devices (ARPHRD_NONE, MTU 1420): no ``ndo_fill_forward_path``.

``ip link add NAME type wireguard``; peers and keys are out of scope.  The
walk ends on the device; not being Ethernet, it skips the neighbour step.
"""

from __future__ import annotations

from typing import ClassVar

import attrs

from flowsim.kernel.devices.base import Args, NetDevice, parse_kind_args

__all__ = ["WireguardDevice", "KINDS", "parse_args", "create", "fill_forward_path"]

KINDS = ("wireguard",)


@attrs.define(slots=True, eq=False)
class WireguardDevice(NetDevice):
    """A WireGuard interface."""

    LINK_TYPE: ClassVar[str] = "none"


def parse_args(args: Args, kind: str) -> dict:
    return parse_kind_args(args, {}, kind)


def create(topo, cmd, req, opts) -> NetDevice:
    dev = topo.new_device(WireguardDevice, cmd, netns=req.netns, name=req.name, kind="wireguard",
                          mtu=req.mtu or 1420)
    dev.mac = None
    return dev


fill_forward_path = None
