"""Software GSO on real bytes: ``skb_gso_segment`` for TCP / UDP in IP-in-IP, UDP tunnels and ESP.

Theory of operation
-------------------
A GSO skb is one IP packet whose L4 payload is to be cut into ``gso_size``
chunks before it reaches a wire.  When the device cannot do that (PPP has no
GSO features; the flowtable fast path must segment before it pushes a PPPoE
header; ovpn and software ESP always segment) ``skb_gso_segment`` does it in
software by walking the offload callbacks from the outside in::

    inet_gso_segment / ipv6_gso_segment           the outer IP header
      ipip_gso_segment, sit_gso_segment,          one per IP-in-IP level: check
      ip4ip6_gso_segment, ip6ip6_gso_segment      SKB_GSO_IPXIP4/6, then recurse
      esp4_gso_segment / esp6_gso_segment         SKB_GSO_ESP with xfrm_offload: pull ESP + IV, then
        xfrm{4,6}_transport_gso_segment           inet_offloads[xo->proto], or
        xfrm{4,6}_tunnel_gso_segment              skb_mac_gso_segment on the inner IP packet
      udp4_ufo_fragment / udp6_ufo_fragment       with skb->encapsulation and SKB_GSO_UDP_TUNNEL(_CSUM):
        __skb_udp_tunnel_segment                  pull UDP + tunnel header (to the inner MAC header),
          skb_mac_gso_segment                     then the inner Ethernet frame's protocol
        inet_gso_segment / ipv6_gso_segment       the inner IP header
          tcp4_gso_segment / tcp6_gso_segment     → tcp_gso_segment
          udp4_ufo_fragment / udp6_ufo_fragment   → __udp_gso_segment

The tunnel and ESP levels read skb metadata, not bytes: the inner MAC header
offset and ``xfrm_offload(skb)`` (:class:`XfrmOffload`) are passed in; a
:class:`GsoSkb` holds them with the packet for the models.

Every check the kernel makes happens on the way in, before a byte is cut, so
:func:`_walk` does them in the kernel's order (truncated header, protocol
without a callback, gso_type bit missing) and raises :class:`GsoError` naming
the function and the errno it would return — including the kernel's less
obvious ones: an IPv6 fragment header or a truncated extension header ends
``ipv6_gso_pull_exthdrs`` on a protocol without a callback (-EPROTONOSUPPORT),
and SKB_GSO_TCP_FIXEDID on an IPv4 header without DF is -EPROTONOSUPPORT
from ``inet_gso_segment``.  The way out is
:func:`__skb_gso_segment`: L4 cuts the payload and fixes its header per chunk,
then each IP level, innermost first, puts its own header bytes back in front
with the per-segment fields fixed (IPv4 tot_len, id, checksum; IPv6
payload_len).  Everything else in a header — IPv4 options, TOS, TTL,
frag_off, IPv6 flow label and extension headers, TCP options — is copied from
the original bytes, as ``skb_segment`` copies the header area.

Where this model differs from the kernel, on purpose:

* the kernel returns -EINVAL when the payload fits in one segment
  (``skb->len <= mss`` in ``tcp_gso_segment`` / ``__udp_gso_segment``): the
  stack never builds such a GSO skb.  Here it yields one segment, so callers
  can segment unconditionally;
* checksums are computed in full over the pseudo-header (the IPv6 header's
  destination, routing headers are not followed), because the simulator's
  packets always carry complete checksums, not ``CHECKSUM_PARTIAL`` seeds.

The packet's length is the outermost header's (tot_len / 40 + payload_len);
inner length fields are ignored on the way in and rewritten on the way out,
as in the kernel, which works from ``skb->len``.  Jumbograms are not modelled.
"""

from __future__ import annotations

import struct

import attrs

from flowsim.errors import FlowsimError
from flowsim.kernel.headers import (
    ETH_P_IP, ETH_P_IPV6, IPPROTO_ESP, IPPROTO_IPIP, IPPROTO_IPV6, IPPROTO_TCP, IPPROTO_UDP, NEXTHDR_DEST,
    NEXTHDR_HOP, NEXTHDR_ROUTING, internet_checksum,
)
from flowsim.kernel.skb import NET_SKB_PAD, SkBuff

__all__ = [
    "SKB_GSO_TCPV4", "SKB_GSO_DODGY", "SKB_GSO_TCP_ECN", "SKB_GSO_TCP_FIXEDID", "SKB_GSO_TCPV6",
    "SKB_GSO_IPXIP4", "SKB_GSO_IPXIP6", "SKB_GSO_UDP_TUNNEL", "SKB_GSO_UDP_TUNNEL_CSUM", "SKB_GSO_ESP",
    "SKB_GSO_UDP_L4", "GsoError", "XfrmOffload", "GsoSkb", "gso_type_of", "skb_gso_network_seglen",
    "skb_gso_validate_network_len", "skb_gso_segment", "__skb_gso_segment",
]

# enum in include/linux/skbuff.h (the bits this model reads or sets)
SKB_GSO_TCPV4 = 1 << 0
SKB_GSO_DODGY = 1 << 1
SKB_GSO_TCP_ECN = 1 << 2
SKB_GSO_TCP_FIXEDID = 1 << 3
SKB_GSO_TCPV6 = 1 << 4
SKB_GSO_IPXIP4 = 1 << 8
SKB_GSO_IPXIP6 = 1 << 9
SKB_GSO_UDP_TUNNEL = 1 << 10
SKB_GSO_UDP_TUNNEL_CSUM = 1 << 11
SKB_GSO_ESP = 1 << 15
SKB_GSO_UDP_L4 = 1 << 17

_TCP_FIN, _TCP_PSH, _TCP_CWR = 0x01, 0x08, 0x80
_IP_DF = 0x4000
_ETH_HLEN = 14
# ipv6_gso_pull_exthdrs skips hop-by-hop and what is registered with INET6_PROTO_GSO_EXTHDR
# (routing, destination options).  The fragment header (44) is not: it ends the walk and,
# having no gso_segment callback, gives -EPROTONOSUPPORT.
_GSO_EXTHDRS = (NEXTHDR_HOP, NEXTHDR_ROUTING, NEXTHDR_DEST)

# inet_offloads[] / inet6_offloads[]: protocol → (callback, what follows, gso_type bit it requires).
# ESP's callbacks (esp4_offload.c / esp6_offload.c) check SKB_GSO_ESP themselves, after xfrm_offload(skb).
_INET_OFFLOADS = {
    IPPROTO_TCP: ("tcp4_gso_segment", "tcp", SKB_GSO_TCPV4),
    IPPROTO_UDP: ("udp4_ufo_fragment", "udp", SKB_GSO_UDP_L4),
    IPPROTO_IPIP: ("ipip_gso_segment", "ipv4", SKB_GSO_IPXIP4),
    IPPROTO_IPV6: ("sit_gso_segment", "ipv6", SKB_GSO_IPXIP4),
    IPPROTO_ESP: ("esp4_gso_segment", "esp", 0),
}
_INET6_OFFLOADS = {
    IPPROTO_TCP: ("tcp6_gso_segment", "tcp", SKB_GSO_TCPV6),
    IPPROTO_UDP: ("udp6_ufo_fragment", "udp", SKB_GSO_UDP_L4),
    IPPROTO_IPIP: ("ip4ip6_gso_segment", "ipv4", SKB_GSO_IPXIP6),
    IPPROTO_IPV6: ("ip6ip6_gso_segment", "ipv6", SKB_GSO_IPXIP6),
    IPPROTO_ESP: ("esp6_gso_segment", "esp", 0),
}
_L3_FUNC = {"ipv4": "inet_gso_segment", "ipv6": "ipv6_gso_segment"}
_ETHERTYPE_KIND = {ETH_P_IP: "ipv4", ETH_P_IPV6: "ipv6"}
_BIT_NAMES = {SKB_GSO_TCPV4: "SKB_GSO_TCPV4", SKB_GSO_TCPV6: "SKB_GSO_TCPV6", SKB_GSO_UDP_L4: "SKB_GSO_UDP_L4",
              SKB_GSO_IPXIP4: "SKB_GSO_IPXIP4", SKB_GSO_IPXIP6: "SKB_GSO_IPXIP6"}


class GsoError(FlowsimError, ValueError):
    """``skb_gso_segment`` would return ``ERR_PTR(errno)``: *func* is the kernel function that failed."""

    def __init__(self, func: str, errno_name: str, message: str):
        self.func = func
        self.errno_name = errno_name
        super().__init__(f"{func}: {errno_name}: {message}")


@attrs.frozen
class XfrmOffload:
    """What ``esp{4,6}_gso_segment`` reads of an skb's outbound SA (``xfrm_offload(skb)``, ``sp->xvec``).

    ``proto`` is ``xo->proto`` (the protocol ESP hides, written by
    ``esp{4,6}_gso_encap``); ``mode`` is ``x->outer_mode.encap``
    (``transport`` or ``tunnel``); ``spi`` is ``x->id.spi``; ``hlen`` is what
    the callback pulls, ``sizeof(struct ip_esp_hdr) + crypto_aead_ivsize``.
    """

    proto: int
    mode: str
    spi: int
    hlen: int = 16


@attrs.frozen
class _Hdr:
    """One header of the chain: kind, offset, length.

    Kinds: ``ipv4``, ``ipv6`` (with its extension headers), ``tcp``, ``udp``
    (the L4 header that is cut), ``esp`` (ESP header + IV), ``udptnl`` (a UDP
    tunnel's UDP header and tunnel header, up to ``skb_inner_mac_header``)
    and ``eth`` (the tunnel's inner Ethernet header).
    """

    kind: str
    off: int
    hlen: int
    fixedid: bool = False


def _walk(buf: bytes, gso_type: int | None, trace: list[str], inner_mac: int = -1,
          xo: XfrmOffload | None = None) -> tuple[list[_Hdr], int]:
    """The way in: parse and check the header chain as the callbacks do, outermost first.

    With *gso_type* None the SKB_GSO_* checks are skipped (for the helpers
    that only need the layout).  *inner_mac* is ``skb_inner_mac_header``
    from the network header (-1: ``skb->encapsulation`` is not set); *xo* is
    the skb's ``xfrm_offload``, without which ESP has no callback (as in a
    kernel without ``esp4_offload``/``esp6_offload``).  Returns the
    headers, L4 last, and the end of the packet (from the outermost length
    field).
    """
    version = buf[0] >> 4 if buf else 0
    if version not in (4, 6):
        # skb_mac_gso_segment finds no packet_offload for skb->protocol
        raise GsoError("skb_mac_gso_segment", "-EPROTONOSUPPORT", f"not an IPv4/IPv6 packet (version {version})")
    kind = "ipv4" if version == 4 else "ipv6"
    trace.append(_L3_FUNC[kind])
    chain: list[_Hdr] = []
    off, end = 0, len(buf)
    while kind in _L3_FUNC:
        func = _L3_FUNC[kind]
        if kind == "ipv4":
            # inet_gso_segment: pskb_may_pull(sizeof(*iph)), ihl >= 5, pskb_may_pull(ihl)
            ihl = (buf[off] & 0x0F) * 4 if end - off >= 20 else 0
            if end - off < 20 or ihl < 20 or end - off < ihl:
                raise GsoError(func, "-EINVAL", f"truncated or bad IPv4 header at offset {off} (ihl {ihl // 4})")
            if not chain:
                end = _outer_end(buf, struct.unpack_from("!H", buf, 2)[0], ihl, func)
            hlen, proto, table = ihl, buf[off + 9], _INET_OFFLOADS
        else:
            if end - off < 40:
                raise GsoError(func, "-EINVAL", f"truncated IPv6 header at offset {off}")
            if not chain:
                end = _outer_end(buf, 40 + struct.unpack_from("!H", buf, 4)[0], 40, func)
            proto, l4 = _ipv6_gso_pull_exthdrs(buf, off + 40, end, buf[off + 6])
            hlen, table = l4 - off, _INET6_OFFLOADS
        fixedid = False
        if kind == "ipv4" and gso_type is not None:
            # "if (!skb->encapsulation || encap)": FIXEDID applies to every header below the outermost
            # (or to the only one); the outer header of a tunnel always counts its id up.
            tunnel_outer = not chain and (proto in (IPPROTO_IPIP, IPPROTO_IPV6) or inner_mac >= 0)
            fixedid = bool(gso_type & SKB_GSO_TCP_FIXEDID) and not tunnel_outer
            if fixedid and not struct.unpack_from("!H", buf, off + 6)[0] & _IP_DF:
                raise GsoError(func, "-EPROTONOSUPPORT", "SKB_GSO_TCP_FIXEDID on an IPv4 header without DF")
        chain.append(_Hdr(kind, off, hlen, fixedid))
        if proto not in table or (proto == IPPROTO_ESP and xo is None):
            raise GsoError(func, "-EPROTONOSUPPORT", f"no gso_segment callback for protocol {proto}")
        name, kind, bit = table[proto]
        trace.append(name)
        off += hlen
        if kind == "esp":
            name, kind, bit = _esp_gso_segment(buf, off, end, gso_type, xo, name, table, chain, trace)
            off += xo.hlen if xo is not None else 0
        if kind == "udp" and inner_mac >= 0 and (gso_type is None
                                                 or gso_type & (SKB_GSO_UDP_TUNNEL | SKB_GSO_UDP_TUNNEL_CSUM)):
            # udp4_ufo_fragment: skb->encapsulation and a UDP_TUNNEL bit come before the L4 checks
            kind = _skb_udp_tunnel_segment(buf, off, end, inner_mac, chain, trace)
            off = inner_mac + _ETH_HLEN
        elif gso_type is not None and bit and not gso_type & bit:
            raise GsoError(name, "-EINVAL", f"gso_type {gso_type:#x} lacks the {_BIT_NAMES[bit]} bit")
        if kind in _L3_FUNC:
            trace.append(_L3_FUNC[kind])  # ipip_gso_segment & co. call inet_gso_segment / ipv6_gso_segment
    if kind == "tcp":
        if end - off < 20:  # tcp4/6_gso_segment: pskb_may_pull(sizeof(struct tcphdr))
            raise GsoError(name, "-EINVAL", f"truncated TCP header at offset {off}")
        thlen = (buf[off + 12] >> 4) * 4
        if thlen < 20 or end - off < thlen:  # tcp_gso_segment: doff < 5, pskb_may_pull(thlen)
            raise GsoError("tcp_gso_segment", "-EINVAL", f"bad TCP data offset {thlen // 4} at offset {off}")
        chain.append(_Hdr("tcp", off, thlen))
    else:
        if end - off < 8:  # udp4/6_ufo_fragment: pskb_may_pull(sizeof(struct udphdr))
            raise GsoError(name, "-EINVAL", f"truncated UDP header at offset {off}")
        trace.append("__udp_gso_segment")
        chain.append(_Hdr("udp", off, 8))
    return chain, end


def _esp_gso_segment(buf: bytes, off: int, end: int, gso_type: int | None, xo: XfrmOffload | None, name: str,
                     table: dict[int, tuple[str, str, int]], chain: list[_Hdr],
                     trace: list[str]) -> tuple[str, str, int]:
    """Mirror ``esp4_gso_segment`` / ``esp6_gso_segment`` and ``xfrm{4,6}_outer_mode_gso_segment``.

    Checks in the kernel's order (``xfrm_offload``, SKB_GSO_ESP, the SPI,
    ``pskb_may_pull`` of ESP header + IV, all -EINVAL), pulls ESP header + IV
    and hands over: tunnel mode to ``xfrm{4,6}_tunnel_gso_segment`` (the
    inner IP packet through ``skb_mac_gso_segment``, as before
    ``skb_eth_gso_segment`` existed), transport mode to
    ``xfrm{4,6}_transport_gso_segment`` (``transport_header +=
    header_len``, then ``inet_offloads[xo->proto]``).  Returns the next
    callback's entry of the offload table: name, what it reads, the gso_type
    bit it requires (none for the inner IP level of tunnel mode).
    """
    if xo is None:  # _walk found no callback without it
        raise GsoError(name, "-EINVAL", "no xfrm_offload on the skb")
    if gso_type is not None and not gso_type & SKB_GSO_ESP:
        raise GsoError(name, "-EINVAL", f"gso_type {gso_type:#x} lacks the SKB_GSO_ESP bit")
    if end - off < 4 or struct.unpack_from("!I", buf, off)[0] != xo.spi:
        raise GsoError(name, "-EINVAL", f"the ESP header at offset {off} does not carry the SA's SPI {xo.spi:#x}")
    if end - off < xo.hlen:
        raise GsoError(name, "-EINVAL", f"truncated ESP header + IV at offset {off}")
    chain.append(_Hdr("esp", off, xo.hlen))
    prefix = "xfrm4" if table is _INET_OFFLOADS else "xfrm6"
    if xo.mode == "tunnel":
        trace += [f"{prefix}_tunnel_gso_segment", "skb_mac_gso_segment"]
        return name, ("ipv4" if xo.proto == IPPROTO_IPIP else "ipv6"), 0
    if xo.mode != "transport":
        raise GsoError(f"{prefix}_outer_mode_gso_segment", "-EOPNOTSUPP", f"ESP GSO in {xo.mode} mode")
    trace.append(f"{prefix}_transport_gso_segment")
    if xo.proto not in table or table[xo.proto][1] == "esp":
        raise GsoError(f"{prefix}_transport_gso_segment", "-EINVAL", f"no gso_segment callback for {xo.proto}")
    name, kind, bit = table[xo.proto]
    trace.append(name)
    return name, kind, bit


def _skb_udp_tunnel_segment(buf: bytes, off: int, end: int, inner_mac: int, chain: list[_Hdr],
                            trace: list[str]) -> str:
    """Mirror ``skb_udp_tunnel_segment`` → ``__skb_udp_tunnel_segment`` for an Ethernet payload (vxlan, geneve).

    ``tnl_hlen = skb_inner_mac_header - skb_transport_header`` (UDP + tunnel
    header) must be pullable; then ``skb_mac_gso_segment`` reads the inner
    Ethernet type (``skb_network_protocol`` on ETH_P_TEB) and dispatches on it.
    """
    trace.append("__skb_udp_tunnel_segment")
    tnl_hlen = inner_mac - off
    if tnl_hlen < 8 or end - off < tnl_hlen:
        raise GsoError("__skb_udp_tunnel_segment", "-EINVAL", f"tunnel header of {tnl_hlen} bytes at offset {off}")
    chain.append(_Hdr("udptnl", off, tnl_hlen))
    trace.append("skb_mac_gso_segment")
    if end - inner_mac < _ETH_HLEN:
        raise GsoError("skb_mac_gso_segment", "-EINVAL", f"truncated inner Ethernet header at offset {inner_mac}")
    ethertype = struct.unpack_from("!H", buf, inner_mac + 12)[0]
    if ethertype not in _ETHERTYPE_KIND:
        raise GsoError("skb_mac_gso_segment", "-EPROTONOSUPPORT", f"no packet_offload for ethertype {ethertype:#06x}")
    chain.append(_Hdr("eth", inner_mac, _ETH_HLEN))
    return _ETHERTYPE_KIND[ethertype]


def _outer_end(buf: bytes, length: int, hlen: int, func: str) -> int:
    """``skb->len``: the outermost length field, which must cover its header and fit in the bytes given."""
    if not hlen <= length <= len(buf):
        raise GsoError(func, "-EINVAL", f"IP length {length} does not fit header {hlen} / {len(buf)} bytes given")
    return length


def _ipv6_gso_pull_exthdrs(buf: bytes, off: int, end: int, nexthdr: int) -> tuple[int, int]:
    """Mirror ``ipv6_gso_pull_exthdrs``: skip the extension headers GSO may copy; (protocol, L4 offset).

    A truncated extension header stops the walk with its own number as the
    protocol, which has no callback: -EPROTONOSUPPORT, as in the kernel.
    """
    while nexthdr in _GSO_EXTHDRS and end - off >= 8:
        optlen = (buf[off + 1] + 1) * 8  # ipv6_optlen
        if end - off < optlen:
            break
        nexthdr, off = buf[off], off + optlen
    return nexthdr, off


def _pseudo_sum(buf: bytes, ip: _Hdr, proto: int, length: int) -> int:
    """Unfolded pseudo-header sum (``csum_tcpudp_nofold`` / ``csum_ipv6_magic``) from *ip*'s addresses."""
    addrs = buf[ip.off + 12:ip.off + 20] if ip.kind == "ipv4" else buf[ip.off + 8:ip.off + 40]
    return sum(struct.unpack(f"!{len(addrs) // 2}H", addrs)) + proto + (length >> 16) + (length & 0xFFFF)


def _l4_segment(buf: bytes, ip: _Hdr, l4: _Hdr, end: int, mss: int) -> list[bytes]:
    """Mirror ``tcp_gso_segment`` / ``__udp_gso_segment``: cut the payload, fix the L4 header per chunk."""
    hdr, payload = buf[l4.off:l4.off + l4.hlen], buf[l4.off + l4.hlen:end]
    chunks = [payload[i:i + mss] for i in range(0, len(payload), mss)] or [b""]
    out = []
    if l4.kind == "tcp":
        seq, flags = struct.unpack_from("!I", hdr, 4)[0], hdr[13]
        for k, chunk in enumerate(chunks):
            th = bytearray(hdr)
            struct.pack_into("!I", th, 4, (seq + k * mss) & 0xFFFFFFFF)
            f = flags
            if k != len(chunks) - 1:
                f &= ~(_TCP_FIN | _TCP_PSH)  # th->fin = th->psh = 0 on all but the last segment
            if k:
                f &= ~_TCP_CWR  # th->cwr = 0 after the first: CWR acknowledges one window reduction
            th[13], th[16:18] = f, b"\0\0"
            seg = bytes(th) + chunk
            out.append(_with_check(seg, 16, internet_checksum(seg, _pseudo_sum(buf, ip, IPPROTO_TCP, len(seg)))))
        return out
    # IPv4 UDP may go without a checksum (RFC 768); keep that.  IPv6 UDP always has one (RFC 8200 §8.1).
    no_check = ip.kind == "ipv4" and hdr[6:8] == b"\0\0"
    for chunk in chunks:
        seg = hdr[:4] + struct.pack("!HH", 8 + len(chunk), 0) + chunk
        if not no_check:
            seg = _with_check(seg, 6, internet_checksum(seg, _pseudo_sum(buf, ip, IPPROTO_UDP, len(seg))) or 0xFFFF)
        out.append(seg)
    return out


def _with_check(seg: bytes, at: int, check: int) -> bytes:
    return seg[:at] + struct.pack("!H", check) + seg[at + 2:]


def _ip_wrap(buf: bytes, ip: _Hdr, k: int, inner: bytes) -> bytes:
    """The per-segment fix-up loop of ``inet_gso_segment`` / ``ipv6_gso_segment`` for segment *k*."""
    hdr = bytearray(buf[ip.off:ip.off + ip.hlen])
    if ip.kind == "ipv6":
        struct.pack_into("!H", hdr, 4, ip.hlen - 40 + len(inner))  # payload_len covers extension headers
        return bytes(hdr) + inner
    ident = struct.unpack_from("!H", hdr, 4)[0]
    if not ip.fixedid:
        ident = (ident + k) & 0xFFFF  # iph->id = htons(id++): each segment is a new datagram
    struct.pack_into("!HH", hdr, 2, ip.hlen + len(inner), ident)
    struct.pack_into("!H", hdr, 10, 0)
    struct.pack_into("!H", hdr, 10, internet_checksum(hdr))  # ip_send_check
    return bytes(hdr) + inner


def _udp_tunnel_wrap(buf: bytes, ip: _Hdr, tnl: _Hdr, need_csum: bool, inner: bytes) -> bytes:
    """The per-segment loop of ``__skb_udp_tunnel_segment``: UDP + tunnel header back, ``uh->len``, checksum.

    With SKB_GSO_UDP_TUNNEL_CSUM the UDP checksum is computed in full
    (``gso_make_checksum``, 0 sent as ``CSUM_MANGLED_0``); without it the
    field is left as the GSO skb had it.
    """
    seg = bytearray(buf[tnl.off:tnl.off + tnl.hlen]) + inner
    struct.pack_into("!H", seg, 4, len(seg))
    if need_csum:
        seg[6:8] = b"\0\0"
        struct.pack_into("!H", seg, 6, internet_checksum(seg, _pseudo_sum(buf, ip, IPPROTO_UDP, len(seg))) or 0xFFFF)
    return bytes(seg)


def _segment(buf: bytes, gso_size: int, gso_type: int, trace: list[str] | None, inner_mac: int,
             xo: XfrmOffload | None) -> tuple[list[bytes], int]:
    """The segments, and where each one's ``skb->transport_header`` is (from the network header).

    The way out, innermost first: L4 cuts the payload; every IP level puts
    its header back with the per-segment fields fixed; a UDP tunnel level
    its UDP header (length, checksum); ESP header + IV and an inner
    Ethernet header go back as they were (``skb_segment`` copies the header
    area).  The transport header is the innermost L4 header, which no level
    on the way out moves (``inet_gso_segment`` / ``ipv6_gso_segment`` only set
    the network header), except ``__skb_udp_tunnel_segment``, which sets it
    to the tunnel's UDP header (``skb_set_transport_header(skb, udp_offset)``).
    """
    if gso_size <= 0:
        raise GsoError("skb_gso_segment", "-EINVAL", f"gso_size must be positive, not {gso_size}")
    chain, end = _walk(buf, gso_type, trace if trace is not None else [], inner_mac, xo)
    l4, ip = chain[-1], chain[-2]  # L4 follows an IP header, except after ESP + IV in transport mode
    if ip.kind not in _L3_FUNC:
        ip = chain[-3]
    segs = _l4_segment(buf, ip, l4, end, gso_size)
    transport = l4.off
    for i in range(len(chain) - 2, -1, -1):
        h = chain[i]
        if h.kind in _L3_FUNC:
            segs = [_ip_wrap(buf, h, k, seg) for k, seg in enumerate(segs)]
        elif h.kind == "udptnl":
            ip = next(x for x in reversed(chain[:i]) if x.kind in _L3_FUNC)
            need_csum = bool(gso_type & SKB_GSO_UDP_TUNNEL_CSUM)
            segs = [_udp_tunnel_wrap(buf, ip, h, need_csum, seg) for seg in segs]
            transport = h.off
        else:  # esp, eth: copied with the header area
            head = buf[h.off:h.off + h.hlen]
            segs = [head + seg for seg in segs]
    return segs, transport


def __skb_gso_segment(packet, gso_size: int, gso_type: int, trace: list[str] | None = None, *,
                      inner_mac: int = -1, xo: XfrmOffload | None = None) -> list[bytes]:
    """Mirror ``__skb_gso_segment``: the segments of a GSO packet (IP bytes), each a complete IP packet.

    *trace*, if given, receives the callbacks passed through, outermost first
    (up to the one that failed when :class:`GsoError` is raised).
    *inner_mac* (``skb_inner_mac_header`` from the network header, for a UDP
    tunnel carrying Ethernet) and *xo* (``xfrm_offload(skb)``, for an
    SKB_GSO_ESP skb) are the skb metadata the tunnel and ESP callbacks read.
    """
    return _segment(bytes(packet), gso_size, gso_type, trace, inner_mac, xo)[0]


def skb_gso_segment(skb: SkBuff, *, inner_mac_header: int = -1, xo: XfrmOffload | None = None,
                    trace: list[str] | None = None) -> list[SkBuff]:
    """Mirror ``skb_gso_segment(skb, 0)``: a GSO skb as a list of new, non-GSO skbs, one per segment.

    The segments start at the network header; bytes already pushed in front
    of it (a link-layer header) are copied in front of every segment, and the
    skb's metadata (protocol, hwaccel tag, mark, ingress device, the
    simulator's tag) goes with each, as ``skb_segment`` copies the header.
    Each segment's ``transport_header`` is where the callbacks left it (see
    :func:`_segment`).  *inner_mac_header* (absolute, like the skb's other
    header offsets; -1 when ``skb->encapsulation`` is not set) and *xo*
    are the encapsulation and ESP metadata of :func:`__skb_gso_segment`.
    """
    l2 = bytes(skb.buf[skb.data:skb.network_header])
    inner_mac = inner_mac_header - skb.network_header if inner_mac_header >= 0 else -1
    segs, transport = _segment(bytes(skb.buf[skb.network_header:]), skb.gso_size, skb.gso_type, trace,
                               inner_mac, xo)
    out = []
    nh = NET_SKB_PAD + len(l2)
    for seg in segs:
        buf = bytearray(NET_SKB_PAD) + l2 + seg
        out.append(SkBuff(buf, NET_SKB_PAD, len(buf), NET_SKB_PAD, nh, nh + transport, skb.protocol,
                          skb.vlan_present, skb.vlan_proto, skb.vlan_tci, skb.iif, mark=skb.mark, tag=skb.tag,
                          sec_path=skb.sec_path))
    return out


@attrs.frozen
class GsoSkb:
    """A GSO skb as a sender hands it down: the packet bytes and the skb metadata segmentation reads.

    ``packet`` is the IP packet (from the network header); ``gso_size`` and
    ``gso_type`` are ``skb_shinfo(skb)``'s; ``inner_protocol`` is
    ``skb->inner_protocol`` (set by a tunnel driver, 0 otherwise);
    ``inner_mac`` is ``skb_inner_mac_header`` from the network header for a
    tunnel carrying Ethernet (-1: none); ``xo`` is ``xfrm_offload(skb)`` once
    ``esp{4,6}_gso_encap`` has marked it SKB_GSO_ESP.  A frozen value, so
    one GSO skb can be sent many times (the models replay it); :meth:`skb`
    gives the :class:`~flowsim.kernel.skb.SkBuff`, which has no fields for
    the inner headers or the xfrm offload state yet.
    """

    packet: bytes
    gso_size: int
    gso_type: int
    inner_protocol: int = 0
    inner_mac: int = -1
    xo: XfrmOffload | None = None

    def __len__(self) -> int:
        """``skb->len``."""
        return len(self.packet)

    @property
    def family(self) -> int:
        return self.packet[0] >> 4

    def skb(self) -> SkBuff:
        """The packet as an :class:`~flowsim.kernel.skb.SkBuff` at the network header, headroom in front."""
        buf = bytearray(NET_SKB_PAD) + self.packet
        proto = ETH_P_IP if self.family == 4 else ETH_P_IPV6
        return SkBuff(buf, NET_SKB_PAD, len(buf), NET_SKB_PAD, NET_SKB_PAD, NET_SKB_PAD, proto,
                      gso_size=self.gso_size, gso_type=self.gso_type)

    def segment(self, trace: list[str] | None = None) -> list[SkBuff]:
        """``skb_gso_segment(skb, 0)`` with this skb's encapsulation and ESP metadata."""
        inner_mac = NET_SKB_PAD + self.inner_mac if self.inner_mac >= 0 else -1
        return skb_gso_segment(self.skb(), inner_mac_header=inner_mac, xo=self.xo, trace=trace)


def gso_type_of(packet, inner_mac: int = -1) -> int:
    """The ``gso_type`` a sender sets for *packet*: the L4 bit, and one bit per tunnel level.

    IPXIP4/IPXIP6 per IP-in-IP level, from the outer header's family
    (``iptunnel_handle_offloads`` in ipip/sit set SKB_GSO_IPXIP4, ip6_tunnel
    sets SKB_GSO_IPXIP6); for a UDP tunnel (*inner_mac* given)
    SKB_GSO_UDP_TUNNEL_CSUM when its UDP header carries a checksum, else
    SKB_GSO_UDP_TUNNEL (``udp_tunnel_handle_offloads``).
    """
    buf = bytes(packet)
    chain, _end = _walk(buf, None, [], inner_mac)
    l4 = chain[-1]
    ips = [h for h in chain if h.kind in _L3_FUNC]
    gso_type = SKB_GSO_UDP_L4 if l4.kind == "udp" else SKB_GSO_TCPV4 if ips[-1].kind == "ipv4" else SKB_GSO_TCPV6
    for h, nxt in zip(chain, chain[1:]):
        if h.kind in _L3_FUNC and nxt.kind in _L3_FUNC:
            gso_type |= SKB_GSO_IPXIP4 if h.kind == "ipv4" else SKB_GSO_IPXIP6
        elif h.kind == "udptnl":
            gso_type |= SKB_GSO_UDP_TUNNEL_CSUM if buf[h.off + 6:h.off + 8] != b"\0\0" else SKB_GSO_UDP_TUNNEL
    return gso_type


def skb_gso_network_seglen(packet, gso_size: int) -> int:
    """Mirror ``skb_gso_network_seglen``: every header from the outer IP to the inner L4, plus ``gso_size``."""
    l4 = _walk(bytes(packet), None, [])[0][-1]
    return l4.off + l4.hlen + gso_size


def skb_gso_validate_network_len(packet, gso_size: int, mtu: int) -> bool:
    """Mirror ``skb_gso_validate_network_len``: do the segments fit an L3 MTU of *mtu*?"""
    return skb_gso_network_seglen(packet, gso_size) <= mtu
