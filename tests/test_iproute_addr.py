"""``ip addr del`` / ``ip addr flush`` and the IPv4 routes through the device (fib_inetaddr_event in
net/ipv4/fib_frontend.c): removing a device's last IPv4 address runs ``fib_disable_ip(dev, NETDEV_DOWN, true)``,
which flushes every IPv4 route through it; IPv6 gateway routes stay (addrconf removes only the prefix route)."""

from __future__ import annotations

from flowsim.config.topology import load_topology_text

HOST = '''
[netns.a]
commands = """
ip link add eth0 type veth peer name eth0 netns b
ip link set eth0 up
ip addr add 10.0.1.99/24 dev eth0
ip addr add 10.0.9.99/24 dev eth0
ip route add default via 10.0.1.1
ip addr add dead:1::99/64 dev eth0 nodad
ip route add default via dead:1::1
ip link add link eth0 name eth0.10 type vlan id 10
ip link set eth0.10 up
%s
"""
[netns.b]
commands = "ip link set eth0 up"
'''


def _defaults(extra: str) -> list[tuple[str, str]]:
    topo = load_topology_text(HOST % extra, "t.toml")
    fib = topo.namespaces["a"].fib
    return sorted((str(r.gateway), r.dev) for r in fib.static if r.prefix.prefixlen == 0)


def test_flush_of_the_last_ipv4_address_drops_the_ipv4_routes_through_the_device():
    """nft_flowtable.sh's bridge-and-VLAN setup: flush eth0, address eth0.10, add the default again."""
    assert _defaults("ip addr flush dev eth0\nip addr add 10.0.1.99/24 dev eth0.10\nip route add default via 10.0.1.1") \
        == [("10.0.1.1", "eth0.10"), ("dead:1::1", "eth0")]


def test_deleting_one_of_two_ipv4_addresses_keeps_the_routes():
    assert _defaults("ip addr del 10.0.9.99/24 dev eth0") == [("10.0.1.1", "eth0"), ("dead:1::1", "eth0")]


def test_deleting_the_last_ipv4_address_drops_them():
    assert _defaults("ip addr del 10.0.9.99/24 dev eth0\nip addr del 10.0.1.99/24 dev eth0") == [("dead:1::1", "eth0")]


def test_ipv6_flush_keeps_the_ipv4_routes():
    assert _defaults("ip -6 addr flush dev eth0") == [("10.0.1.1", "eth0"), ("dead:1::1", "eth0")]
