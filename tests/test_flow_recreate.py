"""A flow is re-created at once after a teardown that leaves the connection established.

``flow_offload_add`` (nf_flow_table_core.c) inserts both tuples with ``rhashtable_insert_fast``, which checks
no duplicate key: the new flow goes in at the head of its bucket, before the torn-down one that waits for the
GC; ``flow_offload_lookup`` (``rhashtable_lookup``) finds the head; ``nf_flow_offload_gc_step`` →
``flow_offload_del`` → ``rhashtable_remove_fast`` unlinks the old entry alone.  So after ``nf_flow_dst_check``
fails (a route change) the connection loses the one packet that found the stale flow, and the slow path's
``flow add`` (``nft_flow_offload_eval``) makes it fast again at once, on every profile.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest
from ftkit import add_flow, established_ct, setup
from scapy.layers.inet import IP, TCP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Ether

from flowsim.config.topology import load_topology_text
from flowsim.kernel.conntrack import IPS_OFFLOAD
from flowsim.kernel.fib import Route
from flowsim.kernel.flowtable.core import NF_FLOW_TEARDOWN
from flowsim.kernel.flowtable.fastpath import nf_flow_offload_hook
from flowsim.kernel.skb import skb_from_frame
from flowsim.profiles import PROFILES
from flowsim.sim.report import build_report
from flowsim.sim.simulation import Simulation

MAC = dict(src="02:00:00:00:00:aa", dst="02:00:00:00:00:bb")
SELFTEST = (Path(__file__).resolve().parent.parent / "topologies" / "selftest.toml").read_text()
FAMILIES = {4: ("10.0.1.99", "10.0.2.99", "ip route add 10.9.0.0/16 via 192.168.10.2"),
            6: ("dead:1::99", "dead:2::99", "ip -6 route add dead:2::/64 via fee1:2::2")}


def hook(kernel, state, dev: str, frame: bytes) -> str:
    skb = skb_from_frame(frame, iif=state.ns.devices[dev].ifindex)
    return nf_flow_offload_hook(kernel, state, state.flowtables["f1"], skb, state.ns.devices[dev])


def packet(family: int) -> bytes:
    src, dst, _ = FAMILIES[family]
    l3 = IP(src=src, dst=dst) if family == 4 else IPv6(src=src, dst=dst)
    return bytes(Ether(**MAC) / l3 / TCP(sport=40000, dport=12345, flags="A") / (b"x" * 100))


@pytest.mark.parametrize("family", [4, 6])
def test_the_flow_of_a_stale_route_is_replaced_at_once_and_the_gc_frees_the_old_one(family):
    """nf_flow_dst_check fails → teardown; flow add inserts the new flow before the old (rhashtable_insert_fast);
    the next packet is fast; nf_flow_offload_gc_step frees the old entry alone (rhashtable_remove_fast)."""
    src, dst, command = FAMILIES[family]
    kernel, state = setup("selftest.toml", "nsr1", "linux-7.1.5")
    ft = state.flowtables["f1"]
    ct = established_ct(state, src, dst, 40000, 12345)
    assert add_flow(kernel, state, "f1", ct, 0, "veth0")
    (old,) = ft.flows.values()
    words = command.split()  # `ip route add PREFIX via GATEWAY`, as the FIB takes it
    state.ns.fib.add(Route(ipaddress.ip_network(words[-3]), dev="veth1", gateway=ipaddress.ip_address(words[-1])))
    assert hook(kernel, state, "veth0", packet(family)) == "accept"  # the one packet on the slow path
    assert old.test(NF_FLOW_TEARDOWN) and not ct.status & IPS_OFFLOAD and ft.reasons == {"route-stale": 1}
    assert add_flow(kernel, state, "f1", ct, 0, "veth0")  # the same packet's flow add, on the slow path
    new = ft.flows[2]
    assert tuple(ft.table[h.key] for h in old.tuplehash) == new.tuplehash
    assert [ft.shadowed[h.key] for h in old.tuplehash] == [[old.tuplehash[0]], [old.tuplehash[1]]]
    assert hook(kernel, state, "veth0", packet(family)) == "stolen"
    ft.nf_flow_offload_work_gc(kernel, state)
    assert list(ft.flows.values()) == [new] and not ft.shadowed and ft.flows_removed == 1
    assert tuple(ft.table[h.key] for h in new.tuplehash) == new.tuplehash
    assert hook(kernel, state, "veth0", packet(family)) == "stolen"
    assert (ft.fastpath, ft.slowpath, ft.flows_created) == (2, 1, 2)


def scenario(family: int, events: list[tuple[float, str]]) -> str:
    """The selftest's TCP transfer at 1000 packets per second each way, with events in nsr1 mid-stream."""
    _, dst, _ = FAMILIES[family]
    text = SELFTEST.split("[[traffic]]")[0] + f'''
[[traffic]]
name = "t"
proto = "tcp"
from = "ns1"
to = "{dst}"
dport = 12345
packets = 200
size = 1000
reply_packets = 200
rate = 1000
'''
    return text + "".join(f'\n[[event]]\nat = {at}\nnetns = "nsr1"\ncommand = "{cmd}"\n' for at, cmd in events)


def flowtable(family: int, events, profile: str) -> dict:
    sim = Simulation(load_topology_text(scenario(family, events), "recreate.toml"), profile).run()
    (ft,) = [f for f in build_report(sim)["flowtables"] if f["netns"] == "nsr1"]
    return ft


# profiles up to 6.12 tear the flow down at the FIN (tcp_fin_rst = teardown): three more slow-path packets at
# the close, the same with or without the event
CLOSE = {p: (3, {"flow-teardown": 2, "tcp-fin-rst": 1}) for p in ("linux-6.1", "linux-6.12")}


@pytest.mark.parametrize("profile", list(PROFILES))
@pytest.mark.parametrize("family", [4, 6])
def test_a_route_change_mid_stream_costs_one_slow_packet(family, profile):
    """A route change at 0.1 s (rt_cache_flush / fib6 serials up to the root): nf_flow_dst_check fails for one
    packet (route-stale), flow_offload_add re-creates the flow at once: 402 fast packets where no event gives 403."""
    extra, close = CLOSE.get(profile, (0, {}))
    base = flowtable(family, [], profile)
    ft = flowtable(family, [(0.1, FAMILIES[family][2])], profile)
    assert (base["fastpath"], base["slowpath"], base["flows_created"]) == (403 - extra, 3 + extra, 1)
    assert (ft["fastpath"], ft["slowpath"], ft["flows_created"]) == (402 - extra, 4 + extra, 2)
    assert ft["reasons"] == {"no-flow-entry": 3, "route-stale": 1, **close}
    assert "flow-add-insert-clash" not in ft["flow_add_failures"]


@pytest.mark.parametrize("family", [4, 6])
def test_a_route_change_of_the_other_family_leaves_the_flow_alone(family):
    """rt_genid is IPv4's alone and fib6 serials IPv6's alone: the other family's route add tears nothing down."""
    other = FAMILIES[10 - family][2]
    ft = flowtable(family, [(0.1, other)], "linux-7.1.5")
    assert (ft["fastpath"], ft["slowpath"], ft["flows_created"], ft["reasons"]) == (403, 3, 1, {"no-flow-entry": 3})


@pytest.mark.parametrize("family", [4, 6])
def test_a_device_down_and_up_mid_stream_costs_one_slow_packet_each_way(family):
    """veth1 down then up 0.5 ms later, and the default route through it added again (NETDEV_DOWN deleted it:
    fib_sync_down_dev / rt6_sync_down_dev, as nft_flowtable.sh re-adds its own): nf_flow_table_cleanup frees the
    flow; the first packet of each direction after it is slow (no-flow-entry) and the original one's flow add
    re-creates the flow."""
    readd = "ip route add default via 192.168.10.2" if family == 4 else "ip -6 route add default via fee1:2::2"
    ft = flowtable(family, [(0.1, "ip link set veth1 down"), (0.1005, "ip link set veth1 up"), (0.1005, readd)],
                   "linux-7.1.5")
    assert (ft["fastpath"], ft["slowpath"], ft["flows_created"], ft["reasons"]) == (400, 5, 2, {"no-flow-entry": 5})
