"""linux-7.2 (Debian sid's 7.2.13) and linux-7.3 (Debian experimental's 7.3-rc7): the switches they changed.

Each table has one row per profile around the change (7.1.5, 7.2, 7.3) and reads the named profiles as they
are, as tests/test_switches.py does; the comments name the kernel function whose behaviour the row shows.
"""

from __future__ import annotations

import ipaddress
import json
from pathlib import Path

import pytest
from frames import L4, V4, V6, eth, ip
from scapy.layers.inet import IP, TCP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Dot1AD, Dot1Q, Ether
from scapy.utils import wrpcap

from flowsim.config.topology import load_topology_text
from flowsim.kernel.flowtable.core import NF_FLOW_TEARDOWN
from flowsim.kernel.flowtable.path import CtTuple, FlowtableRef, nft_flow_route, resolve_path
from flowsim.kernel.flowtable.tuple import flow_tuple_from_skb
from flowsim.kernel.skb import skb_from_frame
from flowsim.profiles import get_profile
from flowsim.sim.simulation import Simulation

TOPOLOGIES = Path(__file__).resolve().parent.parent / "topologies"


# --- hook_ether_type_check: nf_flow_offload_ip_hook / nf_flow_offload_ipv6_hook (nf_flow_table_ip.c, 7.3) -------
# 7.3's hooks return NF_ACCEPT when ctx.ether_type (set by nf_flow_skb_encap_protocol) is not their family, before
# the lookup.  Through 7.2.13 nf_flow_skb_encap_protocol runs the tunnel check of whatever plain packet it gets and
# the hook's own builder parses it: an IPv6 packet at an `ip` flowtable is read as IPv4 (nf_flow_tuple_ip's
# ip_is_fragment reads its next header and hop limit as frag_off); an IPv4 packet at an `ip6` flowtable is read
# as IPv6 (nf_flow_tuple_ipv6 reads its frag_off byte, 0, as the next header: hop-by-hop).
OTHER_FAMILY_AT_HOOK = {
    # profile → (IPv6 packet at the ip hook, IPv4 packet at the ip6 hook, 802.1Q carrying IPv6 at the ip hook)
    "linux-7.1.5": ("fragment", "ipv6-exthdr", "encap-unsupported"),
    "linux-7.2": ("fragment", "ipv6-exthdr", "encap-unsupported"),
    "linux-7.3": ("l3proto-unsupported", "l3proto-unsupported", "encap-unsupported"),
}


@pytest.mark.parametrize("profile,expected", sorted(OTHER_FAMILY_AT_HOOK.items()))
def test_packet_of_the_other_family_at_a_family_hook(profile, expected):
    """A packet (or in-band payload) of the other family at an `ip` / `ip6` flowtable's hook is never offloaded;
    the reason says where it stops: the hook's ether_type check (7.3) or the hook's own parser (before)."""
    def reason(frame, family):
        skb = skb_from_frame(frame, iif=5, rx_vlan_offload=False)
        return flow_tuple_from_skb(skb, iifidx=5, family=family, profile=get_profile(profile)).reason
    got = (reason(eth(ip(6) / L4["tcp"]()), "ip"), reason(eth(ip(4) / L4["tcp"]()), "ip6"),
           reason(eth(Dot1Q(vlan=7) / ip(6) / L4["tcp"]()), "ip"))
    assert got == expected


def test_7_3_hook_sets_ctx_ether_type():
    """nf_flow_skb_encap_protocol (7.3) records the protocol under the in-band header in ctx->ether_type."""
    skb = skb_from_frame(eth(Dot1Q(vlan=7) / ip(4) / L4["tcp"]()), iif=5, rx_vlan_offload=False)
    res = flow_tuple_from_skb(skb, iifidx=5, family="inet", profile="linux-7.3")
    assert res.ok and res.ctx.ether_type == 0x0800 and res.ctx.offset == 4


# --- tunnel_resolver_family_check: ip6_tnl_fill_forward_path / ipip_fill_forward_path (7.3) ---------------------
# conform-ipip6.toml carries IPv4 in an ip6tnl (mode ipip6) tunnel.  7.3's resolver refuses a packet whose
# ctx->ether_type is not IPv6 with -EOPNOTSUPP, so the flow is not created (nft_dev_forward_path → -ENOENT);
# 7.2.13's resolver records the tunnel whatever the family.
IPV4_OVER_IP6TNL = {
    "linux-7.1.5": None,
    "linux-7.2": None,
    "linux-7.3": "ip6_tnl_fill_forward_path",
}


@pytest.mark.parametrize("profile,expected", sorted(IPV4_OVER_IP6TNL.items()))
def test_ipv4_flow_into_an_ip6tnl(profile, expected):
    """An IPv4 flow routed into an ip6tnl tunnel: the resolver's family check (7.3) stops the path."""
    text = (TOPOLOGIES / "conform-ipip6.toml").read_text().replace("\nip link add t6 type ip6tnl mode ipip6 local "
                                                                   "2001:db8:2::1 remote 2001:db8:2::2",
                                                                   "\nip link add t6 type ip6tnl mode ipip6 local "
                                                                   "2001:db8:2::1 remote 2001:db8:2::2 encaplimit none")
    ns = load_topology_text(text, "ipip6.toml").netns("r")
    dst = ipaddress.ip_address("203.0.113.138")
    p = resolve_path(ns, ns.fib.lookup(dst), dst, FlowtableRef("ft", {"t6", "veth0", "veth1"}), get_profile(profile))
    assert (p.error.func if p.error else None) == expected
    if expected is None:
        assert p.stack[0].type.name == "TUN"


# --- tunnel_route: nft_dev_forward_path (nf_flow_table_path.c) --------------------------------------------------
# ≤ 7.2.13 replaces the tunnel direction's route with nft_flow_tunnel_update_route's nf_route to the remote; 7.3
# keeps the route the resolver looked up (path->tun.dst).  In ipip.toml both are the underlay route to the remote.
@pytest.mark.parametrize("profile", ["linux-7.2", "linux-7.3"])
def test_tunnel_direction_keeps_the_underlay_route(profile):
    """The direction into the tunnel leaves with the underlay route to the tunnel remote, however it was found."""
    sim = Simulation(load_topology_text((TOPOLOGIES / "ipip.toml").read_text(), str(TOPOLOGIES / "ipip.toml")),
                     get_profile(profile))
    sim.run()
    flows = [f for st in sim.kernel.netns.values() for ft in st.flowtables.values() for f in ft.flows.values()]
    tunnelled = [h for f in flows for h in f.tuplehash if f.tuplehash[1 - h.dir].key.tun is not None]
    assert tunnelled and all(str(h.dst.prefix) != "0.0.0.0/0" or h.dst.dev != "tun0" for h in tunnelled)
    assert all(h.dst is not None and h.dst.dev != "tun0" for h in tunnelled)


def test_7_3_resolver_route_is_the_flow_route():
    """nft_dev_forward_path (7.3): route->tuple[dir].dst = info.tun_dst, the resolver's own lookup."""
    topo = load_topology_text((TOPOLOGIES / "ipip.toml").read_text(), str(TOPOLOGIES / "ipip.toml"))
    ns = topo.netns("nsr1")
    tun = ns.devices["tun0"]
    a, b = ipaddress.ip_address("10.0.1.99"), ipaddress.ip_address("10.0.2.99")
    fr = nft_flow_route(topo, "nsr1", (CtTuple(a, b), CtTuple(b, a)), 0, "veth0",
                        FlowtableRef("f1", {"veth0", "veth1"}), "linux-7.3")
    assert fr.ok, fr.error
    assert fr.tuple[0].dst == ns.fib.lookup(tun.remote, saddr=tun.local, oif=tun.lower)
    assert fr.tuple[1].in_tun is not None and fr.tuple[1].in_num_tuns == 1


# --- gc_dst_check: nf_flow_offload_gc_step (nf_flow_table_core.c, 7.3) -----------------------------------------
# 7.3's GC also tears a flow down when nf_flow_dst_check fails on either tuple; 7.2.13 notices a stale route only
# when a packet of that direction arrives (nf_flow_offload_forward).
GC_AFTER_ROUTE_FLUSH = {"linux-7.1.5": False, "linux-7.2": False, "linux-7.3": True}


@pytest.mark.parametrize("profile,expected", sorted(GC_AFTER_ROUTE_FLUSH.items()))
def test_gc_tears_down_flows_with_a_stale_route(profile, expected):
    """After rt_cache_flush (every IPv4 rtable obsolete) one GC run: torn down in 7.3, kept before."""
    sim = Simulation(load_topology_text((TOPOLOGIES / "selftest.toml").read_text(), str(TOPOLOGIES / "selftest.toml")),
                     get_profile(profile))
    sim.run()
    st = sim.kernel.state("nsr1")
    ft = next(iter(st.flowtables.values()))
    flows = [f for f in ft.flows.values() if f.tuplehash[0].key.l3proto == 2 and not f.test(NF_FLOW_TEARDOWN)]
    assert flows
    st.ns.fib.rt_cache_flush()
    ft.nf_flow_offload_work_gc(sim.kernel, st)
    assert all(f.id not in ft.flows for f in flows) is expected


# --- flowsim tuple --no-rx-vlan-offload: __netif_receive_skb_core (net/core/dev.c) -------------------------------
# Whether the NIC strips the outer tag or not, __netif_receive_skb_core runs skb_vlan_untag on an 802.1Q/802.1AD
# frame before the ingress hook: the hook sees the same skb.  A QinQ frame's outer 802.1AD tag is the hwaccel tag
# either way and its inner 802.1Q tag is in-band, which nf_flow_skb_encap_protocol handles.
def test_no_rx_vlan_offload_still_untags_the_outer_tag(tmp_path, capsys):
    """--no-rx-vlan-offload changes nothing the hook sees: QinQ still gives a tuple with both tags."""
    from flowsim.cli import main
    path = tmp_path / "qinq.pcap"
    wrpcap(str(path), [Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / Dot1AD(vlan=10) / Dot1Q(vlan=20)
                       / IP(src=V4[0], dst=V4[1]) / TCP(sport=1000, dport=2000),
                       Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / Dot1Q(vlan=7)
                       / IPv6(src=V6[0], dst=V6[1]) / TCP(sport=1000, dport=2000)])
    outs = []
    for flag in ([], ["--no-rx-vlan-offload"]):
        assert main(["tuple", str(path), "--json", *flag]) == 0
        outs.append([json.loads(line) for line in capsys.readouterr().out.splitlines()])
    assert outs[0] == outs[1]
    assert [o["result"] for o in outs[1]] == ["tuple", "tuple"]
    assert outs[1][0]["tuple"]["encap"] == [{"id": 10, "proto": 0x88A8}, {"id": 20, "proto": 0x8100}]
