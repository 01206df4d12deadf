"""Packet bytes for the slow path: parse, build, checksum, fragment and reassemble IP packets.

Theory of operation
-------------------
The slow path (:mod:`flowsim.kernel.stack.core`) keeps packets as :class:`~flowsim.kernel.skb.SkBuff`
bytes and reads what it needs from them at offsets, as the kernel's
``ip_rcv`` / ``ipv6_rcv`` do.  :func:`parse_ip` turns the IP header at an
offset into a :class:`PktInfo` (addresses, protocol after the IPv6
extension headers, ports, TCP flags, ICMP type, fragment fields); it returns
None for what ``ip_rcv_core`` would drop (bad version, header length, length
or IPv4 header checksum).  ``PktInfo`` is re-read whenever the bytes change
(NAT, DSCP), never patched by hand.

The builders make the packets hosts and the stack originate — IPv4 / IPv6
headers, TCP / UDP segments and ICMP / ICMPv6 errors — with complete
checksums (RFC 1071), so scapy's recomputation always agrees.  Changes to
forwarded packets use the incremental update of RFC 1624 instead, as the
kernel does (:func:`ip_decrease_ttl`, :func:`ipv4_change_dsfield`).

IPv4 fragmentation (:func:`ip_fragment`, ``ip_do_fragment``) and reassembly
(:class:`FragQueue`, ``ip_defrag``) work on whole L3 packets, and so do IPv6's
(:func:`ip6_fragment`, :class:`Frag6Queue`): routers never fragment IPv6
they did not reassemble (they answer Packet Too Big), but a host's UDP
datagram longer than the path MTU leaves as fragments, which conntrack
reassembles and the router's output cuts again.

    >>> pkt = build_ipv4(ipaddress.ip_address("10.0.0.1"), ipaddress.ip_address("10.0.0.2"), 17,
    ...                  udp_datagram(ipaddress.ip_address("10.0.0.1"), ipaddress.ip_address("10.0.0.2"), 1, 2, b"x"))
    >>> info = parse_ip(bytearray(pkt), 0)
    >>> (str(info.src), info.l4proto, info.sport, info.dport, info.tot_len)
    ('10.0.0.1', 17, 1, 2, 29)
"""

from __future__ import annotations

import bisect
import ipaddress
import struct
from typing import ClassVar

import attrs

from flowsim.errors import KernelBugError
from flowsim.kernel.headers import (
    ETH_P_IP, ETH_P_IPV6, IPPROTO_ICMP, IPPROTO_ICMPV6, IPPROTO_TCP, IPPROTO_UDP, IPV6_MIN_MTU, NEXTHDR_DEST,
    NEXTHDR_FRAGMENT, NEXTHDR_HOP, NEXTHDR_NONE, NEXTHDR_ROUTING, csum_replace, internet_checksum, ipv6_ext_hdr,
)
from flowsim.kernel.skb import HEADROOM, NET_SKB_PAD, ZEROS, SkbTag, SkBuff, buffer_of

__all__ = [
    "PktInfo", "parse_ip", "ip_addr", "build_ipv4", "build_ipv6", "tcp_segment", "udp_datagram", "l4_checksum",
    "AddrPair", "addr_pair", "ipv4_header", "ipv6_header", "tcp_header", "udp_header",
    "icmp_error", "ip_decrease_ttl", "ipv6_decrease_hoplimit", "ipv4_change_dsfield", "ipv6_change_dsfield",
    "ip_fragment", "ip_fraglist_fits", "ip_fraglist_fragment", "FragQueue", "ip6_find_1stfragopt", "ip6_fragment",
    "Frag6Queue", "InetFragQueue", "FragDiscard", "ipv6frag_thdr_truncated", "new_skb", "reparse_ip", "eth_header",
    "fix_l4_checksum", "pseudo_sum", "ICMP_DEST_UNREACH",
    "ICMP_TIME_EXCEEDED", "ICMP_FRAG_NEEDED", "ICMP_NET_UNREACH", "ICMP_PROT_UNREACH", "ICMP_EXC_TTL",
    "ICMPV6_DEST_UNREACH", "ICMPV6_PKT_TOOBIG", "ICMPV6_TIME_EXCEED", "ICMPV6_NOROUTE", "ICMPV6_PARAMPROB",
    "ICMPV6_HDR_FIELD", "ICMPV6_UNK_NEXTHDR", "ICMPV6_HDR_INCOMP", "ICMPV6_INFOMSG_MASK", "ICMP_ERROR_TYPES",
    "IP_DF", "IP_MF", "IP_OFFSET", "IPV6_MIN_MTU", "IP_DEFAULT_TTL",
]

IP_DF, IP_MF, IP_OFFSET = 0x4000, 0x2000, 0x1FFF
IP_DEFAULT_TTL = 64  # net.ipv4.ip_default_ttl, and the IPv6 default hop limit

# ICMP (RFC 792) and ICMPv6 (RFC 4443) types and codes the stack sends
ICMP_DEST_UNREACH, ICMP_TIME_EXCEEDED = 3, 11
ICMP_NET_UNREACH, ICMP_HOST_UNREACH, ICMP_PROT_UNREACH, ICMP_PORT_UNREACH, ICMP_FRAG_NEEDED = 0, 1, 2, 3, 4
ICMP_PKT_FILTERED = 13
ICMP_EXC_TTL = 0
ICMPV6_DEST_UNREACH, ICMPV6_PKT_TOOBIG, ICMPV6_TIME_EXCEED = 1, 2, 3
ICMPV6_NOROUTE, ICMPV6_ADM_PROHIBITED, ICMPV6_ADDR_UNREACH, ICMPV6_PORT_UNREACH = 0, 1, 3, 4
# Parameter Problem: erroneous field, unrecognised next header, headers cut
ICMPV6_PARAMPROB, ICMPV6_HDR_FIELD, ICMPV6_UNK_NEXTHDR, ICMPV6_HDR_INCOMP = 4, 0, 1, 3
ICMPV6_INFOMSG_MASK = 0x80  # types from 128 are informational; below, errors (include/uapi/linux/icmpv6.h)
#: error types per IP version (``icmp_is_err`` / ``icmpv6_is_err``): never answered with an error
ICMP_ERROR_TYPES = {4: frozenset({3, 4, 5, 11, 12}), 6: frozenset({1, 2, 3, 4})}

# the addresses as one field, source then destination: the key of an AddrPair
_V4 = struct.Struct("!BBHHHBBH8s")
_V6 = struct.Struct("!IHBB32s")
_EXT_HDRS = frozenset(n for n in range(256) if ipv6_ext_hdr(n))  # ipv6_ext_hdr as a set: no call per header
_PORTS = struct.Struct("!HH")
_TCP_PORTS_FLAGS = struct.Struct("!HH9xB")  # a TCP header's ports and flags (byte 13)
_PORT_PROTOS = frozenset({IPPROTO_TCP, IPPROTO_UDP})
_ICMP_PROTOS = frozenset({IPPROTO_ICMP, IPPROTO_ICMPV6})
_TCP = struct.Struct("!HHIIBBHHH")  # ports, seq, ack, data offset, flags, window, checksum, urgent pointer
_UDP = struct.Struct("!HHHH")


class _HashedOnce:
    """The parser's address: an ``IPv4Address`` / ``IPv6Address`` (never with a scope id) whose hash is computed
    once.

    ``IPv4Address.__hash__`` hashes ``hex(int(self._ip))``, a new string each time (``IPv6Address``'s a new
    tuple), and a packet's addresses are hashed about ten times per hop (routes, neighbours, sockets, conntrack
    tuples).  Equal to, hashed as and shown as the plain address; pickled as one.
    """

    __slots__ = ()  # "_hash" is the subclasses' slot: two bases with slots of their own cannot be combined
    _plain: ClassVar[type[ipaddress.IPv4Address] | type[ipaddress.IPv6Address]]
    _hash: int

    def __init__(self, address) -> None:
        super().__init__(address)  # type: ignore[call-arg]
        self._hash = hash(self._plain(address))  # type: ignore[misc]  # (the subclasses' slot)

    def __hash__(self) -> int:
        return self._hash

    def __repr__(self) -> str:
        return f"{self._plain.__name__}({str(self)!r})"

    def __reduce__(self):
        return self._plain, (self.packed,)


class _V4Addr(_HashedOnce, ipaddress.IPv4Address):
    __slots__ = ("_hash",)
    _plain = ipaddress.IPv4Address


class _V6Addr(_HashedOnce, ipaddress.IPv6Address):
    __slots__ = ("_hash",)
    _plain = ipaddress.IPv6Address


#: the parser's address objects by their packed bytes (4 or 16), and the pairs of them by source and destination
#: packed together (AddrPair): parse_ip finds a packet's addresses with one dict lookup (an lru_cache call costs
#: twice that).  Emptied when full, so that a run with many addresses keeps only the recent ones.
_ADDRS: dict[bytes, ipaddress.IPv4Address | ipaddress.IPv6Address] = {}
_PAIRS: dict[bytes, AddrPair] = {}
_CACHE_MAX = 8192


def _addr(raw: bytes) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """The parser's object for the packed address *raw* (after a miss in ``_ADDRS``)."""
    if len(_ADDRS) >= _CACHE_MAX:
        _ADDRS.clear()
    addr = _ADDRS[raw] = (_V4Addr if len(raw) == 4 else _V6Addr)(raw)
    return addr


def _pair(packed: bytes) -> AddrPair:
    """The parser's :class:`AddrPair` for the source and destination *packed* together (after a miss in
    ``_PAIRS``)."""
    if len(_PAIRS) >= _CACHE_MAX:
        _PAIRS.clear()
    half = len(packed) // 2
    s, d = packed[:half], packed[half:]
    src, dst = _ADDRS.get(s) or _addr(s), _ADDRS.get(d) or _addr(d)
    pair = _PAIRS[packed] = AddrPair(src, dst, src.version, packed, pseudo_sum(src, dst, 0, 0))
    return pair


def ip_addr(addr: ipaddress.IPv4Address | ipaddress.IPv6Address) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """The address object :func:`parse_ip` gives for *addr*'s value, or *addr* itself when that is not equal
    (an IPv6 scope id).

    A socket or route key holding the parser's own object is found by identity, without a Python-level
    ``IPv6Address.__eq__`` per packet (the caches keep the objects of the addresses in use).
    """
    packed = addr.packed
    parsed = _ADDRS.get(packed) or _addr(packed)
    return parsed if parsed == addr else addr


def new_skb(packet: bytes, tag: SkbTag | None, mark: int = 0, gso_size: int = 0, gso_type: int = 0) -> SkBuff:
    """An skb holding the L3 *packet* with the usual headroom (``alloc_skb`` + ``skb_reserve``)."""
    buf = buffer_of((HEADROOM, packet))
    # positional, in field order (buf, data, linear_end, mac, network, transport header, protocol, VLAN present,
    # proto, TCI, iif, gso_size, gso_type, tailroom, mark, tag): this runs for every packet a host or tunnel sends
    return SkBuff(buf, NET_SKB_PAD, len(buf), NET_SKB_PAD, NET_SKB_PAD, -1,
                  ETH_P_IP if packet[0] >> 4 == 4 else ETH_P_IPV6, False, 0, 0, 0, gso_size, gso_type, 0, mark, tag)


def eth_header(dst: bytes, src: bytes, proto: int) -> bytes:
    """``eth_header``: destination, source, ethertype."""
    return dst + src + proto.to_bytes(2, "big")


@attrs.define(slots=True)
class PktInfo:
    """What the slow path reads of one IP packet (``iphdr``/``ipv6hdr`` + the L4 ports).

    Offsets are absolute in the buffer.  ``frag`` is ``ip_is_fragment`` (or an
    IPv6 fragment header); ``first`` says the L4 header is present.
    """

    version: int
    l3off: int
    tot_len: int
    l4proto: int
    l4off: int
    src: ipaddress.IPv4Address | ipaddress.IPv6Address
    dst: ipaddress.IPv4Address | ipaddress.IPv6Address
    ttl: int
    dscp: int = 0
    df: bool = False
    mf: bool = False
    frag_off: int = 0  # in 8-byte units
    ident: int = 0
    frag: bool = False
    first: bool = True
    sport: int | None = None
    dport: int | None = None
    tcp_flags: int | None = None
    icmp_type: int | None = None
    icmp_code: int | None = None

    @property
    def nfproto(self) -> int:
        """NFPROTO_IPV4 (2) or NFPROTO_IPV6 (10)."""
        return 2 if self.version == 4 else 10

    @property
    def hlen(self) -> int:
        return self.l4off - self.l3off

    @property
    def is_icmp_error(self) -> bool:
        proto = IPPROTO_ICMP if self.version == 4 else IPPROTO_ICMPV6
        return self.l4proto == proto and self.icmp_type in ICMP_ERROR_TYPES[self.version]


def parse_ip(buf, off: int, end: int | None = None, *, quoted: bool = False) -> PktInfo | None:
    """The IP header at *off* (``ip_rcv_core`` / ``ipv6_rcv`` checks); None when the kernel would drop it.

    *quoted* reads the packet an ICMP error quotes: it may be truncated, and
    its length and header checksum are not checked.
    """
    if end is None:
        end = len(buf)
    if end - off < 1:
        return None
    # every field in a local first, the PktInfo built once at the end: this runs at every hop of every packet
    version = buf[off] >> 4
    df = mf = frag = False
    frag_off = ident = 0
    first = True
    src: ipaddress.IPv4Address | ipaddress.IPv6Address
    dst: ipaddress.IPv4Address | ipaddress.IPv6Address
    if version == 4:
        if end - off < 20:
            return None
        vihl, tos, tot_len, ident, fo, ttl, l4proto, _csum, addrs = _V4.unpack_from(buf, off)
        ihl = (vihl & 0x0F) * 4
        if ihl < 20 or off + ihl > end:
            return None
        if quoted:
            tot_len = min(tot_len, end - off)
        elif tot_len < ihl or off + tot_len > end or internet_checksum(buf[off:off + ihl]) != 0:
            return None
        pair = _PAIRS.get(addrs) or _pair(addrs)
        src, dst, dscp, l4off = pair.src, pair.dst, tos >> 2, off + ihl
        df, mf, frag_off = bool(fo & IP_DF), bool(fo & IP_MF), fo & IP_OFFSET
        frag, first = bool(fo & (IP_MF | IP_OFFSET)), not frag_off
    elif version == 6:
        if end - off < 40:
            return None
        word, plen, nh, ttl, addrs = _V6.unpack_from(buf, off)
        tot_len = 40 + plen
        if off + tot_len > end:
            if not quoted:
                return None
            tot_len = end - off
        # traffic class: bits 20..27 of the first word; DSCP its upper six
        pair = _PAIRS.get(addrs) or _pair(addrs)
        src, dst, dscp = pair.src, pair.dst, (word >> 22) & 0x3F
        pos, stop = off + 40, off + tot_len
        while nh in _EXT_HDRS:  # ipv6_ext_hdr; ipv6_skip_exthdr, remembering the fragment header
            if nh == 59 or pos + 8 > stop:
                return PktInfo(6, off, tot_len, 59, stop, src, dst, ttl, dscp, df, mf, frag_off, ident, frag, first)
            if nh == NEXTHDR_FRAGMENT:
                fo = (buf[pos + 2] << 8) | buf[pos + 3]
                frag, frag_off, mf = True, fo >> 3, bool(fo & 1)
                ident = int.from_bytes(buf[pos + 4:pos + 8], "big")
                first = not fo >> 3
                hdrlen = 8
            elif nh == 51:
                hdrlen = (buf[pos + 1] + 2) << 2
            else:
                hdrlen = (buf[pos + 1] + 1) << 3
            nh, pos = buf[pos], pos + hdrlen
            if not first:
                break
        l4proto, l4off = nh, pos
    else:
        return None
    sport = dport = tcp_flags = icmp_type = icmp_code = None
    if first:
        # the L4 header: ports, TCP flags, ICMP type/code (within the packet and the buffer)
        at = l4off
        if off + tot_len < end:
            end = off + tot_len
        if l4proto == IPPROTO_TCP and at + 14 <= end:
            sport, dport, tcp_flags = _TCP_PORTS_FLAGS.unpack_from(buf, at)
        elif l4proto in _PORT_PROTOS and at + 4 <= end:  # UDP, or a quoted TCP header cut short
            sport, dport = _PORTS.unpack_from(buf, at)
        elif l4proto in _ICMP_PROTOS and at + 2 <= end:
            icmp_type, icmp_code = buf[at], buf[at + 1]
            if at + 6 <= end:
                sport, dport = (buf[at + 4] << 8) | buf[at + 5], 0  # echo id, as conntrack keys it
    return PktInfo(version, off, tot_len, l4proto, l4off, src, dst, ttl, dscp, df, mf, frag_off, ident, frag, first,
                   sport, dport, tcp_flags, icmp_type, icmp_code)


# ----------------------------------------------------------------- building

def reparse_ip(buf: bytearray, off: int) -> PktInfo:
    """``parse_ip`` of a packet the stack itself has just written (NAT, GSO segments): valid by construction."""
    info = parse_ip(buf, off)
    if info is None:
        raise KernelBugError(f"the stack wrote an invalid IP header at offset {off}")
    return info


def build_ipv4(src, dst, proto: int, payload: bytes, *, ttl: int = IP_DEFAULT_TTL, tos: int = 0,
               ident: int = 0, df: bool = True, frag: int = 0) -> bytes:
    """An IPv4 header (no options, checksum computed) followed by *payload*."""
    return ipv4_header(src.packed + dst.packed, proto, len(payload), ttl, tos, ident, df, frag) + payload


def ipv4_header(addrs: bytes, proto: int, length: int, ttl: int = IP_DEFAULT_TTL, tos: int = 0, ident: int = 0,
                df: bool = True, frag: int = 0) -> bytes:
    """The IPv4 header (no options, checksum computed) of a packet carrying *length* bytes; *addrs* is the source
    and destination packed (:attr:`AddrPair.packed`)."""
    fo = (IP_DF if df else 0) | frag
    tot_len, ident = 20 + length, ident & 0xFFFF
    check = internet_checksum(_V4.pack(0x45, tos, tot_len, ident, fo, ttl, proto, 0, addrs))
    return _V4.pack(0x45, tos, tot_len, ident, fo, ttl, proto, check, addrs)


def build_ipv6(src, dst, nexthdr: int, payload: bytes, *, hlim: int = IP_DEFAULT_TTL, tclass: int = 0,
               flowlabel: int = 0) -> bytes:
    """An IPv6 header followed by *payload* (which may start with extension headers)."""
    return ipv6_header(src.packed + dst.packed, nexthdr, len(payload), hlim, tclass, flowlabel) + payload


def ipv6_header(addrs: bytes, nexthdr: int, length: int, hlim: int = IP_DEFAULT_TTL, tclass: int = 0,
                flowlabel: int = 0) -> bytes:
    """The IPv6 header of a packet carrying *length* bytes; *addrs* is the source and destination packed
    (:attr:`AddrPair.packed`)."""
    return _V6.pack((6 << 28) | (tclass << 20) | (flowlabel & 0xFFFFF), length, nexthdr, hlim, addrs)


@attrs.frozen(slots=True)
class AddrPair:
    """A source and a destination address with what the builders need of them, computed once: a socket sends
    thousands of packets between the same two addresses, and ``.packed`` and ``int()`` of an address object
    are Python-level calls.  :func:`parse_ip` and :func:`addr_pair` share one object per pair (``_PAIRS``).
    """

    src: ipaddress.IPv4Address | ipaddress.IPv6Address
    dst: ipaddress.IPv4Address | ipaddress.IPv6Address
    version: int
    packed: bytes  # source then destination, as the IP header carries them
    addr_sum: int  # pseudo_sum(src, dst, 0, 0): the pseudo-header's addresses


def addr_pair(src, dst) -> AddrPair:
    """The :class:`AddrPair` of *src* and *dst* holding the parser's objects for them (see :func:`ip_addr`): a
    socket keyed by them finds the packets :func:`parse_ip` reads by identity."""
    packed = src.packed + dst.packed
    pair = _PAIRS.get(packed) or _pair(packed)
    if pair.src == src and pair.dst == dst:
        return pair
    src, dst = ip_addr(src), ip_addr(dst)  # an IPv6 scope id: not the parser's pair
    return AddrPair(src, dst, src.version, packed, pseudo_sum(src, dst, 0, 0))


def pseudo_sum(src, dst, proto: int, length: int) -> int:
    """The unfolded sum of the pseudo-header (``csum_tcpudp_nofold`` / ``csum_ipv6_magic``), as a value with
    the same one's-complement sum: each address as one number (2**16 = 1 modulo 0xFFFF, see
    :func:`~flowsim.kernel.headers.internet_checksum`), zero only when the word sum is.

    *src* and *dst* may be addresses or their integer values; only their sum counts, so a precomputed
    :attr:`AddrPair.addr_sum` stands for both with *dst* 0."""
    return int(src) + int(dst) + proto + (length >> 16) + (length & 0xFFFF)


def l4_checksum(src, dst, proto: int, segment: bytes | bytearray) -> int:
    """TCP / UDP / ICMPv6 checksum over the pseudo-header and *segment* (whose checksum field is zero)."""
    return internet_checksum(segment, pseudo_sum(src, dst, proto, len(segment)))


def _segment_checksum(addr_sum: int, proto: int, hdr: bytes, payload: bytes) -> int:
    """:func:`l4_checksum` of the segment *hdr* + *payload* (*hdr* of even length, its checksum field zero)
    between the addresses whose sum is *addr_sum* (:attr:`AddrPair.addr_sum`).

    A payload of zeros, what the simulated hosts send, adds nothing to the one's-complement sum: only the
    header's words are summed then (the pseudo-header still counts the whole length) — a 20-byte remainder
    instead of a 1400-byte one per packet.
    """
    data = hdr if ZEROS.startswith(payload) else hdr + payload  # (a longer zero payload is summed)
    return internet_checksum(data, pseudo_sum(addr_sum, 0, proto, len(hdr) + len(payload)))


def tcp_segment(src, dst, sport: int, dport: int, seq: int, ack: int, flags: int, payload: bytes = b"",
                window: int = 65535, options: bytes = b"") -> bytes:
    """A TCP header (20 bytes and *options*, a multiple of 4 bytes) and *payload*, checksum included."""
    return tcp_header(pseudo_sum(src, dst, 0, 0), sport, dport, seq, ack, flags, payload, window, options) + payload


def tcp_header(addr_sum: int, sport: int, dport: int, seq: int, ack: int, flags: int, payload: bytes = b"",
               window: int = 65535, options: bytes = b"") -> bytes:
    """The TCP header (20 bytes and *options*, a multiple of 4 bytes) of a segment carrying *payload*, checksum
    included, between the addresses whose sum is *addr_sum* (:attr:`AddrPair.addr_sum`)."""
    seq, ack, doff = seq & 0xFFFFFFFF, ack & 0xFFFFFFFF, (5 + len(options) // 4) << 4
    check = _segment_checksum(addr_sum, IPPROTO_TCP, _TCP.pack(sport, dport, seq, ack, doff, flags, window, 0, 0)
                              + options, payload)
    return _TCP.pack(sport, dport, seq, ack, doff, flags, window, check, 0) + options


def udp_datagram(src, dst, sport: int, dport: int, payload: bytes = b"") -> bytes:
    """A UDP header and *payload*, checksum included (0 is sent as 0xFFFF)."""
    return udp_header(pseudo_sum(src, dst, 0, 0), sport, dport, payload) + payload


def udp_header(addr_sum: int, sport: int, dport: int, payload: bytes = b"") -> bytes:
    """The UDP header of a datagram carrying *payload*, checksum included (0 is sent as 0xFFFF), between the
    addresses whose sum is *addr_sum* (:attr:`AddrPair.addr_sum`)."""
    length = 8 + len(payload)
    check = _segment_checksum(addr_sum, IPPROTO_UDP, _UDP.pack(sport, dport, length, 0), payload) or 0xFFFF
    return _UDP.pack(sport, dport, length, check)


def fix_l4_checksum(buf: bytearray, info: PktInfo) -> None:
    """Recompute the L4 checksum of a whole (unfragmented) packet in place."""
    at, end = info.l4off, info.l3off + info.tot_len
    pos = {IPPROTO_TCP: 16, IPPROTO_UDP: 6, IPPROTO_ICMP: 2, IPPROTO_ICMPV6: 2}.get(info.l4proto)
    if pos is None or info.frag or at + pos + 2 > end:
        return
    buf[at + pos:at + pos + 2] = b"\0\0"
    if info.l4proto == IPPROTO_ICMP:
        check = internet_checksum(buf[at:end])
    else:
        check = l4_checksum(info.src, info.dst, info.l4proto, buf[at:end])
        if info.l4proto == IPPROTO_UDP and check == 0:
            check = 0xFFFF
    buf[at + pos:at + pos + 2] = check.to_bytes(2, "big")


def icmp_error(offending: bytes, info: PktInfo, src, icmp_type: int, code: int, info32: int = 0,
               ident: int = 0) -> bytes:
    """The L3 packet ``icmp_send`` / ``icmp6_send`` would send back to the offender's source.

    IPv4: TOS = the offender's TOS bits with precedence INTERNETCONTROL, DF
    clear (the ICMP socket is IP_PMTUDISC_DONT), the quote truncated so the
    error fits 576 bytes.  IPv6: quote truncated to fit the minimum MTU (1280).
    *info32* is the 4 bytes after type/code/checksum: the next-hop MTU for
    FRAG_NEEDED (low 16 bits) and PKT_TOOBIG.
    """
    if info.version == 4:
        quote = offending[:576 - 20 - 8]
        msg = bytearray(struct.pack("!BBHI", icmp_type, code, 0, info32) + quote)
        struct.pack_into("!H", msg, 2, internet_checksum(msg))
        tos = ((info.dscp << 2) & 0x1E) | 0xC0
        return build_ipv4(src, info.src, IPPROTO_ICMP, bytes(msg), tos=tos, ident=ident, df=False)
    quote = offending[:IPV6_MIN_MTU - 40 - 8]
    msg = bytearray(struct.pack("!BBHI", icmp_type, code, 0, info32) + quote)
    struct.pack_into("!H", msg, 2, l4_checksum(src, info.src, IPPROTO_ICMPV6, msg))
    return build_ipv6(src, info.src, IPPROTO_ICMPV6, bytes(msg))


# ----------------------------------------------------------------- in-place changes

def ip_decrease_ttl(buf: bytearray, off: int) -> None:
    """``ip_decrease_ttl``: TTL - 1 with the incremental header checksum update."""
    old = bytes(buf[off + 8:off + 10])
    buf[off + 8] -= 1
    check = (buf[off + 10] << 8) | buf[off + 11]
    buf[off + 10:off + 12] = csum_replace(check, old, bytes(buf[off + 8:off + 10])).to_bytes(2, "big")


def ipv6_decrease_hoplimit(buf: bytearray, off: int) -> None:
    """``hdr->hop_limit--`` (IPv6 has no header checksum)."""
    buf[off + 7] -= 1


def ipv4_change_dsfield(buf: bytearray, off: int, dscp: int) -> None:
    """``ipv4_change_dsfield``: new DSCP, ECN kept, checksum updated incrementally."""
    old = bytes(buf[off:off + 2])
    buf[off + 1] = (dscp << 2) | (buf[off + 1] & 0x03)
    check = (buf[off + 10] << 8) | buf[off + 11]
    buf[off + 10:off + 12] = csum_replace(check, old, bytes(buf[off:off + 2])).to_bytes(2, "big")


def ipv6_change_dsfield(buf: bytearray, off: int, dscp: int) -> None:
    """``ipv6_change_dsfield``: the DSCP bits of the traffic class."""
    tclass = (dscp << 2) | ((((buf[off] & 0x0F) << 4) | (buf[off + 1] >> 4)) & 0x03)
    buf[off] = 0x60 | (tclass >> 4)
    buf[off + 1] = ((tclass & 0x0F) << 4) | (buf[off + 1] & 0x0F)


# ----------------------------------------------------------------- fragmentation

def ip_fragment(pkt: bytes, mtu: int, df: bool = False) -> list[bytes]:
    """``ip_do_fragment`` (slow path: ``ip_frag_init`` + ``ip_frag_next``): split an IPv4 packet into fragments
    of at most *mtu* bytes.

    Data per fragment is a multiple of 8; every fragment gets the header
    (no options are used by the simulator), its offset, MF on all but the
    last (kept on the last when the packet was itself a non-last fragment),
    DF when *df* (``IPSKB_FRAG_PMTU``: a reassembled packet whose largest
    fragment had DF) and a fresh header checksum.
    """
    ihl = (pkt[0] & 0x0F) * 4
    hdr, data = pkt[:ihl], pkt[ihl:]
    frag = int.from_bytes(hdr[6:8], "big")
    base, more = frag & IP_OFFSET, bool(frag & IP_MF)
    step = (mtu - ihl) & ~7
    out = []
    for start in range(0, len(data), step):
        chunk = data[start:start + step]
        last = start + step >= len(data)
        h = bytearray(hdr)
        fo = (base + start // 8) | (IP_MF if (not last or more) else 0) | (IP_DF if df else 0)
        struct.pack_into("!HHH", h, 2, ihl + len(chunk), int.from_bytes(hdr[4:6], "big"), fo)
        h[10:12] = b"\0\0"
        struct.pack_into("!H", h, 10, internet_checksum(h))
        out.append(bytes(h) + chunk)
    return out


def ip_fraglist_fits(pkt: bytes, sizes: tuple[int, ...], mtu: int) -> bool:
    """The geometry check of ``ip_do_fragment``'s fast path: the reassembled skb's frag_list (*sizes*: the data
    bytes of each original fragment, in offset order) can be sent as it is through *mtu*.

    The first piece and every one but the last must be a multiple of 8 and at most ``mtu - hlen`` data bytes,
    and the packet must not itself be a fragment (``ip_is_fragment``).
    """
    ihl = (pkt[0] & 0x0F) * 4
    room = mtu - ihl
    if len(sizes) < 2 or sum(sizes) != len(pkt) - ihl or int.from_bytes(pkt[6:8], "big") & (IP_MF | IP_OFFSET):
        return False
    return all(n <= room and (n % 8 == 0 or i == len(sizes) - 1) for i, n in enumerate(sizes))


def ip_fraglist_fragment(pkt: bytes, sizes: tuple[int, ...]) -> list[bytes]:
    """``ip_do_fragment``'s fast path (``ip_fraglist_init`` + ``ip_fraglist_prepare``): the original fragments
    of a reassembled packet go out again with the header of the whole one.

    The first gets ``frag_off = IP_MF`` and the others their offset and MF but the last: DF is not kept on
    this path (``ip_fraglist_init`` overwrites ``frag_off``).
    """
    ihl = (pkt[0] & 0x0F) * 4
    hdr = pkt[:ihl]
    out, pos = [], ihl
    for i, n in enumerate(sizes):
        h = bytearray(hdr)
        fo = (pos - ihl) // 8 | (IP_MF if i < len(sizes) - 1 else 0)
        struct.pack_into("!HHH", h, 2, ihl + n, int.from_bytes(hdr[4:6], "big"), fo)
        h[10:12] = b"\0\0"
        struct.pack_into("!H", h, 10, internet_checksum(h))
        out.append(bytes(h) + pkt[pos:pos + n])
        pos += n
    return out


# ----------------------------------------------------------------- the reassembly queues

IPFRAG_OK, IPFRAG_DUP, IPFRAG_OVERLAP = 0, 1, 2  # inet_frag_queue_insert's answers (include/net/inet_frag.h)
IP_MAX_LEN = 0xFFFF  # an IPv4 datagram's total length (ip_frag_reasm: "Oversized IP packet")
IPV6_MAXPLEN = 0xFFFF  # an IPv6 payload length (include/linux/ipv6.h)


class FragDiscard(Exception):
    """A reassembly queue refuses a fragment: the ``goto discard_qp`` / ``discard_fq`` / ``err`` exits of
    ``ip_frag_queue``, ``ip6_frag_queue`` and ``nf_ct_frag6_queue``, or a failed ``ip_frag_reasm`` /
    ``ip6_frag_reasm``.

    *rid* is a :mod:`flowsim.reasons` id, *detail* the check that failed.  *kill*: ``inet_frag_kill``, the
    datagram's queued fragments go too.  *param_prob*: the ICMPv6 Parameter Problem (code, pointer) that
    ``ipv6_frag_rcv`` sends about the fragment.  *accept*: the fragment goes on unreassembled
    (``nf_ct_frag6_gather`` turns ``-EPROTO`` into 0, and the defrag hook into NF_ACCEPT)."""

    def __init__(self, rid: str, detail: str, *, kill: bool = False,
                 param_prob: tuple[int, int] | None = None, accept: bool = False):
        super().__init__(f"{rid}: {detail}")
        self.rid, self.detail, self.kill, self.param_prob, self.accept = rid, detail, kill, param_prob, accept


class InetFragQueue:
    """``struct inet_frag_queue`` (net/ipv4/inet_fragment.c): what every reassembly queue keeps.

    ``len`` is ``q.len`` (the datagram's length as far as known: the last fragment's end once ``last_in``),
    ``meat`` the data bytes queued, ``first_in`` / ``last_in`` the ``INET_FRAG_FIRST_IN`` / ``LAST_IN``
    flags.  The fragments are kept as the kernel's runs: ``runs`` maps a run head's offset to its
    ``frag_run_len``; a fragment that starts where the tail (``fragments_tail``, the fragment with the largest
    end) ends joins the last run, any other starts its own.  Whether a repeated fragment is a duplicate or an
    overlap depends on those runs, hence on the order the fragments came in."""

    __slots__ = ("parts", "len", "meat", "first_in", "last_in", "runs", "heads", "tail_end", "last_run", "created",
                 "skbs", "max_size")

    def __init__(self, created: float):
        self.parts: dict[int, bytes] = {}  # byte offset -> data
        self.len = 0
        self.meat = 0
        self.first_in = self.last_in = False
        self.runs: dict[int, int] = {}
        self.heads: list[int] = []  # the runs' heads in offset order, as the rb-tree keeps them
        self.tail_end = -1  # the end of fragments_tail; -1: no fragment yet
        self.last_run = 0  # last_run_head's offset
        self.created = created
        self.skbs: list = []
        self.max_size = 0  # q.max_size: the largest fragment

    def inet_frag_queue_insert(self, offset: int, end: int) -> int:
        """``inet_frag_queue_insert``: IPFRAG_OK (queued), IPFRAG_DUP (inside one run: dropped, the queue
        kept) or IPFRAG_OVERLAP (the datagram is discarded: RFC 5722, errata 3089)."""
        if self.tail_end < 0:  # the first fragment: fragrun_create
            self.runs[offset], self.last_run, self.tail_end = end - offset, offset, end
            self.heads.append(offset)
        elif self.tail_end < end:  # the common case: the fragment goes to the end
            if offset < self.tail_end:
                return IPFRAG_OVERLAP
            if offset == self.tail_end:  # fragrun_append_to_last
                self.runs[self.last_run] += end - offset
            else:  # fragrun_create
                self.runs[offset], self.last_run = end - offset, offset
                self.heads.append(offset)  # past every run: the last head
            self.tail_end = end
        else:
            # the rb-tree's binary search stops at the first run [offset, end) meets.  Runs never overlap, so the
            # last run starting before *end* is the one to look at: a fragment inside it meets no other, one that
            # meets it without lying inside is an overlap, and one that misses it misses every run
            i = bisect.bisect_left(self.heads, end) - 1
            if i >= 0:
                head = self.heads[i]
                n = self.runs[head]
                if offset < head + n:
                    return IPFRAG_DUP if head <= offset and end <= head + n else IPFRAG_OVERLAP
            self.runs[offset] = end - offset  # its own run (fragcb_clear), never the tail
            bisect.insort(self.heads, offset)
        return IPFRAG_OK

    def _insert(self, offset: int, end: int, data: bytes) -> None:
        """Queue *data* as bytes [*offset*, *end*): ``inet_frag_queue_insert``, then ``q.meat``."""
        res = self.inet_frag_queue_insert(offset, end)
        if res == IPFRAG_DUP:
            raise FragDiscard("frag-duplicate", f"bytes {offset}-{end} are already queued")
        if res == IPFRAG_OVERLAP:
            raise FragDiscard("frag-overlap", f"bytes {offset}-{end} overlap a queued fragment", kill=True)
        self.parts[offset] = data
        self.meat += end - offset

    @property
    def complete(self) -> bool:
        """``q.flags == (INET_FRAG_FIRST_IN | INET_FRAG_LAST_IN) && q.meat == q.len``."""
        return self.first_in and self.last_in and self.meat == self.len

    def data(self) -> bytes:
        """The datagram's data: the fragments in offset order (complete and never overlapping: no hole)."""
        return b"".join(self.parts[off] for off in sorted(self.parts))


def _last_fragment_end(q: InetFragQueue, end: int, kill: bool) -> None:
    """The final fragment's checks: no queued bytes past *end*, no other last fragment with another end."""
    if end < q.len or (q.last_in and end != q.len):
        raise FragDiscard("frag-invalid", f"a last fragment ending at byte {end}, the datagram's fragments at {q.len}"
                          + (" (its last fragment)" if q.last_in else ""), kill=kill)
    q.last_in, q.len = True, end


def _more_fragment_end(q: InetFragQueue, end: int, kill: bool) -> None:
    """A fragment with MF: past the known length only while the last fragment has not come."""
    if end > q.len:
        if q.last_in:
            raise FragDiscard("frag-invalid", f"a fragment ending at byte {end}, past the last fragment's {q.len}",
                              kill=kill)
        q.len = end


class FragQueue(InetFragQueue):
    """``struct ipq``: the fragments of one IPv4 datagram (``ip_defrag``), keyed by (src, dst, id, protocol).

    ``ip_frag_queue`` keeps the largest fragment seen (``q.max_size``) and the largest with DF
    (``max_df_size``); ``ip_frag_reasm`` turns them into ``IPCB(skb)->frag_max_size`` and the DF bit
    of the whole packet (:attr:`frag_max_size`, :attr:`frag_pmtu`).  :attr:`sizes` is the head's
    ``frag_list``: the data bytes of each fragment in offset order.
    """

    __slots__ = ("header", "max_df_size", "rid")

    def __init__(self, created: float):
        super().__init__(created)
        self.header: bytes | None = None
        self.max_df_size = 0  # the largest fragment with DF
        self.rid = 0  # qp->rid: the source's inet_peer rid at this queue's last fragment (ip_frag_too_far)

    @property
    def frag_max_size(self) -> int:
        """``ip_frag_reasm``: ``IPCB(skb)->frag_max_size = max(qp->max_df_size, qp->q.max_size)``."""
        return max(self.max_df_size, self.max_size)

    @property
    def frag_pmtu(self) -> bool:
        """``ip_frag_reasm``: DF (and ``IPSKB_FRAG_PMTU``) only when the largest fragment had DF."""
        return self.max_df_size == self.max_size

    @property
    def sizes(self) -> tuple[int, ...]:
        return tuple(len(self.parts[off]) for off in sorted(self.parts))

    def add(self, pkt: bytes, info: PktInfo) -> bytes | None:
        """``ip_frag_queue`` + ``ip_frag_reasm``: the whole datagram once every byte is here, else None;
        :class:`FragDiscard` for a fragment the queue refuses (every refusal kills it but a duplicate's)."""
        ihl = info.l4off - info.l3off
        offset = info.frag_off * 8
        end = offset + info.tot_len - ihl
        if not info.mf:
            _last_fragment_end(self, end, kill=True)
        else:
            end &= ~7  # an end not on 8 bytes is cut there (the checksum is then verified in software)
            _more_fragment_end(self, end, kill=True)
        if end == offset:
            raise FragDiscard("frag-invalid", "a fragment without data", kill=True)
        self._insert(offset, end, pkt[ihl:ihl + end - offset])
        if offset == 0:
            self.first_in, self.header = True, pkt[:ihl]
        fragsize = end - offset + ihl  # skb->len + ihl
        self.max_size = max(self.max_size, fragsize)
        if info.df:
            self.max_df_size = max(self.max_df_size, fragsize)
        if not self.complete:
            return None
        assert self.header is not None  # first_in
        h = bytearray(self.header)
        ihl = len(h)
        if ihl + self.len > IP_MAX_LEN:
            raise FragDiscard("frag-oversize", f"the datagram would be {ihl + self.len} bytes", kill=True)
        struct.pack_into("!HH", h, 2, ihl + self.len, int.from_bytes(h[4:6], "big"))
        struct.pack_into("!H", h, 6, IP_DF if self.frag_pmtu else 0)
        h[10:12] = b"\0\0"
        struct.pack_into("!H", h, 10, internet_checksum(h))
        return bytes(h) + self.data()


# ----------------------------------------------------------------- IPv6 fragmentation

IP6_MF = 0x0001  # the M flag of the fragment header's frag_off (include/net/ipv6.h)
FRAG_HDR_LEN = 8  # sizeof(struct frag_hdr)
_UNFRAGMENTABLE = (NEXTHDR_HOP, NEXTHDR_ROUTING, NEXTHDR_DEST)


def ip6_find_1stfragopt(pkt: bytes) -> tuple[int, int] | None:
    """``ip6_find_1stfragopt`` (net/ipv6/output_core.c): the length of the unfragmentable part of the IPv6 packet
    *pkt* and the offset of the next-header byte that ends it; None for -EINVAL.

    Hop-by-hop and routing headers are unfragmentable, and so is a destination options header unless a routing
    header came before it (the kernel's loop, CONFIG_IPV6_MIP6's home-address option aside)."""
    offset, prev, found_rhdr = 40, 6, False
    while offset <= len(pkt):
        nh = pkt[prev]
        if nh == NEXTHDR_ROUTING:
            found_rhdr = True
        elif nh not in _UNFRAGMENTABLE or (nh == NEXTHDR_DEST and found_rhdr):
            return offset, prev
        if offset + 2 > len(pkt):
            return None
        prev, offset = offset, offset + (pkt[offset + 1] + 1) * 8  # ipv6_optlen
        if offset > 40 + 0xFFFF:  # IPV6_MAXPLEN
            return None
    return None


def ip6_fragment(pkt: bytes, mtu: int, ident: int) -> list[bytes] | None:
    """``ip6_fragment``'s slow path (``ip6_frag_init`` + ``ip6_frag_next``): the IPv6 packet *pkt* cut into
    fragments of at most *mtu* bytes, each the unfragmentable part, a fragment header with *ident* and a piece
    of the rest; None where the kernel fails (no room for 8 bytes of data: ``fail_toobig``, or -EINVAL).

    Every piece but the last is a multiple of 8 bytes; the header before the fragment header names it
    (NEXTHDR_FRAGMENT) and each fragment's payload length is its own."""
    found = ip6_find_1stfragopt(pkt)
    if found is None:
        return None
    hlen, prev = found
    if mtu < hlen + FRAG_HDR_LEN + 8:
        return None
    room = mtu - hlen - FRAG_HDR_LEN
    unfrag = bytearray(pkt[:hlen])
    nexthdr = unfrag[prev]
    unfrag[prev] = NEXTHDR_FRAGMENT
    out, ptr, left = [], hlen, len(pkt) - hlen
    while left > 0:
        n = min(left, room)
        if n < left:
            n &= ~7
        left -= n
        struct.pack_into("!H", unfrag, 4, hlen - 40 + FRAG_HDR_LEN + n)
        fh = struct.pack("!BBHI", nexthdr, 0, (ptr - hlen) | (IP6_MF if left > 0 else 0), ident & 0xFFFFFFFF)
        out.append(bytes(unfrag) + fh + pkt[ptr:ptr + n])
        ptr += n
    return out


def _ipv6_frag_hdr(pkt: bytes) -> tuple[int, int] | None:
    """Where the fragment header of the IPv6 fragment *pkt* is: (its offset, the offset of the next-header
    byte naming it), found as ``ipv6_rcv``'s extension-header walk finds it; None without one."""
    prev, pos = 6, 40
    while pos + FRAG_HDR_LEN <= len(pkt):
        nh = pkt[prev]
        if nh == NEXTHDR_FRAGMENT:
            return pos, prev
        if nh not in _UNFRAGMENTABLE:
            return None
        prev, pos = pos, pos + (pkt[pos + 1] + 1) * 8
    return None


class Frag6Queue(InetFragQueue):
    """``struct frag_queue``: the fragments of one IPv6 datagram, for local reassembly (``ipv6_frag_rcv`` →
    ``ip6_frag_queue``) or conntrack's (``nf_ct_frag6_gather`` → ``nf_ct_frag6_queue``, *conntrack*), keyed by
    (src, dst, identification, the interface).

    The two run the same checks in the same order, but answer some differently: the local queue is killed by
    any refusal but a duplicate's and answers a bad length with an ICMPv6 Parameter Problem; conntrack's drops
    the fragment and keeps the queue, and lets a fragment whose length is not a multiple of 8 on unreassembled
    (after killing the queue).  ``q.max_size`` is the largest fragment, IPv6 header included (``ip6_frag_queue``:
    the fragment's length from its network header; ``nf_ct_frag6_queue``: its payload length, to which
    ``nf_ct_frag6_reasm`` adds the IPv6 header): both make it :attr:`frag_max_size`.  The reassembled packet is
    the first fragment's unfragmentable part, its last next-header the fragment header's, and every fragment's
    data in order (``ip6_frag_reasm`` / ``nf_ct_frag6_reasm``)."""

    __slots__ = ("unfrag", "prev", "nexthdr")

    def __init__(self, created: float):
        super().__init__(created)
        self.unfrag: bytes | None = None
        self.prev = 0
        self.nexthdr = 0

    @property
    def frag_max_size(self) -> int:
        return self.max_size

    def add(self, pkt: bytes, info: PktInfo, conntrack: bool = False) -> bytes | None:
        """One fragment (*pkt*: its IPv6 packet, *info* its parse); the whole datagram once every byte is here,
        else None; :class:`FragDiscard` for a fragment the queue refuses."""
        found = _ipv6_frag_hdr(pkt)
        if found is None:
            return None
        fh, prev = found
        offset = info.frag_off * 8
        end = offset + info.tot_len - fh - FRAG_HDR_LEN  # the payload length less what precedes the data
        kill = not conntrack
        if end > IPV6_MAXPLEN:
            raise FragDiscard("frag-oversize", f"a fragment ending at byte {end}", kill=kill,
                              param_prob=None if conntrack else (ICMPV6_HDR_FIELD, fh + 2))  # at frag_off
        if not info.mf:
            _last_fragment_end(self, end, kill)
        else:
            if end & 7:  # "RFC2460 says always send parameter problem in this case" (conntrack: -EPROTO)
                raise FragDiscard("frag-unaligned", f"a fragment with MF ending at byte {end}", kill=True,
                                  param_prob=None if conntrack else (ICMPV6_HDR_FIELD, 4), accept=conntrack)
            _more_fragment_end(self, end, kill)
        if end == offset:
            raise FragDiscard("frag-invalid", "a fragment without data", kill=kill)
        at = fh + FRAG_HDR_LEN
        self._insert(offset, end, pkt[at:at + end - offset])
        self.max_size = max(self.max_size, at + end - offset)
        if offset == 0:
            self.first_in = True
            self.unfrag, self.prev, self.nexthdr = pkt[:fh], prev, pkt[fh]
        if not self.complete:
            return None
        assert self.unfrag is not None  # first_in
        h = bytearray(self.unfrag)
        if len(h) - 40 + self.len > IPV6_MAXPLEN:  # ip6_frag_reasm / nf_ct_frag6_reasm: out_oversize
            raise FragDiscard("frag-oversize", f"a payload of {len(h) - 40 + self.len} bytes", kill=True)
        h[self.prev] = self.nexthdr
        struct.pack_into("!H", h, 4, len(h) - 40 + self.len)
        return bytes(h) + self.data()


#: the upper-layer header ipv6frag_thdr_truncated wants whole in a first fragment (include/net/ipv6_frag.h)
_THDR_LEN = {IPPROTO_TCP: 20, IPPROTO_UDP: 8, IPPROTO_ICMPV6: 8}


def ipv6frag_thdr_truncated(info: PktInfo) -> bool:
    """``ipv6frag_thdr_truncated``: the first fragment *info* does not hold its upper-layer header whole
    (RFC 8200, section 4.5); False for a later fragment or a chain of headers that does not parse."""
    if not info.first or info.l4proto == NEXTHDR_NONE:
        return False
    return info.l4off + _THDR_LEN.get(info.l4proto, 1) > info.l3off + info.tot_len
