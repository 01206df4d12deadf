"""Packet helpers of the slow path against scapy: parsing, building, incremental checksums, fragmentation."""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.inet6 import IPv6, IPv6ExtHdrDestOpt, IPv6ExtHdrFragment

from flowsim.kernel.pkt import (
    FragQueue,
    build_ipv4,
    build_ipv6,
    icmp_error,
    ip_decrease_ttl,
    ip_fragment,
    ipv4_change_dsfield,
    ipv6_change_dsfield,
    parse_ip,
    tcp_segment,
    udp_datagram,
)
from tests.frames import l4_payload_raw

A4, B4 = ipaddress.ip_address("10.0.1.99"), ipaddress.ip_address("10.0.2.99")
A6, B6 = ipaddress.ip_address("dead:1::99"), ipaddress.ip_address("dead:2::99")

addrs4 = st.builds(ipaddress.IPv4Address, st.integers(1, 2**32 - 2))
addrs6 = st.builds(ipaddress.IPv6Address, st.integers(1, 2**128 - 2))
ports = st.integers(1, 65535)
payloads = st.binary(max_size=300)


def scapy_ok(raw: bytes, cls=IP) -> bool:
    """scapy recomputes the same checksums (IP header; L4 unless a fragment; not inside quoted packets), the L4
    payload left Raw (tests.frames.l4_payload_raw)."""
    with l4_payload_raw():
        pkt = cls(raw)
        clone = pkt.copy()
        for layer in clone.iterpayloads():
            if "error" in type(layer).__name__.lower():
                break  # a quoted packet: truncated, its L4 checksum covers bytes that are not there
            frag = isinstance(layer, IP) and (layer.flags.MF or layer.frag)
            for name in ("chksum", "cksum"):
                if name in layer.fields:
                    setattr(layer, name, None)
            if frag:
                break
        again = cls(bytes(clone))
        return bytes(again) == raw


@settings(max_examples=60, deadline=None)
@given(src=addrs4, dst=addrs4, sport=ports, dport=ports, seq=st.integers(0, 2**32 - 1), payload=payloads,
       flags=st.sampled_from([0x02, 0x12, 0x10, 0x18, 0x11, 0x14]), ttl=st.integers(1, 255))
def test_tcp_over_ipv4_matches_scapy(src, dst, sport, dport, seq, payload, flags, ttl):
    """tcp_segment + build_ipv4: scapy agrees on every field and checksum; parse_ip reads them back."""
    raw = build_ipv4(src, dst, 6, tcp_segment(src, dst, sport, dport, seq, 7, flags, payload), ttl=ttl, ident=9)
    assert scapy_ok(raw)
    p = IP(raw)
    info = parse_ip(bytearray(raw), 0)
    assert (info.src, info.dst, info.sport, info.dport, info.tcp_flags, info.ttl) == (
        src, dst, p[TCP].sport, p[TCP].dport, int(p[TCP].flags), p.ttl)
    assert info.tot_len == len(raw) and info.df and not info.frag


@settings(max_examples=60, deadline=None)
@given(src=addrs6, dst=addrs6, sport=ports, dport=ports, payload=payloads, hlim=st.integers(1, 255))
def test_udp_over_ipv6_matches_scapy(src, dst, sport, dport, payload, hlim):
    """udp_datagram + build_ipv6: scapy agrees; the pseudo-header includes the 128-bit addresses."""
    raw = build_ipv6(src, dst, 17, udp_datagram(src, dst, sport, dport, payload), hlim=hlim)
    assert scapy_ok(raw, IPv6)
    info = parse_ip(bytearray(raw), 0)
    assert (info.version, info.l4proto, info.sport, info.dport, info.ttl) == (6, 17, sport, dport, hlim)


def test_parse_walks_ipv6_extension_headers():
    """parse_ip skips destination options (the ip6tnl encap-limit header) to the upper protocol."""
    inner = bytes(IPv6(src=str(A6), dst=str(B6)) / UDP(sport=1, dport=2))
    raw = bytes(IPv6(src="2001:db8::1", dst="2001:db8::2") / IPv6ExtHdrDestOpt(nh=41) / inner)
    info = parse_ip(bytearray(raw), 0)
    assert info.l4proto == 41 and info.l4off == 48


def test_parse_rejects_what_ip_rcv_drops():
    """A bad IPv4 header checksum, a truncated packet or a bad version is None (ip_rcv_core)."""
    good = bytearray(build_ipv4(A4, B4, 17, udp_datagram(A4, B4, 1, 2)))
    assert parse_ip(good, 0) is not None
    bad = bytearray(good)
    bad[10] ^= 0xFF
    assert parse_ip(bad, 0) is None and parse_ip(good[:-1], 0) is None
    assert parse_ip(bytearray(b"\x50" + bytes(39)), 0) is None


@settings(max_examples=40, deadline=None)
@given(ttl=st.integers(2, 255), tos=st.integers(0, 255), dscp=st.integers(0, 63))
def test_incremental_header_updates_match_a_full_recompute(ttl, tos, dscp):
    """ip_decrease_ttl and ipv4_change_dsfield keep the header checksum right (RFC 1624)."""
    buf = bytearray(build_ipv4(A4, B4, 17, udp_datagram(A4, B4, 1, 2, b"x"), ttl=ttl, tos=tos))
    ip_decrease_ttl(buf, 0)
    ipv4_change_dsfield(buf, 0, dscp)
    assert scapy_ok(bytes(buf)) and IP(bytes(buf)).ttl == ttl - 1 and IP(bytes(buf)).tos == (dscp << 2) | (tos & 3)
    buf6 = bytearray(build_ipv6(A6, B6, 17, udp_datagram(A6, B6, 1, 2), tclass=tos))
    ipv6_change_dsfield(buf6, 0, dscp)
    assert IPv6(bytes(buf6)).tc == (dscp << 2) | (tos & 3)


@settings(max_examples=60, deadline=None)
@given(size=st.integers(1, 6000), mtu=st.integers(68, 2000), order=st.randoms(use_true_random=False))
def test_fragment_and_reassemble_round_trip(size, mtu, order):
    """ip_fragment: fragments fit the MTU, offsets multiple of 8, valid headers; FragQueue rebuilds the datagram."""
    pkt = build_ipv4(A4, B4, 17, udp_datagram(A4, B4, 5, 6, bytes(range(256)) * (size // 256) + bytes(size % 256)),
                     df=False, ident=77)
    frags = ip_fragment(pkt, mtu) if len(pkt) > mtu else [pkt]
    assert all(len(f) <= mtu and scapy_ok(f) for f in frags)
    assert all(IP(f).frag * 8 % 8 == 0 for f in frags)
    order.shuffle(frags)
    q, whole = FragQueue(0.0), None
    for f in frags:
        info = parse_ip(bytearray(f), 0)
        whole = q.add(f, info) if info.frag else f
    assert whole == pkt


@pytest.mark.parametrize("v, type_, code, info32", [(4, 11, 0, 0), (4, 3, 4, 1500), (6, 3, 0, 0), (6, 2, 0, 1500)])
def test_icmp_errors_are_valid_and_quote_the_packet(v, type_, code, info32):
    """icmp_error: type, code, MTU field, the offending packet quoted, checksums valid (icmp_send / icmp6_send)."""
    src, dst = (A4, B4) if v == 4 else (A6, B6)
    me = ipaddress.ip_address("192.0.2.1" if v == 4 else "2001:db8::1")
    build = build_ipv4 if v == 4 else build_ipv6
    offending = build(src, dst, 6, tcp_segment(src, dst, 1000, 2000, 1, 0, 0x02, bytes(1300)))
    raw = icmp_error(offending, parse_ip(bytearray(offending), 0), me, type_, code, info32)
    assert scapy_ok(raw, IP if v == 4 else IPv6)
    info = parse_ip(bytearray(raw), 0)
    assert (info.src, info.dst, info.icmp_type, info.icmp_code) == (me, src, type_, code) and info.is_icmp_error
    if v == 4:
        p = IP(raw)
        assert len(raw) <= 576 and p.tos == 0xC0 and not p.flags.DF
        assert int.from_bytes(raw[24:28], "big") == info32
    else:
        assert len(raw) <= 1280 and int.from_bytes(raw[44:48], "big") == info32


def test_ipv6_fragment_header_is_read():
    """A later IPv6 fragment has no L4 header: parse_ip marks it as a non-first fragment."""
    raw = bytes(IPv6(src=str(A6), dst=str(B6)) / IPv6ExtHdrFragment(offset=10, m=1, id=5, nh=17) / bytes(16))
    info = parse_ip(bytearray(raw), 0)
    assert info.frag and not info.first and info.mf and info.frag_off == 10 and info.sport is None
