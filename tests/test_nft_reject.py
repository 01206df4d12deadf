"""nft ``reject``: what nft sends (nft's stmt_evaluate_reject, checked against nft 1.0's netlink debug output) and the
reply the kernel builds (net/netfilter/nft_reject_inet.c, net/ipv4/netfilter/nf_reject_ipv4.c,
net/ipv6/netfilter/nf_reject_ipv6.c, as Debian's linux-source-7.2 has them): an ICMP error through icmp_send
(nf_send_unreach), or a TCP reset from the packet's destination (nf_send_reset) that puts the connection's entry
in CLOSE (nf_conntrack_tcp_set_closing)."""

from __future__ import annotations

import pytest
from scapy.layers.inet import ICMP, IP, TCP
from scapy.layers.inet6 import IPv6, ICMPv6DestUnreach
from scapy.layers.l2 import Ether
from scapy.utils import rdpcap

from flowsim.config.topology import load_topology_text
from flowsim.errors import FlowsimError
from flowsim.kernel.conntrack import TcpConntrack
from flowsim.nft.model import NFPROTO_IPV4, NFPROTO_IPV6, RejectStmt
from flowsim.sim.report import build_report
from flowsim.sim.simulation import Simulation


def topology(rules: str, traffic: str, table: str = "inet") -> str:
    """c ── r ── s; r's forward chain holds *rules* (a table of family *table*)."""
    return f"""[netns.c]
commands = '''
ip link add eth0 type veth peer name veth0 netns r
ip link set eth0 up
ip addr add 192.0.2.2/24 dev eth0
ip route add default via 192.0.2.1
ip -6 addr add 2001:db8:1::2/64 dev eth0 nodad
ip -6 route add default via 2001:db8:1::1
'''
[netns.r]
commands = '''
ip link add veth1 type veth peer name eth0 netns s
ip link set veth0 up
ip link set veth1 up
ip addr add 192.0.2.1/24 dev veth0
ip addr add 198.51.100.1/24 dev veth1
ip -6 addr add 2001:db8:1::1/64 dev veth0 nodad
ip -6 addr add 2001:db8:2::1/64 dev veth1 nodad
'''
sysctls = {{ "net.ipv4.ip_forward" = 1, "net.ipv6.conf.all.forwarding" = 1 }}
nft = '''
table {table} filter {{
  chain forward {{
    type filter hook forward priority 0; policy accept;
{rules}
  }}
}}
table inet offload {{
  flowtable ft {{ hook ingress priority 0; devices = {{ veth0, veth1 }}; }}
  chain forward {{ type filter hook forward priority 10; meta l4proto tcp flow add @ft; }}
}}
'''
[netns.s]
commands = '''
ip link set eth0 up
ip addr add 198.51.100.2/24 dev eth0
ip route add default via 198.51.100.1
ip -6 addr add 2001:db8:2::2/64 dev eth0 nodad
ip -6 route add default via 2001:db8:2::1
'''
{traffic}"""


def table(name: str, proto: str, to: str, dport: int, packets: int = 3, extra: str = "") -> str:
    return (f'[[traffic]]\nname = "{name}"\nproto = "{proto}"\nfrom = "c"\nto = "{to}"\ndport = {dport}\n'
            f"packets = {packets}\n{extra}")


def kernel_of(rule: str, family: str = "inet"):
    """The kernel of a run (the rulesets are compiled when it starts)."""
    topo = load_topology_text(topology(rule, table("t", "udp", "198.51.100.2", 5000), family), file="reject.toml")
    return Simulation(topo).kernel


def reject_of(rule: str, family: str = "inet") -> RejectStmt:
    chain = kernel_of(rule, family).netns["r"].ruleset.tables[0].chains["forward"]
    (stmt,) = [e for e in chain.rules[0].exprs if isinstance(e, RejectStmt)]
    return stmt


# ----------------------------------------------------------------------------- what nft sends

@pytest.mark.parametrize("family, rule, kind, code, nfproto", [
    ("inet", "reject", "icmpx", 1, None),                   # [ reject type 2 code 1 ]
    ("ip", "reject", "icmp", 3, NFPROTO_IPV4),              # [ reject type 0 code 3 ]
    ("ip6", "reject", "icmp", 4, NFPROTO_IPV6),             # port-unreachable of icmpv6
    ("inet", "tcp dport 22 reject", "icmpx", 1, None),      # still port unreachable, not a reset
    ("inet", "reject with icmpx type host-unreachable", "icmpx", 2, None),
    ("inet", "reject with icmp type host-unreachable", "icmp", 1, NFPROTO_IPV4),     # + meta nfproto ipv4
    ("inet", "reject with icmpv6 type addr-unreachable", "icmp", 3, NFPROTO_IPV6),   # + meta nfproto ipv6
    ("inet", "reject with icmp admin-prohibited", "icmp", 13, NFPROTO_IPV4),
    ("inet", "meta l4proto tcp reject with tcp reset", "tcp-reset", 0, None),         # [ reject type 1 code 0 ]
])
def test_the_reject_nft_sends(family, rule, kind, code, nfproto):
    stmt = reject_of(rule, family)
    assert (stmt.kind, stmt.code, stmt.family) == (kind, code, nfproto)


@pytest.mark.parametrize("family, rule, message", [
    ("inet", "udp dport 2 reject with tcp reset", "you cannot use tcp reset with this protocol"),
    ("ip", "reject with icmpv6 type addr-unreachable", "conflicting protocols specified: ip vs ip6"),
    ("ip6", "reject with icmp type host-unreachable", "conflicting protocols specified: ip6 vs ip"),
    ("inet", "reject with icmpx type bogus", "Could not parse icmpx code 'bogus'"),
    ("inet", "reject with smoke signals", "unknown reject 'smoke signals'"),
])
def test_a_reject_nft_refuses_is_a_located_error(family, rule, message):
    with pytest.raises(FlowsimError, match="reject.toml") as err:
        kernel_of(rule, family)
    assert message in str(err.value)


def test_reject_is_refused_at_postrouting():
    # nft_reject_validate: prerouting, input, forward, output (inet: and ingress); nft says "Operation not supported"
    text = topology("", table("t", "udp", "198.51.100.2", 5000)).replace(
        "table inet offload {", "table inet late {\n  chain post { type filter hook postrouting priority 0; reject; }\n}\n"
        "table inet offload {")
    with pytest.raises(FlowsimError, match=r"reject is not valid at hook postrouting.*Operation not supported"):
        Simulation(load_topology_text(text, file="reject.toml"))


# ----------------------------------------------------------------------------- the replies

def run(rules: str, traffic: str, tmp_path=None):
    sim = Simulation(load_topology_text(topology(rules, traffic), file="reject.toml"), pcap_dir=tmp_path).run()
    return sim, build_report(sim)


def test_udp_reject_sends_port_unreachable_from_the_router(tmp_path):
    sim, report = run("    udp dport 5001 reject", table("u4", "udp", "198.51.100.2", 5001) +
                      table("u6", "udp", "2001:db8:2::2", 5001), tmp_path)
    assert report["drops"] == {"nft-reject": 6}
    assert [t["icmp_errors"]["delivered"] for t in report["traffic"]] == [3, 3]
    wire = [Ether(bytes(p)) for p in rdpcap(str(tmp_path / "c-eth0.pcap"))]
    v4 = [p for p in wire if ICMP in p]
    v6 = [p for p in wire if ICMPv6DestUnreach in p]
    assert {(p[IP].src, p[ICMP].type, p[ICMP].code) for p in v4} == {("192.0.2.1", 3, 3)}
    assert {(p[IPv6].src, p[ICMPv6DestUnreach].code) for p in v6} == {("2001:db8:1::1", 4)}
    # the checksums scapy computes are the ones sent
    for p in v4 + v6:
        rebuilt = Ether(bytes(p))
        for layer, field in ((IP, "chksum"), (ICMP, "chksum"), (ICMPv6DestUnreach, "cksum")):
            if layer in rebuilt:
                delattr(rebuilt[layer], field)
        assert bytes(rebuilt) == bytes(p)


def test_a_reject_with_icmp_matches_ipv4_only():
    # `reject with icmp …` in an inet table carries `meta nfproto ipv4`: IPv6 passes the rule
    _, report = run("    udp dport 5002 reject with icmp type host-unreachable",
                    table("u4", "udp", "198.51.100.2", 5002) + table("u6", "udp", "2001:db8:2::2", 5002))
    dirs = {t["name"]: t["directions"]["original"] for t in report["traffic"]}
    assert (dirs["u4"]["dropped"], dirs["u6"]["delivered"]) == (3, 3)


@pytest.mark.parametrize("to", ["198.51.100.2", "2001:db8:2::2"])
def test_tcp_reset_answers_a_syn_from_the_destination(to, tmp_path):
    sim, report = run("    tcp dport 5000 reject with tcp reset", table("t", "tcp", to, 5000), tmp_path)
    (t,) = report["traffic"]
    assert report["drops"] == {"nft-reject": 1}
    assert t["flows"][0]["client"]["state"] == "closed"  # the client's connect is refused
    wire = [Ether(bytes(p)) for p in rdpcap(str(tmp_path / "c-eth0.pcap"))]
    syn, rst = wire[0][TCP], wire[1][TCP]
    l3 = wire[1][IP] if IP in wire[1] else wire[1][IPv6]
    # nf_reject_ip_tcphdr_put: the SYN had no ACK: sequence 0, ACK of the SYN; from the server's address and port
    assert (l3.src, rst.sport, rst.dport) == (to, 5000, syn.sport)
    assert (str(rst.flags), rst.seq, rst.ack, rst.window) == ("RA", 0, syn.seq + 1, 0)
    assert (l3.ttl if IP in wire[1] else l3.hlim) == 64
    if IP in wire[1]:
        assert (l3.flags.DF, l3.id, l3.tos) == (True, 0, 0)
    rebuilt = wire[1].__class__(bytes(wire[1]))
    del rebuilt[TCP].chksum
    assert bytes(rebuilt) == bytes(wire[1])  # the checksum scapy computes is the one sent


def test_tcp_reset_of_an_established_connection_closes_its_entry(tmp_path):
    # the client's data is refused once established: RST with the segment's acknowledgement as its sequence,
    # no ACK; nf_ct_set_closing puts the confirmed entry in CLOSE (10 s)
    sim, report = run("    ct state established ct direction original tcp dport 5000 tcp flags & (syn | ack) == ack "
                      "reject with tcp reset", table("t", "tcp", "198.51.100.2", 5000, extra="acks = \"linux\"\n"),
                      tmp_path)
    (ct,) = sim.kernel.netns["r"].conntrack.entries()
    assert ct.tcp_state == TcpConntrack.CLOSE
    wire = [Ether(bytes(p)) for p in rdpcap(str(tmp_path / "c-eth0.pcap"))]
    ack = next(p[TCP] for p in wire if p[IP].src == "192.0.2.2" and str(p[TCP].flags) == "A")
    rst = next(p[TCP] for p in wire if "R" in str(p[TCP].flags))
    assert (str(rst.flags), rst.seq) == ("R", ack.ack)
    assert report["drops"].get("nft-reject", 0) >= 1
