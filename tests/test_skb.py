"""The sk_buff model: header access and its cost, receive-side VLAN untagging (``pskb_may_pull``, ``skb_vlan_untag``)."""

from __future__ import annotations

import pytest
from frames import eth, ip
from scapy.layers.inet import IP, TCP
from scapy.layers.l2 import Dot1AD, Dot1Q, Ether

from flowsim.errors import SkbPullBug
from flowsim.kernel.skb import skb_from_frame


def frame(n_payload=60):
    return eth(ip(4) / TCP() / (b"p" * n_payload))


def test_header_pointer_in_linear_area_does_not_copy():
    """skb_header_pointer within skb_headlen returns a view, no copy counted."""
    skb = skb_from_frame(frame(), headlen=64)
    hp = skb.header_pointer(0, 20)
    assert isinstance(hp, memoryview) and bytes(hp) == bytes(IP(frame()[14:]))[:20]
    assert skb.cost.copies == 0


def test_header_pointer_beyond_linear_area_copies():
    """Bytes reaching into the fragments are copied, and the copy is counted."""
    skb = skb_from_frame(frame(), headlen=14 + 10)
    assert bytes(skb.header_pointer(0, 20)) == frame()[14:34]
    assert (skb.cost.copies, skb.cost.bytes_copied) == (1, 20)
    assert skb.headlen == 10  # nothing became linear


def test_header_pointer_beyond_end_is_none():
    """Past skb->len: NULL."""
    skb = skb_from_frame(frame(0))
    assert skb.header_pointer(skb.len - 4, 8) is None


@pytest.mark.parametrize("pulls,reallocs,copied", [
    ([10], 0, 0),  # already linear
    ([30], 1, 16),  # one head reallocation with 128 spare bytes
    ([30, 60, 100], 1, 86),  # later pulls fit into the tailroom
    ([30, 200], 2, 186),  # a pull beyond the spare bytes reallocates again
])
def test_may_pull_counts_head_reallocations(pulls, reallocs, copied):
    """pskb_may_pull makes bytes linear; __pskb_pull_tail expands the head only when tailroom is short."""
    skb = skb_from_frame(frame(300), headlen=14 + 14)
    assert all(skb.may_pull(n) for n in pulls)
    assert (skb.cost.reallocs, skb.cost.bytes_copied) == (reallocs, copied)
    assert skb.headlen == max(14, *pulls)


def test_may_pull_beyond_end_fails():
    """pskb_may_pull past skb->len fails and changes nothing."""
    skb = skb_from_frame(frame(0), headlen=20)
    before = (skb.headlen, skb.cost.reallocs)
    assert not skb.may_pull(skb.len + 1)
    assert (skb.headlen, skb.cost.reallocs) == before


def test_pull_of_linear_bytes_moves_data():
    """skb_pull over linear bytes advances skb->data."""
    skb = skb_from_frame(frame())
    skb.pull(20)
    assert bytes(skb.header_pointer(0, 2)) == frame()[34:36]


def test_pull_of_non_linear_bytes_is_a_kernel_bug():
    """skb_pull over bytes never pulled into the head is the bug the IP6IP6 rx review was about."""
    skb = skb_from_frame(frame(), headlen=14 + 20)
    with pytest.raises(SkbPullBug, match="crosses the linear area"):
        skb.pull(40)
    assert skb.cost.pull_bugs == 1


def test_push_reallocates_only_without_headroom():
    """skb_cow_head + skb_push: headroom first, reallocation when it runs out."""
    skb = skb_from_frame(frame())
    skb.push(b"\x45" * 20)
    assert skb.cost.reallocs == 0
    skb.push(b"x" * 200)
    assert skb.cost.reallocs == 1 and skb.bytes()[:200] == b"x" * 200


@pytest.mark.parametrize("tag,proto", [(Dot1Q, 0x8100), (Dot1AD, 0x88A8)])
def test_outer_tag_moves_to_hwaccel(tag, proto):
    """skb_vlan_untag before any ingress hook: outer tag → hwaccel (full TCI), protocol = inner ethertype."""
    raw = eth(tag(vlan=10, prio=6) / Dot1Q(vlan=20) / ip(4) / TCP())
    skb = skb_from_frame(raw)
    assert (skb.vlan_present, skb.vlan_proto, skb.vlan_tci) == (True, proto, (6 << 13) | 10)
    assert skb.protocol == 0x8100
    # The MAC header again directly precedes the (in-band VLAN) network header.
    assert skb.network_header - skb.mac_header == 14
    assert bytes(skb.buf[skb.mac_header:skb.mac_header + 12]) == raw[:12]
    assert skb.buf[skb.mac_header + 12:skb.mac_header + 14] == b"\x81\x00"


def test_untagging_can_be_turned_off():
    """--no-rx-vlan-offload: the tag stays in the packet."""
    skb = skb_from_frame(eth(Dot1Q(vlan=10) / ip(4) / TCP()), rx_vlan_offload=False)
    assert not skb.vlan_present and skb.protocol == 0x8100


@pytest.mark.parametrize("raw", [b"", b"\x00" * 13, bytes(Ether(type=0x8100))[:16]])
def test_runt_frames_never_reach_a_hook(raw):
    """Shorter than an Ethernet header, or a truncated outer tag: the device drops it (None)."""
    assert skb_from_frame(raw) is None
