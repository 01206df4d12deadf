"""The reassembly queues' checks, in the kernel's order, and the fragments ICMPv6 answers.

``inet_frag_queue_insert`` (net/ipv4/inet_fragment.c) keeps a queue's fragments as runs: a fragment that starts
where the tail ends joins the last run, any other starts its own.  A fragment inside one run is a duplicate
(dropped, the queue kept); one that meets a run without lying inside it is an overlap, and the whole datagram
is discarded (RFC 5722, errata 3089).  Before it, ``ip_frag_queue`` (net/ipv4/ip_fragment.c), ``ip6_frag_queue``
(net/ipv6/reassembly.c) and ``nf_ct_frag6_queue`` (net/ipv6/netfilter/nf_conntrack_reasm.c) check the
fragment's end against the datagram's: a second last fragment with another end, bytes past the last one's end
and an empty fragment are refused.  IPv4 cuts an MF fragment's odd end to 8 bytes; IPv6 refuses it, the local
queue with an ICMPv6 Parameter Problem, conntrack's by letting the fragment on unreassembled.  The local IPv6
queue is killed by every refusal but a duplicate's; conntrack's keeps its queue.  ``ipv6_frag_rcv`` refuses a
first fragment that does not hold its upper-layer header (RFC 8200 4.5), and ICMPv6 (``is_ineligible``,
net/ipv6/icmp.c) answers later fragments too, where IPv4's ``icmp_send`` answers only the first.
"""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs
from scapy.layers.inet import IP
from scapy.layers.inet6 import ICMPv6DestUnreach, ICMPv6ParamProblem, IPv6, IPv6ExtHdrFragment
from scapy.layers.l2 import Ether
from scapy.utils import rdpcap

from flowsim.config.topology import load_topology_text
from flowsim.kernel.pkt import (
    IPFRAG_DUP, IPFRAG_OK, IPFRAG_OVERLAP, FragDiscard, Frag6Queue, FragQueue, InetFragQueue, ipv6frag_thdr_truncated,
    parse_ip,
)
from flowsim.sim.simulation import Simulation

A4, B4 = "10.0.0.1", "10.0.0.2"
A6, B6 = "2001:db8::1", "2001:db8::2"

TOPOLOGY = f"""
[netns.a]
commands = '''
ip link add eth0 type veth peer name eth0 netns b
ip link set eth0 up
ip addr add {A4}/24 dev eth0
ip addr add {A6}/64 dev eth0 nodad
'''
[netns.b]
commands = '''
ip link set eth0 up
ip addr add {B4}/24 dev eth0
ip addr add {B6}/64 dev eth0 nodad
'''
"""
CONNTRACK = """nft = '''
table inet t {
	chain pre {
		type filter hook prerouting priority filter; policy accept;
		ct state new counter
	}
}
'''
"""


# ---------------------------------------------------------------- inet_frag_queue_insert

def test_a_fragment_inside_one_run_is_a_duplicate():
    q = InetFragQueue(0.0)
    assert [q.inet_frag_queue_insert(o, e) for o, e in [(0, 8), (8, 16), (16, 24)]] == [IPFRAG_OK] * 3
    assert q.runs == {0: 24}  # each joined the run where the tail ended: fragrun_append_to_last
    assert q.inet_frag_queue_insert(0, 16) == IPFRAG_DUP  # inside the run, across two of its fragments
    assert q.inet_frag_queue_insert(8, 32) == IPFRAG_OVERLAP  # past the tail, starting before its end


def test_the_same_bytes_in_reverse_order_are_an_overlap():
    """Fragments that came in reverse order are runs of their own: bytes across two of them overlap."""
    q = InetFragQueue(0.0)
    assert [q.inet_frag_queue_insert(o, e) for o, e in [(16, 24), (8, 16), (0, 8)]] == [IPFRAG_OK] * 3
    assert q.runs == {16: 8, 8: 8, 0: 8}
    assert q.inet_frag_queue_insert(0, 16) == IPFRAG_OVERLAP
    assert q.inet_frag_queue_insert(8, 16) == IPFRAG_DUP


# ---------------------------------------------------------------- the IPv4 queue (ip_frag_queue)

def _v4(offset: int, data: bytes, mf: bool, ident: int = 7, df: bool = False) -> tuple[bytes, object]:
    flags = (1 if mf else 0) | (2 if df else 0)
    pkt = bytes(IP(src=A4, dst=B4, id=ident, flags=flags, frag=offset // 8, proto=17) / data)
    return pkt, parse_ip(bytearray(pkt), 0)


def test_ipv4_overlap_kills_the_queue():
    q = FragQueue(0.0)
    assert q.add(*_v4(0, bytes(16), True)) is None
    with pytest.raises(FragDiscard) as refused:
        q.add(*_v4(8, bytes(16), True))
    assert (refused.value.rid, refused.value.kill) == ("frag-overlap", True)


def test_ipv4_duplicate_is_dropped_and_the_datagram_still_completes():
    q = FragQueue(0.0)
    first, last = _v4(0, bytes(range(16)), True), _v4(16, bytes(range(16, 24)), False)
    q.add(*first)
    with pytest.raises(FragDiscard) as refused:
        q.add(*first)
    assert (refused.value.rid, refused.value.kill) == ("frag-duplicate", False)
    whole = q.add(*last)
    assert IP(whole).len == 20 + 24 and bytes(IP(whole).payload) == bytes(range(24)) and IP(whole).flags == 0


@pytest.mark.parametrize("fragments, detail", [
    ([(0, 16, False), (8, 16, False)], "a last fragment ending at byte 24, the datagram's fragments at 16"),
    ([(16, 8, False), (24, 8, True)], "a fragment ending at byte 32, past the last fragment's 24"),
    ([(8, 8, False), (0, 16, True)], "a fragment ending at byte 16"),  # passes the end checks, overlaps
    ([(0, 0, True)], "a fragment without data"),
])
def test_ipv4_end_checks(fragments, detail):
    q = FragQueue(0.0)
    *before, (offset, size, mf) = fragments
    for o, n, m in before:
        q.add(*_v4(o, bytes(n), m))
    with pytest.raises(FragDiscard) as refused:
        q.add(*_v4(offset, bytes(size), mf))
    assert refused.value.kill
    if "ending at byte 16" in detail:
        assert refused.value.rid == "frag-overlap"
    else:
        assert refused.value.rid == "frag-invalid" and detail in refused.value.detail


def test_ipv4_cuts_an_odd_end_of_an_mf_fragment():
    """ip_frag_queue: ``end &= ~7`` — the fragment keeps 16 of its 20 bytes, the next one starts there."""
    q = FragQueue(0.0)
    assert q.add(*_v4(0, bytes(range(20)), True)) is None
    whole = q.add(*_v4(16, bytes(range(100, 104)), False))
    assert bytes(IP(whole).payload) == bytes(range(16)) + bytes(range(100, 104))


def test_ipv4_oversized_datagram_is_refused_at_reassembly():
    q = FragQueue(0.0)
    q.add(*_v4(0, bytes(8), True))
    q.add(*_v4(8, bytes(65496), True))  # within one IPv4 packet; the datagram reaches 65504 data bytes
    with pytest.raises(FragDiscard) as refused:
        q.add(*_v4(65504, bytes(16), False))
    assert (refused.value.rid, refused.value.kill) == ("frag-oversize", True)


# ---------------------------------------------------------------- the IPv6 queues

def _v6(offset: int, data: bytes, mf: bool, nh: int = 17, src: str = A6, dst: str = B6,
        hlim: int = 64) -> tuple[bytes, object]:
    pkt = bytes(IPv6(src=src, dst=dst, hlim=hlim) / IPv6ExtHdrFragment(offset=offset // 8, m=int(mf), id=9, nh=nh)
                / data)
    return pkt, parse_ip(bytearray(pkt), 0)


def _refused(fragments: list[tuple[int, int, bool]], conntrack: bool) -> FragDiscard:
    """The refusal of the last of *fragments* (offset, data bytes, MF) by one IPv6 queue."""
    q = Frag6Queue(0.0)
    *before, (offset, size, mf) = fragments
    for o, n, m in before:
        q.add(*_v6(o, bytes(n), m), conntrack)
    with pytest.raises(FragDiscard) as refused:
        q.add(*_v6(offset, bytes(size), mf), conntrack)
    return refused.value


@pytest.mark.parametrize("conntrack", [False, True])
@pytest.mark.parametrize("fragments, rid, kill_local, kill_ct, param_prob", [
    # a second last fragment with another end: ip6_frag_queue's discard_fq, nf_ct_frag6_queue's err (queue kept)
    ([(0, 16, False), (0, 24, False)], "frag-invalid", True, False, None),
    # an MF fragment not on 8 bytes: Parameter Problem at payload_len (offset 4); conntrack: -EPROTO, let on
    ([(0, 20, True)], "frag-unaligned", True, True, (0, 4)),
    # end > IPV6_MAXPLEN: the pointer is the fragment header's offset field (40-byte header, nexthdr, reserved)
    ([(65528, 16, True)], "frag-oversize", True, False, (0, 42)),
    ([(0, 16, True), (8, 16, False)], "frag-overlap", True, True, None),
])
def test_ipv6_refusals_local_and_conntrack(fragments, rid, kill_local, kill_ct, param_prob, conntrack):
    """The same checks in the same order; the local queue is killed by any refusal but a duplicate's and answers
    a bad length with a Parameter Problem, conntrack's keeps its queue and lets an unaligned fragment on."""
    r = _refused(fragments, conntrack)
    assert (r.rid, r.kill) == (rid, kill_ct if conntrack else kill_local)
    assert r.param_prob == (None if conntrack else param_prob)
    assert r.accept == (conntrack and rid == "frag-unaligned")


def test_ipv6frag_thdr_truncated():
    assert ipv6frag_thdr_truncated(_v6(0, bytes(4), True)[1])  # 4 of UDP's 8 header bytes
    assert not ipv6frag_thdr_truncated(_v6(0, bytes(8), True)[1])
    assert not ipv6frag_thdr_truncated(_v6(8, bytes(4), False)[1])  # a later fragment: no upper-layer header


# ---------------------------------------------------------------- in the stack

def _run(frames: list[bytes], conntrack: bool = False, tmp_path=None, pieces: bool = True, forwarding: bool = False):
    """Receive *frames* on b's eth0 (from a's MAC), one packet's pieces when *pieces*; the finished simulation."""
    text = TOPOLOGY + (CONNTRACK if conntrack else "") + \
        ('sysctls = { "net.ipv4.ip_forward" = 1 }\n' if forwarding else "")
    sim = Simulation(load_topology_text(text), pcap_dir=tmp_path)
    k = sim.kernel
    dev = sim.topo.device("b", "eth0")
    peer = sim.topo.device("a", "eth0")
    tag = k.new_tag("x", "original", "udp")
    k.ledger.add_pieces(tag, len(frames) - 1)
    for i, f in enumerate(frames):
        eth = bytes(Ether(src=peer.mac, dst=dev.mac, type=0x0800 if f[0] >> 4 == 4 else 0x86DD))
        sim.at(i * 1e-3, k.receive_frame, dev, eth + f, tag if pieces else k.new_tag("x", "original", "udp"))
    sim.run()
    return sim


def _at_a(tmp_path) -> list:
    """What a's eth0 received (no file: nothing)."""
    pcap = tmp_path / "a-eth0.pcap"
    return list(rdpcap(str(pcap))) if pcap.exists() else []


def test_an_overlapping_fragment_discards_the_datagram_and_the_ledger_adds_up():
    frames = [_v4(0, bytes(16), True)[0], _v4(16, bytes(8), True)[0], _v4(8, bytes(24), False)[0]]
    sim = _run(frames)
    ledger = sim.kernel.ledger
    assert dict(ledger.dropped) == {"frag-overlap": 1} and ledger.in_flight == 0
    assert not sim.kernel.netns["b"].frags


def test_a_duplicate_that_completes_the_bytes_does_not_reassemble():
    """The duplicate of bytes 8-24 comes as the last fragment: LAST_IN is set and meat == len, but only a queued
    fragment triggers ip_frag_reasm, so the datagram waits for the timeout, as in the kernel."""
    frames = [_v4(0, bytes(16), True)[0], _v4(16, bytes(8), True)[0], _v4(8, bytes(16), False)[0]]
    sim = _run(frames)
    (q,) = sim.kernel.netns["b"].frags.values()
    assert q.complete and len(q.skbs) == 2
    assert sim.kernel.ledger.totals()["in_flight"] == 1 and not sim.kernel.ledger.dropped


def test_ipv6_local_unaligned_fragment_gets_a_parameter_problem(tmp_path):
    sim = _run([_v6(0, bytes(20), True)[0]], tmp_path=tmp_path)
    assert dict(sim.kernel.ledger.dropped) == {"frag-unaligned": 1}
    (err,) = [p for p in _at_a(tmp_path) if ICMPv6ParamProblem in p]
    assert (err[IPv6].src, err[IPv6].dst, err[ICMPv6ParamProblem].code, err[ICMPv6ParamProblem].ptr) == (B6, A6, 0, 4)


def test_conntrack_lets_an_unaligned_fragment_on_to_the_local_queue(tmp_path):
    """nf_ct_frag6_gather lets it on unreassembled; ipv6_frag_rcv then refuses it with the Parameter Problem."""
    sim = _run([_v6(0, bytes(20), True)[0]], conntrack=True, tmp_path=tmp_path)
    assert dict(sim.kernel.ledger.dropped) == {"frag-unaligned": 1}
    assert [p[ICMPv6ParamProblem].ptr for p in _at_a(tmp_path) if ICMPv6ParamProblem in p] == [4]


def test_a_first_fragment_without_its_udp_header(tmp_path):
    sim = _run([_v6(0, bytes(4), True)[0]], tmp_path=tmp_path)
    assert dict(sim.kernel.ledger.dropped) == {"frag-headers-incomplete": 1}
    (err,) = [p for p in _at_a(tmp_path) if ICMPv6ParamProblem in p]
    assert (err[ICMPv6ParamProblem].code, err[ICMPv6ParamProblem].ptr) == (3, 0)


@pytest.mark.parametrize("nh, first_byte, answered", [
    (17, 0, True),      # a later fragment of a UDP datagram
    (58, 0x01, False),  # of an ICMPv6 datagram: its first data byte, read as a type, is an error's
    (58, 0x80, True),   # ... an echo request's
])
def test_icmpv6_answers_later_fragments(tmp_path, nh, first_byte, answered):
    """b has no route to another address: a later fragment for it gets Destination Unreachable (is_ineligible)."""
    frame = _v6(8, bytes([first_byte]) + bytes(15), False, nh=nh, dst="2001:db8:99::1")[0]
    sim = _run([frame], tmp_path=tmp_path)
    assert dict(sim.kernel.ledger.dropped) == {"no-route": 1}
    errors = [p for p in _at_a(tmp_path) if ICMPv6DestUnreach in p]
    assert len(errors) == answered
    if answered:
        quoted = errors[0][ICMPv6DestUnreach].payload
        assert quoted[IPv6ExtHdrFragment].offset == 1


@pytest.mark.parametrize("frag, answered", [(0, True), (1, False)])
def test_icmp_still_answers_only_a_first_ipv4_fragment(tmp_path, frag, answered):
    # b forwards (else ip_error answers nothing at all) and has no route to 10.9.9.9: icmp_send answers a first
    # fragment only ("Only reply to fragment 0")
    fragment = bytes(IP(src=A4, dst="10.9.9.9", id=3, frag=frag, flags="MF", proto=17) / bytes(16))
    sim = _run([fragment], tmp_path=tmp_path, forwarding=True)
    assert dict(sim.kernel.ledger.dropped) == {"no-route": 1}
    assert len([p for p in _at_a(tmp_path) if p.haslayer("ICMP")]) == answered



# ---------------------------------------------------------------- any fragments

#: a fragment: its offset in 8-byte units, its data bytes, MF
FRAGMENTS = hs.lists(hs.tuples(hs.integers(0, 24), hs.integers(0, 48), hs.booleans()), min_size=1, max_size=8)


def _data(offset: int, n: int) -> bytes:
    """Data whose every byte names its place in the datagram: any reassembly must put it back there."""
    return bytes((offset + i) & 0xFF for i in range(n))


@settings(max_examples=300, deadline=None)
@given(FRAGMENTS, hs.sampled_from(["ipv4", "ipv6", "ipv6-ct"]))
def test_any_fragments_reassemble_consistently_or_are_refused(frags, queue):
    """Whatever fragments come, in whatever order: a datagram is put together only of bytes at their own places,
    as long as the last fragment said; a refused fragment is a FragDiscard with a reason id, never a crash."""
    from flowsim.reasons import REASONS

    q = FragQueue(0.0) if queue == "ipv4" else Frag6Queue(0.0)
    for off8, n, mf in frags:
        offset = off8 * 8
        if queue == "ipv4":
            pkt, info = _v4(offset, _data(offset, n), mf)
            hdr = 20
        else:
            pkt, info = _v6(offset, _data(offset, n), mf)
            hdr = 40
        try:
            whole = q.add(pkt, info) if queue == "ipv4" else q.add(pkt, info, queue == "ipv6-ct")
        except FragDiscard as refused:
            assert refused.rid in REASONS and REASONS[refused.rid].verdict == "drop"
            if refused.kill:
                q = FragQueue(0.0) if queue == "ipv4" else Frag6Queue(0.0)
            continue
        if whole is not None:
            assert whole[hdr:] == _data(0, q.len) and len(whole) == hdr + q.len
            q = FragQueue(0.0) if queue == "ipv4" else Frag6Queue(0.0)  # the kernel's next one is a new queue


@settings(max_examples=40, deadline=None)
@given(FRAGMENTS, hs.booleans(), hs.booleans())
def test_any_fragments_at_a_host_keep_the_ledger(frags, v6, conntrack):
    """Fragments of one datagram at a host, with conntrack or without: the run ends with its packet accounting
    whole (Simulation.check: injected = delivered + dropped + in flight, each queued piece found)."""
    frames = [(_v6 if v6 else _v4)(o * 8, _data(o * 8, n), mf)[0] for o, n, mf in frags]
    sim = _run(frames, conntrack=conntrack)
    t = sim.kernel.ledger.totals()
    assert t["injected"] >= 1 and t["injected"] == t["delivered"] + t["dropped"] + t["in_flight"]


def _scan_insert(runs: dict[int, int], tail: list[int], offset: int, end: int) -> int:
    """inet_frag_queue_insert transcribed with a scan of every run for the rb-tree search (the reference)."""
    if tail[0] < 0:
        runs[offset], tail[1], tail[0] = end - offset, offset, end
    elif tail[0] < end:
        if offset < tail[0]:
            return IPFRAG_OVERLAP
        if offset == tail[0]:
            runs[tail[1]] += end - offset
        else:
            runs[offset], tail[1] = end - offset, offset
        tail[0] = end
    else:
        met = [(head, n) for head, n in runs.items() if head < end and offset < head + n]
        if met:
            head, n = met[0]
            return IPFRAG_DUP if len(met) == 1 and head <= offset and end <= head + n else IPFRAG_OVERLAP
        runs[offset] = end - offset
    return IPFRAG_OK


@settings(max_examples=300, deadline=None)
@given(hs.lists(hs.tuples(hs.integers(0, 40), hs.integers(1, 8)), min_size=1, max_size=16))
def test_the_bisection_answers_as_a_scan_of_every_run(inserts):
    """InetFragQueue finds the run a fragment meets by bisection over the run heads; a scan of every run gives
    the same answer and leaves the same runs, whatever the order."""
    q, runs, tail = InetFragQueue(0.0), {}, [-1, 0]
    for at, n in inserts:
        offset, end = at * 8, (at + n) * 8
        assert q.inet_frag_queue_insert(offset, end) == _scan_insert(runs, tail, offset, end)
        assert q.runs == runs and q.heads == sorted(runs)


# ---------------------------------------------------------------- ip_frag_too_far

def _interleaved(others: int, sysctl: str = "") -> Simulation:
    """Datagram 1's first fragment, then *others* whole two-fragment datagrams from the same source, then datagram
    1's last fragment, at b (each datagram one packet of the ledger)."""
    text = TOPOLOGY.replace("[netns.b]\n", f"[netns.b]\n{sysctl}\n") if sysctl else TOPOLOGY
    sim = Simulation(load_topology_text(text))
    k = sim.kernel
    dev, peer = sim.topo.device("b", "eth0"), sim.topo.device("a", "eth0")
    eth = bytes(Ether(src=peer.mac, dst=dev.mac, type=0x0800))
    frames = []
    late = k.new_tag("x", "original", "udp")
    k.ledger.add_pieces(late, 1)
    frames.append((late, _v4(0, bytes(16), True, ident=1)[0]))
    for ident in range(100, 100 + others):
        tag = k.new_tag("x", "original", "udp")
        k.ledger.add_pieces(tag, 1)
        frames += [(tag, _v4(0, bytes(16), True, ident=ident)[0]), (tag, _v4(16, bytes(8), False, ident=ident)[0])]
    frames.append((late, _v4(16, bytes(8), False, ident=1)[0]))
    for i, (tag, f) in enumerate(frames):
        sim.at(i * 1e-4, k.receive_frame, dev, eth + f, tag)
    sim.run(duration=40.0)  # past ipfrag_time (30 s): a queue still waiting then expires
    return sim


@pytest.mark.parametrize("others, sysctl, too_far", [
    (31, "", False),  # 62 fragments of others in between: the last fragment is 63 behind the first
    (32, "", True),  # 64 in between, 65 behind: past ipfrag_max_dist (64)
    (65, "", True),
    (65, 'sysctls = { "net.ipv4.ipfrag_max_dist" = 0 }', False),  # 0: no inet_peer, never too far
    (40, 'sysctls = { "net.ipv4.ipfrag_max_dist" = 100 }', False),
])
def test_a_queue_too_far_behind_its_source_starts_afresh(others, sysctl, too_far):
    """ip_frag_too_far (net/ipv4/ip_fragment.c): each fragment from a source advances its inet_peer rid; a queue
    holding fragments whose last one is more than ipfrag_max_dist behind is re-initialised (ip_frag_reinit): its
    fragments are dropped and the late fragment starts a new queue, which waits for the rest."""
    sim = _interleaved(others, sysctl)
    ledger = sim.kernel.ledger
    totals = ledger.totals()
    # a reassembled datagram finds no socket at b (no-socket): one per datagram that completed.  Datagram 1, too
    # far behind, loses its first fragment (frag-too-far, the reason it is counted under) and its last fragment
    # waits in the new queue until ip_expire.  b answers each datagram that completed with Port Unreachable
    # (__udp4_lib_rcv): six back to back reach a, the per-destination limit refuses the rest (inet_peer_xrlim_allow)
    completed = others + (0 if too_far else 1)
    assert totals["injected"] == others + 1 + 6 and totals["dropped"] == others + 1 and totals["in_flight"] == 0
    assert sim.kernel.netns["b"].icmp_limits.limited_host == completed - 6
    if too_far:
        assert dict(ledger.dropped) == {"frag-too-far": 1, "no-socket": others}
    else:
        assert dict(ledger.dropped) == {"no-socket": others + 1}
    assert not sim.kernel.netns["b"].frags
    rids = {} if "= 0" in sysctl else {ipaddress.ip_address(A4): 2 * others + 2}
    assert sim.kernel.netns["b"].inet_peer_rid == rids
