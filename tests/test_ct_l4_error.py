"""Conntrack refuses a malformed TCP or UDP header before tracking it: ``tcp_error`` and ``udp_error``.

net/netfilter/nf_conntrack_proto_tcp.c (Debian's linux-source-7.2): ``nf_conntrack_tcp_packet`` gives up on a
segment without a whole header (``skb_header_pointer`` of 20 bytes), with a data offset under 5 words or past
the segment, or whose flags (PSH, ECE and CWR aside) are not one of ``tcp_valid_flags`` (SYN+FIN, the "Xmas"
FIN+PSH+URG, no flag at all…); nf_conntrack_proto_udp.c's ``udp_error`` on a datagram shorter than its header
or whose length field is past the packet or under 8.  The packet goes on as ``ct state invalid``, without an
entry, and nothing is counted.
"""

from __future__ import annotations

import pytest
from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.l2 import Ether

from flowsim.config.topology import load_topology_text
from flowsim.kernel.conntrack import tcp_error, udp_error
from flowsim.sim.simulation import Simulation

TOPOLOGY = """
[netns.a]
commands = '''
ip link add eth0 type veth peer name eth0 netns b
ip link set eth0 up
ip addr add 10.0.0.1/24 dev eth0
'''
[netns.b]
commands = '''
ip link set eth0 up
ip addr add 10.0.0.2/24 dev eth0
'''
nft = '''
table inet t {
	chain pre {
		type filter hook prerouting priority filter; policy accept;
		ct state invalid counter name invalid
		ct state new counter name new
	}
	counter invalid { }
	counter new { }
}
'''
"""


def _tcp(flags: str, **kw) -> bytes:
    return bytes(IP(src="10.0.0.1", dst="10.0.0.2") / TCP(flags=flags, **{"sport": 40000, "dport": 80, **kw}))


def _udp(**kw) -> bytes:
    return bytes(IP(src="10.0.0.1", dst="10.0.0.2") / UDP(sport=40000, dport=53, **kw) / (b"x" * 12))


@pytest.mark.parametrize("packet, problem", [
    (_tcp("S"), None),
    (_tcp("SA"), None),
    (_tcp("FA"), None),
    (_tcp("PA"), None),  # PSH is always valid
    (_tcp("SEC"), None),  # so are ECE and CWR
    (_tcp("AU"), None),
    (_tcp("R"), None),
    (_tcp("SF"), "invalid tcp flag combination"),
    (_tcp("FPU"), "invalid tcp flag combination"),  # the "Xmas" scan
    (_tcp(""), "invalid tcp flag combination"),  # no flag at all
    (_tcp("F"), "invalid tcp flag combination"),  # FIN without ACK
    (_tcp("SR"), "invalid tcp flag combination"),
    (_tcp("S", dataofs=4), "truncated packet"),
    (_tcp("S", dataofs=8), "truncated packet"),  # 32 bytes of header announced, 20 there
    (_tcp("S")[:20 + 16], "short packet"),
    (_udp(), None),
    (_udp(len=8), None),  # a length field under the packet's: the rest is padding
    (_udp(len=21), "truncated/malformed packet"),
    (_udp(len=7), "truncated/malformed packet"),
    (_udp()[:20 + 6], "short packet"),
])
def test_tcp_error_and_udp_error(packet, problem):
    check = tcp_error if packet[9] == 6 else udp_error
    assert check(packet, 20, len(packet) - 20) == problem


def _receive(packets: list[bytes]) -> Simulation:
    sim = Simulation(load_topology_text(TOPOLOGY))
    k = sim.kernel
    dev, peer = sim.topo.device("b", "eth0"), sim.topo.device("a", "eth0")
    for i, p in enumerate(packets):
        # the IP header's total length covers what is there (a header cut short is short on the wire too)
        p = bytearray(p)
        p[2:4] = len(p).to_bytes(2, "big")
        p[10:12] = b"\0\0"
        p[10:12] = _ip_csum(p)
        sim.at(i * 1e-3, k.receive_frame, dev, bytes(Ether(src=peer.mac, dst=dev.mac, type=0x0800)) + bytes(p),
               k.new_tag("x", "original", "tcp"))
    sim.run()
    return sim


def _ip_csum(p: bytearray) -> bytes:
    s = sum(int.from_bytes(p[i:i + 2], "big") for i in range(0, 20, 2))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return (~s & 0xFFFF).to_bytes(2, "big")


def test_a_malformed_segment_is_invalid_and_makes_no_entry():
    """A SYN+FIN, a Xmas segment, a header cut short and a UDP length past the datagram reach prerouting as ct state
    invalid; a plain SYN and a well-formed datagram make their entries (new).  No socket takes them at b: the
    SYN's entry then sees b's RST as its only reply, and nf_conntrack_tcp_packet kills it at once ("If only reply
    is a RST, we can consider ourselves not to have an established connection"); the datagram's stays, its Port
    Unreachable RELATED to it."""
    sim = _receive([_tcp("SF"), _tcp("FPU", sport=40001), _tcp("S", dport=81)[:30], _udp(len=40),
                    _tcp("S", dport=82), _udp()])
    st = sim.kernel.netns["b"]
    assert (st.nft.counter("invalid").packets, st.nft.counter("new").packets) == (4, 2)
    assert sorted((e.tuplehash[0].l4proto, e.tuplehash[0].dport) for e in st.conntrack.entries()) == [(17, 53)]
