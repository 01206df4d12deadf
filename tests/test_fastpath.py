"""The fast path end to end on real topologies: flow creation (nft_flow_offload_eval), hook verdicts and
bytes out (nf_flow_table_ip.c)."""

from __future__ import annotations

import ipaddress

import attrs
import pytest
from ftkit import add_flow, established_ct, setup
from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.inet6 import IPv6, IPv6ExtHdrDestOpt
from scapy.layers.l2 import Ether
from scapy.layers.ppp import PPP, PPPoE  # registers the 0x8864 binding for dissection

from flowsim.kernel.conntrack import IPS_OFFLOAD
from flowsim.kernel.flowtable.core import NF_FLOW_CLOSING, NF_FLOW_TEARDOWN
from flowsim.kernel.flowtable.fastpath import nf_flow_offload_hook
from flowsim.kernel.skb import skb_from_frame

CLIENT, SERVER = "2001:db8:1::1", "2001:db8:3::2"
MAC = dict(src="02:00:00:00:00:aa", dst="02:00:00:00:00:bb")


def hook(kernel, state, dev, frame, ft="ft"):
    skb = skb_from_frame(frame, iif=state.ns.devices[dev].ifindex)
    verdict = nf_flow_offload_hook(kernel, state, state.flowtables[ft], skb, state.ns.devices[dev])
    return verdict, skb


def checks_ok(pkt) -> None:
    """Every IPv4/TCP/UDP checksum on the wire equals the one scapy recomputes."""
    for layer in (IP, TCP, UDP):
        i = 1
        while (lay := pkt.getlayer(layer, i)) is not None:
            fresh = lay.copy()
            fresh.remove_payload()
            fresh.add_payload(lay.payload.copy())
            del fresh.chksum
            assert layer(bytes(fresh)).chksum == lay.chksum or layer is not IP, f"{layer.__name__} checksum"
            if layer is not IP:
                # L4 checksums cover the pseudo-header: recompute with the enclosing IP layer
                under = lay.underlayer.copy()
                under[layer].chksum = None
                assert under.__class__(bytes(under))[layer].chksum == lay.chksum, f"{layer.__name__} checksum"
            i += 1


def ip6ip6(profile):
    kernel, state = setup("ip6ip6-rx.toml", "router", profile)
    ct = established_ct(state, CLIENT, SERVER, 40000, 5201)
    ok = add_flow(kernel, state, "ft", ct, 0, "eth0")
    return kernel, state, ct, ok


def test_ip6ip6_flow_tuples_715():
    """7.1.5: the reply tuple arrives on eth1 with the tunnel (remote → local) in its key (nft_dev_path_info)."""
    kernel, state, ct, ok = ip6ip6("linux-7.1.5")
    assert ok and ct.status & IPS_OFFLOAD
    (flow,) = state.flowtables["ft"].flows.values()
    orig, reply = flow.tuplehash
    eth0, eth1 = state.ns.devices["eth0"].ifindex, state.ns.devices["eth1"].ifindex
    assert (orig.key.iifidx, orig.key.tun, orig.ifidx) == (eth0, None, eth1)
    assert reply.key.iifidx == eth1 and reply.key.tun.to_dict() == {
        "src": "2001:db8:2::2", "dst": "2001:db8:2::1", "l3_proto": 41}
    assert orig.mtu == 1500  # the underlay route's MTU for the into-tunnel direction


@pytest.mark.parametrize("profile,destopt", [("linux-7.1.5", False), ("linux-7.0", True)])
def test_ip6ip6_into_tunnel_push(profile, destopt):
    """Client → server is encapsulated by the fast path: outer 2001:db8:2::1 → ::2, hop limits from the
    inner header, 7.0 adds the encap-limit destination option (nf_flow_tunnel_ip6ip6_push)."""
    kernel, state, ct, ok = ip6ip6(profile)
    assert ok
    frame = bytes(Ether(**MAC) / IPv6(src=CLIENT, dst=SERVER, hlim=64) / TCP(sport=40000, dport=5201, flags="A")
                  / (b"x" * 100))
    verdict, _ = hook(kernel, state, "eth0", frame)
    assert verdict == "stolen"
    kind, dev, skb = kernel.xmits[-1]
    assert (kind, dev) == ("dev_queue_xmit", "eth1")
    out = Ether(skb.bytes())
    outer = out[IPv6]
    assert (outer.src, outer.dst, outer.hlim) == ("2001:db8:2::1", "2001:db8:2::2", 63)
    assert out.dst == state.ns.neigh.lookup("eth1", __import__("ipaddress").ip_address("2001:db8:2::2")).lladdr
    assert out.src == state.ns.devices["eth1"].mac
    if destopt:
        assert outer.nh == 60 and out[IPv6ExtHdrDestOpt].nh == 41
        inner = out[IPv6ExtHdrDestOpt].payload
    else:
        assert outer.nh == 41
        inner = outer.payload
    assert (inner.src, inner.dst, inner.hlim) == (CLIENT, SERVER, 63)
    checks_ok(out)


@pytest.mark.parametrize("profile", ["linux-7.0", "linux-7.1.5"])
def test_ip6ip6_out_of_tunnel_decap(profile):
    """Server → client arrives on eth1 encapsulated: matched with the tunnel key, outer header popped, sent on eth0."""
    kernel, state, ct, ok = ip6ip6(profile)
    frame = bytes(Ether(**MAC) / IPv6(src="2001:db8:2::2", dst="2001:db8:2::1", hlim=64)
                  / IPv6(src=SERVER, dst=CLIENT, hlim=63) / TCP(sport=5201, dport=40000, flags="A") / (b"y" * 200))
    verdict, _ = hook(kernel, state, "eth1", frame)
    assert verdict == "stolen"
    kind, dev, skb = kernel.xmits[-1]
    out = Ether(skb.bytes())
    assert dev == "eth0" and out[IPv6].src == SERVER and out[IPv6].hlim == 62
    assert out[IPv6].payload.__class__ is TCP and len(out) == 14 + 40 + 20 + 200
    checks_ok(out)


def test_ip6ip6_618_reply_stays_slow():
    """6.18 has no ip6tnl resolver: the flow is built (7.0), the into-tunnel direction uses neigh_xmit on tun0,
    and encapsulated replies at eth1 miss (l4proto 41) (flowsim.profiles)."""
    kernel, state, ct, ok = ip6ip6("linux-6.18")
    assert ok
    frame = bytes(Ether(**MAC) / IPv6(src=CLIENT, dst=SERVER, hlim=64) / TCP(sport=40000, dport=5201, flags="A"))
    assert hook(kernel, state, "eth0", frame)[0] == "stolen"
    assert kernel.xmits[-1][:2] == ("neigh_output", "tun0")
    reply = bytes(Ether(**MAC) / IPv6(src="2001:db8:2::2", dst="2001:db8:2::1") / IPv6(src=SERVER, dst=CLIENT)
                  / TCP(sport=5201, dport=40000, flags="A"))
    assert hook(kernel, state, "eth1", reply)[0] == "accept"
    assert state.flowtables["ft"].reasons["l4proto-unsupported"] == 1


def test_mtu_exceeded_goes_slow():
    """A packet longer than the flow MTU minus the tunnel overhead takes the slow path (nf_flow_exceeds_mtu)."""
    kernel, state, ct, ok = ip6ip6("linux-7.1.5")
    big = bytes(Ether(**MAC) / IPv6(src=CLIENT, dst=SERVER) / TCP(sport=40000, dport=5201, flags="A") / (b"z" * 1441))
    assert hook(kernel, state, "eth0", big)[0] == "accept"
    assert state.flowtables["ft"].reasons == {"mtu-exceeded": 1}
    fits = bytes(Ether(**MAC) / IPv6(src=CLIENT, dst=SERVER) / TCP(sport=40000, dport=5201, flags="A") / (b"z" * 1400))
    assert hook(kernel, state, "eth0", fits)[0] == "stolen"


@pytest.mark.parametrize("profile,verdict,closing", [("linux-7.1.5", "stolen", True), ("linux-6.12", "accept", False)])
def test_fin_closing_or_teardown(profile, verdict, closing):
    """FIN: CLOSING and stay fast from 6.14; immediate teardown before (nf_flow_state_check)."""
    kernel, state = setup("selftest.toml", "nsr1", profile)
    ct = established_ct(state, "10.0.1.99", "10.0.2.99", 40000, 12345)
    assert add_flow(kernel, state, "f1", ct, 0, "veth0")
    fin = bytes(Ether(**MAC) / IP(src="10.0.1.99", dst="10.0.2.99", ttl=64) / TCP(sport=40000, dport=12345, flags="FA"))
    assert hook(kernel, state, "veth0", fin, "f1")[0] == verdict
    (flow,) = state.flowtables["f1"].flows.values()
    assert flow.test(NF_FLOW_CLOSING) == closing and flow.test(NF_FLOW_TEARDOWN) != closing
    if closing:  # a SYN on a CLOSING flow tears it down and goes slow
        syn = bytes(Ether(**MAC) / IP(src="10.0.1.99", dst="10.0.2.99") / TCP(sport=40000, dport=12345, flags="S"))
        assert hook(kernel, state, "veth0", syn, "f1")[0] == "accept"
        assert flow.test(NF_FLOW_TEARDOWN) and not ct.status & IPS_OFFLOAD


def test_ttl_one_goes_slow():
    """TTL 1 is left to the slow path, which sends the ICMP (nf_flow_tuple_ip)."""
    kernel, state = setup("selftest.toml", "nsr1", "linux-7.1.5")
    ct = established_ct(state, "10.0.1.99", "10.0.2.99", 40000, 12345)
    add_flow(kernel, state, "f1", ct, 0, "veth0")
    pkt = bytes(Ether(**MAC) / IP(src="10.0.1.99", dst="10.0.2.99", ttl=1) / TCP(sport=40000, dport=12345))
    assert hook(kernel, state, "veth0", pkt, "f1")[0] == "accept"
    assert state.flowtables["f1"].reasons == {"ttl-expired": 1}


def test_gc_expires_idle_flow_and_hands_back_ct():
    """GC tears down a flow idle for the offload timeout, clears IPS_OFFLOAD and frees it (nf_flow_offload_gc_step)."""
    kernel, state = setup("selftest.toml", "nsr1", "linux-7.1.5")
    ct = established_ct(state, "10.0.1.99", "10.0.2.99", 40000, 12345)
    add_flow(kernel, state, "f1", ct, 0, "veth0")
    ft = state.flowtables["f1"]
    kernel.now = 29.0
    ft.nf_flow_offload_work_gc(kernel, state)
    assert len(ft.flows) == 1
    kernel.now = 30.5
    ft.nf_flow_offload_work_gc(kernel, state)
    assert not ft.flows and not ft.table and not ct.status & IPS_OFFLOAD
    assert [e[1] for e in ft.history] == ["add", "teardown", "free"]
    # the next `flow add` re-creates it
    assert add_flow(kernel, state, "f1", ct, 0, "veth0") and ft.flows_created == 2


@pytest.mark.parametrize("ctdir,in_dev", [(0, "veth0"), (1, "veth1")])
def test_flow_created_by_either_direction(ctdir, in_dev):
    """`flow add` works for a reply-direction packet as well (nft_flow_offload_eval; the selftest's tunnel cases)."""
    kernel, state = setup("selftest.toml", "nsr1", "linux-7.1.5")
    ct = established_ct(state, "10.0.1.99", "10.0.2.99", 40000, 12345)
    assert add_flow(kernel, state, "f1", ct, ctdir, in_dev)
    (flow,) = state.flowtables["f1"].flows.values()
    assert [h.key.iifidx for h in flow.tuplehash] == [state.ns.devices["veth0"].ifindex,
                                                      state.ns.devices["veth1"].ifindex]


@pytest.mark.parametrize("why,prepare,rid", [
    ("unconfirmed-syn-only", "syn", "flow-add-tcp-not-established"),
    ("second-flow-add", "twice", "flow-add-already-offloaded"),
    ("helper", "helper", "flow-add-helper"),
])
def test_flow_add_refusals_are_recorded(why, prepare, rid):
    """Each refused `flow add` records the nft_flow_offload_eval condition that stopped it, for explain."""
    import ipaddress

    from flowsim.kernel.conntrack import TCP_SYN, CtTuple

    kernel, state = setup("selftest.toml", "nsr1", "linux-7.1.5")
    if prepare == "syn":
        t = CtTuple(ipaddress.ip_address("10.0.1.99"), ipaddress.ip_address("10.0.2.99"), 1, 2, 2, 6)
        ct = state.conntrack.nf_conntrack_in(t, 0.0, tcp_flags=TCP_SYN).entry
    else:
        ct = established_ct(state, "10.0.1.99", "10.0.2.99", 40000, 12345)
        if prepare == "twice":
            assert add_flow(kernel, state, "f1", ct, 0, "veth0")
        if prepare == "helper":
            ct.helper = "ftp"
    assert not add_flow(kernel, state, "f1", ct, 0, "veth0")
    assert rid in state.flowtables["f1"].ct_failures[ct.id]


def test_counter_flag_feeds_conntrack_accounting():
    """With `counter`, fast-path packets add to the ct's counters: L3 length after pop (nf_ct_acct_update)."""
    kernel, state = setup("selftest.toml", "nsr1", "linux-7.1.5")
    ft = state.flowtables["f1"]
    ct = established_ct(state, "10.0.1.99", "10.0.2.99", 40000, 12345)
    add_flow(kernel, state, "f1", ct, 0, "veth0")
    before = ct.acct[0].packets, ct.acct[0].bytes
    pkt = bytes(Ether(**MAC) / IP(src="10.0.1.99", dst="10.0.2.99") / TCP(sport=40000, dport=12345, flags="A")
                / (b"q" * 60))
    for flags in (0, 2):
        ft.flags = flags
        assert hook(kernel, state, "veth0", pkt, "f1")[0] == "stolen"
    assert (ct.acct[0].packets - before[0], ct.acct[0].bytes - before[1]) == (1, 100)



# --- IP6IP6 over PPPoE: a lookup miss although the connection has a flow (nf_flow_tuple_encap) ---

def _pppoe_tunnel_reply():
    return bytes(Ether(**MAC) / PPPoE(sessionid=0x1234) / PPP(proto=0x0057)
                 / IPv6(src="2001:db8:2::2", dst="2001:db8:ff::2") / IPv6(src=SERVER, dst=CLIENT, hlim=60)
                 / TCP(sport=5201, dport=40000, flags="A") / (b"d" * 100))


@pytest.mark.parametrize("profile,settings,verdict,near", [
    ("linux-7.0", {}, "accept", None),  # the absolute-offset bug reads the wrong inner header
    ("linux-7.1.5", {}, "accept", ("tun",)),  # the raw PPP protocol leaves the tunnel fields empty
    ("linux-7.1.5", {"tuple_encap_pppoe_proto": "mapped"}, "stolen", None),  # the CI tree's fix
])
def test_ip6ip6_over_pppoe_reply(profile, settings, verdict, near):
    """Tunnel packets arriving in a PPPoE session miss their flow under 7.0 and 7.1.5 for different reasons;
    the miss names the key field that differs."""
    kernel, state = setup("ip6ip6-over-pppoe.toml", "cpe", profile)
    kernel.profile = kernel.profile.derive(**settings)
    ct = established_ct(state, CLIENT, SERVER, 40000, 5201)
    assert add_flow(kernel, state, "ft", ct, 0, "eth0")
    (flow,) = state.flowtables["ft"].flows.values()
    assert flow.tuplehash[1].key.tun is not None and flow.tuplehash[1].key.encap[0].proto == 0x8864
    assert hook(kernel, state, "eth1", _pppoe_tunnel_reply())[0] == verdict
    ft = state.flowtables["ft"]
    if near is not None:
        assert ft.near_misses[(flow.id, 1)][:2] == (near, 1)
    if verdict == "stolen":
        out = Ether(kernel.xmits[-1][2].bytes())
        assert out[IPv6].src == SERVER and out[IPv6].hlim == 59 and kernel.xmits[-1][1] == "eth0"


def test_near_misses_follow_the_connection_s_live_flow():
    """explain's near misses (found through conntrack, remembered per missing key): every miss is counted
    against the live flow; none while the connection has no flow; the next flow of the connection counts
    again (flow_offload_add forgets the remembered answers)."""
    kernel, state = setup("ip6ip6-over-pppoe.toml", "cpe", "linux-7.1.5")
    ct = established_ct(state, CLIENT, SERVER, 40000, 5201)
    assert add_flow(kernel, state, "ft", ct, 0, "eth0")
    ft = state.flowtables["ft"]
    (flow,) = ft.flows.values()
    for _ in range(3):
        assert hook(kernel, state, "eth1", _pppoe_tunnel_reply())[0] == "accept"
    assert ft.near_misses[(flow.id, 1)][:2] == (("tun",), 3) and len(ft.miss_memo) == 1
    ft.flow_offload_teardown(flow, kernel, state, "test")
    ft.nf_flow_offload_work_gc(kernel, state)
    assert not ft.flows
    hook(kernel, state, "eth1", _pppoe_tunnel_reply())
    assert ft.near_misses[(flow.id, 1)][1] == 3  # no flow: nothing counted
    ct.status &= ~IPS_OFFLOAD
    assert add_flow(kernel, state, "ft", ct, 0, "eth0") and not ft.miss_memo
    (again,) = ft.flows.values()
    hook(kernel, state, "eth1", _pppoe_tunnel_reply())
    assert again.id != flow.id and ft.near_misses[(again.id, 1)][:2] == (("tun",), 1)


def test_pppoe_over_vlan_masquerade_direct_xmit():
    """Into a PPPoE session over VLAN 7 with masquerade: DIRECT to the BRAS MAC, PPPoE inside the
    hwaccel VLAN tag, source NATed with valid checksums (nf_flow_nat_ip, nf_flow_encap_push)."""
    import ipaddress

    from flowsim.kernel.conntrack import NatRange

    kernel, state = setup("pppoe-over-vlan.toml", "cpe", "linux-7.1.5")
    ct = established_ct(state, "192.168.1.10", "198.51.100.10", 40000, 443)
    state.conntrack.nf_nat_setup_info(ct, "src", NatRange(ipaddress.ip_address("100.64.0.2"),
                                                          ipaddress.ip_address("100.64.0.2")))
    assert add_flow(kernel, state, "ft", ct, 0, "br-lan")
    frame = bytes(Ether(**MAC) / IP(src="192.168.1.10", dst="198.51.100.10", ttl=64)
                  / TCP(sport=40000, dport=443, flags="PA") / (b"u" * 300))
    assert hook(kernel, state, "lan0", frame)[0] == "stolen"
    kind, dev, skb = kernel.xmits[-1]
    assert dev == "eth1" and (skb.vlan_present, skb.vlan_proto, skb.vlan_tci) == (True, 0x8100, 7)
    out = Ether(skb.bytes())
    assert out.dst == "02:00:00:00:07:01" and out[PPPoE].sessionid == 0x42 and out[PPPoE].len == 2 + 20 + 20 + 300
    assert (out[IP].src, out[IP].ttl, out[TCP].sport) == ("100.64.0.2", 63, ct.tuplehash[1].dport)
    checks_ok(out)


def test_route_change_makes_neigh_flow_stale():
    """A route change after the flow was created: dst_check fails, the flow is torn down, slow path (nf_flow_dst_check)."""
    import ipaddress

    from flowsim.kernel.fib import Route

    kernel, state = setup("selftest.toml", "nsr1", "linux-7.1.5")
    ct = established_ct(state, "10.0.1.99", "10.0.2.99", 40000, 12345)
    assert add_flow(kernel, state, "f1", ct, 0, "veth0")
    state.ns.fib.add(Route(ipaddress.ip_network("10.9.0.0/16"), dev="veth1",
                           gateway=ipaddress.ip_address("192.168.10.2")))
    pkt = bytes(Ether(**MAC) / IP(src="10.0.1.99", dst="10.0.2.99") / TCP(sport=40000, dport=12345, flags="A"))
    assert hook(kernel, state, "veth0", pkt, "f1")[0] == "accept"
    (flow,) = state.flowtables["f1"].flows.values()
    assert state.flowtables["f1"].reasons == {"route-stale": 1} and flow.test(NF_FLOW_TEARDOWN)


def _pppoe_upload_flow(profile="linux-7.1.5"):
    kernel, state = setup("pppoe-over-vlan.toml", "cpe", profile)
    ct = established_ct(state, "192.168.1.10", "198.51.100.10", 40000, 443)
    assert add_flow(kernel, state, "ft", ct, 0, "br-lan")
    return kernel, state


def _gso_upload(kernel, state, payload: int, gso_type=None):
    from flowsim.kernel.gso import gso_type_of

    frame = bytes(Ether(**MAC) / IP(src="192.168.1.10", dst="198.51.100.10", ttl=64)
                  / TCP(sport=40000, dport=443, seq=1000, flags="PA") / (bytes(range(256)) * (payload // 256)))
    skb = skb_from_frame(frame, iif=state.ns.devices["lan0"].ifindex, gso_size=1400)
    skb.gso_type = gso_type_of(frame[14:]) if gso_type is None else gso_type
    verdict = nf_flow_offload_hook(kernel, state, state.flowtables["ft"], skb, state.ns.devices["lan0"])
    return verdict, skb


def test_gso_into_pppoe_is_segmented_before_the_push():
    """A GSO skb into PPPoE (needs_gso_segment, April-2026 fix): cut into gso_size segments in software, a
    PPPoE header on each, every segment a valid TCP packet continuing the sequence (nf_flow_queue_xmit)."""
    kernel, state = _pppoe_upload_flow()
    verdict, _skb = _gso_upload(kernel, state, 4096)
    assert verdict == "stolen"
    outs = [Ether(skb.bytes()) for _kind, dev, skb in kernel.xmits]
    assert [dev for _k, dev, _s in kernel.xmits] == ["eth1"] * 3 and all(not s.gso_size for *_x, s in kernel.xmits)
    assert [len(o[TCP].payload) for o in outs] == [1400, 1400, 1296]
    assert [o[TCP].seq for o in outs] == [1000, 2400, 3800]
    assert [str(o[TCP].flags) for o in outs] == ["A", "A", "PA"]  # PSH on the last segment only
    assert all(o[PPPoE].sessionid == 0x42 and o[PPPoE].len == 2 + len(o[IP]) for o in outs)
    for o in outs:
        checks_ok(o)
    assert ("ledger", "2 more pieces", {}) in kernel.steps
    assert state.flowtables["ft"].report()["gso"] == {"segmented": 1, "segments": 3}


def test_gso_without_needs_gso_segment_pushes_onto_the_gso_skb():
    """6.19 (no April-2026 fix): PPPoE is pushed onto the GSO skb itself, one frame leaves, still GSO."""
    kernel, state = _pppoe_upload_flow("linux-6.19")
    verdict, _skb = _gso_upload(kernel, state, 4096)
    assert verdict == "stolen" and len(kernel.xmits) == 1
    out = kernel.xmits[0][2]
    assert out.gso_size == 1400 and Ether(out.bytes())[PPPoE].len == 2 + 40 + 4096


def test_gso_segmentation_error_drops():
    """A GSO skb whose gso_type does not match its headers: skb_gso_segment fails, NF_DROP gso-segment-error."""
    from flowsim.kernel.gso import SKB_GSO_UDP_L4

    kernel, state = _pppoe_upload_flow()
    verdict, skb = _gso_upload(kernel, state, 4096, gso_type=SKB_GSO_UDP_L4)
    assert verdict == "drop" and skb.drop_reason == "gso-segment-error" and not kernel.xmits
    assert state.flowtables["ft"].reasons["gso-segment-error"] == 1


@pytest.mark.parametrize("gc_thresh3,verdict,reason", [
    ("1024", "stolen", None),  # room in the table: a NUD_NONE entry is created, the frame leaves (zero MAC)
    ("2", "drop", "neigh-error"),  # full of valid entries, nothing for neigh_forced_gc: -ENOBUFS, teardown
])
def test_neigh_xmit_creates_the_missing_neighbour_or_fails_when_the_table_is_full(gc_thresh3, verdict, reason):
    """NEIGH xmit whose next hop has no entry: ip_neigh_gw4 creates one (__neigh_create); above gc_thresh3 with
    nothing to force-collect that fails, the flow is torn down and the packet dropped (nf_flow_queue_xmit)."""
    kernel, state = setup("selftest.toml", "nsr1", "linux-7.1.5")
    ct = established_ct(state, "10.0.1.99", "10.0.2.99", 40000, 12345)
    assert add_flow(kernel, state, "f1", ct, 0, "veth0")
    (flow,) = state.flowtables["f1"].flows.values()
    th = flow.tuplehash[0]
    nexthop = th.dst.nexthop(ipaddress.ip_address("10.0.2.99"))
    assert state.ns.neigh.delete(th.dst.dev, nexthop) and len(state.ns.neigh) >= 2
    state.ns.sysctls["net.ipv4.neigh.default.gc_thresh3"] = gc_thresh3
    pkt = bytes(Ether(**MAC) / IP(src="10.0.1.99", dst="10.0.2.99") / TCP(sport=40000, dport=12345, flags="A"))
    got, skb = hook(kernel, state, "veth0", pkt, "f1")
    assert got == verdict and skb.drop_reason == reason
    created = state.ns.neigh.lookup(th.dst.dev, nexthop)
    if reason is None:
        assert created is not None and created.state == 0 and kernel.xmits[-1][2].bytes()[:6] == bytes(6)
    else:
        assert created is None and flow.test(NF_FLOW_TEARDOWN) and state.flowtables["f1"].reasons == {reason: 1}


def _spoil_teardown(kernel, state, flow):
    state.flowtables["f1"].flow_offload_teardown(flow, kernel, state, "test")


def _spoil_dying(kernel, state, flow):
    from flowsim.kernel.conntrack import IPS_DYING
    flow.ct.status |= IPS_DYING


def _spoil_closing(kernel, state, flow):
    flow.set(NF_FLOW_CLOSING)


def _spoil_ifindex(kernel, state, flow):
    half = flow.tuplehash[0]  # the egress device went away behind a still-valid route
    half.xmit = attrs.evolve(half.xmit, ifidx=999)


def _spoil_xmit_type(kernel, state, flow):
    from flowsim.kernel.flowtable.path import XmitType
    half = flow.tuplehash[0]
    half.xmit = attrs.evolve(half.xmit, xmit_type=XmitType.UNSPEC)


# (what happened to the flow, TCP flags of the next packet, verdict, reason, flow torn down after)
EXITS = [
    (_spoil_teardown, "A", "accept", "flow-teardown", True),
    (_spoil_dying, "A", "accept", "ct-dying", False),
    (_spoil_closing, "S", "accept", "tcp-syn-closing", True),
    (_spoil_ifindex, "A", "drop", "no-egress-device", True),
    (_spoil_xmit_type, "A", "drop", "xmit-type-unknown", False),
]


@pytest.mark.parametrize("spoil,flags,verdict,reason,torn", EXITS, ids=[e[3] for e in EXITS])
def test_hook_exits_after_the_lookup(spoil, flags, verdict, reason, torn):
    """Each exit of the hook after a lookup hit gives its verdict and reason id, and tears the flow down where the
    kernel does (TEARDOWN flag, dying ct, SYN on a CLOSING flow, missing egress device, unknown xmit type)."""
    kernel, state = setup("selftest.toml", "nsr1", "linux-7.1.5")
    ct = established_ct(state, "10.0.1.99", "10.0.2.99", 40000, 12345)
    assert add_flow(kernel, state, "f1", ct, 0, "veth0")
    (flow,) = state.flowtables["f1"].flows.values()
    spoil(kernel, state, flow)
    pkt = bytes(Ether(**MAC) / IP(src="10.0.1.99", dst="10.0.2.99") / TCP(sport=40000, dport=12345, flags=flags))
    got, skb = hook(kernel, state, "veth0", pkt, "f1")
    assert (got, state.flowtables["f1"].reasons) == (verdict, {reason: 1})
    assert flow.test(NF_FLOW_TEARDOWN) == torn and not kernel.xmits


def test_pppoe_push_refuses_a_non_ip_skb():
    """nf_flow_pppoe_push only encapsulates IPv4/IPv6 (the hook then drops with encap-push-failed, nf_flow_encap_push)."""
    from flowsim.kernel.flowtable.fastpath import nf_flow_pppoe_push

    skb = skb_from_frame(bytes(Ether(**MAC, type=0x0806) / (b"\0" * 28)))
    skb.data += 14
    assert nf_flow_pppoe_push(skb, 0x42) is False and skb.protocol == 0x0806
