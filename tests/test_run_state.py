"""A loaded topology is a description; every run instantiates it (flowsim.config.network, Kernel.topo).

So one load runs many times, under any profile, with the same results, and
the runs' changes — ``[[event]]`` lines, neighbours the fast path creates,
sysctls a sweep sets — stay in each run's own copy.
"""

from __future__ import annotations

import json
from pathlib import Path

import attrs
import networkx as nx
import pytest

from flowsim.config import iproute
from flowsim.config.network import FrozenTopologyError
from flowsim.config.topology import load_topology, load_topology_text
from flowsim.kernel.devices.base import Command
from flowsim.kernel.fib import Route
from flowsim.kernel.neigh import NeighEntry, NudState
from flowsim.sim.report import build_report
from flowsim.sim.simulation import Simulation

TOPOLOGIES = Path(__file__).resolve().parent.parent / "topologies"

# selftest with run events: the next hop's neighbour goes (the fast path creates it again, NUD_NONE),
# the egress MTU shrinks, the link goes down and comes back
EVENTS = (TOPOLOGIES / "selftest.toml").read_text() + '''
[[event]]
at = 0.0003
netns = "nsr1"
command = "ip neigh del 192.168.10.2 dev veth1"

[[event]]
at = 0.0006
netns = "nsr1"
command = "ip link set veth1 mtu 1400"

[[event]]
at = 0.0010
netns = "nsr2"
command = "ip link set veth0 down"

[[event]]
at = 0.0015
netns = "nsr2"
command = "ip link set veth0 up"
'''


def load(name: str):
    return load_topology_text(EVENTS, "selftest-events.toml") if name == "events" else load_topology(TOPOLOGIES / name)


def state(obj) -> str:
    """The fields of a device or xfrm database, slotted attrs class or not."""
    if attrs.has(type(obj)):
        return repr([(a.name, getattr(obj, a.name)) for a in attrs.fields(type(obj))])
    return repr(sorted(vars(obj).items()))


def snapshot(topo) -> dict:
    """Everything a run could change in a topology, as comparable values."""
    out: dict = {"edges": sorted(map(repr, topo.graph.edges(keys=True)))}
    for name, ns in topo.namespaces.items():
        out[name] = {
            "devices": {d: state(dev) for d, dev in ns.devices.items()},
            "by_index": sorted(ns.by_index),
            "routes": [str(r) for r in ns.fib.static], "genid": ns.fib.genid,
            "neigh": sorted(map(repr, ns.neigh)), "neigh_version": ns.neigh.version,
            "sysctls": dict(ns.sysctls), "xfrm": state(ns.xfrm) if ns.xfrm is not None else None,
        }
    return out


def report(topo, profile: str) -> str:
    return json.dumps(build_report(Simulation(topo, profile).run()), sort_keys=True)


def test_events_topology_makes_the_fast_path_create_a_neighbour():
    """The scenario below really exercises the run-time changes (else the other tests prove little)."""
    topo = load("events")
    sim = Simulation(topo).run()
    created = [e for e in sim.topo.netns("nsr1").neigh if e.origin == "created"]
    assert created and created[0].state == NudState.NONE
    assert sim.topo.device("nsr1", "veth1").mtu == 1400 and len(sim.events_run) == 4
    assert sim.topo is sim.kernel.topo and sim.topo is not topo


@pytest.mark.parametrize("name", ["events", "selftest.toml", "ipsec-tunnel.toml", "dsa.toml", "bridge-vlan.toml"])
def test_a_run_leaves_the_description_unchanged(name):
    topo = load(name)
    before = snapshot(topo)
    Simulation(topo).run()
    assert snapshot(topo) == before


@pytest.mark.parametrize("name", ["events", "selftest.toml", "ipsec-tunnel.toml", "dsa.toml", "ip6ip6-over-vlan.toml"])
def test_one_load_runs_alike_twice_and_under_alternating_profiles(name):
    """A, B, A, B on one loaded topology: each report equals a fresh load's under the same profile."""
    a, b = "linux-7.1.5", "linux-6.12"
    fresh = {p: report(load(name), p) for p in (a, b)}
    topo = load(name)
    assert [report(topo, p) for p in (a, b, a, b)] == [fresh[a], fresh[b], fresh[a], fresh[b]]


def test_a_description_refuses_changes():
    """Frozen graph, FIB, neighbour table, sysctls, building methods and the command interpreter."""
    topo = load("selftest.toml")
    ns = topo.netns("nsr1")
    dev = topo.device("nsr1", "veth1")
    with pytest.raises(FrozenTopologyError):
        iproute.run(topo, Command("ip link set veth1 down", "nsr1", "t", 1))
    with pytest.raises(FrozenTopologyError):
        topo.discover()
    with pytest.raises(nx.NetworkXError):
        topo.graph.add_edge(("nsr1", "veth0"), ("nsr1", "veth1"), key="peer")
    with pytest.raises(TypeError):
        ns.fib.add(Route(dev.addrs[0].prefix, dev="veth1"))
    with pytest.raises(TypeError):
        ns.neigh.add(NeighEntry(dev.addrs[0].ip, "veth1", None, NudState.NONE))
    with pytest.raises(TypeError):
        ns.sysctls["net.ipv4.ip_forward"] = "0"
    assert dev.up


def test_instantiate_is_a_live_independent_copy():
    """The copy takes every change; the description and other copies do not see it."""
    topo = load("selftest.toml")
    one, two = topo.instantiate(), topo.instantiate()
    iproute.run(one, Command("ip route add 10.9.0.0/16 via 192.168.10.2", "nsr1", "t", 1))
    iproute.run(one, Command("ip link set veth0 down", "nsr1", "t", 2))   # no static route through veth0
    one.netns("nsr1").sysctls["net.ipv4.ip_forward"] = "0"
    assert not one.device("nsr1", "veth0").up and topo.device("nsr1", "veth0").up and two.device("nsr1", "veth0").up
    assert len(one.netns("nsr1").fib.static) == len(topo.netns("nsr1").fib.static) + 1
    assert "net.ipv4.ip_forward" not in topo.netns("nsr1").sysctls
    assert one.peer(one.device("nsr1", "veth1")) is one.device("nsr2", "veth0")  # the graph holds the copies
    assert one.traffic is topo.traffic and one.live() is one and not one.frozen


@pytest.mark.parametrize("name", ["bridge-vlan.toml", "dsa.toml", "pppoe-over-vlan.toml"])
def test_instances_keep_the_graph_order(name):
    """uppers() and peers are found in adjacency order: an instance keeps every in- and out-edge order."""
    topo = load(name)
    live = topo.instantiate()
    for node in topo.graph:
        assert list(live.graph.in_edges(node, keys=True)) == list(topo.graph.in_edges(node, keys=True))
        assert list(live.graph.out_edges(node, keys=True)) == list(topo.graph.out_edges(node, keys=True))
