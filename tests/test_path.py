"""Path resolution on every shipped topology, both directions, every named profile.

nft_flow_route and nft_dev_path_info; the cases of nft_flowtable.sh; the version switches of flowsim.profiles.

Each row of :data:`FLOWS` is one flow forwarded through a router namespace;
for each profile it pins the ``dev_fill_forward_path`` stack, the
``nft_dev_path_info`` aggregate (ingress device, encaps, tunnel, xmit type)
and what stops the direction, for the original direction (towards ``dst``)
and the reply (towards ``src``), plus whether ``nft_flow_route`` lets the flow
be created.  Summaries are compact strings so the table reads like the
reference's worked examples.
"""

from __future__ import annotations

import functools
import ipaddress
from pathlib import Path

import pytest

from flowsim.config.topology import load_topology, load_topology_text
from flowsim.kernel.devices.base import ETH_P_8021Q, ETH_P_PPP_SES, IPPROTO_IPIP, IPPROTO_IPV6, Encap, PathTun
from flowsim.kernel.flowtable.path import (
    CtTuple,
    DirPath,
    FlowtableRef,
    XmitType,
    dev_fill_forward_path,
    nft_dev_path_info,
    nft_flow_route,
    resolve_path,
    ruleset_flowtables,
)
from flowsim.profiles import get_profile

TOPOLOGIES = Path(__file__).resolve().parent.parent / "topologies"
PROFILES = ("linux-6.18", "linux-6.19", "linux-7.0", "linux-7.1.5")
ip = ipaddress.ip_address


@functools.cache
def topology(name: str):
    return load_topology(TOPOLOGIES / f"{name}.toml")


def flowtable(topo, netns: str) -> FlowtableRef:
    return ruleset_flowtables(topo.netns(netns).nft.text)[0]


def summary(p: DirPath | None) -> str:
    """``STACK | indev=… encap=… tun=… xmit=… | error-function`` for one direction."""
    if p is None:
        return "not resolved"
    stack = " > ".join(f"{e.type.name} {e.dev}" for e in p.stack) or "-"
    info = p.info
    parts = [stack]
    if info is not None and info.indev is not None:
        encap = ",".join(f"{e.id:x}/{e.proto:x}" for e in info.encaps) or "-"
        tun = f"{info.tun.src}>{info.tun.dst}" if info.tun else "-"
        parts.append(f"indev={info.indev} encap={encap} tun={tun} xmit={p.xmit_type.name.lower()}")
    if p.error is not None:
        parts.append(f"{p.error.func} {p.error.dev}")
    return " | ".join(parts)


def flow_route(name: str, netns: str, src: str, dst: str, profile: str):
    """nft_flow_route for a src→dst flow entering *netns* on the device routing back to src."""
    topo = topology(name)
    ns = topo.netns(netns)
    s, d = ip(src), ip(dst)
    in_dev = ns.fib.lookup(s).dev
    return nft_flow_route(topo, netns, (CtTuple(s, d), CtTuple(d, s)), 0, in_dev, flowtable(topo, netns), profile)


def per_profile(**groups) -> dict:
    """Expand ``old=…, new=…`` style keys: each key is a profile or a ``+``-joined list of short names."""
    short = {"618": "linux-6.18", "619": "linux-6.19", "70": "linux-7.0", "715": "linux-7.1.5"}
    out = {}
    for key, value in groups.items():
        names = PROFILES if key == "all" else [short[k] for k in key.lstrip("p").split("_")]
        for n in names:
            out[n] = value
    assert set(out) == set(PROFILES)
    return out


NOT_IN_FT = "nft_dev_forward_path"

# (id, topology, netns, src, dst, {profile: (original, reply, flow created)})
FLOWS = [
    ("selftest-v4", "selftest", "nsr1", "10.0.1.99", "10.0.2.99", per_profile(all=(
        "ETHERNET veth1 | indev=veth1 encap=- tun=- xmit=neigh",
        "ETHERNET veth0 | indev=veth0 encap=- tun=- xmit=neigh", True))),
    ("selftest-v6", "selftest", "nsr1", "dead:1::99", "dead:2::99", per_profile(all=(
        "ETHERNET veth1 | indev=veth1 encap=- tun=- xmit=neigh",
        "ETHERNET veth0 | indev=veth0 encap=- tun=- xmit=neigh", True))),
    ("ipip-v4", "ipip", "nsr1", "10.0.1.99", "10.0.2.99", per_profile(
        p618=(f"ETHERNET tun0 | indev=tun0 encap=- tun=- xmit=neigh | {NOT_IN_FT} tun0",
              "ETHERNET veth0 | indev=veth0 encap=- tun=- xmit=neigh", True),
        p619_70_715=("TUN tun0 > ETHERNET veth1 | indev=veth1 encap=- tun=192.168.10.1>192.168.10.2 xmit=neigh",
                     "ETHERNET veth0 | indev=veth0 encap=- tun=- xmit=neigh", True))),
    ("ip6ip6-v6", "ipip", "nsr1", "dead:1::99", "dead:2::99", per_profile(
        p618_619=(f"ETHERNET tun6 | indev=tun6 encap=- tun=- xmit=neigh | {NOT_IN_FT} tun6",
                  "ETHERNET veth0 | indev=veth0 encap=- tun=- xmit=neigh", True),
        p70_715=("TUN tun6 > ETHERNET veth1 | indev=veth1 encap=- tun=fee1:2::1>fee1:2::2 xmit=neigh",
                 "ETHERNET veth0 | indev=veth0 encap=- tun=- xmit=neigh", True))),
    ("ipip-over-vlan", "ipip-over-vlan", "nsr1", "10.0.1.99", "10.0.2.99", per_profile(
        p618=(f"ETHERNET tun0.10 | indev=tun0.10 encap=- tun=- xmit=neigh | {NOT_IN_FT} tun0.10",
              "ETHERNET veth0 | indev=veth0 encap=- tun=- xmit=neigh", True),
        p619_70_715=("TUN tun0.10 > VLAN veth1.10 > ETHERNET veth1 | indev=veth1 encap=a/8100 "
                     "tun=192.168.20.1>192.168.20.2 xmit=neigh",
                     "ETHERNET veth0 | indev=veth0 encap=- tun=- xmit=neigh", True))),
    ("ip6ip6-over-vlan", "ip6ip6-over-vlan", "nsr1", "dead:1::99", "dead:2::99", per_profile(
        p618_619=(f"ETHERNET tun6.10 | indev=tun6.10 encap=- tun=- xmit=neigh | {NOT_IN_FT} tun6.10",
                  "ETHERNET veth0 | indev=veth0 encap=- tun=- xmit=neigh", True),
        p70_715=("TUN tun6.10 > VLAN veth1.10 > ETHERNET veth1 | indev=veth1 encap=a/8100 "
                 "tun=fee1:4::1>fee1:4::2 xmit=neigh",
                 "ETHERNET veth0 | indev=veth0 encap=- tun=- xmit=neigh", True))),
    ("bridge-vlan", "bridge-vlan", "nsr1", "10.0.1.99", "10.0.2.99", per_profile(all=(
        "ETHERNET veth1 | indev=veth1 encap=- tun=- xmit=neigh",
        "BRIDGE br0 > VLAN veth0.10 > ETHERNET veth0 | indev=veth0 encap=a/8100 tun=- xmit=direct", True))),
    ("ip6ip6-rx", "ip6ip6-rx", "router", "2001:db8:3::2", "2001:db8:1::1", per_profile(
        p618_619=("ETHERNET eth0 | indev=eth0 encap=- tun=- xmit=neigh",
                  f"ETHERNET tun0 | indev=tun0 encap=- tun=- xmit=neigh | {NOT_IN_FT} tun0", True),
        p70_715=("ETHERNET eth0 | indev=eth0 encap=- tun=- xmit=neigh",
                 "TUN tun0 > ETHERNET eth1 | indev=eth1 encap=- tun=2001:db8:2::1>2001:db8:2::2 xmit=neigh", True))),
    ("ip6ip6-rx-encaplimit", "ip6ip6-rx-encaplimit", "router", "2001:db8:3::2", "2001:db8:1::1", per_profile(
        p618_619=("ETHERNET eth0 | indev=eth0 encap=- tun=- xmit=neigh",
                  f"ETHERNET tun0 | indev=tun0 encap=- tun=- xmit=neigh | {NOT_IN_FT} tun0", True),
        p70=("ETHERNET eth0 | indev=eth0 encap=- tun=- xmit=neigh",
             "TUN tun0 > ETHERNET eth1 | indev=eth1 encap=- tun=2001:db8:2::1>2001:db8:2::2 xmit=neigh", True),
        p715=("ETHERNET eth0 | indev=eth0 encap=- tun=- xmit=neigh",
              "- | ip6_tnl_fill_forward_path tun0", False))),
    ("ip6ip6-over-pppoe", "ip6ip6-over-pppoe", "cpe", "2001:db8:3::2", "2001:db8:1::1", per_profile(
        p618_619=("ETHERNET eth0 | indev=eth0 encap=- tun=- xmit=neigh",
                  f"ETHERNET tun0 | indev=tun0 encap=- tun=- xmit=neigh | {NOT_IN_FT} tun0", True),
        p70_715=("ETHERNET eth0 | indev=eth0 encap=- tun=- xmit=neigh",
                 "TUN tun0 > PPPOE ppp0 > ETHERNET eth1 | indev=eth1 encap=1234/8864 "
                 "tun=2001:db8:ff::2>2001:db8:2::2 xmit=direct", True))),
    ("pppoe-over-vlan", "pppoe-over-vlan", "cpe", "192.168.1.10", "198.51.100.10", per_profile(
        p618_619=("PPPOE ppp0 > VLAN eth1.7 > ETHERNET eth1 | indev=eth1 encap=42/8864,7/8100 tun=- xmit=neigh",
                  "BRIDGE br-lan > ETHERNET lan0 | indev=lan0 encap=- tun=- xmit=direct", True),
        p70_715=("PPPOE ppp0 > VLAN eth1.7 > ETHERNET eth1 | indev=eth1 encap=42/8864,7/8100 tun=- xmit=direct",
                 "BRIDGE br-lan > ETHERNET lan0 | indev=lan0 encap=- tun=- xmit=direct", True))),
    ("dsa-lan-to-wan", "dsa", "router", "192.168.1.10", "203.0.113.1", per_profile(all=(
        "DSA wan > ETHERNET eth0 | indev=wan encap=- tun=- xmit=neigh",
        "BRIDGE br-lan > DSA lan1 > ETHERNET eth0 | indev=lan1 encap=- tun=- xmit=direct", True))),
    ("dsa-guest-to-wan", "dsa", "router", "192.168.20.3", "203.0.113.1", per_profile(all=(
        "DSA wan > ETHERNET eth0 | indev=wan encap=- tun=- xmit=neigh",
        "VLAN br-lan.20 > BRIDGE br-lan > DSA lan3 > ETHERNET eth0 | indev=lan3 encap=14/8100 tun=- xmit=direct",
        True))),
    ("stack-limit-4-resolvers", "stack-limit", "cpe", "192.168.1.10", "198.51.100.10", per_profile(
        p618_619=("PPPOE ppp0 > VLAN br-wan.7 > BRIDGE br-wan > DSA wan > ETHERNET eth0 | indev=wan "
                  "encap=77/8864,7/8100 tun=- xmit=direct",
                  "DSA lan1 > ETHERNET eth0 | indev=lan1 encap=- tun=- xmit=neigh", True),
        p70_715=("PPPOE ppp0 > VLAN br-wan.7 > BRIDGE br-wan > DSA wan > ETHERNET eth0 | indev=wan "
                 "encap=77/8864,7/8100 tun=- xmit=direct",
                 "DSA lan1 > ETHERNET eth0 | indev=lan1 encap=- tun=- xmit=neigh", True))),
    ("stack-limit-fifth-device", "stack-limit", "cpe", "192.168.1.10", "10.99.0.1", per_profile(
        p618=(f"ETHERNET tun0 | indev=tun0 encap=- tun=- xmit=neigh | {NOT_IN_FT} tun0",
              "DSA lan1 > ETHERNET eth0 | indev=lan1 encap=- tun=- xmit=neigh", True),
        p619_70=("TUN tun0 > PPPOE ppp0 > VLAN br-wan.7 > BRIDGE br-wan > DSA wan | dev_fwd_path eth0",
                 "DSA lan1 > ETHERNET eth0 | indev=lan1 encap=- tun=- xmit=neigh", True),
        p715=("TUN tun0 > PPPOE ppp0 > VLAN br-wan.7 > BRIDGE br-wan > DSA wan | dev_fwd_path eth0",
              "DSA lan1 > ETHERNET eth0 | indev=lan1 encap=- tun=- xmit=neigh", False))),
    ("two-tunnels-stacked", "ipip-in-ipip", "nsr1", "10.0.1.99", "10.0.2.99", per_profile(
        p618=(f"ETHERNET tun1 | indev=tun1 encap=- tun=- xmit=neigh | {NOT_IN_FT} tun1",
              "ETHERNET veth0 | indev=veth0 encap=- tun=- xmit=neigh", True),
        p619_70=("TUN tun1 > TUN tun0 > ETHERNET veth1 | indev=veth1 encap=- tun=192.168.100.1>192.168.100.2 "
                 "xmit=neigh", "ETHERNET veth0 | indev=veth0 encap=- tun=- xmit=neigh", True),
        p715=("TUN tun1 > TUN tun0 > ETHERNET veth1 | nft_dev_path_info tun0",
              "ETHERNET veth0 | indev=veth0 encap=- tun=- xmit=neigh", False))),
]


def _cases():
    for fid, name, netns, src, dst, table in FLOWS:
        for profile in PROFILES:
            yield pytest.param(name, netns, src, dst, profile, table[profile], id=f"{fid}-{profile}")


@pytest.mark.parametrize("name,netns,src,dst,profile,expected", list(_cases()))
def test_flow_route_per_topology_and_profile(name, netns, src, dst, profile, expected):
    """Both directions' stack, aggregate and error, and whether a flow is created (nft_dev_path_info, nft_flowtable.sh, flowsim.profiles)."""
    fr = flow_route(name, netns, src, dst, profile)
    original, reply, created = expected
    assert summary(fr.paths[0]) == original
    assert summary(fr.paths[1]) == reply
    assert fr.ok is created


# ---------------------------------------------------------------------- route details (nft_dev_forward_path)

def test_ipip_route_replaced_by_underlay_and_reverse_tunnel():
    """Into the tunnel: dst replaced by the route to the remote; the opposite in.tun is reversed (nft_flow_tunnel_update_route)."""
    fr = flow_route("ipip", "nsr1", "10.0.1.99", "10.0.2.99", "linux-7.0")
    ns = topology("ipip").netns("nsr1")
    orig, reply = fr.tuple
    assert orig.dst.dev == "veth1" and orig.dst.prefix == ipaddress.ip_network("192.168.10.0/24")
    assert orig.out_ifindex == ns.devices["veth1"].ifindex
    assert reply.in_ifindex == ns.devices["veth1"].ifindex
    assert reply.in_tun == PathTun(ip("192.168.10.2"), ip("192.168.10.1"), IPPROTO_IPIP)
    assert reply.in_num_tuns == 1
    assert orig.in_ifindex == ns.devices["veth0"].ifindex and orig.in_tun is None
    assert orig.xmit_type == reply.xmit_type == XmitType.NEIGH


def test_ip6ip6_rx_tunnel_direction_is_the_reply():
    """Flow created by a packet out of the tunnel: the reply goes in, the original in.tun is set (nft_dev_path_info)."""
    fr = flow_route("ip6ip6-rx", "router", "2001:db8:3::2", "2001:db8:1::1", "linux-7.1.5")
    ns = topology("ip6ip6-rx").netns("router")
    orig, reply = fr.tuple
    assert orig.in_ifindex == ns.devices["eth1"].ifindex
    assert orig.in_tun == PathTun(ip("2001:db8:2::2"), ip("2001:db8:2::1"), IPPROTO_IPV6)
    assert reply.dst.dev == "eth1" and reply.out_ifindex == ns.devices["eth1"].ifindex


def test_ip6ip6_without_tunnel_resolver_keeps_tunnel_device_defaults():
    """6.19 (no ip6tnl resolver): reply.out = tun0 and orig.in = tun0 from nft_default_forward_path."""
    fr = flow_route("ip6ip6-rx", "router", "2001:db8:3::2", "2001:db8:1::1", "linux-6.19")
    ns = topology("ip6ip6-rx").netns("router")
    orig, reply = fr.tuple
    assert orig.in_ifindex == ns.devices["tun0"].ifindex and orig.in_tun is None
    assert reply.out_ifindex == ns.devices["tun0"].ifindex
    assert reply.dst.dev == "tun0"


def test_bridge_vlan_direct_macs_and_encap_order():
    """Bridge path: DIRECT xmit with the bridge MAC as h_source; opposite in.encap = VLAN 10 (nft_flowtable.sh)."""
    fr = flow_route("bridge-vlan", "nsr1", "10.0.1.99", "10.0.2.99", "linux-7.0")
    topo = topology("bridge-vlan")
    ns = topo.netns("nsr1")
    orig, reply = fr.tuple
    assert reply.xmit_type == XmitType.DIRECT
    assert reply.out_h_source == ns.devices["br0"].mac
    assert reply.out_h_dest == topo.device("ns1", "eth0.10").mac
    assert orig.in_encaps == (Encap(10, ETH_P_8021Q),) and orig.in_num_encaps == 1


def test_legacy_outdev_is_first_encap_device_and_hw_outdev_the_bottom():
    """<= 6.18: outdev = first VLAN/PPPoE device, hw_outdev = indev (nft_dev_path_info before 030feea3097c)."""
    topo = topology("bridge-vlan")
    ns = topo.netns("nsr1")
    fr = flow_route("bridge-vlan", "nsr1", "10.0.1.99", "10.0.2.99", "linux-6.18")
    assert fr.tuple[1].out_ifindex == ns.devices["veth0.10"].ifindex
    assert fr.tuple[1].out_hw_ifindex == ns.devices["veth0"].ifindex
    fr = flow_route("bridge-vlan", "nsr1", "10.0.1.99", "10.0.2.99", "linux-6.19")
    assert fr.tuple[1].out_ifindex == ns.devices["veth0"].ifindex


def test_pppoe_direct_xmit_and_gso_from_april_2026_fix():
    """PPPOE entry: h_dest = BRAS MAC; DIRECT + needs_gso_segment only with pppoe_direct_xmit (nft_dev_path_info, flowsim.profiles)."""
    for profile, direct in (("linux-6.19", False), ("linux-7.0", True)):
        orig = flow_route("pppoe-over-vlan", "cpe", "192.168.1.10", "198.51.100.10", profile).tuple[0]
        assert (orig.xmit_type == XmitType.DIRECT) is direct
        assert orig.out_needs_gso_segment is direct
        if direct:
            assert orig.out_h_dest == "02:00:00:00:07:01"
            assert orig.out_h_source == topology("pppoe-over-vlan").device("cpe", "eth1.7").mac
    reply = flow_route("pppoe-over-vlan", "cpe", "192.168.1.10", "198.51.100.10", "linux-7.0").tuple[1]
    assert reply.in_encaps == (Encap(0x42, ETH_P_PPP_SES), Encap(7, ETH_P_8021Q))


def test_tunnel_over_pppoe_h_source_is_tunnel_dev_addr():
    """7.0 copies dev_addr of the first TUN entry as h_source (the tunnel's local address bytes) (nft_dev_path_info)."""
    fr = flow_route("ip6ip6-over-pppoe", "cpe", "2001:db8:3::2", "2001:db8:1::1", "linux-7.0")
    assert fr.tuple[1].out_h_source == "20:01:0d:b8:00:ff"
    assert any("dev_addr" in w for w in fr.paths[1].warnings)


def test_two_tunnels_ref_recovers_with_inner_tunnel_only():
    """7.0: the second TUN clears indev, ETHERNET sets it again; the flow keeps tun1's endpoints (nft_dev_path_info)."""
    fr = flow_route("ipip-in-ipip", "nsr1", "10.0.1.99", "10.0.2.99", "linux-7.0")
    assert fr.paths[0].info.error.index == 1 and fr.paths[0].info.error.dev == "tun0"
    assert fr.tuple[1].in_tun == PathTun(ip("192.168.100.2"), ip("192.168.100.1"), IPPROTO_IPIP)
    assert fr.paths[0].warnings


def test_no_flow_error_names_the_entry():
    """7.1.5: the error that prevents the flow names the failing stack entry and kernel function."""
    fr = flow_route("stack-limit", "cpe", "192.168.1.10", "10.99.0.1", "linux-7.1.5")
    assert fr.error.func == "dev_fwd_path" and fr.error.index == 5 and fr.error.dev == "eth0"
    fr = flow_route("ip6ip6-rx-encaplimit", "router", "2001:db8:3::2", "2001:db8:1::1", "linux-7.1.5")
    assert fr.error.index == 0 and fr.error.dev == "tun0" and fr.error.errno == -95


# ---------------------------------------------------------------------- single directions (flowsim path)

DSA_PATHS = [
    ("192.168.1.10", "BRIDGE br-lan > DSA lan1 > ETHERNET eth0 | indev=lan1 encap=- tun=- xmit=direct", "KEEP", 0),
    ("192.168.1.2", "BRIDGE br-lan > DSA lan2 > ETHERNET eth0 | indev=lan2 encap=1/8100 tun=- xmit=direct", "TAG", 0),
    ("192.168.20.2", "VLAN br-lan.20 > BRIDGE br-lan > DSA lan2 > ETHERNET eth0 | indev=lan2 encap=14/8100 tun=- "
                     "xmit=direct", "KEEP", 0),
    ("192.168.20.3", "VLAN br-lan.20 > BRIDGE br-lan > DSA lan3 > ETHERNET eth0 | indev=lan3 encap=14/8100 tun=- "
                     "xmit=direct", "UNTAG_HW", 1),
    ("192.168.20.5", "VLAN br-lan.20 > BRIDGE br-lan > ETHERNET wlan0 | indev=wlan0 encap=- tun=- xmit=direct",
     "UNTAG", 0),
    ("192.168.20.4", "VLAN br-lan.20 | br_vlan_fill_forward_path_mode br-lan", None, 0),
]


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("dst,expected,mode,ingress_vlans", DSA_PATHS, ids=[r[0] for r in DSA_PATHS])
def test_dsa_bridge_vlan_modes(dst, expected, mode, ingress_vlans, profile):
    """All four bridge VLAN modes and a port without the VLAN (br_vlan_fill_forward_path_pvid / _mode)."""
    topo = topology("dsa")
    ns = topo.netns("router")
    p = resolve_path(ns, ns.fib.lookup(ip(dst)), ip(dst), flowtable(topo, "router"), get_profile(profile))
    assert summary(p) == expected
    bridge = [e for e in p.stack if e.type.name == "BRIDGE"]
    if mode is not None:
        assert bridge[0].bridge.vlan_mode.name == mode
        assert p.info.ingress_vlans == ingress_vlans
    else:
        assert p.error.errno == -22 and p.error.index == 1


# ---------------------------------------------------------------------- dev_fill_forward_path limits on small topologies

TWO_ROUTERS = """
[netns.r]
commands = '''
ip link add eth0 type veth peer name eth0 netns h
ip link set eth0 up
{extra}
'''
nft = 'table inet t {{ flowtable ft {{ hook ingress priority 0; devices = {{ eth0 }} }} }}'

[netns.h]
commands = '''
ip link set eth0 up
ip addr add 10.0.0.2/24 dev eth0
'''
"""


def _resolve(extra: str, dst: str, profile: str = "linux-7.0", hw: bool = False):
    topo = load_topology_text(TWO_ROUTERS.format(extra=extra), "inline.toml")
    ns = topo.netns("r")
    ft = FlowtableRef("ft", {"eth0"}, hw_offload=hw)
    return resolve_path(ns, ns.fib.lookup(ip(dst)), ip(dst), ft, get_profile(profile))


def test_tunnel_routed_through_itself_makes_no_progress():
    """A resolver that leaves ctx.dev unchanged fails the walk (WARN_ON_ONCE(last_dev == ctx.dev), dev_fill_forward_path)."""
    p = _resolve("ip addr add 10.0.0.1/24 dev eth0\nip link add tun0 type ipip local 10.0.0.1 remote 10.9.9.9\n"
                 "ip link set tun0 up\nip route add 10.9.0.0/16 dev tun0", "10.9.9.9")
    assert p.error.func == "dev_fill_forward_path" and p.error.dev == "tun0" and p.error.index == 0


def test_three_vlans_exceed_the_context():
    """A third VLAN fails vlan_dev_fill_forward_path with -ENOSPC (NET_DEVICE_PATH_VLAN_MAX, ndo_fill_forward_path)."""
    p = _resolve("ip link add link eth0 name v1 type vlan id 1\nip link add link v1 name v2 type vlan id 2\n"
                 "ip link add link v2 name v3 type vlan id 3\nip link set v1 up\nip link set v2 up\n"
                 "ip link set v3 up\nip addr add 10.1.0.1/24 dev v3\nip neigh add 10.1.0.2 lladdr 02:00:00:00:00:09 dev v3",
                 "10.1.0.2")
    assert p.error.errno == -28 and p.error.dev == "v1" and p.error.index == 2


def test_two_vlans_fit_and_three_encaps_fail_in_path_info():
    """QinQ + PPPoE: the third encap clears indev in nft_dev_path_info (NF_FLOW_TABLE_ENCAP_MAX, nft_dev_path_info)."""
    extra = ("ip link add link eth0 name v1 type vlan id 1 protocol 802.1ad\nip link add link v1 name v2 type vlan id 2\n"
             "ip link set v1 up\nip link set v2 up\n"
             "ip link add ppp0 type pppoe dev v2 session 7 peer 02:00:00:00:00:07\nip link set ppp0 up\n"
             "ip addr add 100.64.0.2 peer 100.64.0.1/32 dev ppp0\nip route add default dev ppp0")
    p = _resolve(extra, "8.8.8.8", "linux-7.1.5")
    assert [e.type.name for e in p.stack] == ["PPPOE", "VLAN", "VLAN", "ETHERNET"]
    assert p.error.func == "nft_dev_path_info" and p.error.index == 2
    ref = _resolve(extra, "8.8.8.8", "linux-7.0")
    assert ref.error is None and ref.info.indev == "eth0" and ref.warnings  # 7.0: ETHERNET sets indev again


def test_hw_offload_flowtable_forces_direct():
    """A HW-offload flowtable makes a valid Ethernet indev DIRECT (nf_flowtable_hw_offload, nft_dev_path_info)."""
    p = _resolve("ip addr add 10.0.0.1/24 dev eth0", "10.0.0.2", hw=True)
    assert p.xmit_type == XmitType.DIRECT and p.info.h_dest == p.ha


@pytest.mark.parametrize("state,ok", [("permanent", True), ("reachable", True), ("stale", True), ("delay", True),
                                      ("probe", True), ("noarp", True), ("incomplete", False), ("failed", False)])
def test_neighbour_must_be_nud_valid(state, ok):
    """nft_dev_fill_forward_path requires the next hop's neighbour in NUD_VALID (nft_dev_path_info)."""
    lladdr = "" if state in ("incomplete", "failed") else " lladdr 02:00:00:00:00:05"
    p = _resolve(f"ip addr add 10.0.0.1/24 dev eth0\nip neigh replace 10.0.0.2{lladdr} dev eth0 nud {state}",
                 "10.0.0.2")
    assert (p.error is None) is ok
    if not ok:
        assert p.error.func == "nft_dev_fill_forward_path" and not p.stack


def test_missing_neighbour_fails_like_nud_none():
    """No neighbour entry: dst_neigh_lookup would create a NUD_NONE one, which is not valid (nft_dev_path_info)."""
    p = _resolve("ip addr add 10.0.0.1/24 dev eth0", "10.0.0.77")
    assert p.error.func == "nft_dev_fill_forward_path" and "NUD_NONE" in p.error.reason


def test_dev_fill_forward_path_direct_call():
    """dev_fill_forward_path alone: the start device with no resolver is the only ETHERNET entry (dev_fill_forward_path)."""
    topo = topology("selftest")
    ns = topo.netns("nsr1")
    path = dev_fill_forward_path(ns, ns.devices["veth1"], "02:00:00:00:00:01", get_profile("linux-7.0"))
    assert path.ok and [(e.type.name, e.dev) for e in path.stack] == [("ETHERNET", "veth1")]


def test_path_info_rejects_unknown_entry_types():
    """An MTK_WDMA entry is not usable by the software flowtable: indev = NULL (nft_dev_path_info, 'default')."""
    from flowsim.kernel.devices.base import DevPathType, PathEntry

    ns = topology("selftest").netns("nsr1")
    stack = (PathEntry(DevPathType.MTK_WDMA, "veth1", 3),)
    info = nft_dev_path_info(ns, stack, None, FlowtableRef("f1", {"veth1"}), get_profile("linux-7.0"))
    assert info.indev is None and info.error.index == 0


def test_ruleset_flowtables_from_the_parser():
    """Flowtable names, devices (quoted, unquoted or defined) and `flags offload`, read by the nft parser."""
    fts = ruleset_flowtables('define lan = { e2, e3 }\n'
                             'table inet x { flowtable a { hook ingress priority 0; devices = { "e0", e1 }; '
                             'flags offload; }\n chain c { } }\n'
                             'table ip y { flowtable b { hook ingress priority filter; devices = $lan; } }')
    assert [(f.name, sorted(f.devices), f.hw_offload) for f in fts] == [("a", ["e0", "e1"], True),
                                                                       ("b", ["e2", "e3"], False)]


def test_hardware_offload_flag_is_warned_as_not_modelled():
    """``flags offload``: nf_flow_offload_add would push the flow to the driver (ndo_setup_tc TC_SETUP_FT); no
    driver is modelled, so every resolved direction warns that the software fast path is what flowsim shows."""
    text = (TOPOLOGIES / "selftest.toml").read_text()
    assert "devices = { veth0, veth1 }" in text
    topo = load_topology_text(text.replace("devices = { veth0, veth1 }", "devices = { veth0, veth1 }\n     flags offload"),
                              file="selftest-hw.toml")
    ns = topo.netns("nsr1")
    (ft,) = ruleset_flowtables(ns.nft.text)
    assert ft.hw_offload
    dst = ipaddress.ip_address("10.0.2.99")
    p = resolve_path(ns, ns.fib.lookup(dst), dst, ft, get_profile("linux-7.2"))
    assert p.error is None and any("'flags offload'" in w and "not modelled" in w for w in p.warnings)
    plain = load_topology(TOPOLOGIES / "selftest.toml").netns("nsr1")
    (ft0,) = ruleset_flowtables(plain.nft.text)
    p0 = resolve_path(plain, plain.fib.lookup(dst), dst, ft0, get_profile("linux-7.2"))
    assert not any("flags offload" in w for w in p0.warnings)
