"""Byte-level software GSO (flowsim.kernel.gso) against scapy: segments, header fields, gso_type checks, errors."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scapy.layers.inet import GRE, ICMP, IP, TCP, UDP, IPOption_Router_Alert
from scapy.layers.inet6 import IPv6, IPv6ExtHdrFragment
from scapy.packet import NoPayload, Raw

from flowsim.errors import FlowsimError
from flowsim.kernel.gso import (
    SKB_GSO_IPXIP4,
    SKB_GSO_IPXIP6,
    SKB_GSO_TCP_FIXEDID,
    SKB_GSO_TCPV4,
    SKB_GSO_TCPV6,
    SKB_GSO_UDP_L4,
    GsoError,
    __skb_gso_segment,
    gso_type_of,
    skb_gso_network_seglen,
    skb_gso_validate_network_len,
)

V4, V6 = ("10.0.1.99", "10.0.2.99"), ("dead:1::99", "dead:2::99")
O4, O6 = ("192.168.10.1", "192.168.10.2"), ("fee1:2::1", "fee1:2::2")
MSS = 1000
PAYLOAD = bytes(range(256)) * 9 + bytes(196)  # 2500 bytes: segments of 1000, 1000, 500
TS = [("NOP", None), ("NOP", None), ("Timestamp", (0x01020304, 0x0A0B0C0D))]
DESTOPT_ENCAP_LIMIT = bytes([41, 0, 4, 1, 4, 1, 1, 0])  # RFC 2473 tunnel encapsulation limit 4, PadN


def ip4(addrs=V4, **kw):
    return IP(src=addrs[0], dst=addrs[1], **{"tos": 0xB9, "ttl": 17, "flags": "DF", **kw})


def ip6(addrs=V6, **kw):
    return IPv6(src=addrs[0], dst=addrs[1], tc=0x2D, fl=0x12345, hlim=9, **kw)


def tcp(flags="PA", seq=1000, options=()):
    return TCP(sport=40000, dport=5201, seq=seq, ack=77, flags=flags, window=1234, urgptr=5, options=list(options))


def udp():
    return UDP(sport=40000, dport=5201)


def with_destopt(inner) -> IPv6:
    """IP6IP6 as ip6_tunnel sends it by default: outer IPv6, dest-opts with the encapsulation limit, inner IPv6."""
    return IPv6(bytes(ip6(O6, nh=60) / Raw(DESTOPT_ENCAP_LIMIT + bytes(inner))))


# name → (packet, the gso_type a sender sets, headers from the outer IP to the end of L4)
CASES = {
    "tcp4": (ip4(id=0xFFFF) / tcp(options=TS) / Raw(PAYLOAD), SKB_GSO_TCPV4, 20 + 32),
    "tcp4_ipopts": (ip4(id=7, options=[IPOption_Router_Alert()]) / tcp() / Raw(PAYLOAD), SKB_GSO_TCPV4, 24 + 20),
    "tcp6": (ip6() / tcp(options=TS, seq=2**32 - 1500) / Raw(PAYLOAD), SKB_GSO_TCPV6, 40 + 32),
    "udp4": (ip4(id=9) / udp() / Raw(PAYLOAD), SKB_GSO_UDP_L4, 20 + 8),
    "udp6": (ip6() / udp() / Raw(PAYLOAD), SKB_GSO_UDP_L4, 40 + 8),
    "ipip": (ip4(O4, id=0x4000) / ip4(id=0x1234) / tcp(options=TS) / Raw(PAYLOAD),
             SKB_GSO_TCPV4 | SKB_GSO_IPXIP4, 20 + 20 + 32),
    "4in6": (ip6(O6) / ip4(id=3) / tcp() / Raw(PAYLOAD), SKB_GSO_TCPV4 | SKB_GSO_IPXIP6, 40 + 20 + 20),
    "sit": (ip4(O4, id=11) / ip6() / tcp(options=TS) / Raw(PAYLOAD), SKB_GSO_TCPV6 | SKB_GSO_IPXIP4, 20 + 40 + 32),
    "sit_udp": (ip4(O4, id=12) / ip6() / udp() / Raw(PAYLOAD), SKB_GSO_UDP_L4 | SKB_GSO_IPXIP4, 20 + 40 + 8),
    "ip6ip6": (ip6(O6) / ip6() / tcp() / Raw(PAYLOAD), SKB_GSO_TCPV6 | SKB_GSO_IPXIP6, 40 + 40 + 20),
    "ip6ip6_destopt": (with_destopt(ip6() / tcp(options=TS) / Raw(PAYLOAD)), SKB_GSO_TCPV6 | SKB_GSO_IPXIP6,
                       40 + 8 + 40 + 32),
    "4in6in4": (ip4(O4, id=20) / ip6(O6) / ip4(id=30) / tcp() / Raw(PAYLOAD),
                SKB_GSO_TCPV4 | SKB_GSO_IPXIP4 | SKB_GSO_IPXIP6, 20 + 40 + 20 + 20),
}
IDS = list(CASES)

# fields the segmentation owns per layer; every other field must be copied
OWNED = {IP: {"len", "id", "chksum"}, IPv6: {"plen"}, TCP: {"seq", "flags", "chksum"}, UDP: {"len", "chksum"}}


def segment(name: str, gso_size: int = MSS, **kw) -> tuple[bytes, list[bytes]]:
    pkt, gso_type, _ = CASES[name]
    raw = bytes(pkt)
    return raw, __skb_gso_segment(raw, gso_size, gso_type, **kw)


def parse(raw: bytes):
    return IP(raw) if raw[0] >> 4 == 4 else IPv6(raw)


def layers(pkt):
    """The header layers of a scapy packet, outermost first (up to the payload)."""
    out = []
    while not isinstance(pkt, (Raw, NoPayload)):
        out.append(pkt)
        pkt = pkt.payload
    return out


def l4(pkt):
    return pkt[TCP] if TCP in pkt else pkt[UDP]


def checksums_valid(raw: bytes) -> bool:
    """scapy rebuilds the same bytes once every checksum field is deleted."""
    clone = parse(raw)
    for layer in layers(clone):
        for name in ("chksum", "cksum"):
            if name in layer.fields:
                setattr(layer, name, None)
    return bytes(clone) == raw


# ------------------------------------------------------------------ segments

@pytest.mark.parametrize("name", IDS)
def test_every_segment_has_valid_checksums(name):
    """Each segment decodes in scapy with correct IPv4 header and TCP/UDP checksums."""
    _, segs = segment(name)
    assert len(segs) == 3
    assert all(checksums_valid(s) for s in segs)


@pytest.mark.parametrize("name", IDS)
def test_segment_length_is_network_seglen(name):
    """All segments but the last are skb_gso_network_seglen bytes; the last carries the remainder."""
    raw, segs = segment(name)
    seglen = skb_gso_network_seglen(raw, MSS)
    assert seglen == CASES[name][2] + MSS
    assert [len(s) for s in segs] == [seglen, seglen, seglen - MSS + len(PAYLOAD) % MSS]


@pytest.mark.parametrize("name", IDS)
def test_payload_reassembles(name):
    """The segments' L4 payloads, concatenated, are the original payload, in gso_size chunks."""
    _, segs = segment(name)
    chunks = [bytes(l4(parse(s)).payload) for s in segs]
    assert [len(c) for c in chunks] == [1000, 1000, 500]
    assert b"".join(chunks) == PAYLOAD


@pytest.mark.parametrize("name", IDS)
def test_unowned_header_fields_copied(name):
    """Options, TOS/TTL/DF, traffic class/flow label/hop limit, ext headers, ports, ack, window, urg are copied."""
    raw, segs = segment(name)

    def fields(pkt):
        out = []
        for layer in layers(pkt):
            kept = {k: v for k, v in layer.fields.items() if k not in OWNED.get(type(layer), ())}
            if isinstance(layer, TCP):
                kept["other_flags"] = int(layer.flags) & ~0x89  # all but CWR, PSH, FIN
            out.append((type(layer).__name__, kept))
        return out

    for s in segs:
        assert fields(parse(s)) == fields(parse(raw))


@pytest.mark.parametrize("name", IDS)
def test_length_fields_per_segment(name):
    """IPv4 tot_len, IPv6 payload_len (with extension headers) and UDP length describe each segment."""
    _, segs = segment(name)
    for s in segs:
        pkt, end = parse(s), len(s)
        for layer in layers(pkt):
            if isinstance(layer, IP):
                assert layer.len == len(layer)
            elif isinstance(layer, IPv6):
                assert layer.plen == len(layer) - 40
            elif isinstance(layer, UDP):
                assert layer.len == len(layer)
        assert len(pkt) == end


@pytest.mark.parametrize("name", [n for n in IDS if CASES[n][1] & (SKB_GSO_TCPV4 | SKB_GSO_TCPV6)])
def test_tcp_seq_advances(name):
    """Segment k carries seq = original seq + k * gso_size, modulo 2^32."""
    raw, segs = segment(name)
    seq0 = parse(raw)[TCP].seq
    assert [parse(s)[TCP].seq for s in segs] == [(seq0 + k * MSS) % 2**32 for k in range(3)]


@pytest.mark.parametrize("name", IDS)
def test_ipv4_ids_count_up_at_every_level(name):
    """Every IPv4 header (outer and inner) takes id + k in segment k, modulo 2^16."""
    raw, segs = segment(name)
    ids0 = [x.id for x in layers(parse(raw)) if isinstance(x, IP)]
    for k, s in enumerate(segs):
        assert [x.id for x in layers(parse(s)) if isinstance(x, IP)] == [(i + k) & 0xFFFF for i in ids0]


@pytest.mark.parametrize("flags, expect", [
    ("FPACE", ["AEC", "AE", "FPAE"]),  # scapy prints flags in FSRPAUECN order
    ("PA", ["A", "A", "PA"]),
    ("FA", ["A", "A", "FA"]),
    ("AC", ["AC", "A", "A"]),
])
def test_tcp_flag_placement(flags, expect):
    """FIN and PSH only on the last segment, CWR only on the first, other flags on all."""
    raw = bytes(ip4() / tcp(flags=flags) / Raw(PAYLOAD))
    segs = __skb_gso_segment(raw, MSS, SKB_GSO_TCPV4)
    assert [str(IP(s)[TCP].flags) for s in segs] == expect


@pytest.mark.parametrize("name", IDS)
def test_one_chunk_returns_packet_unchanged(name):
    """A payload that fits in gso_size gives one segment, byte-identical to the input."""
    raw, segs = segment(name, gso_size=len(PAYLOAD))
    assert segs == [raw]


@pytest.mark.parametrize("pkt, gso_type", [
    (ip4() / tcp(flags="FA"), SKB_GSO_TCPV4),
    (ip6() / udp(), SKB_GSO_UDP_L4),
    (ip4(O4) / ip6() / tcp(), SKB_GSO_TCPV6 | SKB_GSO_IPXIP4),
])
def test_empty_payload_gives_one_segment(pkt, gso_type):
    """An L4 payload of 0 bytes yields one segment equal to the input."""
    raw = bytes(pkt)
    assert __skb_gso_segment(raw, MSS, gso_type) == [raw]


def test_trailing_bytes_ignored():
    """Bytes beyond the outer IP length (Ethernet padding) are not segmented."""
    raw, segs = segment("ipip")
    assert __skb_gso_segment(raw + b"\xee" * 13, MSS, CASES["ipip"][1]) == segs


def test_memoryview_input():
    """A memoryview / bytearray packet segments like bytes."""
    raw, segs = segment("tcp6")
    assert __skb_gso_segment(memoryview(bytearray(raw)), MSS, SKB_GSO_TCPV6) == segs


def test_udp_zero_checksum_over_ipv4_kept():
    """An IPv4 UDP datagram sent without checksum (0) keeps 0 in every segment."""
    raw = bytes(ip4() / UDP(sport=1, dport=2, chksum=0) / Raw(PAYLOAD))
    segs = __skb_gso_segment(raw, MSS, SKB_GSO_UDP_L4)
    assert [IP(s)[UDP].chksum for s in segs] == [0, 0, 0]
    assert [IP(s)[UDP].len for s in segs] == [1008, 1008, 508]


@pytest.mark.parametrize("version", [4, 6])
def test_udp_computed_zero_checksum_sent_as_ffff(version):
    """A UDP segment whose checksum computes to 0 carries 0xFFFF (RFC 768 / CSUM_MANGLED_0)."""
    net = ip4() if version == 4 else ip6()
    probe = parse(bytes(net / udp() / Raw(PAYLOAD[:998] + b"\0\0")))
    # the last payload word set to the checksum computed without it makes the one's-complement sum 0xFFFF
    raw = bytes(net / udp() / Raw(PAYLOAD[:998] + probe[UDP].chksum.to_bytes(2, "big") + PAYLOAD[1000:]))
    segs = __skb_gso_segment(raw, MSS, SKB_GSO_UDP_L4)
    assert [parse(s)[UDP].chksum == 0xFFFF for s in segs] == [True, False, False]
    assert all(checksums_valid(s) for s in segs)


def test_fixedid_keeps_inner_id_only():
    """SKB_GSO_TCP_FIXEDID freezes the inner IPv4 id of a tunnel; the outer id still counts up."""
    raw = bytes(CASES["ipip"][0])
    segs = __skb_gso_segment(raw, MSS, SKB_GSO_TCPV4 | SKB_GSO_IPXIP4 | SKB_GSO_TCP_FIXEDID)
    assert [[x.id for x in layers(IP(s)) if isinstance(x, IP)] for s in segs] == [
        [0x4000, 0x1234], [0x4001, 0x1234], [0x4002, 0x1234]]
    plain = __skb_gso_segment(bytes(CASES["tcp4"][0]), MSS, SKB_GSO_TCPV4 | SKB_GSO_TCP_FIXEDID)
    assert [IP(s).id for s in plain] == [0xFFFF] * 3
    assert all(checksums_valid(s) for s in segs + plain)


def test_fixedid_applies_below_the_outermost_header():
    """SKB_GSO_TCP_FIXEDID freezes every IPv4 id below a tunnel's outer header (inet_gso_segment's encap test)."""
    raw = bytes(ip4(O4, id=1) / ip4(("10.9.0.1", "10.9.0.2"), id=2) / ip4(id=3) / tcp() / Raw(PAYLOAD))
    gso_type = SKB_GSO_TCPV4 | SKB_GSO_IPXIP4 | SKB_GSO_TCP_FIXEDID
    assert gso_type_of(raw) == SKB_GSO_TCPV4 | SKB_GSO_IPXIP4
    segs = __skb_gso_segment(raw, MSS, gso_type)
    assert [[x.id for x in layers(IP(s)) if isinstance(x, IP)] for s in segs] == [[1, 2, 3], [2, 2, 3], [3, 2, 3]]


# --------------------------------------------------------------------- trace

@pytest.mark.parametrize("name, trace", [
    ("tcp4", ["inet_gso_segment", "tcp4_gso_segment"]),
    ("udp6", ["ipv6_gso_segment", "udp6_ufo_fragment", "__udp_gso_segment"]),
    ("ipip", ["inet_gso_segment", "ipip_gso_segment", "inet_gso_segment", "tcp4_gso_segment"]),
    ("4in6", ["ipv6_gso_segment", "ip4ip6_gso_segment", "inet_gso_segment", "tcp4_gso_segment"]),
    ("sit_udp", ["inet_gso_segment", "sit_gso_segment", "ipv6_gso_segment", "udp6_ufo_fragment",
                 "__udp_gso_segment"]),
    ("ip6ip6_destopt", ["ipv6_gso_segment", "ip6ip6_gso_segment", "ipv6_gso_segment", "tcp6_gso_segment"]),
])
def test_trace_names_callbacks(name, trace):
    """The trace lists the offload callbacks passed through, outermost first."""
    got: list[str] = []
    segment(name, trace=got)
    assert got == trace


# ------------------------------------------------------------------- gso_type

@pytest.mark.parametrize("name", IDS)
def test_gso_type_of(name):
    """gso_type_of gives the L4 bit of the innermost header and one IPXIP bit per tunnel level."""
    assert gso_type_of(bytes(CASES[name][0])) == CASES[name][1]


def _doff(n: int, payload: bytes = b"") -> bytes:
    """TCP over IPv4 with the data offset rewritten to *n* words."""
    raw = bytearray(bytes(ip4() / tcp() / Raw(payload)))
    raw[32] = n << 4
    return bytes(raw)


TCP4, TCP6, UDP4 = bytes(CASES["tcp4"][0]), bytes(CASES["tcp6"][0]), bytes(CASES["udp4"][0])


@pytest.mark.parametrize("raw, gso_size, gso_type, func, errno", [
    (TCP4, MSS, SKB_GSO_TCPV6, "tcp4_gso_segment", "-EINVAL"),
    (TCP6, MSS, SKB_GSO_TCPV4, "tcp6_gso_segment", "-EINVAL"),
    (UDP4, MSS, SKB_GSO_TCPV4, "udp4_ufo_fragment", "-EINVAL"),
    (bytes(CASES["udp6"][0]), MSS, SKB_GSO_TCPV6, "udp6_ufo_fragment", "-EINVAL"),
    (bytes(CASES["ipip"][0]), MSS, SKB_GSO_TCPV4 | SKB_GSO_IPXIP6, "ipip_gso_segment", "-EINVAL"),
    (bytes(CASES["ipip"][0]), MSS, SKB_GSO_TCPV6 | SKB_GSO_IPXIP4, "tcp4_gso_segment", "-EINVAL"),
    (bytes(CASES["sit"][0]), MSS, SKB_GSO_TCPV6 | SKB_GSO_IPXIP6, "sit_gso_segment", "-EINVAL"),
    (bytes(CASES["4in6"][0]), MSS, SKB_GSO_TCPV4 | SKB_GSO_IPXIP4, "ip4ip6_gso_segment", "-EINVAL"),
    (bytes(CASES["ip6ip6"][0]), MSS, SKB_GSO_TCPV6, "ip6ip6_gso_segment", "-EINVAL"),
    (bytes(CASES["ip6ip6_destopt"][0]), MSS, SKB_GSO_TCPV6 | SKB_GSO_IPXIP4, "ip6ip6_gso_segment", "-EINVAL"),
    (bytes(CASES["4in6in4"][0]), MSS, SKB_GSO_TCPV4 | SKB_GSO_IPXIP4, "ip4ip6_gso_segment", "-EINVAL"),
    (bytes(ip4() / GRE() / ip4() / tcp()), MSS, SKB_GSO_TCPV4, "inet_gso_segment", "-EPROTONOSUPPORT"),
    (bytes(ip6() / GRE() / ip6() / tcp()), MSS, SKB_GSO_TCPV6, "ipv6_gso_segment", "-EPROTONOSUPPORT"),
    (bytes(ip4(O4) / ip4() / GRE()), MSS, SKB_GSO_IPXIP4, "inet_gso_segment", "-EPROTONOSUPPORT"),
    (bytes(ip4() / ICMP() / Raw(PAYLOAD)), MSS, SKB_GSO_TCPV4, "inet_gso_segment", "-EPROTONOSUPPORT"),
    (bytes(ip6() / IPv6ExtHdrFragment() / tcp()), MSS, SKB_GSO_TCPV6, "ipv6_gso_segment", "-EPROTONOSUPPORT"),
    (bytes(ip6(nh=60) / Raw(DESTOPT_ENCAP_LIMIT[:6])), MSS, SKB_GSO_TCPV6, "ipv6_gso_segment", "-EPROTONOSUPPORT"),
    (bytes(ip6(nh=60) / Raw(bytes([6, 1]) + bytes(10))), MSS, SKB_GSO_TCPV6, "ipv6_gso_segment", "-EPROTONOSUPPORT"),
    (TCP4[:1500], MSS, SKB_GSO_TCPV4, "inet_gso_segment", "-EINVAL"),
    (TCP4[:12], MSS, SKB_GSO_TCPV4, "inet_gso_segment", "-EINVAL"),
    (TCP6[:1500], MSS, SKB_GSO_TCPV6, "ipv6_gso_segment", "-EINVAL"),
    (TCP6[:30], MSS, SKB_GSO_TCPV6, "ipv6_gso_segment", "-EINVAL"),
    (bytes([0x44]) + TCP4[1:], MSS, SKB_GSO_TCPV4, "inet_gso_segment", "-EINVAL"),
    (bytes(ip4(proto=6) / Raw(bytes(tcp())[:10])), MSS, SKB_GSO_TCPV4, "tcp4_gso_segment", "-EINVAL"),
    (bytes(ip6(nh=6) / Raw(bytes(tcp())[:19])), MSS, SKB_GSO_TCPV6, "tcp6_gso_segment", "-EINVAL"),
    (bytes(ip4(proto=17) / Raw(b"\0" * 5)), MSS, SKB_GSO_UDP_L4, "udp4_ufo_fragment", "-EINVAL"),
    (_doff(4, PAYLOAD), MSS, SKB_GSO_TCPV4, "tcp_gso_segment", "-EINVAL"),
    (_doff(15), MSS, SKB_GSO_TCPV4, "tcp_gso_segment", "-EINVAL"),
    (TCP4, 0, SKB_GSO_TCPV4, "skb_gso_segment", "-EINVAL"),
    (TCP4, -1, SKB_GSO_TCPV4, "skb_gso_segment", "-EINVAL"),
    (bytes(ip4(flags=0) / tcp() / Raw(PAYLOAD)), MSS, SKB_GSO_TCPV4 | SKB_GSO_TCP_FIXEDID, "inet_gso_segment",
     "-EPROTONOSUPPORT"),
    (b"", MSS, SKB_GSO_TCPV4, "skb_mac_gso_segment", "-EPROTONOSUPPORT"),
    (b"\x50" + TCP4[1:], MSS, SKB_GSO_TCPV4, "skb_mac_gso_segment", "-EPROTONOSUPPORT"),
])
def test_errors(raw, gso_size, gso_type, func, errno):
    """Each inconsistency fails where the kernel's callback would, with its errno."""
    with pytest.raises(GsoError) as exc:
        __skb_gso_segment(raw, gso_size, gso_type)
    assert (exc.value.func, exc.value.errno_name) == (func, errno)
    assert isinstance(exc.value, FlowsimError) and str(exc.value).startswith(f"{func}: {errno}: ")


@pytest.mark.parametrize("raw", [
    bytes(ip4() / GRE() / ip4() / tcp()),
    bytes(ip6() / ICMP()),
    bytes(ip6(nh=58) / Raw(b"\x80\0\0\0\0\0\0\0")),
])
def test_gso_type_of_rejects_non_tcp_udp(raw):
    """gso_type_of raises GsoError when the innermost protocol has no GSO callback."""
    with pytest.raises(GsoError):
        gso_type_of(raw)


# ------------------------------------------------------------- MTU validation

@pytest.mark.parametrize("name", IDS)
def test_validate_network_len_boundary(name):
    """skb_gso_validate_network_len is true at mtu == seglen and false one byte below."""
    raw = bytes(CASES[name][0])
    seglen = CASES[name][2] + MSS
    assert skb_gso_validate_network_len(raw, MSS, seglen)
    assert skb_gso_validate_network_len(raw, MSS, seglen + 1)
    assert not skb_gso_validate_network_len(raw, MSS, seglen - 1)


@settings(max_examples=300, deadline=None)
@given(edits=st.lists(st.tuples(st.integers(0, 79), st.integers(0, 255)), min_size=1, max_size=6),
       cut=st.one_of(st.none(), st.integers(0, 200)), mss=st.sampled_from([1, 100, 1400]),
       gso_type=st.sampled_from([SKB_GSO_TCPV4, SKB_GSO_TCPV6, SKB_GSO_TCPV4 | SKB_GSO_IPXIP4, SKB_GSO_UDP_L4]))
def test_mangled_packets_raise_only_gso_errors(edits, cut, mss, gso_type):
    """Whatever bytes a GSO skb carries, segmenting or measuring it either works or raises GsoError."""
    raw = bytearray(bytes(CASES["ipip"][0]))
    for at, value in edits:
        raw[at] = value
    packet = bytes(raw if cut is None else raw[:cut])
    for fn in (lambda: __skb_gso_segment(packet, mss, gso_type), lambda: gso_type_of(packet),
               lambda: skb_gso_network_seglen(packet, mss)):
        with contextlib.suppress(GsoError):
            fn()


# ------------------------------------------------------------- UDP tunnels

def _vxlan(udp_csum: bool = True, ethertype: int | None = None):
    """TCP over IPv4 in a VXLAN (or Geneve-less, same layout) UDP tunnel; inner MAC header at 20 + 8 + 8."""
    from scapy.layers.l2 import Ether
    from scapy.layers.vxlan import VXLAN

    eth = Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
    if ethertype is not None:
        eth.type = ethertype
    outer = ip4(O4, id=0x100) / UDP(sport=49152, dport=4789, **({} if udp_csum else {"chksum": 0}))
    return bytes(outer / VXLAN(vni=42) / eth / ip4(id=0x200) / tcp(options=TS) / Raw(PAYLOAD)), 20 + 8 + 8


def test_udp_tunnel_segments():
    """__skb_udp_tunnel_segment: inner frames cut by the inner chain, each UDP header rebuilt with its checksum,
    the transport header left at the tunnel's UDP header."""
    from flowsim.kernel.gso import SKB_GSO_UDP_TUNNEL_CSUM, GsoSkb

    raw, inner_mac = _vxlan()
    assert gso_type_of(raw, inner_mac) == SKB_GSO_TCPV4 | SKB_GSO_UDP_TUNNEL_CSUM
    trace: list[str] = []
    skbs = GsoSkb(raw, MSS, SKB_GSO_TCPV4 | SKB_GSO_UDP_TUNNEL_CSUM, 0x6558, inner_mac).segment(trace)
    assert trace == ["inet_gso_segment", "udp4_ufo_fragment", "__skb_udp_tunnel_segment", "skb_mac_gso_segment",
                     "inet_gso_segment", "tcp4_gso_segment"]
    segs = [bytes(s.buf[s.network_header:]) for s in skbs]
    assert {s.transport_header - s.network_header for s in skbs} == {20}
    assert all(checksums_valid(s) for s in segs)
    pkts = [IP(s) for s in segs]
    assert [p[UDP].len for p in pkts] == [len(s) - 20 for s in segs]
    assert [p.id for p in pkts] == [0x100, 0x101, 0x102]
    assert [p[UDP].payload[IP].id for p in pkts] == [0x200, 0x201, 0x202]
    assert b"".join(bytes(p[TCP].payload) for p in pkts) == PAYLOAD


def test_udp_tunnel_without_checksum_keeps_zero():
    """Without SKB_GSO_UDP_TUNNEL_CSUM the tunnel's UDP checksum field is left as the GSO skb had it."""
    from flowsim.kernel.gso import SKB_GSO_UDP_TUNNEL

    raw, inner_mac = _vxlan(udp_csum=False)
    assert gso_type_of(raw, inner_mac) == SKB_GSO_TCPV4 | SKB_GSO_UDP_TUNNEL
    segs = __skb_gso_segment(raw, MSS, SKB_GSO_TCPV4 | SKB_GSO_UDP_TUNNEL, inner_mac=inner_mac)
    assert {IP(s)[UDP].chksum for s in segs} == {0}


@pytest.mark.parametrize("gso_type, ethertype, func, errno", [
    (SKB_GSO_TCPV4, None, "udp4_ufo_fragment", "-EINVAL"),  # no tunnel bit: the UDP_L4 check fails
    (SKB_GSO_TCPV4 | (1 << 11), 0x0806, "skb_mac_gso_segment", "-EPROTONOSUPPORT"),
    (SKB_GSO_TCPV6 | (1 << 11), None, "tcp4_gso_segment", "-EINVAL"),
])
def test_udp_tunnel_errors(gso_type, ethertype, func, errno):
    """The tunnel path fails where the kernel's would: tunnel bit, inner ethertype, inner gso_type bit."""
    raw, inner_mac = _vxlan(ethertype=ethertype)
    with pytest.raises(GsoError) as exc:
        __skb_gso_segment(raw, MSS, gso_type, inner_mac=inner_mac)
    assert (exc.value.func, exc.value.errno_name) == (func, errno)


def test_esp_without_xfrm_offload_has_no_callback():
    """ESP GSO needs the skb's xfrm_offload (esp4_gso_segment); without it ESP is a protocol with no callback."""
    raw = bytes(ip4(proto=50) / Raw(bytes(range(16)) + PAYLOAD))
    with pytest.raises(GsoError) as exc:
        __skb_gso_segment(raw, MSS, SKB_GSO_TCPV4 | (1 << 15))
    assert (exc.value.func, exc.value.errno_name) == ("inet_gso_segment", "-EPROTONOSUPPORT")
