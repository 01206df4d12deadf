"""A frame waits on the wire without its zero tail (``frame_on_wire``); ``skb_from_frame`` puts it back (issue 16)."""

from __future__ import annotations

import pytest
from frames import eth, ip
from scapy.layers.inet import TCP
from scapy.layers.l2 import Dot1Q

from flowsim.kernel.skb import NET_SKB_PAD, SkBuff, frame_on_wire, skb_from_frame

FRAMES = {
    "zero payload": eth(ip(4) / TCP() / bytes(1000)),
    "no zero tail": eth(ip(4) / TCP() / (b"p" * 60)),
    "payload ending in zeros": eth(ip(6) / TCP() / (b"p" * 10 + bytes(5))),
    "vlan": eth(Dot1Q(vlan=7) / ip(4) / TCP() / bytes(300)),
    "runt": bytes(10),
    "all zeros": bytes(64),
}


def _fields(skb: SkBuff | None) -> tuple | None:
    if skb is None:
        return None
    return (bytes(skb.buf), skb.data, skb.linear_end, skb.mac_header, skb.network_header, skb.protocol,
            skb.vlan_present, skb.vlan_tci)


def _zero_tail(frame: bytes) -> int:
    return len(frame) - len(frame.rstrip(b"\0"))


@pytest.mark.parametrize("name", FRAMES)
@pytest.mark.parametrize("headlen", [None, 20, 60])
@pytest.mark.parametrize("claim", ["tail", "less", "more", "none"])
def test_the_wire_keeps_every_byte(name, headlen, claim):
    """The skb of a frame from the wire is the skb of the whole frame, whatever the zero tail the sender
    claims (its zero payload: a frame encapsulated, fragmented or padded since may not end with it)."""
    frame = FRAMES[name]
    tail = _zero_tail(frame)
    zeros = {"tail": tail, "less": tail // 2, "more": tail + 1, "none": 0}[claim]
    buf = bytearray(NET_SKB_PAD) + frame  # as an skb to transmit holds it: headroom, then the frame
    head, left = frame_on_wire(buf, NET_SKB_PAD, zeros)
    assert head + bytes(left) == frame
    # only a claim the frame bears out is left off the wire; any other leaves the frame whole
    assert left == (zeros if claim in ("tail", "less") and zeros <= len(frame) else 0)
    assert _fields(skb_from_frame(head, 3, headlen, zeros=left)) == _fields(skb_from_frame(frame, 3, headlen))


def test_only_a_zero_tail_is_left_off():
    assert frame_on_wire(b"\1\0\2\0\0", 0, 2) == (b"\1\0\2", 2)
    assert frame_on_wire(b"\1\0\2\0\0", 0, 3) == (b"\1\0\2\0\0", 0)  # the third byte from the end is not 0
    assert frame_on_wire(bytearray(b"\1\1\0\0"), 2, 2) == (b"", 2)
    assert frame_on_wire(bytearray(b"\1\1\0\0"), 3, 2) == (b"\0", 0)  # never before start
