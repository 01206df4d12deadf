"""Re-fragmentation of what conntrack defragmented (IPv4), as the kernel does it.

``nf_defrag_ipv4`` (``nf_ct_ipv4_gather_frags`` → ``ip_defrag``) reassembles fragments at PREROUTING;
``ip_frag_reasm`` (net/ipv4/ip_fragment.c) records the largest fragment in ``IPCB(skb)->frag_max_size``, sets DF
(``IPSKB_FRAG_PMTU``) only when that largest fragment had DF, and keeps the fragments as the head's
``frag_list``; ``nf_ct_ipv4_gather_frags`` sets ``skb->ignore_df``.  On output ``__ip_finish_output``
(net/ipv4/ip_output.c) sends every such skb through ``ip_fragment`` whatever its length, and ``ip_do_fragment``
cuts it to at most ``frag_max_size`` (the ``frag_list`` as it is when it fits: ``ip_fraglist_init`` /
``ip_fraglist_prepare``).  ``ip_exceeds_mtu`` (net/ipv4/ip_forward.c) refuses a DF packet whose
``frag_max_size`` exceeds the MTU, and lets a reassembled one (``ignore_df``) through otherwise.

Measured on Debian 7.2.13 (selftest-base, nsr1/veth0 out): a 1514-byte frame (IP total length 1500, MF) and a
534-byte one where the model sent one 2014-byte frame before.

IPv6's counterpart (``nf_ct_frag6_gather``, ``ip6_fragment``) is tested in test_frag6.py.
"""

from __future__ import annotations

import ipaddress
from collections import Counter
from pathlib import Path

from scapy.layers.inet import IP
from scapy.layers.l2 import Ether
from scapy.utils import rdpcap

from flowsim.config.topology import load_topology
from flowsim.kernel.headers import internet_checksum
from flowsim.kernel.pkt import (
    IP_DF, IP_MF, FragQueue, build_ipv4, ip_fraglist_fits, ip_fraglist_fragment, ip_fragment, parse_ip,
)
from flowsim.kernel.skb import SkBuff
from flowsim.kernel.stack.ip import _ip_exceeds_mtu
from flowsim.sim.report import build_report
from flowsim.sim.simulation import Simulation

TOPOLOGIES = Path(__file__).resolve().parent.parent / "topologies"
A, B = ipaddress.ip_address("10.0.2.99"), ipaddress.ip_address("10.0.1.99")


def _whole(size: int = 2000, df: bool = False) -> bytes:
    return build_ipv4(A, B, 17, bytes(range(256)) * (size // 256) + bytes(size % 256 - 20), ident=0x1234, df=df)


def _without_df(frag: bytes) -> bytes:
    h = bytearray(frag[:20])
    h[6] &= ~(IP_DF >> 8) & 0xFF
    h[10:12] = b"\0\0"
    h[10:12] = internet_checksum(h).to_bytes(2, "big")
    return bytes(h) + frag[20:]


def _reassemble(frags: list[bytes]) -> tuple[FragQueue, bytes]:
    q = FragQueue(0.0)
    whole = None
    for f in frags:
        info = parse_ip(bytearray(f), 0)
        assert info is not None
        whole = q.add(f, info)
    assert whole is not None
    return q, whole


def test_ip_frag_reasm_records_frag_max_size_and_geometry():
    """ip_frag_queue: q.max_size / max_df_size; ip_frag_reasm: frag_max_size = the largest, no DF without DF frags."""
    pkt = _whole()
    frags = ip_fragment(pkt, 1500)
    assert [len(f) for f in frags] == [1500, 520]
    q, whole = _reassemble(frags)
    assert whole == pkt and q.frag_max_size == 1500 and q.sizes == (1480, 500) and not q.frag_pmtu


def test_ip_frag_reasm_sets_df_only_when_the_largest_fragment_had_it():
    """ip_frag_reasm: ``if (qp->max_df_size == qp->q.max_size)`` DF + IPSKB_FRAG_PMTU, else frag_off = 0."""
    pkt = _whole(df=True)
    frags = ip_fragment(pkt, 1500, df=True)
    assert all(int.from_bytes(f[6:8], "big") & IP_DF for f in frags)
    q, whole = _reassemble(frags)
    assert q.frag_pmtu and int.from_bytes(whole[6:8], "big") == IP_DF
    q, whole = _reassemble([_without_df(frags[0]), frags[1]])  # only the small last fragment has DF
    assert not q.frag_pmtu and int.from_bytes(whole[6:8], "big") == 0 and q.frag_max_size == 1500


def test_ip_do_fragment_fast_path_sends_the_original_fragments():
    """ip_do_fragment: a frag_list whose pieces fit goes out as it came (ip_fraglist_init: first frag_off = MF,
    DF not kept); one that does not fit falls back to the slow path (ip_frag_next) at the smaller MTU."""
    pkt = _whole()
    frags = ip_fragment(pkt, 1500)
    q, whole = _reassemble(frags)
    assert ip_fraglist_fits(whole, q.sizes, 9000) and ip_fraglist_fits(whole, q.sizes, 1500)
    assert ip_fraglist_fragment(whole, q.sizes) == frags
    assert not ip_fraglist_fits(whole, q.sizes, 1400)
    assert [len(f) for f in ip_fragment(whole, 1400)] == [1396, 624]
    df_whole = _whole(df=True)
    out = ip_fraglist_fragment(df_whole, (1480, 500))
    assert [int.from_bytes(f[6:8], "big") for f in out] == [IP_MF, 1480 // 8]


def _skb(pkt: bytes, **kw) -> SkBuff:
    skb = SkBuff(buf=bytearray(pkt), data=0, linear_end=len(pkt), **kw)
    skb.network_header = 0
    return skb


def test_ip_exceeds_mtu_uses_frag_max_size():
    """ip_exceeds_mtu: DF and frag_max_size > mtu → exceeds (Frag Needed) even though ignore_df is set;
    a reassembled DF packet whose fragments fit is let through (ignore_df), and so is anything without DF."""
    pkt = _whole(df=True)
    info = parse_ip(bytearray(pkt), 0)
    assert info is not None
    assert _ip_exceeds_mtu(_skb(pkt), info, 1500)  # an ordinary DF packet over the MTU
    assert not _ip_exceeds_mtu(_skb(pkt, frag_max_size=1500, ignore_df=True), info, 1500)
    assert _ip_exceeds_mtu(_skb(pkt, frag_max_size=1500, ignore_df=True), info, 1400)
    nodf = _whole()
    info = parse_ip(bytearray(nodf), 0)
    assert info is not None and not _ip_exceeds_mtu(_skb(nodf, frag_max_size=1500, ignore_df=True), info, 1400)


def test_selftest_base_refragments_at_nsr1_veth0(tmp_path):
    """The conformance difference: ns2's 2000-byte IPv4 packets (no DF) are fragmented by nsr2 (veth0, MTU 1500),
    defragmented by nsr1's conntrack and leave nsr1/veth0 (MTU 9000) as the same two fragments — 1514 + 534-byte
    frames — as on Debian 7.2.13."""
    Simulation(load_topology(TOPOLOGIES / "selftest-base.toml"), pcap_dir=tmp_path).run()
    frames = [Ether(bytes(p)) for p in rdpcap(str(tmp_path / "nsr1-veth0.pcap"))]
    data = Counter(len(p) for p in frames if IP in p and p[IP].src == "10.0.2.99" and len(p) > 100)
    assert data == {1514: 50, 534: 50}
    out = [p[IP] for p in frames if IP in p and p[IP].src == "10.0.2.99" and len(p) > 100]
    assert [(o.len, o.flags.MF, o.frag) for o in out[:2]] == [(1500, 1, 0), (520, 0, 185)]
    assert all(not o.flags.DF for o in out)
    inbound = [Ether(bytes(p)) for p in rdpcap(str(tmp_path / "nsr1-veth1.pcap"))]
    inbound = [p[IP] for p in inbound if IP in p and p[IP].src == "10.0.2.99" and p[IP].len > 100]
    assert [(o.id, o.len, o.frag) for o in inbound] == [(o.id, o.len, o.frag) for o in out]


def test_a_host_fragments_udp_to_the_path_mtu_it_learned(tmp_path):
    """conform-mtu: ns1's link takes 9000 bytes, the path 1500.  The first 1600-byte datagram leaves whole with DF
    and meets Fragmentation Needed; ns1 then cuts every later one to the learned 1500 itself (``ip_append_data``'s
    fragsize is ``dst_mtu``, the nexthop exception's), without DF, so r's flowtable hook sees fragments
    (``ip_is_fragment``) where it saw a whole datagram too long for the flow before."""
    sim = Simulation(load_topology(TOPOLOGIES / "conform-mtu.toml"), pcap_dir=tmp_path)
    sim.run()
    frames = [Ether(bytes(p)) for p in rdpcap(str(tmp_path / "ns1-eth0.pcap"))]
    big = [p[IP] for p in frames if IP in p and p[IP].src == "192.0.2.2" and p[IP].proto == 17 and
           (p[IP].len > 1000 or p[IP].flags.MF or p[IP].frag)]
    assert (big[0].len, bool(big[0].flags.DF), big[0].flags.MF) == (1600, True, 0)
    rest = Counter((p.len, p.flags.MF, p.frag) for p in big[1:])
    assert rest == {(1500, 1, 0): 19, (120, 0, 185): 19}
    assert all(not p.flags.DF for p in big[1:])
    (ft,) = build_report(sim)["flowtables"]
    assert ft["reasons"] == {"fragment": 38, "no-flow-entry": 5}
