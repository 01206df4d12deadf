"""Source address selection (flowsim.kernel.saddr), as Debian's linux-source-7.2 has it.

IPv4: ``ip_route_output_key_hash_rcu`` / ``fib_select_path`` (net/ipv4/route.c) → ``fib_result_prefsrc``
(net/ipv4/fib_semantics.c) → ``inet_select_addr`` (net/ipv4/devinet.c); the address order of
``__inet_insert_ifa``.  IPv6: ``ip6_route_get_saddr`` (include/net/ip6_route.h) → ``ipv6_dev_get_saddr`` and
``ipv6_get_saddr_eval`` (net/ipv6/addrconf.c), the default labels of net/ipv6/addrlabel.c, the address order of
``ipv6_link_dev_addr``.  The users: a ``[[traffic]]`` table without ``src`` (a socket that binds no address),
``masquerade`` (net/netfilter/nf_nat_masquerade.c), ICMP errors (``icmp_send``, ``icmp6_send``).
"""

from __future__ import annotations

import ipaddress

import attrs
import pytest

from flowsim.conform.guest import TrafficPlan, _sock
from flowsim.config.topology import load_topology_text
from flowsim.errors import TopologyError
from flowsim.kernel.headers import RT_SCOPE_HOST, RT_SCOPE_LINK, RT_SCOPE_UNIVERSE
from flowsim.kernel.saddr import (
    inet_select_addr, ip_route_connect_saddr, ipv6_addr_label, ipv6_dev_get_saddr,
)
from flowsim.kernel.pkt import parse_ip
from flowsim.sim.report import build_report
from flowsim.sim.simulation import Simulation
from flowsim.sim.traffic import TrafficSpec

ip = ipaddress.ip_address


def host(commands: str, traffic: str = "", sysctls: str = ""):
    """Namespace h (eth0, eth1: veths to namespace p) with *commands* after the links are up."""
    text = f"""[netns.h]
commands = '''
ip link add eth0 type veth peer name e0 netns p
ip link add eth1 type veth peer name e1 netns p
ip link set eth0 up
ip link set eth1 up
{commands}
'''
{sysctls}
[netns.p]
commands = '''
ip link set e0 up
ip link set e1 up
'''
{traffic}"""
    return load_topology_text(text, file="saddr.toml")


def connect_src(topo, daddr: str):
    ns = topo.namespaces["h"]
    d = ip(daddr)
    return ip_route_connect_saddr(ns, ns.fib.lookup(d, access=False), d)


# ----------------------------------------------------------------------------- IPv4

CONNECT = [
    # inet_select_addr(dev, gw, RT_SCOPE_UNIVERSE): the first primary in the gateway's subnet, not the first
    # address of the namespace (eth1's) nor of the device (203.0.113.9)
    ("ip addr add 10.99.0.1/24 dev eth1\nip addr add 203.0.113.9/32 dev eth0\nip addr add 192.0.2.2/24 dev eth0\n"
     "ip route add default via 192.0.2.1", "198.51.100.7", "192.0.2.2"),
    # none in the gateway's subnet: the device's first primary
    ("ip addr add 10.99.0.1/24 dev eth1\nip addr add 203.0.113.9/32 dev eth0\nip addr add 203.0.113.10/32 dev eth0\n"
     "ip route add default via 192.0.2.1 dev eth0 onlink", "198.51.100.7", "203.0.113.9"),
    # fib_result_prefsrc: the route's src wins; another route's does not count
    ("ip addr add 192.0.2.2/24 dev eth0\nip addr add 10.99.0.1/24 dev eth1\n"
     "ip route add 198.51.100.0/24 via 192.0.2.1 src 10.99.0.1\nip route add default via 192.0.2.1",
     "198.51.100.7", "10.99.0.1"),
    ("ip addr add 192.0.2.2/24 dev eth0\nip addr add 10.99.0.1/24 dev eth1\n"
     "ip route add 198.51.100.0/24 via 192.0.2.1 src 10.99.0.1\nip route add default via 192.0.2.1",
     "203.0.113.7", "192.0.2.2"),
    # ip_route_output_key_hash_rcu, RTN_LOCAL: the local route's prefsrc (lo's 127.0.0.0/8 has 127.0.0.1)
    ("ip link set lo up\nip addr add 192.0.2.2/24 dev eth0\nip addr add 10.99.0.1/24 dev eth1", "10.99.0.1",
     "10.99.0.1"),
    ("ip link set lo up\nip addr add 192.0.2.2/24 dev eth0", "127.0.0.9", "127.0.0.1"),
    # no route: the kernel's connect fails (-ENETUNREACH)
    ("ip addr add 192.0.2.2/24 dev eth0", "198.51.100.7", None),
    # the route's device has no address: in_dev_select_addr over every device (lo's 127.0.0.1 is host scope)
    ("ip addr add 10.99.0.1/24 dev eth1\nip route add default dev eth0", "198.51.100.7", "10.99.0.1"),
    # IPV6_SADDR_RULE_OIF before IPV6_SADDR_RULE_PREFIX: eth1's 2001:db8:3:1::99 shares 63 bits with the
    # destination, but the route leaves by eth0; there 2001:db8:1::2 (46 bits) beats the newer 2001:db8:77::2
    # (41 bits), which comes first in addr_list (ipv6_link_dev_addr: newest first within a scope)
    ("ip addr add 2001:db8:3:1::99/64 dev eth1 nodad\nip addr add 2001:db8:1::2/64 dev eth0 nodad\n"
     "ip addr add 2001:db8:77::2/64 dev eth0 nodad\nip -6 route add default via 2001:db8:1::1", "2001:db8:3::2",
     "2001:db8:1::2"),
    # both share 32 bits with 2001:db8:ffff::1 and are cut at /64: every rule ties, the first candidate of
    # addr_list stays the best, and ipv6_link_dev_addr put the newer one first
    ("ip addr add 2001:db8:1::2/64 dev eth0 nodad\nip addr add 2001:db8:2::2/64 dev eth0 nodad\n"
     "ip -6 route add default via 2001:db8:1::1", "2001:db8:ffff::1", "2001:db8:2::2"),
    # ip6_route_get_saddr: the route's src (fib6_prefsrc)
    ("ip addr add 2001:db8:1::2/64 dev eth0 nodad\nip addr add 2001:db8:77::2/64 dev eth1 nodad\n"
     "ip -6 route add 2001:db8:4::/64 via 2001:db8:1::1 src 2001:db8:77::2", "2001:db8:4::9", "2001:db8:77::2"),
]


@pytest.mark.parametrize("commands, daddr, src", CONNECT)
def test_the_source_of_a_connection(commands, daddr, src):
    assert connect_src(host(commands), daddr) == (ip(src) if src else None)


def test_a_secondary_is_never_selected():
    # __inet_insert_ifa marks 192.0.2.3 IFA_F_SECONDARY: the loop skips it even for a destination of its own
    topo = host("ip addr add 192.0.2.2/24 dev eth0\nip addr add 192.0.2.3/24 dev eth0")
    ns = topo.namespaces["h"]
    dev = ns.devices["eth0"]
    assert inet_select_addr(ns, dev, ip("192.0.2.3"), RT_SCOPE_UNIVERSE) == ip("192.0.2.2")


def test_a_link_scope_address_is_not_a_gateway_routes_source():
    # the route via a gateway has scope universe: `min(ifa_scope, localnet_scope) > scope` skips scope link;
    # a device route (scope link) may use it
    topo = host("ip addr add 192.0.2.2/24 dev eth0 scope link\nip addr add 203.0.113.9/32 dev eth0\n"
                "ip route add default via 192.0.2.1")
    ns = topo.namespaces["h"]
    dev = ns.devices["eth0"]
    assert dev.addrs[0].scope == RT_SCOPE_LINK
    assert connect_src(topo, "198.51.100.7") == ip("203.0.113.9")
    assert inet_select_addr(ns, dev, ip("192.0.2.1"), RT_SCOPE_LINK) == ip("192.0.2.2")


def test_route_localnet_lets_a_host_scope_address_serve_a_link_route():
    topo = host("ip addr add 127.1.0.1/8 dev eth0\nip route add 198.51.100.0/24 dev eth0",
                sysctls='sysctls = { "net.ipv4.conf.eth0.route_localnet" = 1 }')
    ns = topo.namespaces["h"]
    dev = ns.devices["eth0"]
    assert dev.addrs[0].scope == RT_SCOPE_HOST  # iproute2's default_scope for 127.0.0.0/8
    assert inet_select_addr(ns, dev, None, RT_SCOPE_LINK) == ip("127.1.0.1")


@pytest.mark.parametrize("scope, value", [("global", 0), ("site", 200), ("link", 253), ("host", 254), ("7", 7)])
def test_ip_addr_scope_is_kept(scope, value):
    topo = host(f"ip addr add 192.0.2.2/24 dev eth0 scope {scope}")
    assert topo.namespaces["h"].devices["eth0"].addrs[0].scope == value


def test_a_secondary_of_another_scope_is_refused():
    # __inet_insert_ifa: "ipv4: Invalid scope value" (-EINVAL)
    with pytest.raises(TopologyError, match="Invalid scope value") as err:
        host("ip addr add 192.0.2.2/24 dev eth0\nip addr add 192.0.2.3/24 dev eth0 scope link")
    assert err.value.file == "saddr.toml"


def test_a_bad_scope_is_a_located_error():
    with pytest.raises(TopologyError, match="scope"):
        host("ip addr add 192.0.2.2/24 dev eth0 scope 256")


# ----------------------------------------------------------------------------- IPv6

def test_ipv6_the_prefix_rule_stops_at_the_addresses_prefix_length():
    # 2001:db8:1::2/48 would share 126 bits with 2001:db8:1::1 but counts 48; 2001:db8:1::3/64 counts 64
    topo = host("ip addr add 2001:db8:1::3/64 dev eth0 nodad\nip addr add 2001:db8:1::2/48 dev eth0 nodad")
    ns = topo.namespaces["h"]
    assert ipv6_dev_get_saddr(ns, ns.devices["eth0"], ip("2001:db8:1::1")) == ip("2001:db8:1::3")


def test_ipv6_label_rule_prefers_an_address_of_the_destinations_label():
    # ip6addrlbl_init_table: fc00::/7 has label 5, 2001:db8::/32 (not within 2001::/32) label 1; both addresses
    # are on the outgoing device, so IPV6_SADDR_RULE_LABEL decides before the prefix rule
    assert ipv6_addr_label(ip("fd00::1")) == 5
    assert ipv6_addr_label(ip("2001:db8::1")) == 1
    assert ipv6_addr_label(ip("2001:0:1::1")) == 6  # Teredo, 2001::/32
    assert ipv6_addr_label(ip("::1")) == 0
    topo = host("ip addr add fd00:1::2/64 dev eth0 nodad\nip addr add 2001:db8:1::2/64 dev eth0 nodad\n"
                "ip -6 route add fd00:9::/64 via fd00:1::1\nip -6 route add default via 2001:db8:1::1")
    assert connect_src(topo, "fd00:9::1") == ip("fd00:1::2")
    assert connect_src(topo, "2001:db8:9::1") == ip("2001:db8:1::2")


def test_ipv6_a_link_local_destination_looks_at_the_outgoing_device_only():
    # use_oif_addr for dst.scope <= IPV6_ADDR_SCOPE_LINKLOCAL: eth1's address is no candidate
    topo = host("ip addr add 2001:db8:1::2/64 dev eth1 nodad\nip addr add fe80::2/64 dev eth0 nodad")
    ns = topo.namespaces["h"]
    assert ipv6_dev_get_saddr(ns, ns.devices["eth0"], ip("fe80::1")) == ip("fe80::2")
    assert ipv6_dev_get_saddr(ns, None, ip("fe80::1")) == ip("fe80::2")  # scope: link-local fits best


def test_use_oif_addrs_only():
    topo = host("ip addr add 2001:db8:1::2/64 dev eth1 nodad\nip addr add fd00::2/64 dev eth0 nodad",
                sysctls='sysctls = { "net.ipv6.conf.eth0.use_oif_addrs_only" = 1 }')
    ns = topo.namespaces["h"]
    assert ipv6_dev_get_saddr(ns, ns.devices["eth0"], ip("2001:db8:9::1")) == ip("fd00::2")
    assert ipv6_dev_get_saddr(ns, ns.devices["eth1"], ip("2001:db8:9::1")) == ip("2001:db8:1::2")


# ----------------------------------------------------------------------------- the users

TRAFFIC = """
[[traffic]]
name = "t"
proto = "udp"
from = "h"
to = "DST"
dport = 5000
"""


def test_a_table_without_src_takes_the_kernels_choice():
    topo = host("ip addr add 10.99.0.1/24 dev eth1\nip addr add 192.0.2.2/24 dev eth0\n"
                "ip route add default via 192.0.2.1", TRAFFIC.replace("DST", "198.51.100.7"))
    (t,) = topo.traffic
    assert (t.src, t.src_bound) == (ip("192.0.2.2"), False)


def test_a_table_with_src_binds_it():
    topo = host("ip addr add 10.99.0.1/24 dev eth1\nip addr add 192.0.2.2/24 dev eth0\n"
                "ip route add default via 192.0.2.1",
                TRAFFIC.replace("DST", "198.51.100.7") + 'src = "10.99.0.1"\n')
    (t,) = topo.traffic
    assert (t.src, t.src_bound) == (ip("10.99.0.1"), True)


def test_a_table_without_a_route_keeps_the_first_address():
    # the kernel's connect fails; the sender uses the first address of its devices (eth0 was made first) and
    # its packets meet the missing route
    topo = host("ip addr add 10.99.0.1/24 dev eth1\nip addr add 192.0.2.2/24 dev eth0",
                TRAFFIC.replace("DST", "198.51.100.7"))
    assert topo.traffic[0].src == ip("192.0.2.2")


#: h reaches p's 198.51.100.7 by its default route (source 192.0.2.2); the event, at 0.1 s, gives that prefix a
#: route of its own (ROUTE_SRC); the table starts at START
CONNECT_LATER = """[netns.h]
commands = '''
ip link add eth0 type veth peer name e0 netns p
ip link add eth1 type veth peer name e1 netns p
ip link set eth0 up
ip link set eth1 up
ip addr add 192.0.2.2/24 dev eth0
ip addr add 10.99.0.1/24 dev eth1
ip route add default via 192.0.2.1
'''
[netns.p]
commands = '''
ip link set lo up
ip link set e0 up
ip link set e1 up
ip addr add 192.0.2.1/24 dev e0
ip addr add 10.99.0.2/24 dev e1
ip addr add 198.51.100.7/32 dev lo
'''
[[event]]
at = 0.1
netns = "h"
command = "ip route add 198.51.100.0/24 via 192.0.2.1 ROUTE_SRC"

[[traffic]]
name = "t"
proto = "tcp"
from = "h"
to = "198.51.100.7"
dport = 5000
packets = 3
reply_packets = 2
start = START
"""


@pytest.mark.parametrize("start, src, route_src, chosen", [
    # ip_route_connect at the table's start: the route the event added, and its src
    ("0.2", "", "src 10.99.0.1", "10.99.0.1"),
    # the event comes after the connect: the socket keeps the source it connected with
    ("0.0", "", "src 10.99.0.1", "192.0.2.2"),
    # a route without src: fib_result_prefsrc, eth0's address in the gateway's subnet
    ("0.2", "", "", "192.0.2.2"),
    # a table with src binds it, whatever the routes say
    ("0.2", 'src = "192.0.2.2"', "src 10.99.0.1", "192.0.2.2"),
])
def test_a_table_without_src_connects_through_the_routes_of_its_start(start, src, route_src, chosen):
    text = CONNECT_LATER.replace("START", start).replace("ROUTE_SRC", route_src) + src + "\n"
    topo = load_topology_text(text, file="connect-later.toml")
    assert topo.traffic[0].src == ip("192.0.2.2")  # the load sees the commands only
    report = build_report(Simulation(topo).run())
    (t,) = report["traffic"]
    (flow,) = t["flows"]
    assert (t["src"], flow["client"]["local"].rsplit(":", 1)[0]) == (chosen, chosen)
    # every packet of the connection used it: the handshake, the data and the close arrive both ways
    assert all(d["sent"] == d["delivered"] > 0 for d in t["directions"].values())
    assert report["drops"] == {}


@pytest.mark.parametrize("family, src, wildcard", [(4, "192.0.2.2", "0.0.0.0"), (6, "2001:db8:1::2", "[::]")])
def test_the_guest_binds_only_the_port_of_a_table_without_src(family, src, wildcard):
    # the guest's kernel then selects the source, and the conntrack facts check the model's prediction
    plan = TrafficPlan(index=0, name="t", proto="udp", family=family, client="h", server="p", src=src,
                       dst="198.51.100.7" if family == 4 else "2001:db8:3::2", dport=5000, listen_port=5000,
                       sport=40000, packets=1, size=100, reply_packets=0, reply_size=100, close=False, rate=0.0)
    shown = f"[{src}]" if family == 6 else src
    assert f",bind={shown}:40000" in _sock(plan, False)
    assert f",bind={wildcard}:40000" in _sock(attrs.evolve(plan, bind_src=False), False)


UDP3 = """[[traffic]]
name = "u"
proto = "udp"
from = "{frm}"
to = "{to}"
dport = 5000
packets = 3
"""

#: the server behind the router in MASQ and ASYM
SERVER = """[netns.s]
commands = '''
ip link set eth0 up
ip addr add 198.51.100.2/24 dev eth0
ip route add default via 198.51.100.1
'''
"""

MASQ = """[netns.c]
commands = '''
ip link add eth0 type veth peer name veth0 netns r
ip link set eth0 up
ip addr add 192.0.2.2/24 dev eth0
ip route add default via 192.0.2.1
'''
[netns.r]
commands = '''
ip link add veth1 type veth peer name eth0 netns s
ip link set veth0 up
ip link set veth1 up
ip addr add 192.0.2.1/24 dev veth0 SCOPE
ip addr add 198.51.100.1/24 dev veth1 SCOPE
'''
sysctls = { "net.ipv4.ip_forward" = 1 }
nft = '''
table ip nat {
  chain postrouting { type nat hook postrouting priority 100; policy accept; oifname "veth1" masquerade }
}
'''
""" + SERVER + UDP3.format(frm="c", to="198.51.100.2")


def run(text: str, file: str):
    """The run of topology *text*: the simulation, its one table's delivered originals and the drops by reason."""
    sim = Simulation(load_topology_text(text, file=file))
    sim.run()
    report = build_report(sim)
    (t,) = report["traffic"]
    return sim, t["directions"]["original"]["delivered"], report["drops"]


@pytest.mark.parametrize("scope, delivered", [("", 3), ("scope link", 0)])
def test_masquerade_without_a_global_address_drops(scope, delivered):
    # nf_nat_masquerade_ipv4: inet_select_addr(out, nh, RT_SCOPE_UNIVERSE) finds no address when the router's
    # are all scope link (in_dev_select_addr skips them too): "veth1 ate my IP address", NF_DROP
    sim, arrived, drops = run(MASQ.replace("SCOPE", scope), "masq.toml")
    assert (arrived, drops.get("masquerade-no-address", 0)) == (delivered, 3 - delivered)
    if delivered:  # translated to the output device's address (in the next hop's subnet)
        (ct,) = sim.kernel.netns["r"].conntrack.entries()
        assert ct.tuplehash[1].dst == ip("198.51.100.1")


TUN6 = """[netns.a]
commands = '''
ip link set lo up
ip link add eth0 type veth peer name eth0 netns b
ip link set eth0 up
ip addr add 2001:db8:1::1/64 dev eth0 nodad
ip link add t0 type ip6tnl mode ip6ip6 LOCAL remote 2001:db8:1::2 encaplimit none
ip link set t0 up
ip addr add 2001:db8:5::1/64 dev t0 nodad
ip -6 route add 2001:db8:9::/64 dev t0
'''
[netns.b]
commands = '''
ip link set eth0 up
ip addr add 2001:db8:1::2/64 dev eth0 nodad
ip link add t0 type ip6tnl mode ip6ip6 local 2001:db8:1::2 remote 2001:db8:1::1 encaplimit none
ip link set t0 up
ip addr add 2001:db8:9::1/64 dev t0 nodad
'''
""" + UDP3.format(frm="a", to="2001:db8:9::1")


@pytest.mark.parametrize("local, delivered, refused", [
    ("local 2001:db8:1::1", 3, 0),
    ("", 0, 3),  # `local any`: ip6_tnl_get_cap gives only IP6_TNL_F_CAP_PER_PACKET, never CAP_XMIT
    ("local 2001:db8:1::99", 0, 3),  # "Local address not yet configured!" (ipv6_chk_addr_and_flags finds none)
    # configured, on another device (t0 itself): a global address may be anywhere, so a sends; b's tunnel
    # expects 2001:db8:1::1 and drops it (no-tunnel)
    ("local 2001:db8:5::1", 0, 0),
])
def test_ip6tnl_without_a_local_address_does_not_transmit(local, delivered, refused):
    # ip6_tnl_xmit → ip6_tnl_xmit_ctl
    sim, arrived, drops = run(TUN6.replace("LOCAL", local), "tun6.toml")
    assert (arrived, drops.get("tunnel-no-local", 0)) == (delivered, refused)
    assert sum(drops.values()) == 3 - delivered
    # dst_link_failure → ip6_link_failure: ICMPv6 destination unreachable, address unreachable, to the sender
    assert [e[:2] for e in sim.conversations[0].client.icmp_errors] == [(1, 3)] * refused


ASYM = """[netns.c]
commands = '''
ip link add eth0 type veth peer name veth0 netns r
ip link add eth1 type veth peer name veth2 netns r
ip link set eth0 up
ip link set eth1 up
ip addr add 192.0.2.2/24 dev eth0
ip addr add 10.1.0.2/24 dev eth1
ip addr add 203.0.113.9/32 dev eth0
ip route add default via 192.0.2.1
'''
[netns.r]
commands = '''
ip link add veth1 type veth peer name eth0 netns s
ip link set veth0 up
ip link set veth1 up
ip link set veth2 up
ip addr add 192.0.2.1/24 dev veth0
ip addr add 198.51.100.1/24 dev veth1
ip addr add 10.1.0.1/24 dev veth2
ip route add 203.0.113.9/32 via 10.1.0.2
'''
sysctls = { "net.ipv4.ip_forward" = 1, "net.ipv4.icmp_errors_use_inbound_ifaddr" = INBOUND }
""" + SERVER


@pytest.mark.parametrize("inbound, source", [(0, "10.1.0.1"), (1, "192.0.2.1")])
def test_an_icmp_errors_source(inbound, source):
    """icmp_send (net/ipv4/icmp.c): the TTL runs out at r for a packet from 203.0.113.9, which came in on veth0
    and whose route back leaves by veth2.  The error leaves from the route back's source (fib_result_prefsrc:
    veth2's address in the gateway's subnet), or with icmp_errors_use_inbound_ifaddr from inet_select_addr on
    the inbound device (veth0's primary)."""
    topo = load_topology_text(ASYM.replace("INBOUND", str(inbound)), file="asym.toml")
    spec = TrafficSpec(name="t", proto="udp", netns="c", src=ip("203.0.113.9"), dst=ip("198.51.100.2"), dport=5000,
                       packets=2, ttl=1)
    sim = Simulation(topo, traffic=[spec])
    errors = []

    def tap(ns, dev, frame, skb, outbound):
        info = parse_ip(frame, 14)
        if ns == "c" and not outbound and info is not None and info.icmp_type == 11:
            errors.append((dev, str(info.src)))

    sim.kernel.packet_tap = tap
    sim.run()
    assert errors == [("eth1", source)] * 2
