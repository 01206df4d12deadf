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


@pytest.mark.parametrize("name", FRAMES)
@pytest.mark.parametrize("headlen", [None, 20, 60])
def test_the_wire_keeps_every_byte(name, headlen):
    """The skb of a frame from the wire is the skb of the whole frame, whatever the zero tail."""
    frame = FRAMES[name]
    buf = bytearray(NET_SKB_PAD) + frame  # as an skb to transmit holds it: headroom, then the frame
    head, zeros = frame_on_wire(buf, NET_SKB_PAD)
    assert head + bytes(zeros) == frame and not head.endswith(b"\0")
    assert _fields(skb_from_frame(head, 3, headlen, zeros=zeros)) == _fields(skb_from_frame(frame, 3, headlen))


def test_only_the_zero_tail_is_left_off():
    assert frame_on_wire(b"\1\0\2\0\0", 0) == (b"\1\0\2", 2)
    assert frame_on_wire(bytearray(b"\1\1\0\0"), 2) == (b"", 2)  # never before start
