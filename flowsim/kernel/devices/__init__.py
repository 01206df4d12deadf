"""Device kinds, one module each, and the ``ndo_fill_forward_path`` dispatch table.

Each module defines the device class, ``KINDS`` (the ``ip link add … type
KIND`` names it handles), ``parse_args(args, kind)``, ``create(topo, cmd, req,
opts)`` and ``fill_forward_path(ctx)`` — or ``fill_forward_path = None`` for
kinds whose kernel driver has no ``ndo_fill_forward_path`` (the walk stops
there and the device becomes the final ETHERNET entry).

Which resolvers exist depends on the kernel: :data:`RESOLVER_SWITCH` names the
profile switch that gates a kind (no tunnel resolvers before 6.19, no ip6tnl
resolver before 7.0); :func:`ndo_fill_forward_path` answers for one device
under one profile.

    >>> from flowsim.profiles import get_profile
    >>> from flowsim.kernel.devices.ipip import IpipDevice
    >>> ndo_fill_forward_path(IpipDevice("r", "tun0", "ipip"), get_profile("linux-6.18")) is None
    True
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType

from flowsim.kernel.devices import bridge, dsa, ethernet, gre, ip6tnl, ipip, macvlan, pppoe, vlan, vxlan, wireguard
from flowsim.kernel.devices.base import NetDevice

__all__ = ["MODULES", "KIND_MODULES", "RESOLVER_SWITCH", "ndo_fill_forward_path", "module_for"]

MODULES: tuple[ModuleType, ...] = (ethernet, vlan, bridge, pppoe, dsa, ipip, ip6tnl, gre, vxlan, wireguard, macvlan)

# `type KIND` on the command line → module
KIND_MODULES: dict[str, ModuleType] = {kind: m for m in MODULES for kind in m.KINDS}

# device.kind (as stored) → module: pppoe creates kind "ppp"
_DEVICE_KIND_MODULES: dict[str, ModuleType] = {**KIND_MODULES, "ppp": pppoe, "loopback": ethernet}

# kinds whose resolver only exists from some kernel on
RESOLVER_SWITCH: dict[str, str] = {
    "ipip": "ipip_fill_forward_path",
    "ip6tnl": "ip6tnl_fill_forward_path",
}


def module_for(dev: NetDevice) -> ModuleType:
    return _DEVICE_KIND_MODULES[dev.kind]


def ndo_fill_forward_path(dev: NetDevice, profile) -> Callable | None:
    """The device's ``ndo_fill_forward_path`` under *profile*, or None."""
    switch = RESOLVER_SWITCH.get(dev.kind)
    if switch is not None and not getattr(profile, switch):
        return None
    return getattr(module_for(dev), "fill_forward_path", None)
