"""The receiver's checksum verification (flowsim.kernel.stack.ip._l4_ok) with a sender's ``tag.sent_l4``.

The tag keeps the segment's L4 header and the length of its zero payload (not the segment: issue 16's
memory per packet in flight); a segment identical to it verifies without a sum, anything else is summed.
"""

from __future__ import annotations

import ipaddress

import pytest

from flowsim.kernel.headers import IPPROTO_TCP, IPPROTO_UDP
from flowsim.kernel.pkt import build_ipv4, build_ipv6, new_skb, parse_ip, tcp_segment, udp_datagram
from flowsim.kernel.stack import ip as stack_ip
from flowsim.kernel.stack.core import PacketTag

A4, B4 = ipaddress.ip_address("10.0.1.2"), ipaddress.ip_address("10.0.2.2")
A6, B6 = ipaddress.ip_address("2001:db8::1"), ipaddress.ip_address("2001:db8:1::2")


def _skb(src, dst, proto: int, seg: bytes, sent: tuple | None):
    pkt = build_ipv4(src, dst, proto, seg) if src.version == 4 else build_ipv6(src, dst, proto, seg)
    tag = PacketTag("t", "original", 1)
    tag.sent_l4 = sent
    skb = new_skb(pkt, tag)
    return skb, parse_ip(skb.buf, skb.data)


def _tcp(src, dst, n: int) -> tuple[bytes, tuple]:
    seg = tcp_segment(src, dst, 40000, 80, 1000, 2000, 0x18, bytes(n), options=bytes([1, 1, 8, 10]) + bytes(8))
    return seg, (src, dst, seg[:len(seg) - n], n)


@pytest.mark.parametrize(("src", "dst"), [(A4, B4), (A6, B6)])
@pytest.mark.parametrize("n", [0, 1, 1000, 65400])
def test_identical_segment_verifies_without_a_sum(monkeypatch, src, dst, n):
    seg, sent = _tcp(src, dst, n)
    skb, info = _skb(src, dst, IPPROTO_TCP, seg, sent)
    summed = []
    monkeypatch.setattr(stack_ip, "l4_checksum", lambda *a: summed.append(a) or 0)
    assert stack_ip._l4_ok(skb, info)
    assert skb.tag.sent_l4 is None  # one receiver
    assert summed == []


@pytest.mark.parametrize(("src", "dst"), [(A4, B4), (A6, B6)])
def test_changed_segment_is_summed(src, dst):
    seg, sent = _tcp(src, dst, 100)
    # a payload byte changed (the checksum no longer matches): summed, and rejected
    bad = bytearray(seg)
    bad[-1] = 1
    skb, info = _skb(src, dst, IPPROTO_TCP, bytes(bad), sent)
    assert not stack_ip._l4_ok(skb, info)
    # a header byte changed
    bad = bytearray(seg)
    bad[4] ^= 0x80
    skb, info = _skb(src, dst, IPPROTO_TCP, bytes(bad), sent)
    assert not stack_ip._l4_ok(skb, info)
    # one byte longer (a zero: its sum is the same, the length in the pseudo-header is not)
    skb, info = _skb(src, dst, IPPROTO_TCP, seg + b"\0", sent)
    assert not stack_ip._l4_ok(skb, info)
    # other addresses (NAT without the checksum update)
    other = ipaddress.ip_address("10.9.9.9" if src.version == 4 else "2001:db8:9::9")
    skb, info = _skb(other, dst, IPPROTO_TCP, seg, sent)
    assert not stack_ip._l4_ok(skb, info)
    # a segment rewritten with its checksum recomputed (NAT of a port): summed, and accepted
    nat = tcp_segment(src, dst, 40001, 80, 1000, 2000, 0x18, bytes(100), options=bytes([1, 1, 8, 10]) + bytes(8))
    skb, info = _skb(src, dst, IPPROTO_TCP, nat, sent)
    assert stack_ip._l4_ok(skb, info)
    # no tag: summed
    skb, info = _skb(src, dst, IPPROTO_TCP, seg, None)
    assert stack_ip._l4_ok(skb, info)


def test_udp():
    seg = udp_datagram(A4, B4, 5000, 53, bytes(30))
    skb, info = _skb(A4, B4, IPPROTO_UDP, seg, (A4, B4, seg[:8], 30))
    assert stack_ip._l4_ok(skb, info)
    bad = bytearray(seg)
    bad[10] = 7
    skb, info = _skb(A4, B4, IPPROTO_UDP, bytes(bad), (A4, B4, seg[:8], 30))
    assert not stack_ip._l4_ok(skb, info)
