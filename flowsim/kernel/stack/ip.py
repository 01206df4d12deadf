"""The IP layer of the slow path: receive, routing, forwarding, output, tunnels and ICMP errors.

Theory of operation
-------------------
Receive (``ip_rcv`` / ``ipv6_rcv`` → ``ip_rcv_finish``): the header is
checked and the packet trimmed to its IP length; a frame that was not for
this host (PACKET_OTHERHOST) is dropped; in a namespace with conntrack,
IPv4 and IPv6 fragments are reassembled first (``nf_defrag_ipv4``,
``nf_ct_frag6_gather``, priority -400);
then PREROUTING (:func:`flowsim.kernel.stack.nf.nf_hook`: raw chains, conntrack,
DNAT, filter chains) and the routing decision: local delivery, forwarding
(only when the ingress device forwards: ``net.ipv4.conf.DEV.forwarding``,
else ``net.ipv4.conf.all.forwarding`` / ``ip_forward``;
``net.ipv6.conf.all.forwarding``) or an ICMP destination unreachable.

Forward (``ip_forward`` / ``ip6_forward``, in the kernel's order): TTL or
hop limit ≤ 1 → ICMP time exceeded; longer than the forwarding MTU
(:func:`dst_mtu_maybe_forward`: IPv6 ignores a route ``mtu`` that is not
locked) with DF (or IPv6, unless conntrack reassembled it from fragments
that fit) → ICMP fragmentation needed / Packet Too Big with that MTU; TTL
−1 with an incremental checksum update; FORWARD (where
``flow add`` runs with this route); POSTROUTING (SNAT / masquerade,
conntrack confirmation); ``ip_finish_output``: IPv4 without DF longer than
the route's MTU is fragmented, and so is IPv6 from a host's UDP socket or
reassembled by conntrack (no longer than its largest fragment); anything
else longer is refused with the ICMP error (``ip_fragment`` /
``ip6_fragment``); ``ip_finish_output2`` →
:func:`flowsim.kernel.stack.l2.neigh_output`.  Every ICMP error carries the
conntrack entry of the packet it is about (``nf_ct_attach``), so NAT
translates it back to what the sender sent.

Local output (``ip_local_out``): route, OUTPUT (conntrack, DNAT, filter),
a new route if DNAT changed the destination, then the same POSTROUTING and
finish.  Hosts' endpoints and the stack's own ICMP errors start here.

Local delivery (``ip_local_deliver``): reassembly, INPUT, then by protocol:
IPIP / IPv6-in-IP packets to a tunnel whose local and remote addresses match
(``ip_tunnel_lookup``); the outer header is removed and the inner packet is
*received on the tunnel device* (another ``netif_receive_skb``, so the
tunnel device's ingress hooks run); ESP to :func:`flowsim.kernel.stack.xfrm.xfrm4_rcv` (IPsec: the
decrypted inner packet is received again on the same device); TCP/UDP to the socket of a simulated
endpoint (checksum verified, as ``tcp_v4_rcv`` does); ICMP errors to the
socket of the packet they quote (path MTU).

Tunnel transmit (``ip_tunnel_xmit`` for ipip, ``ip6_tnl_xmit`` for ip6tnl):
the route to the remote end, the tunnel MTU check (ICMP back to the inner
sender), the outer header with the tunnel's own TTL / hop limit (0:
inherit the inner one), ECN copied from the inner header, DF set (ipip's
default ``pmtudisc``), an automatic IPv6 flow label, and for ip6tnl without
``encaplimit none`` the 8-byte destination-options header carrying the
tunnel encapsulation limit (RFC 2473).  The outer packet then goes through
OUTPUT and POSTROUTING of the namespace like ``iptunnel_xmit`` →
``ip_local_out``.
"""

from __future__ import annotations

import functools
import struct

import zlib

import attrs
from ipaddress import IPv4Address, IPv6Address

from flowsim.kernel.devices.ip6tnl import Ip6tnlDevice
from flowsim.kernel.devices.ipip import IpipDevice
from flowsim.kernel.conntrack import IPS_NAT_MASK, TCP_ACK, TCP_FIN, TCP_RST, TCP_SYN, nf_conntrack_tcp_set_closing
from flowsim.kernel.fib import Route
from flowsim.kernel.gso import SKB_GSO_IPXIP4, SKB_GSO_IPXIP6, GsoError, skb_gso_validate_network_len
from flowsim.kernel.headers import (
    AF_INET, ETH_P_IP, ETH_P_IPV6, IPPROTO_ESP, IPPROTO_GRE, IPPROTO_ICMP, IPPROTO_ICMPV6, IPPROTO_IPIP, IPPROTO_IPV6,
    IPPROTO_TCP, IPPROTO_UDP, NEXTHDR_AUTH, NEXTHDR_FRAGMENT, RT_SCOPE_LINK, internet_checksum,
)
from flowsim.kernel.pkt import (
    ICMP_DEST_UNREACH, ICMP_EXC_TTL, ICMP_FRAG_NEEDED, ICMP_HOST_UNREACH, ICMP_NET_UNREACH, ICMP_PKT_FILTERED,
    ICMP_PORT_UNREACH, ICMP_PROT_UNREACH, ICMP_TIME_EXCEEDED, ICMPV6_ADDR_UNREACH, ICMPV6_ADM_PROHIBITED,
    ICMPV6_DEST_UNREACH, ICMPV6_HDR_INCOMP, ICMPV6_INFOMSG_MASK, ICMPV6_NOROUTE, ICMPV6_PARAMPROB, ICMPV6_PKT_TOOBIG,
    ICMPV6_PORT_UNREACH, ICMPV6_TIME_EXCEED, ICMPV6_UNK_NEXTHDR, IPV6_MIN_MTU, FragDiscard, Frag6Queue, FragQueue,
    PktInfo, addr_pair,
    build_ipv4, build_ipv6, icmp_error, ip6_fragment, ip_decrease_ttl, ip_fraglist_fits, ip_fraglist_fragment,
    ip_fragment, ipv4_header, ipv6_decrease_hoplimit, ipv6_header, ipv6frag_thdr_truncated, l4_checksum, new_skb,
    parse_ip, pseudo_sum, reparse_ip, tcp_header,
)
from flowsim.kernel.icmp_limit import (
    ICMP_RATEMASK, icmp_global_allow, icmp_global_consume, icmpv4_mask_allow, icmpv6_mask_allow, icmpv6_peer_timeout,
    inet_peer_xrlim_allow, ip_error_allow, jiffies, msecs_to_jiffies,
)
from flowsim.kernel.saddr import (
    fib_result_prefsrc, inet_select_addr, ip6_route_get_saddr, ip_route_connect_saddr, ipv6_dev_get_saddr,
)
from flowsim.kernel.skb import ZEROS, SkBuff
from flowsim.kernel.stack import l2 as stack_l2
from flowsim.kernel.stack import xfrm as stack_xfrm
from flowsim.kernel.stack.nf import NfCtx, nf_ct_attach, nf_hook, quoted_info

__all__ = ["ip_rcv", "ip_forward", "ip_local_out", "ip_local_deliver", "ip_output", "ip_tunnel_xmit",
           "ip6_tnl_xmit", "ipip_tunnel_xmit", "ip6_tnl_start_xmit", "icmp_send", "ip_defrag", "ipv6_defrag",
           "ip_expire_frags",
           "IPFRAG_TIME", "IPFRAG_MAX_DIST", "ip_frag_too_far", "ip_frag_reinit"]

IPFRAG_TIME = 30.0  # net.ipv4.ipfrag_time
IPFRAG_MAX_DIST = 64  # net.ipv4.ipfrag_max_dist (the fqdir's max_dist)
_OPPOSITE: dict[str | None, str] = {"original": "reply", "reply": "original"}
_TUNNEL_KINDS = {IPPROTO_IPIP: ETH_P_IP, IPPROTO_IPV6: ETH_P_IPV6}


def _pull_to(skb: SkBuff, off: int) -> None:
    """``pskb_may_pull`` + ``__skb_pull`` up to the absolute offset *off*."""
    skb.may_pull(off - skb.data)
    skb.data = off


# ----------------------------------------------------------------- receive

def ip_rcv(kernel, st, dev, skb: SkBuff, host: bool) -> None:
    """``ip_rcv`` / ``ipv6_rcv`` → PREROUTING → ``ip_rcv_finish``."""
    info = parse_ip(skb.buf, skb.data)
    if info is None or (info.version == 4) != (skb.protocol == ETH_P_IP):
        kernel.drop(skb, "ip-header-invalid", f"{st.name} {dev.name}")
        return
    end = skb.data + info.tot_len
    if len(skb.buf) > end:  # pskb_trim_rcsum: Ethernet padding goes
        del skb.buf[end:]
        skb.linear_end = min(skb.linear_end, end)
    if not host:
        kernel.drop(skb, "not-for-host", f"{st.name} {dev.name}")
        return
    skb.may_pull(info.hlen if info.version == 4 else 40)
    skb.network_header, skb.transport_header = skb.data, info.l4off
    skb.frag_max_size, skb.frag_pmtu = 0, False  # ip_rcv_core: memset(IPCB(skb), 0, ...)
    nfc = NfCtx()
    if info.frag and st.ct_active:  # nf_defrag_ipv4 / nf_defrag_ipv6 (nf_ct_frag6_gather), before conntrack
        skb, info = (ip_defrag if info.version == 4 else ipv6_defrag)(kernel, st, skb, info, conntrack=True)
        if skb is None:
            return
    if st.nft is not None or st.ct_active:  # NF_HOOK: nf_hook_slow only when the netns has hooks
        info, why = nf_hook(kernel, st, "prerouting", skb, info, nfc, in_dev=dev)
        if why is not None:
            if nfc.reject is not None:
                nft_reject(kernel, st, skb, info, nfc, "prerouting")
            kernel.drop(skb, why, f"{st.name} {dev.name} prerouting")
            return
    rt = st.route(info.dst)
    if rt.type == "local":
        ip_local_deliver(kernel, st, dev, skb, info, nfc)
    elif info.version == 4 and (rt.error or not st.forwarding(dev, 4)):
        ip_error(kernel, st, dev, skb, info, nfc, rt)
    elif rt.error:
        ip6_pkt_drop(kernel, st, dev, skb, info, nfc, rt)
    elif not st.forwarding(dev, info.version):  # ip6_forward: no error either
        kernel.drop(skb, "forwarding-disabled", f"{st.name} {dev.name}")
    else:
        ip_forward(kernel, st, dev, skb, info, nfc, rt)


#: the error an input route of each failing type gives (ip_error's switch on dst.error, net/ipv4/route.c;
#: ip6_pkt_discard / ip6_pkt_prohibit, net/ipv6/route.c): (IPv4 code, IPv6 code), None for no error at all
#: (blackhole: EINVAL, dst_discard)
_ROUTE_ERROR_CODES = {"none": (ICMP_NET_UNREACH, ICMPV6_NOROUTE), "unreachable": (ICMP_HOST_UNREACH, ICMPV6_NOROUTE),
                      "prohibit": (ICMP_PKT_FILTERED, ICMPV6_ADM_PROHIBITED), "blackhole": None}


def ip_error(kernel, st, dev, skb: SkBuff, info: PktInfo, nfc: NfCtx, rt) -> None:
    """``ip_error`` (net/ipv4/route.c), the input of a route that failed: silent when the device does not forward
    (``ip_route_input_slow`` made the route ``EHOSTUNREACH`` for it) or for a blackhole; else the offender's
    ``inet_peer`` pays ``ip_rt_error_cost`` before ``icmp_send``, whose own limit per destination then takes
    from the same bucket (:func:`flowsim.kernel.icmp_limit.ip_error_allow`)."""
    where = f"{st.name} {dev.name}"
    if not st.forwarding(dev, 4):
        kernel.drop(skb, "forwarding-disabled", where)
        return
    codes = _ROUTE_ERROR_CODES[rt.type]
    if codes is not None:
        if ip_error_allow(st.icmp_limits, info.src, jiffies(kernel.now)):
            icmp_send(kernel, st, skb, info, ICMP_DEST_UNREACH, codes[0], nfc=nfc)
        else:
            st.icmp_limits.limited_route += 1
    kernel.drop(skb, "no-route", where, dst=info.dst)


def ip6_pkt_drop(kernel, st, dev, skb: SkBuff, info: PktInfo, nfc: NfCtx, rt) -> None:
    """``ip6_pkt_discard`` / ``ip6_pkt_prohibit`` → ``ip6_pkt_drop`` (net/ipv6/route.c), the input of a failing
    route: ``icmpv6_send`` of no route or administratively prohibited (a blackhole's ``dst_discard`` sends
    nothing)."""
    codes = _ROUTE_ERROR_CODES[rt.type]
    if codes is not None:
        icmp_send(kernel, st, skb, info, ICMPV6_DEST_UNREACH, codes[1], nfc=nfc)
    kernel.drop(skb, "no-route", f"{st.name} {dev.name}", dst=info.dst)


def _unreachable(version: int, host_unreach: bool = False) -> tuple[int, int]:
    if version == 4:
        return ICMP_DEST_UNREACH, ICMP_HOST_UNREACH if host_unreach else ICMP_NET_UNREACH
    return ICMPV6_DEST_UNREACH, ICMPV6_ADDR_UNREACH if host_unreach else ICMPV6_NOROUTE


# ----------------------------------------------------------------- forward and output

def ip_forward(kernel, st, in_dev, skb: SkBuff, info: PktInfo, nfc: NfCtx, rt) -> None:
    """``ip_forward`` / ``ip6_forward``: TTL, MTU, TTL decrement, FORWARD, then output."""
    v4 = info.version == 4
    if st.ns.xfrm is not None:  # xfrm4_policy_check(FWD), then xfrm4_route_forward (flowsim.kernel.stack.xfrm)
        why = stack_xfrm.policy_check(st, skb, info)
        if why is None:
            rt, why = stack_xfrm.route_forward(kernel, st, skb, info, rt)
        if why is not None:
            kernel.drop(skb, why, f"{st.name} forward", src=info.src, dst=info.dst)
            return
    if info.ttl <= 1:
        icmp_send(kernel, st, skb, info, ICMP_TIME_EXCEEDED if v4 else ICMPV6_TIME_EXCEED, ICMP_EXC_TTL, nfc=nfc)
        kernel.drop(skb, "ttl-exceeded-forward", f"{st.name} forward", ttl=info.ttl)
        return
    out_dev = st.ns.devices[rt.dev]
    mtu = st.ns.fib.dst_mtu_maybe_forward(rt)
    if v4:
        if _ip_exceeds_mtu(skb, info, mtu):
            icmp_send(kernel, st, skb, info, ICMP_DEST_UNREACH, ICMP_FRAG_NEEDED, mtu, nfc=nfc)
            kernel.drop(skb, "frag-needed", f"{st.name} forward", len=info.tot_len, mtu=mtu)
            return
        ip_decrease_ttl(skb.buf, info.l3off)
    else:
        mtu = max(mtu, IPV6_MIN_MTU)
        if _ip6_pkt_too_big(skb, info, mtu):
            icmp_send(kernel, st, skb, info, ICMPV6_PKT_TOOBIG, 0, mtu, nfc=nfc)
            kernel.drop(skb, "pkt-too-big", f"{st.name} forward", len=info.tot_len, mtu=mtu)
            return
        ipv6_decrease_hoplimit(skb.buf, info.l3off)
    info.ttl -= 1
    if st.nft is not None or st.ct_active:
        info, why = nf_hook(kernel, st, "forward", skb, info, nfc, in_dev=in_dev, out_dev=out_dev, route=rt)
        if why is not None:
            if nfc.reject is not None:
                nft_reject(kernel, st, skb, info, nfc, "forward")
            kernel.drop(skb, why, f"{st.name} forward")
            return
    if type(rt) is stack_xfrm.XfrmRoute:  # dst_output of an xfrm bundle: xfrm4_output
        stack_xfrm.xfrm4_output(kernel, st, skb, info, nfc, rt, out_dev, in_dev)
        return
    ip_output(kernel, st, skb, info, nfc, rt, out_dev, in_dev)


def ip_output(kernel, st, skb: SkBuff, info: PktInfo, nfc: NfCtx, rt, out_dev, in_dev=None) -> None:
    """``ip_output``: POSTROUTING, then ``ip_finish_output`` (fragmentation) and ``ip_finish_output2``."""
    if st.nft is not None or st.ct_active:
        info, why = nf_hook(kernel, st, "postrouting", skb, info, nfc, in_dev=in_dev, out_dev=out_dev, route=rt)
        if why is not None:
            kernel.drop(skb, why, f"{st.name} postrouting")
            return
    mtu = st.route_mtu(rt)
    if st.pmtu_exceptions and skb.ignore_df and in_dev is None:
        # dst_mtu with the path MTU this host learned for the destination (the IPv4 nexthop exception, the IPv6
        # RTF_CACHE clone), which a UDP socket's datagram is cut to (ip_append_data's fragsize, ip6_fragment).
        # (TCP sizes its segments to it itself, tcp_sync_mss: the simulated endpoints read it when they send.)
        learned = st.pmtu_exception(info.dst, kernel.now)
        if learned is not None and learned < mtu:
            mtu = learned
    nexthop = rt.nexthop(info.dst)
    if skb.gso_size and info.tot_len > mtu and out_dev.link_type != "loopback":
        # ip_finish_output_gso: segments that fit go out whole; IPv6 (__ip6_finish_output) never fragments GSO
        if info.version == 6 or _gso_fits(skb, info, mtu):
            stack_l2.neigh_output(kernel, out_dev, skb, nexthop)
            return
        # the slow path of GSO: segment, then ip_fragment each segment (refused with DF)
        for seg in stack_l2.gso_segment(kernel, skb, f"{st.name} output") or ():
            _ip_finish_output(kernel, st, seg, reparse_ip(seg.buf, seg.data), mtu, out_dev, nexthop, nfc, in_dev)
        return
    _ip_finish_output(kernel, st, skb, info, mtu, out_dev, nexthop, nfc, in_dev)


def _ip6_pkt_too_big(skb: SkBuff, info: PktInfo, mtu: int) -> bool:
    """``ip6_pkt_too_big`` (net/ipv6/ip6_output.c): longer than *mtu*, unless the skb ignores DF (a packet
    ``nf_ct_frag6_gather`` reassembled, whose largest fragment, ``IP6CB(skb)->frag_max_size``, fits) or is GSO
    with segments that fit."""
    if info.tot_len <= mtu:
        return False
    if skb.frag_max_size > mtu:
        return True
    return not skb.ignore_df and not _gso_fits(skb, info, mtu)


def _ip_exceeds_mtu(skb: SkBuff, info: PktInfo, mtu: int) -> bool:
    """``ip_exceeds_mtu`` (net/ipv4/ip_forward.c): longer than *mtu* with DF, unless the skb ignores DF (a packet
    ``nf_defrag_ipv4`` reassembled) or is GSO with segments that fit; a reassembled one whose largest original
    fragment (``IPCB(skb)->frag_max_size``) was longer than *mtu* exceeds it all the same.
    """
    if info.tot_len <= mtu or not info.df:
        return False
    if skb.frag_max_size > mtu:
        return True
    return not skb.ignore_df and not _gso_fits(skb, info, mtu)


def _gso_fits(skb: SkBuff, info: PktInfo, mtu: int) -> bool:
    """``skb_is_gso(skb) && skb_gso_validate_network_len(skb, mtu)``: every segment will fit *mtu*.

    Headers the segmenter cannot walk count as not fitting: segmenting them
    later fails with its own reason (gso-segment-failed).
    """
    if not skb.gso_size:
        return False
    try:
        return skb_gso_validate_network_len(memoryview(skb.buf)[info.l3off:info.l3off + info.tot_len],
                                            skb.gso_size, mtu)
    except GsoError:
        return False


def _ip_finish_output(kernel, st, skb: SkBuff, info: PktInfo, mtu: int, out_dev, nexthop, nfc: NfCtx | None = None,
                      in_dev=None) -> None:
    """``ip_finish_output`` / ``__ip6_finish_output`` for a non-GSO skb: fragment (or refuse) what is longer than
    the route's MTU (``dst_mtu``).

    ``__ip_finish_output`` also sends every packet ``ip_defrag`` reassembled (``IPCB(skb)->frag_max_size``)
    through ``ip_fragment``, whatever its length: it leaves as fragments no longer than the largest one received.
    Refusing is ``ip_fragment`` with DF / ``ip6_fragment`` of an skb without ``ignore_df`` (or with DF and a
    ``frag_max_size`` above *mtu*): a forwarded packet (*in_dev*) gets the ICMP error there.  IPv6 reaches it
    when ``ip6_forward`` checked the device's MTU but the route has a smaller one that is not locked
    (:func:`dst_mtu_maybe_forward`); a local sender that ignores the path MTU only gets EMSGSIZE.
    """
    v4 = info.version == 4
    fms = skb.frag_max_size
    if (info.tot_len > mtu or (fms and (v4 or info.tot_len > fms))) and out_dev.link_type != "loopback":
        if v4 and (not info.df or (skb.ignore_df and not fms > mtu)):  # ip_fragment
            _fragment_and_send(kernel, st, skb, info, mtu, out_dev, nexthop)
            return
        # ip6_fragment: a local socket's skb that ignores DF (IPV6_PMTUDISC_WANT: ip6_sk_ignore_df) or one that
        # nf_ct_frag6_gather reassembled, unless its largest fragment is longer than mtu (fail_toobig)
        if not v4 and (skb.ignore_df or info.tot_len <= mtu) and not fms > mtu and \
                _fragment6_and_send(kernel, st, skb, info, mtu, out_dev, nexthop):
            return
        if in_dev is not None:
            icmp_send(kernel, st, skb, info, *((ICMP_DEST_UNREACH, ICMP_FRAG_NEEDED) if v4 else (ICMPV6_PKT_TOOBIG, 0)),
                      mtu, nfc=nfc)
        kernel.drop(skb, "frag-needed" if v4 else "pkt-too-big", f"{st.name} output", len=info.tot_len, mtu=mtu)
        return
    # the entry stays attached on the way to the device (a tunnel's icmp_ndo_send reads it), in this namespace
    # only: a veth into another one scrubs it (__dev_forward_skb → skb_scrub_packet → nf_reset_ct)
    skb.nfct = (st.name, nfc) if nfc is not None and nfc.ct is not None else None
    stack_l2.neigh_output(kernel, out_dev, skb, nexthop)


def _fragment_and_send(kernel, st, skb: SkBuff, info: PktInfo, mtu: int, out_dev, nexthop) -> None:
    """``ip_do_fragment``: each fragment is a piece of the same packet.

    A reassembled packet is cut to its ``frag_max_size`` when that is below *mtu*; its ``frag_list`` (the
    original fragments) goes out as it is when every piece fits (the fast path, :func:`ip_fraglist_fragment`),
    else the slow path copies pieces, with DF when the largest original fragment had it (``IPSKB_FRAG_PMTU``).
    """
    pkt = bytes(skb.buf[info.l3off:info.l3off + info.tot_len])
    if skb.frag_max_size and skb.frag_max_size < mtu:
        mtu = skb.frag_max_size
    if skb.frag_list and ip_fraglist_fits(pkt, skb.frag_list, mtu):
        frags = ip_fraglist_fragment(pkt, skb.frag_list)
    else:
        frags = ip_fragment(pkt, mtu, df=skb.frag_pmtu)
    kernel.add_pieces(skb, len(frags) - 1)
    kernel.trace(skb, f"{st.name} output", f"fragmented into {len(frags)}", mtu=mtu)
    for f in frags:
        stack_l2.neigh_output(kernel, out_dev, new_skb(f, skb.tag, skb.mark), nexthop)


def _fragment6_and_send(kernel, st, skb: SkBuff, info: PktInfo, mtu: int, out_dev, nexthop) -> bool:
    """``ip6_fragment``: each fragment is a piece of the same packet; False when no 8 bytes of data fit
    (``fail_toobig``: the caller refuses the packet).

    A reassembled packet leaves as fragments no longer than the largest one received (``frag_max_size``, at least
    IPV6_MIN_MTU).  The fragment header's identification is ``ipv6_select_ident``'s, here a per-namespace counter
    (:meth:`NetnsState.next_ident6`: runs stay reproducible)."""
    if skb.frag_max_size:
        mtu = max(skb.frag_max_size, IPV6_MIN_MTU)
    frags = ip6_fragment(bytes(skb.buf[info.l3off:info.l3off + info.tot_len]), mtu, st.next_ident6())
    if frags is None:
        return False
    kernel.add_pieces(skb, len(frags) - 1)
    kernel.trace(skb, f"{st.name} output", f"fragmented into {len(frags)}", mtu=mtu)
    for f in frags:
        stack_l2.neigh_output(kernel, out_dev, new_skb(f, skb.tag, skb.mark), nexthop)
    return True


def ip_local_out(kernel, st, skb: SkBuff, route=None, nfc: NfCtx | None = None) -> None:
    """``ip_local_out``: route (unless given, as ``iptunnel_xmit`` does), OUTPUT, then ``ip_output``.

    *nfc* is a conntrack entry already attached to the skb (an ICMP error's, :func:`nf_ct_attach`):
    ``nf_conntrack_in`` then leaves it as it is.
    """
    info = parse_ip(skb.buf, skb.data)
    if info is None:
        kernel.drop(skb, "ip-header-invalid", f"{st.name} output")
        return
    rt = route or st.route(info.dst)
    if rt.error:
        kernel.drop(skb, "no-route", f"{st.name} output", dst=info.dst)
        return
    out_dev = st.ns.devices["lo" if rt.type == "local" else rt.dev]
    nfc = nfc or NfCtx()
    dst = info.dst
    if st.nft is not None or st.ct_active:
        info, why = nf_hook(kernel, st, "output", skb, info, nfc, out_dev=out_dev, route=rt)
        if why is not None:
            if nfc.reject is not None:
                nft_reject(kernel, st, skb, info, nfc, "output")
            kernel.drop(skb, why, f"{st.name} output")
            return
    if info.dst is not dst and info.dst != dst:  # ip_route_me_harder after DNAT in OUTPUT
        rt = st.route(info.dst)
        if rt.error:
            kernel.drop(skb, "no-route", f"{st.name} output", dst=info.dst)
            return
        out_dev = st.ns.devices["lo" if rt.type == "local" else rt.dev]
    ip_output(kernel, st, skb, info, nfc, rt, out_dev)


# ----------------------------------------------------------------- local delivery

def ip_local_deliver(kernel, st, in_dev, skb: SkBuff, info: PktInfo, nfc: NfCtx) -> None:
    """``ip_local_deliver``: reassembly, INPUT, then the protocol handler."""
    where = f"{st.name} {in_dev.name} input"
    if info.version == 4 and info.frag:
        skb, info = ip_defrag(kernel, st, skb, info)
        if skb is None:
            return
    if st.nft is not None or st.ct_active:
        info, why = nf_hook(kernel, st, "input", skb, info, nfc, in_dev=in_dev)
        if why is not None:
            if nfc.reject is not None:
                nft_reject(kernel, st, skb, info, nfc, "input")
            kernel.drop(skb, why, where)
            return
    if info.version == 6 and info.frag:  # ip6_input_finish → the fragment header's handler, ipv6_frag_rcv
        skb, info = ipv6_defrag(kernel, st, skb, info)
        if skb is None:
            return
    proto = info.l4proto
    if proto in _TUNNEL_KINDS:
        ip_tunnel_rcv(kernel, st, skb, info, nfc)
    elif proto == IPPROTO_ESP and info.version == 4:
        stack_xfrm.xfrm4_rcv(kernel, st, in_dev, skb, info)
    elif proto in (IPPROTO_TCP, IPPROTO_UDP):
        _socket_rcv(kernel, st, skb, info, where, nfc)
    elif proto in (IPPROTO_ICMP, IPPROTO_ICMPV6):
        _icmp_rcv(kernel, st, skb, info, where)
    elif proto == IPPROTO_GRE and raw_local_deliver(kernel, st, skb, info, where):
        pass
    else:  # no handler (flowsim models no GRE device: ip_gre is not loaded), no raw socket
        # ip_protocol_deliver_rcu: Protocol Unreachable; ip6_protocol_deliver_rcu: Parameter Problem pointing at the
        # next-header field that named the protocol (IP6CB(skb)->nhoff)
        if info.version == 4:
            icmp_send(kernel, st, skb, info, ICMP_DEST_UNREACH, ICMP_PROT_UNREACH, local=True, nfc=nfc)
        else:
            icmp_send(kernel, st, skb, info, ICMPV6_PARAMPROB, ICMPV6_UNK_NEXTHDR, _nexthdr_offset(skb.buf, info),
                      local=True, nfc=nfc)
        kernel.drop(skb, "unknown-protocol", where, proto=proto)


def _nexthdr_offset(buf, info: PktInfo) -> int:
    """``IP6CB(skb)->nhoff`` at the protocol handler: the offset, from the IPv6 header, of the next-header byte
    that named the packet's protocol (6 in the fixed header, else the first byte of the last extension
    header)."""
    nh, at, last = buf[info.l3off + 6], info.l3off + 40, 6
    while at < info.l4off:  # the extension headers parse_ip walked (ipv6_skip_exthdr's lengths)
        last = at - info.l3off
        size = 8 if nh == NEXTHDR_FRAGMENT else (buf[at + 1] + 2) << 2 if nh == NEXTHDR_AUTH else (buf[at + 1] + 1) << 3
        nh, at = buf[at], at + size
    return last


def _l4_ok(skb: SkBuff, info: PktInfo) -> bool:
    """The receiving host's checksum verification (``skb_checksum_init`` in ``tcp_v4_rcv`` / ``udp_rcv``).

    Every segment is summed.  Zero bytes add nothing to a one's-complement sum, wherever they start (2**16 = 1
    modulo 0xFFFF, see :func:`~flowsim.kernel.headers.internet_checksum`), so when the payload after the L4
    header is zeros -- what flowsim's hosts send -- one compare with a zero buffer replaces summing it: the
    header's words and the pseudo-header (which still counts the whole length) give the same sum.
    """
    buf = skb.buf
    at, end = info.l4off, info.l3off + info.tot_len
    proto = info.l4proto
    if proto == IPPROTO_UDP:
        if info.version == 4 and at + 8 <= end and buf[at + 6] == 0 and buf[at + 7] == 0:
            return True  # no checksum
        body = at + 8
    else:  # TCP: the data offset (a bad one only moves where the zeros are looked for)
        body = at + ((buf[at + 12] >> 4) << 2) if at + 13 <= end else end
    if not (at < body < end and ZEROS.startswith(memoryview(buf)[body:end])):
        body = end
    return internet_checksum(buf[at:body], pseudo_sum(info.src, info.dst, proto, end - at)) == 0


def _socket_rcv(kernel, st, skb: SkBuff, info: PktInfo, where: str, nfc: NfCtx | None = None) -> None:
    """``tcp_v4_rcv`` / ``udp_rcv``: the endpoint bound to the 4-tuple, else a listener (``kernel.accept``); with
    none, :func:`no_socket`."""
    if not _l4_ok(skb, info):
        kernel.drop(skb, "bad-checksum", where, proto=info.l4proto)
        return
    ep = st.sockets.get((info.l4proto, info.dst, info.dport, info.src, info.sport))
    if ep is None and kernel.accept is not None:
        ep = kernel.accept(kernel, st, skb, info)
    if ep is None:
        no_socket(kernel, st, skb, info, nfc)
        kernel.drop(skb, "no-socket", where, sport=info.sport, dport=info.dport)
        return
    kernel.deliver(skb, where)
    ep.rx(kernel, st, info, skb)


def no_socket(kernel, st, skb: SkBuff, info: PktInfo, nfc: NfCtx | None) -> None:
    """What a host answers a segment or datagram no socket takes (its checksum held): ``__udp4_lib_rcv`` /
    ``__udp6_lib_rcv`` send Port Unreachable (``icmp_send``, rate-limited, the datagram's entry attached);
    ``tcp_v4_rcv`` / ``tcp_v6_rcv`` (``no_tcp_socket``) a RST (``tcp_v4_send_reset`` / ``tcp_v6_send_reset``:
    the ECN bits of the segment's TOS / traffic class cleared, through LOCAL_OUT as a packet of its own, which
    conntrack finds as the connection's reply).  A broadcast or multicast destination gets neither."""
    if info.dst.is_multicast or (info.version == 4 and int(info.dst) == _LIMITED_BROADCAST):
        return
    if info.l4proto == IPPROTO_UDP:
        icmp_send(kernel, st, skb, info, *_PORT_UNREACH[info.version], local=True, nfc=nfc)
        return
    pkt = _reset_packet(skb.buf, info, info.dscp)
    if pkt is not None:
        _push_reset(kernel, st, skb, info, pkt, "tcp", None)


_PORT_UNREACH = {4: (ICMP_DEST_UNREACH, ICMP_PORT_UNREACH), 6: (ICMPV6_DEST_UNREACH, ICMPV6_PORT_UNREACH)}


def raw_local_deliver(kernel, st, skb: SkBuff, info: PktInfo, where: str) -> bool:
    """``raw_local_deliver`` / ``raw6_local_deliver`` for a GRE packet: the raw socket of protocol 47 a GRE
    traffic table's endpoint holds (bound to the two addresses, ``raw_v4_match`` / ``raw_v6_match``), else one
    the table's server opens now (``kernel.accept``); True when a socket took it.  Without one the caller goes
    on to the protocol handler (``ip_protocol_deliver_rcu``), as the kernel does."""
    ep = st.sockets.get((IPPROTO_GRE, info.dst, 0, info.src, 0))
    if ep is None and kernel.accept is not None:
        ep = kernel.accept(kernel, st, skb, info)
    if ep is None:
        return False
    kernel.deliver(skb, where)
    ep.rx(kernel, st, info, skb)
    return True


def _icmp_rcv(kernel, st, skb: SkBuff, info: PktInfo, where: str) -> None:
    """``icmp_rcv`` / ``icmpv6_rcv``: errors go to the socket of the packet they quote."""
    seg = skb.buf[info.l4off:info.l3off + info.tot_len]
    ok = (internet_checksum(seg) == 0 if info.version == 4
          else l4_checksum(info.src, info.dst, IPPROTO_ICMPV6, seg) == 0)
    if not ok:
        kernel.drop(skb, "bad-checksum", where, proto=info.l4proto)
        return
    kernel.deliver(skb, where)
    if info.is_icmp_error:
        inner = quoted_info(skb.buf, info)
        if inner is not None:
            ep = st.sockets.get((inner.l4proto, inner.src, inner.sport, inner.dst, inner.dport))
            if ep is not None:
                ep.icmp_error(kernel, st, info, inner, skb)


# ----------------------------------------------------------------- tunnels

def _tunnel_lookup(st, info: PktInfo):
    """``ip_tunnel_lookup`` / ``ip6_tnl_lookup``: exact local+remote first, then one wildcard side (the answer
    kept per outer address pair until a run event changes the namespace's devices)."""
    key = ("tunnel", info.version, info.src, info.dst)
    try:
        return st.conf_cache[key]
    except KeyError:
        tun = st.conf_cache[key] = _tunnel_find(st, info)
        return tun


def _tunnel_find(st, info: PktInfo):
    kind = IpipDevice if info.version == 4 else Ip6tnlDevice
    best, rank = None, 9
    for dev in st.ns.devices.values():
        if type(dev) is not kind:
            continue
        remote, local = dev.remote, dev.local
        # "is None or ==": `in (None, addr)` would compare the address with None first (an exception inside)
        if (remote is not None and remote != info.src) or (local is not None and local != info.dst):
            continue
        r = (remote is None) * 2 + (local is None)
        if r < rank:
            best, rank = dev, r
    return best


#: ip6tnl mode -> the inner protocols it carries (``ip6_tnl_rcv_ctl`` / ``ip6_tnl_start_xmit``); "any": both
_IP6TNL_MODES = {"ip6ip6": (IPPROTO_IPV6,), "ipip6": (IPPROTO_IPIP,)}
_IP6TNL_ANY = (IPPROTO_IPIP, IPPROTO_IPV6)


def _mode_accepts(tun, inner_proto: int) -> bool:
    if isinstance(tun, IpipDevice):
        return inner_proto == IPPROTO_IPIP
    return inner_proto in _IP6TNL_MODES.get(tun.mode, _IP6TNL_ANY)


def ip_tunnel_rcv(kernel, st, skb: SkBuff, info: PktInfo, nfc: NfCtx | None = None) -> None:
    """``ipip_rcv`` / ``ip6_tnl_rcv``: strip the outer header, receive the inner packet on the tunnel device."""
    where = f"{st.name} tunnel rx"
    tun = _tunnel_lookup(st, info)
    if tun is None or not _mode_accepts(tun, info.l4proto):
        if info.version == 4:
            icmp_send(kernel, st, skb, info, ICMP_DEST_UNREACH, ICMP_PROT_UNREACH, local=True, nfc=nfc)
        kernel.drop(skb, "no-tunnel", where, src=info.src, dst=info.dst, proto=info.l4proto)
        return
    _pull_to(skb, info.l4off)
    skb.gso_type &= ~(SKB_GSO_IPXIP4 | SKB_GSO_IPXIP6)  # iptunnel_pull_offloads
    skb.protocol = _TUNNEL_KINDS[info.l4proto]
    skb.mac_header = skb.network_header = skb.transport_header = skb.data
    skb.vlan_hwaccel_clear_tag()
    skb.ignore_df, skb.frag_list = False, ()  # skb_scrub_packet; ip_rcv clears the IPCB
    if kernel.tracing:  # per packet: no text or keyword arguments built for a trace nobody records
        kernel.trace(skb, f"{st.name} {tun.name}", "decapsulated", outer_src=info.src, outer_dst=info.dst)
    stack_l2.netif_receive_skb(kernel, tun, skb)


def _tunnel_route(kernel, st, tun: IpipDevice | Ip6tnlDevice, skb: SkBuff,
                  where: str) -> tuple[Route, IPv4Address | IPv6Address] | None:
    """The underlay route to the tunnel's remote end and that end, or None (packet dropped)."""
    remote = tun.remote
    if remote is None:
        kernel.drop(skb, "no-route", where, reason="tunnel without a remote address")
        return None
    rt = st.route(remote)
    if rt.error or rt.type == "local" or rt.dev == tun.name:
        kernel.drop(skb, "no-route", where, dst=remote)
        return None
    return rt, remote


def _tunnel_xmit_start(kernel, st, tun: IpipDevice | Ip6tnlDevice, skb: SkBuff, where: str):
    """What both tunnel xmits start with: the inner header, then the underlay route (``ip_route_output_tunnel``
    / ``ip6_route_output``).  (info, route, remote), or None when the packet was dropped."""
    info = parse_ip(skb.buf, skb.data)
    if info is None:
        kernel.drop(skb, "ip-header-invalid", where)
        return None
    found = _tunnel_route(kernel, st, tun, skb, where)
    if found is None:
        return None
    return (info, *found)


def _flowlabel(info: PktInfo) -> int:
    """``ip6_make_flowlabel`` with automatic labels: a hash of the inner flow (never 0)."""
    return _flow_hash(info.src, info.dst, info.l4proto, info.sport, info.dport)


@functools.lru_cache(maxsize=65536)
def _flow_hash(src, dst, l4proto: int, sport: int | None, dport: int | None) -> int:
    """The label of one inner flow (a pure function of it: computed once per flow, not per packet)."""
    key = f"{src}|{dst}|{l4proto}|{sport}|{dport}".encode()
    return (zlib.crc32(key) & 0xFFFFF) or 1


def ip_tunnel_xmit(kernel, st, tun: IpipDevice, skb: SkBuff) -> None:
    """``ipip_tunnel_xmit`` → ``ip_tunnel_xmit``: outer IPv4 header, then ``ip_local_out``."""
    where = f"{st.name} {tun.name} xmit"
    found = _tunnel_xmit_start(kernel, st, tun, skb, where)
    if found is None:
        return
    info, rt, remote = found
    if info.version != 4:
        kernel.drop(skb, "tunnel-proto-mismatch", where, inner=f"IPv{info.version}")
        return
    mtu = st.route_mtu(rt) - 20
    if info.df and info.tot_len > mtu and not skb.gso_size:  # tnl_update_pmtu (GSO skbs are not checked)
        icmp_ndo_send(kernel, st, skb, info, ICMP_DEST_UNREACH, ICMP_FRAG_NEEDED, mtu)
        kernel.drop(skb, "frag-needed", where, len=info.tot_len, mtu=mtu)
        return
    src = tun.local or fib_result_prefsrc(st.ns, rt)  # ip_tunnel_xmit: fl4.saddr 0, the route's choice
    inner = bytes(skb.buf[info.l3off:info.l3off + info.tot_len])
    tos = skb.buf[info.l3off + 1] & 0x03  # ECN of the inner header (INET_ECN_encapsulate)
    outer = build_ipv4(src, remote, IPPROTO_IPIP, inner, ttl=tun.ttl or info.ttl, tos=tos,
                       ident=st.next_ident(), df=True)
    if kernel.tracing:  # per packet: no text or keyword arguments built for a trace nobody records
        kernel.trace(skb, where, "encapsulated", src=src, dst=remote)
    # iptunnel_handle_offloads(skb, SKB_GSO_IPXIP4): a GSO skb stays one, segmented with its outer header
    ip_local_out(kernel, st, new_skb(outer, skb.tag, skb.mark, skb.gso_size,
                                     skb.gso_type | SKB_GSO_IPXIP4 if skb.gso_size else 0), route=rt)


def ipip_tunnel_xmit(kernel, dev: IpipDevice, skb: SkBuff) -> None:
    """``ipip_tunnel_xmit``: the ipip device's ``ndo_start_xmit``."""
    ip_tunnel_xmit(kernel, kernel.netns[dev.netns], dev, skb)


def ip6_tnl_start_xmit(kernel, dev: Ip6tnlDevice, skb: SkBuff) -> None:
    """``ip6_tnl_start_xmit``: the ip6tnl device's ``ndo_start_xmit``."""
    ip6_tnl_xmit(kernel, kernel.netns[dev.netns], dev, skb)


def _ip6_tnl_xmit_ctl(st, tun: Ip6tnlDevice) -> bool:
    """``ip6_tnl_xmit_ctl``'s local-address half (net/ipv6/ip6_tunnel.c): with ``local any``, ``ip6_tnl_get_cap``
    gives only ``IP6_TNL_F_CAP_PER_PACKET`` and the packet's source is that same any address, never
    ``IP6_TNL_F_CAP_XMIT``; otherwise the address must be configured here ("Local address not yet
    configured!", ``ipv6_chk_addr_and_flags``): on the tunnel's ``dev`` when it is link-local or loopback, on
    any device when it is wider.  (Its other half, a remote end of this host, is the no-route drop before.)"""
    local = tun.local
    if local is None:
        return False
    if tun.lower is not None and (local.is_link_local or local.is_loopback):
        dev = st.ns.devices.get(tun.lower)
        return dev is not None and any(a.ip == local for a in dev.addrs)
    return st.ns.owner_of(local) is not None


def ip6_tnl_xmit(kernel, st, tun: Ip6tnlDevice, skb: SkBuff) -> None:
    """``ip6_tnl_start_xmit`` → ``ip6_tnl_xmit``: encap-limit option, outer IPv6 header, ``ip6tunnel_xmit``."""
    where = f"{st.name} {tun.name} xmit"
    found = _tunnel_xmit_start(kernel, st, tun, skb, where)
    if found is None:
        return
    info, rt, remote = found
    proto = IPPROTO_IPV6 if info.version == 6 else IPPROTO_IPIP
    if not _mode_accepts(tun, proto):
        kernel.drop(skb, "tunnel-proto-mismatch", where, inner=f"IPv{info.version}", mode=tun.mode)
        return
    if not _ip6_tnl_xmit_ctl(st, tun):
        # tx_err_link_failure counts a carrier error and dst_link_failure answers the inner source
        # (ip6_link_failure: address unreachable; ipv4_link_failure: host unreachable)
        icmp_send(kernel, st, skb, info, *_unreachable(info.version, host_unreach=True))
        kernel.drop(skb, "tunnel-no-local", where, local=tun.local)
        return
    limit = tun.encaplimit
    mtu = st.route_mtu(rt) - 40 - (8 if limit is not None else 0)
    if skb.gso_size:
        pass  # ip6_tnl_xmit checks the MTU only for non-GSO skbs
    elif info.version == 6:
        mtu = max(mtu, IPV6_MIN_MTU)
        if info.tot_len > mtu:
            icmp_ndo_send(kernel, st, skb, info, ICMPV6_PKT_TOOBIG, 0, mtu)
            kernel.drop(skb, "pkt-too-big", where, len=info.tot_len, mtu=mtu)
            return
    elif info.df and info.tot_len > mtu:
        icmp_ndo_send(kernel, st, skb, info, ICMP_DEST_UNREACH, ICMP_FRAG_NEEDED, mtu)
        kernel.drop(skb, "frag-needed", where, len=info.tot_len, mtu=mtu)
        return
    payload = bytes(skb.buf[info.l3off:info.l3off + info.tot_len])
    nexthdr = proto
    if limit is not None:  # ipv6_push_frag_opts: destination options with IPV6_TLV_TNL_ENCAP_LIMIT, PadN
        payload = bytes((proto, 0, 4, 1, limit, 1, 1, 0)) + payload
        nexthdr = 60
    src = tun.local
    ecn = _ecn(skb, info)
    outer = build_ipv6(src, remote, nexthdr, payload, hlim=tun.ttl or info.ttl, tclass=ecn,
                       flowlabel=_flowlabel(info))
    if kernel.tracing:  # per packet: no text or keyword arguments built for a trace nobody records
        kernel.trace(skb, where, "encapsulated", src=src, dst=remote, encaplimit=limit)
    ip_local_out(kernel, st, new_skb(outer, skb.tag, skb.mark, skb.gso_size,
                                     skb.gso_type | SKB_GSO_IPXIP6 if skb.gso_size else 0), route=rt)


def _ecn(skb: SkBuff, info: PktInfo) -> int:
    b, o = skb.buf, info.l3off
    return b[o + 1] & 0x03 if info.version == 4 else (b[o + 1] >> 4) & 0x03


# ----------------------------------------------------------------- ICMP errors

def icmp_send(kernel, st, skb: SkBuff, info: PktInfo, icmp_type: int, code: int, info32: int = 0,
              local: bool = False, nfc: NfCtx | None = None) -> None:
    """``icmp_send`` / ``icmp6_send``: an error about *skb* back to its source, sent from this namespace.

    Never about an ICMP error, nor about an IPv4 fragment but the first (:func:`_icmp_ineligible`: IPv6
    answers later fragments too).  The source address
    is the destination for a packet addressed to us (*local*), else the
    address of the device the route back leaves through.  The error is a
    new packet (injected by the stack) that starts at ``ip_local_out``
    right after the current one is done, with the offender's conntrack
    entry *nfc* attached as ``icmp_glue_bits`` / ``icmpv6_getfrag`` do
    (:func:`~flowsim.kernel.stack.nf.nf_ct_attach`): the error is RELATED to
    it whatever NAT the quoted packet has been through so far, and
    ``nf_nat_icmp_reply_translation`` turns the quote back into what the
    sender sent.  The quote is the packet as it is now, half NATed when a
    DNAT ran in PREROUTING and the SNAT waits for POSTROUTING, so looking it
    up would miss.
    """
    if _icmp_ineligible(skb.buf, info) or info.src.is_multicast or info.src.is_unspecified:
        return
    limited = _icmp_global_allow(kernel, st, skb, info.version, icmp_type, code)
    if limited is None:
        return
    back = st.route(info.src)
    if back.error:
        if limited and info.version == 6:
            # icmp6_send asks icmpv6_xrlim_allow before its own route lookup, and icmpv6_xrlim_allow's lookup
            # failing (dst->error) counts as a refusal per destination
            st.icmp_limits.limited_host6 += 1
        return
    src = info.dst if local else _icmp_saddr(st, skb, info, back)
    if src is None:
        return
    if limited and not _icmp_xrlim_allow(kernel, st, skb, info, back, icmp_type):
        return
    offending = bytes(skb.buf[info.l3off:info.l3off + info.tot_len])
    pkt = icmp_error(offending, info, src, icmp_type, code, info32, ident=st.next_ident())
    tag = skb.tag
    new = kernel.new_tag(tag.traffic if tag is not None else None,
                         _OPPOSITE.get(tag.direction) if tag is not None else None, "icmp-error")
    kernel.trace(skb, f"{st.name} icmp", f"error type {icmp_type} code {code} to {info.src}", info=info32)
    kernel.schedule(kernel.now, _icmp_push_reply, kernel, st, new_skb(pkt, new, 0), nf_ct_attach(nfc))


def _icmp_global_allow(kernel, st, skb: SkBuff, version: int, icmp_type: int, code: int) -> bool | None:
    """``icmpv4_global_allow`` / ``icmpv6_global_allow`` (flowsim.kernel.icmp_limit): None when the host-wide
    bucket refuses the error, else whether the per-destination limit applies to it (``apply_ratelimit``).
    A packet that came in on a loopback device is not asked about (``skb_in->dev->flags & IFF_LOOPBACK``)."""
    in_dev = st.ns.by_index.get(skb.iif) if skb.iif else None
    if in_dev is not None and in_dev.link_type == "loopback":
        return False
    if (icmpv4_mask_allow(icmp_type, code, st.ns.sysctl_int("net.ipv4.icmp_ratemask", ICMP_RATEMASK))
            if version == 4 else icmpv6_mask_allow(icmp_type)):
        return False
    per_sec, burst = (int(n) for n in kernel.profile.icmp_msgs_default.split("/"))
    limits = st.icmp_limits
    if icmp_global_allow(limits, jiffies(kernel.now), st.ns.sysctl_int("net.ipv4.icmp_msgs_per_sec", per_sec),
                         st.ns.sysctl_int("net.ipv4.icmp_msgs_burst", burst)):
        return True
    limits.limited_global += 1  # ICMP_MIB_RATELIMITGLOBAL
    if kernel.tracing:
        kernel.trace(skb, f"{st.name} icmp", f"error type {icmp_type} code {code} not sent: host-wide rate limit "
                     "(icmp_global_allow)")
    return None


def _icmp_xrlim_allow(kernel, st, skb: SkBuff, info: PktInfo, back, icmp_type: int) -> bool:
    """``icmpv4_xrlim_allow`` / ``icmpv6_xrlim_allow`` on the route back to the offender's source *back*: the
    destination's ``inet_peer`` bucket, not through a loopback device; an allowed error pays the host-wide
    credit (``icmp_global_consume``)."""
    limits = st.icmp_limits
    if back.type == "local" or back.dev == "lo":
        icmp_global_consume(limits)
        return True
    if info.version == 4:
        timeout = msecs_to_jiffies(st.ns.sysctl_int("net.ipv4.icmp_ratelimit", 1000))
    else:
        prefix = kernel.profile.icmpv6_ratelimit == "prefix"
        # rt6i_dst.plen: the route's prefix, or 128 for the RTF_CACHE clone a learned path MTU made
        plen = (128 if st.pmtu_exception(info.src, kernel.now) is not None else back.prefix.prefixlen) \
            if prefix else None
        timeout = icmpv6_peer_timeout(st.ns.sysctl_int("net.ipv6.icmp.ratelimit", 1000 if prefix else 100), plen)
    if timeout and not inet_peer_xrlim_allow(limits, info.src, jiffies(kernel.now), timeout):
        if info.version == 4:
            limits.limited_host += 1  # ICMP_MIB_RATELIMITHOST
        else:
            limits.limited_host6 += 1  # ICMP6_MIB_RATELIMITHOST
        if kernel.tracing:
            kernel.trace(skb, f"{st.name} icmp", f"error type {icmp_type} to {info.src} not sent: rate limit per "
                         "destination (inet_peer_xrlim_allow)")
        return False
    icmp_global_consume(limits)
    return True


def _icmp_saddr(st, skb: SkBuff, info: PktInfo, back) -> IPv4Address | IPv6Address | None:
    """The source of an error about a packet not addressed to us.  ``icmp_send`` (net/ipv4/icmp.c): with
    ``net.ipv4.icmp_errors_use_inbound_ifaddr``, ``inet_select_addr`` on the inbound device; otherwise (or
    when it has none) the source the route back gives (``icmp_route_lookup``: ``fib_result_prefsrc``).
    ``icmp6_send`` (net/ipv6/icmp.c): unless the route back has a ``src`` (``icmpv6_rt_has_prefsrc``),
    ``ipv6_dev_get_saddr`` on the inbound device, else the route's choice."""
    ns = st.ns
    in_dev = ns.by_index.get(skb.iif) if skb.iif else None  # rt_is_input_route / parm->iif
    if info.version == 4:
        if in_dev is not None and st.sysctl_on("net.ipv4.icmp_errors_use_inbound_ifaddr"):
            src = inet_select_addr(ns, in_dev, info.src, RT_SCOPE_LINK)
            if src is not None:
                return src
        return ip_route_connect_saddr(ns, back, info.src)
    if in_dev is not None and back.src is None:
        src = ipv6_dev_get_saddr(ns, in_dev, info.src)
        if src is not None:
            return src
    return ip6_route_get_saddr(ns, back, info.src)


def _icmp_ineligible(buf, info: PktInfo) -> bool:
    """No error is sent about *info*: ``icmp_send`` answers neither an ICMP error nor an IPv4 fragment but the
    first; IPv6's ``is_ineligible`` (net/ipv6/icmp.c) answers every fragment except those of an ICMPv6 datagram
    whose first byte after the headers (read as the type, even in a later fragment) is below 128, an error's,
    or missing from a first fragment."""
    if info.version == 4:
        return info.is_icmp_error or not info.first
    if info.l4proto != IPPROTO_ICMPV6:
        return False
    at = info.l4off
    if at >= info.l3off + info.tot_len:  # skb_header_pointer fails: "return false" only for a later fragment
        return info.first
    return not buf[at] & ICMPV6_INFOMSG_MASK


def icmp_ndo_send(kernel, st, skb: SkBuff, info: PktInfo, icmp_type: int, code: int, info32: int = 0) -> None:
    """``icmp_ndo_send`` / ``icmpv6_ndo_send`` (net/ipv4/icmp.c, net/ipv6/ip6_icmp.c): an error a device's
    ``ndo_start_xmit`` sends (the tunnels' ``tnl_update_pmtu``, ``ip6_tnl_xmit``), after POSTROUTING.  The skb
    may carry a NATed source: with an entry attached whose status has ``IPS_NAT_MASK`` bits, the quoted
    packet's source is put back to the entry's tuple source for its direction (``ct->tuplehash[dir]``, the IP
    header checksum left as it is, as the kernel does) for the error, so that it is routed to the real sender;
    the entry goes with it (``nf_ct_attach``) and ``nf_nat_icmp_reply_translation`` does the rest."""
    owner, attached = skb.nfct or (None, None)
    nfc: NfCtx | None = attached if owner == st.name else None  # another namespace's entry was scrubbed
    if nfc is None or nfc.ct is None or nfc.dir is None or not nfc.ct.status & IPS_NAT_MASK:
        icmp_send(kernel, st, skb, info, icmp_type, code, info32, nfc=nfc)
        return
    ct = nfc.ct
    at = info.l3off + (12 if info.version == 4 else 8)
    size = 4 if info.version == 4 else 16
    saved = bytes(skb.buf[at:at + size])
    skb.buf[at:at + size] = ct.tuplehash[nfc.dir].src.packed
    try:  # the header checksum is not fixed: read it as the error will quote it
        icmp_send(kernel, st, skb, attrs.evolve(info, src=ct.tuplehash[nfc.dir].src), icmp_type, code, info32,
                  nfc=nfc)
    finally:
        skb.buf[at:at + size] = saved


def _icmp_push_reply(kernel, st, skb: SkBuff, nfc: NfCtx) -> None:
    """``icmp_push_reply`` → ``ip_push_pending_frames`` → ``ip_local_out`` of the error with its entry attached."""
    ip_local_out(kernel, st, skb, nfc=nfc)


# ----------------------------------------------------------------- nft reject

#: nft_reject_icmp_code / nft_reject_icmpv6_code (net/netfilter/nft_reject.c): an NFT_REJECT_ICMPX_* code (no
#: route, port, host unreachable, administratively prohibited) as each family's code
_LIMITED_BROADCAST = 0xFFFFFFFF
_ICMPX_CODES = {4: (ICMP_NET_UNREACH, ICMP_PORT_UNREACH, ICMP_HOST_UNREACH, ICMP_PKT_FILTERED),
                6: (ICMPV6_NOROUTE, ICMPV6_PORT_UNREACH, ICMPV6_ADDR_UNREACH, ICMPV6_ADM_PROHIBITED)}


def nft_reject(kernel, st, skb: SkBuff, info: PktInfo, nfc: NfCtx, hook: str) -> None:
    """The reply of the nft ``reject`` that dropped *skb* at *hook* (``nft_reject_inet_eval``,
    ``nft_reject_ipv4_eval``, ``nft_reject_ipv6_eval``; the statement is in ``nfc.reject``): an ICMP error
    (:func:`nf_send_unreach`) or a TCP reset (:func:`nf_send_reset`).  The caller drops the packet."""
    rej, nfc.reject = nfc.reject, None
    if rej is None:
        return
    if rej.kind == "tcp-reset":
        nf_send_reset(kernel, st, skb, info, nfc)
        return
    code = rej.code if rej.kind == "icmp" else _ICMPX_CODES[info.version][rej.code]
    nf_send_unreach(kernel, st, skb, info, nfc, hook, code)


def nf_send_unreach(kernel, st, skb: SkBuff, info: PktInfo, nfc: NfCtx, hook: str, code: int) -> None:
    """``nf_send_unreach`` (net/ipv4/netfilter/nf_reject_ipv4.c) / ``nf_send_unreach6``: nothing for a later
    fragment or a TCP or UDP segment whose checksum fails (``nf_ip_checksum``, ``reject6_csum_ok``); else
    ``icmp_send`` with its eligibility and rate limits.  The error's source is the packet's destination in INPUT
    (and in OUTPUT to a local address: ``RTCF_LOCAL``), elsewhere the route's choice."""
    if not info.first:
        return
    if info.l4proto in (IPPROTO_TCP, IPPROTO_UDP) and not _l4_ok(skb, info):
        return
    local = hook == "input" or (hook == "output" and st.route(info.dst).type == "local")
    icmp_send(kernel, st, skb, info, ICMP_DEST_UNREACH if info.version == 4 else ICMPV6_DEST_UNREACH, code,
              local=local, nfc=nfc)


def nf_send_reset(kernel, st, skb: SkBuff, info: PktInfo, nfc: NfCtx) -> None:
    """``nf_send_reset`` (net/ipv4/netfilter/nf_reject_ipv4.c) / ``nf_send_reset6``: a RST from the packet's
    destination to its source, for a first-fragment TCP segment that is not a RST itself, whose checksum holds
    (``nf_reject_ip_tcphdr_get``), between unicast addresses.  ``nf_reject_ip_tcphdr_put``: with ACK set in the
    segment, the RST's sequence is its acknowledgement; else sequence 0 and an ACK of everything the segment
    held.  IPv4 with DF, TOS 0, ID 0; both with the default hop limit (no metric: ``ip4_dst_hoplimit``,
    ``ip6_dst_hoplimit``), window 0.  It leaves through ``ip_local_out`` with the segment's entry attached
    (``nf_ct_attach``: RELATED), which ``nf_ct_set_closing`` has put in CLOSE."""
    if info.l4proto != IPPROTO_TCP or not _l4_ok(skb, info) or info.src.is_multicast or info.dst.is_multicast:
        return
    if info.version == 4 and (int(info.src) == _LIMITED_BROADCAST or int(info.dst) == _LIMITED_BROADCAST):
        return  # RTCF_BROADCAST (the limited broadcast; a subnet's broadcast address is not modelled)
    pkt = _reset_packet(skb.buf, info, dscp=0)
    if pkt is None:
        return
    ct = nfc.ct
    if ct is not None and ct.l4proto == IPPROTO_TCP:
        nf_conntrack_tcp_set_closing(ct, kernel.now, st.conntrack.timeouts)
    _push_reset(kernel, st, skb, info, pkt, "nft reject", nf_ct_attach(nfc))


def _reset_packet(buf, info: PktInfo, dscp: int) -> bytes | None:
    """The RST that answers the TCP segment *info* from its destination, or None for a later fragment, a segment
    without ports or a RST (``nf_reject_ip_tcphdr_put`` and ``tcp_v4_send_reset`` / ``tcp_v6_send_response``
    alike): with ACK set in the segment, the RST's sequence is its acknowledgement; else sequence 0 and an ACK of
    everything the segment held.  Window 0, no options; IPv4 with DF and ID 0 (the control socket's
    IP_PMTUDISC_DO), the default hop limit (``ip4_dst_hoplimit``, ``ip6_dst_hoplimit``), *dscp* in the TOS /
    traffic class."""
    flags, sport, dport = info.tcp_flags, info.sport, info.dport
    if not info.first or flags is None or flags & TCP_RST or sport is None or dport is None:
        return None
    at = info.l4off
    seq, ack_seq = struct.unpack_from("!II", buf, at + 4)
    if flags & TCP_ACK:
        rst_seq, rst_ack, rst_flags = ack_seq, 0, TCP_RST
    else:
        payload = info.l3off + info.tot_len - at - ((buf[at + 12] >> 4) << 2)
        rst_seq, rst_ack = 0, seq + bool(flags & TCP_SYN) + bool(flags & TCP_FIN) + payload
        rst_flags = TCP_RST | TCP_ACK
    pair = addr_pair(info.dst, info.src)
    tcph = tcp_header(pair.addr_sum, dport, sport, rst_seq, rst_ack & 0xFFFFFFFF, rst_flags, window=0)
    if info.version == 4:
        return ipv4_header(pair.packed, IPPROTO_TCP, len(tcph), tos=dscp << 2, df=True) + tcph
    return ipv6_header(pair.packed, IPPROTO_TCP, len(tcph), tclass=dscp << 2) + tcph


def _push_reset(kernel, st, skb: SkBuff, info: PktInfo, pkt: bytes, who: str, attach) -> None:
    """Send the RST *pkt* about *skb* from this namespace (``ip_local_out``, after the current packet)."""
    tag = skb.tag
    new = kernel.new_tag(tag.traffic if tag is not None else None,
                         _OPPOSITE.get(tag.direction) if tag is not None else None, "tcp-reset")
    if kernel.tracing:
        kernel.trace(skb, f"{st.name} {who}", f"tcp reset to {info.src}")
    kernel.schedule(kernel.now, _icmp_push_reply, kernel, st, new_skb(pkt, new, 0), attach)


# ----------------------------------------------------------------- reassembly

def ip_defrag(kernel, st, skb: SkBuff, info: PktInfo, conntrack: bool = False):
    """``ip_defrag``: queue a fragment; (whole skb, its info) once complete, else (None, None) (queued, or
    refused and dropped: ``ip_frag_queue``'s checks, :class:`~flowsim.kernel.pkt.FragQueue`).

    ``ip_frag_reasm`` leaves ``IPCB(skb)->frag_max_size`` (and ``IPSKB_FRAG_PMTU``) and the fragments as the
    head's ``frag_list``; for conntrack (*conntrack*: ``nf_ct_ipv4_gather_frags``) the whole packet also gets
    ``skb->ignore_df``.  Output then re-fragments it (:func:`_fragment_and_send`).
    """
    key = (info.src, info.dst, info.ident, info.l4proto)
    q = inet_frag_find(kernel, st, key, FragQueue)
    if ip_frag_too_far(st, q, info.src):
        ip_frag_reinit(kernel, st, key, q)
    q, out = _frag_gather(kernel, st, skb, info, key, FragQueue)
    if out is None:
        return None, None
    out.frag_max_size, out.frag_pmtu, out.frag_list = q.frag_max_size, q.frag_pmtu, q.sizes
    out.ignore_df = conntrack
    return out, parse_ip(out.buf, out.data)


def ip_frag_too_far(st, q: FragQueue, src) -> bool:
    """``ip_frag_too_far``: every fragment from *src* that reaches a queue advances the source's ``inet_peer`` rid
    (one per namespace, ``net->ipv4.peers``); a queue that holds fragments and has seen more than
    ``net.ipv4.ipfrag_max_dist`` (64; 0: never) of the source's fragments since its own last one is too far
    behind: the source has moved on, and what it holds is likely from an earlier datagram with the same id."""
    max_dist = _ipfrag_max_dist(st)
    if not max_dist:  # ip4_frag_init gives the queue no peer
        return False
    start = q.rid
    end = q.rid = st.inet_peer_rid[src] = st.inet_peer_rid.get(src, 0) + 1
    return bool(q.skbs) and end - start > max_dist


def _ipfrag_max_dist(st) -> int:
    """The namespace's ``net.ipv4.ipfrag_max_dist``."""
    return st.ns.sysctl_int("net.ipv4.ipfrag_max_dist", IPFRAG_MAX_DIST)


def ip_frag_reinit(kernel, st, key: tuple, q: FragQueue) -> None:
    """``ip_frag_reinit``: the queue's fragments are dropped and it starts afresh (its timer too) from the
    fragment at hand; its rid stays."""
    for queued in q.skbs:
        kernel.drop(queued, "frag-too-far", f"{st.name} defrag",
                    detail=f"more than ipfrag_max_dist ({_ipfrag_max_dist(st)}) fragments from its source since")
    fresh = st.frags[key] = FragQueue(kernel.now)
    fresh.rid = q.rid


def ipv6_defrag(kernel, st, skb: SkBuff, info: PktInfo, conntrack: bool = False):
    """``ipv6_frag_rcv`` (local delivery) or, for *conntrack*, ``nf_ct_frag6_gather`` (the IPv6 defrag hook at
    PREROUTING -400): queue a fragment; (whole skb, its info) once complete, (None, None) while it waits or when
    it was dropped, and (*skb*, *info*) as they came for a fragment that goes on unreassembled.

    Before the queue: the local path takes an atomic fragment (offset 0, no MF) as an unfragmented packet; both
    refuse a first fragment without its whole upper-layer header (``ipv6frag_thdr_truncated``, RFC 8200 4.5):
    the local path drops it with an ICMPv6 Parameter Problem (code 3), conntrack lets it on.  The queue's own
    checks are :class:`~flowsim.kernel.pkt.Frag6Queue`'s.  The two keep separate queues (conntrack's is
    ``IP6_DEFRAG_CONNTRACK_IN``'s), keyed by the addresses, the identification and the interface (``fq_find``:
    conntrack's always, the local one for link-local and multicast destinations).  The whole packet gets
    ``IP6CB(skb)->frag_max_size``, conntrack's also ``skb->ignore_df``: forwarded, it leaves as fragments again
    (:func:`_fragment6_and_send`)."""
    if not conntrack and not info.mf and not info.frag_off:
        return skb, info  # ipv6_frag_rcv: "It is not a fragmented frame"
    if ipv6frag_thdr_truncated(info):
        if conntrack:
            return skb, info  # nf_ct_frag6_gather returns 0: NF_ACCEPT
        icmp_send(kernel, st, skb, info, ICMPV6_PARAMPROB, ICMPV6_HDR_INCOMP, 0, local=True)
        kernel.drop(skb, "frag-headers-incomplete", f"{st.name} defrag", l4proto=info.l4proto)
        return None, None
    iif = skb.iif if conntrack or info.dst.is_link_local or info.dst.is_multicast else 0
    key = ("ipv6-ct" if conntrack else "ipv6", info.src, info.dst, info.ident, iif)
    q, out = _frag_gather(kernel, st, skb, info, key, Frag6Queue, conntrack)
    if out is None:
        return None, None
    if out is skb:  # let on unreassembled (nf_ct_frag6_queue: -EPROTO)
        return skb, info
    out.frag_max_size = q.frag_max_size
    out.ignore_df = conntrack
    return out, parse_ip(out.buf, out.data)


def _frag_gather(kernel, st, skb: SkBuff, info: PktInfo, key: tuple, queue: type, *how):
    """Queue the fragment *skb* under *key* (a new *queue* the first time: ``inet_frag_find``; *how*: the
    queue's own arguments); (the queue, the whole datagram's skb) once it is complete, its fragments' pieces
    merged back into one packet; (the queue, None) while it waits, or when it refused *skb* and *skb* was
    dropped; (the queue, *skb*) when it lets *skb* on unreassembled (:class:`~flowsim.kernel.pkt.FragDiscard`)."""
    q = inet_frag_find(kernel, st, key, queue)
    where = f"{st.name} defrag"
    try:
        whole = q.add(bytes(skb.buf[info.l3off:info.l3off + info.tot_len]), info, *how)
    except FragDiscard as refused:
        if refused.kill:  # inet_frag_kill: the queue goes, and the fragments it held with it
            del st.frags[key]
            for queued in q.skbs:
                kernel.drop(queued, refused.rid, where, detail=f"queued fragment, with {refused.detail}")
        if refused.param_prob is not None:  # ipv6_frag_rcv: icmpv6_param_prob
            icmp_send(kernel, st, skb, info, ICMPV6_PARAMPROB, *refused.param_prob, local=True)
        if refused.accept:
            kernel.trace(skb, where, f"not reassembled: {refused.detail}")
            return q, skb
        kernel.drop(skb, refused.rid, where, detail=refused.detail)
        return q, None
    q.skbs.append(skb)
    if whole is None:
        return q, None
    del st.frags[key]
    if skb.tag is not None:
        kernel.ledger.merge_pieces(skb.tag, len(q.skbs))
    out = new_skb(whole, skb.tag, skb.mark)
    out.iif = skb.iif
    kernel.trace(out, where, f"reassembled from {len(q.skbs)} fragments")
    return q, out


def inet_frag_find(kernel, st, key: tuple, queue: type):
    """``inet_frag_find``: the namespace's queue under *key*, a new *queue* (started now) when there is none."""
    q = st.frags.get(key)
    if q is None:
        q = st.frags[key] = queue(kernel.now)
    return q


def ip_expire_frags(kernel, st) -> None:
    """``ip_expire``: incomplete datagrams older than ``ipfrag_time`` are dropped."""
    for key, q in list(st.frags.items()):
        if kernel.now - q.created >= IPFRAG_TIME:
            del st.frags[key]
            for skb in q.skbs:
                kernel.drop(skb, "reassembly-timeout", f"{st.name} defrag")


# ----------------------------------------------------------------- registration (the kernel's initcalls)
# inet_init / inet6_init: ip_rcv and ipv6_rcv become the device layer's handlers of their ethertypes;
# the tunnel drivers' netdev_ops; xfrm4_state_init / xfrm6_state_init lend xfrm the local output
# (xfrm4_state_afinfo.local_out = __ip_local_out) its tunnel mode sends the outer packet with.
stack_l2.dev_add_pack(ETH_P_IP, ip_rcv)
stack_l2.dev_add_pack(ETH_P_IPV6, ip_rcv)
stack_l2.register_ndo_start_xmit(IpipDevice, ipip_tunnel_xmit)
stack_l2.register_ndo_start_xmit(Ip6tnlDevice, ip6_tnl_start_xmit)
stack_xfrm.xfrm_state_register_afinfo(AF_INET, stack_xfrm.XfrmStateAfinfo(local_out=ip_local_out))
