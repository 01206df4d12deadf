"""Issue 5's scenarios end to end: which directions the fast path takes, per kernel profile.

The simulator is deterministic, so every count here is exact.  Kernel code: net/netfilter/nf_flow_table_ip.c
(the hook), nf_flow_table_path.c (path discovery), nf_flow_table_core.c (flow life cycle), nft_flow_offload.c.
"""

from __future__ import annotations

import collections
from pathlib import Path

import attrs
import pytest

from flowsim.config.topology import load_topology, load_topology_text
from flowsim.profiles import get_profile
from flowsim.sim.report import build_report
from flowsim.sim.simulation import Simulation

TOPO = Path(__file__).resolve().parent.parent / "topologies"


def run(topology, profile, text=None, specs=None, duration=None, **switches):
    topo = load_topology_text(text, str(TOPO / topology)) if text else load_topology(TOPO / topology)
    sim = Simulation(topo, get_profile(profile).derive(**switches))
    if specs is not None:
        sim = Simulation(topo, get_profile(profile).derive(**switches), traffic=specs(sim.specs))
    sim.run(duration)
    return sim, build_report(sim)


# topology, profile, traffic, (fastpath, slowpath) of the original direction, the same of the reply.
# "original" is the traffic table's sender; the counts are per pass through the flowtable hook.
# The slow-path packets of an accelerated direction are the handshake before `flow add` (SYN, ACK; SYN-ACK in the
# reply) and, where the reply creates the flow (ipip*, ip6ip6-over-vlan), the packets sent before it existed.
TABLE = [
    # the cover letter: TCP stream received from the tunnel (server → client); the reply direction goes in
    ("ip6ip6-rx.toml", "linux-7.1.5", "tcp-rx-from-tunnel", (1002, 2), (501, 1)),
    ("ip6ip6-rx.toml", "linux-7.0", "tcp-rx-from-tunnel", (1002, 2), (501, 1)),
    # no ip6tnl fill_forward_path / nf_flow_ip6_tunnel_proto before 7.0: out of the tunnel is all slow
    ("ip6ip6-rx.toml", "linux-6.19", "tcp-rx-from-tunnel", (0, 1004), (501, 1)),
    ("ip6ip6-rx.toml", "linux-6.18", "tcp-rx-from-tunnel", (0, 1004), (501, 1)),
    ("ip6ip6-rx-encaplimit.toml", "linux-7.0", "tcp-rx-from-tunnel", (1002, 2), (501, 1)),
    # 7.1.5's ip6_tnl_fill_forward_path refuses a tunnel without `encaplimit none`: no flow at all
    ("ip6ip6-rx-encaplimit.toml", "linux-7.1.5", "tcp-rx-from-tunnel", (0, 1004), (0, 502)),
    ("ipip.toml", "linux-6.19", "tcp-12345", (194, 10), (200, 2)),
    ("ipip.toml", "linux-6.18", "tcp-12345", (194, 10), (0, 202)),
    ("ipip.toml", "linux-6.19", "tcp6-12345", (194, 10), (0, 202)),
    ("ipip.toml", "linux-7.0", "tcp6-12345", (194, 10), (200, 2)),
    ("ipip-over-vlan.toml", "linux-7.1.5", "tcp-12345", (194, 10), (200, 2)),
    ("ip6ip6-over-vlan.toml", "linux-7.1.5", "tcp6-12345", (194, 10), (200, 2)),
    ("ip6ip6-over-vlan.toml", "linux-6.19", "tcp6-12345", (194, 10), (0, 202)),
    ("bridge-vlan.toml", "linux-7.1.5", "tcp-dnat-1666", (202, 2), (201, 1)),
    ("pppoe-over-vlan.toml", "linux-7.1.5", "tcp-download", (22, 2), (1001, 1)),
    ("pppoe-over-vlan.toml", "linux-6.18", "tcp-download", (22, 2), (1001, 1)),
    ("selftest.toml", "linux-7.1.5", "tcp-12345", (202, 2), (201, 1)),
    # selftest-nat plays Linux's TCP (acks = "linux"): the pure ACKs ride the fast path too; the writes queued
    # behind the initial window (TCP_INIT_CWND) merge into full-MSS segments of ns1's 2000-byte MTU, and the
    # first two exceed the flow's 1500 (nf_flow_exceeds_mtu: slow path, Fragmentation Needed)
    ("selftest-nat.toml", "linux-7.1.5", "tcp-masquerade", (212, 3), (205, 1)),
    # before 6.14 the FIN tears the flow down (nf_flow_state_check): FIN and the last ACK go slow too
    ("selftest-nat.toml", "linux-6.12", "tcp-dnat-1666", (210, 5), (204, 2)),
    # out of the tunnel through PPPoE: a lookup miss under 7.0 (offset bug) and 7.1.5 (empty tunnel fields)
    ("ip6ip6-over-pppoe.toml", "linux-7.0", "tcp-download", (0, 1003), (501, 1)),
    ("ip6ip6-over-pppoe.toml", "linux-7.1.5", "tcp-download", (0, 1003), (501, 1)),
]


@pytest.mark.parametrize("topology,profile,traffic,original,reply", TABLE,
                         ids=[f"{t[0]}-{t[1]}-{t[2]}" for t in TABLE])
def test_fast_path_per_direction(topology, profile, traffic, original, reply):
    """Each direction is accelerated exactly when the profile's kernel can resolve (nft_dev_path_info) and match
    (flow_offload_lookup in nf_flow_offload_ip_hook / nf_flow_offload_ipv6_hook) it: exact hook counts."""
    _sim, r = run(topology, profile)
    (t,) = [x for x in r["traffic"] if x["name"] == traffic]
    d = t["directions"]
    assert ((d["original"]["fastpath"], d["original"]["slowpath"]), (d["reply"]["fastpath"], d["reply"]["slowpath"])) \
        == (original, reply)
    p = r["packets"]
    assert p["injected"] == p["delivered"] + p["dropped"] + p["in_flight"]


def test_618_tunnel_device_listed_accelerates_decapsulated_packets():
    """6.18 with tun0 in the flowtable: packets out of the tunnel hit the flow on tun0, after decapsulation."""
    text = (TOPO / "ip6ip6-rx.toml").read_text().replace("devices = { eth0, eth1 }", "devices = { eth0, eth1, tun0 }")
    _sim, r = run("ip6ip6-rx.toml", "linux-6.18", text=text)
    (t,) = [x for x in r["traffic"] if x["name"] == "tcp-rx-from-tunnel"]
    # each packet passes the hook twice: at eth1 (slow: l4proto 41), then decapsulated at tun0 (fast, after the
    # 2 handshake packets); the reply enters at eth0 and hits the flow after its SYN-ACK
    assert t["directions"]["original"]["fastpath"] == 1002 and t["directions"]["original"]["slowpath"] == 1004 + 2
    assert r["flowtables"][0]["reasons"] == {"l4proto-unsupported": 1004, "no-flow-entry": 5}


def test_ip6ip6_over_pppoe_ci_fix_accelerates():
    """The CI tree's mapped ethertype fills the tunnel fields, so the decapsulated direction hits (nf_flow_tuple_encap
    compares the mapped ethertype of a PPPoE-carried packet): all but the 2 handshake packets are fast."""
    _sim, r = run("ip6ip6-over-pppoe.toml", "linux-7.1.5", tuple_encap_pppoe_proto="mapped")
    (t,) = r["traffic"]
    assert (t["directions"]["original"]["fastpath"], t["directions"]["original"]["slowpath"]) == (1001, 2)


def test_ip6ip6_over_pppoe_source_mac_is_the_tunnel_address():
    """nft_dev_path_info copies the first device's dev_addr into h_source: for a tunnel over PPPoE that is the
    tunnel's local address, so the BRAS finds no session for the frames (kernel behaviour of nft_dev_path_info in
    net/netfilter/nf_flow_table_path.c)."""
    _sim, r = run("ip6ip6-over-pppoe.toml", "linux-7.1.5")
    (ft,) = r["flowtables"]
    (flow,) = ft["flows"]
    assert flow["reply"]["h_source"] == "20:01:0d:b8:00:ff"
    assert r["drops"] == {"pppoe-no-session": flow["reply"]["packets"]}


def test_encaplimit_70_pushes_destination_option_and_reduces_mtu():
    """7.0 pushes the 8-byte encap-limit option (nf_flow_tunnel_ip6ip6_push), so its MTU check subtracts 48
    (nf_flow_ip6_tunnel_proto's header size, used by nf_flow_exceeds_mtu)."""
    _sim, r = run("ip6ip6-rx-encaplimit.toml", "linux-7.0")
    assert (r["flowtables"][0]["fastpath"], r["flowtables"][0]["slowpath"]) == (2001, 5)  # both traffic tables
    frames = []
    sim2 = Simulation(load_topology(TOPO / "ip6ip6-rx-encaplimit.toml"), get_profile("linux-7.0"))
    sim2.kernel.capture = lambda netns, dev, frame: frames.append((netns, dev, frame))
    sim2.run()
    from scapy.layers.inet6 import IPv6ExtHdrDestOpt
    from scapy.layers.l2 import Ether
    out = [Ether(f) for n, d, f in frames if (n, d) == ("remote", "eth0")]
    # every frame towards the remote end (fast path pushes and the slow path's ip6tnl alike) carries the option
    assert len(out) == 2006 and all(p["IPv6"].nh == 60 and p[IPv6ExtHdrDestOpt].nh == 41 for p in out)


def _mtu_specs(specs):
    return [attrs.evolve(s, size=1450, df=False) for s in specs if s.name == "tcp-12345"]


def test_mtu_exceeded_goes_to_slow_path_which_fragments():
    """Packets over the flow MTU leave the fast path (nf_flow_exceeds_mtu: mtu-exceeded) and the slow path fragments
    them: all 200 data packets of 1450 bytes against the 1400-byte MTU."""
    text = (TOPO / "selftest.toml").read_text().replace("ip link set veth1 mtu 1500", "ip link set veth1 mtu 1400")
    sim, r = run("selftest.toml", "linux-7.1.5", text=text, specs=_mtu_specs)
    (ft,) = r["flowtables"]
    assert ft["reasons"] == {"mtu-exceeded": 200, "no-flow-entry": 3}
    (t,) = r["traffic"]
    assert t["directions"]["original"]["delivered"] == t["directions"]["original"]["sent"]


def test_ttl_one_goes_to_slow_path_and_icmp():
    """TTL 1 at the router: slow path (nf_flow_offload_ip_hook's ttl check: ttl-expired) and ip_forward drops it
    with an ICMP time exceeded back (ttl-exceeded-forward), for each of the 5 packets."""
    def specs(ss):
        return [attrs.evolve(s, ttl=1, handshake=False, close=None, proto="udp", reply_packets=0, packets=5)
                for s in ss if s.name == "tcp-12345"]
    _sim, r = run("selftest.toml", "linux-7.1.5", specs=specs)
    assert r["drops"] == {"ttl-exceeded-forward": 5}
    assert r["flowtables"][0]["reasons"] == {"ttl-expired": 5}


@pytest.mark.parametrize("profile,state,reason", [("linux-7.1.5", "closing", None),
                                                  ("linux-6.12", None, "tcp-fin-rst")])
def test_fin_closing_or_teardown(profile, state, reason):
    """FIN keeps the flow CLOSING in the fast path from 6.14; before, it tears the flow down (nf_flow_state_check):
    one FIN per direction on each of the 2 flows' traffic."""
    _sim, r = run("selftest.toml", profile)
    (ft,) = r["flowtables"]
    if state:
        assert {f["state"] for f in ft["flows"]} == {state}
    else:
        assert ft["reasons"][reason] == 2


def test_idle_flow_removed_by_gc_and_recreated():
    """An idle UDP flow is torn down after the 30 s offload timeout (nf_flow_offload_gc_step in nf_flow_table_core.c,
    at the first gc pass after it expires) and re-created by the next packets."""
    def specs(ss):
        base = next(s for s in ss if s.name == "udp-tx-into-tunnel")
        return [base, attrs.evolve(base, name="udp-again", start=40.0)]
    sim, r = run("ip6ip6-rx.toml", "linux-7.1.5", specs=specs, duration=45.0)
    ft = sim.kernel.netns["router"].flowtables["ft"]
    assert [(round(e[0], 3), e[1]) for e in ft.history] == [(0.0, "add"), (31.0, "teardown"), (31.0, "free"),
                                                            (40.0, "add")]


def _frames(topology, profile, flowtables, dev):
    frames = collections.defaultdict(list)
    sim = Simulation(load_topology(TOPO / topology), get_profile(profile), flowtables=flowtables)
    sim.kernel.capture = lambda netns, d, frame: frames[(netns, d)].append(frame)
    sim.run()
    return frames[dev]


@pytest.mark.parametrize("topology,profile,dev", [
    ("selftest.toml", "linux-7.1.5", ("ns2", "eth0")),
    ("selftest-nat.toml", "linux-7.1.5", ("ns2", "eth0")),
    ("bridge-vlan.toml", "linux-7.1.5", ("ns1", "eth0")),
    ("pppoe-over-vlan.toml", "linux-7.1.5", ("bras", "eth0")),
    ("ip6ip6-rx.toml", "linux-7.1.5", ("client", "eth0")),
])
def test_fast_path_bytes_equal_slow_path_bytes(topology, profile, dev):
    """Every frame a host receives is byte for byte what the slow path would have sent (and passes scapy)."""
    slow = _frames(topology, profile, False, dev)
    fast = _frames(topology, profile, True, dev)
    assert slow and sorted(slow) == sorted(fast)


def test_ipip_outer_header_differs_only_where_documented():
    """Tunnel push vs the tunnel drivers: same bytes except, for IPIP, the outer IP ID (and so its checksum) and,
    for IP6IP6, the outer flow label and hop limit — the push copies the inner hop limit instead of the
    tunnel's (nf_flow_tunnel_ipip_push / nf_flow_tunnel_ip6ip6_push do not use the tunnel device's parameters)."""
    slow = _frames("ipip.toml", "linux-7.1.5", False, ("nsr2", "veth0"))
    fast = _frames("ipip.toml", "linux-7.1.5", True, ("nsr2", "veth0"))
    def masked(f):
        b = bytearray(f)
        if b[12:14] == b"\x08\x00" and b[14 + 9] == 4:
            b[14 + 4:14 + 6] = b"\0\0"  # IP ID
            b[14 + 10:14 + 12] = b"\0\0"  # header checksum
        if b[12:14] == b"\x86\xdd" and b[14 + 6] == 41:
            b[14 + 1:14 + 4] = bytes([b[15] & 0xF0, 0, 0])  # flow label
            b[14 + 7] = 0  # hop limit
        return bytes(b)
    assert sorted(map(masked, slow)) == sorted(map(masked, fast))


# --- GSO traffic (TSO at the endpoints): the MTU check's GSO clause (nf_flow_exceeds_mtu) and software
# segmentation (nf_flow_encap_gso_xmit)

def _gso(name, gso_size, size=None, reply_size=None, packets=40):
    """Only traffic *name*, its data sent as GSO skbs of *size* / *reply_size* bytes."""
    def specs(all_specs):
        return [attrs.evolve(s, gso_size=gso_size, size=size or s.size, reply_size=reply_size or s.reply_size,
                             packets=packets, reply_packets=min(s.reply_packets, packets))
                for s in all_specs if s.name == name]
    return specs


def _gso_frames(topology, profile, flowtables, dev, specs):
    frames = collections.defaultdict(list)
    sim = Simulation(load_topology(TOPO / topology), get_profile(profile), flowtables=flowtables)
    sim = Simulation(sim.topo, sim.profile, flowtables=flowtables, traffic=specs(sim.specs))
    sim.kernel.capture = lambda netns, d, frame: frames[(netns, d)].append(frame)
    sim.run()
    return frames[dev], build_report(sim)


@pytest.mark.parametrize("topology,profile,traffic,dev,largest,hook", [  # hook: (fastpath, slowpath) at the flowtable
    # upload into PPPoE: the fast path segments (needs_gso_segment), the slow path's ppp0 segments (no GSO features)
    ("pppoe-over-vlan.toml", "linux-7.1.5", _gso("tcp-download", 1400, size=20000), ("bras", "eth0"), 1466, (83, 3)),
    # ≤ 6.18: the fast path's neigh_xmit hands the GSO skb to ppp0, which segments it
    ("pppoe-over-vlan.toml", "linux-6.18", _gso("tcp-download", 1400, size=20000), ("bras", "eth0"), 1466, (83, 3)),
    # UDP_SEGMENT: __udp_gso_segment gives every segment its own UDP header
    ("pppoe-over-vlan.toml", "linux-7.1.5", _gso("udp-upload", 1000, size=12000), ("bras", "eth0"), 1054, (38, 2)),
    # out of the IP6IP6 tunnel: the GSO skb stays whole on the veth to the client, after decap in either path
    ("ip6ip6-rx.toml", "linux-7.1.5", _gso("tcp-rx-from-tunnel", 1380, size=30000), ("client", "eth0"), 30014, (83, 3)),
])
def test_gso_fast_path_bytes_equal_slow_path_bytes(topology, profile, traffic, dev, largest, hook):
    """GSO skbs take the fast path (their segments fit the flow MTU although the skb does not) and every frame the
    host receives is byte for byte what the slow path sends, segmented where no device could take the GSO skb."""
    slow, _ = _gso_frames(topology, profile, False, dev, traffic)
    fast, report = _gso_frames(topology, profile, True, dev, traffic)
    assert slow and sorted(slow) == sorted(fast)
    assert max(map(len, fast)) == largest
    ft = report["flowtables"][0]
    assert (ft["fastpath"], ft["slowpath"]) == hook and set(ft["reasons"]) == {"no-flow-entry"}  # no mtu-exceeded
    assert all(d["delivered"] == d["sent"] for d in report["traffic"][0]["directions"].values())


def test_gso_pppoe_without_the_fix_puts_frames_larger_than_the_mtu_on_the_wire():
    """6.19 pushes PPPoE onto the GSO skb itself (no needs_gso_segment): the BRAS receives PPPoE frames far
    beyond the 1492-byte session MTU — what the April-2026 fix's software segmentation prevents."""
    frames = {p: _gso_frames("pppoe-over-vlan.toml", p, True, ("bras", "eth0"),
                             _gso("tcp-download", 1400, size=20000))[0] for p in ("linux-6.19", "linux-7.1.5")}
    assert max(map(len, frames["linux-6.19"])) == 14 + 4 + 8 + 20000
    assert max(map(len, frames["linux-7.1.5"])) == 14 + 4 + 8 + 20 + 20 + 1400  # segments of gso_size 1400


def test_gso_segments_too_big_for_the_tunnel_go_slow_until_pmtu_lowers_them():
    """Into the tunnel with segments of the LAN MTU: mtu-exceeded, the slow path's ip6_forward refuses the GSO
    skb (skb_gso_validate_network_len) with Packet Too Big, the client lowers its MSS, the rest is fast."""
    _, report = _gso_frames("ip6ip6-rx.toml", "linux-7.1.5", True, ("server", "eth0"),
                            _gso("tcp-rx-from-tunnel", 1440, reply_size=20000))
    ft = report["flowtables"][0]
    reply = report["traffic"][0]["directions"]["reply"]
    assert ft["reasons"] == {"mtu-exceeded": 4, "no-flow-entry": 3}
    assert report["drops"] == {"pkt-too-big": 4}
    assert (reply["sent"], reply["fastpath"], reply["slowpath"], reply["dropped"]) == (42, 37, 5, 4)


# --- device down during a run (NETDEV_DOWN → nf_flow_table_cleanup in nf_flow_table_core.c)

DOWN_UP = '''
[[event]]
at = 0.0005
netns = "nsr1"
command = "ip link set veth1 down"

[[event]]
at = 0.001
netns = "nsr1"
command = "ip link set veth1 up"

# NETDEV_DOWN deleted the default routes through veth1 (fib_sync_down_dev, rt6_sync_down_dev): added again
[[event]]
at = 0.001
netns = "nsr1"
command = "ip route add default via 192.168.10.2"

[[event]]
at = 0.001
netns = "nsr1"
command = "ip -6 route add default via fee1:2::2"
'''


def test_device_down_tears_flows_down_and_traffic_recreates_them():
    """veth1 goes down mid-stream: every flow entering through it is torn down at once (not at the idle timeout),
    packets meet dev-down / no-route meanwhile, and once it is back up the next packets create the flows again
    and the fast path resumes; packet accounting adds up throughout."""
    text = (TOPO / "selftest.toml").read_text() + DOWN_UP
    sim, report = run("selftest.toml", "linux-7.1.5", text=text)
    ft = sim.kernel.netns["nsr1"].flowtables["f1"]
    teardowns = [(t, why) for t, event, _id, why in ft.history if event == "teardown"]
    assert len(teardowns) == 2 and all(t == pytest.approx(0.0005) and "down" in why for t, why in teardowns)
    assert sum(1 for e in ft.history if e[1] == "add") == 4  # two flows, created twice each
    assert report["drops"] == {"dev-down": 100, "no-route": 100}
    for t in report["traffic"]:
        for d in t["directions"].values():
            assert d["sent"] == d["delivered"] + d["dropped"]
        d = t["directions"]
        assert [(d[k]["sent"], d[k]["dropped"], d[k]["fastpath"], d[k]["slowpath"]) for k in ("original", "reply")] \
            == [(204, 50, 151, 53), (202, 50, 150, 2)]
    late = [(f["original"]["packets"], f["reply"]["packets"]) for f in report["flowtables"][0]["flows"]
            if f["created"] == pytest.approx(0.001)]
    assert late == [(115, 122), (115, 122)]
