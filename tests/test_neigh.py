"""Neighbour tables: NUD states, ip neigh, discovery across L2 segments (net/core/neighbour.c)."""

from __future__ import annotations

import ipaddress

import pytest

from flowsim.config.topology import load_topology_text
from flowsim.errors import TopologyError
from flowsim.kernel.neigh import NUD_VALID, NeighEntry, NeighTable, NudState

ip = ipaddress.ip_address

PAIR = """
[netns.a]
commands = '''
ip link add e0 type veth peer name e0 netns b
ip link set e0 up
ip addr add 10.0.0.1/24 dev e0
ip addr add 2001:db8::1/64 dev e0 nodad
{extra}
'''

[netns.b]
commands = '''
ip link set e0 up
ip addr add 10.0.0.2/24 dev e0
ip addr add 10.7.0.2/24 dev e0
ip addr add 2001:db8::2/64 dev e0 nodad
'''
"""


def pair(extra: str = ""):
    return load_topology_text(PAIR.format(extra=extra), "neigh.toml")


@pytest.mark.parametrize("state,valid", [(s, bool(s & NUD_VALID)) for s in NudState])
def test_nud_valid_set(state, valid):
    """NUD_VALID = PERMANENT|NOARP|REACHABLE|PROBE|STALE|DELAY."""
    assert NeighEntry(ip("10.0.0.1"), "e0", "02:00:00:00:00:01", state).valid is valid
    assert valid is (state in (NudState.PERMANENT, NudState.NOARP, NudState.REACHABLE, NudState.PROBE,
                               NudState.STALE, NudState.DELAY))


def test_veth_peer_addresses_are_discovered_in_subnet_only():
    """Both families of the peer's addresses in our subnets resolve as reachable; others do not."""
    topo = pair()
    n = topo.netns("a").neigh
    mac = topo.device("b", "e0").mac
    assert n.lookup("e0", ip("10.0.0.2")).lladdr == mac and n.lookup("e0", ip("10.0.0.2")).state == NudState.REACHABLE
    assert n.lookup("e0", ip("2001:db8::2")).origin == "discovered"
    assert n.lookup("e0", ip("10.7.0.2")) is None


@pytest.mark.parametrize("command,state,lladdr", [
    ("ip neigh add 10.0.0.2 lladdr 02:00:00:00:00:99 dev e0", NudState.PERMANENT, "02:00:00:00:00:99"),
    ("ip neigh add 10.0.0.2 lladdr 02:00:00:00:00:99 dev e0 nud stale", NudState.STALE, "02:00:00:00:00:99"),
    ("ip neigh add 10.0.0.2 dev e0 nud incomplete", NudState.INCOMPLETE, None),
    ("ip neigh add 10.0.0.2 dev e0 nud failed", NudState.FAILED, None),
])
def test_explicit_entries_win_over_discovery(command, state, lladdr):
    """`ip neigh add` (default nud permanent) models unresolved neighbours; discovery never overwrites it."""
    entry = pair(command).netns("a").neigh.lookup("e0", ip("10.0.0.2"))
    assert entry.state == state and entry.lladdr == lladdr and entry.origin == "static"


@pytest.mark.parametrize("command,message", [
    ("ip neigh add 10.0.0.2 dev e0", "needs a link-layer address"),
    ("ip neigh add 10.0.0.9 lladdr 02:00:00:00:00:99 dev e0\nip neigh add 10.0.0.9 lladdr 02:00:00:00:00:98 dev e0",
     "exists"),
    ("ip neigh add 10.0.0.2 lladdr zz dev e0", "bad MAC"),
    ("ip neigh add 10.0.0.2 lladdr 02:-1:00:00:00:99 dev e0", "bad MAC"),  # int() takes "-1": a crash, once
    ("ip neigh add 10.0.0.2 lladdr 02:+f:00:00:00:99 dev e0", "bad MAC"),
    ("ip neigh add 10.0.0.2 lladdr 02:00:00:00:00:99 dev e0 nud bogus", "bad value"),
    ("ip neigh del 10.0.0.77 dev e0", "no neighbour"),
])
def test_neigh_errors(command, message):
    """Valid states need lladdr; duplicates, bad MACs and unknown states are refused."""
    with pytest.raises(TopologyError, match=message):
        pair(command)


def test_table_api_for_the_slow_path():
    """neigh_update resolves an entry in place; flush_dev drops a device's entries."""
    t = NeighTable()
    t.add(NeighEntry(ip("10.0.0.2"), "e0", None, NudState.INCOMPLETE, router=True))
    e = t.update("e0", ip("10.0.0.2"), "02:00:00:00:00:02", NudState.REACHABLE)
    assert e.valid and e.router and len(t) == 1
    t.flush_dev("e0")
    assert t.lookup("e0", ip("10.0.0.2")) is None
