"""GRE (IP protocol 47) through a flowtable, as Debian's linux-source-7.2 has it (and -6.12, -6.1).

* conntrack: ``gre_pkt_to_tuple`` keys GRE version 0 by the addresses alone (it "behaves like
  nf_conntrack_proto_generic": ports 0); ``nf_conntrack_gre_packet`` (net/netfilter/nf_conntrack_proto_gre.c):
  30 s unreplied, 180 s once a reply was seen, then ASSURED;
* ``nft_flow_offload_eval`` (net/netfilter/nft_flow_offload.c): GRE is offloaded unless NATed or keyed;
* the fast path: ``nf_flow_tuple_ip`` / ``nf_flow_tuple_ipv6`` take GRE version 0 (ports 0);
* ``nf_flow_table_extend_ct_timeout`` (net/netfilter/nf_flow_table_core.c, 6.12.118 and 6.14+): its switch has
  no GRE case, so an offloaded GRE entry takes ``default: WARN_ON_ONCE(1)`` with ``new_timeout`` 1 and expires
  a jiffy later, a day after ``flow_offload_add``; 6.1.192's ``nf_ct_offload_timeout`` gives every protocol a day;
* the endpoints: raw sockets of protocol 47 (``raw_sendmsg``, ``raw_local_deliver``).
"""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest
from scapy.layers.inet import GRE, IP
from scapy.layers.inet6 import IPv6
from scapy.utils import rdpcap

from ftkit import add_flow, established_ct, setup

from flowsim.config.topology import load_topology, load_topology_text
from flowsim.conform.guest import ScenarioSkipped, _traffic_start, plan_scenario, probe_ruleset
from flowsim.conform.observe import find_ct
from flowsim.conform.parse import parse_conntrack
from flowsim.errors import TopologyError
from flowsim.kernel.conntrack import (
    IPS_ASSURED, IPS_SEEN_REPLY, ConntrackTable, CtTimeouts, CtTuple, nf_conntrack_gre_packet,
)
from flowsim.kernel.pkt import build_ipv4, parse_ip
from flowsim.kernel.stack.nf import gre_pkt_to_tuple
from flowsim.profiles import get_profile
from flowsim.sim.explain import explain
from flowsim.sim.report import build_report
from flowsim.sim.simulation import Simulation

TOPOLOGY = Path(__file__).resolve().parent.parent / "topologies" / "conform-gre.toml"
ip = ipaddress.ip_address


def run(topo, profile: str = "linux-7.2", **kw):
    sim = Simulation(topo, profile=get_profile(profile), **kw)
    sim.run()
    return sim, build_report(sim)


def directions(report: dict, name: str) -> dict:
    (t,) = [t for t in report["traffic"] if t["name"] == name]
    return {d: (v["sent"], v["delivered"], v["fastpath"], v["slowpath"]) for d, v in t["directions"].items()}


# ----------------------------------------------------------------------------- the shipped scenario

@pytest.mark.parametrize("profile", ["linux-6.1", "linux-6.12", "linux-7.2", "linux-7.3"])
def test_gre_offloaded_unless_nated(profile):
    """gre4 / gre6: the flow is added at the second datagram (the first makes the entry, confirmed at
    postrouting), so 28 of 30 and every reply take the fast path; gre4-nat (masqueraded) never: 'GRE connections
    with NAT or keys are not offloaded'."""
    _, report = run(load_topology(TOPOLOGY), profile)
    assert directions(report, "gre4") == {"original": (30, 30, 28, 2), "reply": (10, 10, 10, 0)}
    assert directions(report, "gre6") == {"original": (30, 30, 28, 2), "reply": (10, 10, 10, 0)}
    assert directions(report, "gre4-nat") == {"original": (20, 20, 0, 20), "reply": (5, 5, 0, 5)}
    cts = {c["original"]: c for c in report["conntrack"]["r"]}
    assert cts["192.0.2.2 -> 198.51.100.2"]["proto"] == "gre"
    assert "OFFLOAD" in cts["192.0.2.2 -> 198.51.100.2"]["status"]
    nat = cts["192.0.2.2 -> 198.51.100.3"]
    assert nat["reply"] == "198.51.100.3 -> 198.51.100.1"  # masqueraded to the router's address
    assert {"ASSURED", "SRC_NAT"} <= set(nat["status"]) and "OFFLOAD" not in nat["status"]


def test_explain_names_the_nat_refusal():
    sim, _ = run(load_topology(TOPOLOGY))
    by_conn = {e.connection: e for e in explain(sim)}
    assert by_conn["gre 192.0.2.2 -> 198.51.100.2"].offloaded
    nat = by_conn["gre 192.0.2.2 -> 198.51.100.3"]
    assert not nat.offloaded and nat.stopped_by == "flow-add-gre-nat"


def test_gre_packets_are_real_bytes(tmp_path):
    """What leaves the client: IPv4 / IPv6 protocol 47, a GRE version 0 header of protocol 0 (no checksum, key
    or sequence number), zeros after it; the IP length is the table's size.  scapy decodes them."""
    sim, _ = run(load_topology(TOPOLOGY), pcap_dir=tmp_path)
    sim.close()
    frames = [bytes(p) for p in rdpcap(str(tmp_path / "ns1-eth0.pcap"))]
    v4 = [IP(f[14:]) for f in frames if f[12:14] == b"\x08\x00"]
    v6 = [IPv6(f[14:]) for f in frames if f[12:14] == b"\x86\xdd"]
    first4 = next(p for p in v4 if p.dst == "198.51.100.2")
    assert first4.proto == 47 and first4.len == 800 and first4.flags == "DF"
    gre = first4[GRE]
    assert (gre.chksum_present, gre.key_present, gre.seqnum_present, gre.version, gre.proto) == (0, 0, 0, 0, 0)
    assert bytes(first4)[24:] == bytes(800 - 24)
    first6 = next(p for p in v6 if p.dst == "2001:db8:2::2")
    assert first6.nh == 47 and first6.plen == 800 - 40 and first6[GRE].version == 0
    assert IP(bytes(first4)).chksum == first4.chksum  # the header checksum scapy computes is the one sent


# ----------------------------------------------------------------------------- conntrack

def gre_tuple(a: str, b: str) -> CtTuple:
    return CtTuple(ip(a), ip(b), 0, 0, 2, 47)


def test_nf_conntrack_gre_packet_timeouts():
    """30 s while unreplied; the first reply still 30 s (IPS_SEEN_REPLY is set after the handler); the packet
    after it 180 s and ASSURED."""
    table = ConntrackTable()
    t = gre_tuple("10.0.0.1", "10.0.0.2")
    r = table.nf_conntrack_in(t, 0.0, length=100)
    assert r.state == "new" and r.entry.timeout == 30.0
    table.nf_conntrack_confirm(r.entry, 0.0)
    r = table.nf_conntrack_in(t.invert(), 1.0, length=100)
    assert r.state == "established" and r.entry.timeout == 31.0 and not r.entry.test(IPS_ASSURED)
    assert r.entry.test(IPS_SEEN_REPLY)
    r = table.nf_conntrack_in(t, 2.0, length=100)
    assert r.entry.timeout == 182.0 and r.entry.test(IPS_ASSURED)
    assert (r.entry.orig_packets, r.entry.reply_packets) == (2, 1)


def test_gre_timeout_sysctls():
    """net.netfilter.nf_conntrack_gre_timeout / _stream (nf_conntrack_standalone.c) set both timeouts."""
    timeouts = CtTimeouts.from_sysctls({"net.netfilter.nf_conntrack_gre_timeout": "7",
                                        "net.netfilter.nf_conntrack_gre_timeout_stream": "70"})
    table = ConntrackTable(timeouts)
    t = gre_tuple("10.0.0.1", "10.0.0.2")
    ct = table.nf_conntrack_in(t, 0.0).entry
    assert ct.timeout == 7.0
    ct.status |= IPS_SEEN_REPLY
    assert nf_conntrack_gre_packet(ct, 0, 100, 1.0, timeouts) == "accept" and ct.timeout == 71.0


def test_two_gre_hosts_are_one_connection():
    """GRE version 0 has no ports for conntrack: two keyed tunnels between the same hosts share one entry."""
    table = ConntrackTable()
    a = table.nf_conntrack_in(gre_tuple("10.0.0.1", "10.0.0.2"), 0.0).entry
    table.nf_conntrack_confirm(a, 0.0)
    assert table.nf_conntrack_in(gre_tuple("10.0.0.1", "10.0.0.2"), 0.5).entry is a


# ----------------------------------------------------------------------------- a day of offload

DAY_LONG = """
[[traffic]]
name = "day"
proto = "gre"
from = "ns1"
to = "198.51.100.2"
packets = 5760
size = 200
rate = {rate}
"""


def day_long(profile: str):
    """One GRE packet every 20 s (within the 30 s an unreplied entry lives) for a day and a third (5,760
    packets), without replies."""
    text = TOPOLOGY.read_text()
    text = text[:text.index("[[traffic]]")] + DAY_LONG.format(rate=1 / 20)
    sim, report = run(load_topology_text(text, file="gre-day.toml"), profile, tracing=True)
    return sim, report


@pytest.mark.parametrize("profile,flows,slow", [
    # nf_flow_table_extend_ct_timeout: WARN_ON_ONCE, the entry dies a jiffy later, the flow is torn down
    # ("ct dying"); the next packet makes a new entry (slow path), the one after it a new flow (slow path too:
    # the entry is confirmed only as the first leaves)
    ("linux-7.2", 2, 4),
    ("linux-6.12", 2, 4),
    # nf_ct_offload_timeout: a day again whenever under half a day is left
    ("linux-6.1", 1, 2),
])
def test_offloaded_gre_entry_lives_a_day(profile, flows, slow):
    sim, report = day_long(profile)
    ft = sim.kernel.netns["r"].flowtables["ft"]
    assert ft.flows_created == flows
    assert directions(report, "day")["original"] == (5760, 5760, 5760 - slow, slow)
    warned = [r for r in sim.kernel.traces if "WARN_ON_ONCE in nf_flow_table_extend_ct_timeout" in r.what]
    assert len(warned) == flows - 1
    if flows == 2:
        (teardown,) = [h for h in ft.history if h[1] == "teardown"]
        # flow add at the second packet (20 s): the entry expires at 86,420 s.  The GC tick at 86,121 s finds
        # 299 s left (under min_timeout): a jiffy; conntrack's gc_worker kills the entry at 86,122 s, and the
        # flowtable GC tears its flow down at the next tick ("ct dying")
        assert teardown[3] == "ct dying" and teardown[0] == 86123.0


# ----------------------------------------------------------------------------- the traffic table

BASE = """
[netns.a]
commands = '''
ip link add eth0 type veth peer name eth0 netns b
ip addr add 10.0.0.1/24 dev eth0
ip link set eth0 up
'''
[netns.b]
commands = '''
ip addr add 10.0.0.2/24 dev eth0
ip link set eth0 up
'''
[[traffic]]
name = "g"
from = "a"
to = "10.0.0.2"
"""


@pytest.mark.parametrize("extra,at,message", [
    ('proto = "gre"\ndport = 5', "dport", "dport is not for gre"),
    ('proto = "gre"\nsport = 5', "sport", "sport is not for gre"),
    ('proto = "gre"\nflows = 2', "flows", "flows = 2 of GRE would be one connection"),
    ('proto = "gre"\nsize = 23', "size", "size 23 cannot hold the IP and GRE headers"),
    ('proto = "gre"\ngso_size = 500', "gso_size", "gso_size is only for tcp and udp"),
    ('proto = "gre"\nhandshake = true', "handshake", "handshake is only for tcp"),
    ('proto = "udp"', "[[traffic]]", "traffic needs 'dport'"),
    ('proto = "icmp"\ndport = 1', "proto", "bad proto 'icmp'"),
])
def test_bad_gre_tables(extra, at, message):
    """One error naming the line of the key (of the table's header for a missing one)."""
    text = BASE + extra + "\n"
    line = 1 + next(i for i, s in enumerate(text.splitlines()) if s.split(" ")[0] == at)
    with pytest.raises(TopologyError) as e:
        load_topology_text(text, file="g.toml")
    assert message in str(e.value) and e.value.line == line, str(e.value)


def test_gre_between_two_hosts():
    """Client and server on one link: the server's raw socket opens with the first packet (``kernel.accept``)
    and answers from the address the packet was sent to; the report names the addresses, no ports."""
    topo = load_topology_text(BASE + 'proto = "gre"\npackets = 3\nreply_packets = 2\n', file="g.toml")
    _, report = run(topo)
    assert directions(report, "g") == {"original": (3, 3, 0, 0), "reply": (2, 2, 0, 0)}
    (flow,) = report["traffic"][0]["flows"]
    assert (flow["client"]["local"], flow["server"]["local"], flow["server"]["remote"]) == \
        ("10.0.0.1", "10.0.0.2", "10.0.0.1")


# ----------------------------------------------------------------------------- the conformance guest

def test_guest_plan_for_gre():
    """The guest's GRE: no ports anywhere, the server's address bound by its raw socket, replies to the first
    sender its receiver logged (the client as NAT left it: gre4-nat's server sees the router's address)."""
    plan = plan_scenario(load_topology(TOPOLOGY))
    gre4, gre6, nat = plan.traffic
    assert (gre4.sport, gre4.dport, gre4.listen_port, gre4.listen_addr) == (0, 0, 0, "198.51.100.2")
    assert nat.listen_addr == "198.51.100.3" and gre6.listen_addr == "2001:db8:2::2"
    script = "\n".join(_traffic_start(gre6))
    assert "IP6-RECV:47,bind=[2001:db8:2::2]" in script
    # no src in the table: the client binds the wildcard, the guest's kernel selects the source
    assert "IP6-DATAGRAM:[2001:db8:2::2]:47,bind=[::],range=[2001:db8:2::2]/128" in script
    assert "IP6-SENDTO:$peer:47,bind=[2001:db8:2::2]" in script and "wait_listen ns2 47 raw" in script
    # socat's payload is the whole GRE packet: 800 - 40 bytes each way, replies truncated to the client's block
    assert "wait_bytes /tmp/t1.srv 22800 /tmp/t1.cli 1600" in script
    probe = probe_ruleset(plan, "r")
    assert "meta l4proto gre ct original ip saddr 192.0.2.2 ct original ip daddr 198.51.100.2 ct direction" \
        in probe and "proto-src" not in probe
    assert "meta nfproto ipv4 meta l4proto gre ip daddr 198.51.100.3 counter name t2_in_original" \
        in probe_ruleset(plan, "ns2")


def test_guest_refuses_two_gre_tables_to_one_address():
    text = TOPOLOGY.read_text().replace('to = "198.51.100.3"', 'to = "198.51.100.2"')
    with pytest.raises(ScenarioSkipped, match="both go to 198.51.100.2 in ns2"):
        plan_scenario(load_topology_text(text, file="two.toml"))


def test_gre_conntrack_listing_is_found():
    """/proc/net/nf_conntrack's GRE line (nf_conntrack_proto_gre.c's gre_print_conntrack: the entry's timeouts,
    then srckey/dstkey where TCP and UDP have ports), as 7.2.13 printed conform-gre's gre4."""
    line = ("ipv4     2 gre      47 timeout=30, stream_timeout=180 src=192.0.2.2 dst=198.51.100.2 srckey=0x0 "
            "dstkey=0x0 packets=30 bytes=24000 [UNREPLIED] src=198.51.100.2 dst=192.0.2.2 srckey=0x0 dstkey=0x0 "
            "packets=10 bytes=2000 [OFFLOAD] mark=0 zone=0 use=3")
    gre4 = plan_scenario(load_topology(TOPOLOGY)).traffic[0]
    found = find_ct(parse_conntrack(line), gre4)
    assert found is not None and found.offloaded and (found.original.packets, found.reply.packets) == (30, 10)


# ----------------------------------------------------------------------------- PPTP's enhanced GRE (version 1)

def gre_packet(header: bytes) -> tuple[bytes, object]:
    pkt = build_ipv4(ip("10.0.0.1"), ip("10.0.0.2"), 47, header + bytes(20))
    return pkt, parse_ip(pkt, 0)


@pytest.mark.parametrize("header,keys", [
    (bytes(4), (0, 0)),                                          # version 0: generic, keys 0
    (bytes([0x30, 0x01, 0x88, 0x0B, 0, 20, 0x12, 0x34]), (0, 0x1234)),  # PPTP: its call ID; no keymap (no helper)
    (bytes([0x30, 0x01, 0x08, 0x00, 0, 20, 0x12, 0x34]), None),  # version 1 without PPP: no tuple
])
def test_gre_pkt_to_tuple(header, keys):
    pkt, info = gre_packet(header)
    assert gre_pkt_to_tuple(pkt, info) == keys


def test_pptp_keys_are_not_offloaded():
    """nft_flow_offload_eval: 'No support for GRE v1' — an entry with keys is refused (flow-add-gre-nat), as a
    version 0 entry between the same hosts is not."""
    kernel, state = setup("selftest.toml", "nsr1", "linux-7.2")
    keyed = established_ct(state, "10.0.1.99", "10.0.2.99", 0, 0x1234, l4proto=47)
    assert not add_flow(kernel, state, "f1", keyed, 0, "veth0")
    assert state.flowtables["f1"].flow_add_failures["flow-add-gre-nat"] == 1
    plain = established_ct(state, "10.0.1.99", "10.0.2.99", 0, 0, l4proto=47)
    assert add_flow(kernel, state, "f1", plain, 0, "veth0")


def test_explain_traffic_picks_a_gre_table(capsys):
    """``flowsim explain --traffic NAME`` recognises a GRE table's connection by its addresses (no client port)."""
    from flowsim.cli import main
    assert main(["explain", str(TOPOLOGY), "--traffic", "gre4-nat", "--profile", "linux-7.2"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("profile linux-7.2: 1 connection(s)") and "gre 192.0.2.2 -> 198.51.100.3" in out


def test_sweep_refuses_ports_on_gre():
    """A sweep key a GRE table does not have is one error; ``traffic.*.dport`` leaves GRE tables alone."""
    from flowsim.errors import ConfigError
    from flowsim.sim.sweep import plan
    with pytest.raises(ConfigError, match="traffic 'gre4' is gre"):
        plan(TOPOLOGY, {"traffic.gre4.dport": [1, 2]})
    assert len(plan(TOPOLOGY, {"traffic.*.dport": [1, 2]}).tasks) == 2
