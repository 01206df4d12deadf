"""DSA user ports and ``dsa_user_fill_forward_path`` (net/dsa/user.c).

DSA user ports are created by the switch driver, not by iproute2.
flowsim's extension::

    ip link add lan1 link eth0 type dsa port 1 tagger edsa [peer name eth0 netns host1]

creates user port ``lan1`` with switch port index 1 behind conduit ``eth0``
(the CPU-facing NIC), tagging frames with the ``edsa`` tagger.  Like the
kernel (``eth_hw_addr_inherit``) it takes the conduit's MAC unless
``address`` is given.  The optional ``peer`` clause models the front-panel
cable exactly like a veth peer: it creates the device at the other end.

Resolver (``dsa_user_fill_forward_path``, net/dsa/user.c): records ``DEV_PATH_DSA`` with ``dsa.port`` and
``dsa.proto`` (the tagger) and moves ``ctx.dev`` to the conduit; it never fails.
"""

from __future__ import annotations

import attrs

from flowsim.kernel.devices.base import Args, DevPathType, NetDevice, PathCtx, PathDsa, PathEntry, PathError
from flowsim.kernel.devices.ethernet import EthernetDevice, parse_peer

__all__ = ["DsaUserDevice", "KINDS", "TAGGERS", "parse_args", "create", "fill_forward_path"]

KINDS = ("dsa",)
# DSA_TAG_PROTO_* tagger names (net/dsa/tag_*.c)
TAGGERS = ("none", "brcm", "brcm-prepend", "brcm-legacy", "dsa", "edsa", "gswip", "hellcreek", "ksz8795",
           "ksz9477", "ksz9893", "lan937x", "lan9303", "mtk", "ocelot", "ocelot-8021q", "qca", "rtl4a",
           "rtl8_4", "rtl8_4t", "rzn1-a5psw", "sja1105", "sja1110", "trailer", "vsc73xx-8021q", "xrs700x",
           "8021q", "ar9331", "lan9645x", "yt921x")


@attrs.define(slots=True, eq=False)
class DsaUserDevice(NetDevice):
    """A DSA user port behind the conduit ``lower``."""

    port: int = 0
    tagger: str = "dsa"

    def describe(self) -> str:
        return f"dsa conduit {self.lower} port {self.port} tagger {self.tagger}"


def parse_args(args: Args, kind: str) -> dict:
    opts: dict = {}
    while args:
        keyword = args.next("an option")
        if keyword == "port":
            opts["port"] = args.int("port", 0, 63)
        elif keyword == "tagger":
            opts["tagger"] = args.choice("tagger", {t: t for t in TAGGERS})
        elif keyword == "peer":
            opts["peer"] = parse_peer(args)
        else:
            raise args.cmd.error(f"unknown option {keyword!r} for type dsa", value=keyword,
                                 expected="'port N tagger NAME [peer name NAME [netns NS]]' (flowsim extension)")
    if "port" not in opts:
        raise args.cmd.error("dsa needs a port", expected="'port N tagger NAME' (flowsim extension)")
    return opts


def create(topo, cmd, req, opts) -> NetDevice:
    if req.link is None:
        raise cmd.error("dsa needs a conduit", expected="'link CONDUIT'")
    conduit = topo.require_device(cmd.netns, req.link, cmd)
    if conduit.link_type != "ether":
        raise cmd.error(f"DSA conduit {conduit.name} is not an Ethernet device", value=conduit.name,
                        expected="an Ethernet NIC")
    dev = topo.new_device(DsaUserDevice, cmd, netns=req.netns, name=req.name, kind="dsa",
                          address=req.address or conduit.mac, mtu=req.mtu, port=opts["port"],
                          tagger=opts.get("tagger", "dsa"))
    dev.addr_set = req.address is not None
    topo.link_upper(dev, conduit, "conduit", cmd)
    peer_spec = opts.get("peer")
    if peer_spec is not None:
        peer = topo.new_device(EthernetDevice, cmd, netns=peer_spec.get("netns", cmd.netns),
                               name=peer_spec["name"], kind="ethernet", address=peer_spec.get("address"),
                               mtu=peer_spec.get("mtu"))
        topo.link_peer(dev, peer)
    return dev


def fill_forward_path(ctx: PathCtx) -> PathEntry | PathError:
    """Mirrors dsa_user_fill_forward_path."""
    user = ctx.dev
    assert isinstance(user, DsaUserDevice)  # dev_fill_forward_path calls the resolver of the device's own kind
    entry = PathEntry(DevPathType.DSA, user.name, user.ifindex, dsa=PathDsa(user.port, user.tagger))
    ctx.dev = ctx.ns.devices[user.lower]
    return entry
