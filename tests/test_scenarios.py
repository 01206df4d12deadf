"""Issue 5's scenarios end to end: which directions the fast path takes, per kernel profile (reference §3-§9)."""

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
FAST, SLOW = "fast", "slow"


def run(topology, profile, text=None, specs=None, duration=None, **switches):
    topo = load_topology_text(text, str(TOPO / topology)) if text else load_topology(TOPO / topology)
    sim = Simulation(topo, get_profile(profile).derive(**switches))
    if specs is not None:
        sim = Simulation(topo, get_profile(profile).derive(**switches), traffic=specs(sim.specs))
    sim.run(duration)
    return sim, build_report(sim)


def verdict(direction: dict) -> str:
    """Fast when at least 90% of the packets took the fast path (the rest: handshake, and packets before a
    reply-created flow existed), slow when none did."""
    if direction["fastpath"] == 0:
        return SLOW
    assert direction["fastpath"] >= 0.9 * direction["sent"], direction
    return FAST


# topology, profile, traffic, (original, reply) — "original" is the traffic table's sender
TABLE = [
    # the cover letter: TCP stream received from the tunnel (server → client); the reply direction goes in
    ("ip6ip6-rx.toml", "linux-7.1.5", "tcp-rx-from-tunnel", (FAST, FAST)),
    ("ip6ip6-rx.toml", "linux-7.0", "tcp-rx-from-tunnel", (FAST, FAST)),
    ("ip6ip6-rx.toml", "linux-6.19", "tcp-rx-from-tunnel", (SLOW, FAST)),
    ("ip6ip6-rx.toml", "linux-6.18", "tcp-rx-from-tunnel", (SLOW, FAST)),
    ("ip6ip6-rx-encaplimit.toml", "linux-7.0", "tcp-rx-from-tunnel", (FAST, FAST)),
    ("ip6ip6-rx-encaplimit.toml", "linux-7.1.5", "tcp-rx-from-tunnel", (SLOW, SLOW)),
    ("ipip.toml", "linux-6.19", "tcp-12345", (FAST, FAST)),
    ("ipip.toml", "linux-6.18", "tcp-12345", (FAST, SLOW)),
    ("ipip.toml", "linux-6.19", "tcp6-12345", (FAST, SLOW)),
    ("ipip.toml", "linux-7.0", "tcp6-12345", (FAST, FAST)),
    ("ipip-over-vlan.toml", "linux-7.1.5", "tcp-12345", (FAST, FAST)),
    ("ip6ip6-over-vlan.toml", "linux-7.1.5", "tcp6-12345", (FAST, FAST)),
    ("ip6ip6-over-vlan.toml", "linux-6.19", "tcp6-12345", (FAST, SLOW)),
    ("bridge-vlan.toml", "linux-7.1.5", "tcp-dnat-1666", (FAST, FAST)),
    ("pppoe-over-vlan.toml", "linux-7.1.5", "tcp-download", (FAST, FAST)),
    ("pppoe-over-vlan.toml", "linux-6.18", "tcp-download", (FAST, FAST)),
    ("selftest.toml", "linux-7.1.5", "tcp-12345", (FAST, FAST)),
    ("selftest-nat.toml", "linux-7.1.5", "tcp-masquerade", (FAST, FAST)),
    ("selftest-nat.toml", "linux-6.12", "tcp-dnat-1666", (FAST, FAST)),
    # out of the tunnel through PPPoE: a lookup miss under 7.0 (offset bug) and 7.1.5 (empty tunnel fields)
    ("ip6ip6-over-pppoe.toml", "linux-7.0", "tcp-download", (SLOW, FAST)),
    ("ip6ip6-over-pppoe.toml", "linux-7.1.5", "tcp-download", (SLOW, FAST)),
]


@pytest.mark.parametrize("topology,profile,traffic,expected", TABLE,
                         ids=[f"{t[0]}-{t[1]}-{t[2]}" for t in TABLE])
def test_fast_path_per_direction(topology, profile, traffic, expected):
    """Each direction is accelerated exactly when the profile's kernel can resolve and match it."""
    _sim, r = run(topology, profile)
    (t,) = [x for x in r["traffic"] if x["name"] == traffic]
    assert (verdict(t["directions"]["original"]), verdict(t["directions"]["reply"])) == expected
    p = r["packets"]
    assert p["injected"] == p["delivered"] + p["dropped"] + p["in_flight"]


def test_618_tunnel_device_listed_accelerates_decapsulated_packets():
    """6.18 with tun0 in the flowtable: packets out of the tunnel hit the flow on tun0, after decapsulation."""
    text = (TOPO / "ip6ip6-rx.toml").read_text().replace("devices = { eth0, eth1 }", "devices = { eth0, eth1, tun0 }")
    _sim, r = run("ip6ip6-rx.toml", "linux-6.18", text=text)
    (t,) = [x for x in r["traffic"] if x["name"] == "tcp-rx-from-tunnel"]
    assert t["directions"]["original"]["fastpath"] >= 1000
    assert r["flowtables"][0]["reasons"]["l4proto-unsupported"] >= 1000  # at eth1 first: l4proto 41


def test_ip6ip6_over_pppoe_ci_fix_accelerates():
    """The CI tree's mapped ethertype fills the tunnel fields, so the decapsulated direction hits (§5.1)."""
    _sim, r = run("ip6ip6-over-pppoe.toml", "linux-7.1.5", tuple_encap_pppoe_proto="mapped")
    (t,) = r["traffic"]
    assert verdict(t["directions"]["original"]) == FAST


def test_ip6ip6_over_pppoe_source_mac_is_the_tunnel_address():
    """nft_dev_path_info copies the first device's dev_addr into h_source: for a tunnel over PPPoE that is the
    tunnel's local address, so the BRAS finds no session for the frames (kernel behaviour, reference §2.4)."""
    _sim, r = run("ip6ip6-over-pppoe.toml", "linux-7.1.5")
    (ft,) = r["flowtables"]
    (flow,) = ft["flows"]
    assert flow["reply"]["h_source"] == "20:01:0d:b8:00:ff"
    assert r["drops"] == {"pppoe-no-session": flow["reply"]["packets"]}


def test_encaplimit_70_pushes_destination_option_and_reduces_mtu():
    """7.0 pushes the 8-byte encap-limit option, so its MTU check subtracts 48 (§4.2, §5.3)."""
    sim, r = run("ip6ip6-rx-encaplimit.toml", "linux-7.0")
    (ft,) = sim.kernel.netns["router"].flowtables.values()
    frames = []
    sim2 = Simulation(load_topology(TOPO / "ip6ip6-rx-encaplimit.toml"), get_profile("linux-7.0"))
    sim2.kernel.capture = lambda netns, dev, frame: frames.append((netns, dev, frame))
    sim2.run()
    from scapy.layers.inet6 import IPv6ExtHdrDestOpt
    from scapy.layers.l2 import Ether
    out = [Ether(f) for n, d, f in frames if (n, d) == ("remote", "eth0")]
    assert out and all(p.haslayer(IPv6ExtHdrDestOpt) for p in out if p.haslayer("IPv6") and p["IPv6"].nh == 60)


def _mtu_specs(specs):
    return [attrs.evolve(s, size=1450, df=False) for s in specs if s.name == "tcp-12345"]


def test_mtu_exceeded_goes_to_slow_path_which_fragments():
    """Packets over the flow MTU leave the fast path (mtu-exceeded) and the slow path fragments them (§4.1 step 4)."""
    text = (TOPO / "selftest.toml").read_text().replace("ip link set veth1 mtu 1500", "ip link set veth1 mtu 1400")
    sim, r = run("selftest.toml", "linux-7.1.5", text=text, specs=_mtu_specs)
    (ft,) = r["flowtables"]
    assert ft["reasons"].get("mtu-exceeded", 0) > 100
    (t,) = r["traffic"]
    assert t["directions"]["original"]["delivered"] == t["directions"]["original"]["sent"]


def test_ttl_one_goes_to_slow_path_and_icmp():
    """TTL 1 at the router: slow path (ttl-expired) and an ICMP time exceeded back (§4.1 step 2)."""
    def specs(ss):
        return [attrs.evolve(s, ttl=1, handshake=False, close=None, proto="udp", reply_packets=0, packets=5)
                for s in ss if s.name == "tcp-12345"]
    _sim, r = run("selftest.toml", "linux-7.1.5", specs=specs)
    assert r["drops"].get("ttl-exceeded-forward") == 5 or sum(r["drops"].values()) == 5


@pytest.mark.parametrize("profile,state,reason", [("linux-7.1.5", "closing", None),
                                                  ("linux-6.12", None, "tcp-fin-rst")])
def test_fin_closing_or_teardown(profile, state, reason):
    """FIN keeps the flow CLOSING in the fast path from 6.14; before, it tears the flow down (§6)."""
    _sim, r = run("selftest.toml", profile)
    (ft,) = r["flowtables"]
    if state:
        assert {f["state"] for f in ft["flows"]} == {state}
    else:
        assert ft["reasons"].get(reason, 0) >= 2


def test_idle_flow_removed_by_gc_and_recreated():
    """An idle UDP flow is torn down after the 30 s offload timeout and re-created by the next packets (§6)."""
    def specs(ss):
        base = next(s for s in ss if s.name == "udp-tx-into-tunnel")
        return [base, attrs.evolve(base, name="udp-again", start=40.0)]
    sim, r = run("ip6ip6-rx.toml", "linux-7.1.5", specs=specs, duration=45.0)
    ft = sim.kernel.netns["router"].flowtables["ft"]
    events = [e[1] for e in ft.history]
    assert events.count("add") >= 2 and "teardown" in events and "free" in events


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
    tunnel's (§5.3: tunnel device parameters are not used)."""
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


# --- GSO traffic (TSO at the endpoints): the MTU check's GSO clause and software segmentation (§4.1 steps 4, 13)

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


@pytest.mark.parametrize("topology,profile,traffic,dev,largest", [
    # upload into PPPoE: the fast path segments (needs_gso_segment), the slow path's ppp0 segments (no GSO features)
    ("pppoe-over-vlan.toml", "linux-7.1.5", _gso("tcp-download", 1400, size=20000), ("bras", "eth0"), 1466),
    # ≤ 6.18: the fast path's neigh_xmit hands the GSO skb to ppp0, which segments it
    ("pppoe-over-vlan.toml", "linux-6.18", _gso("tcp-download", 1400, size=20000), ("bras", "eth0"), 1466),
    # UDP_SEGMENT: __udp_gso_segment gives every segment its own UDP header
    ("pppoe-over-vlan.toml", "linux-7.1.5", _gso("udp-upload", 1000, size=12000), ("bras", "eth0"), 1054),
    # out of the IP6IP6 tunnel: the GSO skb stays whole on the veth to the client, after decap in either path
    ("ip6ip6-rx.toml", "linux-7.1.5", _gso("tcp-rx-from-tunnel", 1380, size=30000), ("client", "eth0"), 30014),
])
def test_gso_fast_path_bytes_equal_slow_path_bytes(topology, profile, traffic, dev, largest):
    """GSO skbs take the fast path (their segments fit the flow MTU although the skb does not) and every frame the
    host receives is byte for byte what the slow path sends, segmented where no device could take the GSO skb."""
    slow, _ = _gso_frames(topology, profile, False, dev, traffic)
    fast, report = _gso_frames(topology, profile, True, dev, traffic)
    assert slow and sorted(slow) == sorted(fast)
    assert max(map(len, fast)) == largest
    ft = report["flowtables"][0]
    assert "mtu-exceeded" not in ft["reasons"] and ft["fastpath"] > 0
    assert all(d["delivered"] == d["sent"] for d in report["traffic"][0]["directions"].values())


def test_gso_pppoe_without_the_fix_puts_frames_larger_than_the_mtu_on_the_wire():
    """6.19 pushes PPPoE onto the GSO skb itself (no needs_gso_segment): the BRAS receives PPPoE frames far
    beyond the 1492-byte session MTU — what the April-2026 fix's software segmentation prevents."""
    frames = {p: _gso_frames("pppoe-over-vlan.toml", p, True, ("bras", "eth0"),
                             _gso("tcp-download", 1400, size=20000))[0] for p in ("linux-6.19", "linux-7.1.5")}
    assert max(map(len, frames["linux-6.19"])) == 14 + 4 + 8 + 20000
    assert max(map(len, frames["linux-7.1.5"])) <= 14 + 4 + 1500


def test_gso_segments_too_big_for_the_tunnel_go_slow_until_pmtu_lowers_them():
    """Into the tunnel with segments of the LAN MTU: mtu-exceeded, the slow path's ip6_forward refuses the GSO
    skb (skb_gso_validate_network_len) with Packet Too Big, the client lowers its MSS, the rest is fast."""
    _, report = _gso_frames("ip6ip6-rx.toml", "linux-7.1.5", True, ("server", "eth0"),
                            _gso("tcp-rx-from-tunnel", 1440, reply_size=20000))
    ft = report["flowtables"][0]
    reply = report["traffic"][0]["directions"]["reply"]
    assert ft["reasons"].get("mtu-exceeded", 0) >= 1
    assert report["packets"]["dropped"] >= 1 and reply["fastpath"] >= 0.8 * reply["sent"]


# --- device down during a run (§6: NETDEV_DOWN → nf_flow_table_cleanup)

DOWN_UP = '''
[[event]]
at = 0.0005
netns = "nsr1"
command = "ip link set veth1 down"

[[event]]
at = 0.001
netns = "nsr1"
command = "ip link set veth1 up"
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
    assert set(report["drops"]) == {"dev-down", "no-route"}
    for t in report["traffic"]:
        for d in t["directions"].values():
            assert d["sent"] == d["delivered"] + d["dropped"] and d["fastpath"] >= 0.7 * d["sent"]
    late = [f for f in report["flowtables"][0]["flows"] if f["created"] > 0.001]
    assert len(late) == 2 and all(f["original"]["packets"] > 0 and f["reply"]["packets"] > 0 for f in late)
