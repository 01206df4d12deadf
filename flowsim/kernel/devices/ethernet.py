"""Plain Ethernet devices: veth pairs, NICs, dummy, loopback (no ``ndo_fill_forward_path``).

None of these implement ``ndo_fill_forward_path``, so ``dev_fill_forward_path``
stops on them and they become the final ``DEV_PATH_ETHERNET`` entry (``dev_fill_forward_path``, net/core/dev.c).

``ip link add NAME type veth peer [name] PEER [address MAC] [mtu N] [netns NS]``
creates the pair; as in ``veth_newlink`` the peer is registered first, so it
gets its ifindex before the device named on the command line.

``ip link add NAME type ethernet [peer [name] PEER [netns NS] …]`` is a
flowsim extension: a physical NIC (iproute2 cannot create one), optionally
cabled to a device elsewhere (modelled like a veth pair).  ``type dummy`` is
the kernel's dummy device.
"""

from __future__ import annotations

from typing import ClassVar

import attrs

from flowsim.kernel.devices.base import Args, NetDevice
from flowsim.kernel.headers import IPV6_MIN_MTU

__all__ = ["EthernetDevice", "LoopbackDevice", "KINDS", "parse_args", "parse_peer", "create",
           "fill_forward_path", "ipv6_off"]

KINDS = ("veth", "ethernet", "dummy")


@attrs.define(slots=True, eq=False)
class EthernetDevice(NetDevice):
    """veth, a physical NIC (``ethernet``) or ``dummy``; peers live in the topology graph."""


@attrs.define(slots=True, eq=False)
class LoopbackDevice(NetDevice):
    """``lo``: ifindex 1 in every namespace, ARPHRD_LOOPBACK."""

    LINK_TYPE: ClassVar[str] = "loopback"


def ipv6_off(dev: NetDevice) -> bool:
    """No IPv6 on *dev*: its MTU is under IPV6_MIN_MTU (``ipv6_add_dev`` makes no inet6_dev for it, and
    ``addrconf_notify`` stops IPv6 on a link lowered under it); loopback keeps its own."""
    return dev.mtu < IPV6_MIN_MTU and not isinstance(dev, LoopbackDevice)


def parse_peer(args: Args) -> dict:
    """``peer [name] NAME [address MAC] [mtu N] [netns NS]`` (iproute2 link_veth.c)."""
    peer: dict = {}
    tok = args.next("'name NAME' after 'peer'")
    peer["name"] = args.name("name") if tok == "name" else _bare_name(args, tok)
    while args:
        keyword = args.next("a peer option")
        if keyword == "address":
            peer["address"] = args.mac("address")
        elif keyword == "mtu":
            peer["mtu"] = args.int("mtu", 68, 65535)
        elif keyword == "netns":
            peer["netns"] = args.next("a namespace name after 'netns'")
        else:
            raise args.cmd.error(f"unknown peer option {keyword!r}", value=keyword,
                                 expected="one of name, address, mtu, netns")
    return peer


def _bare_name(args: Args, tok: str) -> str:
    args.pos -= 1
    return args.name("peer")


def parse_args(args: Args, kind: str) -> dict:
    if not args:
        if kind == "veth":
            raise args.cmd.error("veth needs a peer", expected="'peer name NAME [netns NS]'")
        return {}
    keyword = args.next("'peer'")
    if keyword != "peer" or kind == "dummy":
        raise args.cmd.error(f"unknown option {keyword!r} for type {kind}", value=keyword,
                             expected="'peer name NAME [netns NS]'" if kind != "dummy" else "no options")
    return {"peer": parse_peer(args)}


def create(topo, cmd, req, opts) -> NetDevice:
    """``veth_newlink``: register the peer first, then the device; link them."""
    peer_spec = opts.get("peer")
    peer = None
    if peer_spec is not None:
        peer_ns = peer_spec.get("netns", cmd.netns)
        peer = topo.new_device(EthernetDevice, cmd, netns=peer_ns, name=peer_spec["name"], kind=req.kind,
                               address=peer_spec.get("address"), mtu=peer_spec.get("mtu"))
    dev = topo.new_device(EthernetDevice, cmd, netns=req.netns, name=req.name, kind=req.kind,
                          address=req.address, mtu=req.mtu)
    if peer is not None:
        topo.link_peer(dev, peer)
    return dev


fill_forward_path = None  # no ndo_fill_forward_path: the walk ends here
