"""Per-namespace FIB: connected and local routes, longest prefix, metrics, oif, errors (fib_table_lookup)."""

from __future__ import annotations

import errno
import ipaddress

import pytest

from flowsim.config.topology import load_topology_text
from flowsim.errors import TopologyError
from flowsim.kernel.fib import Route

ip = ipaddress.ip_address
net = ipaddress.ip_network

BASE = """
ip link add e0 type dummy
ip link add e1 type dummy
ip link set e0 up
ip link set e1 up
ip addr add 10.0.0.1/24 dev e0
ip addr add 10.1.0.1/16 dev e1
ip addr add 2001:db8:0::1/64 dev e0 nodad
ip addr add 2001:db8:1::1/64 dev e1 nodad
"""


def fib(extra: str = ""):
    topo = load_topology_text(f"[netns.r]\ncommands = '''\n{BASE}{extra}\n'''\n", "fib.toml")
    return topo.netns("r").fib


LOOKUPS = [
    # (extra commands, destination, expected route string or error)
    ("", "10.0.0.7", "10.0.0.0/24 dev e0 proto kernel scope link src 10.0.0.1"),
    ("", "2001:db8:1::9", "2001:db8:1::/64 dev e1 proto kernel scope link metric 256"),
    ("", "10.0.0.1", "local 10.0.0.1/32 dev e0 proto kernel scope host src 10.0.0.1"),
    ("ip link set lo up", "127.0.0.5", "local 127.0.0.0/8 dev lo proto kernel scope host src 127.0.0.1"),
    ("", "127.0.0.5", -errno.ENETUNREACH),
    ("", "192.0.2.1", -errno.ENETUNREACH),
    ("ip route add default via 10.0.0.254", "192.0.2.1", "default via 10.0.0.254 dev e0"),
    ("ip route add default via 10.0.0.254\nip route add 192.0.2.0/24 via 10.1.0.254", "192.0.2.1",
     "192.0.2.0/24 via 10.1.0.254 dev e1"),
    ("ip route add 192.0.2.0/24 via 10.0.0.254 metric 20\nip route add 192.0.2.0/24 via 10.1.0.254 metric 10",
     "192.0.2.1", "192.0.2.0/24 via 10.1.0.254 dev e1 metric 10"),
    ("ip -6 route add default via 2001:db8::ff", "2001:db8:9::1", "default via 2001:db8::ff dev e0 metric 1024"),
    ("ip route add blackhole 192.0.2.0/24", "192.0.2.1", -errno.EINVAL),
    ("ip route add unreachable 192.0.2.0/24", "192.0.2.1", -errno.EHOSTUNREACH),
    ("ip route add prohibit 192.0.2.0/24", "192.0.2.1", -errno.EACCES),
    ("ip route add default via 10.0.0.254\nip link set e0 down", "192.0.2.1", -errno.ENETUNREACH),
    ("ip route add 192.0.2.0/24 dev e1 mtu lock 1400", "192.0.2.1", "192.0.2.0/24 dev e1 scope link mtu lock 1400"),
]


@pytest.mark.parametrize("extra,dst,expected", LOOKUPS, ids=[f"{i}-{r[1]}" for i, r in enumerate(LOOKUPS)])
def test_lookup(extra, dst, expected):
    """Local table first, then longest prefix, then lowest metric; down devices' routes are skipped."""
    route = fib(extra).lookup(ip(dst))
    if isinstance(expected, int):
        assert route.error == expected
    else:
        assert route.error == 0 and str(route) == expected


def test_oif_is_strict_for_ipv4_with_onlink_fallback():
    """flowi4_oif: only routes through it; none → assume on-link there (ip_route_output_key_hash_rcu)."""
    f = fib("ip route add default via 10.0.0.254")
    assert f.lookup(ip("192.0.2.1"), oif="e1").dev == "e1"
    assert f.lookup(ip("192.0.2.1"), oif="e1").gateway is None
    assert f.lookup(ip("192.0.2.1"), oif="e0").gateway == ip("10.0.0.254")


def test_oif_is_a_preference_for_ipv6():
    """IPv6 without RT6_LOOKUP_F_IFACE prefers the oif among equal routes, else uses the best match."""
    f = fib("ip -6 route add 2001:db8:9::/64 via 2001:db8::ff\nip -6 route add 2001:db8:9::/64 via 2001:db8:1::ff "
            "metric 1024 dev e1 table main onlink")
    assert f.lookup(ip("2001:db8:9::1")).dev == "e0"
    assert f.lookup(ip("2001:db8:9::1"), oif="e1").dev == "e1"


def test_nexthop_and_mtu():
    """rt_nexthop is the gateway or the destination; dst_mtu is the route MTU or the device's."""
    f = fib("ip route add 192.0.2.0/24 via 10.0.0.254 mtu 1400")
    r = f.lookup(ip("192.0.2.1"))
    assert r.nexthop(ip("192.0.2.1")) == ip("10.0.0.254") and f.route_mtu(r) == 1400
    c = f.lookup(ip("10.0.0.9"))
    assert c.nexthop(ip("10.0.0.9")) == ip("10.0.0.9") and f.route_mtu(c) == 1500


def test_connected_routes_follow_addresses_and_state():
    """Prefix routes exist for up devices only, none for a /32 without peer; peer addresses route the peer."""
    f = fib("ip addr add 10.9.9.9/32 dev e0\nip link add p type dummy\nip addr add 100.64.0.2 peer 100.64.0.1/32 dev p")
    prefixes = {str(r.prefix) for r in f.connected(4)}
    assert "10.9.9.9/32" not in prefixes and "100.64.0.1/32" not in prefixes
    f.ns.devices["p"].up = True
    assert f.lookup(ip("100.64.0.1")).dev == "p"


@pytest.mark.parametrize("command,message", [
    ("ip route add default via 10.0.0.254\nip route add default via 10.0.0.253", "already exists"),
    ("ip route change 192.0.2.0/24 via 10.0.0.254", "no route"),
    ("ip route del 192.0.2.0/24", "no route"),
    ("ip route add 192.0.2.0/24 via 10.5.0.1", "connected subnet"),
    ("ip route add 192.0.2.0/24 via 10.0.0.1 dev e1", "connected subnet"),
    ("ip route add 192.0.2.0/24", "neither gateway nor device"),
    ("ip -6 route add 10.0.0.0/8 dev e0", "not IPv6"),
])
def test_route_errors(command, message):
    """Refusals of ip route: duplicates, missing routes, off-link gateways, missing nexthop, family."""
    with pytest.raises(TopologyError, match=message):
        fib(command)


def test_replace_and_append_and_default_family():
    """`replace` overwrites; `default` without -6 or a v6 gateway is IPv4."""
    f = fib("ip route add default dev e0\nip route replace default via 10.1.0.254")
    assert [str(r) for r in f.static] == ["default via 10.1.0.254 dev e1"]
    assert Route(net("0.0.0.0/0")).version == 4
