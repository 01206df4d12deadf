"""Route validity per family, as nf_flow_dst_check → dst_check sees it (flowsim.kernel.fib.Fib.dst_check).

IPv4 routes carry the namespace's ``rt_genid`` (``ipv4_dst_check`` → ``rt_is_expired``), bumped by
``rt_cache_flush``: by ``fib_table_insert`` always, by ``fib_table_delete`` and a replace only for a route a
lookup had returned (``FA_S_ACCESSED``), by ``fib_inetaddr_event`` and ``fib_netdev_event``.  IPv6 routes carry
their fib6 node's serial (``rt6_get_cookie`` → ``fib6_get_cookie_safe``, checked by ``ip6_dst_check``):
``fib6_add`` bumps the nodes from the new route up to the root (``fib6_update_sernum_upto_root``), a deleted
route leaves its node, and an address deleted flushes every tree (``__ipv6_ifa_notify`` →
``rt_genid_bump_ipv6`` → ``fib6_flush_trees``), as ``addrconf_ifdown`` does for a device going down.
Each event runs as a run's ``[[event]]`` does: ``iproute.run`` then ``Kernel.netdev_changes``.
"""

from __future__ import annotations

import ipaddress

import pytest

from flowsim.config import iproute
from flowsim.config.topology import load_topology_text
from flowsim.kernel.devices.base import Command
from flowsim.kernel.stack.core import Kernel
from tests.test_fib import BASE  # the two dummy devices and their addresses

SETUP = BASE + """ip route add default via 10.0.0.254
ip route add 192.0.2.0/24 via 10.1.0.254
ip route add 203.0.113.0/24 via 10.0.0.254
ip -6 route add default via 2001:db8::ff
ip -6 route add 2001:db8:5::/64 via 2001:db8:1::ff
"""

# the destinations of four flows: IPv4 through the default route and a /24, IPv6 through the root node (the
# default route) and a /64
FLOWS = {"v4-default": "198.51.100.1", "v4-specific": "192.0.2.1",
         "v6-default": "2001:db8:9::1", "v6-specific": "2001:db8:5::1"}

# (event, the flows whose route is still valid after it)
EVENTS = [
    ("ip route add 10.9.0.0/16 via 10.0.0.254", {"v6-default", "v6-specific"}),  # fib_table_insert
    ("ip route replace 192.0.2.0/24 via 10.1.0.253", {"v6-default", "v6-specific"}),  # replace of an accessed one
    ("ip route del 192.0.2.0/24", {"v6-default", "v6-specific"}),  # FA_S_ACCESSED: rt_cache_flush
    ("ip route del 203.0.113.0/24", set(FLOWS)),  # never looked up: no flush
    ("ip -6 route add 2001:db8:7::/64 via 2001:db8::ff", {"v4-default", "v4-specific", "v6-specific"}),  # disjoint
    ("ip -6 route add 2001:db8:5::/80 via 2001:db8:1::fe", {"v4-default", "v4-specific"}),  # under 5::/64
    ("ip -6 route add 2001:db8::/32 via 2001:db8::fe", {"v4-default", "v4-specific", "v6-specific"}),  # above it
    ("ip -6 route del 2001:db8:5::/64", {"v4-default", "v4-specific", "v6-default"}),  # fib6_del_route
    # an address's prefix route: reached by the gateway check of `via 10.1.0.254` (FA_S_ACCESSED) → flush
    ("ip route del 10.1.0.0/16 dev e1", {"v6-default", "v6-specific"}),
    ("ip -6 route del 2001:db8:1::/64", set(FLOWS)),  # fib6_del_route: no flow's route is that one
    ("ip addr add 10.2.0.1/24 dev e0", {"v6-default", "v6-specific"}),  # fib_inetaddr_event
    ("ip addr del 10.1.0.1/16 dev e1", {"v6-default", "v6-specific"}),
    ("ip -6 addr add 2001:db8:8::1/64 dev e0 nodad", {"v4-default", "v4-specific", "v6-specific"}),  # fib6_add
    ("ip -6 addr del 2001:db8:1::1/64 dev e1", {"v4-default", "v4-specific"}),  # fib6_flush_trees
    ("ip link set e1 mtu 1400", {"v6-default", "v6-specific"}),  # NETDEV_CHANGEMTU: rt6_mtu_change only
    ("ip link set e1 down", set()),  # rt_cache_flush; addrconf_ifdown deletes e1's IPv6 addresses
]


def kernel() -> Kernel:
    return Kernel(load_topology_text(f"[netns.r]\ncommands = '''\n{SETUP}'''\n", "validity.toml"))


def event(k: Kernel, text: str) -> None:
    """One ``[[event]]`` line as a run runs it (flowsim.sim.simulation.Simulation._event)."""
    ns = k.topo.netns("r")
    before = {name: (dev.up, dev.mtu) for name, dev in ns.devices.items()}
    iproute.run(k.topo, Command(text, "r", "validity.toml", 1))
    k.netdev_changes("r", before, text)


def cookies(k: Kernel) -> dict:
    """What flow_offload_fill_route stores per flow: the dst and its cookie."""
    fib = k.topo.netns("r").fib
    out = {}
    for name, dst in FLOWS.items():
        route = fib.lookup(ipaddress.ip_address(dst))
        out[name] = (route, fib.dst_cookie(route))
    return out


@pytest.mark.parametrize("command,valid", EVENTS, ids=[e[0] for e in EVENTS])
def test_an_event_invalidates_exactly_the_routes_the_kernel_invalidates(command, valid):
    """dst_check after one change: ipv4_dst_check (rt_genid) for IPv4, ip6_dst_check (fib6 node serial) for IPv6."""
    k = kernel()
    held = cookies(k)
    fib = k.topo.netns("r").fib
    assert all(fib.dst_check(route, cookie) for route, cookie in held.values())
    event(k, command)
    assert {name for name, (route, cookie) in held.items() if fib.dst_check(route, cookie)} == valid


def test_a_failed_route_add_changes_nothing():
    """fib_table_insert refuses an existing route (-EEXIST) before rt_cache_flush: IPv4 routes stay valid."""
    k = kernel()
    fib = k.topo.netns("r").fib
    route = fib.lookup(ipaddress.ip_address("192.0.2.1"))
    cookie = fib.dst_cookie(route)
    with pytest.raises(KeyError):
        fib.add(route)
    assert fib.dst_check(route, cookie) and fib.rt_genid == cookie


def test_the_node_serials_climb_to_the_root_only():
    """fib6_update_sernum_upto_root: the new prefix, its ancestors and the root get the new serial, no other node."""
    k = kernel()
    fib = k.topo.netns("r").fib
    net = ipaddress.IPv6Network
    before = {p: fib.fn_sernum("main", net(p)) for p in ("::/0", "2001:db8:5::/64", "2001:db8:1::/64")}
    event(k, "ip -6 route add 2001:db8:5:0:1::/80 via 2001:db8:1::fe")
    after = {p: fib.fn_sernum("main", net(p)) for p in before}
    assert after["::/0"] == after["2001:db8:5::/64"] == fib.fib6_sernum > before["::/0"]
    assert after["2001:db8:1::/64"] == before["2001:db8:1::/64"]
    assert fib.fn_sernum("main", net("2001:db8:5:0:1::/80")) == fib.fib6_sernum


def test_a_device_going_down_deletes_its_routes_and_up_does_not_bring_them_back():
    """rt6_sync_down_dev → fib6_ifdown (IPv6) and fib_sync_down_dev + fib_flush (IPv4) delete the static routes
    through a device going down; NETDEV_UP re-adds only the addresses' own routes, so the lookup falls back to
    the default route and a flow's cached route fails its check until the route is added again."""
    k = kernel()
    fib = k.topo.netns("r").fib
    v6, v4 = ipaddress.ip_address("2001:db8:5::1"), ipaddress.ip_address("192.0.2.1")
    route6 = fib.lookup(v6)
    cookie6 = fib.dst_cookie(route6)
    route4 = fib.lookup(v4)
    cookie4 = fib.dst_cookie(route4)
    assert route6.dev == "e1" and route4.dev == "e1"
    event(k, "ip link set e1 down")
    event(k, "ip link set e1 up")
    assert fib.lookup(v6).dev == "e0" and fib.lookup(v4).dev == "e0"         # the default route now
    assert not fib.dst_check(route6, cookie6) and not fib.dst_check(route4, cookie4)
    assert not fib.dst_check(route6, fib.dst_cookie(route6))                 # unlinked: no cookie makes it valid
    event(k, "ip -6 route add 2001:db8:5::/64 via 2001:db8:1::ff")
    back = fib.lookup(v6)
    assert back.dev == "e1" and back is not route6 and fib.dst_check(back, fib.dst_cookie(back))
