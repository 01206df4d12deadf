"""The step-by-step transcription of the flowtable hook's parse: the reference the one parser is proven against.

Why it is kept, and only here: this is the version of ``flowsim/kernel/flowtable/tuple.py``
before issue 16, one Python function per kernel function of ``net/netfilter/nf_flow_table_ip.c``
(``nf_flow_offload_inet_hook``, ``nf_flow_skb_encap_protocol``, ``nf_flow_ip4_tunnel_proto``,
``nf_flow_ip6_tunnel_proto``, ``nf_flow_tuple_ip``, ``nf_flow_tuple_ipv6``, ``nf_flow_tuple_encap``),
each reviewed against the kernel's C.  The package now has a single parser written for speed
(:mod:`flowsim.kernel.flowtable.tuple`, the functions inlined into one closure per profile and
family); ``tests/test_tuple_fast.py`` proves it equal to this transcription — tuple, reason,
detail, hook, every ``nf_flowtable_ctx`` field and the skb's cost counters — on every frame of the
corpus and on generated VLAN/QinQ/PPPoE/IPIP/IP6IP6 stacks.  Nothing in ``flowsim`` imports it.
"""

from __future__ import annotations

import struct
from typing import cast

from flowsim.kernel.flowtable.tuple import Encap, FlowtableCtx, FlowTuple, Tunnel, TupleResult
from flowsim.kernel.headers import (
    ETH_HLEN, ETH_P_8021AD, ETH_P_8021Q, ETH_P_IP, ETH_P_IPV6, ETH_P_PPP_SES, IPPROTO_GRE, IPPROTO_IPIP,
    IPPROTO_IPV6, IPV4_HLEN, IPV6_HLEN, L4_HDRSIZE, PPPOE_SES_HLEN, VLAN_HLEN, AF_INET, AF_INET6,
    ipv6_ext_hdr, ipv6_skip_exthdr, pppoe_proto_to_ethertype,
)
from flowsim.kernel.skb import SkBuff
from flowsim.profiles import Profile, get_profile

_ZERO12 = bytes(12)
_UNPACK_V4_ADDRS = struct.Struct("!4s4s").unpack_from
_UNPACK_V6_ADDRS = struct.Struct("!16s16s").unpack_from
_UNPACK_PORTS = struct.Struct("!HH").unpack_from
_new_tuple = tuple.__new__


# --- nf_flow_skb_encap_protocol and the tunnel checks ------------------------

def nf_flow_pppoe_proto(skb: SkBuff) -> int | None:
    """``nf_flow_pppoe_proto``: the mapped ethertype of a PPPoE session frame.

    Pulls ETH_HLEN + PPPOE_SES_HLEN bytes from ``skb->data`` (as the kernel
    does, although data already points past the Ethernet header); ``None``
    when that fails.  Unknown PPP protocols map to 0.
    """
    need = ETH_HLEN + PPPOE_SES_HLEN
    if skb.data + need > skb.linear_end and not skb.may_pull(need):
        return None
    buf = skb.buf
    at = skb.mac_header + ETH_HLEN + 6
    return pppoe_proto_to_ethertype((buf[at] << 8) | buf[at + 1])


def _pppoe_detail(skb: SkBuff) -> str:
    at = skb.mac_header + ETH_HLEN + 6
    raw = (skb.buf[at] << 8) | skb.buf[at + 1]
    if raw >> 8 in (0x21, 0x57) and raw & 0xFF:
        return f"PPP protocol field {raw:#06x} looks compressed (PFC): only 0x0021/0x0057 map to IPv4/IPv6"
    return f"PPP protocol {raw:#06x} is not the hook's protocol (0x0021 IPv4, 0x0057 IPv6)"


def nf_flow_ip4_tunnel_proto(ctx: FlowtableCtx, skb: SkBuff, profile: Profile) -> tuple[str, str] | None:
    """``nf_flow_ip4_tunnel_proto``: sanity checks of the (outer) IPv4 header; IPIP → skip it.

    Returns ``None`` when the packet may go on, else ``(reason, detail)``.
    """
    if skb.data + IPV4_HLEN + ctx.offset > skb.linear_end and not skb.may_pull(IPV4_HLEN + ctx.offset):
        return "header-truncated", f"IPv4 header needs {IPV4_HLEN + ctx.offset} bytes, packet has {skb.len}"
    buf = skb.buf
    o = skb.network_header + ctx.offset
    ihl = buf[o] & 0x0F
    if profile.ip4_tunnel_ihl_check and ihl < 5:
        return "ip-ihl-invalid", f"IPv4 IHL {ihl}"
    size = ihl << 2
    if ((buf[o + 6] << 8) | buf[o + 7]) & 0x3FFF:  # ip_is_fragment: MF or offset
        return "fragment", "IPv4 fragment"
    if size != IPV4_HLEN:  # ip_has_options
        return "ip-options", f"IPv4 header length {size}"
    if buf[o + 8] <= 1:
        return "ttl-expired", f"IPv4 TTL {buf[o + 8]}"
    if buf[o + 9] == IPPROTO_IPIP:
        ctx.tun_proto = IPPROTO_IPIP
        ctx.tun_hdr_size = size
        ctx.offset += size
    return None


def nf_flow_ip6_tunnel_proto(ctx: FlowtableCtx, skb: SkBuff, profile: Profile) -> tuple[str, str] | None:
    """``nf_flow_ip6_tunnel_proto``: hop limit and extension headers of the (outer) IPv6 header.

    7.0 reads the header with ``skb_header_pointer``, skips extension
    headers with ``ipv6_skip_exthdr`` and stores the *absolute* offset it
    returns as the tunnel header size; 7.1.5 pulls, sends any extension
    header to the slow path and stores the relative size (profile switches
    ``ip6_tunnel_header_access``, ``ip6_tunnel_exthdr``, ``ip6_tunnel_hdr_size``).
    """
    start = ctx.offset
    if profile.ip6_tunnel_header_access == "pull":
        if skb.data + IPV6_HLEN + start > skb.linear_end and not skb.may_pull(IPV6_HLEN + start):
            return "header-truncated", f"IPv6 header needs {IPV6_HLEN + start} bytes, packet has {skb.len}"
        o = skb.network_header + start
        hdr = skb.buf
    else:
        hdr = skb.header_pointer(start, IPV6_HLEN)
        if hdr is None:
            return "header-truncated", f"IPv6 header needs {IPV6_HLEN + start} bytes, packet has {skb.len}"
        o = 0
    hop_limit = hdr[o + 7]
    if hop_limit <= 1:
        return "ttl-expired", f"IPv6 hop limit {hop_limit}"
    nexthdr = hdr[o + 6]
    if profile.ip6_tunnel_exthdr == "slowpath":
        if ipv6_ext_hdr(nexthdr):
            return "ipv6-exthdr", f"extension header {nexthdr} after the IPv6 header"
        hdrlen = IPV6_HLEN + start
    else:
        hdrlen, nexthdr, _ = ipv6_skip_exthdr(skb.header_pointer, IPV6_HLEN + start, nexthdr)
        if hdrlen < 0:
            return "ipv6-exthdr-error", "IPv6 extension header chain cannot be walked"
    if nexthdr == IPPROTO_IPV6:
        # 7.0 stores the absolute offset (bug when an in-band header precedes).
        ctx.tun_hdr_size = hdrlen if profile.ip6_tunnel_hdr_size == "absolute" else hdrlen - start
        ctx.tun_proto = IPPROTO_IPV6
        ctx.offset += ctx.tun_hdr_size
    return None


_L3PROTO_UNSUPPORTED = ("l3proto-unsupported", "")


def nf_flow_skb_encap_protocol_ether_type(ctx: FlowtableCtx, skb: SkBuff,
                                          profile: Profile) -> tuple[str, str] | None:
    """``nf_flow_skb_encap_protocol`` of 7.3 (switch ``hook_ether_type_check``): skip one in-band VLAN/PPPoE
    header whatever it carries, record the protocol under it in ``ctx->ether_type`` (``skb->protocol`` for a
    plain IPv4/IPv6 packet), then run the tunnel check of that protocol.  The hook compares ``ctx->ether_type``
    with its own family afterwards (:func:`nf_flow_offload_lookup`)."""
    inner = skb.protocol
    if inner == ETH_P_8021Q:
        if skb.data + VLAN_HLEN > skb.linear_end and not skb.may_pull(VLAN_HLEN):
            return "header-truncated", "in-band 802.1Q header truncated"
        at = skb.mac_header + ETH_HLEN + 2
        ctx.ether_type = (skb.buf[at] << 8) | skb.buf[at + 1]  # veth->h_vlan_encapsulated_proto
        ctx.offset += VLAN_HLEN
        failed: tuple[str, str] | None = None  # ret = true: anything else is the hook's ether_type check
    elif inner == ETH_P_PPP_SES:
        mapped = nf_flow_pppoe_proto(skb)
        if mapped is None:
            return "header-truncated", "PPPoE session header truncated"
        ctx.ether_type = mapped  # 0 for a PPP protocol other than IPv4/IPv6
        ctx.offset += PPPOE_SES_HLEN
        failed = None
    elif inner in (ETH_P_IP, ETH_P_IPV6):
        ctx.ether_type = inner
        failed = None
    elif inner == ETH_P_8021AD:
        return "encap-unsupported", "in-band 802.1AD header (only the outer tag is untagged)"
    else:
        return "l3proto-unsupported", f"ethertype {inner:#06x}"
    if ctx.ether_type == ETH_P_IP and profile.ipip_rx:
        return nf_flow_ip4_tunnel_proto(ctx, skb, profile)
    if ctx.ether_type == ETH_P_IPV6 and profile.ip6ip6_rx:
        return nf_flow_ip6_tunnel_proto(ctx, skb, profile)
    return failed


def nf_flow_skb_encap_protocol(ctx: FlowtableCtx, skb: SkBuff, proto: int,
                               profile: Profile) -> tuple[str, str] | None:
    """``nf_flow_skb_encap_protocol``: skip one in-band VLAN/PPPoE header whose
    inner protocol is *proto*, then run the tunnel check of the inner protocol."""
    if profile.hook_ether_type_check:
        return nf_flow_skb_encap_protocol_ether_type(ctx, skb, profile)
    inner = skb.protocol
    failure: tuple[str, str] | None = _L3PROTO_UNSUPPORTED  # its detail is written only when it is returned
    if inner == ETH_P_8021Q:
        # pskb_may_pull(skb_mac_offset + sizeof(struct vlan_ethhdr)): 4 bytes past skb->data
        if skb.data + VLAN_HLEN > skb.linear_end and not skb.may_pull(VLAN_HLEN):
            return "header-truncated", "in-band 802.1Q header truncated"
        buf = skb.buf
        at = skb.mac_header + ETH_HLEN + 2
        encapsulated = (buf[at] << 8) | buf[at + 1]
        if encapsulated == proto:
            ctx.offset += VLAN_HLEN
            inner = proto
            failure = None
        else:
            failure = ("encap-unsupported", f"802.1Q header carries ethertype {encapsulated:#06x}")
    elif inner == ETH_P_PPP_SES:
        mapped = nf_flow_pppoe_proto(skb)
        if mapped is None:
            failure = ("header-truncated", "PPPoE session header truncated")
        else:
            inner = mapped  # set even when it is not *proto* (kernel quirk)
            if mapped == proto:
                ctx.offset += PPPOE_SES_HLEN
                failure = None
            else:
                failure = ("encap-unsupported", _pppoe_detail(skb))
    elif inner == ETH_P_8021AD:
        failure = ("encap-unsupported", "in-band 802.1AD header (only the outer tag is untagged)")

    if inner == ETH_P_IP:
        if profile.ipip_rx:
            return nf_flow_ip4_tunnel_proto(ctx, skb, profile)
        if proto == ETH_P_IP:
            return None
    elif inner == ETH_P_IPV6:
        if profile.ip6ip6_rx:
            return nf_flow_ip6_tunnel_proto(ctx, skb, profile)
        if proto == ETH_P_IPV6:
            return None
    if failure is _L3PROTO_UNSUPPORTED:
        return failure[0], f"ethertype {skb.protocol:#06x}"
    return failure


# --- the tuple builders -------------------------------------------------------

def _l4_ports(ctx: FlowtableCtx, skb: SkBuff, ipproto: int, thoff: int) -> tuple[int, int] | tuple[str, str]:
    """The L4 part shared by ``nf_flow_tuple_ip`` and ``nf_flow_tuple_ipv6``.

    (``pskb_may_pull`` calls are preceded by the linear-area test the kernel
    inlines, so the common case costs no call.)"""
    if skb.data + thoff + ctx.hdrsize > skb.linear_end and not skb.may_pull(thoff + ctx.hdrsize):
        return "header-truncated", f"L4 header needs {thoff + ctx.hdrsize} bytes, packet has {skb.len}"
    at = skb.network_header + thoff
    if ipproto == IPPROTO_GRE:
        if skb.buf[at + 1] & 0x07:  # GRE_VERSION bits of the flags word
            return "gre-version", f"GRE version {skb.buf[at + 1] & 0x07}"
        return 0, 0
    return _UNPACK_PORTS(skb.buf, at)


def nf_flow_tuple_ip(ctx: FlowtableCtx, skb: SkBuff, profile: Profile) -> FlowTuple | tuple[str, str]:
    """``nf_flow_tuple_ip``: checks of the (inner) IPv4 header and the key."""
    if skb.data + IPV4_HLEN + ctx.offset > skb.linear_end and not skb.may_pull(IPV4_HLEN + ctx.offset):
        return "header-truncated", f"IPv4 header needs {IPV4_HLEN + ctx.offset} bytes, packet has {skb.len}"
    buf = skb.buf
    o = skb.network_header + ctx.offset
    thoff = (buf[o] & 0x0F) * 4
    if ((buf[o + 6] << 8) | buf[o + 7]) & 0x3FFF:
        return "fragment", "IPv4 fragment"
    if thoff != IPV4_HLEN:
        return "ip-options", f"IPv4 header length {thoff}"
    thoff += ctx.offset
    ipproto = buf[o + 9]
    hdrsize = L4_HDRSIZE.get(ipproto)
    if hdrsize is None:
        return "l4proto-unsupported", f"IP protocol {ipproto}"
    ctx.hdrsize = hdrsize
    if buf[o + 8] <= 1:
        return "ttl-expired", f"IPv4 TTL {buf[o + 8]}"
    ports = _l4_ports(ctx, skb, ipproto, thoff)
    if isinstance(ports[0], str):
        return ports
    buf = skb.buf  # may_pull keeps the buffer, but be explicit after a pull
    src, dst = _UNPACK_V4_ADDRS(buf, o + 12)
    encap, tun = nf_flow_tuple_encap(ctx, skb, profile)
    return _new_tuple(FlowTuple, (src + _ZERO12, dst + _ZERO12, ports[0], ports[1], ctx.in_ifindex,
                                  AF_INET, ipproto, encap, tun))


def nf_flow_tuple_ipv6(ctx: FlowtableCtx, skb: SkBuff, profile: Profile) -> FlowTuple | tuple[str, str]:
    """``nf_flow_tuple_ipv6``: checks of the (inner) IPv6 header and the key."""
    thoff = IPV6_HLEN + ctx.offset
    if skb.data + thoff > skb.linear_end and not skb.may_pull(thoff):
        return "header-truncated", f"IPv6 header needs {thoff} bytes, packet has {skb.len}"
    buf = skb.buf
    o = skb.network_header + ctx.offset
    nexthdr = buf[o + 6]
    hdrsize = L4_HDRSIZE.get(nexthdr)
    if hdrsize is None:
        if ipv6_ext_hdr(nexthdr):
            return "ipv6-exthdr", f"IPv6 extension header {nexthdr}"
        return "l4proto-unsupported", f"IPv6 next header {nexthdr}"
    ctx.hdrsize = hdrsize
    if buf[o + 7] <= 1:
        return "ttl-expired", f"IPv6 hop limit {buf[o + 7]}"
    ports = _l4_ports(ctx, skb, nexthdr, thoff)
    if isinstance(ports[0], str):
        return ports
    src, dst = _UNPACK_V6_ADDRS(skb.buf, o + 8)
    encap, tun = nf_flow_tuple_encap(ctx, skb, profile)
    return _new_tuple(FlowTuple, (src, dst, ports[0], ports[1], ctx.in_ifindex, AF_INET6, nexthdr, encap, tun))


def nf_flow_tuple_encap(ctx: FlowtableCtx, skb: SkBuff, profile: Profile) -> tuple[tuple[Encap, ...], Tunnel | None]:
    """``nf_flow_tuple_encap``: the encap and tunnel fields of the key (nf_flow_table_ip.c).

    The hwaccel tag comes first with its full TCI (priority bits included);
    then one in-band 802.1Q (full TCI) or PPPoE (session id) header.  The
    tunnel fields are filled only when the compared protocol is IPv4/IPv6 —
    for PPPoE the raw PPP protocol is compared (through 7.2.13), so they stay empty; 7.3 compares
    ``ctx->ether_type``, the mapped one (switch ``tuple_encap_pppoe_proto``).
    """
    inner = skb.protocol
    offset = 0
    buf = skb.buf
    if not skb.vlan_present and inner != ETH_P_8021Q and inner != ETH_P_PPP_SES:
        if not ctx.tun_proto:
            return (), None  # the common case, kept cheap
        encap: tuple[Encap, ...] = ()  # a tunnel without L2 encapsulation: no list to build
    else:
        layers: list[Encap] = []
        if skb.vlan_present:
            layers.append(Encap(skb.vlan_tci, skb.vlan_proto))
        if inner == ETH_P_8021Q:
            at = skb.mac_header + ETH_HLEN
            layers.append(Encap((buf[at] << 8) | buf[at + 1], ETH_P_8021Q))
            inner = (buf[at + 2] << 8) | buf[at + 3]
            offset = VLAN_HLEN
        elif inner == ETH_P_PPP_SES:
            at = skb.network_header
            layers.append(Encap((buf[at + 2] << 8) | buf[at + 3], ETH_P_PPP_SES))
            inner = (buf[at + 6] << 8) | buf[at + 7]
            if profile.tuple_encap_pppoe_proto == "mapped":
                inner = pppoe_proto_to_ethertype(inner)
            offset = PPPOE_SES_HLEN
        encap = tuple(layers)
    tun = None
    o = skb.network_header + offset
    if inner == ETH_P_IP and ctx.tun_proto == IPPROTO_IPIP:
        src, dst = _UNPACK_V4_ADDRS(buf, o + 12)
        tun = _new_tuple(Tunnel, (src + _ZERO12, dst + _ZERO12, IPPROTO_IPIP))
    elif inner == ETH_P_IPV6 and ctx.tun_proto == IPPROTO_IPV6:
        src, dst = _UNPACK_V6_ADDRS(buf, o + 8)
        tun = _new_tuple(Tunnel, (src, dst, IPPROTO_IPV6))
    return encap, tun


# --- hook entry points ----------------------------------------------------------

def nf_flow_offload_inet_hook(skb: SkBuff) -> int | tuple[str, str]:
    """``nf_flow_offload_inet_hook``: the protocol whose hook handles this skb, or why none does."""
    proto = skb.protocol
    if proto == ETH_P_8021Q:
        if skb.data + VLAN_HLEN > skb.linear_end and not skb.may_pull(VLAN_HLEN):
            return "header-truncated", "in-band 802.1Q header truncated"
        at = skb.mac_header + ETH_HLEN + 2
        proto = (skb.buf[at] << 8) | skb.buf[at + 1]
    elif proto == ETH_P_PPP_SES:
        mapped = nf_flow_pppoe_proto(skb)
        if mapped is None:
            return "header-truncated", "PPPoE session header truncated"
        proto = mapped
    if proto in (ETH_P_IP, ETH_P_IPV6):
        return proto
    if skb.protocol == ETH_P_PPP_SES:
        return "encap-unsupported", _pppoe_detail(skb)
    if skb.protocol in (ETH_P_8021Q, ETH_P_8021AD):
        return "encap-unsupported", f"{skb.protocol:#06x} header carries ethertype {proto:#06x}"
    return "l3proto-unsupported", f"ethertype {proto:#06x}"


def reference_tuple_from_skb(skb: SkBuff, *, iifidx: int | None = None, family: str = "inet",
                             profile: Profile | str | None = None) -> TupleResult:
    """``flow_tuple_from_skb`` as it was: the hook of *family* up to the lookup."""
    if profile.__class__ is not Profile:
        profile = get_profile(profile)
    return nf_flow_offload_lookup(skb, skb.iif if iifidx is None else iifidx, family, profile)


def nf_flow_offload_lookup(skb: SkBuff, iifidx: int, family: str, profile: Profile) -> TupleResult:
    """``nf_flow_offload_lookup`` / ``nf_flow_offload_ipv6_lookup`` up to the table lookup, behind the
    inet hook's dispatch: :func:`flow_tuple_from_skb` with its arguments checked, once per packet."""
    ctx = FlowtableCtx(iifidx)
    if family == "ip":
        proto = ETH_P_IP
    elif family == "ip6":
        proto = ETH_P_IPV6
    else:
        proto = skb.protocol
        if proto != ETH_P_IP and proto != ETH_P_IPV6:  # the dispatch only has work to do for in-band headers
            dispatched = nf_flow_offload_inet_hook(skb)
            if isinstance(dispatched, tuple):
                return TupleResult(None, ctx, dispatched[0], dispatched[1], None)
            proto = dispatched
    failed = nf_flow_skb_encap_protocol(ctx, skb, proto, profile)
    if failed is not None:
        return TupleResult(None, ctx, failed[0], failed[1], "ipv4" if proto == ETH_P_IP else "ipv6")
    if profile.hook_ether_type_check and ctx.ether_type != proto:
        # 7.3 nf_flow_offload_ip_hook / _ipv6_hook: "if (unlikely(ctx.ether_type != htons(ETH_P_IP)))" → NF_ACCEPT
        # before the lookup: a packet (or in-band payload) of another family never reaches the tuple builder
        if skb.protocol == ctx.ether_type:
            reason, detail = "l3proto-unsupported", f"ethertype {ctx.ether_type:#06x} at the {family} hook"
        else:
            reason, detail = "encap-unsupported", (f"{skb.protocol:#06x} header carries ethertype "
                                                   f"{ctx.ether_type:#06x}, not the hook's {proto:#06x}")
        return TupleResult(None, ctx, reason, detail, "ipv4" if proto == ETH_P_IP else "ipv6")
    if proto == ETH_P_IP:
        built = nf_flow_tuple_ip(ctx, skb, profile)
        hook = "ipv4"
    else:
        built = nf_flow_tuple_ipv6(ctx, skb, profile)
        hook = "ipv6"
    if type(built) is tuple:  # not isinstance: a FlowTuple is a tuple too
        reason, detail = cast(tuple[str, str], built)
        return TupleResult(None, ctx, reason, detail, hook)
    return _new_tuple(TupleResult, (built, ctx, None, "", hook))
