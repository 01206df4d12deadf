"""IPv6 fragmentation and reassembly, as the kernel does it.

A host's UDP socket (``IPV6_PMTUDISC_WANT``: ``ip6_sk_ignore_df``) sends a datagram longer than the path MTU as
fragments (``ip6_fragment``, net/ipv6/ip6_output.c: ``ip6_find_1stfragopt``, then ``ip6_frag_init`` /
``ip6_frag_next``: every piece but the last a multiple of 8 bytes).  A router with conntrack reassembles them at
PREROUTING (``nf_ct_frag6_gather``, net/ipv6/netfilter/nf_conntrack_reasm.c), which records the largest fragment
in ``IP6CB(skb)->frag_max_size`` and sets ``skb->ignore_df``; ``ip6_pkt_too_big`` lets such a packet through
``ip6_forward`` when that largest fragment fits, and ``__ip6_finish_output`` fragments it again to at most that
size.  The receiving host reassembles (``ipv6_frag_rcv``, net/ipv6/reassembly.c).  The flowtable hook never
takes a fragment: ``nf_flow_tuple_ipv6`` finds no TCP/UDP header after the IPv6 one.

Measured on Debian 7.2.13 with ip6ip6-rx and 1480- and 1500-byte UDP datagrams into tun0 (MTU 1460): the first
datagram meets the Packet Too Big, every later one reaches the server, all of them through the router's slow path.
"""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path

import pytest
from scapy.layers.inet import UDP
from scapy.layers.inet6 import IPv6, IPv6ExtHdrDestOpt, IPv6ExtHdrFragment, IPv6ExtHdrHopByHop, defragment6
from scapy.layers.l2 import Ether
from scapy.utils import rdpcap

from flowsim.kernel.pkt import (
    Frag6Queue, build_ipv6, ip6_find_1stfragopt, ip6_fragment, parse_ip, udp_datagram,
)
from flowsim.kernel.skb import SkBuff
from flowsim.kernel.stack.ip import _ip6_pkt_too_big
from flowsim.config.topology import load_topology
from flowsim.sim.report import build_report
from flowsim.sim.simulation import Simulation

TOPOLOGIES = Path(__file__).resolve().parent.parent / "topologies"
A, B = ipaddress.ip_address("2001:db8:1::1"), ipaddress.ip_address("2001:db8:3::2")


def _datagram(size: int = 1500) -> bytes:
    payload = bytes(range(256)) * (size // 256) + bytes(size % 256)
    return build_ipv6(A, B, 17, udp_datagram(A, B, 40000, 5201, payload[:size - 48]))


def test_ip6_fragment_cuts_to_the_mtu_in_multiples_of_eight():
    pkt = _datagram(1500)
    frags = ip6_fragment(pkt, 1460, 0x12345678)
    assert [len(f) for f in frags] == [1456, 100]  # 1408 data bytes (1460 - 40 - 8, & ~7), then the other 52
    parsed = [IPv6(f) for f in frags]
    assert [(p[IPv6ExtHdrFragment].offset, p[IPv6ExtHdrFragment].m, p[IPv6ExtHdrFragment].id) for p in parsed] == \
        [(0, 1, 0x12345678), (176, 0, 0x12345678)]
    assert all(p.nh == 44 and p[IPv6ExtHdrFragment].nh == 17 and p.plen == len(f) - 40
               for p, f in zip(parsed, frags))
    whole = defragment6(parsed)
    assert bytes(whole[UDP]) == pkt[40:]  # scapy's reassembly gives the datagram back
    stored = whole[UDP].chksum
    del whole[UDP].chksum
    assert IPv6(bytes(whole))[UDP].chksum == stored  # the checksum of the whole datagram, in the first fragment


def test_frag6_queue_reassembles_in_any_order_and_records_the_largest_fragment():
    pkt = _datagram(3000)
    frags = ip6_fragment(pkt, 1280, 7)
    assert len(frags) == 3
    q = Frag6Queue(0.0)
    results = [q.add(f, parse_ip(bytearray(f), 0)) for f in reversed(frags)]
    assert results[:2] == [None, None]
    assert results[2] == pkt
    assert q.frag_max_size == 1280 - (1280 - 48) % 8


def test_frag6_queue_waits_for_a_hole():
    frags = ip6_fragment(_datagram(3000), 1280, 7)
    q = Frag6Queue(0.0)
    assert q.add(frags[0], parse_ip(bytearray(frags[0]), 0)) is None
    assert q.add(frags[2], parse_ip(bytearray(frags[2]), 0)) is None


def test_ip6_find_1stfragopt_follows_the_kernel_loop():
    udp = bytes(UDP(sport=1, dport=2) / b"x")
    hbh = bytes(IPv6(src=str(A), dst=str(B)) / IPv6ExtHdrHopByHop() / udp)
    assert ip6_find_1stfragopt(hbh) == (48, 40)  # hop-by-hop is unfragmentable
    # a destination options header with no routing header before it stays in the unfragmentable part too
    dst = bytes(IPv6(src=str(A), dst=str(B)) / IPv6ExtHdrDestOpt() / udp)
    assert ip6_find_1stfragopt(dst) == (48, 40)
    assert ip6_find_1stfragopt(_datagram(100)) == (40, 6)
    assert ip6_find_1stfragopt(bytes(IPv6(src=str(A), dst=str(B), nh=0))) is None  # header cut off: -EINVAL


def test_ip6_fragment_keeps_the_unfragmentable_part_in_every_fragment():
    pkt = bytes(IPv6(src=str(A), dst=str(B)) / IPv6ExtHdrHopByHop() / UDP(sport=1, dport=2) / bytes(2000))
    frags = ip6_fragment(pkt, 1280, 9)
    assert all(IPv6(f).nh == 0 and IPv6(f)[IPv6ExtHdrHopByHop].nh == 44 for f in frags)
    q = Frag6Queue(0.0)
    out = [q.add(f, parse_ip(bytearray(f), 0)) for f in frags]
    assert out[-1] == pkt


def test_ip6_fragment_fails_without_room_for_eight_bytes():
    assert ip6_fragment(_datagram(1500), 40 + 8 + 7, 1) is None  # fail_toobig


@pytest.mark.parametrize("length, frag_max_size, ignore_df, too_big", [
    (1500, 0, False, True),      # a plain packet longer than the MTU
    (1500, 1456, True, False),   # reassembled by conntrack, its largest fragment fits: refragmented on output
    (1500, 1480, True, True),    # reassembled, but a fragment was longer than the MTU
    (1400, 1480, True, False),   # fits whatever its fragments were
])
def test_ip6_pkt_too_big(length, frag_max_size, ignore_df, too_big):
    pkt = _datagram(length)
    skb = SkBuff(buf=bytearray(pkt), data=0, linear_end=len(pkt))
    skb.frag_max_size, skb.ignore_df = frag_max_size, ignore_df
    assert _ip6_pkt_too_big(skb, parse_ip(skb.buf, 0), 1460) is too_big


def _udp_into_tunnel(tmp_path, size: int) -> Path:
    """ip6ip6-rx with its UDP table sending *size*-byte datagrams, paced (10 ms apart)."""
    text = (TOPOLOGIES / "ip6ip6-rx.toml").read_text()
    head, tcp, udp = re.split(r"(?m)^\[\[traffic\]\]\n", text)
    udp = re.sub(r"(?m)^size = \d+", f"size = {size}", udp)
    udp = re.sub(r"(?m)^packets = \d+", "packets = 12", udp).replace('proto = "udp"\n', 'proto = "udp"\nrate = 100\n')
    out = tmp_path / "udp-frag.toml"
    out.write_text(head + "[[traffic]]\n" + udp)
    return out


def test_udp_datagrams_past_the_tunnel_mtu_go_as_fragments_through_the_slow_path(tmp_path):
    sim = Simulation(load_topology(_udp_into_tunnel(tmp_path, 1500)), pcap_dir=tmp_path)
    sim.run()
    r = build_report(sim)
    (t,) = r["traffic"]
    # the first datagram meets tun0's MTU (1460) in ip6_forward: Packet Too Big; the client then fragments every
    # later one, the router reassembles and fragments again to the largest fragment, the server reassembles
    o = t["directions"]["original"]
    assert (o["sent"], o["delivered"], o["dropped"], o["fastpath"], o["slowpath"]) == (12, 11, 1, 0, 23)
    (ft,) = r["flowtables"]
    assert ft["reasons"] == {"no-flow-entry": 1, "ipv6-exthdr": 22}  # each later datagram's two fragments
    assert r["drops"] == {"pkt-too-big": 1}
    assert t["flows"][0]["server"]["received"] == 11
    frames = [Ether(bytes(p)) for p in rdpcap(str(tmp_path / "remote-eth1.pcap"))]
    inner = [p[IPv6] for p in frames if IPv6ExtHdrFragment in p]
    # forwarded as the client cut them (frag_max_size), after the remote end took the tunnel header off
    assert sorted({len(p) for p in inner}) == [100, 1456] and len(inner) == 22


def test_tcp_past_the_tunnel_mtu_is_not_fragmented(tmp_path):
    """TCP sizes its segments to the path MTU (tcp_sync_mss): no fragment, the flow is offloaded."""
    sim = Simulation(load_topology(TOPOLOGIES / "ip6ip6-rx.toml"), pcap_dir=tmp_path)
    sim.run()
    (ft,) = build_report(sim)["flowtables"]
    assert "ipv6-exthdr" not in ft["reasons"]
