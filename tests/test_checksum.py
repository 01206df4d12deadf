"""The internet checksum (RFC 1071) against the word-by-word reference: ``internet_checksum`` reads the data as
one number and takes its residue modulo 0xFFFF, the pseudo-header sum adds whole addresses (issue 16)."""

from __future__ import annotations

import ipaddress
import struct

from hypothesis import given
from hypothesis import strategies as st

from flowsim.kernel.headers import IPPROTO_TCP, IPPROTO_UDP, internet_checksum
from flowsim.kernel.pkt import l4_checksum


def reference(data: bytes, initial: int = 0) -> int:
    """RFC 1071 as written: 16-bit words summed, carries folded back, complemented."""
    if len(data) & 1:
        data += b"\0"
    total = initial + sum(w for (w,) in struct.iter_unpack("!H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def reference_l4(src, dst, proto: int, segment: bytes) -> int:
    """The pseudo-header (addresses, zero, protocol, length) as 16-bit words, then the segment."""
    n = len(segment)
    pseudo = src.packed + dst.packed + struct.pack("!HHH", n >> 16, n & 0xFFFF, proto)
    words = sum(w for (w,) in struct.iter_unpack("!H", pseudo))
    return reference(segment, words)


_DATA = st.one_of(st.binary(max_size=1600), st.integers(0, 1600).map(bytes),
                  st.integers(0, 1600).map(lambda n: b"\xff" * n))


@given(_DATA, st.one_of(st.just(0), st.integers(0, 1 << 40)))
def test_internet_checksum_equals_the_word_sum(data, initial):
    assert internet_checksum(data, initial) == reference(data, initial)
    assert internet_checksum(bytearray(data), initial) == reference(data, initial)
    assert internet_checksum(memoryview(data), initial) == reference(data, initial)


@given(st.booleans(), st.integers(0, 2**128 - 1), st.integers(0, 2**128 - 1), st.sampled_from([IPPROTO_TCP, IPPROTO_UDP, 58]),
       _DATA)
def test_l4_checksum_equals_the_pseudo_header_reference(v6, a, b, proto, segment):
    if v6:
        src, dst = ipaddress.IPv6Address(a), ipaddress.IPv6Address(b)
    else:
        src, dst = ipaddress.IPv4Address(a >> 96), ipaddress.IPv4Address(b >> 96)
    assert l4_checksum(src, dst, proto, segment) == reference_l4(src, dst, proto, segment)


def test_a_valid_packet_sums_to_zero():
    data = bytearray(b"\x45\x00\x00\x1c\x00\x00\x40\x00\x40\x11\x00\x00\x0a\x00\x00\x01\x0a\x00\x00\x02")
    struct.pack_into("!H", data, 10, internet_checksum(data))
    assert internet_checksum(data) == 0 == reference(bytes(data))
