"""Link layer of the slow path: device receive (``__netif_receive_skb_core``) and every device's transmit.

Theory of operation
-------------------
Receive.  A frame from a wire becomes an skb with :func:`flowsim.kernel.skb.skb_from_frame`
(``eth_type_trans``, outer tag → hwaccel tag) and enters
:func:`netif_receive_skb`, which loops like the kernel's ``another_round``:

1. ``skb->skb_iif`` = this device; an in-band 802.1Q/802.1AD header is
   moved into the hwaccel tag (``skb_vlan_untag``) when none is there yet;
2. the frame is captured (what tcpdump on the device shows);
3. the **netdev ingress hook**: nft ``ingress`` chains and flowtables
   registered for this device, in priority order
   (:meth:`Nftables.hook_entries`) — a flowtable entry calls
   ``fastpath.nf_flow_offload_hook`` and its verdict ends the receive
   (``stolen``: already transmitted; ``drop``: dropped with
   ``skb.drop_reason``) or lets it go on (``accept``: the slow path);
4. ``vlan_do_receive``: a hwaccel tag whose VLAN device exists moves the
   skb to that device and starts another round (its ingress hooks run);
5. the ``rx_handler``: a bridge port hands the frame to
   :func:`br_handle_frame` (VLAN ingress filtering, FDB learning, then
   forward, flood or pass up to the bridge device — another receive);
6. protocol delivery through :data:`ptype_base`, the handlers the layers
   above registered with :func:`dev_add_pack` (``inet_init`` registers
   ``ip_rcv`` and ``ipv6_rcv``: :mod:`flowsim.kernel.stack.ip` registers
   its ``ip_rcv`` for ETH_P_IP and ETH_P_IPV6), PPPoE session frames to
   :func:`pppoe_rcv` (the ppp unit then receives an L3 skb with no
   link-layer header); anything else is dropped.

Transmit.  :func:`dev_queue_xmit` runs the netdev egress hook, captures the
frame and calls the device kind's xmit from :data:`XMIT`: a veth or NIC
puts the frame on the wire (the peer receives it ``Kernel.link_delay``
later; crossing namespaces scrubs the mark), a VLAN device sets the hwaccel
tag (pushing an existing one in-band first, as
``__vlan_hwaccel_push_inside`` does) and transmits on its real device, a
bridge forwards by FDB and VLAN egress policy, a ppp unit prepends the
PPPoE and Ethernet headers, a DSA user port sends on its cable (the switch
tag is added and stripped inside the simulated switch), a tunnel
encapsulates (its xmit is registered by :mod:`flowsim.kernel.stack.ip` with
:func:`register_ndo_start_xmit`, as a tunnel driver sets its
``netdev_ops``).  :func:`neigh_output` adds the Ethernet header from the
neighbour table (``neigh_resolve_output``) for Ethernet devices.

This module imports nothing of the layers above it: IP reaches it by plain
calls, it reaches IP only through the two tables above, filled at import
time of :mod:`flowsim.kernel.stack.ip` (the kernel's initcalls).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable

from flowsim.kernel.devices.base import Encap
from flowsim.kernel.devices.bridge import BridgeDevice
from flowsim.kernel.devices.dsa import DsaUserDevice
from flowsim.kernel.devices.ethernet import EthernetDevice, LoopbackDevice
from flowsim.kernel.devices.pppoe import PppDevice
from flowsim.kernel.devices.vlan import VlanDevice
from flowsim.kernel.flowtable.fastpath import nf_flow_offload_hook
from flowsim.kernel.gso import GsoError, skb_gso_segment
from flowsim.kernel.headers import (
    ETH_HLEN, ETH_P_8021AD, ETH_P_8021Q, ETH_P_IP, ETH_P_IPV6, ETH_P_PPP_SES, ETHERTYPE_TO_PPP,
    PPP_TO_ETHERTYPE, mac_aton, mac_ntoa,
)
from flowsim.kernel.pkt import eth_header, ipv4_change_dsfield, ipv6_change_dsfield, parse_ip
from flowsim.kernel.skb import SkBuff, frame_on_wire, skb_from_frame, skb_vlan_untag
from flowsim.nft.ruleset import NftPacket

__all__ = ["netif_receive_frame", "netif_receive_skb", "dev_queue_xmit", "neigh_output", "br_handle_frame",
           "pppoe_rcv", "XMIT", "XMIT_RECURSION_LIMIT", "rx_frame", "tx_frame", "gso_segment", "ptype_base",
           "dev_add_pack", "register_ndo_start_xmit", "PacketHandler", "XmitFunc"]

XMIT_RECURSION_LIMIT = 8  # dev_xmit_recursion(): stacked tunnels deeper than this are dropped
_L3_LINK_TYPES = frozenset({"ppp", "tunnel", "tunnel6", "none", "ipgre"})
_VLAN_PROTOS = (ETH_P_8021Q, ETH_P_8021AD)

#: ``packet_type.func``: (kernel, netns state, device, skb, for this host) — the host flag is
#: ``skb->pkt_type != PACKET_OTHERHOST`` as ``eth_type_trans`` set it.
PacketHandler = Callable[..., None]
#: ``ndo_start_xmit``: (kernel, device, skb).
XmitFunc = Callable[..., None]

#: ``ptype_base``: ethertype -> the handler of the layer above (:func:`dev_add_pack`).
ptype_base: dict[int, PacketHandler] = {}


def dev_add_pack(ptype: int, func: PacketHandler) -> None:
    """``dev_add_pack``: frames of ethertype *ptype* are handed to *func* after the rx_handler."""
    ptype_base[ptype] = func


# ----------------------------------------------------------------- capture helpers

def rx_frame(skb: SkBuff, l3: bool) -> bytes:
    """The frame tcpdump shows on the receiving device: hwaccel tag re-inserted, zero MACs for L3 devices."""
    buf = skb.buf
    proto = skb.protocol.to_bytes(2, "big")
    if l3:
        return bytes(12) + proto + bytes(buf[skb.data:])
    mac = skb.mac_header
    tag = struct.pack("!HH", skb.vlan_proto, skb.vlan_tci) if skb.vlan_present else b""
    return bytes(buf[mac:mac + 12]) + tag + proto + bytes(buf[skb.data:])


def tx_frame(skb: SkBuff, l3: bool) -> bytes:
    """The frame as transmitted (data at the link-layer header; the hwaccel tag goes on the wire in-band)."""
    buf, d = skb.buf, skb.data
    if l3:
        return bytes(12) + skb.protocol.to_bytes(2, "big") + bytes(buf[d:])
    if skb.vlan_present:
        return bytes(buf[d:d + 12]) + struct.pack("!HH", skb.vlan_proto, skb.vlan_tci) + bytes(buf[d + 12:])
    return bytes(buf[d:])


def _capture(kernel, dev, frame: bytes, skb: SkBuff, outbound: bool) -> None:
    """The packet taps (``dev_queue_xmit_nit`` on transmit, ``deliver_skb`` to ``ptype_all`` on receive):
    ``kernel.capture`` sees the frame, ``kernel.packet_tap`` also the skb and the direction."""
    if kernel.capture is not None:
        kernel.capture(dev.netns, dev.name, frame)
    if kernel.packet_tap is not None:
        kernel.packet_tap(dev.netns, dev.name, frame, skb, outbound)


# ----------------------------------------------------------------- receive

def netif_receive_frame(kernel, dev, frame: bytes, tag, zeros: int = 0, mark: int = 0, gso_size: int = 0,
                        gso_type: int = 0) -> None:
    """A frame arrives from *dev*'s wire: ``eth_type_trans`` + ``netif_receive_skb``.

    *frame* is followed by *zeros* zero bytes: a frame waits on the wire without its zero tail
    (:func:`flowsim.kernel.skb.frame_on_wire`)."""
    # positional: once per frame
    skb = skb_from_frame(frame, dev.ifindex, kernel.headlen, True, gso_size, gso_type, zeros, mark, tag)
    if skb is None:
        skb = SkBuff(buf=bytearray(frame) + bytes(zeros), data=0, linear_end=len(frame) + zeros, tag=tag)
        kernel.drop(skb, "frame-truncated", f"{dev.netns} {dev.name}")
        return
    netif_receive_skb(kernel, dev, skb)


def netif_receive_skb(kernel, dev, skb: SkBuff, *, local: bool = False) -> None:
    """``__netif_receive_skb_core`` with its ``another_round`` (see the module docstring).

    *local* marks a frame the bridge passed up as addressed to this host.
    """
    st = kernel.netns[dev.netns]
    while True:
        if not dev.up:
            kernel.drop(skb, "dev-down", f"{dev.netns} {dev.name} rx")
            return
        skb.iif = dev.ifindex
        if not skb.vlan_present and skb.protocol in _VLAN_PROTOS and not skb_vlan_untag(skb):
            kernel.drop(skb, "frame-truncated", f"{dev.netns} {dev.name} rx")
            return
        if kernel.capture is not None or kernel.packet_tap is not None:
            _capture(kernel, dev, rx_frame(skb, dev.link_type in _L3_LINK_TYPES), skb, False)
        if kernel.tracing:
            kernel.trace(skb, f"{dev.netns} {dev.name}", "rx", len=skb.len,
                         vlan=skb.vlan_tci & 0xFFF if skb.vlan_present else None)
        if st.nft is not None and _ingress_hook(kernel, st, dev, skb):
            return
        if skb.vlan_present:
            upper = _vlan_upper(kernel, dev, skb.vlan_tci & 0xFFF, skb.vlan_proto)
            if upper is not None:  # vlan_do_receive: another round on the VLAN device
                skb.vlan_hwaccel_clear_tag()
                dev = upper
                continue
        if dev.master is not None:
            br_handle_frame(kernel, st, dev, skb)
            return
        break
    if skb.vlan_present and skb.vlan_tci & 0xFFF:
        kernel.drop(skb, "vlan-no-device", f"{dev.netns} {dev.name} rx", vid=skb.vlan_tci & 0xFFF)
        return
    proto = skb.protocol
    l3 = dev.link_type in _L3_LINK_TYPES
    deliver = ptype_base.get(proto)  # deliver_skb for the ptype_base entry of this protocol
    if deliver is not None:
        deliver(kernel, st, dev, skb, l3 or local or _to_host(skb, dev))
    elif proto == ETH_P_PPP_SES and not l3:
        pppoe_rcv(kernel, st, dev, skb)
    else:
        kernel.drop(skb, "unknown-protocol", f"{dev.netns} {dev.name} rx", ethertype=f"{proto:#06x}")


def _to_host(skb: SkBuff, dev) -> bool:
    """``eth_type_trans``'s pkt_type: PACKET_HOST (our MAC), broadcast/multicast, or OTHERHOST."""
    buf, mac = skb.buf, skb.mac_header
    return bool(buf[mac] & 1) or buf.startswith(mac_aton(dev.mac), mac)  # (no slice: once per received frame)


def _vlan_upper(kernel, dev, vid: int, proto: int):
    """``__vlan_find_dev_deep_rcu`` (cached until an event adds a device: ``Kernel.netdev_register``)."""
    cache = kernel._vlan_uppers
    key = (dev.netns, dev.name, vid, proto)
    if key not in cache:
        cache[key] = kernel.topo.vlan_upper(dev, Encap(vid, proto))
    return cache[key]


def _l3_offset(skb: SkBuff, at_l2: bool) -> int | None:
    """Where the IPv4/IPv6 header starts, if the skb carries one without in-band headers."""
    if skb.protocol not in (ETH_P_IP, ETH_P_IPV6):
        return None
    return skb.data + ETH_HLEN if at_l2 else skb.data


def _netdev_packet(skb: SkBuff, dev, at_l2: bool, ingress: bool):
    """The nft view of a packet at the netdev hooks (``nft_set_pktinfo_ipv4_ingress`` or unspecified)."""
    off = _l3_offset(skb, at_l2)
    info = parse_ip(skb.buf, off) if off is not None else None
    name, index = dev.name, dev.ifindex
    if info is None:
        return None, NftPacket(nfproto=0, iif=name if ingress else None, iifindex=index if ingress else None,
                               oif=None if ingress else name, oifindex=None if ingress else index,
                               mark=skb.mark, length=skb.len)
    return info, NftPacket(
        nfproto=info.nfproto, l4proto=info.l4proto, saddr=info.src, daddr=info.dst, sport=info.sport,
        dport=info.dport, dscp=info.dscp, ttl=info.ttl, iif=name if ingress else None,
        iifindex=index if ingress else None, oif=None if ingress else name, oifindex=None if ingress else index,
        mark=skb.mark, length=info.tot_len, tcp_flags=info.tcp_flags, icmp_type=info.icmp_type,
        icmp_code=info.icmp_code)


def _netdev_chain(kernel, st, hook: str, dev, skb: SkBuff, entry, at_l2: bool) -> bool:
    """One nft netdev chain at ingress/egress; True when it dropped the packet."""
    info, pkt = _netdev_packet(skb, dev, at_l2, hook == "ingress")
    res = st.nft.eval_hook(hook, pkt, entries=(entry,))
    if kernel.tracing:
        for step in res.trace:
            kernel.trace(skb, f"{dev.netns} {dev.name} {hook}", str(step))
    if res.verdict == "drop":
        kernel.drop(skb, "nft-reject" if res.reject else "nft-drop", f"{dev.netns} {dev.name} {hook}")
        return True
    skb.mark = res.meta_mark
    if res.dscp is not None and info is not None:
        (ipv4_change_dsfield if info.version == 4 else ipv6_change_dsfield)(skb.buf, info.l3off, res.dscp)
    return False


def _ingress_hook(kernel, st, dev, skb: SkBuff) -> bool:
    """The netdev ingress hook (``nf_ingress``): True when the packet was consumed (stolen or dropped)."""
    steps = st.ingress_steps.get(dev.name)
    if steps is None:
        steps = st.ingress_steps[dev.name] = _ingress_steps(st, dev.name)
    for e, ft in steps:
        if ft is None:
            if _netdev_chain(kernel, st, "ingress", dev, skb, e, False):
                return True
            continue
        if not kernel.flowtables_enabled:
            continue
        verdict = nf_flow_offload_hook(kernel, st, ft, skb, dev)
        if verdict == "stolen":
            return True
        if verdict == "drop":
            kernel.drop(skb, skb.drop_reason or "flowtable-drop", f"{dev.netns} {dev.name} @{ft.name}")
            return True
    return False


def _ingress_steps(st, device: str) -> tuple:
    """The entries of *device*'s netdev ingress hook in kernel order, each ``(entry, None)`` for a base chain or
    ``(entry, Flowtable)`` for a flowtable, the namespace's runtime object resolved once (the ruleset is frozen
    for the run: ``Nftables.hook_entries`` is a pure function of it)."""
    steps = []
    for e in st.nft.hook_entries("ingress", None, device):
        m = e.flowtable
        steps.append((e, None) if e.chain is not None else (e, st.ft_by_key[(m.family, m.table, m.name)]))
    return tuple(steps)


# ----------------------------------------------------------------- bridge

def _eth_addrs(skb: SkBuff) -> tuple[bytes, bytes]:
    mac = skb.mac_header
    return bytes(skb.buf[mac:mac + 6]), bytes(skb.buf[mac + 6:mac + 12])


def _skb_tag(skb: SkBuff) -> Encap | None:
    return Encap(skb.vlan_tci & 0xFFF, skb.vlan_proto) if skb.vlan_present else None


def br_handle_frame(kernel, st, port, skb: SkBuff) -> None:
    """``br_handle_frame`` → ``br_handle_frame_finish``: filter, learn, then forward, flood or pass up."""
    br: BridgeDevice = st.ns.devices[port.master]
    where = f"{st.name} {br.name}"
    if not br.up:
        kernel.drop(skb, "dev-down", where)
        return
    vid = br.allowed_ingress(port.name, _skb_tag(skb))
    if vid is None:
        kernel.drop(skb, "bridge-vlan-filtered", where, port=port.name, vid=_skb_tag(skb))
        return
    if br.vlan_filtering and skb.vlan_present and skb.vlan_proto == br.vlan_protocol:
        skb.vlan_hwaccel_clear_tag()  # the tag is now the frame's VID
    dst, src = _eth_addrs(skb)
    br.fdb_learn(mac_ntoa(src), vid, port.name)
    if dst[0] & 1:
        _br_flood(kernel, st, br, skb, vid, exclude=port.name)
        return
    dmac = mac_ntoa(dst)
    f = br.fdb_find(dmac, vid)
    if f is None:
        _br_flood(kernel, st, br, skb, vid, exclude=port.name)
    elif f.port is None or f.local:
        _br_pass_frame_up(kernel, st, br, skb, vid)
    elif f.port == port.name:
        kernel.drop(skb, "bridge-no-destination", where, reason="destination behind the ingress port")
    else:
        _br_forward(kernel, st, br, f.port, skb, vid)


def _br_egress_tag(br: BridgeDevice, port: str | None, skb: SkBuff, vid: int) -> bool:
    """``br_allowed_egress`` + ``br_handle_vlan``: False if filtered; else tag or untag the skb."""
    untagged = br.allowed_egress(port, vid)
    if untagged is None:
        return False
    if br.vlan_filtering:
        if untagged:
            skb.vlan_hwaccel_clear_tag()
        else:
            skb.vlan_hwaccel_put_tag(br.vlan_protocol, vid)
    return True


def _br_pass_frame_up(kernel, st, br: BridgeDevice, skb: SkBuff, vid: int) -> None:
    """``br_pass_frame_up``: the bridge device itself receives the frame."""
    if not _br_egress_tag(br, None, skb, vid):
        kernel.drop(skb, "bridge-vlan-filtered", f"{st.name} {br.name}", port="(bridge)", vid=vid)
        return
    netif_receive_skb(kernel, br, skb, local=True)


def _br_forward(kernel, st, br: BridgeDevice, port: str, skb: SkBuff, vid: int) -> None:
    """``br_forward`` → ``br_dev_queue_push_xmit``: egress VLAN policy, then the port transmits."""
    if not _br_egress_tag(br, port, skb, vid):
        kernel.drop(skb, "bridge-vlan-filtered", f"{st.name} {br.name}", port=port, vid=vid)
        return
    skb.data = skb.mac_header  # skb_push(ETH_HLEN): the Ethernet header directly precedes the data
    dev_queue_xmit(kernel, st.ns.devices[port], skb)


def _br_flood(kernel, st, br: BridgeDevice, skb: SkBuff, vid: int, exclude: str | None) -> None:
    """``br_flood``: a copy to every port allowed to send this VID (unknown unicast, broadcast)."""
    ports = [p for p in br.ports if p != exclude and st.ns.devices[p].up and br.allowed_egress(p, vid) is not None]
    if not ports:
        kernel.drop(skb, "bridge-no-destination", f"{st.name} {br.name}", reason="nothing to flood to")
        return
    kernel.add_pieces(skb, len(ports) - 1)
    for i, port in enumerate(ports):
        copy = skb if i == len(ports) - 1 else _skb_copy(skb)
        _br_forward(kernel, st, br, port, copy, vid)


def _skb_copy(skb: SkBuff) -> SkBuff:
    """``skb_clone`` for flooding: the copy owns its bytes."""
    c = SkBuff(buf=bytearray(skb.buf), data=skb.data, linear_end=skb.linear_end, mac_header=skb.mac_header,
               network_header=skb.network_header, transport_header=skb.transport_header, protocol=skb.protocol,
               vlan_present=skb.vlan_present, vlan_proto=skb.vlan_proto, vlan_tci=skb.vlan_tci, iif=skb.iif,
               mark=skb.mark, tag=skb.tag, gso_size=skb.gso_size, gso_type=skb.gso_type)
    return c


def _xmit_bridge(kernel, br: BridgeDevice, skb: SkBuff) -> None:
    """``br_dev_xmit``: classify into a VID (the bridge's own VLAN group), then FDB forward or flood."""
    st = kernel.netns[br.netns]
    tag = _skb_tag(skb)
    vid = br.allowed_ingress(None, tag)
    if vid is None:
        kernel.drop(skb, "bridge-vlan-filtered", f"{st.name} {br.name} xmit", vid=tag)
        return
    if br.vlan_filtering and tag is not None and tag.proto == br.vlan_protocol:
        skb.vlan_hwaccel_clear_tag()
    skb.mac_header = skb.data
    dst = bytes(skb.buf[skb.data:skb.data + 6])
    if dst[0] & 1:
        _br_flood(kernel, st, br, skb, vid, exclude=None)
        return
    f = br.fdb_find(mac_ntoa(dst), vid)
    if f is None:
        _br_flood(kernel, st, br, skb, vid, exclude=None)
    elif f.port is None or f.local:
        kernel.drop(skb, "bridge-no-destination", f"{st.name} {br.name} xmit", reason="addressed to the bridge itself")
    else:
        _br_forward(kernel, st, br, f.port, skb, vid)


# ----------------------------------------------------------------- PPPoE

def pppoe_rcv(kernel, st, dev, skb: SkBuff) -> None:
    """``pppoe_rcv`` → ``ppp_input``: the session's ppp unit receives the PPP payload as an L3 skb."""
    where = f"{st.name} {dev.name} pppoe"
    if not skb.may_pull(8):
        kernel.drop(skb, "frame-truncated", where)
        return
    b, d = skb.buf, skb.data
    sid = (b[d + 2] << 8) | b[d + 3]
    length = (b[d + 4] << 8) | b[d + 5]
    _dst, src = _eth_addrs(skb)
    peer = mac_ntoa(src)
    ppp = None
    if b[d] == 0x11 and b[d + 1] == 0:
        for cand in st.ns.devices.values():
            if isinstance(cand, PppDevice) and cand.lower == dev.name and cand.session == sid \
                    and cand.peer_mac == peer and cand.connected:
                ppp = cand
                break
    if ppp is None:
        kernel.drop(skb, "pppoe-no-session", where, session=f"{sid:#06x}", peer=peer)
        return
    proto = PPP_TO_ETHERTYPE.get((b[d + 6] << 8) | b[d + 7])
    if proto is None or length < 2 or d + 6 + length > len(b):
        kernel.drop(skb, "unknown-protocol", where, ppp=f"{(b[d + 6] << 8) | b[d + 7]:#06x}")
        return
    del b[d + 6 + length:]  # pskb_trim_rcsum to the PPPoE length (Ethernet padding)
    skb.data = d + 8
    skb.linear_end = min(skb.linear_end, len(b))
    skb.protocol = proto
    skb.mac_header = skb.network_header = skb.data
    netif_receive_skb(kernel, ppp, skb)


def _xmit_ppp(kernel, ppp: PppDevice, skb: SkBuff) -> None:
    """``ppp_start_xmit`` → ``pppoe_xmit``: PPP protocol, PPPoE session header, Ethernet to the peer."""
    st = kernel.netns[ppp.netns]
    proto = ETHERTYPE_TO_PPP.get(skb.protocol)
    if not ppp.connected or ppp.lower is None:
        kernel.drop(skb, "pppoe-no-session", f"{st.name} {ppp.name} xmit")
        return
    if proto is None:
        kernel.drop(skb, "unknown-protocol", f"{st.name} {ppp.name} xmit")
        return
    lower = st.ns.devices[ppp.lower]
    hdr = eth_header(mac_aton(ppp.peer_mac), mac_aton(lower.mac), ETH_P_PPP_SES) + struct.pack(
        "!BBHHH", 0x11, 0, ppp.session, skb.len + 2, proto)
    skb.push(hdr)
    skb.mac_header = skb.data
    skb.network_header = skb.data + ETH_HLEN
    skb.protocol = ETH_P_PPP_SES
    dev_queue_xmit(kernel, lower, skb)


# ----------------------------------------------------------------- transmit

def _xmit_wire(kernel, dev, skb: SkBuff) -> None:
    """veth_xmit / a NIC / a DSA user port: the frame goes on the wire to the peer device."""
    peer = kernel.peers[dev]
    if peer is None:
        kernel.drop(skb, "no-carrier", f"{dev.netns} {dev.name} xmit")
        return
    # the frame waits on the wire without the sending host's zero payload when it still ends with it
    # (tx_frame's bytes when the hwaccel tag goes in-band)
    payload = skb.tag.zeros if skb.tag is not None else 0
    frame, zeros = frame_on_wire(tx_frame(skb, False), 0, payload) if skb.vlan_present else \
        frame_on_wire(skb.buf, skb.data, payload)
    mark = skb.mark if peer.netns == dev.netns else 0  # skb_scrub_packet(xnet) clears the mark
    if mark or skb.gso_size or skb.gso_type:
        kernel.schedule(kernel.now + kernel.link_delay, kernel.receive_frame, peer, frame, skb.tag, zeros, mark,
                        skb.gso_size, skb.gso_type)
    else:  # most frames: a queued event without the three zeros (issue 16: the frames in flight)
        kernel.schedule(kernel.now + kernel.link_delay, kernel.receive_frame, peer, frame, skb.tag, zeros)


def _xmit_vlan(kernel, vdev: VlanDevice, skb: SkBuff) -> None:
    """``vlan_dev_hard_start_xmit``: an existing hwaccel tag goes in-band, ours becomes the hwaccel tag."""
    if skb.vlan_present:  # __vlan_hwaccel_push_inside
        skb.push(bytes(4))
        b, d = skb.buf, skb.data
        b[d:d + 12] = b[d + 4:d + 16]
        struct.pack_into("!HH", b, d + 12, skb.vlan_proto, skb.vlan_tci)
        skb.protocol = skb.vlan_proto
        skb.mac_header = d
    skb.vlan_hwaccel_put_tag(vdev.vlan_proto, vdev.vlan_id)
    dev_queue_xmit(kernel, kernel.netns[vdev.netns].ns.devices[vdev.lower], skb)


def _xmit_loopback(kernel, lo, skb: SkBuff) -> None:
    """``loopback_xmit``: the packet comes straight back in on lo."""
    kernel.schedule(kernel.now, kernel.receive_frame, lo, tx_frame(skb, False), skb.tag, 0, skb.mark, skb.gso_size,
                    skb.gso_type)


def _xmit_unsupported(kernel, dev, skb: SkBuff) -> None:
    kernel.drop(skb, "unsupported-device", f"{dev.netns} {dev.name} xmit", kind=dev.kind)


#: device class -> its ndo_start_xmit; the tunnels' are registered by the IP layer (:func:`register_ndo_start_xmit`)
XMIT: dict[type, XmitFunc] = {
    EthernetDevice: _xmit_wire,
    DsaUserDevice: _xmit_wire,
    VlanDevice: _xmit_vlan,
    BridgeDevice: _xmit_bridge,
    PppDevice: _xmit_ppp,
    LoopbackDevice: _xmit_loopback,
}


def register_ndo_start_xmit(device_class: type, xmit: XmitFunc) -> None:
    """A driver's ``netdev_ops->ndo_start_xmit`` for every device of *device_class* (tunnels: ``ipip_netdev_ops``)."""
    XMIT[device_class] = xmit


def dev_queue_xmit(kernel, dev, skb: SkBuff) -> None:
    """``__dev_queue_xmit``: netdev egress hook, capture, the device's xmit (recursion-limited)."""
    if not dev.up:
        kernel.drop(skb, "dev-down", f"{dev.netns} {dev.name} xmit")
        return
    if kernel.xmit_depth >= XMIT_RECURSION_LIMIT:
        kernel.drop(skb, "xmit-recursion", f"{dev.netns} {dev.name} xmit")
        return
    st = kernel.netns[dev.netns]
    if st.nft is not None and dev.name in st.nft.egress_devices:
        for e in st.nft.hook_entries("egress", device=dev.name):
            if e.chain is not None and _netdev_chain(kernel, st, "egress", dev, skb, e,
                                                     dev.link_type not in _L3_LINK_TYPES):
                return
    if dev.kind == "dummy":
        kernel.drop(skb, "no-carrier", f"{dev.netns} {dev.name} xmit")
        return
    segs: Iterable[SkBuff] = (skb,)
    if skb.gso_size and not dev.GSO:  # validate_xmit_skb: netif_needs_gso → software segmentation
        segs = gso_segment(kernel, skb, f"{dev.netns} {dev.name} xmit") or ()
    xmit = XMIT.get(type(dev), _xmit_unsupported)
    for seg in segs:
        # xmit_one: taps (capture, trace) see each skb, then the device's ndo_start_xmit
        if kernel.capture is not None or kernel.packet_tap is not None or kernel.tracing:
            _xmit_taps(kernel, dev, seg)
        kernel.xmit_depth += 1
        try:
            xmit(kernel, dev, seg)
        finally:
            kernel.xmit_depth -= 1


def gso_segment(kernel, skb: SkBuff, where: str) -> list[SkBuff] | None:
    """``skb_gso_segment`` in the stack: the segments (each a piece of the packet), or None when it failed."""
    try:
        segs = skb_gso_segment(skb)
    except GsoError as exc:
        kernel.drop(skb, "gso-segment-failed", where, error=str(exc))
        return None
    kernel.add_pieces(skb, len(segs) - 1)
    kernel.trace(skb, where, f"GSO: segmented into {len(segs)}", gso_size=skb.gso_size)
    return segs


def _xmit_taps(kernel, dev, skb: SkBuff) -> None:
    """``xmit_one``'s taps: ``dev_queue_xmit_nit`` (capture) and the trace see each skb before the xmit."""
    l3 = dev.link_type in _L3_LINK_TYPES
    if kernel.capture is not None or kernel.packet_tap is not None:
        _capture(kernel, dev, tx_frame(skb, l3), skb, True)
    if kernel.tracing:
        kernel.trace(skb, f"{dev.netns} {dev.name}", "xmit", len=skb.len,
                     vlan=skb.vlan_tci & 0xFFF if skb.vlan_present else None, frame=tx_frame(skb, l3).hex())


def neigh_output(kernel, dev, skb: SkBuff, nexthop) -> None:
    """``neigh_output``: the cached Ethernet header of a valid neighbour entry (``neigh_hh_output``); L3
    devices transmit as is."""
    lt = dev.link_type
    if lt == "ether":
        hh = kernel.netns[dev.netns].ns.neigh.hh_header(dev.name, nexthop, dev.mac, skb.protocol)
        if hh is None:
            kernel.drop(skb, "neigh-unresolved", f"{dev.netns} {dev.name}", nexthop=nexthop)
            return
        skb.push(hh)
        skb.mac_header = skb.data
    elif lt == "loopback":
        skb.push(eth_header(bytes(6), bytes(6), skb.protocol))
        skb.mac_header = skb.data
    dev_queue_xmit(kernel, dev, skb)
