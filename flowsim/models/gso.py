"""Software GSO: ``skb_gso_segment(skb, 0)`` over a stack of headers, with real bytes.

Theory of operation
-------------------
A GSO skb is one large packet (headers once, then ``gso_segs × gso_size``
bytes of TCP payload) that the stack promises to cut into wire-sized
segments later.  When a device cannot do that in hardware, ``skb_gso_segment``
walks the protocol chain from the outside in: ``inet_gso_segment`` looks at
the IPv4 protocol byte and calls ``inet_offloads[proto]`` (``tcp4_gso_segment``,
``ipip_gso_segment``, ``udp4_ufo_fragment``, ``esp4_gso_segment``…), the
innermost callee (TCP) produces the segments, and each level on the way back
out fixes its own header in every segment (IPv4 total length, id and
checksum; IPv6 payload length; the UDP tunnel header's length and checksum).

Here a GSO skb is a :class:`GsoSkb`: a tuple of frozen header values,
outermost first, ending in :class:`TcpHdr`, plus the payload and
``gso_size``.  :func:`skb_gso_segment` dispatches on the header types with the
same tables the kernel uses (:data:`INET_OFFLOADS`, :data:`INET6_OFFLOADS`)
and records the function names it passes through, so a caller can print the
exact chain.

The one piece of skb metadata the xfrm model needs is where each segment's
``skb->transport_header`` ends up, because ``__xfrm_transport_prep`` places
the ESP header relative to it (xfrm-gso.md §1.4).  The rules mirrored here:

* ``tcp4_gso_segment`` / ``tcp6_gso_segment``: the transport header is the
  TCP header of the segment;
* ``inet_gso_segment`` / ``ipv6_gso_segment`` only reset the *network*
  header per segment, so around an inner IP-in-IP packet the transport
  header stays at the innermost TCP header;
* ``__skb_udp_tunnel_segment`` resets it to the tunnel's UDP header
  (``skb_set_transport_header(skb, udp_offset)``);
* ``esp4_gso_segment`` → ``xfrm4_transport_gso_segment`` moves it forward by
  ``header_len`` and hands over to ``inet_offloads[xo->proto]``.

Every emitted header carries a correct checksum; :func:`ether_frame` and
:func:`write_pcap` turn IP packets into an Ethernet pcap (scapy's writer).
"""

from __future__ import annotations

import ipaddress
import struct
from collections.abc import Callable, Iterable
from pathlib import Path

import attrs

from flowsim.errors import ConfigError
from flowsim.kernel.headers import (
    ETH_P_IP,
    ETH_P_IPV6,
    IPPROTO_ESP,
    IPPROTO_IPIP,
    IPPROTO_IPV6,
    IPPROTO_TCP,
    IPPROTO_UDP,
    internet_checksum,
)

__all__ = [
    "EthHdr", "IPv4Hdr", "IPv6Hdr", "TcpHdr", "UdpHdr", "VxlanHdr", "GeneveHdr", "EspSlot",
    "GsoSkb", "Segment", "skb_gso_segment", "build_packet", "l4_checksum",
    "INET_OFFLOADS", "INET6_OFFLOADS", "ETH_P_TEB", "GSO_LEGACY_MAX_SIZE",
    "ether_frame", "write_pcap", "TCP_FLAG_FIN", "TCP_FLAG_PSH", "TCP_FLAG_ACK", "TCP_FLAG_CWR",
]

ETH_P_TEB = 0x6558  # Transparent Ethernet Bridging: what vxlan/geneve put in inner_protocol
GSO_LEGACY_MAX_SIZE = 65536
VXLAN_PORT = 4789
GENEVE_PORT = 6081

TCP_FLAG_FIN = 0x01
TCP_FLAG_PSH = 0x08
TCP_FLAG_ACK = 0x10
TCP_FLAG_CWR = 0x80


# --- header values ------------------------------------------------------------

@attrs.frozen
class EthHdr:
    """An Ethernet header (the inner frame of a VXLAN/Geneve tunnel)."""

    dst: str = "02:00:00:00:00:02"
    src: str = "02:00:00:00:00:01"


@attrs.frozen
class IPv4Hdr:
    """``struct iphdr`` without options; protocol and length come from what follows."""

    src: str
    dst: str
    tos: int = 0
    ttl: int = 64
    id: int = 0x1000
    df: bool = True


@attrs.frozen
class IPv6Hdr:
    """``struct ipv6hdr`` without extension headers (``encaplimit none`` tunnels)."""

    src: str
    dst: str
    tclass: int = 0
    flowlabel: int = 0
    hlim: int = 64


@attrs.frozen
class TcpHdr:
    """A TCP header; with ``timestamps`` it is 32 bytes (NOP, NOP, TS) as Linux sends by default."""

    sport: int = 40000
    dport: int = 5201
    seq: int = 1000
    ack: int = 1
    flags: int = TCP_FLAG_ACK | TCP_FLAG_PSH
    window: int = 502
    timestamps: bool = True
    tsval: int = 0x01020304
    tsecr: int = 0x0A0B0C0D

    @property
    def size(self) -> int:
        return 32 if self.timestamps else 20


@attrs.frozen
class UdpHdr:
    """A UDP header; its length and checksum are computed per segment."""

    sport: int
    dport: int


@attrs.frozen
class VxlanHdr:
    """VXLAN header (RFC 7348): flags with the I bit, 24-bit VNI."""

    vni: int = 42

    def pack(self) -> bytes:
        return struct.pack("!II", 0x08000000, self.vni << 8)


@attrs.frozen
class GeneveHdr:
    """Geneve header (RFC 8926) without options, protocol Transparent Ethernet Bridging."""

    vni: int = 42

    def pack(self) -> bytes:
        return struct.pack("!BBHI", 0, 0, ETH_P_TEB, self.vni << 8)


@attrs.frozen
class EspSlot:
    """The 16 bytes ``xfrm{4,6}_*_output`` opened for ESP header + IV, as the GSO skb carries them.

    ``content`` is what ``esp{4,6}_gso_encap`` left there: SPI, the batch's
    first sequence number, then eight stale bytes (xfrm-gso.md §1.4 step 2).
    ``proto`` is ``xo->proto``; ``mode`` selects ``xfrm{4,6}_transport_gso_segment``
    or ``xfrm{4,6}_tunnel_gso_segment``.
    """

    content: bytes
    proto: int
    mode: str


_TUNNEL_HDRS = (VxlanHdr, GeneveHdr)


@attrs.frozen
class GsoSkb:
    """A GSO skb: headers (outermost first, TCP last), payload, ``gso_size``, ``inner_protocol``."""

    headers: tuple
    payload: bytes
    gso_size: int
    inner_protocol: int = 0

    @property
    def gso_segs(self) -> int:
        return max(1, -(-len(self.payload) // self.gso_size))

    def __len__(self) -> int:
        """``skb->len``: headers once plus the whole payload (computed without serialising)."""
        # fixed-size headers have no .size: look it up only for the variable ones
        return sum(_HDR_LEN[type(h)] if type(h) in _HDR_LEN else h.size for h in self.headers) + len(self.payload)  # noqa: SIM401

    def packet(self) -> bytes:
        """The unsegmented packet as it would sit in the skb (lengths of the whole)."""
        return build_packet(self.headers, self.payload)


@attrs.frozen
class Segment:
    """One segment: IP packet bytes and where ``skb->transport_header`` was left."""

    data: bytes
    transport: int
    network: int = 0


# --- packing ------------------------------------------------------------------

def _addr(text: str) -> bytes:
    return ipaddress.ip_address(text).packed


def _mac(text: str) -> bytes:
    return bytes(int(x, 16) for x in text.split(":"))


def _proto_of(header) -> int:
    """The IP protocol / next-header value that announces *header*."""
    return _PROTO_OF[type(header)]


def _ethertype_of(header) -> int:
    return ETH_P_IP if isinstance(header, IPv4Hdr) else ETH_P_IPV6


def l4_checksum(pseudo: tuple[bytes, bytes, int], proto: int, segment: bytes) -> int:
    """TCP/UDP checksum over the IPv4 or IPv6 pseudo-header (``csum_tcpudp_magic`` / ``csum_ipv6_magic``)."""
    src, dst, _family = pseudo
    if len(src) == 4:
        ph = src + dst + struct.pack("!BBH", 0, proto, len(segment))
    else:
        ph = src + dst + struct.pack("!IxxxB", len(segment), proto)
    return internet_checksum(ph + segment)


def pack_ipv4(h: IPv4Hdr, proto: int, payload_len: int, id_: int | None = None) -> bytes:
    """An IPv4 header with total length and checksum (``ip_send_check``)."""
    hdr = bytearray(struct.pack("!BBHHHBBH4s4s", 0x45, h.tos, 20 + payload_len,
                                (h.id if id_ is None else id_) & 0xFFFF, 0x4000 if h.df else 0,
                                h.ttl, proto, 0, _addr(h.src), _addr(h.dst)))
    struct.pack_into("!H", hdr, 10, internet_checksum(hdr))
    return bytes(hdr)


def pack_ipv6(h: IPv6Hdr, nexthdr: int, payload_len: int) -> bytes:
    """An IPv6 header with payload length."""
    first = (6 << 28) | (h.tclass << 20) | h.flowlabel
    return struct.pack("!IHBB16s16s", first, payload_len, nexthdr, h.hlim, _addr(h.src), _addr(h.dst))


def pack_tcp(h: TcpHdr, pseudo, payload: bytes, seq: int, flags: int) -> bytes:
    """A TCP header + payload with its checksum over *pseudo*."""
    opts = struct.pack("!BBBBII", 1, 1, 8, 10, h.tsval, h.tsecr) if h.timestamps else b""
    doff = (20 + len(opts)) // 4
    hdr = bytearray(struct.pack("!HHIIBBHHH", h.sport, h.dport, seq & 0xFFFFFFFF, h.ack,
                                doff << 4, flags, h.window, 0, 0) + opts)
    seg = hdr + payload
    struct.pack_into("!H", seg, 16, l4_checksum(pseudo, IPPROTO_TCP, bytes(seg)))
    return bytes(seg)


def pack_udp(h: UdpHdr, pseudo, payload: bytes) -> bytes:
    """A UDP header + payload with a real checksum (0 is sent as 0xFFFF, RFC 768)."""
    seg = bytearray(struct.pack("!HHHH", h.sport, h.dport, 8 + len(payload), 0) + payload)
    csum = l4_checksum(pseudo, IPPROTO_UDP, bytes(seg)) or 0xFFFF
    struct.pack_into("!H", seg, 6, csum)
    return bytes(seg)


def build_packet(headers: tuple, payload: bytes, pseudo=None) -> bytes:
    """Serialise *headers* around *payload* with every length and checksum right."""
    if not headers:
        return payload
    h, rest = headers[0], headers[1:]
    if isinstance(h, IPv4Hdr):
        inner = build_packet(rest, payload, (_addr(h.src), _addr(h.dst), 4))
        return pack_ipv4(h, _proto_of(rest[0]), len(inner)) + inner
    if isinstance(h, IPv6Hdr):
        inner = build_packet(rest, payload, (_addr(h.src), _addr(h.dst), 6))
        return pack_ipv6(h, _proto_of(rest[0]), len(inner)) + inner
    if isinstance(h, TcpHdr):
        return pack_tcp(h, pseudo, payload, h.seq, h.flags)
    if isinstance(h, UdpHdr):
        return pack_udp(h, pseudo, rest[0].pack() + build_packet(rest[1:], payload))
    if isinstance(h, EthHdr):
        return _mac(h.dst) + _mac(h.src) + struct.pack("!H", _ethertype_of(rest[0])) + build_packet(rest, payload)
    if isinstance(h, EspSlot):
        return h.content + build_packet(rest, payload, pseudo)
    raise ConfigError(f"cannot serialise header {h!r}")


# --- segmentation -------------------------------------------------------------

# A level function: (headers, index, payload, mss, pseudo, trace) -> [(bytes, transport offset)]
_Level = Callable[[tuple, int, bytes, int, object, list], list]


def skb_gso_segment(skb: GsoSkb, trace: list[str] | None = None) -> list[Segment]:
    """Mirror ``skb_gso_segment(skb, 0)``: full software segmentation by the protocol chain.

    *trace*, if given, receives the name of every ``gso_segment`` callback on
    the way in, outermost first.
    """
    if skb.gso_size <= 0:
        raise ConfigError(f"gso_size must be positive: {skb.gso_size!r}", value=skb.gso_size)
    if trace is None:
        trace = []
    out = _l3_segment(skb.headers, 0, skb.payload, skb.gso_size, None, trace)
    return [Segment(data, transport) for data, transport in out]


def _l3_segment(headers, i, payload, mss, pseudo, trace):
    """``skb_mac_gso_segment`` for an IP packet: dispatch on the version."""
    if isinstance(headers[i], IPv4Hdr):
        trace.append("inet_gso_segment")
        return inet_gso_segment(headers, i, payload, mss, pseudo, trace)
    trace.append("ipv6_gso_segment")
    return ipv6_gso_segment(headers, i, payload, mss, pseudo, trace)


def _offload(table: dict, proto: int, trace: list):
    try:
        name, fn = table[proto]
    except KeyError:
        raise ConfigError(f"no gso_segment callback for protocol {proto}") from None
    trace.append(name)
    return fn


def inet_gso_segment(headers, i, payload, mss, pseudo, trace):
    """Mirror ``inet_gso_segment``: segment the inner protocol, then fix tot_len, id, checksum.

    The id increments per segment (no ``SKB_GSO_TCP_FIXEDID``); the
    transport header of the segments is left where the callee put it.
    """
    h = headers[i]
    fn = _offload(INET_OFFLOADS, _proto_of(headers[i + 1]), trace)
    inner = fn(headers, i + 1, payload, mss, (_addr(h.src), _addr(h.dst), 4), trace)
    proto = _proto_of(headers[i + 1])
    return [(pack_ipv4(h, proto, len(data), h.id + k) + data, 20 + t) for k, (data, t) in enumerate(inner)]


def ipv6_gso_segment(headers, i, payload, mss, pseudo, trace):
    """Mirror ``ipv6_gso_segment``: segment the inner protocol, then fix payload_len."""
    h = headers[i]
    fn = _offload(INET6_OFFLOADS, _proto_of(headers[i + 1]), trace)
    inner = fn(headers, i + 1, payload, mss, (_addr(h.src), _addr(h.dst), 6), trace)
    proto = _proto_of(headers[i + 1])
    return [(pack_ipv6(h, proto, len(data)) + data, 40 + t) for data, t in inner]


def ipip_gso_segment(headers, i, payload, mss, pseudo, trace):
    """Mirror ``ipip_gso_segment`` (IPv4 in IPv4, ``SKB_GSO_IPXIP4``): hand over to ``inet_gso_segment``."""
    trace.append("inet_gso_segment")
    return inet_gso_segment(headers, i, payload, mss, pseudo, trace)


def ip4ip6_gso_segment(headers, i, payload, mss, pseudo, trace):
    """Mirror ``ip4ip6_gso_segment`` (IPv4 in IPv6, ``SKB_GSO_IPXIP6``): hand over to ``inet_gso_segment``."""
    trace.append("inet_gso_segment")
    return inet_gso_segment(headers, i, payload, mss, pseudo, trace)


def ip6ip6_gso_segment(headers, i, payload, mss, pseudo, trace):
    """Mirror ``ip6ip6_gso_segment``: hand over to ``ipv6_gso_segment``."""
    trace.append("ipv6_gso_segment")
    return ipv6_gso_segment(headers, i, payload, mss, pseudo, trace)


def tcp_gso_segment(headers, i, payload, mss, pseudo, trace):
    """Mirror ``tcp_gso_segment`` (via ``tcp4/6_gso_segment``): cut the payload into ``mss`` chunks.

    Sequence numbers advance by the bytes before each segment; CWR stays on
    the first segment only, FIN and PSH on the last only; each segment gets
    its own checksum.  The transport header is the segment's TCP header.
    """
    h = headers[i]
    if i != len(headers) - 1:
        raise ConfigError("TCP must be the innermost header of a GSO skb")
    chunks = [payload[o:o + mss] for o in range(0, len(payload), mss)] or [b""]
    out = []
    for k, chunk in enumerate(chunks):
        flags = h.flags
        if k != len(chunks) - 1:
            flags &= ~(TCP_FLAG_FIN | TCP_FLAG_PSH)
        if k:
            flags &= ~TCP_FLAG_CWR
        out.append((pack_tcp(h, pseudo, chunk, h.seq + k * mss, flags), 0))
    return out


def udp_ufo_fragment(headers, i, payload, mss, pseudo, trace):
    """Mirror ``udp4_ufo_fragment`` / ``udp6_ufo_fragment`` for ``SKB_GSO_UDP_TUNNEL``.

    Only the tunnel case is modelled: ``skb_udp_tunnel_segment`` →
    ``__skb_udp_tunnel_segment``.
    """
    if i + 1 >= len(headers) or not isinstance(headers[i + 1], _TUNNEL_HDRS):
        raise ConfigError("UDP GSO is only modelled for VXLAN/Geneve tunnels")
    trace.append("__skb_udp_tunnel_segment")
    return __skb_udp_tunnel_segment(headers, i, payload, mss, pseudo, trace)


def __skb_udp_tunnel_segment(headers, i, payload, mss, pseudo, trace):
    """Mirror ``__skb_udp_tunnel_segment``: segment the inner frame, rebuild UDP per segment.

    ``skb_mac_gso_segment`` runs over the inner Ethernet frame; each segment
    gets the tunnel header back, a UDP header with its own length and
    checksum, and ``skb_set_transport_header(skb, udp_offset)``: the
    transport header is the tunnel's UDP header again (offset 0 here).
    """
    udp, tnl = headers[i], headers[i + 1]
    trace.append("skb_mac_gso_segment")
    inner = skb_mac_gso_segment(headers, i + 2, payload, mss, None, trace)
    return [(pack_udp(udp, pseudo, tnl.pack() + data), 0) for data, _t in inner]


def skb_mac_gso_segment(headers, i, payload, mss, pseudo, trace):
    """Mirror ``skb_mac_gso_segment`` for an inner Ethernet frame (``ETH_P_TEB``)."""
    eth = headers[i]
    hdr = _mac(eth.dst) + _mac(eth.src) + struct.pack("!H", _ethertype_of(headers[i + 1]))
    inner = _l3_segment(headers, i + 1, payload, mss, None, trace)
    return [(hdr + data, 14 + t) for data, t in inner]


def esp4_gso_segment(headers, i, payload, mss, pseudo, trace):
    """Mirror ``esp4_gso_segment`` → ``xfrm4_outer_mode_gso_segment``.

    Pulls ESP header + IV (the :class:`EspSlot`), sets ``XFRM_GSO_SEGMENT``
    and calls ``xfrm4_tunnel_gso_segment`` (``skb_mac_gso_segment`` over
    the inner packet) or ``xfrm4_transport_gso_segment`` (transport header
    += ``header_len``, then ``inet_offloads[xo->proto]``).
    """
    return _esp_gso_segment(headers, i, payload, mss, pseudo, trace, "xfrm4", INET_OFFLOADS)


def esp6_gso_segment(headers, i, payload, mss, pseudo, trace):
    """Mirror ``esp6_gso_segment`` → ``xfrm6_outer_mode_gso_segment`` (see :func:`esp4_gso_segment`)."""
    return _esp_gso_segment(headers, i, payload, mss, pseudo, trace, "xfrm6", INET6_OFFLOADS)


def _esp_gso_segment(headers, i, payload, mss, pseudo, trace, prefix, table):
    slot: EspSlot = headers[i]
    if slot.mode == "tunnel":
        trace.append(f"{prefix}_tunnel_gso_segment")
        trace.append("skb_mac_gso_segment")
        inner = _l3_segment(headers, i + 1, payload, mss, None, trace)
    elif slot.mode == "transport":
        trace.append(f"{prefix}_transport_gso_segment")
        fn = _offload(table, slot.proto, trace)
        inner = fn(headers, i + 1, payload, mss, pseudo, trace)
    else:
        raise ConfigError(f"ESP GSO in {slot.mode} mode is not modelled: {slot.mode!r}", value=slot.mode)
    return [(slot.content + data, len(slot.content) + t) for data, t in inner]


INET_OFFLOADS: dict[int, tuple[str, _Level]] = {
    IPPROTO_TCP: ("tcp4_gso_segment", tcp_gso_segment),
    IPPROTO_UDP: ("udp4_ufo_fragment", udp_ufo_fragment),
    IPPROTO_IPIP: ("ipip_gso_segment", ipip_gso_segment),
    IPPROTO_ESP: ("esp4_gso_segment", esp4_gso_segment),
}
"""``inet_offloads[]``: the IPv4 ``gso_segment`` callback per protocol."""

INET6_OFFLOADS: dict[int, tuple[str, _Level]] = {
    IPPROTO_TCP: ("tcp6_gso_segment", tcp_gso_segment),
    IPPROTO_UDP: ("udp6_ufo_fragment", udp_ufo_fragment),
    IPPROTO_IPIP: ("ip4ip6_gso_segment", ip4ip6_gso_segment),
    IPPROTO_IPV6: ("ip6ip6_gso_segment", ip6ip6_gso_segment),
    IPPROTO_ESP: ("esp6_gso_segment", esp6_gso_segment),
}
"""``inet6_offloads[]``: the IPv6 ``gso_segment`` callback per next header."""

_HDR_LEN = {EthHdr: 14, IPv4Hdr: 20, IPv6Hdr: 40, UdpHdr: 8, VxlanHdr: 8, GeneveHdr: 8, EspSlot: 16}

_PROTO_OF = {
    IPv4Hdr: IPPROTO_IPIP,
    IPv6Hdr: IPPROTO_IPV6,
    TcpHdr: IPPROTO_TCP,
    UdpHdr: IPPROTO_UDP,
    EspSlot: IPPROTO_ESP,
}


# --- frames and pcap ----------------------------------------------------------

def ether_frame(packet: bytes, dst: str = "02:00:00:00:00:0b", src: str = "02:00:00:00:00:0a") -> bytes:
    """Put an IP packet in an Ethernet frame, ethertype from the IP version nibble."""
    ethertype = ETH_P_IP if packet[0] >> 4 == 4 else ETH_P_IPV6
    return _mac(dst) + _mac(src) + struct.pack("!H", ethertype) + packet


def write_pcap(path: str | Path, frames: Iterable[bytes], start: float = 1_800_000_000.0) -> int:
    """Write Ethernet *frames* to a pcap file (scapy's ``PcapWriter``, ``DLT_EN10MB``).

    Timestamps are fixed (*start* + 1 µs per frame) so a capture is
    reproducible byte for byte.  Returns the number of frames written.
    """
    from scapy.utils import PcapWriter  # scapy is slow to import: only when writing

    n = 0
    try:
        writer = PcapWriter(str(path), linktype=1, sync=False)
    except OSError as exc:
        raise ConfigError(f"cannot write pcap {str(path)!r}: {exc.strerror}", value=str(path)) from None
    try:
        writer.write_header(None)
        for n, frame in enumerate(frames, 1):
            writer.write_packet(frame, sec=int(start), usec=n)
    finally:
        writer.close()
    return n
