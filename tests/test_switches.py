"""Each profile switch changes something observable in every profile where it can: one table per switch.

Every test reads the *named* profiles as they are (never ``derive``), one row per profile, so flipping a
switch in ``flowsim/profiles.py`` turns some row red.  ``make mutation`` (tools/mutation.py) checks that
for every switch of every profile; these tests close the flips the rest of the suite did not see.
Rows of profiles where a switch is unreachable (tools/mutation.py ``EQUIVALENT``) document the behaviour
there all the same.
"""

from __future__ import annotations

import collections
import ipaddress
from pathlib import Path

import pytest
from frames import L4, V4, eth, ip, outer, pppoe
from scapy.layers.inet import IP, TCP

from flowsim.config.topology import load_topology_text
from flowsim.kernel.flowtable.path import FlowtableRef, resolve_path
from flowsim.kernel.flowtable.tuple import flow_tuple_from_skb
from flowsim.kernel.skb import skb_from_frame
from flowsim.profiles import PROFILES, get_profile
from flowsim.sim.report import build_report
from flowsim.sim.simulation import Simulation

TOPOLOGIES = Path(__file__).resolve().parent.parent / "topologies"


def _edit(text: str, *replacements: tuple[str, str]) -> str:
    for old, new in replacements:
        assert text.count(old) >= 1, old
        text = text.replace(old, new)
    return text


def _parse(frame: bytes, profile: str):
    return flow_tuple_from_skb(skb_from_frame(frame, iif=5), iifidx=5, profile=get_profile(profile))


def test_every_named_profile_has_a_row():
    """The tables below cover every named profile of flowsim.profiles (a new one must say what its switches do)."""
    for table in (IHL_BELOW_5, IPIP_IN_PPPOE, TAG_AFTER_TWO_ENCAPS, QINQ_TAG_ORDER, BRIDGED_LAN_INTO_TUNNEL,
                  FLOWTABLE_ABSENT_DEVICE, FIXUP_CT_TIMEOUT, ADVMSS_MTU, ICMP_MSGS_DEFAULT, ICMPV6_RATELIMIT,
                  CT_OFFLOAD_TIMEOUT):
        assert set(table) == set(PROFILES)


# --- ip4_tunnel_ihl_check: 025a41e76b51 (CVE-2026-72417, 7.1.5) -----------------------------------------------
# nf_flow_ip4_tunnel_proto (from 6.19, with ipip_rx) gains an explicit IHL < 5 check; before it, IHL 4 gives a
# 16-byte header that ip_has_options refuses.  Without ipip_rx (≤ 6.18) nf_flow_tuple_ip refuses it as options.
IHL_BELOW_5 = {
    "linux-6.1": "ip-options",
    "linux-6.12": "ip-options",
    "linux-6.18": "ip-options",
    "linux-6.19": "ip-options",
    "linux-7.0": "ip-options",
    "linux-7.1.5": "ip-ihl-invalid",
    "linux-7.2": "ip-ihl-invalid",
    "linux-7.3": "ip-ihl-invalid",
}


@pytest.mark.parametrize("profile,reason", sorted(IHL_BELOW_5.items()))
def test_ipv4_ihl_below_5(profile, reason):
    """An IPv4 header with IHL 4 leaves the hook with the reason of nf_flow_ip4_tunnel_proto's check, if any."""
    frame = eth(IP(src=V4[0], dst=V4[1], ihl=4) / TCP())
    assert _parse(frame, profile).reason == reason


# --- tuple_encap_pppoe_proto: nf_flow_tuple_encap (nf_flow_table_ip.c) -------------------------------------------
# For a PPPoE-carried packet mainline through 7.2.13 compares the raw PPP protocol (0x0021) with ETH_P_IP, so the
# tunnel fields of an IPIP packet out of PPPoE stay empty; 7.3's ctx->ether_type rework compares the mapped ethertype
# and fills them.  Before 6.19 (no ipip_rx) the outer header is the flow's and protocol 4 is not offloaded.
IPIP_IN_PPPOE = {
    "linux-6.1": ("l4proto-unsupported", None),
    "linux-6.12": ("l4proto-unsupported", None),
    "linux-6.18": ("l4proto-unsupported", None),
    "linux-6.19": (None, False),
    "linux-7.0": (None, False),
    "linux-7.1.5": (None, False),
    "linux-7.2": (None, False),
    "linux-7.3": (None, True),
}


@pytest.mark.parametrize("profile,expected", sorted(IPIP_IN_PPPOE.items()))
def test_ipip_in_pppoe_tunnel_fields(profile, expected):
    """IPIP inside a PPPoE session: whether nf_flow_tuple_encap fills the tuple's tunnel fields (reason, filled)."""
    res = _parse(eth(pppoe(0x77, 0x0021) / outer(4) / ip(4) / L4["tcp"]()), profile)
    assert (res.reason, res.tuple.tun is not None if res.ok else None) == expected


# --- bridge_tag_encap_check: nft_dev_path_info's DEV_PATH_BRIDGE TAG branch (nf_flow_table_path.c, 6.19) ----------
# PPPoE over an 802.1ad VLAN over an 802.1Q VLAN-filtering bridge: the bridge TAGs the frame with its PVID
# (br_vlan_fill_forward_path_pvid: the context VLAN is not of the bridge's protocol) after two encaps are
# recorded.  Before 6.19 the third one is written past encap[NF_FLOW_TABLE_ENCAP_MAX]; from 6.19 the TAG branch
# checks and fails the entry, which 7.0 then overrides with the ETHERNET entry's indev (it keeps walking) and the
# June-2026 rework (path_failure=no-flow) turns into no flow.
PPPOE_OVER_QINQ_BRIDGE = """
[netns.r]
commands = '''
ip link add br0 type bridge vlan_filtering 1
ip link add eth0 type veth peer name eth0 netns h
ip link set eth0 master br0
bridge vlan del dev eth0 vid 1
bridge vlan add dev eth0 vid 1
ip link add link br0 name v1 type vlan id 100 protocol 802.1ad
ip link set br0 up
ip link set eth0 up
ip link set v1 up
ip link add ppp0 type pppoe dev v1 session 7 peer 02:00:00:00:00:07
ip link set ppp0 up
ip addr add 100.64.0.2 peer 100.64.0.1/32 dev ppp0
ip route add default dev ppp0
bridge fdb add 02:00:00:00:00:07 dev eth0 vlan 1 master static
'''
nft = 'table inet t { flowtable ft { hook ingress priority 0; devices = { eth0 } } }'

[netns.h]
commands = 'ip link set eth0 up'
"""

# profile → (number of encaps recorded, the direction's error function or None)
TAG_AFTER_TWO_ENCAPS = {
    "linux-6.1": (3, None),
    "linux-6.12": (3, None),
    "linux-6.18": (3, None),
    "linux-6.19": (2, None),
    "linux-7.0": (2, None),
    "linux-7.1.5": (2, "nft_dev_path_info"),
    "linux-7.2": (2, "nft_dev_path_info"),
    "linux-7.3": (2, "nft_dev_path_info"),
}


@pytest.mark.parametrize("profile,expected", sorted(TAG_AFTER_TWO_ENCAPS.items()))
def test_bridge_tag_after_two_encaps(profile, expected):
    """A bridge TAG entry after two encaps: written past the array (≤ 6.18) or refused by nft_dev_path_info."""
    ns = load_topology_text(PPPOE_OVER_QINQ_BRIDGE, "inline.toml").netns("r")
    dst = ipaddress.ip_address("8.8.8.8")
    p = resolve_path(ns, ns.fib.lookup(dst), dst, FlowtableRef("ft", {"eth0"}), get_profile(profile))
    assert [(e.type.name, e.dev) for e in p.stack] == [("PPPOE", "ppp0"), ("VLAN", "v1"), ("BRIDGE", "br0"),
                                                        ("ETHERNET", "eth0")]
    assert p.stack[2].bridge.vlan_mode.name == "TAG"
    assert (len(p.info.encaps), p.error.func if p.error else None) == expected


# --- encap_push_order: nf_flow_encap_push / nf_flow_vlan_push (nf_flow_table_ip.c) -------------------------------
# The router reaches ns1 through QinQ devices veth0.10.20 (outer VID 10, inner VID 20); the flow's encaps are
# recorded outermost first.  ≤ 6.18 hands the packet to the VLAN devices (neigh_xmit), which tag in order; 6.19's
# generic push starts from entry 0, so the fast path puts VID 20 outside (reverse QinQ order) and ns1 has no VLAN
# device for it; the April-2026 fix pushes innermost first.
QINQ_DOWNLOAD = """
[netns.r]
commands = '''
ip link add veth0 type veth peer name eth0 netns ns1
ip link add veth1 type veth peer name eth0 netns ns2
ip link set veth0 up
ip link set veth1 up
ip link add link veth0 name veth0.10 type vlan id 10
ip link add link veth0.10 name veth0.10.20 type vlan id 20
ip link set veth0.10 up
ip link set veth0.10.20 up
ip addr add 203.0.113.1/24 dev veth0.10.20
ip addr add 198.51.100.1/24 dev veth1
'''
sysctls = { "net.ipv4.ip_forward" = 1 }
nft = '''
table inet filter {
  flowtable ft {
    hook ingress priority 0
    devices = { veth0, veth1 }
  }
  chain forward {
    type filter hook forward priority 0; policy accept;
    meta l4proto tcp flow add @ft
  }
}
'''

[netns.ns1]
commands = '''
ip link set eth0 up
ip link add link eth0 name eth0.10 type vlan id 10
ip link add link eth0.10 name eth0.10.20 type vlan id 20
ip link set eth0.10 up
ip link set eth0.10.20 up
ip addr add 203.0.113.2/24 dev eth0.10.20
ip route add default via 203.0.113.1
'''

[netns.ns2]
commands = '''
ip link set eth0 up
ip addr add 198.51.100.2/24 dev eth0
ip route add default via 198.51.100.1
'''

[[traffic]]
name = "tcp-download"
proto = "tcp"
from = "ns1"
to = "198.51.100.2"
dport = 5201
packets = 3
reply_packets = 20
"""

# profile → ({(outer VID, inner VID): frames ns1 receives}, drops)
QINQ_TAG_ORDER = {
    "linux-6.1": ({(10, 20): 29}, {}),
    "linux-6.12": ({(10, 20): 29}, {}),
    "linux-6.18": ({(10, 20): 29}, {}),
    "linux-6.19": ({(10, 20): 7, (20, 10): 21}, {"vlan-no-device": 21}),
    "linux-7.0": ({(10, 20): 29}, {}),
    "linux-7.1.5": ({(10, 20): 29}, {}),
    "linux-7.2": ({(10, 20): 29}, {}),
    "linux-7.3": ({(10, 20): 29}, {}),
}


@pytest.mark.parametrize("profile,expected", sorted(QINQ_TAG_ORDER.items()))
def test_qinq_tag_order_of_the_fast_path(profile, expected):
    """The VLAN tags of the frames ns1 receives from the router, and what it drops, per nf_flow_encap_push order."""
    frames = []
    sim = Simulation(load_topology_text(QINQ_DOWNLOAD, "inline.toml"), get_profile(profile))
    sim.kernel.capture = lambda netns, dev, frame: frames.append(frame) if (netns, dev) == ("ns1", "eth0") else None
    sim.run()
    assert all(f[12:14] == f[16:18] == b"\x81\x00" for f in frames)
    tags = collections.Counter((int.from_bytes(f[14:16], "big"), int.from_bytes(f[18:20], "big")) for f in frames)
    assert (dict(tags), build_report(sim)["drops"]) == expected


# --- tunnel_push_dst: nf_flow_tunnel_v4_push / nf_flow_tunnel_v6_push (nf_flow_table_ip.c) -----------------------
# ipip.toml with nsr1's LAN side behind a bridge br0: the reply tuple (tunnel → LAN) is DIRECT xmit through the
# bridge and, from 6.19, keeps no route.  The push into the tunnel reads the route of the *opposite* tuple
# (dst_cache in the runtime union; the bug 'move dst_cache/dst_cookie out of the runtime union' fixes), finds none
# and the packet is lost (kernel-bug); reading this direction's route works (7.2.13: nf_flow_offload_ip_hook passes
# tuplehash->tuple.dst_cache, which flow_offload_fill_route keeps for a DIRECT tuple pushing a tunnel).  IPv6 via
# tun6 from 7.0.
def _bridged_ipip() -> str:
    return _edit((TOPOLOGIES / "ipip.toml").read_text(),
                 ("ip addr add 10.0.1.1/24 dev veth0\nip addr add dead:1::1/64 dev veth0 nodad\nip link set veth0 mtu 9000",
                  "ip link set veth0 mtu 9000\nip link add br0 type bridge\nip link set br0 mtu 9000\n"
                  "ip link set veth0 master br0\nip link set br0 up\nip addr add 10.0.1.1/24 dev br0\n"
                  "ip addr add dead:1::1/64 dev br0 nodad"),
                 ('meta oif "veth0" tcp sport', 'meta oif "br0" tcp sport'),
                 ('sysctls = { "net.ipv4.conf.veth0.forwarding" = 1,',
                  'sysctls = { "net.ipv4.conf.br0.forwarding" = 1, "net.ipv4.conf.veth0.forwarding" = 1,'))


# profile → (drops, packets delivered to ns2 of the 204 tcp-12345 and the 204 tcp6-12345 sends)
BRIDGED_LAN_INTO_TUNNEL = {
    "linux-6.1": ({}, (204, 204)),
    "linux-6.12": ({}, (204, 204)),
    "linux-6.18": ({}, (204, 204)),
    "linux-6.19": ({"kernel-bug": 193}, (10, 204)),
    "linux-7.0": ({"kernel-bug": 386}, (10, 10)),
    "linux-7.1.5": ({"kernel-bug": 386}, (10, 10)),
    "linux-7.2": ({}, (204, 204)),
    "linux-7.3": ({}, (204, 204)),
}


@pytest.mark.parametrize("profile,expected", sorted(BRIDGED_LAN_INTO_TUNNEL.items()))
def test_tunnel_push_from_a_bridged_lan(profile, expected):
    """From a bridged LAN into IPIP/IP6IP6: nf_flow_tunnel_v4_push/v6_push find no route and lose the packets."""
    sim = Simulation(load_topology_text(_bridged_ipip(), str(TOPOLOGIES / "ipip.toml")), get_profile(profile))
    sim.run()
    r = build_report(sim)
    delivered = tuple(t["directions"]["original"]["delivered"] for t in r["traffic"])
    assert (r["drops"], delivered) == expected


# --- flowtable_absent_device: 6d07a289504a + a331b78a5525 (6.16) -----------------------------------------------
# nft_netdev_hook_alloc returned -ENOENT for a flowtable device the namespace does not have, so nft refused the
# whole ruleset ("Could not process rule: No such file or directory"); from 6.16 the hook is created without it
# and nft_flowtable_event binds it at NETDEV_REGISTER.  The UDP flows of conform-udp-idle offload as without it (86).
FLOWTABLE_ABSENT_DEVICE = {
    "linux-6.1": "refused at 32:31",
    "linux-6.12": "refused at 32:31",
    "linux-6.18": "unbound wan9, fastpath 86",
    "linux-6.19": "unbound wan9, fastpath 86",
    "linux-7.0": "unbound wan9, fastpath 86",
    "linux-7.1.5": "unbound wan9, fastpath 86",
    "linux-7.2": "unbound wan9, fastpath 86",
    "linux-7.3": "unbound wan9, fastpath 86",
}


@pytest.mark.parametrize("profile,expected", sorted(FLOWTABLE_ABSENT_DEVICE.items()))
def test_flowtable_listing_an_absent_device(profile, expected):
    """nft_netdev_hook_alloc: a missing flowtable device refuses the ruleset before 6.16, stays unbound after."""
    from flowsim.errors import RulesetError
    text = _edit((TOPOLOGIES / "conform-udp-idle.toml").read_text(),
                 ("devices = { veth0, veth1 }", "devices = { veth0, veth1, wan9 }"))
    topo = load_topology_text(text, "absent.toml")
    try:
        sim = Simulation(topo, profile).run()
    except RulesetError as exc:
        assert "No such file or directory" in str(exc) and exc.value == "wan9"
        got = f"refused at {exc.line}:{exc.column}"
    else:
        unbound = [dev for _ft, dev in sim.unbound_devices["r"]]
        fastpath = build_report(sim)["flowtables"][0]["fastpath"]
        got = f"unbound {' '.join(unbound)}, fastpath {fastpath}"
    assert got == expected


# --- fixup_ct_timeout: flow_offload_fixup_ct (nf_flow_table_core.c) as Debian's 6.1.192 / 6.12.117 sources and the
# 6.14 CLOSING rework have it.  A UDP flow torn down before it expired (a stale route), whose entry never saw a
# reply: the seconds its conntrack entry has left.
FIXUP_CT_TIMEOUT = {
    "linux-6.1": 90.0,    # udp_timeouts[UDP_CT_REPLIED] - offload timeout, replied or not
    "linux-6.12": 0.0,    # udp_timeouts[UDP_CT_UNREPLIED] - offload timeout
    "linux-6.18": 30.0,   # udp_timeouts[UDP_CT_UNREPLIED]: the flow had not expired
    "linux-6.19": 30.0,
    "linux-7.0": 30.0,
    "linux-7.1.5": 30.0,
    "linux-7.2": 30.0,
    "linux-7.3": 30.0,
}


@pytest.mark.parametrize("profile,left", sorted(FIXUP_CT_TIMEOUT.items()))
def test_teardown_of_an_unreplied_udp_flow(profile, left):
    from flowsim.config.topology import load_topology
    from flowsim.kernel.conntrack import CtTuple
    from flowsim.kernel.flowtable.core import flow_offload_alloc
    from flowsim.kernel.stack.core import Kernel

    k = Kernel(load_topology(TOPOLOGIES / "conform-forward.toml"), get_profile(profile))
    st = k.netns["r"]
    orig = CtTuple(ipaddress.ip_address("10.0.1.99"), ipaddress.ip_address("10.0.2.99"), 40000, 5201, 2, 17)
    ct = st.conntrack.nf_conntrack_in(orig, 0.0, length=100).entry
    st.conntrack.nf_conntrack_confirm(ct, 0.0)
    ct.timeout = k.now + 86400.0  # offloaded: a day (flow_offload_add)
    flow = flow_offload_alloc(ct)
    flow.timeout = k.now + 30.0   # alive: the teardown is not the GC's expiry
    ft = next(iter(st.flowtables.values()))
    ft.flow_offload_teardown(flow, k, st, "route obsolete")
    assert ct.timeout - k.now == left


# --- advmss_mtu: ipv4_default_advmss / ip6_default_advmss (net/ipv4/route.c, net/ipv6/route.c).  A second
# connection to an address whose path MTU (1500) the host learned from the first one's ICMP: the MSS its SYN
# announces, as the server parsed it.
ADVMSS_MTU = {
    "linux-6.1": 1460,   # ipv4_mtu(dst): the learned path MTU
    "linux-6.12": 1460,  # 6.12.118 dropped ip_dst_mtu_configured again: ipv4_mtu(dst), as 6.1
    "linux-6.18": 8960,  # ip_dst_mtu_configured(dst): the device's 9000
    "linux-6.19": 8960,
    "linux-7.0": 8960,
    "linux-7.1.5": 8960,
    "linux-7.2": 8960,
    "linux-7.3": 8960,
}


@pytest.mark.parametrize("profile,announced", sorted(ADVMSS_MTU.items()))
def test_mss_announced_after_a_learned_path_mtu(profile, announced):
    from tests.test_pmtu_exceptions import _run
    second = next(c for c in _run(profile).conversations if c.spec.name == "second")
    assert second.server.mss_clamp == announced


# --- icmp_msgs_default: icmp_sk_init (net/ipv4/icmp.c).  60 datagrams back to back with a TTL of 1, with no
# limit per destination (net.ipv4.icmp_ratelimit = 0): the host-wide bucket's burst of time exceeded errors.
ICMP_MSGS_DEFAULT = {
    "linux-6.1": 50,
    "linux-6.12": 50,
    "linux-6.18": 50,
    "linux-6.19": 50,
    "linux-7.0": 50,
    "linux-7.1.5": 50,
    "linux-7.2": 60,   # a burst of 10000
    "linux-7.3": 60,
}


@pytest.mark.parametrize("profile,sent", sorted(ICMP_MSGS_DEFAULT.items()))
def test_host_wide_icmp_burst(profile, sent):
    from tests.test_icmp_limit import errors
    assert errors("203.0.113.7", profile, sysctls=', "net.ipv4.icmp_ratelimit" = 0', packets=60, ttl=1)[0] == sent


# --- icmpv6_ratelimit: icmpv6_xrlim_allow (net/ipv6/icmp.c), 0201eedb69b2.  20 datagrams 50 ms apart to a
# destination the router has no route for, its route back a /64: the errors it sends.
ICMPV6_RATELIMIT = {
    "linux-6.1": 9,    # 1000 ms >> 2 = 62 jiffies
    "linux-6.12": 9,
    "linux-6.18": 9,
    "linux-6.19": 9,
    "linux-7.0": 15,   # 100 ms, 25 jiffies
    "linux-7.1.5": 15,
    "linux-7.2": 15,
    "linux-7.3": 15,
}


@pytest.mark.parametrize("profile,sent", sorted(ICMPV6_RATELIMIT.items()))
def test_icmpv6_errors_per_destination(profile, sent):
    from tests.test_icmp_limit import errors
    assert errors("2001:db8:9::7", profile, rate="rate = 20")[0] == sent


# --- ct_offload_timeout: nf_flow_table_extend_ct_timeout (6.12.118, 6.14+) against 6.1's nf_ct_offload_timeout.
# One GRE packet every 20 s for a day and a third (tests/test_gre.py): the flows created.  The flowtable GC's switch
# has no GRE case (WARN_ON_ONCE, a jiffy): the entry dies a day after flow add and the flow is made again.
CT_OFFLOAD_TIMEOUT = {
    "linux-6.1": 1,  # nf_ct_offload_timeout: another day whenever under half a day is left
    "linux-6.12": 2,
    "linux-6.18": 2,
    "linux-6.19": 2,
    "linux-7.0": 2,
    "linux-7.1.5": 2,
    "linux-7.2": 2,
    "linux-7.3": 2,
}


@pytest.mark.parametrize("profile,flows", sorted(CT_OFFLOAD_TIMEOUT.items()))
def test_offloaded_gre_entry_after_a_day(profile, flows):
    from tests.test_gre import day_long
    sim, _ = day_long(profile)
    assert sim.kernel.netns["r"].flowtables["ft"].flows_created == flows
