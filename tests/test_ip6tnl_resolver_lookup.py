"""Switch ``ip6tnl_resolver_lookup``: the route lookup of ip6_tnl_fill_forward_path (net/ipv6/ip6_tunnel.c).

7.2.13 looks up ``fl6 = { .daddr = t->parms.raddr }`` only; Lorenzo Bianconi's net-next patch "net: ip6_tunnel:
use tunnel parameters for fill_forward_path route lookup" (8 Jul 2026, tests/data/patches/
ip6-tunnel-fill-forward-path-lookup.patch) adds the tunnel's local address, its link as oif and its
TClass/flow label, as ipxip6_tnl_xmit does; 7.3 copies the tunnel's whole flow (t->fl.u.ip6).
"""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest

from flowsim.config.topology import load_topology_text
from flowsim.kernel.fib import Fib
from flowsim.kernel.flowtable.path import FlowtableRef, resolve_path
from flowsim.profiles import get_profile, profile_from_cli

TOPOLOGIES = Path(__file__).resolve().parent.parent / "topologies"


@pytest.mark.parametrize("value,expected", [("remote", {}), ("tunnel-flow", {"saddr": "2001:db8:2::1",
                                                                               "oif": "eth1"})])
def test_lookup_keys(monkeypatch, value, expected):
    """ip6ip6-rx's tun0 bound to its underlay (dev eth1): the keys the resolver's lookup of the remote gets."""
    text = (TOPOLOGIES / "ip6ip6-rx.toml").read_text()
    old = "remote 2001:db8:2::2 encaplimit none"
    assert old in text
    topo = load_topology_text(text.replace(old, old + " dev eth1", 1), "ip6ip6-rx.toml")
    ns = topo.netns("router")
    tun = ns.devices["tun0"]
    calls = []
    real = Fib.lookup

    def spy(self, daddr, **kw):
        if daddr == tun.remote:
            calls.append({k: str(v) for k, v in kw.items() if v is not None and k in ("saddr", "oif")})
        return real(self, daddr, **kw)

    monkeypatch.setattr(Fib, "lookup", spy)
    server = ipaddress.IPv6Address("2001:db8:3::2")   # behind the tunnel
    dst = ns.fib.lookup(server)
    calls.clear()
    p = resolve_path(ns, dst, server, FlowtableRef("ft", {"eth0", "eth1"}),
                     profile_from_cli("linux-7.2", [f"ip6tnl_resolver_lookup={value}"]))
    assert p.stack and p.stack[0].type.name == "TUN" and p.stack[-1].dev == "eth1"
    assert calls and calls[0] == expected


# tun0 bound to eth2 (dev eth2), its remote on-link through eth1 and eth2 alike (2001:db8:2::/64 on both, equal
# metric): the remote-only lookup takes the first route (eth1), the tunnel's flow prefers its link (rt6_score_route:
# rt6_check_dev scores the oif; not strict, since the flow has a source address).  7.3 always looks the flow up.
LINK_BOUND = {"linux-7.0": "eth1", "linux-7.1.5": "eth1", "linux-7.2": "eth1", "linux-7.3": "eth2"}


def link_bound_router():
    text = (TOPOLOGIES / "ip6ip6-rx.toml").read_text()
    old = "ip link add tun0 type ip6tnl mode ip6ip6 local 2001:db8:2::1 remote 2001:db8:2::2 encaplimit none\n"
    assert old in text
    text = text.replace(old, "ip link add eth2 type veth peer name eth2 netns remote\nip link set eth2 up\n"
                        "ip addr add 2001:db8:2::3/64 dev eth2 nodad\n"
                        + old.replace("encaplimit none", "dev eth2 encaplimit none"), 1)
    return load_topology_text(text, "ip6ip6-rx-link.toml").netns("router")


@pytest.mark.parametrize("profile,expected", sorted(LINK_BOUND.items()))
def test_tunnel_bound_to_a_link_continues_on_it_only_with_the_tunnel_flow(profile, expected):
    """The device after TUN tun0 in the path into the tunnel: the named profiles, and each flipped."""
    ns = link_bound_router()
    server = ipaddress.IPv6Address("2001:db8:3::2")
    ft = FlowtableRef("ft", {"eth0", "eth1", "eth2"})
    p = resolve_path(ns, ns.fib.lookup(server), server, ft, get_profile(profile))
    assert [(e.type.name, e.dev) for e in p.stack] == [("TUN", "tun0"), ("ETHERNET", expected)]
    flipped = profile_from_cli(profile, ["ip6tnl_resolver_lookup=" + ("remote" if get_profile(profile)
                                                                       .ip6tnl_resolver_lookup == "tunnel-flow"
                                                                       else "tunnel-flow")])
    again = resolve_path(ns, ns.fib.lookup(server), server, ft, flipped)
    # 7.3's resolver route (tunnel_route=resolver) looks the tunnel's flow up whatever the switch says
    assert again.stack[-1].dev == ("eth2" if profile == "linux-7.3" else "eth1" if expected == "eth2" else "eth2")


REVIEW = Path(__file__).resolve().parent / "data" / "patches" / "ip6-tunnel-fill-forward-path-lookup.toml"


@pytest.mark.parametrize("value,flows", [("remote", 2), ("tunnel-flow", 0)])
def test_review_scenario_loses_its_flows_with_the_tunnel_flow_lookup(value, flows):
    """The patch's review scenario: the resolver's device eth2 is not in the flowtable, so no flow is created."""
    from flowsim.sim.report import build_report
    from flowsim.sim.simulation import Simulation
    from flowsim.config.topology import load_topology

    sim = Simulation(load_topology(str(REVIEW)), profile_from_cli("linux-7.2", [f"ip6tnl_resolver_lookup={value}"]))
    sim.run()
    report = build_report(sim)
    ft = report["flowtables"][0]
    assert ft["flows_created"] == flows, ft
    assert report["packets"]["delivered"] == report["packets"]["injected"]
