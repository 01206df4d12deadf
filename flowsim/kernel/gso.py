"""Software GSO on real bytes: ``skb_gso_segment`` for TCP / UDP in any depth of IP-in-IP.

Theory of operation
-------------------
A GSO skb is one IP packet whose L4 payload is to be cut into ``gso_size``
chunks before it reaches a wire.  When the device cannot do that (PPP has no
GSO features; the flowtable fast path must segment before it pushes a PPPoE
header) ``skb_gso_segment`` does it in software by walking the offload
callbacks from the outside in::

    inet_gso_segment / ipv6_gso_segment           the outer IP header
      ipip_gso_segment, sit_gso_segment,          one per IP-in-IP level: check
      ip4ip6_gso_segment, ip6ip6_gso_segment      SKB_GSO_IPXIP4/6, then recurse
        inet_gso_segment / ipv6_gso_segment       the inner IP header
          tcp4_gso_segment / tcp6_gso_segment     → tcp_gso_segment
          udp4_ufo_fragment / udp6_ufo_fragment   → __udp_gso_segment

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
    IPPROTO_IPIP,
    IPPROTO_IPV6,
    IPPROTO_TCP,
    IPPROTO_UDP,
    NEXTHDR_DEST,
    NEXTHDR_HOP,
    NEXTHDR_ROUTING,
    internet_checksum,
)
from flowsim.kernel.skb import NET_SKB_PAD, SkBuff

__all__ = [
    "SKB_GSO_TCPV4", "SKB_GSO_DODGY", "SKB_GSO_TCP_ECN", "SKB_GSO_TCP_FIXEDID", "SKB_GSO_TCPV6",
    "SKB_GSO_IPXIP4", "SKB_GSO_IPXIP6", "SKB_GSO_UDP_L4", "GsoError", "gso_type_of",
    "skb_gso_network_seglen", "skb_gso_validate_network_len", "skb_gso_segment", "__skb_gso_segment",
]

# enum in include/linux/skbuff.h (the bits this model reads or sets)
SKB_GSO_TCPV4 = 1 << 0
SKB_GSO_DODGY = 1 << 1
SKB_GSO_TCP_ECN = 1 << 2
SKB_GSO_TCP_FIXEDID = 1 << 3
SKB_GSO_TCPV6 = 1 << 4
SKB_GSO_IPXIP4 = 1 << 8
SKB_GSO_IPXIP6 = 1 << 9
SKB_GSO_UDP_L4 = 1 << 17

_TCP_FIN, _TCP_PSH, _TCP_CWR = 0x01, 0x08, 0x80
_IP_DF = 0x4000
# ipv6_gso_pull_exthdrs skips hop-by-hop and what is registered with INET6_PROTO_GSO_EXTHDR
# (routing, destination options).  The fragment header (44) is not: it ends the walk and,
# having no gso_segment callback, gives -EPROTONOSUPPORT.
_GSO_EXTHDRS = (NEXTHDR_HOP, NEXTHDR_ROUTING, NEXTHDR_DEST)

# inet_offloads[] / inet6_offloads[]: protocol → (callback, what follows, gso_type bit it requires)
_INET_OFFLOADS = {
    IPPROTO_TCP: ("tcp4_gso_segment", "tcp", SKB_GSO_TCPV4),
    IPPROTO_UDP: ("udp4_ufo_fragment", "udp", SKB_GSO_UDP_L4),
    IPPROTO_IPIP: ("ipip_gso_segment", "ipv4", SKB_GSO_IPXIP4),
    IPPROTO_IPV6: ("sit_gso_segment", "ipv6", SKB_GSO_IPXIP4),
}
_INET6_OFFLOADS = {
    IPPROTO_TCP: ("tcp6_gso_segment", "tcp", SKB_GSO_TCPV6),
    IPPROTO_UDP: ("udp6_ufo_fragment", "udp", SKB_GSO_UDP_L4),
    IPPROTO_IPIP: ("ip4ip6_gso_segment", "ipv4", SKB_GSO_IPXIP6),
    IPPROTO_IPV6: ("ip6ip6_gso_segment", "ipv6", SKB_GSO_IPXIP6),
}
_L3_FUNC = {"ipv4": "inet_gso_segment", "ipv6": "ipv6_gso_segment"}
_BIT_NAMES = {SKB_GSO_TCPV4: "SKB_GSO_TCPV4", SKB_GSO_TCPV6: "SKB_GSO_TCPV6", SKB_GSO_UDP_L4: "SKB_GSO_UDP_L4",
              SKB_GSO_IPXIP4: "SKB_GSO_IPXIP4", SKB_GSO_IPXIP6: "SKB_GSO_IPXIP6"}


class GsoError(FlowsimError, ValueError):
    """``skb_gso_segment`` would return ``ERR_PTR(errno)``: *func* is the kernel function that failed."""

    def __init__(self, func: str, errno_name: str, message: str):
        self.func = func
        self.errno_name = errno_name
        super().__init__(f"{func}: {errno_name}: {message}")


@attrs.frozen
class _Hdr:
    """One header of the chain: kind (ipv4, ipv6, tcp, udp), offset, length (IPv6: with extension headers)."""

    kind: str
    off: int
    hlen: int
    fixedid: bool = False


def _walk(buf: bytes, gso_type: int | None, trace: list[str]) -> tuple[list[_Hdr], int]:
    """The way in: parse and check the header chain as the callbacks do, outermost first.

    With *gso_type* None the SKB_GSO_* checks are skipped (for the helpers
    that only need the layout).  Returns the headers, L4 last, and the end
    of the packet (from the outermost length field).
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
            tunnel_outer = not chain and proto in (IPPROTO_IPIP, IPPROTO_IPV6)
            fixedid = bool(gso_type & SKB_GSO_TCP_FIXEDID) and not tunnel_outer
            if fixedid and not struct.unpack_from("!H", buf, off + 6)[0] & _IP_DF:
                raise GsoError(func, "-EPROTONOSUPPORT", "SKB_GSO_TCP_FIXEDID on an IPv4 header without DF")
        chain.append(_Hdr(kind, off, hlen, fixedid))
        if proto not in table:
            raise GsoError(func, "-EPROTONOSUPPORT", f"no gso_segment callback for protocol {proto}")
        name, kind, bit = table[proto]
        trace.append(name)
        if gso_type is not None and not gso_type & bit:
            raise GsoError(name, "-EINVAL", f"gso_type {gso_type:#x} lacks the {_BIT_NAMES[bit]} bit")
        off += hlen
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


def __skb_gso_segment(packet, gso_size: int, gso_type: int, trace: list[str] | None = None) -> list[bytes]:
    """Mirror ``__skb_gso_segment``: the segments of a GSO packet (IP bytes), each a complete IP packet.

    *trace*, if given, receives the callbacks passed through, outermost first
    (up to the one that failed when :class:`GsoError` is raised).
    """
    if gso_size <= 0:
        raise GsoError("skb_gso_segment", "-EINVAL", f"gso_size must be positive, not {gso_size}")
    buf = bytes(packet)
    chain, end = _walk(buf, gso_type, trace if trace is not None else [])
    segs = _l4_segment(buf, chain[-2], chain[-1], end, gso_size)
    for ip in reversed(chain[:-1]):
        segs = [_ip_wrap(buf, ip, k, seg) for k, seg in enumerate(segs)]
    return segs


def skb_gso_segment(skb: SkBuff) -> list[SkBuff]:
    """Mirror ``skb_gso_segment(skb, 0)``: a GSO skb as a list of new, non-GSO skbs, one per segment.

    The segments start at the network header; bytes already pushed in front
    of it (a link-layer header) are copied in front of every segment, and the
    skb's metadata (protocol, hwaccel tag, mark, ingress device, the
    simulator's tag) goes with each, as ``skb_segment`` copies the header.
    """
    l2 = bytes(skb.buf[skb.data:skb.network_header])
    out = []
    for seg in __skb_gso_segment(memoryview(skb.buf)[skb.network_header:], skb.gso_size, skb.gso_type):
        buf = bytearray(NET_SKB_PAD) + l2 + seg
        nh = NET_SKB_PAD + len(l2)
        out.append(SkBuff(buf, NET_SKB_PAD, len(buf), NET_SKB_PAD, nh, nh, skb.protocol, skb.vlan_present,
                          skb.vlan_proto, skb.vlan_tci, skb.iif, mark=skb.mark, tag=skb.tag, sec_path=skb.sec_path))
    return out


def gso_type_of(packet) -> int:
    """The ``gso_type`` a sender sets for *packet*: the L4 bit, and IPXIP4/IPXIP6 per tunnel level.

    The tunnel bit is the outer header's family (``iptunnel_handle_offloads``
    in ipip/sit set SKB_GSO_IPXIP4, ip6_tunnel sets SKB_GSO_IPXIP6).
    """
    chain, _end = _walk(bytes(packet), None, [])
    *ips, l4 = chain
    gso_type = SKB_GSO_UDP_L4 if l4.kind == "udp" else SKB_GSO_TCPV4 if ips[-1].kind == "ipv4" else SKB_GSO_TCPV6
    for ip in ips[:-1]:
        gso_type |= SKB_GSO_IPXIP4 if ip.kind == "ipv4" else SKB_GSO_IPXIP6
    return gso_type


def skb_gso_network_seglen(packet, gso_size: int) -> int:
    """Mirror ``skb_gso_network_seglen``: every header from the outer IP to the inner L4, plus ``gso_size``."""
    l4 = _walk(bytes(packet), None, [])[0][-1]
    return l4.off + l4.hlen + gso_size


def skb_gso_validate_network_len(packet, gso_size: int, mtu: int) -> bool:
    """Mirror ``skb_gso_validate_network_len``: do the segments fit an L3 MTU of *mtu*?"""
    return skb_gso_network_seglen(packet, gso_size) <= mtu
