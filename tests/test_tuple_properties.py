"""Property tests: the tuple builder against scapy's dissection of random stacks (nf_flow_tuple_ip, nf_flow_tuple_ipv6, nf_flow_tuple_encap)."""

from __future__ import annotations

from frames import frames
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from scapy.layers.inet import GRE, IP, TCP, UDP
from scapy.layers.inet6 import IPv6, _IPv6ExtHdr
from scapy.layers.l2 import Ether
from scapy.layers.ppp import PPP, PPPoE

from flowsim.kernel.flowtable.tuple import HOOKS, Encap, FlowTuple, Tunnel, flow_tuple_from_skb
from flowsim.kernel.headers import addr_bytes
from flowsim.kernel.skb import skb_from_frame
from flowsim.profiles import PROFILES, get_profile
from flowsim.reasons import REASONS

KNOWN_BUG = object()


def _tci(layer) -> int:
    return int.from_bytes(bytes(layer)[:2], "big")


def scapy_oracle(frame: bytes, offload: bool, profile, iif: int):
    """The tuple scapy's dissection implies for the kernel's rules, or KNOWN_BUG."""
    pkt = Ether(frame)
    etype, cur, encap, inband = pkt.type, pkt.payload, [], None
    if offload and etype in (0x8100, 0x88A8):
        encap.append(Encap(_tci(cur), etype))
        etype, cur = cur.type, cur.payload
    if etype == 0x8100:
        encap.append(Encap(_tci(cur), 0x8100))
        etype, cur, inband = cur.type, cur.payload, "vlan"
    elif etype == 0x8864:
        encap.append(Encap(cur[PPPoE].sessionid, 0x8864))
        cur, inband = cur[PPP].payload, "pppoe"
    if not isinstance(cur, (IP, IPv6)) or (inband == "vlan" and etype not in (0x0800, 0x86DD)):
        return None  # a second in-band header: encap-unsupported
    tun = None
    if isinstance(cur, IP) and cur.proto == 4 and profile.ipip_rx:
        tun, cur = Tunnel(addr_bytes(cur.src), addr_bytes(cur.dst), 4), cur.payload
    elif isinstance(cur, IPv6) and profile.ip6ip6_rx:
        nxt, exts = cur.payload, 0
        while isinstance(nxt, _IPv6ExtHdr):
            nxt, exts = nxt.payload, exts + 1
        if isinstance(nxt, IPv6) and not (exts and profile.ip6_tunnel_exthdr == "slowpath"):
            if inband and profile.ip6_tunnel_hdr_size == "absolute":
                return KNOWN_BUG  # nf_flow_ip6_tunnel_proto: the absolute offset, fixed in 7.1.5
            tun, cur = Tunnel(addr_bytes(cur.src), addr_bytes(cur.dst), 41), nxt
    if inband == "pppoe" and profile.tuple_encap_pppoe_proto == "raw":
        tun = None  # nf_flow_tuple_encap: the raw PPP protocol never equals an ethertype
    l4 = cur.payload
    if isinstance(l4, (TCP, UDP)):
        sport, dport = l4.sport, l4.dport
    elif isinstance(l4, GRE):
        sport = dport = 0
    else:
        return None  # mixed tunnels (4in6, 6in4) and other payloads: l4proto-unsupported
    l3 = 2 if isinstance(cur, IP) else 10
    proto = cur.proto if l3 == 2 else cur.nh
    return FlowTuple(addr_bytes(cur.src), addr_bytes(cur.dst), sport, dport, iif, l3, proto, tuple(encap), tun)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(frames(), st.sampled_from(sorted(PROFILES)), st.booleans(), st.sampled_from(HOOKS))
def test_builder_never_raises_and_agrees_with_scapy(frame_headlen, pname, offload, family):
    """Random stacks cut at random lengths: no exception; any tuple equals scapy's dissection."""
    frame, headlen = frame_headlen
    profile = get_profile(pname)
    skb = skb_from_frame(frame, iif=7, headlen=headlen, rx_vlan_offload=offload)
    if skb is None:
        assert len(frame) < 18
        return
    res = flow_tuple_from_skb(skb, iifidx=7, family=family, profile=profile)
    event(res.reason or ("tuple" if res.tuple.tun is None else "tunnel tuple"))
    if not res.ok:
        assert res.reason in REASONS
        return
    expected = scapy_oracle(frame, offload, profile, 7)
    assert expected is not None, "scapy sees no flow where the builder made a tuple"
    if expected is not KNOWN_BUG:
        assert res.tuple == expected, res.tuple.differences(expected)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(frames(clean=True), st.sampled_from(sorted(PROFILES)), st.booleans())
def test_clean_stacks_give_scapys_tuple(frame_headlen, pname, offload):
    """Stacks the fast path accepts give exactly the tuple scapy's dissection implies, whatever headlen."""
    frame, headlen = frame_headlen
    profile = get_profile(pname)
    skb = skb_from_frame(frame, iif=3, headlen=headlen, rx_vlan_offload=offload)
    res = flow_tuple_from_skb(skb, iifidx=3, family="inet", profile=profile)
    expected = scapy_oracle(frame, offload, profile, 3)
    event(res.reason or ("tuple" if res.tuple.tun is None else "tunnel tuple"))
    if expected is KNOWN_BUG:
        return
    if expected is None:
        assert res.reason in ("encap-unsupported", "l4proto-unsupported", "ipv6-exthdr"), (res.reason, res.detail)
    else:
        assert res.ok, (res.reason, res.detail)
        assert res.tuple == expected, res.tuple.differences(expected)
