"""The tuple builder, check by check, in the kernel's order (nf_flow_table_ip.c; the version switches of flowsim.profiles)."""

from __future__ import annotations

import pytest
from frames import L4, OUTER_V4, OUTER_V6, V4, V6, eth, ip, outer, pppoe
from scapy.layers.inet import GRE, ICMP, IP, TCP
from scapy.layers.inet6 import HBHOptUnknown, IPv6, IPv6ExtHdrDestOpt, IPv6ExtHdrHopByHop
from scapy.layers.l2 import ARP, Dot1AD, Dot1Q

from flowsim.kernel.flowtable.tuple import Encap, FlowTuple, Tunnel, flow_tuple_from_skb
from flowsim.kernel.headers import addr_bytes
from flowsim.kernel.skb import skb_from_frame
from flowsim.profiles import get_profile
from flowsim.reasons import REASONS

NEW, OLD = "linux-7.1.5", "linux-7.0"
PPP = {4: 0x0021, 6: 0x0057}


def parse(frame: bytes, profile=NEW, family="inet", iif=5, **kw):
    skb = skb_from_frame(frame, iif=iif, **kw)
    return flow_tuple_from_skb(skb, iifidx=iif, family=family, profile=profile)


def v(version):
    return V4 if version == 4 else V6


# (id, builder(version) -> frame, profile, family, expected reason) — one row per check.
SLOWPATH_ROWS = [
    ("not-ip", lambda ver: eth(ARP()), NEW, "inet", "l3proto-unsupported"),
    ("vlan-carries-arp", lambda ver: eth(Dot1Q(vlan=5) / Dot1Q(vlan=6) / ARP()), NEW, "inet", "encap-unsupported"),
    ("inband-8021ad", lambda ver: eth(Dot1Q(vlan=5) / Dot1AD(vlan=6) / ip(ver) / L4["tcp"]()), NEW, "inet",
     "encap-unsupported"),
    ("pppoe-unknown-ppp-proto", lambda ver: eth(pppoe(proto=0xC021) / (b"\x01\x01\x00\x10" * 4)), NEW, "inet",
     "encap-unsupported"),
    ("vlan-other-family-ip-hook", lambda ver: eth(Dot1Q(vlan=5) / Dot1Q(vlan=6) / ip(6) / L4["tcp"]()), NEW, "ip",
     "encap-unsupported"),
    ("truncated-ip", lambda ver: eth(ip(ver) / L4["tcp"]())[:14 + 12], NEW, "inet", "header-truncated"),
    ("truncated-l4", lambda ver: eth(ip(ver) / L4["tcp"]())[:-4], NEW, "inet", "header-truncated"),
    ("truncated-pppoe", lambda ver: eth(pppoe(proto=PPP[ver]) / ip(ver) / L4["tcp"]())[:14 + 7], NEW, "inet",
     "header-truncated"),
    ("ttl-1", lambda ver: eth(ip(ver, ttl=1) / L4["tcp"]()), NEW, "inet", "ttl-expired"),
    ("ttl-0", lambda ver: eth(ip(ver, ttl=0) / L4["udp"]()), NEW, "inet", "ttl-expired"),
    ("outer-ttl-1", lambda ver: eth(outer(ver, **({"ttl": 1} if ver == 4 else {"hlim": 1})) / ip(ver) / L4["tcp"]()),
     NEW, "inet", "ttl-expired"),
    ("icmp", lambda ver: eth(ip(ver) / (ICMP() if ver == 4 else IPv6(nh=58))), NEW, "inet", "l4proto-unsupported"),
    ("gre-v1", lambda ver: eth(ip(ver) / GRE(version=1, key_present=1, proto=0x880B)), NEW, "inet", "gre-version"),
]

V4_ONLY_ROWS = [
    ("fragment-mf", lambda: eth(IP(src=V4[0], dst=V4[1], flags="MF") / TCP()), NEW, "fragment"),
    ("fragment-offset", lambda: eth(IP(src=V4[0], dst=V4[1], frag=100) / (b"x" * 20)), NEW, "fragment"),
    ("ip-options", lambda: eth(IP(src=V4[0], dst=V4[1], options=[b"\x01\x01\x01\x00"]) / TCP()), NEW, "ip-options"),
    ("inner-fragment", lambda: eth(outer(4) / IP(src=V4[0], dst=V4[1], flags="MF") / TCP()), NEW, "fragment"),
    ("ihl-below-5-fixed", lambda: eth(IP(src=V4[0], dst=V4[1], ihl=4) / TCP()), NEW, "ip-ihl-invalid"),
]

V6_ONLY_ROWS = [
    ("inner-hop-by-hop", lambda: eth(ip(6) / IPv6ExtHdrHopByHop() / TCP()), NEW, "ipv6-exthdr"),
    ("outer-exthdr-fixed", lambda: eth(outer(6) / IPv6ExtHdrDestOpt() / ip(6) / TCP()), NEW, "ipv6-exthdr"),
    ("exthdr-walk-none", lambda: eth(outer(6, nh=59) / (b"\0" * 8)), OLD, "ipv6-exthdr-error"),
    ("exthdr-walk-truncated", lambda: eth(outer(6) / IPv6ExtHdrDestOpt())[:14 + 41], OLD, "ipv6-exthdr-error"),
]


@pytest.mark.parametrize("version", [4, 6])
@pytest.mark.parametrize("rid,build,profile,family,reason", SLOWPATH_ROWS, ids=[r[0] for r in SLOWPATH_ROWS])
def test_slowpath_reason(rid, build, profile, family, reason, version):
    """Each parse check sends its packets to the slow path with its own reason id (flowsim.reasons)."""
    res = parse(build(version), profile, family)
    assert (res.reason, res.tuple) == (reason, None), res.detail
    assert REASONS[res.reason].verdict == "accept"


@pytest.mark.parametrize("rid,build,profile,reason", V4_ONLY_ROWS + V6_ONLY_ROWS,
                         ids=[r[0] for r in V4_ONLY_ROWS + V6_ONLY_ROWS])
def test_slowpath_reason_family_specific(rid, build, profile, reason):
    """IPv4-only (fragments, options, IHL) and IPv6-only (extension headers) checks (nf_flow_tuple_ip, nf_flow_tuple_ipv6)."""
    res = parse(build(), profile)
    assert (res.reason, res.tuple) == (reason, None), res.detail


PARSE_REASONS = {"l3proto-unsupported", "encap-unsupported", "header-truncated", "fragment", "ip-options",
                 "ip-ihl-invalid", "ttl-expired", "ipv6-exthdr", "ipv6-exthdr-error", "l4proto-unsupported",
                 "gre-version"}


def test_every_parse_reason_has_a_row():
    """Every slow-path reason the parser can give is reached by a row above (flowsim.reasons)."""
    reached = {r[-1] for r in SLOWPATH_ROWS + V4_ONLY_ROWS + V6_ONLY_ROWS}
    assert reached == PARSE_REASONS <= set(REASONS)


def _expected(version, l4proto, sport, dport, iif=5, encap=(), tun=None):
    s, d = v(version)
    return FlowTuple.make(s, d, sport, dport, iifidx=iif, l4proto=l4proto, encap=encap, tun=tun)


TUPLE_ROWS = [
    ("plain-tcp", lambda ver: eth(ip(ver) / L4["tcp"]()), (), None, 6, 40000, 12345),
    ("plain-udp", lambda ver: eth(ip(ver) / L4["udp"]()), (), None, 17, 40000, 53),
    ("gre-v0-no-ports", lambda ver: eth(ip(ver) / GRE()), (), None, 47, 0, 0),
    ("hwaccel-vlan-full-tci", lambda ver: eth(Dot1Q(vlan=10, prio=5) / ip(ver) / L4["tcp"]()),
     (((5 << 13) | 10, 0x8100),), None, 6, 40000, 12345),
    ("qinq-hwaccel-then-inband", lambda ver: eth(Dot1AD(vlan=100) / Dot1Q(vlan=10) / ip(ver) / L4["tcp"]()),
     ((100, 0x88A8), (10, 0x8100)), None, 6, 40000, 12345),
    ("pppoe-session", lambda ver: eth(pppoe(0x1234, PPP[ver]) / ip(ver) / L4["udp"]()),
     ((0x1234, 0x8864),), None, 17, 40000, 53),
    ("vlan-pppoe", lambda ver: eth(Dot1Q(vlan=7) / pppoe(0x0042, PPP[ver]) / ip(ver) / L4["tcp"]()),
     ((7, 0x8100), (0x42, 0x8864)), None, 6, 40000, 12345),
    ("tunnel", lambda ver: eth(outer(ver) / ip(ver) / L4["tcp"]()), (), "tun", 6, 40000, 12345),
    ("tunnel-over-vlan", lambda ver: eth(Dot1Q(vlan=10) / outer(ver) / ip(ver) / L4["udp"]()),
     ((10, 0x8100),), "tun", 17, 40000, 53),
]


@pytest.mark.parametrize("version", [4, 6])
@pytest.mark.parametrize("rid,build,encap,tun,l4,sport,dport", TUPLE_ROWS, ids=[r[0] for r in TUPLE_ROWS])
def test_tuple_fields(rid, build, encap, tun, l4, sport, dport, version):
    """The key holds the inner addresses/ports, every encap with its full TCI / session id, and the tunnel (nf_flow_tuple_encap)."""
    res = parse(build(version))
    assert res.ok, (res.reason, res.detail)
    if tun:
        o = OUTER_V4 if version == 4 else OUTER_V6
        tun = (o[0], o[1], 4 if version == 4 else 41)
    encap = tuple(Encap(*e) for e in encap)
    assert res.tuple == _expected(version, l4, sport, dport, encap=encap, tun=tun)


@pytest.mark.parametrize("version,profile,tunnelled", [
    (4, "linux-6.18", False), (4, "linux-6.19", True), (6, "linux-6.19", False), (6, "linux-7.0", True),
])
def test_tunnel_rx_by_version(version, profile, tunnelled):
    """IPIP is recognised from 6.19 and IP6IP6 from 7.0; before, the outer header is the flow (l4proto 4/41) (flowsim.profiles)."""
    res = parse(eth(outer(version) / ip(version) / L4["tcp"]()), profile)
    if tunnelled:
        assert res.tuple.tun is not None and res.tuple.sport == 40000
    else:
        assert res.reason == "l4proto-unsupported"


def test_iifidx_is_the_hook_device():
    """iifidx is the ifindex of the device whose ingress hook runs (nf_flow_tuple_ip)."""
    assert parse(eth(ip(4) / L4["tcp"]()), iif=42).tuple.iifidx == 42


def test_metadata_stays_out_of_equality():
    """Two tuples with equal key fields are equal and hash alike, whatever the parse context (struct flow_offload_tuple)."""
    a = parse(eth(Dot1Q(vlan=3) / ip(4) / L4["tcp"]()), rx_vlan_offload=True)
    b = parse(eth(Dot1Q(vlan=3) / ip(4) / L4["tcp"]()), rx_vlan_offload=False)
    assert a.ctx.offset != b.ctx.offset
    assert a.tuple == b.tuple and hash(a.tuple) == hash(b.tuple)


def test_vlan_priority_bits_change_the_key():
    """A TCI with priority bits is a different key from the bare VID the path records (nf_flow_tuple_encap)."""
    a = parse(eth(Dot1Q(vlan=10, prio=3) / ip(4) / L4["tcp"]())).tuple
    b = parse(eth(Dot1Q(vlan=10) / ip(4) / L4["tcp"]())).tuple
    assert a.differences(b) == ["encap"]


@pytest.mark.parametrize("family,version", [("ip", 4), ("ip6", 6)])
def test_single_family_hooks(family, version):
    """The ip / ip6 family hooks parse their own protocol directly (nf_flow_offload_inet_hook)."""
    assert parse(eth(ip(version) / L4["tcp"]()), family=family).ok


def test_ip_hook_sees_ipv6_ref_quirk():
    """7.0: the IPv4 hook runs the IPv6 tunnel check on IPv6 traffic, then reads it as IPv4: the payload
    length lands in the fragment field, so it leaves as a 'fragment' (ip_is_fragment)."""
    res = parse(eth(ip(6) / L4["tcp"]()), OLD, family="ip")
    assert res.reason == "fragment" and res.hook == "ipv4" and res.ctx.tun_proto == 0


# --- regression tests named after the kernel fixes the profiles model ----------

def test_regression_025a41e76b51_ipv4_tunnel_ihl():
    """025a41e76b51 (CVE-2026-72417): IHL < 5 is refused by its own check from 7.1.5; before, as options."""
    frame = eth(IP(src=V4[0], dst=V4[1], ihl=4) / TCP())
    assert parse(frame, OLD).reason == "ip-options"
    assert parse(frame, NEW).reason == "ip-ihl-invalid"


IP6IP6_OVER_INBAND = {
    "qinq": lambda: eth(Dot1Q(vlan=10) / Dot1Q(vlan=20) / outer(6) / ip(6) / L4["tcp"]()),
    "pppoe": lambda: eth(pppoe(0x77, 0x0057) / outer(6) / ip(6) / L4["tcp"]()),
}


@pytest.mark.parametrize("inband", sorted(IP6IP6_OVER_INBAND))
def test_regression_ip6_tunnel_offset_after_inband_header(inband):
    """IPv6 tunnel header size: 7.0 adds the absolute offset, so after an in-band header the inner header is
    looked for at the wrong place; the relative size (7.1.5) finds it (nf_flow_ip6_tunnel_proto, "make the IPv6 path symmetric")."""
    frame = IP6IP6_OVER_INBAND[inband]()
    old, new = parse(frame, OLD), parse(frame, NEW)
    inband_len = 4 if inband == "qinq" else 8
    assert old.ctx.tun_hdr_size == 40 + inband_len and old.ctx.offset == 40 + 2 * inband_len
    assert not old.ok or old.tuple.sport != 40000
    assert new.ok and new.ctx.tun_hdr_size == 40 and new.ctx.offset == 40 + inband_len
    assert (new.tuple.src, new.tuple.sport, new.tuple.dport) == (addr_bytes(V6[0]), 40000, 12345)


def test_pppoe_carried_tunnel_keeps_empty_tunnel_fields():
    """nf_flow_tuple_encap: for PPPoE the raw PPP protocol is compared, so the tunnel fields stay empty (mainline);
    the CI tree's mapped ethertype fills them."""
    frame = IP6IP6_OVER_INBAND["pppoe"]()
    assert parse(frame, NEW).tuple.tun is None
    mapped = get_profile(NEW).derive(tuple_encap_pppoe_proto="mapped")
    assert parse(frame, mapped).tuple.tun == Tunnel(addr_bytes(OUTER_V6[0]), addr_bytes(OUTER_V6[1]), 41)


def test_regression_ip6_tunnel_exthdr():
    """IP6IP6 with the encapsulation-limit destination option: 7.0 skips it (tunnel size 48); 7.1.5 → slow path (flowsim.profiles)."""
    frame = eth(outer(6) / IPv6ExtHdrDestOpt(options=[HBHOptUnknown(otype=4, optdata=b"\x04")]) / ip(6) / L4["tcp"]())
    old = parse(frame, OLD)
    assert old.ok and old.ctx.tun_hdr_size == 48 and old.tuple.tun is not None
    new = parse(frame, NEW)
    assert new.reason == "ipv6-exthdr"


@pytest.mark.parametrize("access,copies,reallocs", [("header_pointer", 1, 1), ("pull", 0, 1)])
def test_ip6_tunnel_header_access_cost(access, copies, reallocs):
    """With the outer IPv6 header outside the linear area, 7.0 copies it (skb_header_pointer) and then pulls
    the inner one; 7.1.5 pulls once (pskb_may_pull) — the cost the IP6IP6 rx review asked about (nf_flow_ip6_tunnel_proto)."""
    frame = eth(outer(6) / ip(6) / L4["tcp"]())
    profile = get_profile(OLD).derive(ip6_tunnel_header_access=access)
    skb = skb_from_frame(frame, iif=5, headlen=14)
    res = flow_tuple_from_skb(skb, iifidx=5, profile=profile)
    assert res.ok
    assert (skb.cost.copies, skb.cost.reallocs) == (copies, reallocs)
