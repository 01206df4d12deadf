"""``ip addr del`` / ``ip addr flush`` and the IPv4 routes through the device (fib_inetaddr_event in
net/ipv4/fib_frontend.c): removing a device's last IPv4 address runs ``fib_disable_ip(dev, NETDEV_DOWN, true)``,
which flushes every IPv4 route through it; IPv6 gateway routes stay (addrconf removes only the prefix route).
Then the prefix routes of addresses (noprefixroute, metric, secondaries), and ``ip route del`` / ``ip route
flush`` of them."""

from __future__ import annotations

import ipaddress

import pytest

from flowsim.config import iproute
from flowsim.config.topology import load_topology_text
from flowsim.errors import TopologyError
from flowsim.kernel.devices.base import Command

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


# --- the prefix route of an address: fib_add_ifaddr (net/ipv4/fib_frontend.c), inet6_addr_add → addrconf_prefix_route
# (net/ipv6/addrconf.c), and __inet_del_ifa's secondaries (net/ipv4/devinet.c)

def _connected(extra: str) -> list[tuple[str, str, int, str | None]]:
    fib = load_topology_text(HOST % extra, "t.toml").namespaces["a"].fib
    return sorted((str(r.prefix), r.dev, r.metric, str(r.src) if r.src else None) for r in fib.connected())


BASE = [("10.0.1.0/24", "eth0", 0, "10.0.1.99"), ("10.0.9.0/24", "eth0", 0, "10.0.9.99"),
        ("dead:1::/64", "eth0", 256, None)]


def test_noprefixroute_addresses_install_no_prefix_route():
    """IFA_F_NOPREFIXROUTE: fib_add_ifaddr skips fib_magic(RTN_UNICAST), inet6_addr_add addrconf_prefix_route."""
    assert _connected("ip addr add 10.0.2.1/24 dev eth0.10 noprefixroute\n"
                      "ip addr add dead:2::1/64 dev eth0.10 nodad noprefixroute") == BASE


def test_a_gateway_behind_a_noprefixroute_address_needs_a_route_to_it():
    """fib_check_nh finds no route to the gateway: 'Nexthop has invalid gateway' until one is added."""
    with pytest.raises(TopologyError, match="Nexthop has invalid gateway"):
        _connected("ip addr add 10.0.2.1/24 dev eth0.10 noprefixroute\nip route add 10.7.0.0/16 via 10.0.2.2")
    fib = load_topology_text(HOST % ("ip addr add 10.0.2.1/24 dev eth0.10 noprefixroute\n"
                                     "ip route add 10.0.2.0/24 dev eth0.10 metric 100\n"
                                     "ip route add 10.7.0.0/16 via 10.0.2.2"), "t.toml").namespaces["a"].fib
    assert fib.lookup(ipaddress.ip_address("10.7.0.1")).dev == "eth0.10"


def test_the_address_metric_is_its_prefix_routes():
    """ifa_rt_priority (ip addr add … metric N): the prefix route's metric, 0 / IP6_RT_PRIO_ADDRCONF without."""
    assert _connected("ip addr add 10.0.2.1/24 dev eth0.10 metric 50\n"
                      "ip addr add dead:2::1/64 dev eth0.10 nodad metric 70") == sorted(
        BASE + [("10.0.2.0/24", "eth0.10", 50, "10.0.2.1"), ("dead:2::/64", "eth0.10", 70, None)])


def test_an_ipv4_secondary_shares_its_primarys_route():
    """__inet_insert_ifa marks a second address of the prefix IFA_F_SECONDARY: no route of its own."""
    assert _connected("ip addr add 10.0.1.98/24 dev eth0") == BASE


def test_deleting_the_primary_deletes_its_secondaries_unless_promoted():
    """__inet_del_ifa: without promote_secondaries (all or the device's) the secondaries go too; with it, the
    next one is the primary."""
    extra = "ip addr add 10.0.1.98/24 dev eth0\nip addr add 10.0.1.97/24 dev eth0\nip addr del 10.0.1.99/24 dev eth0"
    assert _connected(extra) == BASE[1:]
    for conf in ("all", "eth0"):
        promote = f"sysctl -w net.ipv4.conf.{conf}.promote_secondaries=1\n"
        assert _connected(promote + extra) == [("10.0.1.0/24", "eth0", 0, "10.0.1.98")] + BASE[1:]
    addrs = load_topology_text(HOST % (promote + extra), "t.toml").namespaces["a"].devices["eth0"].addrs
    assert [str(a.ip) for a in addrs if a.version == 4] == ["10.0.9.99", "10.0.1.98", "10.0.1.97"]


def test_deleting_a_secondary_keeps_the_primary():
    assert _connected("ip addr add 10.0.1.98/24 dev eth0\nip addr del 10.0.1.98/24 dev eth0") == BASE


def test_an_address_in_the_zero_network_has_no_prefix_route():
    """fib_add_ifaddr: ipv4_is_zeronet(prefix)."""
    assert _connected("ip addr add 0.0.0.1/8 dev eth0.10") == BASE


def test_an_ipv6_prefix_two_addresses_share_is_one_route():
    """fib6_add finds the route there; a noprefixroute first address leaves it to the second."""
    assert _connected("ip addr add dead:1::98/64 dev eth0 nodad") == BASE
    assert _connected("ip addr add dead:2::1/64 dev eth0.10 nodad noprefixroute\n"
                      "ip addr add dead:2::2/64 dev eth0.10 nodad") == sorted(BASE + [("dead:2::/64", "eth0.10", 256, None)])


def test_an_address_prefix_route_can_be_deleted_and_comes_back_with_the_device():
    """`ip route del` of a prefix route (fib_table_delete / ip6_route_del find it like any route); NETDEV_UP makes
    it again (fib_add_ifaddr, addrconf_permanent_addr → fixup_permanent_addr), as does an address that adds it."""
    gone = "ip route del 10.0.1.0/24 dev eth0\nip -6 route del dead:1::/64"
    assert _connected(gone) == [BASE[1]]
    assert _connected(gone + "\nip link set eth0 down\nip link set eth0 up") == BASE
    assert _connected(gone + "\nip addr add dead:1::98/64 dev eth0 nodad") == BASE[1:]
    assert _connected(gone + "\nip addr add 10.0.1.98/24 dev eth0") == [BASE[1]]  # a secondary: no route
    with pytest.raises(TopologyError, match="No such process"):
        _connected("ip route del 10.0.1.0/24 dev eth0 metric 5")


def test_deleting_a_prefix_route_takes_the_lower_metric_first():
    """fib_table_delete walks the prefix's aliases by priority: the address's metric-0 route before a static one."""
    fib = load_topology_text(HOST % "ip route add 10.0.1.0/24 dev eth0.10 metric 50\nip route del 10.0.1.0/24",
                             "t.toml").namespaces["a"].fib
    assert [(str(r.prefix), r.dev, r.metric) for r in fib.routes(4) if str(r.prefix) == "10.0.1.0/24"] == [
        ("10.0.1.0/24", "eth0.10", 50)]


# --- ip route flush (iproute2's iproute_list_flush_or_save: RTM_DELROUTE for each main-table route that matches).
# The expected tables are what Linux 6.18 and iproute2 printed for the same commands in a network namespace.

def _main(extra: str, version: int = 4) -> list[str]:
    fib = load_topology_text(HOST % extra, "t.toml").namespaces["a"].fib
    return sorted(f"{r.prefix} {r.dev} {r.gateway}" for r in fib.routes(version))


def test_route_flush_dev_deletes_ipv4_routes_and_the_prefix_routes():
    """Without -6 the family is IPv4; the addresses' prefix routes go too; -6 flushes IPv6."""
    extra = "ip route add 10.8.0.0/16 via 10.0.1.254\nip route add 10.7.0.0/16 dev eth0 proto static\n"
    assert _main(extra + "ip route flush dev eth0") == []
    assert _main(extra + "ip route flush dev eth0", 6) == ["::/0 eth0 dead:1::1", "dead:1::/64 eth0 None"]
    assert _main(extra + "ip -6 route flush dev eth0", 6) == []
    assert _main(extra + "ip route flush dev eth0\nip link set eth0 down\nip link set eth0 up") == [
        "10.0.1.0/24 eth0 None", "10.0.9.0/24 eth0 None"]  # NETDEV_UP: fib_add_ifaddr again


def test_route_flush_prefix_selectors():
    """A bare prefix is `exact`; `root P`: P and longer; `match P`: P and shorter, containing it."""
    extra = "ip route add 10.8.0.0/16 via 10.0.1.254\nip route add 10.8.1.0/24 via 10.0.1.254\n"
    assert _main(extra + "ip route flush 10.8.0.0/16") == [
        "0.0.0.0/0 eth0 10.0.1.1", "10.0.1.0/24 eth0 None", "10.0.9.0/24 eth0 None", "10.8.1.0/24 eth0 10.0.1.254"]
    assert _main(extra + "ip route flush root 10.8.0.0/16") == [
        "0.0.0.0/0 eth0 10.0.1.1", "10.0.1.0/24 eth0 None", "10.0.9.0/24 eth0 None"]
    assert _main(extra + "ip route flush match 10.8.1.0/24") == ["10.0.1.0/24 eth0 None", "10.0.9.0/24 eth0 None"]
    assert _main(extra + "ip route flush table main") == []
    assert _main(extra + "ip route flush proto kernel") == [
        "0.0.0.0/0 eth0 10.0.1.1", "10.8.0.0/16 eth0 10.0.1.254", "10.8.1.0/24 eth0 10.0.1.254"]


def test_route_flush_cache_flushes_the_ipv4_route_cache():
    """/proc/sys/net/ipv4/route/flush → rt_cache_flush: cached IPv4 routes (a flow's dst) fail dst_check."""
    topo = load_topology_text(HOST % "", "t.toml").instantiate()
    fib = topo.namespaces["a"].fib
    genid = fib.rt_genid
    iproute.run(topo, Command("ip route flush cache", "a", "t.toml", 1))
    assert fib.rt_genid == genid + 1 and len(fib.routes(4)) == 3


@pytest.mark.parametrize("command,message", [
    ("ip route flush", "requires arguments"),
    ("ip route flush dev nosuch", "nosuch"),
    ("ip route flush 2001:db8::/32", "not IPv4"),
    ("ip -6 route flush cache", "no IPv6 route cache"),
    ("ip route flush table 100", "table"),
])
def test_route_flush_errors(command, message):
    with pytest.raises(TopologyError, match=message):
        _main(command)


# --- a link-local IPv6 gateway (ip6_validate_gw in net/ipv6/route.c): not looked up, ND finds it on the link

def test_a_link_local_gateway_needs_its_device_only():
    """An RA's default route (via fe80::1 dev eth0) loads; the router's link-local address is resolved on the
    link (flowsim.kernel.neigh discovery), so the path to a remote address has the gateway's MAC."""
    text = (HOST % "ip -6 route replace default via fe80::1 dev eth0").replace(
        'commands = "ip link set eth0 up"',
        'commands = """\nip link set eth0 up\nip addr add fe80::1/64 dev eth0 nodad\n"""')
    topo = load_topology_text(text, "t.toml")
    ns = topo.namespaces["a"]
    route = ns.fib.lookup(ipaddress.ip_address("2001:db8:9::1"))
    assert (str(route.gateway), route.dev) == ("fe80::1", "eth0")
    entry = ns.neigh.lookup("eth0", ipaddress.ip_address("fe80::1"))
    assert entry is not None and entry.lladdr == topo.namespaces["b"].devices["eth0"].mac


@pytest.mark.parametrize("command,message", [
    ("ip -6 route add 2001:db8:7::/64 via fe80::1", "Egress device not specified"),
    ("ip -6 route add 2001:db8:7::/64 via fe80::1 dev lo", "can not be loopback"),
])
def test_a_link_local_gateway_without_a_usable_device_is_refused(command, message):
    with pytest.raises(TopologyError, match=message):
        _main(command)


@pytest.mark.parametrize("mtu, value", [("1500", 1500), ("01500", 832), ("0x5dc", 1500), ("0", None), ("09", None)])
def test_numbers_are_read_as_iproute2_reads_them(mtu, value):
    """iproute2's get_integer / get_unsigned: strtol(arg, &end, 0), so a leading 0 is octal (01500 is 832) and a
    0 followed by 8 or 9 is no number; int(text, 0) refused every leading zero."""
    text = f"[netns.a]\ncommands = '''\nip link add eth0 type veth peer name eth1\nip link set eth0 mtu {mtu}\n'''\n"
    if value is None:
        with pytest.raises(TopologyError, match="mtu"):
            load_topology_text(text, "mtu.toml")
    else:
        assert load_topology_text(text, "mtu.toml").namespaces["a"].devices["eth0"].mtu == value
