"""Real captures written by others give the results the kernel reference predicts (tests/data/corpus/README.md)."""

from __future__ import annotations

import collections
from pathlib import Path

import pytest
from scapy.layers.inet import IP, TCP
from scapy.utils import rdpcap

from flowsim.kernel.capture import read_capture
from flowsim.kernel.flowtable.tuple import flow_tuple_from_skb
from flowsim.kernel.skb import skb_from_frame
from flowsim.profiles import get_profile

CORPUS = Path(__file__).parent / "data" / "corpus" / "suricata-verify"


def results(name: str, profile="linux-7.1.5") -> collections.Counter:
    counts = collections.Counter()
    for frame in read_capture(CORPUS / name):
        skb = skb_from_frame(frame.data, iif=1)
        res = flow_tuple_from_skb(skb, iifidx=1, profile=profile)
        if res.ok:
            counts["tuple" + ("+tun" if res.tuple.tun else "") + ("+encap" if res.tuple.encap else "")] += 1
        else:
            counts[res.reason] += 1
    return counts


# file → (expected results under linux-7.1.5, why: the reference section that predicts it)
EXPECTED = {
    "bug-4571-01__ipv4_over_ipv4.pcap": ({"tuple+tun": 1}, "IPIP: inner TCP key + outer addresses as tun (nf_flow_tuple_encap)"),
    "bug-4571-02__ipv6.pcap": ({"tuple": 1}, "plain IPv6 TCP (nf_flow_tuple_ipv6)"),
    "bug-4571-03__ipv6_over_ipv6.pcap": ({"tuple+tun": 1}, "IP6IP6: inner key + tun, l3_proto 41 (nf_flow_tuple_encap)"),
    "bug-4571-04__ipv6_over_ipv4.pcap": ({"l4proto-unsupported": 1},
                                          "6in4 (proto 41 in IPv4) is no IPIP tunnel: mixed tunnels are not mainline (flowsim.profiles)"),
    "bug-4571-05__ipv4.pcap": ({"tuple": 1}, "plain IPv4 TCP (nf_flow_tuple_ip)"),
    "bug-4571-06__ipv4_over_ipv6.pcap": ({"l4proto-unsupported": 1}, "4in6 (next header 4) is no IP6IP6 tunnel (flowsim.profiles)"),
    "bug-4810__pppoe-session-http.pcap": ({"encap-unsupported": 30},
                                           "PPP protocol field compressed to one byte: 0x21 0x45 is no PPP_IP (nf_flow_pppoe_proto, nf_flow_offload_inet_hook)"),
    "bug-5633-gre-01__gre-udp.pcap": ({"tuple+encap": 3}, "GRE v0 over 802.1Q: ports 0, VLAN as hwaccel encap (nf_flow_tuple_ip, nf_flow_tuple_encap)"),
    "defrag__bug-6887-defrag-eth-vlan-ipv4-tcp-syn__frag-eth-vlan-ip-tcp-syn.pcap": (
        {"fragment": 3}, "IPv4 fragments are never offloaded (flowsim.reasons)"),
    "defrag__bug-6887-defrag-eth-vlan-ipv6-tcp__frag-eth-vlan-ipv6-tcp.pcap": (
        {"ipv6-exthdr": 3}, "fragment header after the IPv6 header: slow path from 7.1.5 (flowsim.profiles)"),
    "defrag__bug-6887-defrag-ipv4-tcp-syn__frag-ip-tcp-syn.pcap": ({"fragment": 3}, "raw-IP link type, IPv4 fragments (flowsim.reasons)"),
    "defrag__bug-6887-defrag-ipv6-tcp__frag-ip-tcp.pcap": ({"ipv6-exthdr": 3}, "raw-IP link type, IPv6 fragments (nf_flow_tuple_ipv6)"),
    "detect-vlan-id__input.pcap": ({"encap-unsupported": 1, "l4proto-unsupported": 1},
                                   "triple 802.1Q: a second in-band tag is not parsed (nf_flow_offload_inet_hook); ICMP (flowsim.reasons)"),
    "eve-flow-esp__input.pcap": ({"l4proto-unsupported": 8}, "ESP is no TCP/UDP/GRE (nf_flow_tuple_ip)"),
    "eve-flow-vlan-02__input.pcap": ({"l4proto-unsupported": 2, "encap-unsupported": 1},
                                     "ICMP over one tag; a double in-band tag (nf_flow_offload_inet_hook)"),
    "eve-flow-vlan__input.pcap": ({"l4proto-unsupported": 2}, "ICMP over 802.1Q (flowsim.reasons)"),
    "flow-pkt-recursion__tunnel-pkt-flows.pcap": ({"l4proto-unsupported": 4}, "ICMP and 4in6 (flowsim.reasons, flowsim.profiles)"),
    "ipv6-evasion__ipv6-malformed-fragments-1__frag-1.pcap": (
        {"l4proto-unsupported": 7, "ttl-expired": 3, "ipv6-exthdr": 3},
        "ICMPv6; hop limit 1; fragment headers (nf_flow_tuple_ipv6)"),
}


def test_every_corpus_file_has_an_expectation():
    """No capture is shipped without its expected result written down."""
    assert sorted(p.name for p in CORPUS.glob("*.pcap")) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_corpus_file(name):
    """Each capture gives the per-frame results the reference predicts (reason in EXPECTED)."""
    assert results(name) == EXPECTED[name][0], EXPECTED[name][1]


@pytest.mark.parametrize("name,profile,expected", [
    ("bug-4571-01__ipv4_over_ipv4.pcap", "linux-6.18", {"l4proto-unsupported": 1}),
    ("bug-4571-03__ipv6_over_ipv6.pcap", "linux-6.19", {"l4proto-unsupported": 1}),
    ("bug-4571-03__ipv6_over_ipv6.pcap", "linux-7.0", {"tuple+tun": 1}),
    ("defrag__bug-6887-defrag-eth-vlan-ipv6-tcp__frag-eth-vlan-ipv6-tcp.pcap", "linux-7.0", {"ipv6-exthdr": 3}),
])
def test_corpus_by_version(name, profile, expected):
    """Tunnel captures are accelerated only by kernels with the matching rx support (flowsim.profiles)."""
    assert results(name, get_profile(profile)) == expected


@pytest.mark.parametrize("name", ["bug-4571-01__ipv4_over_ipv4.pcap", "bug-4571-03__ipv6_over_ipv6.pcap"])
def test_corpus_tunnel_tuple_equals_scapy(name):
    """The tuple of a real tunnelled capture equals scapy's reading of the inner and outer headers."""
    pkt = rdpcap(str(CORPUS / name))[0]
    frame = next(iter(read_capture(CORPUS / name)))
    t = flow_tuple_from_skb(skb_from_frame(frame.data, iif=1), iifidx=1).tuple
    outer, inner = pkt.payload, pkt.payload.payload
    assert (t.src_text, t.dst_text, t.sport, t.dport) == (inner.src, inner.dst, inner[TCP].sport, inner[TCP].dport)
    assert (t.tun.to_dict()["src"], t.tun.to_dict()["dst"]) == (outer.src, outer.dst)
    assert t.tun.l3_proto == (4 if isinstance(outer, IP) else 41)
