"""A path MTU a host learns stays with the route (the IPv4 nexthop exception, ``update_or_create_fnhe``; IPv6's
RTF_CACHE clone, ``rt6_insert_exception``) for ``mtu_expires`` seconds: a later connection to the same address
starts with it.  What its SYN advertises is version-dependent (profile switch ``advmss_mtu``):
``ipv4_default_advmss`` reads the path MTU in Debian's 6.1.192 and 6.12.118 (``ipv4_mtu``), the configured MTU
in 6.12.117 and 7.2.13 (``ip_dst_mtu_configured``) — and the peer clamps its segments to it (``tcp_sync_mss``)."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest

from flowsim.config.topology import load_topology_text
from flowsim.profiles import get_profile
from flowsim.sim.simulation import Simulation

TOPO = (Path(__file__).resolve().parent.parent / "topologies" / "conform-mtu.toml").read_text()
TOPO = TOPO[:TOPO.index("[[traffic]]")].replace("ip link set eth0 mtu 1500", "ip link set eth0 mtu 9000")
TABLE = '''
[[traffic]]
name = "{name}"
proto = "tcp"
acks = "linux"
from = "ns1"
to = "198.51.100.2"
dport = {port}
start = {start}
packets = 4
size = 2000
reply_packets = 4
reply_size = 2000
'''


def _run(profile: str) -> Simulation:
    text = TOPO + TABLE.format(name="first", port=5201, start=0) + TABLE.format(name="second", port=5202, start=5)
    return Simulation(load_topology_text(text, file="pmtu.toml"), get_profile(profile)).run()


@pytest.mark.parametrize("profile, advertised, reply_len", [("linux-6.1", 1460, 1500), ("linux-6.12", 1460, 1500),
                                                             ("linux-7.2", 8960, 2000)])
def test_a_learned_path_mtu_outlives_its_connection(profile, advertised, reply_len):
    sim = _run(profile)
    server_addr = ipaddress.ip_address("198.51.100.2")
    assert sim.kernel.netns["ns1"].pmtu_exceptions[server_addr][0] == 1500
    first, second = (next(c for c in sim.conversations if c.spec.name == n) for n in ("first", "second"))
    # the first connection met the router's Fragmentation Needed; the second started at 1500 and met none
    assert first.client.icmp_errors and set(first.client.icmp_errors) == {(3, 4, 1500)}
    assert second.client.icmp_errors == []
    assert second.client.pmtu == 1500
    # what the second SYN advertised, as the server parsed it (tp->rx_opt.mss_clamp), and what the server sends
    assert second.server.mss_clamp == advertised
    assert second.server._l3_size(2000) == reply_len


def test_the_exception_expires():
    """ip_rt_mtu_expires: past net.ipv4.route.mtu_expires seconds the route's own MTU is back."""
    sim = _run("linux-7.2")
    st = sim.kernel.netns["ns1"]
    addr = ipaddress.ip_address("198.51.100.2")
    assert st.pmtu_exception(addr, 100.0) == 1500
    assert st.pmtu_exception(addr, 601.0) is None and addr not in st.pmtu_exceptions


def test_sequential_tables_start_after_the_one_before_delivered():
    """Simulation(sequential=True), the conformance guest's socat mode: each table starts once every byte of the
    one before it arrived both ways (the guest's wait_bytes), after its own ``start`` as a pause — so the second
    connection meets the path MTU the first one's host learned, in any order of the file's starts."""
    text = TOPO + TABLE.format(name="first", port=5201, start=0) + TABLE.format(name="second", port=5202, start=0)
    topo = load_topology_text(text, file="pmtu.toml")
    from flowsim.sim.traffic import TrafficSpec
    specs = [TrafficSpec.from_topology(t, i) for i, t in enumerate(topo.traffic)]
    sim = Simulation(topo, get_profile("linux-6.1"), traffic=specs, sequential=True)
    syns = {}  # destination port -> when the client's SYN left

    def tap(ns, dev, frame, skb, out):
        if (ns, dev, out) == ("ns1", "eth0", True) and frame[14 + 20 + 13] == 0x02:
            syns.setdefault(int.from_bytes(frame[14 + 22:14 + 24], "big"), sim.kernel.now)
    sim.kernel.packet_tap = tap
    sim.run()
    first, second = sim.conversations
    assert first.delivered() and second.delivered()
    assert syns[5201] == 0.0 and syns[5202] > 0.0
    assert second.client.icmp_errors == [] and second.server.mss_clamp == 1460  # the learned 1500, advertised
    # concurrently (the file's own starts) the second connection learns it itself
    concurrent = Simulation(topo, get_profile("linux-6.1")).run()
    assert concurrent.conversations[1].client.icmp_errors
