"""The MTU a router forwards with, and senders without path MTU discovery (issue 14, items 4 and 5).

Item 4: ``ip_forward`` checks ``ip_dst_mtu_maybe_forward(dst, true)`` (include/net/ip.h), which honours an IPv4
route's ``mtu`` locked or not; ``ip6_forward`` checks ``ip6_dst_mtu_maybe_forward(dst, true)``
(include/net/ip6_route.h), which ignores an IPv6 route's ``mtu`` unless it is locked and takes the device's.
The unlocked IPv6 route MTU still counts at output: ``__ip6_finish_output`` compares with ``dst_mtu`` (``ip6_mtu``
is ``ip6_dst_mtu_maybe_forward(dst, false)``) and ``ip6_fragment`` refuses a forwarded packet (no ``ignore_df``)
with a Packet Too Big — after FORWARD and POSTROUTING, so the quote shows the hop limit already decremented.

Item 5: nft_flowtable.sh's first runs set ``net.ipv4.ip_no_pmtu_disc = 1`` in ns1 and ns2 (``df = false``): the
endpoints' 2000-byte segments (MSS from ns2's 2000-byte MTU) leave the fast path (``nf_flow_exceeds_mtu``), the
slow path fragments them (``ip_finish_output`` → ``ip_fragment``), and the reply's fragments from nsr2 are not
flowtable material (``nf_flow_tuple_ip``: ``ip_is_fragment``); conntrack reassembles them (``nf_defrag_ipv4``).
"""

from __future__ import annotations

import ipaddress

import attrs
import pytest
from scapy.layers.inet import ICMP, IP, IPerror
from scapy.layers.inet6 import ICMPv6PacketTooBig, IPerror6
from scapy.layers.l2 import Ether

from flowsim.config.topology import load_topology, load_topology_text
from flowsim.kernel.headers import IPPROTO_TCP
from flowsim.kernel.pkt import (
    ICMP_DEST_UNREACH, ICMP_FRAG_NEEDED, build_ipv4, icmp_error, new_skb, parse_ip, tcp_segment,
)
from flowsim.profiles import get_profile
from flowsim.sim.report import build_report
from flowsim.sim.simulation import Simulation
from tests.test_scenarios import TOPO

V4_DEFAULT = "ip route add default via 192.168.10.2\n"
V6_DEFAULT = "ip -6 route add default via fee1:2::2\n"


def _selftest(route_mtu: str = "", veth1_mtu: int = 1500) -> str:
    """selftest.toml with *route_mtu* ("mtu 1400", "mtu lock 1400") on nsr1's default routes."""
    text = (TOPO / "selftest.toml").read_text()
    text = text.replace(V4_DEFAULT, V4_DEFAULT.replace("\n", f" {route_mtu}\n"), 1)
    text = text.replace(V6_DEFAULT, V6_DEFAULT.replace("\n", f" {route_mtu}\n"), 1)
    return text.replace("ip link set veth1 mtu 1500", f"ip link set veth1 mtu {veth1_mtu}")


def _simulate(text, specs, profile="linux-7.1.5", flowtables=True, capture=("ns1", "eth0")):
    topo = load_topology_text(text, str(TOPO / "selftest.toml")) if text else load_topology(TOPO / "selftest.toml")
    sim = Simulation(topo, get_profile(profile), flowtables=flowtables)
    sim = Simulation(topo, get_profile(profile), flowtables=flowtables, traffic=specs(sim.specs))
    frames = []
    sim.kernel.capture = lambda ns, d, f: frames.append(Ether(f)) if (ns, d) == capture else None
    sim.run()
    return sim, build_report(sim), frames


# family, route option, the forwarding MTU (ip_dst_mtu_maybe_forward / ip6_dst_mtu_maybe_forward(dst, true))
FORWARD_MTU = [
    (4, "", 1500),
    (4, "mtu 1400", 1400),  # "'forwarding = true' case should always honour route mtu"
    (4, "mtu lock 1400", 1400),
    (6, "", 1500),
    (6, "mtu 1400", 1500),  # not locked: idev->cnf.mtu6
    (6, "mtu lock 1400", 1400),  # dst_metric_locked(dst, RTAX_MTU)
]


@pytest.mark.parametrize("family,option,expected", FORWARD_MTU)
def test_dst_mtu_maybe_forward(family, option, expected):
    """The forwarding MTU of nsr1's default route: IPv4 honours its mtu always, IPv6 only with `mtu lock`."""
    sim = Simulation(load_topology_text(_selftest(option), str(TOPO / "selftest.toml")), get_profile("linux-7.1.5"))
    st = sim.kernel.netns["nsr1"]
    rt = st.route(ipaddress.ip_address("10.0.2.99" if family == 4 else "dead:2::99"))
    assert st.ns.fib.dst_mtu_maybe_forward(rt) == expected
    assert st.route_mtu(rt) == (1400 if option else 1500)  # dst_mtu, what local output uses, is the route's


def test_ip_forward_use_pmtu_changes_nothing_without_a_learned_pmtu():
    """net.ipv4.ip_forward_use_pmtu only lets ip_dst_mtu_maybe_forward read rt_pmtu, which routers here never learn."""
    text = _selftest("mtu 1400").replace('"net.ipv4.conf.veth0.forwarding" = 1,',
                                         '"net.ipv4.ip_forward_use_pmtu" = 1, "net.ipv4.conf.veth0.forwarding" = 1,', 1)
    sim = Simulation(load_topology_text(text, str(TOPO / "selftest.toml")), get_profile("linux-7.1.5"))
    st = sim.kernel.netns["nsr1"]
    assert st.sysctl_on("net.ipv4.ip_forward_use_pmtu")
    assert st.ns.fib.dst_mtu_maybe_forward(st.route(ipaddress.ip_address("10.0.2.99"))) == 1400


# name, route option, the error's drop place, the quoted TTL / hop limit: ip_forward / ip6_forward refuse before
# the decrement; ip6_fragment (the unlocked IPv6 route MTU at output) after it
SLOW = [
    ("tcp-12345", "mtu 1400", "nsr1 forward", 64),
    ("tcp-12345", "mtu lock 1400", "nsr1 forward", 64),
    ("tcp6-12345", "mtu 1400", "nsr1 output", 63),
    ("tcp6-12345", "mtu lock 1400", "nsr1 forward", 64),
]


@pytest.mark.parametrize("name,option,where,ttl", SLOW)
def test_route_mtu_on_the_slow_path(name, option, where, ttl):
    """1450-byte segments over a 1400-byte route MTU without flowtables: the sender gets 4 errors saying 1400, from
    ip_forward / ip6_forward, or for an unlocked IPv6 route from ip6_fragment after FORWARD, and then fits."""
    sim, r, frames = _simulate(_selftest(option), lambda ss: [attrs.evolve(s, size=1450, reply_size=1000)
                                                              for s in ss if s.name == name], flowtables=False)
    v4 = name == "tcp-12345"
    errors = [p for p in frames if (IPerror in p if v4 else IPerror6 in p)]
    assert len(errors) == 4
    for p in errors:
        assert (p[ICMP].nexthopmtu if v4 else p[ICMPv6PacketTooBig].mtu) == 1400
        assert (p[IPerror].ttl if v4 else p[IPerror6].hlim) == ttl
    assert {w for _t, _tag, _rid, w in sim.kernel.ledger.drop_log} == {where}
    assert r["drops"] == {"frag-needed" if v4 else "pkt-too-big": 4}
    (conv,) = sim.conversations
    assert conv.client.pmtu == 1400 and conv.client.state == "time_wait"


def test_unlocked_ipv6_route_mtu_is_not_the_flow_mtu():
    """flow_offload_fill_route: the flow's IPv6 MTU is the device's (1500) under an unlocked `mtu 1400` route, so the
    fast path forwards the 200 1450-byte segments the slow path would refuse (nf_flow_exceeds_mtu passes)."""
    sim, r, _ = _simulate(_selftest("mtu 1400"), lambda ss: [attrs.evolve(s, size=1450, reply_size=1000)
                                                             for s in ss if s.name == "tcp6-12345"])
    (ft,) = r["flowtables"]
    assert [f["original"]["mtu"] for f in ft["flows"]] == [1500]
    o = r["traffic"][0]["directions"]["original"]
    assert (o["sent"], o["delivered"], o["fastpath"], o["slowpath"]) == (204, 204, 202, 2)
    assert r["drops"] == {}


# profile, nsr1's egress MTU, original (sent, delivered, fastpath, slowpath), reply (the same), flowtable reasons,
# the lengths of the fragments ns2 receives (ip_fragment: 8-byte aligned pieces of the 1980 payload bytes)
NO_PMTU_DISC = [
    ("linux-7.1.5", 1500, (204, 204, 2, 202), (202, 202, 1, 401),
     {"fragment": 400, "mtu-exceeded": 200, "no-flow-entry": 3}, [520, 1500]),
    ("linux-7.1.5", 1280, (204, 204, 2, 202), (202, 202, 1, 401),
     {"fragment": 400, "mtu-exceeded": 200, "no-flow-entry": 3}, [744, 1276]),
    ("linux-6.12", 1500, (204, 204, 0, 204), (202, 202, 0, 402),
     {"flow-teardown": 2, "fragment": 400, "mtu-exceeded": 200, "no-flow-entry": 3, "tcp-fin-rst": 1}, [520, 1500]),
]


@pytest.mark.parametrize("profile,egress,orig,reply,reasons,lengths", NO_PMTU_DISC)
def test_selftest_without_pmtu_discovery_fragments(profile, egress, orig, reply, reasons, lengths):
    """nft_flowtable.sh with ip_no_pmtu_disc: every 2000-byte segment leaves the fast path (nf_flow_exceeds_mtu:
    mtu-exceeded 200; the reply's fragments: fragment 400), nsr1 fragments each in two (ip_fragment), no ICMP error
    is sent, and the transfer completes whole."""
    sim, r, frames = _simulate(_selftest(veth1_mtu=egress), lambda ss: [
        attrs.evolve(s, size=2000, reply_size=2000, df=False) for s in ss if s.name == "tcp-12345"],
        profile=profile, capture=("ns2", "eth0"))
    t = r["traffic"][0]["directions"]
    for d, want in (("original", orig), ("reply", reply)):
        assert (t[d]["sent"], t[d]["delivered"], t[d]["fastpath"], t[d]["slowpath"]) == want
    assert r["flowtables"][0]["reasons"] == reasons
    assert r["drops"] == {} and r["packets"]["by_origin"]["stack"]["injected"] == 0  # no ICMP error at all
    frags = [p[IP] for p in frames if IP in p and p[IP].dst == "10.0.2.99" and (p[IP].flags.MF or p[IP].frag)]
    assert len(frags) == 400 and sorted({f.len for f in frags}) == lengths
    (conv,) = sim.conversations
    assert conv.client.pmtu == 9000 and conv.client.icmp_errors == [] and conv.server.received == 204


def test_dont_fragment_off_tcp_keeps_its_mss_on_frag_needed():
    """tcp_v4_mtu_reduced: an IP_PMTUDISC_DONT socket (df = false) records the error but keeps its segment size."""
    topo = load_topology(TOPO / "selftest.toml")
    specs = Simulation(topo, get_profile("linux-7.1.5")).specs
    sim = Simulation(topo, get_profile("linux-7.1.5"),
                     traffic=[attrs.evolve(s, df=False) for s in specs if s.name == "tcp-12345"])
    (conv,) = sim.conversations
    c = conv.client
    c.bind(sim.kernel)
    seg = tcp_segment(c.laddr, c.raddr, c.lport, c.rport, 1, 0, 0x18, bytes(1400))
    offender = build_ipv4(c.laddr, c.raddr, IPPROTO_TCP, seg, df=False)
    router = ipaddress.ip_address("10.0.1.1")
    err = icmp_error(offender, parse_ip(offender, 0), router, ICMP_DEST_UNREACH, ICMP_FRAG_NEEDED, 1300)
    skb = new_skb(err, None)
    info = parse_ip(skb.buf, skb.data)
    c.icmp_error(sim.kernel, sim.kernel.netns["ns1"], info, None, skb)
    assert c.icmp_errors == [(3, 4, 1300)] and c.pmtu == 9000
