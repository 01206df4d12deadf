"""The per-connection header parts the endpoints build packets from (AddrPair, the *_header builders), and the
retransmission queue that tcp_ack trims."""

from __future__ import annotations

import ipaddress

from hypothesis import given, settings
from hypothesis import strategies as st
from scapy.layers.inet import IP, TCP
from scapy.layers.inet6 import IPv6

from flowsim.kernel.pkt import (
    addr_pair, build_ipv4, ip_addr, ipv4_header, ipv6_header, parse_ip, tcp_header, tcp_segment, udp_datagram,
    udp_header,
)
from flowsim.sim.traffic import _after
from tests.frames import l4_payload_raw

addrs4 = st.builds(ipaddress.IPv4Address, st.integers(1, 2**32 - 2))
addrs6 = st.builds(ipaddress.IPv6Address, st.integers(1, 2**128 - 2))
ports = st.integers(1, 65535)
# what the hosts send (zeros, summed by length only) and anything else (summed byte by byte)
payloads = st.one_of(st.integers(0, 1500).map(bytes), st.binary(max_size=300))


@settings(max_examples=60, deadline=None)
@given(src=st.one_of(addrs4, addrs6), dst_int=st.integers(1, 2**32 - 2), sport=ports, dport=ports,
       seq=st.integers(0, 2**32 - 1), payload=payloads, options=st.sampled_from([b"", b"\x01\x01\x08\x0a" + bytes(8), b"\x01" * 4]))
def test_headers_from_an_addr_pair_are_the_builders_packets(src, dst_int, sport, dport, seq, payload, options):
    """An endpoint's packet (IP header + TCP / UDP header from the pair + payload) is byte for byte what
    build_ipv4 / build_ipv6 + tcp_segment / udp_datagram make, and scapy recomputes the same checksums."""
    dst = type(src)(dst_int)
    pair = addr_pair(src, dst)
    seg = tcp_segment(src, dst, sport, dport, seq, 5, 0x18, payload, options=options)
    assert tcp_header(pair.addr_sum, sport, dport, seq, 5, 0x18, payload, 65535, options) + payload == seg
    dgram = udp_datagram(src, dst, sport, dport, payload)
    assert udp_header(pair.addr_sum, sport, dport, payload) + payload == dgram
    if src.version == 4:
        raw = ipv4_header(pair.packed, 6, len(seg), 64, 0, 9, True) + seg
        assert raw == build_ipv4(src, dst, 6, seg, ident=9)
        cls = IP
    else:
        raw = ipv6_header(pair.packed, 6, len(seg)) + seg
        cls = IPv6
    with l4_payload_raw():  # scapy.all's SMB on port 445 rebuilt a 5-byte zero payload otherwise
        clone = cls(raw)
        del clone[TCP].chksum
        if cls is IP:
            del clone.chksum
        assert bytes(cls(bytes(clone))) == raw


def test_addr_pair_holds_the_parsers_objects():
    """A socket's addresses are the objects parse_ip gives for its packets (socket lookups hit by identity),
    and one pair object serves every socket between two addresses."""
    src, dst = ipaddress.ip_address("2001:db8:3::2"), ipaddress.ip_address("2001:db8:1::1")
    pair = addr_pair(src, dst)
    info = parse_ip(bytearray(ipv6_header(pair.packed, 59, 0)), 0)
    assert info.src is pair.src and info.dst is pair.dst and pair.src is ip_addr(src)
    assert addr_pair(ipaddress.ip_address("2001:db8:3::2"), dst) is pair
    scoped = addr_pair(ipaddress.ip_address("fe80::1%eth0"), dst)  # not the parser's address: kept as given
    assert str(scoped.src) == "fe80::1%eth0" and scoped.dst is pair.dst


@given(start=st.integers(0, 2**32 - 1), sizes=st.lists(st.integers(1, 1500), min_size=1, max_size=12),
       acked=st.integers(0, 20000))
def test_tcp_ack_trims_the_acknowledged_prefix(start, sizes, acked):
    """The queue is in sequence order, so the segments an ACK covers are a prefix, across the wrap of 2^32:
    tcp_ack's scan ends at the first segment it does not cover and keeps what the full filter keeps."""
    from flowsim.sim.traffic import Endpoint, rtx_entry, rtx_segment

    queue, seq = [], start
    for n in sizes:
        queue.append((seq, n))
        seq = (seq + n) & 0xFFFFFFFF
    ack = (start + min(acked, sum(sizes))) & 0xFFFFFFFF
    ep = Endpoint.__new__(Endpoint)
    ep.una, ep.snd_nxt, ep.rtx_queue = (start - 1) & 0xFFFFFFFF, seq, [rtx_entry(s, n) for s, n in queue]
    ep.tcp_ack(ack)
    assert [rtx_segment(e) for e in ep.rtx_queue] == [(s, n) for s, n in queue if _after(s + n, ack)]
