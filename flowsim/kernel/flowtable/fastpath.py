"""The per-packet fast path: ``nf_flow_offload_ip_hook`` / ``nf_flow_offload_ipv6_hook`` (``nf_flow_table_ip.c``).

Theory of operation
-------------------
:func:`nf_flow_offload_hook` runs at the netdev ingress hook of every device
a flowtable lists, and returns the hook's verdict (constants of
:mod:`flowsim.reasons`):

``ACCEPT``  NF_ACCEPT: the packet goes on through the ordinary stack (the
            *slow path*), with a reason id from :mod:`flowsim.reasons`;
``DROP``    NF_DROP, the reason id left in ``skb.drop_reason``;
``STOLEN``  NF_STOLEN: the fast path has transmitted it.

One function per kernel function of ``net/netfilter/nf_flow_table_ip.c``, in
the kernel's order: the tuple and the table lookup
(:mod:`flowsim.kernel.flowtable.tuple`), the TEARDOWN and dying checks, then
:func:`nf_flow_offload_forward` — the MTU check with the tunnel overhead
(``nf_flow_exceeds_mtu``), ``nf_flow_state_check`` (FIN/RST → CLOSING from
6.14, SYN on a CLOSING flow → teardown), ``nf_flow_dst_check``,
writability, ``flow_offload_refresh``, :func:`nf_flow_encap_pop` (as many
VLAN/PPPoE/tunnel layers as the *flow* says), NAT (``nf_flow_nat_ip`` /
``nf_flow_nat_ipv6``, incremental checksums), TTL / hop limit and the
conntrack counters (``nf_ct_acct_update``).  Then, in the hook as in the
kernel: ``nf_flow_xmit_xfrm``, or the tunnel push (:func:`nf_flow_tunnel_push`:
``nf_flow_tunnel_v4_push`` / ``nf_flow_tunnel_v6_push``) and the switch on
``tuple->xmit_type`` (the :data:`XMIT` dispatch table: NEIGH, DIRECT), both
ending in :func:`nf_flow_queue_xmit` (``nf_flow_encap_push`` of VLAN/PPPoE,
``dev_hard_header``, ``dev_queue_xmit`` on the egress device through
:class:`flowsim.kernel.api.Kernel`).  Profile switches
(:class:`flowsim.profiles.Profile`) select the behaviour of each kernel
version, bugs included.
"""

from __future__ import annotations

import functools
import ipaddress
import struct
from collections.abc import Callable

from flowsim.errors import KernelBugError
from flowsim.kernel.conntrack import IPS_DYING, TCP_FIN, TCP_RST, TCP_SYN, CtTuple, nf_ct_acct_update
from flowsim.kernel.devices.ip6tnl import IPV6_DEFAULT_TNL_ENCAP_LIMIT
from flowsim.kernel.flowtable.core import (
    MISS_MEMO_MAX, NF_FLOW_CLOSING, NF_FLOW_DNAT, NF_FLOW_SNAT, NF_FLOW_TEARDOWN, NF_FLOWTABLE_COUNTER,
    FlowOffload,
    FlowOffloadTuple, Flowtable,
)
from flowsim.kernel.flowtable.path import XmitType
from flowsim.kernel.flowtable.tuple import hook_parser, nf_flow_offload_parse
from flowsim.kernel.gso import SKB_GSO_IPXIP4, SKB_GSO_IPXIP6, GsoError, skb_gso_segment
from flowsim.kernel.headers import (
    AF_INET, ETH_HLEN, ETH_P_8021AD, Encap, ETH_P_8021Q, ETH_P_IP, ETH_P_IPV6, ETH_P_PPP_SES, ETHERTYPE_TO_PPP, IPPROTO_IPIP,
    IPPROTO_IPV6, IPPROTO_TCP, IPPROTO_UDP, IPV4_HLEN, IPV6_HLEN, NEXTHDR_DEST, PPPOE_SES_HLEN, VLAN_HLEN,
    csum_replace, internet_checksum, mac_aton, pppoe_proto_to_ethertype,
)
from flowsim.reasons import ACCEPT, DROP, STOLEN

__all__ = [
    "nf_flow_offload_hook", "nf_flow_offload_forward", "nf_flow_xmit_xfrm",
    "nf_flow_xmit_neigh", "nf_flow_xmit_direct", "XMIT", "nf_flow_queue_xmit", "nf_flow_encap_gso_xmit",
    "nf_flow_encap_pop", "nf_flow_tunnel_push", "nf_flow_tunnel_ipip_push", "nf_flow_tunnel_ip6ip6_push",
    "nf_flow_encap_push", "nf_flow_vlan_push", "nf_flow_pppoe_push",
]

NEIGH_GC_THRESH3 = 1024  # net.ipv4/ipv6.neigh.default.gc_thresh3
_NAT_FLAGS = (1 << NF_FLOW_SNAT) | (1 << NF_FLOW_DNAT)
_TEARDOWN = 1 << NF_FLOW_TEARDOWN
_CLOSING = 1 << NF_FLOW_CLOSING
_new_tuple = tuple.__new__  # Encap(...) without the generated __new__'s extra call
_NEIGH, _XFRM, _DIRECT = XmitType.NEIGH, XmitType.XFRM, XmitType.DIRECT  # module constants: no enum lookups per packet
_IP_PROTOS = frozenset((ETH_P_IP, ETH_P_IPV6))  # `in` this, not a tuple built of two names per packet

# Header fields by name: their byte offsets in struct iphdr / ipv6hdr / tcphdr / udphdr (include/uapi/linux/).
# (Module constants cost one dictionary-free global load: the hot path can afford names.)
IPH_TOS, IPH_FRAG_OFF, IPH_TTL, IPH_PROTOCOL, IPH_CHECK, IPH_SADDR, IPH_DADDR = 1, 6, 8, 9, 10, 12, 16
IP6H_NEXTHDR, IP6H_HOP_LIMIT, IP6H_SADDR, IP6H_DADDR = 6, 7, 8, 24
TCPH_SOURCE, TCPH_DEST, TCPH_DOFF, TCPH_FLAGS, TCPH_CHECK = 0, 2, 12, 13, 16
UDPH_HLEN, UDPH_CHECK = 8, 6
IPIP_TUNNEL_HLEN = IPV4_HLEN  # the outer header nf_flow_tunnel_v4_push adds
IP6IP6_TUNNEL_HLEN = IPV6_HLEN  # ... nf_flow_tunnel_v6_push, plus the encap-limit option when it adds one
# struct ipv6_destopt_hdr with the tunnel encapsulation limit TLV (ip6_tnl_build_encap_limit / ip6_tnl.h):
# next header IPv6, length 0; IPV6_TLV_TNL_ENCAP_LIMIT, len 1, the limit; PadN, len 1, 0
IPV6_TLV_TNL_ENCAP_LIMIT = 4
_ENCAP_LIMIT_DESTOPT = bytes((IPPROTO_IPV6, 0, IPV6_TLV_TNL_ENCAP_LIMIT, 1, IPV6_DEFAULT_TNL_ENCAP_LIMIT, 1, 1, 0))
PPPOE_VER_TYPE = 0x11  # struct pppoe_hdr: version 1, type 1
_PACK_IPHDR = struct.Struct("!BBHHHBBH4s4s").pack
_PACK_IPV6HDR = struct.Struct("!IHBB16s16s").pack
_PACK_PPPOE = struct.Struct("!BBHHH").pack
_PACK_VLAN = struct.Struct("!HH").pack
_ETH_HDR = struct.Struct("!12sH")  # struct ethhdr: h_dest and h_source (the plan's link-layer addresses), h_proto
_pack_eth_hdr = _ETH_HDR.pack_into  # bound once: once per fast-path packet


@functools.lru_cache(maxsize=65536)
def _ip(raw: bytes, v4: bool) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """The address object of a key's 16-byte union (cached: it is needed per packet for the next hop)."""
    return ipaddress.IPv4Address(raw[:4]) if v4 else ipaddress.IPv6Address(raw)


# --- verdicts ------------------------------------------------------------------

def _accept(kernel, ft: Flowtable, skb, rid: str, detail: str = "", th: FlowOffloadTuple | None = None) -> str:
    ft.count(ACCEPT, rid)
    if th is not None:
        slow = th.slow if th.slow is not None else {}
        slow[rid] = slow.get(rid, 0) + 1
        th.slow = slow
    kernel.account(skb, "slowpath")
    if (tap := kernel.verdict) is not None:  # Kernel.verdict: a run's pcapng
        tap(skb, f"slowpath {rid}")
    if kernel.tracing:
        kernel.trace(skb, f"flowtable @{ft.name}", f"slow path: {rid}", reason=rid, detail=detail)
    return ACCEPT


def _drop(kernel, ft: Flowtable, skb, rid: str, detail: str = "") -> str:
    ft.count(DROP, rid)
    skb.drop_reason = rid
    if (tap := kernel.verdict) is not None:
        tap(skb, f"drop {rid}")
    if kernel.tracing:
        kernel.trace(skb, f"flowtable @{ft.name}", f"drop: {rid}", reason=rid, detail=detail)
    return DROP


def _stolen(kernel, ft, skb, dev, how: str) -> None:
    ft.fastpath += 1  # Flowtable.count(STOLEN), inlined: once per fast-path packet
    if skb.tag is not None:
        kernel.account(skb, "fastpath")
    if (tap := kernel.verdict) is not None:
        tap(skb, "fastpath")
    if kernel.tracing:
        kernel.trace(skb, f"flowtable @{ft.name}", f"fast path: {how} on {dev.name}", dev=dev.name)


def _near_miss(ft: Flowtable, conntrack, key) -> None:
    """A miss whose addresses and ports belong to a flow: remember which key fields differed (for explain).

    The flow is found through conntrack, as the flow's keys were made from its conntrack tuples
    (flow_offload_alloc): the packet's addresses and ports find the ct and the direction, ``by_ct`` the
    connection's latest flow, if it is still in the table.  No index of its own (memory per flow entry);
    the answer per missing key is remembered until the next flow is added (``Flowtable.miss_memo``): a flow
    that never matches sends every packet of its connection here."""
    if not ft.flows:  # no flow at all: nothing to be near
        return
    memo = ft.miss_memo
    near = memo.get(key, _UNSEEN)
    if near is _UNSEEN:
        if len(memo) >= MISS_MEMO_MAX:  # bounded: a new key past it starts the memo afresh
            memo.clear()
        near = memo[key] = _near_flow(ft, conntrack, key)
    if near is None:
        return
    flow, d = near
    if not _live(ft, flow):  # freed since (a new flow clears the memo)
        return
    k = (flow.id, d)
    old = ft.near_misses.get(k)
    if old is None:
        ft.near_misses[k] = (tuple(key.differences(flow.tuplehash[d].key)), 1, key)
    else:
        ft.near_misses[k] = (old[0], old[1] + 1, old[2])


def _near_flow(ft: Flowtable, conntrack, key) -> tuple[FlowOffload, int] | None:
    """The live flow, and the direction, whose addresses and ports *key* has (see :func:`_near_miss`)."""
    v4 = key.l3proto == AF_INET
    # the key's l3proto is AF_INET / AF_INET6, the same numbers as conntrack's NFPROTO_IPV4 / NFPROTO_IPV6
    hit = conntrack.lookup(CtTuple(_ip(key.src, v4), _ip(key.dst, v4), key.sport, key.dport, key.l3proto,
                                   key.l4proto))
    if hit is None:
        return None
    ct, d = hit
    flow = ft.by_ct.get(ct.id)
    if flow is None or not _live(ft, flow):
        return None  # the connection has no flow here, or its latest one was freed
    return flow, d


def _live(ft: Flowtable, flow: FlowOffload) -> bool:
    """*flow* is still in the table (not freed by the GC)."""
    return ft.flows.get(flow.id) is flow


_UNSEEN = object()


# --- the hook --------------------------------------------------------------------

def nf_flow_offload_hook(kernel, ns_state, ft: Flowtable, skb, in_dev) -> str:
    """The flowtable's ingress hook for *skb* received on *in_dev*: ACCEPT, DROP or STOLEN.

    ``nf_flow_offload_ip_hook`` / ``nf_flow_offload_ipv6_hook``: the lookup,
    :func:`nf_flow_offload_forward` (the checks, then the packet's rewrite), then
    :func:`nf_flow_xmit_xfrm`, or :func:`nf_flow_tunnel_push` and the switch on the tuple's xmit type,
    answered by the tuple's transmit plan while it holds (see :func:`nf_flow_xmit_neigh`), and
    :func:`nf_flow_queue_xmit`.  The skb's header-access cost during the hook (copies, head
    reallocations, pulls of non-linear data) is added to ``ft.cost``.
    """
    copies = skb.copies
    reallocs = skb.reallocs
    copied = skb.bytes_copied
    bugs = skb.pull_bugs
    profile = kernel.profile
    try:
        # nf_flow_offload_lookup's parse (flowsim.kernel.flowtable.tuple): the closure of the profile and family,
        # called here for an IPv4/IPv6 skb; another protocol at an inet flowtable (in-band VLAN, PPPoE) takes the
        # inet hook's dispatch, nf_flow_offload_parse.  Its answer as it stands: (key, offset, hdrsize,
        # tun_hdr_size, tun_proto, ether_type) — the tuple and nf_flowtable_ctx — or (reason, detail)
        hook = ft.hook
        if hook is None or hook[0] is not profile:
            hook = ft.hook = (profile, *hook_parser(profile, ft.family))
        protocol = skb.protocol
        proto = hook[2] or (protocol if protocol in _IP_PROTOS else 0)
        if proto:
            res = hook[1](skb.data, skb.network_header, skb.mac_header + ETH_HLEN, skb.linear_end, protocol,
                          _new_tuple(Encap, (skb.vlan_tci, skb.vlan_proto)) if skb.vlan_present else None, proto,
                          skb, in_dev.ifindex, skb.buf)
        else:
            res, proto = nf_flow_offload_parse(skb, in_dev.ifindex, ft.family, profile)
        # flow_offload_lookup: the rhashtable lookup.  A failed parse's answer starts with its reason, a str, which
        # is no key: it misses too and is told apart there, so a packet with a flow pays for no test of the answer
        key = res[0]
        th = ft.table.get(key)
        if th is None:
            if len(res) == 2:
                return _accept(kernel, ft, skb, key, res[1])
            _near_miss(ft, ns_state.conntrack, key)
            # the detail is for the trace only: no text per packet otherwise (a flow that is never created
            # sends every packet of its connection here)
            return _accept(kernel, ft, skb, "no-flow-entry", str(key) if kernel.tracing else "")
        flow = th.flow
        if flow.flags & _TEARDOWN:
            return _accept(kernel, ft, skb, "flow-teardown", th=th)
        if flow.ct.status & IPS_DYING:
            return _accept(kernel, ft, skb, "ct-dying", th=th)
        if kernel.tracing:
            kernel.trace(skb, f"flowtable @{ft.name}",
                         f"lookup hit: flow {flow.id} {'original' if th.dir == 0 else 'reply'}", tuple=str(key))
        v4 = proto == ETH_P_IP  # nf_flow_offload_ip_hook, else nf_flow_offload_ipv6_hook
        # flow->tuplehash[!dir]: the half that is not this one (th.dir is a class attribute, slower to read)
        orig, reply = flow.tuplehash
        other = reply if th is orig else orig
        other_key = other.key
        try:
            verdict = nf_flow_offload_forward(kernel, ns_state, ft, skb, th, other, res, v4)
            if verdict is not None:
                return verdict
            # the hook's tail: XFRM first, else the tunnel push and the switch on tuple->xmit_type
            xmit_type = th.xmit.xmit_type
            if xmit_type == _XFRM:
                return nf_flow_xmit_xfrm(kernel, ns_state, ft, skb, th)
            if other_key.tun is None:  # nf_flow_tunnel_push returns at once: no call for the common case
                ip_daddr = other_key.src
            else:
                ip_daddr = nf_flow_tunnel_push(profile, ft, skb, th, other, v4)
            # the switch's answer is the tuple's transmit plan (egress device, link-layer addresses), kept while
            # the egress ifindex names the same device, the neighbour table is unchanged and the device has the
            # same MAC; the route is covered by the dst check, the device's state by dev_queue_xmit
            ns = ns_state.ns
            plan = th.plan
            if (plan is None or plan[0] != ns.neigh.version or ns.by_index.get(plan[4]) is not plan[3]
                    or plan[1] is not plan[3].mac):
                xmit = XMIT.get(xmit_type)
                if xmit is None:  # default: WARN_ON_ONCE(1); NF_DROP
                    return _drop(kernel, ft, skb, "xmit-type-unknown", xmit_type.name)
                plan = xmit(kernel, ns_state, ft, skb, th, other, ip_daddr, v4)
                if plan.__class__ is str:  # the verdict: dropped, or (≤ 6.18 NEIGH) sent by neigh_xmit
                    return plan
            return nf_flow_queue_xmit(kernel, ft, skb, th, other, plan[3], plan[2])
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


def nf_flow_offload_forward(kernel, ns_state, ft: Flowtable, skb, th: FlowOffloadTuple, other: FlowOffloadTuple,
                            parsed: tuple, v4: bool) -> str | None:
    """``nf_flow_offload_forward``: None when the packet goes on to the transmit, else the verdict.

    The checks that send the packet to the slow path (MTU, TCP state, stale
    route), writability, the refresh, then the packet's own rewrite: pop,
    NAT, TTL / hop limit and the counters.
    """
    # the parse's answer: the tuple (th's key) and nf_flowtable_ctx as the parse left it
    key, offset, hdrsize, tun_hdr_size, tun_proto, _ether_type = parsed
    flow = th.flow
    buf = skb.buf
    data = skb.data
    # the (inner) header's length: the parse sent an IPv4 header with options to the slow path (ip_has_options)
    thoff = offset + (IPV4_HLEN if v4 else IPV6_HLEN)  # from skb->data (= the network header at ingress)
    l4proto = key.l4proto  # iph->protocol / ip6h->nexthdr, as the parse read it into the key
    x = th.xmit  # the route's part of the tuple (FlowXmit)
    mtu = x.mtu + offset
    if other.key.tun is not None:  # the other tuple's tun_num: this direction pushes a tunnel
        mtu -= IPIP_TUNNEL_HLEN if v4 else IP6IP6_TUNNEL_HLEN + (8 if kernel.profile.ip6ip6_tx_encap_limit else 0)
    if len(buf) - data > mtu:  # nf_flow_exceeds_mtu (skb->len), skb_gso_validate_network_len for GSO
        l4len = (buf[data + thoff + TCPH_DOFF] >> 4) * 4 if l4proto == IPPROTO_TCP else UDPH_HLEN
        if not (skb.gso_size and thoff + l4len + skb.gso_size <= mtu):
            return _accept(kernel, ft, skb, "mtu-exceeded", f"length {skb.len} > flow MTU {mtu}", th)
    if l4proto == IPPROTO_TCP:  # nf_flow_state_check
        flags = buf[data + thoff + TCPH_FLAGS]
        if flags & TCP_SYN and flow.flags & _CLOSING:
            ft.flow_offload_teardown(flow, kernel, ns_state, "SYN on a CLOSING flow")
            return _accept(kernel, ft, skb, "tcp-syn-closing", th=th)
        if flags & (TCP_FIN | TCP_RST):
            if kernel.profile.tcp_fin_rst == "teardown":
                ft.flow_offload_teardown(flow, kernel, ns_state, "TCP FIN/RST")
                return _accept(kernel, ft, skb, "tcp-fin-rst", th=th)
            flow.set(NF_FLOW_CLOSING)
    # nf_flow_dst_check: a NEIGH/XFRM tuple's dst_check (DIRECT tuples keep no dst; from 7.2, switch
    # direct_tunnel_dst, "if (!tuple->dst_cache) return true": a DIRECT tuple pushing a tunnel keeps one and is
    # checked too); the answer of the last check stands while the FIB has not changed at all (th.dst_checked)
    if x.xmit_type != _DIRECT or (x.dst is not None and kernel.profile.direct_tunnel_dst):
        fib = ns_state.ns.fib
        if th.dst_checked != fib.version:
            if not fib.dst_check(x.dst, x.dst_cookie):
                ft.flow_offload_teardown(flow, kernel, ns_state, "route obsolete")
                return _accept(kernel, ft, skb, "route-stale", _stale_detail(x.dst), th)
            th.dst_checked = fib.version
    if data + thoff + hdrsize > skb.linear_end and not skb.ensure_writable(thoff + hdrsize):
        return _drop(kernel, ft, skb, "not-writable")  # skb_try_make_writable
    ft.flow_offload_refresh(flow, kernel.now)

    if key.encap:
        nf_flow_encap_pop(tun_proto, tun_hdr_size, skb, th)
        data = skb.data
    elif tun_proto and skb.protocol in _IP_PROTOS:
        # nf_flow_ip_tunnel_pop alone, the common tunnel case: skb_pull inlined when the bytes are linear
        if data + tun_hdr_size <= skb.linear_end:
            data = skb.data = data + tun_hdr_size
        else:
            skb.pull(tun_hdr_size)  # raises SkbPullBug
            data = skb.data
        skb.network_header = data
    if flow.flags & _NAT_FLAGS:
        _nat(flow, th.dir, skb, v4)
    if v4:
        ip_decrease_ttl(buf, data)
    else:
        buf[data + IP6H_HOP_LIMIT] -= 1  # ipv6_hdr(skb)->hop_limit--
    if ft.flags & NF_FLOWTABLE_COUNTER:
        nf_ct_acct_update(flow.ct, th.dir, len(buf) - data)
    th.packets += 1
    th.bytes += len(buf) - data  # skb->len
    return None


def nf_flow_queue_xmit(kernel, ft: Flowtable, skb, th: FlowOffloadTuple, other: FlowOffloadTuple, outdev,
                       hh: bytes | None) -> str:
    """``nf_flow_queue_xmit``: L2 encapsulation of the *other* tuple (6.19 on: ``nf_flow_encap_push``; up to
    6.18 nothing is pushed, the VLAN or PPPoE device *outdev* adds its header), the Ethernet header,
    ``dev_queue_xmit``."""
    if other.key.encap and (order := kernel.profile.encap_push_order) != "legacy":
        if skb.gso_size and th.xmit.needs_gso_segment:
            return nf_flow_encap_gso_xmit(kernel, ft, skb, other, outdev, hh, order)
        if not nf_flow_encap_push(skb, other, order):
            return _drop(kernel, ft, skb, "encap-push-failed")
    if hh is not None and (data := skb.data) >= ETH_HLEN:
        # dev_hard_header's common case inlined (once per fast-path packet): skb_push into the headroom
        data = skb.data = data - ETH_HLEN
        _pack_eth_hdr(skb.buf, data, hh, skb.protocol)
        skb.mac_header = data
    else:
        _dev_hard_header(skb, hh)
    _stolen(kernel, ft, skb, outdev, "dev_queue_xmit")
    kernel.dev_queue_xmit(outdev, skb)
    return STOLEN


def _stale_detail(dst) -> str:
    """Why dst_check failed, in the words of the family's check."""
    dst = getattr(dst, "route", None) or dst
    if dst.version == 4:
        return f"{dst}: the IPv4 route cache was flushed since the flow was created (rt_genid)"
    return f"{dst}: its fib6 node changed or the route is gone since the flow was created (ip6_dst_check)"


# --- transmit ------------------------------------------------------------------------

def nf_flow_xmit_xfrm(kernel, ns_state, ft: Flowtable, skb, th: FlowOffloadTuple) -> str:
    """``nf_flow_xmit_xfrm``: IPCB reset, IPSKB_FORWARDED, ``skb_dst_set_noref`` (cached route),
    ``dst_output`` → the xfrm output."""
    dst = th.dst
    dev = ns_state.ns.devices.get(dst.dev) if dst is not None else None
    if dev is None:
        ft.flow_offload_teardown(th.flow, kernel, ns_state, "no egress device")
        return _drop(kernel, ft, skb, "no-egress-device")
    _stolen(kernel, ft, skb, dev, "xfrm_output")
    kernel.xfrm_output(ns_state, skb, dst)
    return STOLEN


def nf_flow_tunnel_push(profile, ft: Flowtable, skb, th: FlowOffloadTuple, other: FlowOffloadTuple,
                        v4: bool) -> bytes:
    """``nf_flow_tunnel_v4_push`` / ``nf_flow_tunnel_v6_push``: the outer header when the other tuple has a
    tunnel; returns the address the next hop is looked up for (``ip_daddr``: the outer destination then).
    """
    out_tun = other.key.tun
    if out_tun is None:
        return other.key.src
    dst = other.dst if profile.tunnel_push_dst == "opposite" else th.dst
    if dst is None:
        raise KernelBugError("tunnel push reads dst_cache of a tuple without a route (DIRECT): "
                             "bug fixed by 'move dst_cache/dst_cookie out of the runtime union'")
    if v4:
        nf_flow_tunnel_ipip_push(skb, other, bool(getattr(dst, "mtu_lock", False)), ft.next_ip_ident())
    else:
        nf_flow_tunnel_ip6ip6_push(skb, other, profile.ip6ip6_tx_encap_limit)
    if skb.gso_size:  # iptunnel_handle_offloads: segmentation will replicate the outer header
        skb.gso_type |= SKB_GSO_IPXIP4 if v4 else SKB_GSO_IPXIP6
    return out_tun.src


def nf_flow_xmit_neigh(kernel, ns_state, ft: Flowtable, skb, th: FlowOffloadTuple, other: FlowOffloadTuple,
                       ip_daddr: bytes, v4: bool) -> str | tuple:
    """``case FLOW_OFFLOAD_XMIT_NEIGH``: ≤ 6.18 ``neigh_xmit`` on the route's device (whose driver tags
    and encapsulates): the verdict; later the neighbour's addresses on ``tuple->ifidx``, the tuple's transmit
    plan for :func:`nf_flow_queue_xmit` (see :func:`_neigh_hh`), or the verdict of a failure."""
    ns = ns_state.ns
    x = th.xmit
    rt = x.dst
    if kernel.profile.encap_push_order == "legacy":
        dev = ns.devices.get(rt.dev) if rt is not None else None
        if rt is None or dev is None:
            ft.flow_offload_teardown(th.flow, kernel, ns_state, "no egress device")
            return _drop(kernel, ft, skb, "no-egress-device")
        _stolen(kernel, ft, skb, dev, "neigh_xmit")
        kernel.neigh_output(dev, skb, rt.nexthop(_ip(ip_daddr, v4)))
        return STOLEN
    outdev = ns.by_index.get(x.ifidx)
    if outdev is None:
        ft.flow_offload_teardown(th.flow, kernel, ns_state, f"egress ifindex {x.ifidx} not found")
        return _drop(kernel, ft, skb, "no-egress-device", f"ifindex {x.ifidx}")
    assert rt is not None  # flow_offload_fill_route gives every NEIGH tuple its route
    plan = th.plan = _neigh_hh(ft, ns, rt, outdev, x.ifidx, ip_daddr, v4)
    if plan is None:  # __neigh_create failed: the neighbour table is full
        ft.flow_offload_teardown(th.flow, kernel, ns_state, "neighbour table overflow")
        return _drop(kernel, ft, skb, "neigh-error", f"{rt.dev}: neighbour table overflow (gc_thresh3)")
    return plan


def nf_flow_xmit_direct(kernel, ns_state, ft: Flowtable, skb, th: FlowOffloadTuple, other: FlowOffloadTuple,
                        ip_daddr: bytes, v4: bool) -> str | tuple:
    """``case FLOW_OFFLOAD_XMIT_DIRECT``: the cached MACs on ``out.ifidx`` — up to 6.18 the path's first VLAN
    or PPPoE device (``info->outdev``), whose own xmit adds its header; ``out.hw_ifidx``, the real device,
    served only hardware offload (nf_flow_table_offload.c).  The tuple's transmit plan for
    :func:`nf_flow_queue_xmit`, or the verdict when the device is gone."""
    x = th.xmit
    ns = ns_state.ns
    outdev = ns.by_index.get(x.out_ifidx)
    if outdev is None:
        ft.flow_offload_teardown(th.flow, kernel, ns_state, f"egress ifindex {x.out_ifidx} not found")
        return _drop(kernel, ft, skb, "no-egress-device", f"ifindex {x.out_ifidx}")
    hh = mac_aton(x.h_dest) + mac_aton(x.h_source) if outdev.link_type == "ether" else None
    plan = th.plan = (ns.neigh.version, outdev.mac, hh, outdev, x.out_ifidx)
    return plan


#: the switch on ``tuple->xmit_type`` after the tunnel push (XFRM is handled before it, as in the kernel): the
#: tuple's transmit plan ``(neighbour table version, device MAC, link-layer addresses, egress device, its
#: ifindex)``, or the verdict
XMIT: dict[XmitType, Callable[..., str | tuple]] = {_NEIGH: nf_flow_xmit_neigh, _DIRECT: nf_flow_xmit_direct}


def _dev_hard_header(skb, hh: bytes | None) -> None:
    """``dev_hard_header``: the Ethernet header; a no-op on a device without header_ops (tunnels)."""
    if hh is not None:
        if skb.data >= ETH_HLEN:  # skb_push into the headroom (skb.push reallocates when there is none)
            skb.data -= ETH_HLEN
            _ETH_HDR.pack_into(skb.buf, skb.data, hh, skb.protocol)
        else:
            skb.push(_ETH_HDR.pack(hh, skb.protocol))
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
    return STOLEN


def _neigh_hh(ft: Flowtable, ns, rt, outdev, ifidx: int, ip_daddr: bytes, v4: bool) -> tuple | None:
    """The NEIGH xmit's plan: (neighbour table version, device MAC, dest + source or None, the device, *ifidx*,
    the ifindex it was found at).

    ip_neigh_gw4/6 for rt_nexthop(): the neighbour's current address, its state
    not checked; a missing entry is created (``NUD_NONE``, address zeros), and
    when the table is full that fails: None.  A tuple keeps the result while
    the neighbour table and the device's MAC are unchanged and *ifidx* names the
    same device (its route is covered by the dst check); tuples through the same
    next hop share one entry (ft.neigh_cache), so a busy flow holds a reference,
    not its own copy.
    """
    neigh_table = ns.neigh
    key = (rt.dev, ip_daddr, id(rt.gateway), ifidx)
    hit = ft.neigh_cache.get(key)
    if hit is not None and hit[0] is rt.gateway:
        entry = hit[1]
        if entry[0] == neigh_table.version and entry[3] is outdev and entry[1] is outdev.mac:
            return entry
    hh = None
    if outdev.link_type == "ether":
        nexthop = rt.nexthop(_ip(ip_daddr, v4))
        neigh = neigh_table.lookup(rt.dev, nexthop)
        if neigh is None:
            sysctl = f"net.ipv{4 if v4 else 6}.neigh.default.gc_thresh3"
            neigh = neigh_table.create(rt.dev, nexthop, ns.sysctl_int(sysctl, NEIGH_GC_THRESH3))
            if neigh is None:
                return None
        hh = mac_aton(neigh.lladdr) + mac_aton(outdev.mac)
    entry = (neigh_table.version, outdev.mac, hh, outdev, ifidx)
    ft.neigh_cache[key] = (rt.gateway, entry)  # the gateway object is kept so its id stays unique
    return entry


# --- pop ---------------------------------------------------------------------------

def nf_flow_encap_pop(tun_proto: int, tun_hdr_size: int, skb, th: FlowOffloadTuple) -> None:
    """``nf_flow_encap_pop``: as many L2 layers as the flow's tuple has, then the tunnel header (``ctx->tun``)."""
    for _ in range(th.encap_num):
        if skb.vlan_present:
            skb.vlan_hwaccel_clear_tag()
            continue
        d = skb.data
        if skb.protocol == ETH_P_8021Q:
            encap = (skb.buf[d + 2] << 8) | skb.buf[d + 3]  # vlan_hdr.h_vlan_encapsulated_proto
            skb.pull(VLAN_HLEN)
            skb.protocol = encap
        elif skb.protocol == ETH_P_PPP_SES:
            skb.protocol = pppoe_proto_to_ethertype((skb.buf[d + 6] << 8) | skb.buf[d + 7])  # the PPP protocol
            skb.pull(PPPOE_SES_HLEN)
        skb.reset_network_header()
    if skb.protocol in _IP_PROTOS and tun_proto in (IPPROTO_IPIP, IPPROTO_IPV6):
        skb.pull(tun_hdr_size)  # nf_flow_ip_tunnel_pop
        skb.reset_network_header()


# --- NAT and TTL: nf_flow_nat_ip / nf_flow_nat_ipv6, ip_decrease_ttl ----------------------

def _l4_csum_at(l4proto: int, thoff: int) -> int | None:
    if l4proto == IPPROTO_TCP:
        return thoff + TCPH_CHECK
    if l4proto == IPPROTO_UDP:
        return thoff + UDPH_CHECK
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
    l4proto = buf[nh + IPH_PROTOCOL] if v4 else buf[nh + IP6H_NEXTHDR]
    thoff = nh + (IPV4_HLEN if v4 else IPV6_HLEN)
    csum_at = _l4_csum_at(l4proto, thoff)
    orig, reply = flow.tuplehash[0].key, flow.tuplehash[1].key
    alen = 4 if v4 else 16
    src_at, dst_at = (nh + IPH_SADDR, nh + IPH_DADDR) if v4 else (nh + IP6H_SADDR, nh + IP6H_DADDR)
    edits = []  # (field, new address bytes, new port)
    if snat:
        edits.append(("src", reply.dst, reply.dport) if dir == 0 else ("dst", orig.src, orig.sport))
    if dnat:
        edits.append(("dst", reply.src, reply.sport) if dir == 0 else ("src", orig.dst, orig.dport))
    for field, addr, port in edits:
        if csum_at is not None:  # nf_flow_snat_port / nf_flow_dnat_port
            p_at = thoff + (TCPH_SOURCE if field == "src" else TCPH_DEST)  # same offsets in udphdr
            old_p = bytes(buf[p_at:p_at + 2])
            new_p = port.to_bytes(2, "big")
            buf[p_at:p_at + 2] = new_p
            _replace_l4(buf, l4proto, csum_at, old_p, new_p)
        a_at = src_at if field == "src" else dst_at
        old_a = bytes(buf[a_at:a_at + alen])
        new_a = addr[:alen]
        buf[a_at:a_at + alen] = new_a
        if v4:  # csum_replace4(&iph->check, ...)
            check = (buf[nh + IPH_CHECK] << 8) | buf[nh + IPH_CHECK + 1]
            buf[nh + IPH_CHECK:nh + IPH_CHECK + 2] = csum_replace(check, old_a, new_a).to_bytes(2, "big")
        _replace_l4(buf, l4proto, csum_at, old_a, new_a)  # the pseudo-header


def ip_decrease_ttl(buf, nh: int) -> None:
    """``ip_decrease_ttl``: TTL − 1 with the incremental header checksum update (TTL and protocol word)."""
    old = bytes(buf[nh + IPH_TTL:nh + IPH_TTL + 2])
    buf[nh + IPH_TTL] -= 1
    check = (buf[nh + IPH_CHECK] << 8) | buf[nh + IPH_CHECK + 1]
    new = bytes(buf[nh + IPH_TTL:nh + IPH_TTL + 2])
    buf[nh + IPH_CHECK:nh + IPH_CHECK + 2] = csum_replace(check, old, new).to_bytes(2, "big")


# --- tunnel push: nf_flow_tunnel_ipip_push / nf_flow_tunnel_ip6ip6_push ------------------

def nf_flow_tunnel_ipip_push(skb, other: FlowOffloadTuple, mtu_locked: bool, ident: int) -> None:
    """``nf_flow_tunnel_ipip_push``: a 20-byte outer header from the inner one's TOS/TTL/frag_off."""
    buf, nh = skb.buf, skb.data
    tos, ttl = buf[nh + IPH_TOS], buf[nh + IPH_TTL]
    frag_off = 0 if mtu_locked else (buf[nh + IPH_FRAG_OFF] << 8) | buf[nh + IPH_FRAG_OFF + 1]
    tun = other.key.tun
    assert tun is not None  # the caller pushes only for a tuple with a tunnel
    hdr = bytearray(_PACK_IPHDR(0x45, tos, skb.len + IPIP_TUNNEL_HLEN, ident, frag_off, ttl,
                                tun.l3_proto, 0, tun.dst[:4], tun.src[:4]))
    hdr[IPH_CHECK:IPH_CHECK + 2] = internet_checksum(hdr).to_bytes(2, "big")
    skb.push(bytes(hdr))
    skb.reset_network_header()


def nf_flow_tunnel_ip6ip6_push(skb, other: FlowOffloadTuple, encap_limit: bool) -> None:
    """``nf_flow_tunnel_ip6ip6_push``: the optional encap-limit destination option
    (``ip6_tnl_build_encap_limit`` layout), then the IPv6 header."""
    buf, nh = skb.buf, skb.data
    tclass = ((buf[nh] & 0x0F) << 4) | (buf[nh + 1] >> 4)
    hop_limit = buf[nh + IP6H_HOP_LIMIT]
    proto = IPPROTO_IPV6
    if encap_limit:
        skb.push(_ENCAP_LIMIT_DESTOPT)
        proto = NEXTHDR_DEST
    tun = other.key.tun
    assert tun is not None  # the caller pushes only for a tuple with a tunnel
    # ip6_make_flowlabel: from the flow hash; any stable 20-bit value of the inner flow will do
    label = int.from_bytes(bytes(buf[nh + IP6H_SADDR:nh + IPV6_HLEN]), "big") % 0xFFFFF or 1
    first = (6 << 28) | (tclass << 20) | label
    skb.push(_PACK_IPV6HDR(first, skb.len, proto, hop_limit, tun.dst, tun.src))
    skb.reset_network_header()


# --- L2 push: nf_flow_encap_push -----------------------------------------------------------

def nf_flow_vlan_push(skb, proto: int, tci: int) -> None:
    """``nf_flow_vlan_push`` (and ``skb_vlan_push``): a present hwaccel tag goes in-band first."""
    if skb.vlan_present:
        skb.push(_PACK_VLAN(skb.vlan_tci, skb.protocol))
        skb.protocol = skb.vlan_proto
        skb.reset_network_header()
    skb.vlan_hwaccel_put_tag(proto, tci)


def nf_flow_pppoe_push(skb, session: int) -> bool:
    """``nf_flow_pppoe_push``: only over IPv4/IPv6; length = payload + the 2-byte PPP protocol."""
    ppp = ETHERTYPE_TO_PPP.get(skb.protocol)
    if ppp is None:
        return False
    skb.push(_PACK_PPPOE(PPPOE_VER_TYPE, 0, session, skb.len + 2, ppp))
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
