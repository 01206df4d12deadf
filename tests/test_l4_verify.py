"""The receiver's checksum verification (flowsim.kernel.stack.ip._l4_ok, ``skb_checksum_init``).

Every segment is summed; a zero payload after the L4 header is checked with one compare and left out of the
sum (zeros add nothing to a one's-complement sum).  Equal to the whole segment's sum on every segment: zero
or random payloads of odd and even lengths, bad data offsets, a changed byte anywhere.
"""

from __future__ import annotations

import ipaddress
import random

import pytest

from flowsim.kernel.headers import IPPROTO_TCP, IPPROTO_UDP
from flowsim.kernel.pkt import build_ipv4, build_ipv6, l4_checksum, new_skb, parse_ip, tcp_segment, udp_datagram
from flowsim.kernel.stack import ip as stack_ip
from flowsim.kernel.stack.core import PacketTag

A4, B4 = ipaddress.ip_address("10.0.1.2"), ipaddress.ip_address("10.0.2.2")
A6, B6 = ipaddress.ip_address("2001:db8::1"), ipaddress.ip_address("2001:db8:1::2")
OPTS = bytes([1, 1, 8, 10]) + bytes(8)


def _skb(src, dst, proto: int, seg: bytes):
    pkt = build_ipv4(src, dst, proto, seg) if src.version == 4 else build_ipv6(src, dst, proto, seg)
    skb = new_skb(pkt, PacketTag("t", "original", 1))
    return skb, parse_ip(skb.buf, skb.data)


def _summed(src, dst, proto: int, seg: bytes) -> bool:
    """The reference: the whole segment summed with its pseudo-header."""
    return l4_checksum(src, dst, proto, seg) == 0


@pytest.mark.parametrize(("src", "dst"), [(A4, B4), (A6, B6)])
@pytest.mark.parametrize("n", [0, 1, 999, 1000, 65400])
def test_a_zero_payload_verifies_and_is_not_summed(monkeypatch, src, dst, n):
    seg = tcp_segment(src, dst, 40000, 80, 1000, 2000, 0x18, bytes(n), options=OPTS)
    skb, info = _skb(src, dst, IPPROTO_TCP, seg)
    lengths = []
    real = stack_ip.internet_checksum
    monkeypatch.setattr(stack_ip, "internet_checksum", lambda data, initial=0: lengths.append(len(data))
                        or real(data, initial))
    assert stack_ip._l4_ok(skb, info)
    assert lengths == [32]  # the header with its options, not the payload


@pytest.mark.parametrize(("src", "dst"), [(A4, B4), (A6, B6)])
def test_changed_segment_is_rejected(src, dst):
    seg = tcp_segment(src, dst, 40000, 80, 1000, 2000, 0x18, bytes(100), options=OPTS)
    for at, value in ((len(seg) - 1, 1), (4, seg[4] ^ 0x80), (12, 0x70)):  # payload, sequence, data offset
        bad = bytearray(seg)
        bad[at] = value
        skb, info = _skb(src, dst, IPPROTO_TCP, bytes(bad))
        assert not stack_ip._l4_ok(skb, info)
    # one byte longer (a zero: its sum is the same, the length in the pseudo-header is not)
    skb, info = _skb(src, dst, IPPROTO_TCP, seg + b"\0")
    assert not stack_ip._l4_ok(skb, info)
    # other addresses (NAT without the checksum update)
    other = ipaddress.ip_address("10.9.9.9" if src.version == 4 else "2001:db8:9::9")
    skb, info = _skb(other, dst, IPPROTO_TCP, seg)
    assert not stack_ip._l4_ok(skb, info)
    # a segment rewritten with its checksum recomputed (NAT of a port): accepted
    nat = tcp_segment(src, dst, 40001, 80, 1000, 2000, 0x18, bytes(100), options=OPTS)
    skb, info = _skb(src, dst, IPPROTO_TCP, nat)
    assert stack_ip._l4_ok(skb, info)


def test_udp():
    seg = udp_datagram(A4, B4, 5000, 53, bytes(30))
    skb, info = _skb(A4, B4, IPPROTO_UDP, seg)
    assert stack_ip._l4_ok(skb, info)
    bad = bytearray(seg)
    bad[10] = 7
    skb, info = _skb(A4, B4, IPPROTO_UDP, bytes(bad))
    assert not stack_ip._l4_ok(skb, info)
    nocsum = bytearray(bad)
    nocsum[6:8] = b"\0\0"  # IPv4 UDP without a checksum: not verified
    skb, info = _skb(A4, B4, IPPROTO_UDP, bytes(nocsum))
    assert stack_ip._l4_ok(skb, info)


@pytest.mark.parametrize("seed", range(4))
def test_equal_to_the_whole_sum_on_random_segments(seed):
    """Random headers (any data offset), zero / random / partly zero payloads of odd and even lengths, a
    correct or a random checksum: the same verdict as summing the whole segment."""
    rnd = random.Random(seed)
    for _ in range(400):
        src, dst = (A4, B4) if rnd.random() < 0.5 else (A6, B6)
        proto = rnd.choice((IPPROTO_TCP, IPPROTO_UDP))
        n = rnd.choice((0, 1, 2, 3, rnd.randrange(4, 1500)))
        kind = rnd.randrange(3)
        payload = bytes(n) if kind == 0 else rnd.randbytes(n) if kind == 1 else rnd.randbytes(n // 2) + bytes(n - n // 2)
        if proto == IPPROTO_TCP:
            seg = bytearray(tcp_segment(src, dst, rnd.randrange(65536), 80, rnd.randrange(2**32), 0, 0x18,
                                        payload, options=OPTS if rnd.random() < 0.5 else b""))
            if rnd.random() < 0.2:
                seg[12] = rnd.randrange(256)  # any data offset, even past the segment
        else:
            seg = bytearray(udp_datagram(src, dst, rnd.randrange(1, 65536), 53, payload))
        if rnd.random() < 0.3:
            at = rnd.randrange(len(seg))
            seg[at] = rnd.randrange(256)
        skb, info = _skb(src, dst, proto, bytes(seg))
        expected = _summed(src, dst, proto, bytes(seg)) or (
            proto == IPPROTO_UDP and src.version == 4 and seg[6:8] == b"\0\0")
        assert stack_ip._l4_ok(skb, info) == expected, (proto, n, kind, bytes(seg[:20]).hex())
