"""Topology loading: devices, ifindexes, MACs, MTUs, graph, L2 discovery, schema and errors."""

from __future__ import annotations

import ipaddress
import json
import re
import shlex
from pathlib import Path

import networkx as nx
import pytest

from flowsim.config.topology import UPPER_EDGES, load_topology, load_topology_text
from flowsim.errors import TopologyError
from flowsim.kernel.devices.base import ETH_P_8021AD, mac_for

ROOT = Path(__file__).resolve().parent.parent
TOPOLOGIES = ROOT / "topologies"
BAD = ROOT / "tests" / "data" / "topologies"
ip = ipaddress.ip_address


def one(commands: str, extra: str = "", name: str = "t.toml"):
    return load_topology_text(f"[netns.r]\ncommands = '''\n{commands}\n'''\n[netns.h]\n{extra}", name)


# ---------------------------------------------------------------------- shipped files

@pytest.mark.parametrize("path", sorted(TOPOLOGIES.glob("*.toml")), ids=lambda p: p.name)
def test_shipped_topology_loads_with_diagram_source_and_ruleset(path):
    """Every shipped scenario loads, opens with a comment diagram, names its source and has a flowtable."""
    text = path.read_text()
    assert text.startswith("#") and "Source:" in text.split("\n\n")[0] + text
    topo = load_topology(path)
    assert topo.description and topo.source
    rulesets = [ns.nft for ns in topo.namespaces.values() if ns.nft is not None]
    # `flow add @ft`, or `flow offload @ft` (nft's older spelling of the same statement, which firewall4 renders)
    assert rulesets and any(re.search(r"\bflow (add|offload) @", r.text) for r in rulesets)
    assert topo.traffic


def test_expected_scenarios_are_shipped():
    """The scenarios the issue lists exist."""
    names = {p.stem for p in TOPOLOGIES.glob("*.toml")}
    assert {"ip6ip6-rx", "ip6ip6-rx-encaplimit", "ip6ip6-over-pppoe", "ipip", "ipip-over-vlan",
            "ip6ip6-over-vlan", "selftest", "bridge-vlan", "pppoe-over-vlan", "dsa"} <= names


def test_nft_text_keeps_its_absolute_line():
    """The ruleset text is stored with the TOML line where it starts (for the nft parser's errors)."""
    path = TOPOLOGIES / "selftest.toml"
    lines = path.read_text().split("\n")
    nft = load_topology(path).netns("nsr1").nft
    assert nft.file == str(path)
    assert lines[nft.line - 1] == nft.text.split("\n")[0] == "table inet filter {"


def test_sysctls_and_traffic_fields():
    """Quoted dotted sysctl keys stay flat; traffic defaults src to the netns's address of the family."""
    topo = load_topology(TOPOLOGIES / "selftest.toml")
    assert topo.netns("nsr1").sysctl("net.ipv4.conf.veth0.forwarding") == "1"
    t = {t.name: t for t in topo.traffic}
    assert t["tcp6-12345"].src == ip("dead:1::99") and t["tcp6-12345"].dst == ip("dead:2::99")
    assert t["tcp-12345"].proto == "tcp" and t["tcp-12345"].handshake and t["tcp-12345"].line


# ---------------------------------------------------------------------- devices

def test_ifindex_per_namespace_lo_first_peer_before_device():
    """lo = 1 in each namespace; a veth peer is registered before the device (veth_newlink)."""
    topo = one("ip link add a type veth peer name b\nip link add c type veth peer name c netns h")
    r, h = topo.netns("r"), topo.netns("h")
    assert r.devices["lo"].ifindex == h.devices["lo"].ifindex == 1
    assert (r.devices["b"].ifindex, r.devices["a"].ifindex, r.devices["c"].ifindex) == (2, 3, 4)
    assert h.devices["c"].ifindex == 2
    assert topo.device_by_index("r", 3).name == "a"


def test_moved_device_keeps_ifindex_unless_taken():
    """dev_change_net_namespace keeps the ifindex when free, else allocates; addresses are dropped."""
    topo = one("ip link add x type dummy\nip link add y type dummy\nip addr add 10.0.0.1/24 dev y\n"
               "ip link set y netns h\nip link set x netns h")
    h = topo.netns("h")
    assert h.devices["y"].ifindex == 3 and h.devices["y"].addrs == []
    assert h.devices["x"].ifindex == 2
    assert ("h", "y") in topo.graph and ("r", "y") not in topo.graph


def test_macs_deterministic_inherited_and_explicit():
    """MACs derive from netns/name; VLAN and DSA inherit the lower's; `address` is honoured."""
    topo = one("ip link add e0 address 02:00:00:00:00:aa type ethernet\nip link add link e0 name e0.5 type vlan id 5\n"
               "ip link add lan1 link e0 type dsa port 1 tagger dsa\nip link add v type veth peer name w")
    r = topo.netns("r").devices
    assert r["e0"].mac == r["e0.5"].mac == r["lan1"].mac == "02:00:00:00:00:aa"
    assert r["v"].mac == mac_for("r", "v") and int(r["v"].mac[:2], 16) & 2
    assert load_topology_text("[netns.r]\ncommands='ip link add v type veth peer name w'").device("r", "v").mac == r["v"].mac


@pytest.mark.parametrize("command,dev,mtu", [
    ("ip link add tun type ipip remote 192.0.2.2 local 10.0.0.1", "tun", 1480),
    ("ip link add tun type ip6tnl remote 2001:db8:9::2 local 2001:db8::1", "tun", 1452),
    ("ip link add tun type ip6tnl remote 2001:db8:9::2 local 2001:db8::1 encaplimit none", "tun", 1460),
    ("ip link add tun type gre remote 192.0.2.2 local 10.0.0.1", "tun", 1476),
    ("ip link add tun type gretap remote 192.0.2.2 local 10.0.0.1", "tun", 1462),
    ("ip link add tun type vxlan id 5 dev e0", "tun", 8950),
    ("ip link add tun type wireguard", "tun", 1420),
    ("ip link add ppp0 type pppoe dev e0 session 1 peer 02:00:00:00:00:01", "ppp0", 8992),
    ("ip link add link e0 name e0.2 type vlan id 2", "e0.2", 9000),
    ("ip link add link e0 name mv type macvlan mode bridge", "mv", 9000),
])
def test_default_mtus_as_the_kernel_computes(command, dev, mtu):
    """Without an underlay route tunnels start from 1500 minus their headers; stacked devices inherit."""
    topo = one(f"ip link add e0 type dummy\nip link set e0 mtu 9000\nip link set e0 up\n"
               f"ip addr add 10.0.0.1/24 dev e0\n{command}")
    assert topo.device("r", dev).mtu == mtu


def test_tunnel_mtu_follows_underlay_route():
    """With a route to the remote, ipip takes the underlay MTU minus 20; ip6tnl minus 48 (40 + encap limit)."""
    topo = one("ip link add e0 type dummy\nip link set e0 mtu 9000\nip link set e0 up\nip addr add 10.0.0.1/24 dev e0\n"
               "ip addr add 2001:db8::1/64 dev e0\nip link add t4 type ipip local 10.0.0.1 remote 10.0.0.2\n"
               "ip link add t6 type ip6tnl local 2001:db8::1 remote 2001:db8::2")
    assert topo.device("r", "t4").mtu == 8980 and topo.device("r", "t6").mtu == 8952


def test_graph_edges_are_typed():
    """Graph nodes are (netns, name); edges are keyed peer / lower / master / pppoe / conduit."""
    topo = load_topology(TOPOLOGIES / "dsa.toml")
    g = topo.graph
    assert isinstance(g, nx.MultiDiGraph)
    assert g.has_edge(("router", "lan1"), ("host1", "eth0"), key="peer")
    assert g.has_edge(("router", "lan1"), ("router", "eth0"), key="conduit")
    assert g.has_edge(("router", "br-lan"), ("router", "lan1"), key="master")
    assert g.has_edge(("router", "br-lan.20"), ("router", "br-lan"), key="lower")
    upper = nx.subgraph_view(g, filter_edge=lambda a, b, k: k in UPPER_EDGES)
    assert nx.is_directed_acyclic_graph(upper)
    topo = load_topology(TOPOLOGIES / "pppoe-over-vlan.toml")
    assert topo.graph.has_edge(("cpe", "ppp0"), ("cpe", "eth1.7"), key="pppoe")


def test_bridge_takes_lowest_port_mac_and_smallest_mtu():
    """br_stp_recalculate_bridge_id / br_mtu_auto_adjust unless address or mtu were set."""
    topo = one("ip link add a type veth peer name a2\nip link add b type veth peer name b2\nip link set b mtu 1400\n"
               "ip link add br type bridge\nip link set a master br\nip link set b master br")
    r = topo.netns("r").devices
    assert r["br"].mac == min(r["a"].mac, r["b"].mac) and r["br"].mtu == 1400


def test_bridge_vlan_defaults_and_changes():
    """Ports and the bridge get PVID 1 untagged; vlan add/del changes PVID and untagged; 802.1ad is kept."""
    topo = one("ip link add br type bridge vlan_filtering 1 vlan_protocol 802.1ad\nip link add p type veth peer name q\n"
               "ip link set p master br\nbridge vlan add vid 10-12 dev p\nbridge vlan add vid 20 dev p pvid untagged\n"
               "bridge vlan del vid 1 dev p\nbridge vlan add vid 20 dev br self")
    br = topo.device("r", "br")
    assert br.vlan_protocol == ETH_P_8021AD and br.vlan_filtering
    assert br.get_pvid("p") == 20 and br.vlan_find("p", 20).untagged and br.vlan_find("p", 1) is None
    assert sorted(br.vlan_group("p")) == [10, 11, 12, 20] and not br.vlan_find("p", 11).untagged
    assert br.get_pvid(None) == 1 and br.vlan_find(None, 20) is not None


def test_switchdev_flag_default_and_override():
    """VLANs on DSA ports are 'added by switchdev' unless `switchdev off`; veth ports are not unless `on`."""
    topo = one("ip link add e type ethernet\nip link add lan1 link e type dsa port 1 tagger dsa\n"
               "ip link add v type veth peer name w\nip link add br type bridge vlan_filtering 1\n"
               "ip link set lan1 master br\nip link set v master br\nbridge vlan add vid 5 dev lan1 switchdev off\n"
               "bridge vlan add vid 5 dev v switchdev on")
    br = topo.device("r", "br")
    assert br.vlan_find("lan1", 1).switchdev and not br.vlan_find("lan1", 5).switchdev
    assert not br.vlan_find("v", 1).switchdev and br.vlan_find("v", 5).switchdev


def test_fdb_static_learned_and_vlan_checks():
    """Static entries need the VLAN on the port, survive its removal; learning never moves them."""
    topo = one("ip link add br type bridge vlan_filtering 1\nip link add p type veth peer name q\nip link set p master br\n"
               "bridge vlan add vid 7 dev p\nbridge fdb add 02:00:00:00:00:07 dev p master static vlan 7\n"
               "bridge vlan del vid 7 dev p")
    br = topo.device("r", "br")
    assert br.fdb_find("02:00:00:00:00:07", 7).static
    br.fdb_learn("02:00:00:00:00:07", 7, "other")
    assert br.fdb_find("02:00:00:00:00:07", 7).port == "p"
    assert br.fdb_learn("02:00:00:00:00:08", 1, "p").port == "p"
    with pytest.raises(TopologyError, match="VLAN 9 is not configured on p"):
        one("ip link add br type bridge\nip link add p type veth peer name q\nip link set p master br\n"
            "bridge fdb add 02:00:00:00:00:07 dev p vlan 9")


def test_prelearned_fdb_and_discovered_neighbours():
    """Each bridge learns the MACs behind its ports in their VLAN; neighbours resolve across the segment."""
    topo = load_topology(TOPOLOGIES / "dsa.toml")
    br = topo.device("router", "br-lan")
    ap = topo.device("ap", "eth0").mac
    assert br.fdb_find(ap, 1).port == "lan2" and br.fdb_find(ap, 20).port == "lan2"
    assert br.fdb_find(topo.device("guest", "eth0").mac, 20).port == "lan3"
    neigh = topo.netns("router").neigh
    assert neigh.lookup("br-lan", ip("192.168.1.2")).lladdr == ap
    assert neigh.lookup("br-lan.20", ip("192.168.20.5")).lladdr == topo.device("phone", "wlan0").mac
    assert neigh.lookup("br-lan", ip("192.168.20.4")) is None  # printer's port lacks VLAN 20
    assert topo.netns("host1").neigh.lookup("eth0", ip("192.168.1.1")).lladdr == br.mac


def test_vlan_through_bridge_resolves_neighbour():
    """ns1's eth0.10 and nsr1's br0 (port veth0.10) see each other (selftest row 12)."""
    topo = load_topology(TOPOLOGIES / "bridge-vlan.toml")
    n = topo.netns("nsr1").neigh.lookup("br0", ip("10.0.1.99"))
    assert n.lladdr == topo.device("ns1", "eth0.10").mac and n.valid
    assert topo.device("nsr1", "br0").fdb_find(n.lladdr, 0).port == "veth0.10"


def test_link_delete_removes_peer_and_uppers():
    """ip link del: veth peer and VLAN uppers go; a bridge port leaves the bridge."""
    topo = one("ip link add a type veth peer name b\nip link add link a name a.1 type vlan id 1\n"
               "ip link add br type bridge\nip link set b master br\nip link del a")
    r = topo.netns("r").devices
    assert "a" not in r and "b" not in r and "a.1" not in r and topo.device("r", "br").ports == []


def test_iproute_syntax_variants():
    """Abbreviations, -n/-6 options, flags before `dev`, `ip route change/del`, sysctl lines."""
    topo = one("ip l a e0 type dummy\nip link set up dev e0\nip -6 a add 2001:db8::1/64 dev e0 nodad\n"
               "ip -6 ro add default via 2001:db8::ff dev e0 metric 5 mtu lock 1400\n"
               "ip -6 route change default via 2001:db8::fe dev e0 metric 5\n"
               "ip -n h link add x type dummy\nsysctl -w net.ipv4.ip_forward=1\n"
               "ip route add blackhole 10.9.0.0/16\nip route del 10.9.0.0/16")
    r = topo.netns("r")
    route = r.fib.lookup(ip("2001:db8:5::1"))
    assert str(route.gateway) == "2001:db8::fe" and route.metric == 5
    assert "x" in topo.netns("h").devices and r.sysctl("net.ipv4.ip_forward") == "1"
    assert r.fib.lookup(ip("10.9.1.1")).error != 0 and r.fib.lookup(ip("10.9.1.1")).type == "none"


# ---------------------------------------------------------------------- errors

ERRORS = [
    ("unknown-command.toml", 5, "ifconfig eth0 up", "unknown command"),
    ("bad-address.toml", 7, "ip addr add 10.0.300.1/24 dev eth0", "bad address"),
    ("missing-device.toml", 10, "ip addr add 10.0.0.2/24 dev veth1", "does not exist"),
    ("duplicate-name.toml", 6, "ip link add br0 type bridge vlan_filtering 1", "already exists"),
    ("upper-cycle.toml", 6, "ip link set br0.10 master br0", "cycle of upper devices"),
    ("bridge-in-bridge.toml", 6, "ip link set br0 master br1", "Can not enslave a bridge to a bridge"),
    ("nest-too-deep.toml", 15, "ip link add link br7 name br7.9 type vlan id 9", "would make a chain of 9"),
    ("unknown-kind.toml", 4, "ip link add bond0 type bond mode 802.3ad", "unknown device type"),
    ("bad-gateway.toml", 7, "ip route add default via 10.1.0.1", "not on a connected subnet"),
    ("bad-traffic.toml", 11, "[[traffic]]", "bad proto"),
    ("bad-gso.toml", 15, "[[traffic]]", "bad gso_size 0"),
]


@pytest.mark.parametrize("fixture,line,command,what", ERRORS, ids=[e[0] for e in ERRORS])
def test_errors_name_file_line_command_and_expectation(fixture, line, command, what):
    """Every topology error is one TopologyError with file, absolute line, command and what was expected."""
    path = BAD / fixture
    with pytest.raises(TopologyError) as info:
        load_topology(path)
    exc = info.value
    message = str(exc)
    assert exc.file == str(path) and exc.line == line and exc.command == command
    assert f"{path}:{line}:" in message and f"`{command}`" in message and what in message
    assert "(expected " in message and exc.expected


def _vlan_chain(lower: str, prefix: str, n: int) -> list[str]:
    """*n* VLAN devices stacked on *lower*, each on the one before: PREFIX1 … PREFIXn."""
    return [f"ip link add link {lower if i == 1 else f'{prefix}{i - 1}'} name {prefix}{i} type vlan id {i}"
            for i in range(1, n + 1)]


@pytest.mark.parametrize("below, above, refused", [(5, 3, False), (6, 3, True), (1, 7, False), (2, 7, True)])
def test_nesting_counts_the_chain_below_and_the_chain_above(below, above, refused):
    """__netdev_upper_dev_link refuses a link when dev->lower_level + upper_dev->upper_level > MAX_NEST_DEV (8):
    the devices under the new port and the bridge with the devices stacked on it, one chain of up to 8."""
    commands = ["ip link add br0 type bridge", *_vlan_chain("br0", "u", above - 1),
                "ip link add d1 type dummy", *_vlan_chain("d1", "d1v", below - 1)]
    port = "d1" if below == 1 else f"d1v{below - 1}"
    enslave = f"ip link set {port} master br0"
    if not refused:
        assert one("\n".join([*commands, enslave])).device("r", port).master == "br0"
        return
    with pytest.raises(TopologyError, match=f"would make a chain of {below + above}") as info:
        one("\n".join([*commands, enslave]))
    assert info.value.command == enslave and "-EMLINK" in info.value.expected


def test_a_ppp_unit_is_no_upper_link():
    """pppoe binds its channel to the Ethernet device without netdev_upper_dev_link: a PPPoE unit on the eighth
    device of a chain is accepted (and a bridge port is not: it is an upper link)."""
    commands = ["ip link add d1 type dummy", *_vlan_chain("d1", "v", 7)]
    topo = one("\n".join([*commands, "ip link add ppp0 type pppoe dev v7 session 0x1 peer 02:00:00:00:00:01"]))
    assert "ppp0" in topo.netns("r").devices
    with pytest.raises(TopologyError, match="would make a chain of 9"):
        one("\n".join([*commands, "ip link add link v7 name v8 type vlan id 8"]))


def _mtus(topo, *names: str) -> dict[str, int]:
    return {n: topo.netns("r").devices[n].mtu for n in names}


def test_an_mtu_change_reaches_the_devices_that_follow_it():
    """NETDEV_CHANGEMTU: vlan_device_event and macvlan_device_event bring down the larger VLANs and macvlans above
    (a VLAN on a VLAN in turn), br_device_event re-adjusts the bridge of a port (br_mtu_auto_adjust: the smallest
    port's, 1500 without ports); raising a device raises none of them."""
    base = ["ip link add a type veth peer name b", "ip link add link a name a.5 type vlan id 5",
            "ip link add link a.5 name a.5.6 type vlan id 6", "ip link add link a name m1 type macvlan mode bridge",
            "ip link add br0 type bridge", "ip link add c type veth peer name d", "ip link set c master br0",
            "ip link add link br0 name br0.7 type vlan id 7"]
    topo = one("\n".join([*base, "ip link set a mtu 1400", "ip link set c mtu 1300"]))
    assert _mtus(topo, "a", "a.5", "a.5.6", "m1", "br0", "br0.7", "c") == {
        "a": 1400, "a.5": 1400, "a.5.6": 1400, "m1": 1400, "br0": 1300, "br0.7": 1300, "c": 1300}
    topo = one("\n".join([*base, "ip link set a.5 mtu 1450", "ip link set a mtu 9000", "ip link set c mtu 9000"]))
    assert _mtus(topo, "a", "a.5", "a.5.6", "m1", "br0", "br0.7") == {
        "a": 9000, "a.5": 1450, "a.5.6": 1450, "m1": 1500, "br0": 9000, "br0.7": 1500}
    topo = one("\n".join([*base, "ip link set c mtu 1300", "ip link set c nomaster"]))
    assert _mtus(topo, "br0", "br0.7") == {"br0": 1500, "br0.7": 1300}  # br_del_if: no port, ETH_DATA_LEN


def test_a_bridge_mtu_set_by_hand_stays_and_one_given_at_creation_does_not():
    """br_change_mtu sets BROPT_MTU_SET_BY_USER, which stops br_mtu_auto_adjust; rtnl_create_link sets the MTU
    without it, and dev_set_mtu of the MTU the bridge has does nothing, the flag included."""
    ports = ["ip link add c type veth peer name d", "ip link set c mtu 1400", "ip link set c master br0"]
    by_hand = one("\n".join(["ip link add br0 type bridge", "ip link set br0 mtu 9000", *ports]))
    at_creation = one("\n".join(["ip link add br0 mtu 9000 type bridge", *ports]))
    same = one("\n".join(["ip link add br0 type bridge", "ip link set br0 mtu 1500", *ports]))
    assert [_mtus(t, "br0")["br0"] for t in (by_hand, at_creation, same)] == [9000, 1400, 1400]


@pytest.mark.parametrize("commands, says, errno_name", [
    (["ip link add link lo name lo.5 type vlan id 5"], "VLANs not supported on device lo", "-EOPNOTSUPP"),
    (["ip link add t1 type ipip remote 10.0.0.1 local 10.0.0.2", "ip link add link t1 name t1.5 type vlan id 5"],
     "VLANs not supported on device t1", "-EOPNOTSUPP"),
    (["ip link add a type dummy", "ip link add link a name x type vlan id 5", "ip link add link a name y type vlan id 5"],
     "VLAN device already exists: x is vlan protocol 802.1Q id 5 on a", "-EEXIST"),
    (["ip link add a type dummy", "ip link set a mtu 1400", "ip link add link a name x mtu 1500 type vlan id 5"],
     "MTU 1500 is above the real device a's 1400", "vlan_newlink: -EINVAL"),
    (["ip link add a type dummy", "ip link add link a name x type vlan id 5", "ip link set a mtu 1400",
      "ip link set x mtu 1500"], "MTU 1500 is above the real device a's 1400", "-ERANGE"),
    (["ip link add a type dummy", "ip link add link a name m type macvlan", "ip link set m mtu 9000"],
     "MTU 9000 is above the lower device a's 1500", "macvlan_change_mtu: -EINVAL"),
    (["ip link add a type dummy", "ip link add link a name m mtu 9000 type macvlan"],
     "MTU 9000 is above the lower device a's 1500", "macvlan_common_newlink: -EINVAL"),
    (["ip link add link lo name m type macvlan"], "lo cannot carry macvlans (loopback)", "-EINVAL"),
    (["ip link add br0 type bridge", "ip link add a type dummy", "ip link set a master br0",
      "ip link add link a name m type macvlan"], "a is a port of br0", "-EBUSY"),
    (["ip link add br0 type bridge", "ip link add a type dummy", "ip link add link a name m type macvlan",
      "ip link set a master br0"], "a carries the macvlans m", "br_add_if: -EBUSY"),
    (["ip link add a type dummy", "ip link add link a name m type macvlan mode passthru",
      "ip link add link a name n type macvlan"], "a passthru macvlan is alone on its lower device", "-EINVAL"),
    (["ip link add a type dummy", "ip link add link a name m type macvlan",
      "ip link add link a name n type macvlan mode passthru"], "a has m", "-EINVAL"),
    (["ip link add d type dummy", "ip link add t6 type ip6tnl mode ip6ip6 local 2001:db8::1 remote 2001:db8::2",
      "ip link set t6 mtu 1279"], "MTU 1279 is below IPv6's least, 1280, on the ip6ip6 tunnel t6",
     "ip6_tnl_change_mtu: -EINVAL"),
], ids=["vlan-on-lo", "vlan-on-ipip", "vlan-twice", "vlan-mtu-at-creation", "vlan-mtu-set", "macvlan-mtu-set",
        "macvlan-mtu-at-creation", "macvlan-on-lo", "macvlan-on-bridge-port", "port-with-macvlans",
        "after-passthru", "passthru-after", "ip6ip6-below-1280"])
def test_vlan_and_macvlan_refuse_what_the_kernel_refuses(commands, says, errno_name):
    """vlan_check_real_dev, vlan_newlink / vlan_dev_change_mtu, macvlan_common_newlink / macvlan_port_create /
    macvlan_change_mtu and br_add_if's netdev_rx_handler_register: one error at the command, naming the errno."""
    with pytest.raises(TopologyError, match=re.escape(says)) as info:
        one("\n".join(commands))
    assert info.value.command == commands[-1] and errno_name in info.value.expected


def test_ipv6_stops_on_a_link_below_1280():
    """addrconf_notify (NETDEV_CHANGEMTU below IPV6_MIN_MTU) → addrconf_ifdown: the device's IPv6 addresses and the
    IPv6 routes through it go and do not come back with a larger MTU; IPv4 stays.  ipv6_add_dev then refuses a new
    IPv6 address (-EINVAL)."""
    topo = one("ip link add d type dummy\nip link set d up\nip addr add 10.0.0.1/24 dev d\n"
               "ip addr add 2001:db8::1/64 dev d\nip route add 2001:db8:9::/64 via 2001:db8::2 dev d\n"
               "ip route add 10.9.0.0/16 via 10.0.0.2 dev d\nip -6 route add 2001:db8:8::/64 dev d\n"
               "ip link set d mtu 1000\nip link set d mtu 1500\n"
               "ip link add e type dummy\nip link set e up\nip -6 route add 2001:db8:7::/64 dev e\n"
               "ip link set e mtu 1000")  # no IPv6 address on e: its IPv6 routes go all the same
    r = topo.netns("r")
    assert [str(a.local) for a in r.devices["d"].addrs] == ["10.0.0.1/24"]
    assert r.fib.lookup(ip("2001:db8:9::1")).error != 0 and r.fib.lookup(ip("2001:db8:8::1")).error != 0
    assert r.fib.lookup(ip("2001:db8:7::1")).error != 0
    assert r.fib.lookup(ip("10.9.1.1")).dev == "d"
    with pytest.raises(TopologyError, match="d has MTU 1000, below IPv6's least") as info:
        one("ip link add d type dummy\nip link set d mtu 1000\nip addr add 2001:db8::1/64 dev d")
    assert "ipv6_add_dev: -EINVAL" in info.value.expected
    assert one("ip link add d type dummy\nip link set d mtu 1000\nip addr add 10.0.0.1/24 dev d")


def test_an_ip6tnl_of_another_mode_may_go_below_1280():
    """ip6_tnl_change_mtu: the IPv6 minimum holds for proto IPPROTO_IPV6 (mode ip6ip6) only; ipip6 and any take
    ETH_MIN_MTU."""
    topo = one("ip link add t6 type ip6tnl mode ipip6 local 2001:db8::1 remote 2001:db8::2\nip link set t6 mtu 1000\n"
               "ip link add t7 type ip6tnl mode ip6ip6 local 2001:db8::1 remote 2001:db8::3\nip link set t7 mtu 1280")
    assert _mtus(topo, "t6", "t7") == {"t6": 1000, "t7": 1280}


def test_a_macvlan_on_a_macvlan_is_made_on_the_real_device():
    """macvlan_common_newlink: "use the real device as the lowerdev"; its MTU is that device's."""
    topo = one("ip link add a type dummy\nip link set a mtu 1400\nip link add link a name m1 type macvlan\n"
               "ip link add link m1 name m2 type macvlan mode bridge")
    m2 = topo.netns("r").devices["m2"]
    assert m2.lower == "a" and m2.mtu == 1400 and {d.name for d in topo.uppers(topo.netns("r").devices["a"])} == {
        "m1", "m2"}


def test_invalid_toml_and_unknown_key_name_their_line():
    """TOML syntax errors and misspelt keys also name the file and line."""
    with pytest.raises(TopologyError) as info:
        load_topology(BAD / "bad-toml.toml")
    assert info.value.line == 2 and "bad-toml.toml:2" in str(info.value)
    with pytest.raises(TopologyError) as info:
        load_topology(BAD / "unknown-key.toml")
    assert info.value.line == 3 and "comands" in str(info.value)


def test_unreadable_file():
    """A missing file is a TopologyError naming it."""
    with pytest.raises(TopologyError, match="cannot read"):
        load_topology(BAD / "nope.toml")


def test_errors_in_array_commands_and_continuations():
    """Commands given as an array, or continued with a backslash, still report their own line."""
    text = "[netns.r]\ncommands = [\n  'ip link add e0 type dummy',\n  'ip link set e9 up',\n]\n"
    with pytest.raises(TopologyError) as info:
        load_topology_text(text, "arr.toml")
    assert info.value.line == 4
    text = "[netns.r]\ncommands = '''\nip link add e0 \\\n   type dummy\nip addr add 1.2.3 dev e0\n'''\n"
    with pytest.raises(TopologyError) as info:
        load_topology_text(text, "cont.toml")
    assert info.value.line == 5 and info.value.command == "ip addr add 1.2.3 dev e0"


@pytest.mark.parametrize("command,what", [
    ("ip link add v type vlan id 5", "'link DEV'"),
    ("ip link add link lo name v type vlan id 5000", "0..4094"),
    ("ip link add p type pppoe dev lo session 1", "dev, session and peer"),
    ("ip link add d link lo type dsa port 1 tagger nope", "tagger"),
    ("ip link add t type ipip remote 2001:db8::1", "IPv4"),
    ("ip neigh add 10.0.0.9 dev lo", "Ethernet"),
    ("ip route add 10.0.0.1/24 dev lo", "no host bits"),
    ("ip link set lo netns nowhere", "namespace"),
    ("bridge vlan add vid 5 dev lo", "not a bridge port"),
    ("ip link add v type veth", "peer"),
])
def test_bad_commands_say_what_was_expected(command, what):
    """Kind-specific syntax errors name the command and what was expected."""
    with pytest.raises(TopologyError) as info:
        one(command)
    assert info.value.command == command and what in str(info.value)


def test_selftest_lines_paste_as_they_are():
    """`ip link add … netns NS … peer … netns NS`, `ip -net NS …` and `ip netns exec NS …` work from any table."""
    text = ("[netns.init]\ncommands = '''\nip link add veth0 netns nsr1 type veth peer name eth0 netns ns1\n"
            "ip -net nsr1 link set veth0 up\nip -net nsr1 addr add 10.0.1.1/24 dev veth0\n"
            "ip netns exec nsr1 sysctl net.ipv4.conf.veth0.forwarding=1\n'''\n[netns.nsr1]\n[netns.ns1]\n")
    topo = load_topology_text(text, "paste.toml")
    assert topo.device("nsr1", "veth0").addrs[0].ip == ip("10.0.1.1")
    assert topo.peer(topo.device("nsr1", "veth0")).netns == "ns1"
    assert topo.netns("nsr1").sysctl("net.ipv4.conf.veth0.forwarding") == "1"


@pytest.mark.parametrize("section", ["traffic", "event"])
def test_arrays_of_tables_must_hold_tables(section):
    """`traffic = [1]` / `event = [1]` is one TopologyError naming the file and line, not a crash."""
    text = f'{section} = [1]\n[netns.r]\ncommands = "ip link set lo up"\n'
    with pytest.raises(TopologyError, match=rf"t\.toml:1: {section} entries must be tables"):
        load_topology_text(text, "t.toml")


# ---------------------------------------------------------------------- bad inputs (issue 15)

BAD_INPUTS = [
    ("bad-utf8.toml", 3, "not UTF-8: byte 0xe9 at offset 86"),
    ("bad-nesting.toml", 2, "nested too deeply"),
    ("bad-netns-name.toml", 2, "namespace name '../../x' contains '/'"),
    ("bad-netns-empty.toml", 3, "empty namespace name"),
    ("bad-dev-name.toml", 4, "device name 'eth0:1' contains ':'"),
    ("bad-peer-name.toml", 5, "device name 'v 1' contains ' '"),
    ("bad-rate-nan.toml", 15, "bad rate nan"),
    ("bad-rate-tiny.toml", 15, "rate 1e-300 spreads 10 packets"),
    ("bad-start-inf.toml", 15, "bad start inf: not finite"),
    ("bad-start-huge.toml", 15, "bad start 10000000.0: beyond 1000000 s"),
    ("bad-event-at.toml", 10, "bad at nan: not finite"),
    ("bad-traffic-type.toml", 2, "traffic entries must be tables"),
    ("bad-traffic-table.toml", 9, "traffic must be an array of tables"),
    ("duplicate-traffic.toml", 17, "duplicate traffic name 't'"),
    ("bad-sysctls.toml", 3, "sysctls must be a table or an array"),
    ("bad-commands-type.toml", 3, "commands must be a string or an array of strings"),
    ("bad-nft-type.toml", 3, "nft must be a string"),
    ("bad-to-type.toml", 13, "bad address 5"),
    ("bad-from-type.toml", 12, "no namespace ['r']"),
    ("bad-netns-exec-depth.toml", 4, "command nested too deeply"),
    ("bad-sport-flows.toml", 16, "flows = 3 from sport 65535 run past port 65535"),
]


@pytest.mark.parametrize("fixture,line,what", BAD_INPUTS, ids=[b[0] for b in BAD_INPUTS])
def test_bad_inputs_are_one_located_error(fixture, line, what):
    """Each class of bad input is one TopologyError with the file, the line and what was expected."""
    path = BAD / fixture
    with pytest.raises(TopologyError) as info:
        load_topology(path)
    exc = info.value
    assert exc.file == str(path) and exc.line == line
    assert str(exc).startswith(f"{path}:{line}: ") and what in str(exc) and exc.expected


@pytest.mark.parametrize("name,ok", [
    ("eth0", True), ("a" * 15, True), ("é" * 7, True), ("a" * 16, False), ("é" * 8, False), ("", False),
    (".", False), ("..", False), ("...", True), ("a/b", False), ("a:b", False), ("a\tb", False),
    ("a\x00", False), ("à", False),  # à is C3 A0 in UTF-8: A0 is a space to the kernel's isspace (lib/ctype.c)
])
def test_device_names_as_dev_valid_name(name, ok):
    """ip link add accepts a name exactly when net/core/dev.c's dev_valid_name does (bytes, IFNAMSIZ 16)."""
    text = f"[netns.r]\ncommands = [{json.dumps(f'ip link add {shlex.quote(name)} type dummy')}]\n"
    if ok:
        assert name in load_topology_text(text, "t.toml").netns("r").devices
    else:
        with pytest.raises(TopologyError, match="dev_valid_name|IFNAMSIZ") as info:  # Args.name or new_device
            load_topology_text(text, "t.toml")
        assert info.value.line == 2


@pytest.mark.parametrize("name,ok", [
    ("r", True), ("a" * 255, True), ("a" * 256, False), ("", False), (".", False), ("..", False),
    ("a/b", False), ("a b", True), ("a:b", True), ("a\x00b", False),
])
def test_namespace_names_as_ip_netns_add(name, ok):
    """[netns.NAME] accepts what iproute2's invalid_name (ip/ipnetns.c) does: a file name of NAME_MAX bytes."""
    text = f"[netns.{json.dumps(name)}]\n"
    if ok:
        assert name in load_topology_text(text, "t.toml").namespaces
    else:
        with pytest.raises(TopologyError, match=r"ip netns add") as info:
            load_topology_text(text, "t.toml")
        assert info.value.line == 1


@pytest.mark.parametrize("key,value,what", [
    ("rate", "-1", "bad rate -1"), ("rate", "true", "bad rate True"), ("rate", "inf", "bad rate inf"),
    ("start", "-1", "negative"), ("start", "'1'", "not a number"), ("start", "1e6", None),
    ("rate", "1e-5", None), ("rate", "9e-6", "spreads 10 packets"), ("to", "4294967297", "bad address"),
    ("src", "[1]", "bad address [1]"), ("name", "{ a = 1 }", "traffic name must be a non-empty string"),
])
def test_traffic_values_are_typed_and_bounded(key, value, what):
    """Traffic values of the wrong type or out of the bounded virtual time are refused at their line."""
    fields = {"name": '"t"', "proto": '"udp"', "from": '"r"', "to": '"10.0.0.2"', "dport": "9", key: value}
    text = ("[netns.r]\ncommands = ['ip link add e0 type dummy', 'ip addr add 10.0.0.1/24 dev e0']\n[[traffic]]\n"
            + "".join(f"{k} = {v}\n" for k, v in fields.items()))
    if what is None:
        load_topology_text(text, "t.toml")
        return
    with pytest.raises(TopologyError, match=re.escape(what)) as info:
        load_topology_text(text, "t.toml")
    assert info.value.line == 4 + list(fields).index(key)


@pytest.mark.parametrize("text,what", [
    ("[netns.r]\nsysctls = { a = { b = [1, 2] } }\n", "bad sysctl a.b = [1, 2]"),
    ("[netns.r]\nsysctls = { a = 1979-05-27 }\n", "bad sysctl a = datetime.date(1979, 5, 27)"),
    ("[netns.r]\nsysctls = { a = 18446744073709551616 }\n", "bad sysctl a = 18446744073709551616"),
    ("[netns.r]\nsysctls = [1]\n", "bad sysctl 1"),
    ("[netns.r]\nsysctls = ['=1']\n", "bad sysctl '=1'"),
    ('netns = "r"\n', "netns must be a table of namespaces"),
    ("[netns]\nr = { commands = 'ip link add e0:1 type dummy' }\n", "contains ':'"),
    ('[netns.r]\n[[event]]\nat = 1\nnetns = ["r"]\ncommand = "ip link set lo up"\n', "no namespace ['r']"),
])
def test_wrong_types_are_errors_not_tracebacks(text, what):
    """Values of the wrong type anywhere in the file are one TopologyError with a line."""
    with pytest.raises(TopologyError, match=re.escape(what)) as info:
        load_topology_text(text, "t.toml")
    assert info.value.line is not None


@pytest.mark.parametrize("text,line,what", [
    ("[netns.r]\ncommands = '''\nip link set lo up\n", 3, "invalid TOML"),  # "at end of document": no line in it
    ("[netns.r]\n[ntens.r]\n", 2, "unknown key 'ntens'"),  # a misspelt table is a key of the top table
    ("[netns.r]\n[netns.r.extra]\n", 2, "unknown key 'extra' in [netns.r]"),
    ("netns = { r = { comands = '' } }\n", 1, "unknown key 'comands' in [netns.r]"),
])
def test_errors_found_by_fuzzing_name_a_line(text, line, what):
    """Errors the mutation fuzz found without a line number now name one (tests/test_config_fuzz.py)."""
    with pytest.raises(TopologyError, match=re.escape(what)) as info:
        load_topology_text(text, "t.toml")
    assert info.value.line == line
