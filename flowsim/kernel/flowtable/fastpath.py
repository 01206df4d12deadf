"""The per-packet fast path: ``nf_flow_offload_ip_hook`` / ``nf_flow_offload_ipv6_hook`` (``nf_flow_table_ip.c``).

Theory of operation
-------------------
:func:`nf_flow_offload_hook` runs at the netdev ingress hook of every device
a flowtable lists, and returns the hook's verdict:

``"accept"``  NF_ACCEPT: the packet goes on through the ordinary stack (the
              *slow path*), with a reason id from :mod:`flowsim.reasons`;
``"drop"``    NF_DROP, the reason id left in ``skb.drop_reason``;
``"stolen"``  NF_STOLEN: the fast path has transmitted it.

The steps follow reference §4.1/§4.2 in the kernel's order: the tuple
(:mod:`flowsim.kernel.flowtable.tuple`), the lookup, the TEARDOWN and dying checks, the MTU
check with the tunnel overhead, the TCP state check (FIN/RST → CLOSING from
6.14, SYN on a CLOSING flow → teardown), writability, refresh, the pop of
VLAN/PPPoE/tunnel headers (as many layers as the *flow* says), NAT (§4.4,
incremental checksums), TTL / hop limit, the conntrack counters (§7), then
transmit: tunnel push (§5.3), NEIGH or DIRECT with the cached MACs, VLAN /
PPPoE push (§5.4) and ``dev_queue_xmit`` on the egress device through
:class:`flowsim.kernel.api.Kernel`.  Profile switches select the behaviour
of each kernel version (§9), bugs included.
"""

from __future__ import annotations

import functools
import ipaddress
import struct

from flowsim.errors import KernelBugError
from flowsim.kernel.conntrack import IPS_DYING, TCP_FIN, TCP_RST, TCP_SYN, nf_ct_acct_update
from flowsim.kernel.flowtable.core import (
    NF_FLOW_CLOSING,
    NF_FLOW_DNAT,
    NF_FLOW_SNAT,
    NF_FLOW_TEARDOWN,
    NF_FLOWTABLE_COUNTER,
    FlowOffloadTuple,
    Flowtable,
    _addr_key,
)
from flowsim.kernel.flowtable.path import XmitType
from flowsim.kernel.flowtable.tuple import nf_flow_offload_lookup
from flowsim.kernel.gso import SKB_GSO_IPXIP4, SKB_GSO_IPXIP6, GsoError, skb_gso_segment
from flowsim.kernel.headers import (
    ETH_P_8021AD,
    ETH_P_8021Q,
    ETH_P_IP,
    ETH_P_IPV6,
    ETH_P_PPP_SES,
    IPPROTO_IPIP,
    IPPROTO_IPV6,
    IPPROTO_TCP,
    IPPROTO_UDP,
    NEXTHDR_DEST,
    PPP_IP,
    PPP_IPV6,
    csum_replace,
    internet_checksum,
    pppoe_proto_to_ethertype,
)

__all__ = ["nf_flow_offload_hook", "nf_flow_vlan_push", "nf_flow_pppoe_push", "nf_flow_tunnel_ipip_push",
           "nf_flow_tunnel_ip6ip6_push", "IPV6_DEFAULT_TNL_ENCAP_LIMIT"]

IPV6_DEFAULT_TNL_ENCAP_LIMIT = 4
NEIGH_GC_THRESH3 = 1024  # net.ipv4/ipv6.neigh.default.gc_thresh3
_NAT_FLAGS = (1 << NF_FLOW_SNAT) | (1 << NF_FLOW_DNAT)
_TEARDOWN = 1 << NF_FLOW_TEARDOWN
_NEIGH, _XFRM, _DIRECT = XmitType.NEIGH, XmitType.XFRM, XmitType.DIRECT  # module constants: no enum lookups per packet
_ETH_PROTO = {p: p.to_bytes(2, "big") for p in (0x0800, 0x86DD, 0x8100, 0x88A8, 0x8864)}
_ZERO_MAC = b"\0" * 6


@functools.lru_cache(maxsize=4096)
def _mac(text: str | None) -> bytes:
    return bytes.fromhex(text.replace(":", "")) if text else _ZERO_MAC


@functools.lru_cache(maxsize=65536)
def _ip(raw: bytes, v4: bool):
    """The address object of a key's 16-byte union (cached: it is needed per packet for the next hop)."""
    return ipaddress.IPv4Address(raw[:4]) if v4 else ipaddress.IPv6Address(raw)


# --- verdicts ------------------------------------------------------------------

def _accept(kernel, ft: Flowtable, skb, rid: str, detail: str = "", th: FlowOffloadTuple | None = None) -> str:
    ft.count("accept", rid)
    if th is not None:
        slow = th.slow if th.slow is not None else {}
        slow[rid] = slow.get(rid, 0) + 1
        th.slow = slow
    kernel.account(skb, "slowpath")
    if kernel.tracing:
        kernel.trace(skb, f"flowtable @{ft.name}", f"slow path: {rid}", reason=rid, detail=detail)
    return "accept"


def _drop(kernel, ft: Flowtable, skb, rid: str, detail: str = "") -> str:
    ft.count("drop", rid)
    skb.drop_reason = rid
    if kernel.tracing:
        kernel.trace(skb, f"flowtable @{ft.name}", f"drop: {rid}", reason=rid, detail=detail)
    return "drop"


def _near_miss(ft: Flowtable, key) -> None:
    """A miss whose addresses and ports belong to a flow: remember which key fields differed (for explain)."""
    half = ft.by_addrs.get(_addr_key(key))
    if half is None:
        return
    k = (half.flow.id, half.dir)
    old = ft.near_misses.get(k)
    if old is None:
        ft.near_misses[k] = (tuple(key.differences(half.key)), 1, key)
    else:
        ft.near_misses[k] = (old[0], old[1] + 1, old[2])


# --- the hook --------------------------------------------------------------------

def nf_flow_offload_hook(kernel, ns_state, ft: Flowtable, skb, in_dev) -> str:
    """The flowtable's ingress hook for *skb* received on *in_dev*: "accept", "drop" or "stolen".

    The skb's header-access cost during the hook (copies, head
    reallocations, pulls of non-linear data) is added to ``ft.cost``.
    """
    copies, reallocs, copied, bugs = skb.copies, skb.reallocs, skb.bytes_copied, skb.pull_bugs
    try:
        res = nf_flow_offload_lookup(skb, in_dev.ifindex, ft.family, kernel.profile)
        if res.tuple is None:
            return _accept(kernel, ft, skb, res.reason, res.detail)
        th = ft.table.get(res.tuple)
        if th is None:
            _near_miss(ft, res.tuple)
            return _accept(kernel, ft, skb, "no-flow-entry", str(res.tuple))
        flow = th.flow
        if flow.flags & _TEARDOWN:
            return _accept(kernel, ft, skb, "flow-teardown", th=th)
        if flow.ct.status & IPS_DYING:
            return _accept(kernel, ft, skb, "ct-dying", th=th)
        if kernel.tracing:
            kernel.trace(skb, f"flowtable @{ft.name}",
                         f"lookup hit: flow {flow.id} {'original' if th.dir == 0 else 'reply'}", tuple=str(res.tuple))
        try:
            return _forward_and_xmit(kernel, ns_state, ft, skb, th, res)
        except KernelBugError as exc:
            ft.kernel_bugs.append(str(exc))
            return _drop(kernel, ft, skb, "kernel-bug", str(exc))
    finally:
        # every copy or reallocation copies bytes, and a pull bug is counted: test two fields, not four
        if skb.bytes_copied != copied or skb.pull_bugs != bugs:
            c = ft.cost
            c.copies += skb.copies - copies
            c.reallocs += skb.reallocs - reallocs
            c.bytes_copied += skb.bytes_copied - copied
            c.pull_bugs += skb.pull_bugs - bugs


def _forward_and_xmit(kernel, ns_state, ft, skb, th: FlowOffloadTuple, res) -> str:
    profile = kernel.profile
    ctx = res.ctx
    v4 = res.hook == "ipv4"
    flow = th.flow
    other = flow.tuplehash[1 - th.dir]
    out_tun, out_encap = other.key.tun, other.key.encap  # what this direction pushes: the other tuple's
    xmit_type = th.xmit_type
    buf = skb.buf

    # nf_flow_offload_forward / nf_flow_offload_ipv6_forward
    ih = skb.network_header + ctx.offset
    l3len = (buf[ih] & 0x0F) * 4 if v4 else 40
    thoff = ctx.offset + l3len  # from skb->data (= the network header at ingress)
    l4proto = buf[ih + 9] if v4 else buf[ih + 6]
    mtu = th.mtu + ctx.offset
    if out_tun is not None:  # other.tun_num
        mtu -= 20 if v4 else 40 + (8 if profile.ip6ip6_tx_encap_limit else 0)
    if len(buf) - skb.data > mtu:  # nf_flow_exceeds_mtu (skb->len), skb_gso_validate_network_len for GSO
        l4len = (buf[skb.data + thoff + 12] >> 4) * 4 if l4proto == IPPROTO_TCP else 8
        if not (skb.gso_size and thoff + l4len + skb.gso_size <= mtu):
            return _accept(kernel, ft, skb, "mtu-exceeded", f"length {skb.len} > flow MTU {mtu}", th)
    if l4proto == IPPROTO_TCP:  # nf_flow_state_check
        flags = buf[skb.data + thoff + 13]
        if flags & TCP_SYN and flow.test(NF_FLOW_CLOSING):
            ft.flow_offload_teardown(flow, kernel, ns_state, "SYN on a CLOSING flow")
            return _accept(kernel, ft, skb, "tcp-syn-closing", th=th)
        if flags & (TCP_FIN | TCP_RST):
            if profile.tcp_fin_rst == "teardown":
                ft.flow_offload_teardown(flow, kernel, ns_state, "TCP FIN/RST")
                return _accept(kernel, ft, skb, "tcp-fin-rst", th=th)
            flow.set(NF_FLOW_CLOSING)
    # nf_flow_dst_check: NEIGH/XFRM routes go stale when the FIB changes; DIRECT tuples are not checked (REF)
    if xmit_type != _DIRECT and th.dst_genid != ns_state.ns.fib.genid:
        ft.flow_offload_teardown(flow, kernel, ns_state, "route obsolete")
        return _accept(kernel, ft, skb, "route-stale", "the FIB changed since the flow was created", th)
    if skb.data + thoff + ctx.hdrsize > skb.linear_end and not skb.ensure_writable(thoff + ctx.hdrsize):
        return _drop(kernel, ft, skb, "not-writable")
    ft.flow_offload_refresh(flow, kernel.now)

    if th.key.encap:
        nf_flow_encap_pop(ctx, skb, th)
    elif ctx.tun_proto and skb.protocol in (ETH_P_IP, ETH_P_IPV6):
        # nf_flow_ip_tunnel_pop alone, the common tunnel case: skb_pull inlined when the bytes are linear
        if skb.data + ctx.tun_hdr_size <= skb.linear_end:
            skb.data += ctx.tun_hdr_size
        else:
            skb.pull(ctx.tun_hdr_size)  # raises SkbPullBug
        skb.network_header = skb.data
    if flow.flags & _NAT_FLAGS:
        _nat(flow, th.dir, skb, v4)
    if v4:
        _ip_decrease_ttl(skb.buf, skb.data)
    else:
        skb.buf[skb.data + 7] -= 1
    if ft.flags & NF_FLOWTABLE_COUNTER:
        nf_ct_acct_update(flow.ct, th.dir, skb.len)
    th.packets += 1
    th.bytes += len(skb.buf) - skb.data  # skb->len

    if xmit_type == _XFRM:  # nf_flow_xmit_xfrm (§4.1 step 13)
        # IPCB reset, IPSKB_FORWARDED, skb_dst_set_noref(cached route), dst_output → the xfrm output
        dst = th.dst
        dev = ns_state.ns.devices.get(dst.dev) if dst is not None else None
        if dev is None:
            ft.flow_offload_teardown(flow, kernel, ns_state, "no egress device")
            return _drop(kernel, ft, skb, "no-egress-device")
        _stolen(kernel, ft, skb, dev, "xfrm_output")
        kernel.xfrm_output(ns_state, skb, dst)
        return "stolen"
    ip_daddr = other.key.src
    if out_tun is not None:
        dst = other.dst if profile.tunnel_push_dst == "opposite" else th.dst
        if dst is None:
            raise KernelBugError("tunnel push reads dst_cache of a tuple without a route (DIRECT): "
                                 "REF bug fixed by 'move dst_cache/dst_cookie out of the runtime union'")
        locked = bool(getattr(dst, "mtu_lock", False))
        if v4:
            nf_flow_tunnel_ipip_push(skb, other, locked, ft.next_ip_ident())
        else:
            nf_flow_tunnel_ip6ip6_push(skb, other, profile.ip6ip6_tx_encap_limit)
        if skb.gso_size:  # iptunnel_handle_offloads: segmentation will replicate the outer header
            skb.gso_type |= SKB_GSO_IPXIP4 if v4 else SKB_GSO_IPXIP6
        ip_daddr = out_tun.src

    ns = ns_state.ns
    legacy = profile.encap_push_order == "legacy"
    if xmit_type == _NEIGH:
        rt = th.dst
        if legacy:  # ≤ 6.18: neigh_xmit on the route's device, whose driver tags / encapsulates
            dev = ns.devices.get(rt.dev) if rt is not None else None
            if dev is None:
                ft.flow_offload_teardown(flow, kernel, ns_state, "no egress device")
                return _drop(kernel, ft, skb, "no-egress-device")
            _stolen(kernel, ft, skb, dev, "neigh_xmit")
            kernel.neigh_output(dev, skb, rt.nexthop(_ip(ip_daddr, v4)))
            return "stolen"
        outdev = ns.by_index.get(th.ifidx)
        if outdev is None:
            ft.flow_offload_teardown(flow, kernel, ns_state, f"egress ifindex {th.ifidx} not found")
            return _drop(kernel, ft, skb, "no-egress-device", f"ifindex {th.ifidx}")
        l2 = th.l2_cache
        if l2 is None or l2[0] != ns.neigh.version or l2[1] is not outdev.mac:
            l2 = th.l2_cache = _neigh_hh(ft, ns, rt, outdev, ip_daddr, v4)
            if l2 is None:  # __neigh_create failed: the neighbour table is full
                ft.flow_offload_teardown(flow, kernel, ns_state, "neighbour table overflow")
                return _drop(kernel, ft, skb, "neigh-error", f"{rt.dev}: neighbour table overflow (gc_thresh3)")
        hh = l2[2]
    elif xmit_type == _DIRECT:
        outdev = ns.by_index.get(th.out_hw_ifidx if legacy and th.out_hw_ifidx else th.out_ifidx)
        if outdev is None:
            ft.flow_offload_teardown(flow, kernel, ns_state, f"egress ifindex {th.out_ifidx} not found")
            return _drop(kernel, ft, skb, "no-egress-device", f"ifindex {th.out_ifidx}")
        hh = _mac(th.h_dest) + _mac(th.h_source) if outdev.link_type == "ether" else None
    else:
        return _drop(kernel, ft, skb, "xmit-type-unknown", xmit_type.name)

    # nf_flow_queue_xmit: L2 encapsulation of the *other* tuple, then the Ethernet header
    if out_encap:
        if skb.gso_size and th.needs_gso_segment:
            return nf_flow_encap_gso_xmit(kernel, ft, skb, other, outdev, hh, profile.encap_push_order)
        if not nf_flow_encap_push(skb, other, profile.encap_push_order):
            return _drop(kernel, ft, skb, "encap-push-failed")
    _dev_hard_header(skb, hh)
    _stolen(kernel, ft, skb, outdev, "dev_queue_xmit")
    kernel.dev_queue_xmit(outdev, skb)
    return "stolen"


def _dev_hard_header(skb, hh: bytes | None) -> None:
    """``dev_hard_header``: the Ethernet header; a no-op on a device without header_ops (tunnels)."""
    if hh is not None:
        hdr = hh + (_ETH_PROTO.get(skb.protocol) or skb.protocol.to_bytes(2, "big"))
        if skb.data >= 14:  # skb_push into the headroom (skb.push reallocates when there is none)
            skb.data -= 14
            skb.buf[skb.data:skb.data + 14] = hdr
        else:
            skb.push(hdr)
    skb.mac_header = skb.data


def nf_flow_encap_gso_xmit(kernel, ft: Flowtable, skb, other: FlowOffloadTuple, outdev, hh: bytes | None,
                           order: str) -> str:
    """A GSO skb into PPPoE (``needs_gso_segment``): segment in software, then push and send each segment.

    No device can segment a packet behind a PPPoE header, so the April-2026
    fix cuts the GSO skb first (``skb_gso_segment``) and pushes the
    encapsulation on every segment.  A segmentation error drops the packet.
    """
    try:
        segs = skb_gso_segment(skb)
    except GsoError as exc:
        return _drop(kernel, ft, skb, "gso-segment-error", str(exc))
    for seg in segs:
        if not nf_flow_encap_push(seg, other, order):
            return _drop(kernel, ft, skb, "encap-push-failed")
    kernel.add_pieces(skb, len(segs) - 1)
    ft.gso_segmented += 1
    ft.gso_segments += len(segs)
    _stolen(kernel, ft, skb, outdev, f"software GSO into {len(segs)} segments, dev_queue_xmit")
    for seg in segs:
        _dev_hard_header(seg, hh)
        kernel.dev_queue_xmit(outdev, seg)
    return "stolen"


def _neigh_hh(ft: Flowtable, ns, rt, outdev, ip_daddr: bytes, v4: bool) -> tuple | None:
    """The NEIGH xmit's link-layer addresses: (neighbour table version, device MAC, dest + source or None).

    ip_neigh_gw4/6 for rt_nexthop(): the neighbour's current address, its state
    not checked; a missing entry is created (``NUD_NONE``, address zeros), and
    when the table is full that fails: None.  A tuple keeps the result while
    the neighbour table and the device's MAC are unchanged (its route is
    covered by the dst check); tuples through the same next hop share one
    entry (ft.neigh_cache), so a busy flow holds a reference, not its own copy.
    """
    neigh_table = ns.neigh
    key = (rt.dev, ip_daddr, id(rt.gateway), outdev.ifindex)
    hit = ft.neigh_cache.get(key)
    if hit is not None and hit[0] is rt.gateway and hit[1][0] == neigh_table.version and hit[1][1] is outdev.mac:
        return hit[1]
    hh = None
    if outdev.link_type == "ether":
        nexthop = rt.nexthop(_ip(ip_daddr, v4))
        neigh = neigh_table.lookup(rt.dev, nexthop)
        if neigh is None:
            sysctl = f"net.ipv{4 if v4 else 6}.neigh.default.gc_thresh3"
            neigh = neigh_table.create(rt.dev, nexthop, int(ns.sysctl(sysctl, str(NEIGH_GC_THRESH3))))
            if neigh is None:
                return None
        hh = (_mac(neigh.lladdr) if neigh.lladdr else _ZERO_MAC) + _mac(outdev.mac)
    entry = (neigh_table.version, outdev.mac, hh)
    ft.neigh_cache[key] = (rt.gateway, entry)  # the gateway object is kept so its id stays unique
    return entry


def _stolen(kernel, ft, skb, dev, how: str) -> None:
    ft.fastpath += 1  # Flowtable.count("stolen"), inlined: once per fast-path packet
    if skb.tag is not None:
        kernel.account(skb, "fastpath")
    if kernel.tracing:
        kernel.trace(skb, f"flowtable @{ft.name}", f"fast path: {how} on {dev.name}", dev=dev.name)


# --- pop ---------------------------------------------------------------------------

def nf_flow_encap_pop(ctx, skb, th: FlowOffloadTuple) -> None:
    """``nf_flow_encap_pop``: as many L2 layers as the flow's tuple has, then the tunnel header."""
    for _ in range(th.encap_num):
        if skb.vlan_present:
            skb.vlan_hwaccel_clear_tag()
            continue
        d = skb.data
        if skb.protocol == ETH_P_8021Q:
            encap = (skb.buf[d + 2] << 8) | skb.buf[d + 3]
            skb.pull(4)
            skb.protocol = encap
        elif skb.protocol == ETH_P_PPP_SES:
            skb.protocol = pppoe_proto_to_ethertype((skb.buf[d + 6] << 8) | skb.buf[d + 7])
            skb.pull(8)
        skb.reset_network_header()
    if skb.protocol in (ETH_P_IP, ETH_P_IPV6) and ctx.tun_proto in (IPPROTO_IPIP, IPPROTO_IPV6):
        skb.pull(ctx.tun_hdr_size)  # nf_flow_ip_tunnel_pop
        skb.reset_network_header()


# --- NAT and TTL (§4.4) ----------------------------------------------------------------

def _l4_csum_at(l4proto: int, thoff: int) -> int | None:
    if l4proto == IPPROTO_TCP:
        return thoff + 16
    if l4proto == IPPROTO_UDP:
        return thoff + 6
    return None


def _replace_l4(buf, l4proto: int, at: int | None, old: bytes, new: bytes) -> None:
    """``inet_proto_csum_replace*`` on the L4 checksum; UDP only when set, and never to 0."""
    if at is None:
        return
    check = (buf[at] << 8) | buf[at + 1]
    if l4proto == IPPROTO_UDP and check == 0:
        return
    check = csum_replace(check, old, new)
    if l4proto == IPPROTO_UDP and check == 0:
        check = 0xFFFF  # CSUM_MANGLED_0
    buf[at:at + 2] = check.to_bytes(2, "big")


def _nat(flow, dir: int, skb, v4: bool) -> None:
    """``nf_flow_nat_ip`` / ``nf_flow_nat_ipv6``: SNAT then DNAT, ports then address."""
    snat, dnat = flow.test(NF_FLOW_SNAT), flow.test(NF_FLOW_DNAT)
    if not (snat or dnat):
        return
    buf, nh = skb.buf, skb.data
    l4proto = buf[nh + 9] if v4 else buf[nh + 6]
    thoff = nh + (20 if v4 else 40)
    csum_at = _l4_csum_at(l4proto, thoff)
    orig, reply = flow.tuplehash[0].key, flow.tuplehash[1].key
    alen = 4 if v4 else 16
    src_at, dst_at = (nh + 12, nh + 16) if v4 else (nh + 8, nh + 24)
    edits = []  # (field, new address bytes, new port)
    if snat:
        edits.append(("src", reply.dst, reply.dport) if dir == 0 else ("dst", orig.src, orig.sport))
    if dnat:
        edits.append(("dst", reply.src, reply.sport) if dir == 0 else ("src", orig.dst, orig.dport))
    for field, addr, port in edits:
        if csum_at is not None:  # nf_flow_snat_port / nf_flow_dnat_port
            p_at = thoff + (0 if field == "src" else 2)
            old_p = bytes(buf[p_at:p_at + 2])
            new_p = port.to_bytes(2, "big")
            buf[p_at:p_at + 2] = new_p
            _replace_l4(buf, l4proto, csum_at, old_p, new_p)
        a_at = src_at if field == "src" else dst_at
        old_a = bytes(buf[a_at:a_at + alen])
        new_a = addr[:alen]
        buf[a_at:a_at + alen] = new_a
        if v4:
            check = (buf[nh + 10] << 8) | buf[nh + 11]
            buf[nh + 10:nh + 12] = csum_replace(check, old_a, new_a).to_bytes(2, "big")
        _replace_l4(buf, l4proto, csum_at, old_a, new_a)  # the pseudo-header


def _ip_decrease_ttl(buf, nh: int) -> None:
    """``ip_decrease_ttl``: TTL − 1 with the incremental header checksum update."""
    old = bytes(buf[nh + 8:nh + 10])
    buf[nh + 8] -= 1
    check = (buf[nh + 10] << 8) | buf[nh + 11]
    buf[nh + 10:nh + 12] = csum_replace(check, old, bytes(buf[nh + 8:nh + 10])).to_bytes(2, "big")


# --- tunnel push (§5.3) ------------------------------------------------------------------

def nf_flow_tunnel_ipip_push(skb, other: FlowOffloadTuple, mtu_locked: bool, ident: int) -> None:
    """``nf_flow_tunnel_ipip_push``: a 20-byte outer header from the inner one's TOS/TTL/frag_off."""
    buf, nh = skb.buf, skb.data
    tos, ttl = buf[nh + 1], buf[nh + 8]
    frag_off = 0 if mtu_locked else (buf[nh + 6] << 8) | buf[nh + 7]
    tun = other.key.tun
    hdr = bytearray(struct.pack("!BBHHHBBH4s4s", 0x45, tos, skb.len + 20, ident, frag_off, ttl,
                                tun.l3_proto, 0, tun.dst[:4], tun.src[:4]))
    hdr[10:12] = internet_checksum(hdr).to_bytes(2, "big")
    skb.push(bytes(hdr))
    skb.reset_network_header()


def nf_flow_tunnel_ip6ip6_push(skb, other: FlowOffloadTuple, encap_limit: bool) -> None:
    """``nf_flow_tunnel_ip6ip6_push``: optional encap-limit destination option (REF), then the IPv6 header."""
    buf, nh = skb.buf, skb.data
    tclass = ((buf[nh] & 0x0F) << 4) | (buf[nh + 1] >> 4)
    hop_limit = buf[nh + 7]
    proto = IPPROTO_IPV6
    if encap_limit:
        # next header 41, length 0, TLV 4 (tunnel encapsulation limit) len 1 value 4, PadN len 1
        skb.push(bytes((IPPROTO_IPV6, 0, 4, 1, IPV6_DEFAULT_TNL_ENCAP_LIMIT, 1, 1, 0)))
        proto = NEXTHDR_DEST
    tun = other.key.tun
    # ip6_make_flowlabel: from the flow hash; any stable 20-bit value of the inner flow will do
    label = int.from_bytes(bytes(buf[nh + 8:nh + 40]), "big") % 0xFFFFF or 1
    first = (6 << 28) | (tclass << 20) | label
    skb.push(struct.pack("!IHBB16s16s", first, skb.len, proto, hop_limit, tun.dst, tun.src))
    skb.reset_network_header()


# --- L2 push (§5.4) ------------------------------------------------------------------------

def nf_flow_vlan_push(skb, proto: int, tci: int) -> None:
    """``nf_flow_vlan_push`` (and ``skb_vlan_push``): a present hwaccel tag goes in-band first."""
    if skb.vlan_present:
        skb.push(struct.pack("!HH", skb.vlan_tci, skb.protocol))
        skb.protocol = skb.vlan_proto
        skb.reset_network_header()
    skb.vlan_hwaccel_put_tag(proto, tci)


def nf_flow_pppoe_push(skb, session: int) -> bool:
    """``nf_flow_pppoe_push``: only over IPv4/IPv6; length = payload + the 2-byte PPP protocol."""
    ppp = {ETH_P_IP: PPP_IP, ETH_P_IPV6: PPP_IPV6}.get(skb.protocol)
    if ppp is None:
        return False
    skb.push(struct.pack("!BBHHH", 0x11, 0, session, skb.len + 2, ppp))
    skb.reset_network_header()
    skb.protocol = ETH_P_PPP_SES
    return True


def nf_flow_encap_push(skb, other: FlowOffloadTuple, order: str) -> bool:
    """``nf_flow_encap_push``: the opposite tuple's encaps, innermost first (April-2026 fix) or
    entry 0 first (6.19, which yields the reverse QinQ order)."""
    encaps = other.key.encap
    seq = encaps if order == "entry0-first" else tuple(reversed(encaps))
    for e in seq:
        if e.proto in (ETH_P_8021Q, ETH_P_8021AD):
            nf_flow_vlan_push(skb, e.proto, e.id)
        elif e.proto == ETH_P_PPP_SES and not nf_flow_pppoe_push(skb, e.id):
            return False
    return True
