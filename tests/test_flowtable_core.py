"""The flowtable core (net/netfilter/nf_flow_table_core.c) and properties of the fast path's rewrites.

The first half pins the life cycle of a flow entry: ``flow_offload_add``,
the table lookup, ``flow_offload_refresh``, ``flow_offload_teardown``, the
GC (``nf_flow_offload_gc_step``) with its timeouts, ``nf_flow_table_cleanup``
and the statistics.  The second half checks the bytes the fast path writes
(``nf_flow_table_ip.c``: NAT, TTL / hop limit, tunnel push) against scapy's
own dissection and checksums, over generated packets.
"""

from __future__ import annotations

import functools
import ipaddress
import itertools

import attrs
import pytest
from ftkit import add_flow, established_ct, setup
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.inet6 import IPv6, IPv6ExtHdrDestOpt
from scapy.layers.l2 import Ether

from flowsim.kernel.flowtable import core
from flowsim.kernel.conntrack import IPS_DYING, IPS_OFFLOAD, NF_CT_DAY
from flowsim.kernel.flowtable.core import NF_FLOW_TEARDOWN, NF_FLOW_TIMEOUT, flow_offload_alloc, offload_timeout
from flowsim.kernel.fib import Route
from flowsim.kernel.flowtable.fastpath import nf_flow_offload_hook
from flowsim.kernel.flowtable.path import XmitType
from flowsim.kernel.flowtable.tuple import flow_tuple_from_skb
from flowsim.kernel.nat import NatRange
from flowsim.kernel.skb import skb_from_frame
from flowsim.reasons import ACCEPT, DROP, STOLEN

MAC = dict(src="02:00:00:00:00:aa", dst="02:00:00:00:00:bb")
CLIENT, SERVER = "10.0.1.99", "10.0.2.99"
PROPS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def selftest(profile: str = "linux-7.1.5"):
    """nsr1 of the kernel selftest with one offloaded TCP connection client → server (flowtable f1)."""
    kernel, state = setup("selftest.toml", "nsr1", profile)
    ct = established_ct(state, CLIENT, SERVER, 40000, 12345)
    assert add_flow(kernel, state, "f1", ct, 0, "veth0")
    ft = state.flowtables["f1"]
    (flow,) = ft.flows.values()
    return kernel, state, ft, ct, flow


def hook(kernel, state, ft, dev: str, frame: bytes):
    skb = skb_from_frame(frame, iif=state.ns.devices[dev].ifindex)
    return nf_flow_offload_hook(kernel, state, ft, skb, state.ns.devices[dev]), skb


def tcp4(ttl: int = 64, payload: bytes = b"p" * 40) -> bytes:
    return bytes(Ether(**MAC) / IP(src=CLIENT, dst=SERVER, ttl=ttl) / TCP(sport=40000, dport=12345, flags="A")
                 / payload)


# --- nf_flow_table_core.c ---------------------------------------------------------------------

def test_flow_offload_add_inserts_both_tuples_and_refreshes_the_ct_for_a_day():
    """flow_offload_add: both directions hashed, the flow timeout set, nf_ct_refresh(ct, NF_CT_DAY)."""
    kernel, state, ft, ct, flow = selftest()
    orig, reply = flow.tuplehash
    assert ft.table[orig.key] is orig and ft.table[reply.key] is reply
    assert (orig.dir, reply.dir) == (0, 1) and orig.flow is flow and reply.flow is flow
    assert flow.timeout == kernel.now + NF_FLOW_TIMEOUT and ct.timeout == kernel.now + NF_CT_DAY
    assert ct.status & IPS_OFFLOAD and ft.flows_created == 1 and ft.history[-1][1] == "add"


def test_flow_offload_add_puts_a_same_key_entry_at_the_head_of_the_bucket():
    """flow_offload_add: rhashtable_insert_fast checks no duplicate key; the new entry shadows the old one."""
    kernel, state, ft, ct, flow = selftest()
    twin = flow_offload_alloc(ct)
    twin.tuplehash[0].key, twin.tuplehash[1].key = flow.tuplehash[0].key, flow.tuplehash[1].key
    assert ft.flow_offload_add(twin, kernel.now, state.ns) is None
    assert list(ft.flows.values()) == [flow, twin] and ft.flows_created == 2
    assert tuple(ft.table[h.key] for h in flow.tuplehash) == twin.tuplehash
    assert [ft.shadowed[h.key] for h in flow.tuplehash] == [[flow.tuplehash[0]], [flow.tuplehash[1]]]


def test_flow_offload_del_removes_that_very_entry():
    """flow_offload_del → rhashtable_remove_fast: the older entry goes and the head stays; then the head goes."""
    kernel, state, ft, ct, flow = selftest()
    twin = flow_offload_alloc(ct)
    twin.tuplehash[0].key, twin.tuplehash[1].key = flow.tuplehash[0].key, flow.tuplehash[1].key
    ft.flow_offload_add(twin, kernel.now, state.ns)
    ft._remove(flow, kernel.now)
    assert tuple(ft.table[h.key] for h in twin.tuplehash) == twin.tuplehash and not ft.shadowed
    assert list(ft.flows.values()) == [twin]
    ft._remove(twin, kernel.now)
    assert not ft.table and not ft.shadowed and not ft.flows and ft.flows_removed == 2


def test_removing_the_head_brings_the_older_entry_back():
    """rhashtable_remove_fast of the head: the next entry of the same key is what rhashtable_lookup finds."""
    kernel, state, ft, ct, flow = selftest()
    twin = flow_offload_alloc(ct)
    twin.tuplehash[0].key, twin.tuplehash[1].key = flow.tuplehash[0].key, flow.tuplehash[1].key
    ft.flow_offload_add(twin, kernel.now, state.ns)
    ft._remove(twin, kernel.now)
    assert tuple(ft.table[h.key] for h in flow.tuplehash) == flow.tuplehash and not ft.shadowed


def test_flow_offload_lookup_finds_the_direction_of_the_packet():
    """flow_offload_lookup: the tuple built from a packet is the key of the flow half of its direction."""
    kernel, state, ft, ct, flow = selftest()
    fwd = skb_from_frame(tcp4(), iif=state.ns.devices["veth0"].ifindex)
    back = skb_from_frame(bytes(Ether(**MAC) / IP(src=SERVER, dst=CLIENT) / TCP(sport=12345, dport=40000)),
                          iif=state.ns.devices["veth1"].ifindex)
    assert ft.table.get(flow_tuple_from_skb(fwd).tuple) is flow.tuplehash[0]
    assert ft.table.get(flow_tuple_from_skb(back).tuple) is flow.tuplehash[1]
    wrong_iif = skb_from_frame(tcp4(), iif=state.ns.devices["veth1"].ifindex)
    assert ft.table.get(flow_tuple_from_skb(wrong_iif).tuple) is None


def test_flows_of_one_route_share_its_xmit_fields():
    """flow_offload_fill_route writes the same route fields into every flow of one path: the model keeps them
    once (FlowXmit), the connected routes that Fib.lookup rebuilds at every call included."""
    kernel, state, ft, ct, flow = selftest()
    other = established_ct(state, CLIENT, SERVER, 40001, 12345)
    assert add_flow(kernel, state, "f1", other, 0, "veth0")
    second = ft.by_ct[other.id]
    assert all(a.xmit is b.xmit for a, b in zip(second.tuplehash, flow.tuplehash))
    assert flow.tuplehash[0].mtu == flow.tuplehash[0].xmit.mtu and flow.tuplehash[0].dst is not None


def test_an_equal_ipv6_static_route_added_again_is_another_dst():
    """ip6_dst_check finds an IPv6 static route by identity in its fib6 node (``Fib._in_tree``): a route deleted
    and added again with the same fields is a new dst entry, and its flows must not share the old one's fields."""
    route = Route(ipaddress.ip_network("2001:db8:9::/64"), dev="veth0", proto="static")
    fields = [XmitType.NEIGH, 1500, route, 7, 2, 0, 0, "00:00:00:00:00:00", "00:00:00:00:00:00", 0, False]
    first = core._xmit_interned(*fields)
    assert core._xmit_interned(*fields) is first
    fields[2] = attrs.evolve(route)  # equal, another object
    assert fields[2] == route and core._xmit_interned(*fields) is not first
    v4 = Route(ipaddress.ip_network("10.9.0.0/16"), dev="veth0", proto="static")
    fields[2] = v4
    shared = core._xmit_interned(*fields)
    fields[2] = attrs.evolve(v4)  # IPv4: ipv4_dst_check reads the genid only, so equal routes are one
    assert core._xmit_interned(*fields) is shared


def test_flowtable_history_rows_read_back_as_tuples():
    """The flowtable's event log (add / teardown with its why / free) reads as (time, event, flow id, detail)."""
    kernel, state, ft, ct, flow = selftest()
    ft.flow_offload_teardown(flow, kernel, state, "TCP FIN/RST")
    ft.nf_flow_offload_work_gc(kernel, state)
    assert list(ft.history) == [(0.0, "add", flow.id, ""), (0.0, "teardown", flow.id, "TCP FIN/RST"),
                                (0.0, "free", flow.id, "")]
    assert ft.history[-1] == (0.0, "free", flow.id, "") and ft.history[1][3] == "TCP FIN/RST"
    assert ft.history[1:] == list(ft.history)[1:] and len(ft.history) == 3
    with pytest.raises(IndexError):
        ft.history[3]


def test_flow_offload_refresh_moves_the_timeout_only_by_more_than_a_second():
    """flow_offload_refresh: skips the write unless the new timeout is more than HZ later (or forced)."""
    kernel, state, ft, ct, flow = selftest()
    start = flow.timeout
    ft.flow_offload_refresh(flow, kernel.now + 0.5)
    assert flow.timeout == start
    ft.flow_offload_refresh(flow, kernel.now + 0.5, force=True)
    assert flow.timeout == start + 0.5
    ft.flow_offload_refresh(flow, kernel.now + 2.0)
    assert flow.timeout == start + 2.0


def test_fast_path_packet_refreshes_the_flow():
    """nf_flow_offload_forward calls flow_offload_refresh for every packet it forwards."""
    kernel, state, ft, ct, flow = selftest()
    kernel.now = 10.0
    assert hook(kernel, state, ft, "veth0", tcp4())[0] == STOLEN
    assert flow.timeout == 10.0 + NF_FLOW_TIMEOUT


def test_flow_offload_teardown_is_idempotent_and_hands_the_ct_back():
    """flow_offload_teardown: clears IPS_OFFLOAD, sets NF_FLOW_TEARDOWN and fixes the ct up once."""
    kernel, state, ft, ct, flow = selftest()
    ft.flow_offload_teardown(flow, kernel, state, "test")
    ft.flow_offload_teardown(flow, kernel, state, "again")
    assert flow.test(NF_FLOW_TEARDOWN) and not ct.status & IPS_OFFLOAD and flow.state == "teardown"
    assert [e[1] for e in ft.history] == ["add", "teardown"]
    assert hook(kernel, state, ft, "veth0", tcp4())[0] == ACCEPT and ft.reasons == {"flow-teardown": 1}


def test_gc_keeps_a_live_flow_and_extends_its_ct():
    """nf_flow_offload_gc_step: a flow not yet expired stays; nf_flow_table_extend_ct_timeout keeps the ct."""
    kernel, state, ft, ct, flow = selftest()
    kernel.now = NF_FLOW_TIMEOUT - 1.0
    ct.timeout = kernel.now + 10.0  # under the 5-minute floor, not yet expired (an expired one is left alone)
    ft.nf_flow_offload_work_gc(kernel, state)
    assert ft.flows == {flow.id: flow} and ct.timeout == kernel.now + NF_CT_DAY


def test_gc_frees_an_expired_flow():
    """nf_flow_offload_gc_step: nf_flow_has_expired → teardown, then flow_offload_del frees both tuples."""
    kernel, state, ft, ct, flow = selftest()
    kernel.now = NF_FLOW_TIMEOUT + 0.5
    ft.nf_flow_offload_work_gc(kernel, state)
    assert not ft.flows and not ft.table and ft.flows_removed == 1
    assert [e[1] for e in ft.history] == ["add", "teardown", "free"] and ft.history[1][3] == "expired"


def test_gc_frees_the_flow_of_a_dying_ct():
    """nf_flow_offload_gc_step: nf_flow_is_dying (IPS_DYING) tears the flow down before it expires."""
    kernel, state, ft, ct, flow = selftest()
    ct.status |= IPS_DYING
    ft.nf_flow_offload_work_gc(kernel, state)
    assert not ft.flows and ft.history[1][3] == "ct dying"


def test_offload_timeout_reads_the_per_protocol_sysctl():
    """flow_offload_get_timeout: nf_flowtable_tcp_timeout / _udp_timeout, NF_FLOW_TIMEOUT otherwise."""
    class Ns:
        def sysctl(self, key):
            return {"net.netfilter.nf_flowtable_tcp_timeout": "7",
                    "net.netfilter.nf_flowtable_udp_timeout": "11"}.get(key)

    assert (offload_timeout(Ns(), 6), offload_timeout(Ns(), 17), offload_timeout(Ns(), 47)) == (7.0, 11.0,
                                                                                                NF_FLOW_TIMEOUT)


def test_cleanup_of_a_device_frees_the_flows_that_arrive_on_it():
    """nf_flow_table_cleanup (NETDEV_DOWN): tear down every flow with a tuple from the device, then GC."""
    kernel, state, ft, ct, flow = selftest()
    ft.cleanup_dev(kernel, state, state.ns.devices["veth1"].ifindex)
    assert not ft.flows and not ct.status & IPS_OFFLOAD


def test_counters_of_each_verdict():
    """nf_flow_offload_ip_hook's verdicts as counted: NF_STOLEN fast path, NF_ACCEPT slow path, NF_DROP."""
    kernel, state, ft, ct, flow = selftest()
    assert hook(kernel, state, ft, "veth0", tcp4())[0] == STOLEN
    assert hook(kernel, state, ft, "veth0", tcp4(ttl=1))[0] == ACCEPT
    ft.count(DROP, "not-writable")
    report = ft.report(state.ns)
    assert (report["fastpath"], report["slowpath"], report["drops"]) == (1, 1, 1)
    assert report["reasons"] == {"not-writable": 1, "ttl-expired": 1}
    orig = report["flows"][0]["original"]
    assert (orig["packets"], orig["bytes"]) == (1, len(tcp4()) - 14)


# --- properties of the bytes the fast path writes (nf_flow_table_ip.c) -------------------------

def _checksums_valid(pkt) -> None:
    """Every IPv4 header and TCP/UDP checksum in *pkt* equals the one scapy computes from scratch."""
    for layer in (IP, TCP, UDP):
        i = 1
        while (lay := pkt.getlayer(layer, i)) is not None:
            under = lay if layer is IP else lay.underlayer
            fresh = under.copy()
            fresh[layer].chksum = None
            assert fresh.__class__(bytes(fresh))[layer].chksum == lay.chksum, f"{layer.__name__} checksum"
            i += 1


@functools.cache
def _nat_router():
    return setup("selftest-nat.toml", "nsr1", "linux-7.1.5")


_sports = itertools.count(1024)


@PROPS
@given(snat=st.integers(0x0A000000, 0x0AFFFFFF), sport=st.integers(1024, 65535),
       dnat=st.one_of(st.none(), st.integers(1, 65535)), udp=st.booleans(),
       ttl=st.integers(2, 255), payload=st.binary(max_size=64))
def test_nat_rewrites_addresses_ports_and_checksums(snat, sport, dnat, udp, ttl, payload):
    """nf_flow_nat_ip: SNAT/DNAT address and port from the reply tuple, incremental checksums stay valid."""
    kernel, state = _nat_router()
    ft = state.flowtables["f1"]
    client_port = next(_sports)
    ct = established_ct(state, CLIENT, "10.0.2.99", client_port, 12345, l4proto=17 if udp else 6)
    state.conntrack.nf_nat_setup_info(ct, "src", NatRange(ipaddress.ip_address(snat), None, sport))
    if dnat is not None:
        state.conntrack.nf_nat_setup_info(ct, "dst", NatRange(ipaddress.ip_address("10.0.2.98"), None, dnat))
    try:
        assert add_flow(kernel, state, "f1", ct, 0, "veth0")
        l4 = UDP(sport=client_port, dport=12345) if udp else TCP(sport=client_port, dport=12345, flags="A")
        frame = bytes(Ether(**MAC) / IP(src=CLIENT, dst="10.0.2.99", ttl=ttl) / l4 / payload)
        verdict, skb = hook(kernel, state, ft, "veth0", frame)
    finally:  # the next example may map to the same reply tuple: free this flow (teardown + GC)
        for flow in list(ft.flows.values()):
            ft.flow_offload_teardown(flow, kernel, state, "next example")
        ft.nf_flow_offload_work_gc(kernel, state)
    assert verdict == STOLEN
    out = Ether(kernel.xmits[-1][2].bytes())
    reply = ct.tuplehash[1]
    sent = out[UDP] if udp else out[TCP]
    assert (out[IP].src, sent.sport) == (str(reply.dst), reply.dport) and out[IP].src == str(ipaddress.ip_address(snat))
    assert (out[IP].dst, sent.dport) == (str(reply.src), reply.sport)
    assert out[IP].ttl == ttl - 1 and bytes(sent.payload) == payload
    _checksums_valid(out)


@PROPS
@given(ttl=st.integers(2, 255), tos=st.integers(0, 255), df=st.booleans(), payload=st.binary(max_size=200))
def test_ip_decrease_ttl_keeps_the_header_checksum_valid(ttl, tos, df, payload):
    """ip_decrease_ttl: TTL − 1 with the incremental update of the IPv4 header checksum; nothing else changes."""
    kernel, state, ft, ct, flow = _plain_router()
    inner = IP(src=CLIENT, dst=SERVER, ttl=ttl, tos=tos, flags="DF" if df else 0) / TCP(
        sport=40000, dport=12345, flags="A") / payload
    verdict, skb = hook(kernel, state, ft, "veth0", bytes(Ether(**MAC) / inner))
    assert verdict == STOLEN
    out = Ether(kernel.xmits[-1][2].bytes())
    want = IP(bytes(inner))
    want.ttl -= 1
    want.chksum = None
    assert bytes(out[IP]) == bytes(IP(bytes(want)))


@PROPS
@given(hlim=st.integers(2, 255), tc=st.integers(0, 255), payload=st.binary(max_size=200))
def test_ipv6_hop_limit_decrement(hlim, tc, payload):
    """nf_flow_offload_ipv6_forward: hop_limit − 1 (no header checksum), the rest of the packet unchanged."""
    kernel, state, ft, ct, flow = _plain_router6()
    inner = IPv6(src="dead:1::99", dst="dead:2::99", hlim=hlim, tc=tc) / TCP(sport=40000, dport=12345,
                                                                           flags="A") / payload
    verdict, skb = hook(kernel, state, ft, "veth0", bytes(Ether(**MAC) / inner))
    assert verdict == STOLEN
    out = Ether(kernel.xmits[-1][2].bytes())
    want = IPv6(bytes(inner))
    want.hlim -= 1
    assert bytes(out[IPv6]) == bytes(want)
    _checksums_valid(out)


@functools.cache
def _plain_router():
    return selftest()


@functools.cache
def _plain_router6():
    kernel, state = setup("selftest.toml", "nsr1", "linux-7.1.5")
    ct = established_ct(state, "dead:1::99", "dead:2::99", 40000, 12345)
    assert add_flow(kernel, state, "f1", ct, 0, "veth0")
    return kernel, state, state.flowtables["f1"], ct, next(iter(state.flowtables["f1"].flows.values()))


@functools.cache
def _ipip_router():
    kernel, state = setup("ipip.toml", "nsr1", "linux-7.1.5")
    ct = established_ct(state, CLIENT, SERVER, 40000, 12345)
    assert add_flow(kernel, state, "f1", ct, 0, "veth0")
    return kernel, state, state.flowtables["f1"]


@PROPS
@given(ttl=st.integers(2, 255), tos=st.integers(0, 255), df=st.booleans(), payload=st.binary(max_size=200))
def test_ipip_push_builds_a_valid_outer_header(ttl, tos, df, payload):
    """nf_flow_tunnel_ipip_push: outer 192.168.10.1 → .2 proto 4, TOS/TTL/DF from the inner header, valid checksum."""
    kernel, state, ft = _ipip_router()
    inner = IP(src=CLIENT, dst=SERVER, ttl=ttl, tos=tos, flags="DF" if df else 0) / TCP(
        sport=40000, dport=12345, flags="A") / payload
    verdict, skb = hook(kernel, state, ft, "veth0", bytes(Ether(**MAC) / inner))
    assert verdict == STOLEN
    out = Ether(kernel.xmits[-1][2].bytes())
    outer = out[IP]
    assert (outer.src, outer.dst, outer.proto, outer.ihl) == ("192.168.10.1", "192.168.10.2", 4, 5)
    assert (outer.ttl, outer.tos, outer.flags.DF) == (ttl - 1, tos, df)
    assert outer.len == 20 + len(inner)
    assert out[IP][1].ttl == ttl - 1 and bytes(out[IP][1][TCP].payload) == payload
    _checksums_valid(out)


@functools.cache
def _ip6ip6_router(profile: str):
    kernel, state = setup("ip6ip6-rx.toml", "router", profile)
    ct = established_ct(state, "2001:db8:1::1", "2001:db8:3::2", 40000, 5201)
    assert add_flow(kernel, state, "ft", ct, 0, "eth0")
    return kernel, state, state.flowtables["ft"]


@PROPS
@given(profile=st.sampled_from(["linux-7.0", "linux-7.1.5"]), hlim=st.integers(2, 255), tc=st.integers(0, 255),
       payload=st.binary(max_size=200))
def test_ip6ip6_push_builds_the_outer_header(profile, hlim, tc, payload):
    """nf_flow_tunnel_ip6ip6_push: outer 2001:db8:2::1 → ::2, traffic class and hop limit from the inner
    header, payload length right, the encap-limit destination option where the kernel adds it (7.0)."""
    kernel, state, ft = _ip6ip6_router(profile)
    inner = IPv6(src="2001:db8:1::1", dst="2001:db8:3::2", hlim=hlim, tc=tc) / TCP(
        sport=40000, dport=5201, flags="A") / payload
    verdict, skb = hook(kernel, state, ft, "eth0", bytes(Ether(**MAC) / inner))
    assert verdict == STOLEN
    out = Ether(kernel.xmits[-1][2].bytes())
    outer = out[IPv6]
    destopt = profile == "linux-7.0"
    assert (outer.src, outer.dst, outer.hlim, outer.tc) == ("2001:db8:2::1", "2001:db8:2::2", hlim - 1, tc)
    assert outer.nh == (60 if destopt else 41) and outer.plen == len(inner) + (8 if destopt else 0)
    assert out.haslayer(IPv6ExtHdrDestOpt) == destopt
    got_inner = out[IPv6][1] if not destopt else out[IPv6ExtHdrDestOpt].payload
    want = IPv6(bytes(inner))
    want.hlim -= 1
    assert bytes(got_inner) == bytes(want)
    _checksums_valid(out)
