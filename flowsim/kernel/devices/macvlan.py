"""macvlan devices: no ``ndo_fill_forward_path`` (the walk ends on the macvlan).

``ip link add link DEV name NAME type macvlan [mode bridge|private|vepa|passthru]``.
A macvlan shares its lower device's wire: it receives what arrives there for
its own MAC, so it is on the same L2 segment (used for neighbour discovery).
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
    if req.link is None:
        raise cmd.error("macvlan needs a lower device", expected="'link DEV'")
    lower = topo.require_device(cmd.netns, req.link, cmd)
    dev = topo.new_device(MacvlanDevice, cmd, netns=req.netns, name=req.name, kind="macvlan",
                          address=req.address, mtu=req.mtu or lower.mtu, mode=opts.get("mode", "vepa"))
    topo.link_upper(dev, lower, "lower", cmd)
    return dev


fill_forward_path = None
