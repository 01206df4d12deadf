"""ovpn transmit before/after "ovpn: preserve GSO batching", packet ids and the receiver.

Covers flowsim.models.ovpn and flowsim.models.ovpn_pktid.  Records are opened independently
with the cryptography library (tag-before-ciphertext layout, nonce = packet id
‖ nonce tail); frames are checked with scapy and the real tcpdump binary.
"""

from __future__ import annotations

import shutil
import struct
import subprocess

import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM, ChaCha20Poly1305
from hypothesis import given, settings
from hypothesis import strategies as st
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from flowsim.errors import ConfigError
from flowsim.models.ovpn import (
    COVER_LETTER,
    DEFAULT_KEYS,
    DEFAULT_NONCE_TAIL,
    OVPN_DEFAULT_MTU,
    OVPN_HEAD_ROOM,
    OVPN_RECORD_OVERHEAD,
    OvpnKeySlot,
    OvpnPeer,
    OvpnReceiver,
    build_inner_skb,
    check_invariants,
    compare_paths,
    ovpn_net_xmit,
    ovpn_opcode_compose,
    ovpn_udp_gso_max_records,
    ovpn_udp_gso_refusal,
    simulate,
)
from flowsim.models.ovpn_pktid import EINVAL, ERANGE, PKTID_MAX, REPLAY_WINDOW_SIZE, PktidRecv, PktidXmit


def peer(mode="udp-gso", crypto="sync", cipher="aes-gcm", first=1, **kw) -> OvpnPeer:
    key = OvpnKeySlot(0, cipher, DEFAULT_KEYS[cipher], DEFAULT_NONCE_TAIL, PktidXmit(first))
    return OvpnPeer(key, mode=mode, crypto=crypto, **kw)


def udp_payloads(p: OvpnPeer) -> list[bytes]:
    return [f[14 + 28:] for f in p.frames]


# --- constants and the record format (proto.h, crypto_aead.c) ----------------------------------------------

def test_device_constants():
    """OVPN_HEAD_ROOM is 84 and the default MTU 1500 − 84 = 1416; a record costs 24 bytes."""
    assert (OVPN_HEAD_ROOM, OVPN_DEFAULT_MTU, OVPN_RECORD_OVERHEAD) == (84, 1416, 24)


@pytest.mark.parametrize(("key_id", "peer_id", "word"), [(0, 1, 0x48000001), (7, 0xFFFFFF, 0x4FFFFFFF),
                                                         (2, 0x123456, 0x4A123456)])
def test_opcode_word(key_id, peer_id, word):
    """ovpn_opcode_compose: DATA_V2 (9) in the top 5 bits, key id in 3, peer id in the low 24."""
    assert ovpn_opcode_compose(9, key_id, peer_id) == word


@pytest.mark.parametrize(("cipher", "aead"), [("aes-gcm", AESGCM), ("chacha20-poly1305", ChaCha20Poly1305)])
def test_record_layout_opens_independently(cipher, aead):
    """A record is opcode ‖ id ‖ tag ‖ ciphertext, AAD = first 8 bytes, nonce = id ‖ nonce tail."""
    p = peer(cipher=cipher)
    ovpn_net_xmit(p, build_inner_skb(1364, 4))
    for rec, payload in zip(p.records, udp_payloads(p)):
        assert payload == rec.data and len(payload) == len(rec.inner) + 24
        word, pid = struct.unpack("!II", payload[:8])
        assert (word, pid) == (ovpn_opcode_compose(9, 0, 1), rec.pid)
        tag, ct = payload[8:24], payload[24:]
        nonce = struct.pack("!I", pid) + DEFAULT_NONCE_TAIL
        assert aead(DEFAULT_KEYS[cipher]).decrypt(nonce, ct + tag, payload[:8]) == rec.inner


def test_frames_are_checksummed_udp_and_tcpdump_reads_them(tmp_path):
    """Frames are IPv4/UDP with valid checksums, 1468 IP bytes per full record, and tcpdump reads them all."""
    pcap = tmp_path / "o.pcap"
    r = simulate("udp-gso", gso_size=1364, segments=5, pcap=pcap)
    for f in r.peer.frames:
        e = Ether(f)
        ip_, udp = e[IP], e[UDP]
        assert ip_.len == 1468 and udp.dport == 1194 and udp.len == 8 + 1440
        clone = IP(bytes(ip_))
        clone.chksum = None
        clone[UDP].chksum = None
        rebuilt = IP(bytes(clone))
        assert (rebuilt.chksum, rebuilt[UDP].chksum) == (ip_.chksum, udp.chksum)
    exe = shutil.which("tcpdump")
    assert exe, "tcpdump is required by these tests: apt-get install tcpdump (.ci/run installs it)"
    out = subprocess.run([exe, "-r", str(pcap), "-nn", "udp port 1194"], capture_output=True, text=True, check=True)
    assert len(out.stdout.splitlines()) == 5


# --- the two paths: per record (io.c) and UDP GSO (the series) ---------------------------------------------------------------

def test_per_record_path_costs_one_of_everything_per_record():
    """Before the series: N ids, N AEAD requests, N route lookups, N lower transmits for N segments."""
    p = peer("per-record")
    ovpn_net_xmit(p, build_inner_skb(1364, 16))
    assert [b.first_id for b in p.batches] == list(range(1, 17)) and {b.count for b in p.batches} == {1}
    c = p.cost
    assert (c.pktid_atomic_ops, c.aead_request_setups, c.route_lookups, c.lower_xmit_calls) == (16, 16, 16, 16)


def test_udp_gso_path_one_range_one_send():
    """With the series: one contiguous id range and one transmit carry all N records."""
    p = peer("udp-gso")
    ovpn_net_xmit(p, build_inner_skb(1364, 16))
    (b,) = p.batches
    assert (b.path, b.first_id, b.count, b.pids) == ("udp-gso", 1, 16, tuple(range(1, 17)))
    c = p.cost
    assert (c.pktid_atomic_ops, c.aead_request_setups, c.route_lookups, c.lower_xmit_calls) == (1, 1, 1, 1)
    assert c.aead_seals == c.wire_datagrams == 16


@pytest.mark.parametrize(("kw", "xmit", "reason"), [
    (dict(crypto="async"), {}, "asynchronous crypto"),
    (dict(), {"gso_by_frags": True}, "GSO_BY_FRAGS"),
])
def test_fallback_to_per_record(kw, xmit, reason):
    """Async crypto and GSO_BY_FRAGS input stay on the per-record path with the series."""
    p = peer("udp-gso", **kw)
    ovpn_net_xmit(p, build_inner_skb(1364, 8), **xmit)
    assert {b.path for b in p.batches} == {"per-record"} and len(p.batches) == 8
    assert any(reason in f for f in p.fallbacks)


@pytest.mark.parametrize(("lengths", "ok"), [
    ([1416, 1416, 1416], True),
    ([1416, 1416, 100], True),
    ([1416], False),
    ([1416, 1000, 1416], False),
    ([1000, 1416], False),
])
def test_udp_gso_geometry(lengths, ok):
    """UDP GSO geometry: N ≥ 2, all records equal except a last one that is no longer."""
    assert (ovpn_udp_gso_refusal(peer(), lengths, False) is None) == ok


@pytest.mark.parametrize(("ll", "record", "expected"), [(32, 1440, 45), (128, 1440, 45), (32, 1455, 45),
                                                        (128, 1455, 44), (96, 65500, 0)])
def test_aggregate_size_limit(ll, record, expected):
    """Records per aggregate = (GSO max − LL_MAX_HEADER − IPv4 − UDP) // record size: 45 at G = 1440."""
    assert ovpn_udp_gso_max_records(peer(ll_max_header=ll), record) == expected


def test_too_small_gso_limit_falls_back():
    """When two records do not fit the lower device's GSO limit, the batch goes per record."""
    p = peer(gso_max_size=2800)
    ovpn_net_xmit(p, build_inner_skb(1364, 4))
    assert {b.path for b in p.batches} == {"per-record"}


@pytest.mark.parametrize(("segments", "batches"), [(48, [("udp-gso", 45), ("udp-gso", 3)]),
                                                   (46, [("udp-gso", 45), ("per-record", 1)])])
def test_large_batch_is_split(segments, batches):
    """A batch beyond the size limit is split into aggregates; a one-record remainder goes per record."""
    p = peer()
    ovpn_net_xmit(p, build_inner_skb(1364, segments))
    assert [(b.path, b.count) for b in p.batches] == batches
    assert check_invariants(p)["ranges_disjoint_and_contiguous"]


# --- statistics (ovpn_peer_stats_increment, dev tx counters) ---------------------------------------------------------------------------

@pytest.mark.parametrize(("mode", "vpn_packets", "dev_packets"), [("per-record", 1, 8), ("udp-gso", 8, 1)])
def test_statistics(mode, vpn_packets, dev_packets):
    """vpn_stats +1 per xmit before the series, per segment with it; link_stats per record; dev per skb."""
    p = peer(mode)
    skb = build_inner_skb(1364, 8)
    ovpn_net_xmit(p, skb)
    assert p.vpn_tx.packets == vpn_packets and p.vpn_tx.bytes == 8 * 1416
    assert (p.link_tx.packets, p.link_tx.bytes) == (8, 8 * 1440)
    assert p.dev_tx_packets == dev_packets


# --- packet ids (pktid.c) ------------------------------------------------------------------------------

def test_pktid_next_until_exhaustion():
    """ovpn_pktid_xmit_next hands out 2^32−1 last, then fails with -ERANGE."""
    pid = PktidXmit(PKTID_MAX - 1)
    assert [pid.ovpn_pktid_xmit_next() for _ in range(3)] == [PKTID_MAX - 1, PKTID_MAX, -ERANGE]


def test_pktid_reserve_all_or_nothing():
    """A range that does not fit below 2^32 takes nothing and fails with -ERANGE."""
    pid = PktidXmit(PKTID_MAX - 2)
    assert pid.ovpn_pktid_xmit_reserve(4) == -ERANGE and pid.handouts == []
    assert pid.ovpn_pktid_xmit_reserve(3) == PKTID_MAX - 2 and pid.seq_num == 0


@pytest.mark.parametrize("mode", ["per-record", "udp-gso"])
def test_exhaustion_kills_key(mode):
    """-ERANGE kills the key and notifies userspace; nothing is sent with it afterwards."""
    p = peer(mode, first=PKTID_MAX - 2)
    for _ in range(2):
        ovpn_net_xmit(p, build_inner_skb(1364, 8))
    assert p.key.dead and any("killed" in e for e in p.events)
    assert all(r.pid <= PKTID_MAX for r in p.records)
    assert len(p.records) == (3 if mode == "per-record" else 0)
    assert all(check_invariants(p).values())


def test_exact_fit_then_exhaustion():
    """A range ending exactly at 2^32−1 is used; the next batch kills the key."""
    p = peer(first=PKTID_MAX - 7)
    ovpn_net_xmit(p, build_inner_skb(1364, 8))
    assert [r.pid for r in p.records][-1] == PKTID_MAX and not p.key.dead
    ovpn_net_xmit(p, build_inner_skb(1364, 8))
    assert p.key.dead and len(p.records) == 8


@pytest.mark.parametrize(("mode", "burned", "sent"), [("per-record", [4], 7), ("udp-gso", list(range(1, 9)), 0)])
def test_failure_burns_ids(mode, burned, sent):
    """A failure after allocation burns its id (per record) or the whole range (batch), for good."""
    p = peer(mode)
    ovpn_net_xmit(p, build_inner_skb(1364, 8), faults=frozenset({3}))
    assert p.key.pid.burned == burned and len(p.records) == sent and p.dev_tx_dropped == 8 - sent
    ovpn_net_xmit(p, build_inner_skb(1364, 8))
    assert min(r.pid for r in p.records[sent:]) == 9
    rx = OvpnReceiver.for_peer(p)
    for f in p.frames:
        rx.ovpn_recv(f)
    assert all(check_invariants(p, rx).values())


# --- the receiver's replay window (ovpn_pktid_recv) ---------------------------------------------------------

def test_replay_window_rules():
    """ovpn_pktid_recv: 0 refused, replays refused, backtracks inside 2048 accepted once, older refused."""
    w = PktidRecv()
    assert w.ovpn_pktid_recv(0) == -EINVAL
    assert [w.ovpn_pktid_recv(i) for i in (1, 5, 3, 3)] == [0, 0, 0, -EINVAL]
    assert w.ovpn_pktid_recv(3000) == 0
    assert w.ovpn_pktid_recv(3000 - REPLAY_WINDOW_SIZE + 1) == 0
    assert w.ovpn_pktid_recv(3000 - REPLAY_WINDOW_SIZE) == -EINVAL


def test_async_completions_reorder_but_are_accepted():
    """Async crypto sends records out of id order; the 2048-id window accepts them all."""
    p = peer("per-record", crypto="async")
    ovpn_net_xmit(p, build_inner_skb(1364, 32), seed=3)
    assert [r.pid for r in p.records] != sorted(r.pid for r in p.records)
    rx = OvpnReceiver.for_peer(p)
    assert all(rx.ovpn_recv(f) == "accepted" for f in p.frames)


def test_receiver_refuses_replay_and_tampering():
    """A replayed record is refused, a flipped ciphertext bit fails authentication."""
    p = peer()
    ovpn_net_xmit(p, build_inner_skb(1364, 2))
    rx = OvpnReceiver.for_peer(p)
    assert rx.ovpn_recv(p.frames[0]) == "accepted" and rx.ovpn_recv(p.frames[0]) == "replay"
    bad = bytearray(p.frames[1])
    bad[-1] ^= 1
    assert rx.ovpn_recv(bytes(bad)) == "decrypt_error"


# --- properties ------------------------------------------------------------------------------------

skb_specs = st.lists(st.tuples(st.integers(1, 48), st.sampled_from([100, 700, 1364]),
                               st.frozensets(st.integers(0, 47), max_size=2)), min_size=1, max_size=4)


@settings(max_examples=40, deadline=None)
@given(mode=st.sampled_from(["per-record", "udp-gso"]), crypto=st.sampled_from(["sync", "async"]),
       near_end=st.booleans(), skbs=skb_specs, data=st.data())
def test_invariants_hold_for_any_traffic(mode, crypto, near_end, skbs, data):
    """Any GSO skbs, failures, near-exhaustion, wire order: nonces unique, ranges disjoint, all accepted."""
    first = PKTID_MAX - data.draw(st.integers(0, 120)) if near_end else 1
    p = peer(mode, crypto, first=first)
    for n, (segments, gso_size, faults) in enumerate(skbs):
        ovpn_net_xmit(p, build_inner_skb(gso_size, segments), faults=frozenset(f for f in faults if f < segments),
                      seed=n)
    order = data.draw(st.permutations(range(len(p.frames))))  # CPUs interleave batches on the wire
    rx = OvpnReceiver.for_peer(p)
    for k in order:
        rx.ovpn_recv(p.frames[k])
    assert check_invariants(p, rx) == dict.fromkeys(check_invariants(p, rx), True)


@settings(max_examples=60, deadline=None)
@given(start=st.integers(1, PKTID_MAX), sizes=st.lists(st.integers(1, 64), max_size=20))
def test_reservations_never_overlap(start, sizes):
    """Reservations are disjoint, gapless, inside [1, 2^32−1]; a refused one takes nothing."""
    pid = PktidXmit(start)
    for n in sizes:
        before = (pid.seq_num, len(pid.handouts))
        first = pid.ovpn_pktid_xmit_reserve(n)
        if first == -ERANGE:
            assert (pid.seq_num, len(pid.handouts)) == before
        else:
            assert pid.handouts[-1] == (first, n) and first + n - 1 <= PKTID_MAX
    ids = [i for first, n in pid.handouts for i in range(first, first + n)]
    assert ids == list(range(start, start + len(ids))) and all(1 <= i <= PKTID_MAX for i in ids)


# --- cost comparison and the cover letter ---------------------------------------------------

def test_cost_comparison_sync_vs_async():
    """Sync: 1 transmit, lookup, request and id op per batch instead of N; async changes nothing."""
    sync = compare_paths(crypto="sync", segments=16)
    assert (sync["per-record"].lower_xmit_calls, sync["udp-gso"].lower_xmit_calls) == (16, 1)
    assert (sync["per-record"].route_lookups, sync["udp-gso"].route_lookups) == (16, 1)
    assert (sync["per-record"].aead_request_setups, sync["udp-gso"].aead_request_setups) == (16, 1)
    assert sync["per-record"].wire_bytes == sync["udp-gso"].wire_bytes
    asyn = compare_paths(crypto="async", segments=16)
    assert asyn["per-record"] == asyn["udp-gso"]


def test_cover_letter_figures_are_quoted_facts():
    """The +26% / 6.6 → 4.7 cycles/byte figures are the cover letter's, quoted with their source."""
    assert "13.431" in COVER_LETTER["throughput"] and "16.932" in COVER_LETTER["throughput"]
    assert "+26.1%" in COVER_LETTER["throughput"]
    assert COVER_LETTER["cycles_per_byte"].startswith("6.628 -> 4.680")
    assert "Ralf Lici" in COVER_LETTER["source"]


@pytest.mark.parametrize(("kwargs", "match"), [
    (dict(mode="batch"), "unknown ovpn mode"),
    (dict(crypto="maybe"), "unknown crypto"),
    (dict(cipher="aes-cbc"), "unknown ovpn cipher"),
    (dict(gso_size=1400), "exceed the ovpn MTU"),
    (dict(segments=60), "64 KiB"),
    (dict(first_packet_id=0), "first packet id"),
    (dict(faults=frozenset({99})), "failing segment"),
])
def test_bad_arguments(kwargs, match):
    """Bad arguments raise ConfigError naming the value."""
    with pytest.raises(ConfigError, match=match):
        simulate(**kwargs)
