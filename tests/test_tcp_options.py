"""acks = "linux" endpoints send Linux's TCP options (tcp_options_write, net/ipv4/tcp_output.c): MSS, SACK
permitted, timestamps and window scale on SYN and SYN/ACK, NOP NOP TIMESTAMP on every later segment, the
peer's last TSval echoed (tcp_store_ts_recent).  The table's size stays the IP length: data carries 12 bytes
less; a pure ACK is 52 bytes over IPv4, as the guest's sockets send them."""

from __future__ import annotations

import attrs
from scapy.layers.inet import IP, TCP
from scapy.utils import rdpcap

from flowsim.sim.simulation import Simulation
from flowsim.sim.traffic import TrafficSpec
from tests.test_sim import topo


def _segments(tmp_path, acks: str) -> list:
    t = topo("conform-forward")
    spec = next(TrafficSpec.from_topology(x, i) for i, x in enumerate(t.traffic)
                if x.proto == "tcp" and x.dst.version == 4)
    spec = attrs.evolve(spec, acks=acks, packets=4, reply_packets=3)
    Simulation(t, traffic=[spec], pcap_dir=tmp_path).run()
    return [p for p in rdpcap(str(tmp_path / f"{spec.netns}-eth0.pcap")) if TCP in p]


def test_linux_options_on_syn_and_every_later_segment(tmp_path):
    pkts = _segments(tmp_path, "linux")
    syn, synack = pkts[0], pkts[1]
    assert syn[TCP].flags == "S" and synack[TCP].flags == "SA"
    opts = dict(syn[TCP].options)
    assert [k for k, _ in syn[TCP].options] == ["MSS", "SAckOK", "Timestamp", "NOP", "WScale"]
    assert opts["MSS"] == 1460 and opts["WScale"] == 7 and opts["Timestamp"][1] == 0
    assert len(syn[IP]) == 60 and len(synack[IP]) == 60
    syn_ts = opts["Timestamp"][0]
    assert dict(synack[TCP].options)["Timestamp"][1] == syn_ts          # TSecr: the SYN's TSval
    later = pkts[2:]
    assert later and all([k for k, _ in p[TCP].options] == ["NOP", "NOP", "Timestamp"] for p in later)
    acks = [p for p in later if not p[TCP].payload and p[TCP].flags == "A"]
    assert acks and all(len(p[IP]) == 52 for p in acks)
    data = [p for p in later if len(p[TCP].payload)]
    assert data and all(len(p[IP]) == p[IP].len for p in data)
    sizes = {len(p[IP]) for p in data if p[IP].src == syn[IP].src}
    payloads = {len(p[TCP].payload) for p in data if p[IP].src == syn[IP].src}
    assert len(sizes) == 1 and payloads == {sizes.pop() - 20 - 32}
    # every checksum right: scapy recomputes it from the bytes with the field cleared
    for p in pkts:
        q = IP(bytes(p[IP]))
        ck = q[TCP].chksum
        del q[TCP].chksum
        assert IP(bytes(q))[TCP].chksum == ck


def test_no_options_without_the_linux_ack_model(tmp_path):
    pkts = _segments(tmp_path, "none")
    assert all(not p[TCP].options for p in pkts) and len(pkts[0][IP]) == 40
