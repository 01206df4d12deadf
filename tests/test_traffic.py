"""Traffic endpoints: TCP conversations and UDP streams as real hosts send them, on the virtual clock (issue 4)."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import attrs
import pytest
from scapy.layers.inet import IP, TCP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Ether
from scapy.utils import rdpcap

from flowsim.config.topology import load_topology
from flowsim.sim.simulation import Simulation
from flowsim.sim.traffic import DEFAULT_GAP, EPHEMERAL_BASE, TrafficSpec

TOPOLOGIES = Path(__file__).resolve().parent.parent / "topologies"
ip = ipaddress.ip_address


def tcp(v=4, **kw) -> TrafficSpec:
    src, dst = ("10.0.1.99", "10.0.2.99") if v == 4 else ("dead:1::99", "dead:2::99")
    base = dict(name="t", proto="tcp", netns="ns1", src=ip(src), dst=ip(dst), dport=12345, sport=41000, packets=5,
                size=1000, reply_packets=3)
    base.update(kw)
    return TrafficSpec(**base)


def selftest(traffic, **kw) -> Simulation:
    return Simulation(load_topology(TOPOLOGIES / "selftest.toml"), flowtables=False, traffic=traffic,
                      **kw).run(kw.pop("duration", None))


def segments(path: Path, sport: int | None = None):
    out = []
    for p in rdpcap(str(path)):
        e = Ether(bytes(p))
        if e.haslayer(TCP) and (sport is None or sport in (e[TCP].sport, e[TCP].dport)):
            out.append((float(p.time), e))
    return out


def test_from_topology_defaults():
    """A traffic table becomes a spec: client port 40000 + 100 × index, FIN close for TCP, no handshake for UDP,
    gso_size carried over."""
    topo = load_topology(TOPOLOGIES / "pppoe-over-vlan.toml")
    specs = [TrafficSpec.from_topology(t, i) for i, t in enumerate(topo.traffic)]
    assert [(s.proto, s.sport, s.close, s.handshake, s.gso_size) for s in specs] == [
        ("tcp", EPHEMERAL_BASE, "fin", True, None), ("udp", EPHEMERAL_BASE + 100, None, False, None),
        ("tcp", EPHEMERAL_BASE + 200, "fin", True, 1400)]
    assert specs[0].reply_gap == pytest.approx(DEFAULT_GAP * 20 / 1000)


@pytest.mark.parametrize("v", [4, 6])
def test_tcp_conversation_on_the_wire(v, tmp_path):
    """SYN, SYN/ACK, ACK, data with consistent seq/ack, FIN/ACK both ways, last ACK; IP length = size (RFC 793)."""
    selftest([tcp(v)], pcap_dir=tmp_path)
    segs = [e for _t, e in segments(tmp_path / "ns2-eth0.pcap")]
    flags = [str(e[TCP].flags) for e in segs]
    assert flags[:3] == ["S", "SA", "A"] and flags[-3:] == ["FA", "FA", "A"] and flags[3:-3] == ["PA"] * 8
    syn, synack, ack = segs[0][TCP], segs[1][TCP], segs[2][TCP]
    assert synack.ack == syn.seq + 1 and ack.seq == syn.seq + 1 and ack.ack == synack.seq + 1
    data = [e for e in segs if str(e[TCP].flags) == "PA"]
    l3 = IP if v == 4 else IPv6
    assert {len(e[l3]) if v == 4 else len(e[l3]) for e in data} == {1000}
    client = [e[TCP] for e in data if e[TCP].sport == 41000]
    assert [c.seq - client[0].seq for c in client] == [i * (1000 - (40 if v == 4 else 60)) for i in range(5)]
    if v == 4:  # DF on every segment; the client's crossed two routers
        assert all(e[IP].flags.DF for e in segs)
        assert {e[IP].ttl for e in segs if e[TCP].sport == 41000} == {62}


def test_rst_close_leaves_conntrack_in_close():
    """close = "rst": one RST/ACK from the client; conntrack moves to CLOSE (tcp_conntracks rst row)."""
    sim = selftest([tcp(close="rst")])
    ct = next(iter(sim.kernel.netns["nsr1"].conntrack.entries()))
    assert ct.tcp_state.name == "CLOSE" and sim.conversations[0].client.state == "closed"


def test_no_close_leaves_conntrack_established():
    """close = None: the connection stays ESTABLISHED and ASSURED."""
    sim = selftest([tcp(close=None)])
    ct = next(iter(sim.kernel.netns["nsr1"].conntrack.entries()))
    assert ct.tcp_state.name == "ESTABLISHED" and ct.status & 0x4


def test_without_handshake_conntrack_picks_up_mid_stream():
    """handshake = false: data from the first segment; conntrack picks it up (nf_conntrack_tcp_loose), FIN closes it."""
    sim = selftest([tcp(handshake=False)])
    ct = next(iter(sim.kernel.netns["nsr1"].conntrack.entries()))
    conv = sim.conversations[0]
    assert ct.tcp_state.name == "TIME_WAIT" and conv.server.received == 5 + 2
    assert sim.kernel.ledger.totals()["dropped"] == 0


def test_many_flows_use_consecutive_ports():
    """flows = 3: three conversations from sport, sport+1, sport+2, three conntrack entries."""
    sim = selftest([tcp(flows=3, packets=2, reply_packets=1)])
    assert sorted(c.client.lport for c in sim.conversations) == [41000, 41001, 41002]
    assert sorted(ct.tuplehash[0].sport for ct in sim.kernel.netns["nsr1"].conntrack.entries()) == [41000, 41001,
                                                                                                     41002]


def test_rate_and_start_on_the_virtual_clock(tmp_path):
    """start = 0.5 s, rate = 1000/s: data segments 1 ms apart from the handshake on; replies span the same time."""
    selftest([tcp(start=0.5, rate=1000.0, packets=4, reply_packets=2)], pcap_dir=tmp_path)
    segs = segments(tmp_path / "ns1-eth0.pcap")
    sent = [t for t, e in segs if e[TCP].sport == 41000 and str(e[TCP].flags) == "PA"]
    assert sent[0] >= 0.5 and [round(b - a, 6) for a, b in zip(sent, sent[1:])] == [0.001] * 3
    replies = [t for t, e in segs if e[TCP].dport == 41000 and str(e[TCP].flags) == "PA"]
    assert [round(b - a, 6) for a, b in zip(replies, replies[1:])] == [0.002]


def test_udp_replies_go_to_the_translated_address():
    """pppoe-over-vlan: the server replies to the masqueraded 4-tuple it saw; the client gets every reply."""
    topo = load_topology(TOPOLOGIES / "pppoe-over-vlan.toml")
    udp = attrs.evolve(TrafficSpec.from_topology(topo.traffic[1], 1), packets=5, reply_packets=4)
    sim = Simulation(topo, flowtables=False, traffic=[udp]).run()
    conv = sim.conversations[0]
    assert (str(conv.server.raddr), conv.server.rport) == ("100.64.0.2", EPHEMERAL_BASE + 100)
    assert conv.client.received == 4 and conv.server.received == 5


def test_server_binds_where_dnat_delivers():
    """bridge-vlan: the server side of tcp-dnat-1666 is ns2's 10.0.2.99:12345 facing the masquerade address."""
    sim = Simulation(load_topology(TOPOLOGIES / "bridge-vlan.toml"), flowtables=False,
                     traffic=[attrs.evolve(TrafficSpec.from_topology(
                         load_topology(TOPOLOGIES / "bridge-vlan.toml").traffic[0]), packets=3, reply_packets=3)]).run()
    s = sim.conversations[0].server
    assert (s.netns, str(s.laddr), s.lport, str(s.raddr)) == ("ns2", "10.0.2.99", 12345, "192.168.10.1")


def test_ip_lengths_follow_size_and_reply_size(tmp_path):
    """size / reply_size are IP packet lengths: 1400 from the client, 60 (pure ACK-sized) from the server."""
    selftest([tcp(size=1400, reply_size=60, reply_packets=4)], pcap_dir=tmp_path)
    segs = segments(tmp_path / "ns2-eth0.pcap")
    data_out = {len(e[IP]) for _t, e in segs if e[TCP].sport == 41000 and str(e[TCP].flags) == "PA"}
    data_back = {len(e[IP]) for _t, e in segs if e[TCP].dport == 41000 and str(e[TCP].flags) == "PA"}
    assert data_out == {1400} and data_back == {60}


def test_endpoint_lowers_its_path_mtu_on_icmp():
    """A Packet Too Big names the MTU; the endpoint sizes later segments to it (path MTU discovery)."""
    sim = selftest([tcp(v=6, size=3000, packets=20, reply_packets=0)])
    c = sim.conversations[0].client
    assert c.pmtu == 1500 and c.icmp_errors and c.icmp_errors[0][:2] == (2, 0)


@pytest.mark.parametrize("size,gso_size,lengths,gso_sizes", [
    (9000, 1000, {9000}, {1000}),  # one GSO skb per data packet: the veth capture shows it whole
    # segments of 4040 bytes cannot cross the router's 1500-byte link: ICMP fragmentation needed, then 1460
    (9000, 4000, {9000}, {4000, 1460}),
    (900, 1000, {900}, {0}),  # one segment's worth: an ordinary skb (tcp_set_skb_tso_segs)
    (70000, 1000, {65215}, {1000}),  # capped at tcp_tso_autosize's bound
])
def test_gso_data_leaves_as_one_skb(tmp_path, size, gso_size, lengths, gso_sizes):
    """With gso_size a data packet is one GSO skb of size bytes whose segments fit the path MTU."""
    sim = Simulation(load_topology(TOPOLOGIES / "selftest.toml"), flowtables=False,
                     traffic=[tcp(size=size, gso_size=gso_size, reply_packets=0, packets=6)], pcap_dir=tmp_path)
    skbs = []
    orig = sim.kernel.send_l3

    def send_l3(netns, pkt, tag, *gso):
        if netns == "ns1" and tag.kind == "data":
            skbs.append((len(pkt), gso[0] if gso else 0))
        orig(netns, pkt, tag, *gso)

    sim.kernel.send_l3 = send_l3
    sim.run(None)
    assert {n for n, _g in skbs} == lengths and {g for _n, g in skbs} == gso_sizes
    segs = segments(tmp_path / "ns1-eth0.pcap", 41000)
    assert {len(e[IP]) for _t, e in segs if str(e[TCP].flags) == "PA"} == lengths


def test_client_ports_wrap_inside_the_unprivileged_range():
    """The 256th table's default port and ports past 65535 wrap into 1024-65535 instead of overflowing the TCP header."""
    from flowsim.sim.traffic import EPHEMERAL_BASE, client_port

    assert client_port(EPHEMERAL_BASE, 100 * 3) == 40300
    assert client_port(EPHEMERAL_BASE, 100 * 255) == 1024 + (65500 - 1024) % 64512 == 65500
    assert client_port(EPHEMERAL_BASE, 100 * 256) == 1024 + (65600 - 1024) % 64512 == 1088
    assert client_port(65535, 1) == 1024
    assert all(1024 <= client_port(60000, k) <= 65535 for k in range(0, 70000, 997))
