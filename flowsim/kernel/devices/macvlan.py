"""macvlan devices: no ``ndo_fill_forward_path`` (the walk ends on the macvlan).

``ip link add link DEV name NAME type macvlan [mode bridge|private|vepa|passthru]``.
A macvlan shares its lower device's wire: it receives what arrives there for
its own MAC, so it is on the same L2 segment (used for neighbour discovery).
Its lower device is always a real one (a macvlan asked for on a macvlan is
made on that one's lower device, as ``macvlan_common_newlink`` does), whose
receive handler it takes: a bridge port cannot carry macvlans, nor can a
device carrying macvlans become a bridge port (-EBUSY).
"""

from __future__ import annotations

import attrs

from flowsim.kernel.devices.base import Args, NetDevice, parse_kind_args

__all__ = ["MacvlanDevice", "KINDS", "parse_args", "create", "fill_forward_path"]

KINDS = ("macvlan",)
MODES = {m: m for m in ("private", "vepa", "bridge", "passthru", "source")}


@attrs.define(slots=True, eq=False)
class MacvlanDevice(NetDevice):
    """A macvlan on ``lower``."""

    mode: str = "vepa"

    def describe(self) -> str:
        return f"macvlan mode {self.mode}"


def parse_args(args: Args, kind: str) -> dict:
    return parse_kind_args(args, {"mode": ("mode", lambda a, k: a.choice(k, MODES))}, kind)


def create(topo, cmd, req, opts) -> NetDevice:
    """``macvlan_common_newlink``: a macvlan on a macvlan is made on its real device; the MTU; the lower device's
    macvlan port (``macvlan_port_create``); passthru alone on it; then the upper link."""
    if req.link is None:
        raise cmd.error("macvlan needs a lower device", expected="'link DEV'")
    lower = topo.require_device(cmd.netns, req.link, cmd)
    if isinstance(lower, MacvlanDevice):  # netif_is_macvlan: "use the real device as the lowerdev"
        lower = topo.require_device(cmd.netns, lower.lower, cmd)
    mode = opts.get("mode", "vepa")
    dev = topo.new_device(MacvlanDevice, cmd, netns=req.netns, name=req.name, kind="macvlan",
                          address=req.address, mtu=req.mtu or lower.mtu, mode=mode)
    if req.mtu and req.mtu > lower.mtu:
        raise cmd.error(f"MTU {req.mtu} is above the lower device {lower.name}'s {lower.mtu}", value=req.mtu,
                        expected=f"at most {lower.mtu} (macvlan_common_newlink: -EINVAL)")
    macvlans = [up for up in topo.uppers(lower) if isinstance(up, MacvlanDevice)]
    if not macvlans:  # macvlan_port_create
        if lower.link_type != "ether":
            raise cmd.error(f"{lower.name} cannot carry macvlans ({lower.link_type})", value=lower.name,
                            expected="an Ethernet device, not loopback (macvlan_port_create: -EINVAL)")
        if lower.master is not None:  # netdev_is_rx_handler_busy: the bridge's rx_handler
            raise cmd.error(f"{lower.name} is a port of {lower.master}: its receive handler is the bridge's",
                            value=lower.name, expected="a device that is no bridge port (macvlan_port_create: "
                                                       "-EBUSY, Device or resource busy)")
    if macvlans and (mode == "passthru" or any(m.mode == "passthru" for m in macvlans)):  # port->count; macvlan_passthru
        raise cmd.error(f"a passthru macvlan is alone on its lower device: {lower.name} has "
                        f"{', '.join(m.name for m in macvlans)}", value=req.name,
                        expected="one passthru macvlan and no other on a device (macvlan_common_newlink: -EINVAL)")
    topo.link_upper(dev, lower, "lower", cmd)
    return dev


fill_forward_path = None
