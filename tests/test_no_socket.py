"""What a host answers a segment or datagram that no socket takes, as Debian's linux-source-7.2 has it.

* UDP: ``__udp4_lib_rcv`` / ``__udp6_lib_rcv`` (net/ipv4/udp.c, net/ipv6/udp.c): Port Unreachable through
  ``icmp_send`` / ``icmpv6_send`` (so rate-limited), once the checksum held;
* TCP: ``tcp_v4_rcv`` / ``tcp_v6_rcv``'s ``no_tcp_socket`` → ``tcp_v4_send_reset`` / ``tcp_v6_send_reset``
  (net/ipv4/tcp_ipv4.c, net/ipv6/tcp_ipv6.c): never to a RST; an ACK'd segment's RST carries its acknowledgement
  as sequence, any other is ACKed past its SYN, FIN and payload; the ECN bits of the TOS cleared, window 0, IPv4
  with DF and ID 0 (the control socket's IP_PMTUDISC_DO).
"""

from __future__ import annotations

import ipaddress

import pytest
from scapy.layers.inet import ICMP, IP, TCP, UDPerror
from scapy.layers.inet6 import ICMPv6DestUnreach, ICMPv6ParamProblem, IPv6

from flowsim.config.topology import load_topology_text
from flowsim.kernel.headers import mac_aton
from flowsim.kernel.pkt import build_ipv4, build_ipv6, tcp_segment, udp_datagram
from flowsim.sim.simulation import Simulation
from tests.test_frag_queue import A4, A6, B4, B6, TOPOLOGY  # a - b over one veth pair, both families

ip = ipaddress.ip_address


def answers(packets: list[bytes]) -> tuple[list[bytes], dict]:
    """Send *packets* from a to b (no socket anywhere); what b sent back (the frames leaving its eth0), and the drops."""
    sim = Simulation(load_topology_text(TOPOLOGY), traffic=[])
    k = sim.kernel
    back: list[bytes] = []
    mac = mac_aton(sim.topo.device("b", "eth0").mac)
    k.capture = lambda netns, dev, frame: back.append(frame) if (netns, dev) == ("b", "eth0") and \
        frame[6:12] == mac else None
    for i, pkt in enumerate(packets):
        sim.at(i * 1e-3, k.send_l3, "a", pkt, k.new_tag("x", "original", "data"))
    sim.run(None)
    return [f[14:] for f in back], dict(k.ledger.dropped)


@pytest.mark.parametrize("family", [4, 6])
def test_udp_without_a_socket_is_port_unreachable(family):
    src, dst = (ip(A4), ip(B4)) if family == 4 else (ip(A6), ip(B6))
    build = build_ipv4 if family == 4 else build_ipv6
    (err,), drops = answers([build(src, dst, 17, udp_datagram(src, dst, 40000, 5000, bytes(12)))])
    if family == 4:
        p = IP(err)
        assert (p.src, p.dst, p[ICMP].type, p[ICMP].code) == (B4, A4, 3, 3) and p[UDPerror].dport == 5000
    else:
        p = IPv6(err)
        assert (p.src, p.dst, p[ICMPv6DestUnreach].code) == (B6, A6, 4)  # ICMPV6_PORT_UNREACH
    # b drops the datagram; a has no socket for the error, which _icmp_rcv takes (delivered)
    assert drops == {"no-socket": 1}


def test_port_unreachable_is_rate_limited():
    """Twenty datagrams a millisecond apart: the destination's inet_peer gives six errors, then none within a
    second (icmpv4_xrlim_allow)."""
    src, dst = ip(A4), ip(B4)
    errs, drops = answers([build_ipv4(src, dst, 17, udp_datagram(src, dst, 40000, 5000, bytes(12)))] * 20)
    assert len(errs) == 6 and drops == {"no-socket": 20}


@pytest.mark.parametrize("family", [4, 6])
@pytest.mark.parametrize("flags,seq,ack,rst_seq,rst_ack,rst_flags", [
    ("S", 1000, 0, 0, 1001, "RA"),        # a SYN: sequence 0, ACK past the SYN
    ("PA", 5000, 777, 777, 0, "R"),       # data with ACK: the RST's sequence is the acknowledgement
    ("F", 9, 0, 0, 9 + 1 + 100, "RA"),    # FIN without ACK: past the FIN and the payload
])
def test_tcp_without_a_socket_is_reset(family, flags, seq, ack, rst_seq, rst_ack, rst_flags):
    src, dst = (ip(A4), ip(B4)) if family == 4 else (ip(A6), ip(B6))
    payload = bytes(100) if flags == "F" else b""
    seg = tcp_segment(src, dst, 40000, 443, seq, ack, int(TCP(flags=flags).flags), payload)
    pkt = build_ipv4(src, dst, 6, seg, tos=0x2B) if family == 4 else build_ipv6(src, dst, 6, seg, tclass=0x2B)
    (rst,), drops = answers([pkt])
    p = IP(rst) if family == 4 else IPv6(rst)
    t = p[TCP]
    assert (t.sport, t.dport, t.seq, t.ack, str(t.flags), t.window) == (443, 40000, rst_seq, rst_ack, rst_flags, 0)
    if family == 4:
        assert (p.tos, p.id, str(p.flags), p.ttl) == (0x28, 0, "DF", 64)  # ECN bits cleared
        assert IP(bytes(p)).chksum == p.chksum
    else:
        assert (p.tc, p.hlim) == (0x28, 64)
    again = p.__class__(bytes(p))
    del again[TCP].chksum
    assert p.__class__(bytes(again))[TCP].chksum == t.chksum  # the checksum scapy computes is the one sent
    # the RST reaches a, which has no socket either and answers nothing (never a reset to a reset)
    assert drops == {"no-socket": 2}


def test_no_reset_to_a_reset():
    src, dst = ip(A4), ip(B4)
    seg = tcp_segment(src, dst, 40000, 443, 1, 0, int(TCP(flags="R").flags), b"")
    assert answers([build_ipv4(src, dst, 6, seg)]) == ([], {"no-socket": 1})


@pytest.mark.parametrize("family", [4, 6])
def test_an_unknown_protocol_is_answered(family):
    """No handler and no raw socket (ip_protocol_deliver_rcu / ip6_protocol_deliver_rcu): IPv4's Protocol
    Unreachable; IPv6's Parameter Problem, unrecognised next header, pointing at the byte that named it (6 in the
    fixed header; the destination options header's first byte after it)."""
    src, dst = (ip(A4), ip(B4)) if family == 4 else (ip(A6), ip(B6))
    if family == 4:
        (err,), drops = answers([build_ipv4(src, dst, 47, bytes(24))])
        assert (IP(err)[ICMP].type, IP(err)[ICMP].code) == (3, 2)
    else:
        (err,), drops = answers([build_ipv6(src, dst, 47, bytes(24))])
        p = IPv6(err)[ICMPv6ParamProblem]
        assert (p.code, p.ptr) == (1, 6)
        destopt = bytes([47, 0, 1, 4, 0, 0, 0, 0])  # next header GRE, PadN
        (err,), _ = answers([build_ipv6(src, dst, 60, destopt + bytes(24))])
        assert IPv6(err)[ICMPv6ParamProblem].ptr == 40
    assert drops == {"unknown-protocol": 1}
