"""Per-device captures of the slow path: every frame decodes in scapy with checksums scapy agrees with (issue 4)."""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest
from scapy.layers.inet import ICMP, IP, TCP, UDP, IPerror
from scapy.layers.inet6 import IPv6, IPv6ExtHdrDestOpt, IPv6ExtHdrFragment, _ICMPv6
from scapy.layers.l2 import Dot1Q, Ether
from scapy.layers.ppp import PPP, PPPoE
from scapy.utils import rdpcap

from flowsim.config.topology import load_topology
from flowsim.sim.simulation import Simulation
from flowsim.sim.traffic import TrafficSpec

TOPOLOGIES = Path(__file__).resolve().parent.parent / "topologies"
SHIPPED = sorted(p.stem for p in TOPOLOGIES.glob("*.toml"))

# layer class -> checksum field; the *error classes (quoted packets) are checked only for their IP header
_CHECKED = {IP: "chksum", IPerror: "chksum", TCP: "chksum", UDP: "chksum", ICMP: "chksum"}


def bad_checksums(frame: bytes) -> list[str]:
    """Layers whose stored checksum differs from the one scapy computes when the field is cleared."""
    pkt = Ether(frame)
    fields = []
    frag = False
    for i, layer in enumerate(pkt.iterpayloads()):
        cls = type(layer)
        if cls is IP:
            frag = bool(layer.flags.MF or layer.frag)
        elif cls is IPv6ExtHdrFragment:
            frag = bool(layer.m or layer.offset)
        if cls in (TCP, UDP) and frag:
            continue  # the L4 checksum covers the whole datagram, not this fragment
        if cls is UDP and layer.chksum == 0:
            continue
        name = _CHECKED.get(cls) or ("cksum" if isinstance(layer, _ICMPv6) and hasattr(layer, "cksum") else None)
        if name is not None and getattr(layer, name, None) is not None:
            fields.append((i, cls.__name__, name, getattr(layer, name)))
    if not fields:
        return []
    clone = pkt.copy()
    layers = list(clone.iterpayloads())
    for i, _cls, name, _v in fields:
        setattr(layers[i], name, None)
    again = list(Ether(bytes(clone)).iterpayloads())
    return [f"{cls}.{name} {v:#06x} != {getattr(again[i], name):#06x}" for i, cls, name, v in fields
            if getattr(again[i], name) != v]


def small(topo, n: int = 4):
    """The topology's traffic with few packets, so that every frame can be checked with scapy."""
    return [attrs.evolve(TrafficSpec.from_topology(t, i), packets=min(t.packets, n),
                         reply_packets=min(t.reply_packets, n)) for i, t in enumerate(topo.traffic)]


def frames(directory: Path):
    for path in sorted(directory.glob("*.pcap")):
        for pkt in rdpcap(str(path)):
            yield path.name, bytes(pkt)


@pytest.mark.parametrize("name", SHIPPED)
def test_every_captured_frame_has_valid_checksums(name, tmp_path):
    """Every frame written to or read from a device decodes in scapy with valid IP/TCP/UDP/ICMP checksums (issue 4)."""
    topo = load_topology(TOPOLOGIES / f"{name}.toml")
    Simulation(topo, flowtables=False, pcap_dir=tmp_path, traffic=small(topo)).run()
    seen = 0
    for pcap, raw in frames(tmp_path):
        pkt = Ether(raw)
        assert pkt.haslayer(IP) or pkt.haslayer(IPv6), f"{pcap}: {pkt.summary()}"
        assert bad_checksums(raw) == [], f"{pcap}: {pkt.summary()}"
        seen += 1
    assert seen > 0


def test_nat_is_visible_in_the_captures(tmp_path):
    """bridge-vlan: DNAT 10.6.6.6:1666 → 10.0.2.99:12345 and masquerade to 192.168.10.1 on veth1; replies undone (``nf_nat_packet``)."""
    topo = load_topology(TOPOLOGIES / "bridge-vlan.toml")
    Simulation(topo, flowtables=False, pcap_dir=tmp_path, traffic=small(topo)).run()
    wan = [Ether(bytes(p)) for p in rdpcap(str(tmp_path / "nsr1-veth1.pcap"))]
    lan = [Ether(bytes(p)) for p in rdpcap(str(tmp_path / "ns1-eth0.pcap"))]
    out = [p for p in wan if p[IP].dst == "10.0.2.99"]
    back = [p for p in wan if p[IP].src == "10.0.2.99"]
    assert out and all(p[IP].src == "192.168.10.1" and p[TCP].dport == 12345 for p in out)
    assert back and all(p[IP].dst == "192.168.10.1" for p in back)
    assert all(p[Dot1Q].vlan == 10 for p in lan)
    assert {(p[IP].src, p[TCP].sport) for p in lan if p[TCP].dport == 40000} == {("10.6.6.6", 1666)}
    assert all(bad_checksums(bytes(p)) == [] for p in wan + lan)


def test_masquerade_over_pppoe_in_vlan_on_the_wire(tmp_path):
    """pppoe-over-vlan: cpe's eth1 carries VLAN 7 / PPPoE session 0x42 / PPP IPv4 with the ppp0 address as source."""
    topo = load_topology(TOPOLOGIES / "pppoe-over-vlan.toml")
    Simulation(topo, flowtables=False, pcap_dir=tmp_path, traffic=small(topo)).run()
    wire = [Ether(bytes(p)) for p in rdpcap(str(tmp_path / "cpe-eth1.pcap"))]
    up = [p for p in wire if p.haslayer(IP) and p[IP].dst == "198.51.100.10"]
    assert up and all(p[Dot1Q].vlan == 7 and p[PPPoE].sessionid == 0x42 and p[PPP].proto == 0x21 for p in up)
    assert {p[IP].src for p in up} == {"100.64.0.2"}


@pytest.mark.parametrize("name, nexthdr, limit", [
    ("ip6ip6-rx", 41, None),
    ("ip6ip6-rx-encaplimit", 60, 4),
])
def test_ip6tnl_encap_limit_option_on_the_wire(name, nexthdr, limit, tmp_path):
    """ip6tnl without `encaplimit none` sends a destination-options header with encap limit 4 (RFC 2473, ``ip6_tnl_xmit``)."""
    topo = load_topology(TOPOLOGIES / f"{name}.toml")
    Simulation(topo, flowtables=False, pcap_dir=tmp_path, traffic=small(topo)).run()
    outer = [Ether(bytes(p)) for p in rdpcap(str(tmp_path / "router-eth1.pcap"))]
    out = [p for p in outer if p[IPv6].src == "2001:db8:2::1"]
    assert out and {p[IPv6].nh for p in out} == {nexthdr}
    assert {p[IPv6].hlim for p in out} == {64}  # the tunnel's own hop limit, not the inner one
    if limit is not None:
        opt = out[0][IPv6ExtHdrDestOpt]
        assert opt.nh == 41 and bytes(opt)[2:5] == bytes((4, 1, limit))
    assert all(p.getlayer(IPv6, 2) is not None for p in out)


def test_ipip_outer_header_inherits_the_inner_ttl(tmp_path):
    """ipip `ttl 0` (inherit): the outer TTL is the inner TTL after the forward decrement; DF set (pmtudisc)."""
    topo = load_topology(TOPOLOGIES / "ipip.toml")
    Simulation(topo, flowtables=False, pcap_dir=tmp_path, traffic=small(topo)[:1]).run()
    outer = [Ether(bytes(p)) for p in rdpcap(str(tmp_path / "nsr1-veth1.pcap"))]
    tun = [p for p in outer if p[IP].proto == 4 and p[IP].src == "192.168.10.1"]
    assert tun and all(p[IP].ttl == p.getlayer(IP, 2).ttl == 63 and p[IP].flags.DF for p in tun)

