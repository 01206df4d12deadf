"""ovpn transmit path before and after "ovpn: preserve GSO batching" (v5, Nov 2026), with real AEAD.

Theory of operation (drivers/net/ovpn/io.c, crypto_aead.c, udp.c, pktid.c)
-------------------------------------------------------------------------
ovpn advertises ``NETIF_F_GSO_SOFTWARE``, so the stack hands it unsegmented
GSO skbs; ``ovpn_net_xmit`` always segments them in software
(``skb_gso_segment(skb, 0)``, here :func:`flowsim.kernel.gso.skb_gso_segment`).
Each inner segment becomes one DATA_V2 record::

    | opcode word (4) | packet id (4) | AEAD tag (16) | ciphertext (L) |
      type 9 ‖ key id ‖ peer id        ← AAD (8) →

24 bytes of overhead, the tag *before* the ciphertext, nonce = packet id
‖ the key's 8-byte ``nonce_tail_xmit``, AES-GCM or ChaCha20-Poly1305
(records, keys and the receiver live in :mod:`flowsim.models.ovpn_proto`, packet
ids in :mod:`flowsim.models.ovpn_pktid`; this module is the transmit path).

* **per-record** (upstream drivers/net/ovpn before the series): ``ovpn_send`` →
  ``ovpn_encrypt_one`` → ``ovpn_aead_encrypt`` once per segment, each taking
  one packet id (``ovpn_pktid_xmit_next``) and setting up one AEAD request;
  ``ovpn_encrypt_post`` → ``ovpn_udp_send_skb`` → ``ovpn_udp4_output``:
  one route (dst_cache) lookup and one lower-device transmit per record.
  Asynchronous crypto completes out of order, so records may leave in a
  different order than their ids.
* **udp-gso** (with the series, patches 6/9–9/9): when the crypto is synchronous,
  the input is not ``GSO_BY_FRAGS``, the records have UDP GSO geometry and
  the aggregate fits the lower device's GSO limit with ``LL_MAX_HEADER``
  reserved (:func:`ovpn_udp_gso_refusal`), the segments are encrypted
  straight into one UDP GSO aggregate: one packet-id *range*
  (``ovpn_pktid_xmit_reserve``), one AEAD request reused for the batch, one
  route lookup, one transmit; the lower device (USO) cuts it into the same
  datagrams.  Anything else falls back to the per-record path.  A batch
  larger than the limit is split into several aggregates (a modelling choice;
  the cover letter says "split or truncated").

Failures: an id is spent once handed out (a nonce is never reused).  On the
per-record path a failing record burns its one id; on the aggregate path a
failure after the reservation drops the whole batch and burns the whole
range (as the public development snapshot did; v5's exact handling is
unverified).  ``-ERANGE`` kills the key (``ovpn_crypto_kill_key``) and
notifies userspace; nothing is sent with it afterwards.

Statistics (``ovpn_peer_stats_increment``): ``link_stats`` +1 per record in both paths; ``vpn_stats``
+1 per ``ovpn_net_xmit`` call before the series and +1 per surviving
segment with it (cover letter, "Changes since v2"); device ``tx_packets``
counts output skbs, i.e. one per aggregate.

:class:`OvpnReceiver` opens every record with the 2048-id replay window;
:func:`check_invariants` states the properties tests and the CLI report.
The cover letter's measurements are quoted in :data:`COVER_LETTER`; this
model counts operations, it does not predict throughput.
"""

from __future__ import annotations

import functools
import ipaddress
import random
from pathlib import Path

import attrs

from flowsim.errors import ConfigError
from flowsim.kernel.capture import write_pcap
from flowsim.kernel.esp import bulk_tcp_segment, ip_frame
from flowsim.kernel.gso import SKB_GSO_TCPV4, GsoSkb
from flowsim.kernel.headers import GSO_LEGACY_MAX_SIZE, IPPROTO_TCP, IPPROTO_UDP
from flowsim.kernel.pkt import build_ipv4, udp_datagram
from flowsim.models.ovpn_pktid import ERANGE, PKTID_MAX, PktidXmit
from flowsim.models.ovpn_proto import (
    CIPHERS, OVPN_DATA_V2, OVPN_DEFAULT_MTU, OVPN_HEAD_ROOM, OVPN_OPCODE_PEERID_MASK, OVPN_RECORD_OVERHEAD,
    OvpnKeySlot, OvpnReceiver, ovpn_aead_encrypt, ovpn_opcode_compose,
)

__all__ = [
    "OVPN_DATA_V2", "OVPN_RECORD_OVERHEAD", "OVPN_HEAD_ROOM", "OVPN_DEFAULT_MTU", "GSO_BY_FRAGS",
    "LL_MAX_HEADER_CHOICES", "CIPHERS", "COVER_LETTER",
    "ovpn_opcode_compose", "ovpn_aead_encrypt", "OvpnKeySlot", "OvpnPeer", "Record", "Batch", "OvpnCost",
    "ovpn_net_xmit", "ovpn_udp_gso_refusal", "ovpn_udp_gso_max_records", "OvpnReceiver",
    "check_invariants", "build_inner_skb", "simulate", "OvpnRun", "compare_paths",
    "DEFAULT_KEYS", "DEFAULT_NONCE_TAIL", "make_peer",
]

GSO_BY_FRAGS = 0xFFFF
GSO_MAX_SEGS = 65535
LL_MAX_HEADER_CHOICES = (32, 96, 128)  # default; CONFIG_WLAN/AX25; CONFIG_HYPERV_NET/MAC80211_MESH
UDP_IPV4_OVERHEAD = 20 + 8

COVER_LETTER = {
    "source": 'Ralf Lici, "[PATCH ovpn net-next v5 0/9] ovpn: preserve GSO batching", '
              "openvpn-devel, 9 Nov 2026",
    "setup": "iperf3 -Z, one TCP flow over UDP ovpn, AES-128-GCM, 1408-byte tunnel MTU, 1500-byte physical "
             "MTU, two directly connected 100-Gbit/s mlx5 ports; six interleaved 25-second runs",
    "throughput": "13.431 Gbit/s without UDP GSO -> 16.932 Gbit/s with the final series (+26.1%)",
    "cycles_per_byte": "6.628 -> 4.680 (-29.4%)",
    "instructions_per_byte": "13.871 -> 10.354 (-25.4%)",
}
"""Measured figures as the cover letter states them (quoted facts, never computed by flowsim)."""


@attrs.frozen
class Record:
    """One record that reached the wire: its packet id, bytes, plaintext and segment index."""

    pid: int
    key_id: int
    data: bytes
    inner: bytes
    segment: int


@attrs.frozen
class Batch:
    """One use of the packet-id allocator: a single record or a UDP GSO range, and its fate."""

    path: str  # "per-record" or "udp-gso"
    first_id: int | None  # None: the allocator refused (-ERANGE) or there was no key
    count: int
    segments: tuple[int, ...]  # segment indices, in id order
    sent: bool
    error: str | None = None
    pids: tuple[int, ...] = ()  # ids of the records that reached the wire, in segment order


@attrs.define(slots=True)
class _Cost:
    lower_xmit_calls: int = 0
    route_lookups: int = 0
    aead_request_setups: int = 0
    pktid_atomic_ops: int = 0
    aead_seals: int = 0
    wire_datagrams: int = 0
    inner_bytes: int = 0
    record_bytes: int = 0
    wire_bytes: int = 0


@attrs.frozen
class OvpnCost:
    """Operations and bytes of one path: what the series saves per GSO skb (route lookups, transmits, AEAD setups)."""

    lower_xmit_calls: int
    route_lookups: int
    aead_request_setups: int
    pktid_atomic_ops: int
    aead_seals: int
    wire_datagrams: int
    inner_bytes: int
    record_bytes: int
    wire_bytes: int


@attrs.define(slots=True)
class PeerStats:
    """One direction of ``struct ovpn_peer_stats``: packets and bytes."""

    packets: int = 0
    bytes: int = 0

    def ovpn_peer_stats_increment(self, n: int, packets: int = 1) -> None:
        self.packets += packets
        self.bytes += n


# --- the peer and its transmit path --------------------------------------------------

@attrs.define(slots=True)
class OvpnPeer:
    """An ovpn peer over UDP/IPv4 with one primary key slot, and everything it sent.

    ``mode``: ``per-record`` (kernel before the series) or ``udp-gso`` (with
    it); ``crypto``: ``sync`` or ``async`` AEAD transform.
    """

    key: OvpnKeySlot
    mode: str = attrs.field(default="udp-gso")
    crypto: str = attrs.field(default="sync")
    peer_id: int = 1
    mtu: int = OVPN_DEFAULT_MTU
    ll_max_header: int = 32
    gso_max_size: int = GSO_LEGACY_MAX_SIZE
    local: tuple[str, int] = ("192.0.2.1", 40001)
    remote: tuple[str, int] = ("192.0.2.2", 1194)
    vpn_tx: PeerStats = attrs.field(factory=PeerStats)
    link_tx: PeerStats = attrs.field(factory=PeerStats)
    dev_tx_packets: int = 0
    dev_tx_dropped: int = 0
    events: list[str] = attrs.field(factory=list)
    batches: list[Batch] = attrs.field(factory=list)
    records: list[Record] = attrs.field(factory=list)
    frames: list[bytes] = attrs.field(factory=list)
    fallbacks: list[str] = attrs.field(factory=list)
    cost: _Cost = attrs.field(factory=_Cost)
    _ip_id: int = 1

    @mode.validator
    def _check_mode(self, _a, value):
        if value not in ("per-record", "udp-gso"):
            raise ConfigError(f"unknown ovpn mode: {value!r}", value=value, expected="per-record or udp-gso")

    @crypto.validator
    def _check_crypto(self, _a, value):
        if value not in ("sync", "async"):
            raise ConfigError(f"unknown crypto kind: {value!r}", value=value, expected="sync or async")

    def __attrs_post_init__(self):
        if self.ll_max_header not in LL_MAX_HEADER_CHOICES:
            raise ConfigError(f"LL_MAX_HEADER is a kernel constant: {self.ll_max_header!r}", value=self.ll_max_header,
                              expected=" or ".join(map(str, LL_MAX_HEADER_CHOICES)))
        if not 0 <= self.peer_id <= OVPN_OPCODE_PEERID_MASK:
            raise ConfigError(f"peer id is 24 bits: {self.peer_id!r}", value=self.peer_id)


def ovpn_crypto_kill_key(peer: OvpnPeer) -> None:
    """``ovpn_crypto_kill_key`` + ``ovpn_nl_key_swap_notify``: the key is gone, userspace is told."""
    if not peer.key.dead:
        peer.key.dead = True
        peer.events.append(f"key {peer.key.key_id} killed: packet ids exhausted (-ERANGE), userspace notified")


def ovpn_udp4_output(peer: OvpnPeer, records: list[bytes]) -> None:
    """``ovpn_udp4_output`` → ``udp_tunnel_xmit_skb``: one route lookup and one lower-device transmit.

    With several records this is the UDP GSO aggregate; the lower device
    (USO, or its software fallback) cuts it into one datagram per record,
    each with its own IPv4 id and UDP checksum.
    """
    peer.cost.route_lookups += 1
    peer.cost.lower_xmit_calls += 1
    peer.dev_tx_packets += 1  # device tx_packets counts output (GSO) skbs (cover letter, changes since v2)
    src, dst = _addr(peer.local[0]), _addr(peer.remote[0])
    for rec in records:
        udp = udp_datagram(src, dst, peer.local[1], peer.remote[1], rec)
        # ovpn_udp4_output passes df = 0 to udp_tunnel_xmit_skb; each datagram takes the next IP id
        pkt = build_ipv4(src, dst, IPPROTO_UDP, udp, ident=peer._ip_id, df=False)
        peer._ip_id = (peer._ip_id + 1) & 0xFFFF
        frame = ip_frame(pkt)
        peer.frames.append(frame)
        peer.cost.wire_datagrams += 1
        peer.cost.wire_bytes += len(frame)


@functools.lru_cache(maxsize=64)
def _addr(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    return ipaddress.ip_address(text)


def _sealed(peer: OvpnPeer, pid: int, seg: bytes, index: int) -> Record:
    peer.cost.aead_seals += 1
    return Record(pid, peer.key.key_id, ovpn_aead_encrypt(peer.key, peer.peer_id, pid, seg), seg, index)


def ovpn_encrypt_one(peer: OvpnPeer, seg: bytes, index: int, fail: bool) -> tuple[Record | None, Batch]:
    """``ovpn_encrypt_one`` → ``ovpn_aead_encrypt``: one packet id, one AEAD request, one record.

    The id is taken in the middle of ``ovpn_aead_encrypt``; a failure after
    that (``fail``: request allocation, crypto error) burns it.
    """
    if peer.key.dead:
        return None, Batch("per-record", None, 1, (index,), False, "no primary key")
    pid = peer.key.pid.ovpn_pktid_xmit_next()
    peer.cost.pktid_atomic_ops += 1
    if pid == -ERANGE:
        ovpn_crypto_kill_key(peer)
        return None, Batch("per-record", None, 1, (index,), False, "-ERANGE")
    peer.cost.aead_request_setups += 1
    if fail:
        peer.key.pid.burn(pid)
        return None, Batch("per-record", pid, 1, (index,), False, "encryption failed: id burned")
    return _sealed(peer, pid, seg, index), Batch("per-record", pid, 1, (index,), True, pids=(pid,))


def ovpn_send(peer: OvpnPeer, segs: list[tuple[int, bytes]], faults: frozenset[int], rng: random.Random) -> None:
    """``ovpn_send``: encrypt each segment on its own, then ``ovpn_encrypt_post`` in completion order.

    Synchronous crypto completes in order; asynchronous completions are
    modelled as a random permutation (the ids were still taken in order).
    """
    done = []
    for index, seg in segs:
        rec, batch = ovpn_encrypt_one(peer, seg, index, index in faults)
        peer.batches.append(batch)
        if rec is None:
            peer.dev_tx_dropped += 1
        else:
            done.append(rec)
    if peer.crypto == "async":
        rng.shuffle(done)
    for rec in done:
        ovpn_encrypt_post(peer, [rec])


def ovpn_encrypt_post(peer: OvpnPeer, recs: list[Record]) -> None:
    """``ovpn_encrypt_post`` → ``ovpn_udp_send_skb``: send, count ``link_stats`` per record."""
    ovpn_udp4_output(peer, [r.data for r in recs])
    for r in recs:
        peer.records.append(r)
        peer.link_tx.ovpn_peer_stats_increment(len(r.data))
        peer.cost.record_bytes += len(r.data)


def ovpn_udp_gso_max_records(peer: OvpnPeer, record_size: int) -> int:
    """Records per aggregate: GSO max size − ``LL_MAX_HEADER`` − IPv4 − UDP, over the record size (the series' GSO size check)."""
    payload = min(peer.gso_max_size - peer.ll_max_header, 0xFFFF) - UDP_IPV4_OVERHEAD
    return min(payload // record_size, GSO_MAX_SEGS)


def ovpn_udp_gso_refusal(peer: OvpnPeer, lengths: list[int], gso_by_frags: bool) -> str | None:
    """Why these segments cannot become a UDP GSO aggregate (``None``: they can): the series' fallback tests."""
    if peer.crypto != "sync":
        return "asynchronous crypto stays on the per-record path"
    if gso_by_frags:
        return "GSO_BY_FRAGS input stays on the per-record path"
    if len(lengths) < 2:
        return "a single segment is not a UDP GSO aggregate"
    size = lengths[0]
    if any(n != size for n in lengths[:-1]) or not 1 <= lengths[-1] <= size:
        return "unsupported segment geometry (records must be equal, the last one no longer)"
    if ovpn_udp_gso_max_records(peer, size + OVPN_RECORD_OVERHEAD) < 2:
        return "two records do not fit the GSO size limit"
    return None


def ovpn_send_udp_gso(peer: OvpnPeer, segs: list[tuple[int, bytes]], faults: frozenset[int]) -> None:
    """The series' path: one id range, one AEAD request, records written into one aggregate, one send.

    A failure after the reservation drops the batch and burns the range.
    """
    indices = tuple(i for i, _ in segs)
    if peer.key.dead:
        peer.batches.append(Batch("udp-gso", None, len(segs), indices, False, "no primary key"))
        peer.dev_tx_dropped += len(segs)
        return
    first = peer.key.pid.ovpn_pktid_xmit_reserve(len(segs))
    peer.cost.pktid_atomic_ops += 1
    if first == -ERANGE:
        ovpn_crypto_kill_key(peer)
        peer.batches.append(Batch("udp-gso", None, len(segs), indices, False, "-ERANGE: range does not fit"))
        peer.dev_tx_dropped += len(segs)
        return
    peer.cost.aead_request_setups += 1  # one request and scratch area reused for the batch (patch 9/9)
    recs = []
    for k, (index, seg) in enumerate(segs):
        if index in faults:
            peer.key.pid.burn(first, len(segs))
            peer.batches.append(Batch("udp-gso", first, len(segs), indices, False,
                                      f"encryption of segment {index} failed: batch dropped, range burned"))
            peer.dev_tx_dropped += len(segs)
            return
        recs.append(_sealed(peer, first + k, seg, index))
    peer.batches.append(Batch("udp-gso", first, len(segs), indices, True, pids=tuple(r.pid for r in recs)))
    ovpn_encrypt_post(peer, recs)


def ovpn_net_xmit(peer: OvpnPeer, skb: GsoSkb, *, gso_by_frags: bool = False,
                  faults: frozenset[int] = frozenset(), seed: int = 0) -> None:
    """``ovpn_net_xmit``: segment in software, count ``vpn_stats``, then the per-record or aggregate path.

    *faults*: segment indices whose encryption fails after their id was
    taken.  *seed*: the permutation of asynchronous completions.
    """
    segs = [s.bytes() for s in skb.segment()]
    peer.cost.inner_bytes += sum(map(len, segs))
    if peer.mode == "per-record":
        peer.vpn_tx.ovpn_peer_stats_increment(sum(map(len, segs)))  # one packet per xmit call
    else:
        peer.vpn_tx.ovpn_peer_stats_increment(sum(map(len, segs)), packets=len(segs))
    indexed = list(enumerate(segs))
    rng = random.Random(seed)
    if peer.mode == "per-record":
        ovpn_send(peer, indexed, faults, rng)
        return
    refusal = ovpn_udp_gso_refusal(peer, [len(s) for s in segs], gso_by_frags)
    if refusal:
        peer.fallbacks.append(refusal)
        ovpn_send(peer, indexed, faults, rng)
        return
    per = ovpn_udp_gso_max_records(peer, len(segs[0]) + OVPN_RECORD_OVERHEAD)
    for start in range(0, len(indexed), per):
        chunk = indexed[start:start + per]
        if len(chunk) < 2:
            peer.fallbacks.append("a one-record remainder after splitting goes per record")
            ovpn_send(peer, chunk, faults, rng)
        else:
            ovpn_send_udp_gso(peer, chunk, faults)

# --- invariants ---------------------------------------------------------------------

def check_invariants(peer: OvpnPeer, receiver: OvpnReceiver | None = None) -> dict[str, bool]:
    """The packet-id and nonce invariants (pktid.c, the series' range reservation) on everything *peer* did
    (and *receiver* saw)."""
    pid = peer.key.pid
    ids = [i for first, n in pid.handouts for i in range(first, first + n)]
    sent = {r.pid for r in peer.records}
    refused = next((k for k, b in enumerate(peer.batches) if b.error and b.error.startswith("-ERANGE")),
                   len(peer.batches))
    result = {
        # (key, id) is the AEAD nonce: every sealing, sent or not, used a fresh id.
        "nonces_unique_per_key": len(set(peer.key.sealed)) == len(peer.key.sealed),
        "ids_within_1_to_2^32-1": all(1 <= i <= PKTID_MAX for i in ids),
        # The allocator hands out one gapless run; no id twice; a sent batch carries first+k on record k.
        "ranges_disjoint_and_contiguous": (
            len(set(ids)) == len(ids)
            and all(a[0] + a[1] == b[0] for a, b in zip(pid.handouts, pid.handouts[1:]))
            and all(b.pids == tuple(range(b.first_id, b.first_id + b.count)) for b in peer.batches if b.sent)),
        "burned_ids_never_reused": not (set(pid.burned) & sent) and len(set(pid.burned)) == len(pid.burned),
        "exhaustion_kills_key": not pid.exhausted or (
            peer.key.dead and not any(b.sent for b in peer.batches[refused:])),
    }
    if receiver is not None:
        result["receiver_accepts_every_record"] = (
            receiver.counters["accepted"] == len(peer.records)
            and sorted(receiver.delivered) == sorted(r.inner for r in peer.records))
    return result


# --- scenario, comparison, run ------------------------------------------------------------

def build_inner_skb(gso_size: int, segments: int, last: int | None = None, mtu: int = OVPN_DEFAULT_MTU) -> GsoSkb:
    """The GSO skb of bulk TCP the stack hands ovpn: IPv4 10.8.0.1 → 10.8.0.2, 32-byte TCP header."""
    if gso_size < 1:
        raise ConfigError(f"--gso-size must be positive: {gso_size!r}", value=gso_size)
    if segments < 1:
        raise ConfigError(f"--segments must be at least 1: {segments!r}", value=segments)
    if 20 + 32 + gso_size > mtu:
        raise ConfigError(f"segments of {20 + 32 + gso_size} bytes exceed the ovpn MTU {mtu}: {gso_size!r}",
                          value=gso_size, expected=f"--gso-size <= {mtu - 52}")
    last = gso_size if last is None else last
    if not 1 <= last <= gso_size:
        raise ConfigError(f"the last segment's payload must be 1..gso_size bytes: {last!r}", value=last)
    total = 20 + 32 + gso_size * (segments - 1) + last
    if total > 0xFFFF:
        raise ConfigError(f"{segments} segments of {gso_size} bytes exceed a 64 KiB GSO skb: {segments!r}",
                          value=segments, expected=f"at most {(0xFFFF - 52) // gso_size} segments")
    payload = bytes((i * 151 + 11) & 0xFF for i in range(gso_size * (segments - 1) + last))
    src, dst = _addr("10.8.0.1"), _addr("10.8.0.2")
    packet = build_ipv4(src, dst, IPPROTO_TCP, bulk_tcp_segment(src, dst, payload), ident=0x1000)
    return GsoSkb(packet, gso_size, SKB_GSO_TCPV4)


DEFAULT_KEYS = {"aes-gcm": bytes(range(16)), "chacha20-poly1305": bytes(range(32))}
DEFAULT_NONCE_TAIL = bytes.fromhex("a1a2a3a4a5a6a7a8")


def make_peer(mode: str, crypto: str, cipher: str = "aes-gcm", first_packet_id: int = 1, ll_max_header: int = 32,
              mtu: int = OVPN_DEFAULT_MTU) -> OvpnPeer:
    """A peer with the default test key for *cipher*, its counter at *first_packet_id*."""
    if cipher not in CIPHERS:
        raise ConfigError(f"unknown ovpn cipher: {cipher!r}", value=cipher, expected=", ".join(CIPHERS))
    if not 1 <= first_packet_id <= PKTID_MAX:
        raise ConfigError(f"the first packet id must be 1..2^32-1: {first_packet_id!r}", value=first_packet_id)
    key = OvpnKeySlot(0, cipher, DEFAULT_KEYS[cipher], DEFAULT_NONCE_TAIL, PktidXmit(first_packet_id))
    return OvpnPeer(key, mode=mode, crypto=crypto, ll_max_header=ll_max_header, mtu=mtu)


def _cost(peer: OvpnPeer) -> OvpnCost:
    return OvpnCost(**attrs.asdict(peer.cost))


def compare_paths(*, crypto: str = "sync", gso_size: int = 1364, segments: int = 16, skbs: int = 1,
                  cipher: str = "aes-gcm", gso_by_frags: bool = False, ll_max_header: int = 32,
                  mtu: int = OVPN_DEFAULT_MTU, last: int | None = None) -> dict[str, OvpnCost]:
    """Run the same GSO skbs through both paths; return the operation counts of each."""
    out = {}
    for mode in ("per-record", "udp-gso"):
        peer = make_peer(mode, crypto, cipher, 1, ll_max_header, mtu)
        skb = build_inner_skb(gso_size, segments, last, mtu)
        for n in range(skbs):
            ovpn_net_xmit(peer, skb, gso_by_frags=gso_by_frags, seed=n)
        out[mode] = _cost(peer)
    return out


@attrs.frozen
class OvpnRun:
    """One simulated ``flowsim ovpn`` run: the peer's outcome, the receiver, invariants, comparison."""

    peer: OvpnPeer
    receiver: OvpnReceiver
    invariants: dict
    comparison: dict
    gso_size: int
    segments: int
    skbs: int
    pcap: str | None

    def to_dict(self) -> dict:
        p = self.peer
        return {
            "mode": p.mode, "crypto": p.crypto, "cipher": p.key.cipher,
            "gso_skb": {"gso_size": self.gso_size, "segments": self.segments, "skbs": self.skbs,
                        "record_size": 20 + 32 + self.gso_size + OVPN_RECORD_OVERHEAD},
            "paths": sorted({b.path for b in p.batches}),
            "fallbacks": sorted(set(p.fallbacks)),
            "batches": [{"path": b.path, "first_id": b.first_id, "count": b.count, "sent": b.sent,
                         "error": b.error} for b in p.batches],
            "records_sent": len(p.records),
            "packet_ids": {"next": p.key.pid.seq_num, "burned": len(p.key.pid.burned),
                           "key_dead": p.key.dead},
            "stats": {"vpn_tx": attrs.asdict(p.vpn_tx), "link_tx": attrs.asdict(p.link_tx),
                      "dev_tx_packets": p.dev_tx_packets, "dev_tx_dropped": p.dev_tx_dropped},
            "events": list(p.events),
            "receiver": dict(self.receiver.counters),
            "invariants": dict(self.invariants),
            "cost_comparison": {m: attrs.asdict(c) for m, c in self.comparison.items()},
            "cover_letter": dict(COVER_LETTER),
            "pcap": self.pcap,
        }


def simulate(mode: str = "udp-gso", crypto: str = "sync", *, gso_size: int = 1364, segments: int = 16,
             skbs: int = 1, cipher: str = "aes-gcm", gso_by_frags: bool = False, ll_max_header: int = 32,
             mtu: int = OVPN_DEFAULT_MTU, last: int | None = None, first_packet_id: int = 1,
             faults: frozenset[int] = frozenset(), pcap: str | Path | None = None) -> OvpnRun:
    """Send *skbs* GSO skbs through one peer, receive every frame, check the invariants (``flowsim ovpn``)."""
    if skbs < 1:
        raise ConfigError(f"--skbs must be at least 1: {skbs!r}", value=skbs)
    if any(not 0 <= f < segments for f in faults):
        raise ConfigError(f"a failing segment index must be within the GSO skb: {sorted(faults)!r}",
                          value=sorted(faults),
                          expected=f"0..{segments - 1}")
    peer = make_peer(mode, crypto, cipher, first_packet_id, ll_max_header, mtu)
    skb = build_inner_skb(gso_size, segments, last, mtu)
    for n in range(skbs):
        ovpn_net_xmit(peer, skb, gso_by_frags=gso_by_frags, faults=faults, seed=n)
    receiver = OvpnReceiver.for_peer(peer)
    for frame in peer.frames:
        receiver.ovpn_recv(frame)
    written = None
    if pcap is not None:
        write_pcap(pcap, peer.frames)
        written = str(pcap)
    comparison = compare_paths(crypto=crypto, gso_size=gso_size, segments=segments, skbs=skbs, cipher=cipher,
                               gso_by_frags=gso_by_frags, ll_max_header=ll_max_header, mtu=mtu, last=last)
    return OvpnRun(peer, receiver, check_invariants(peer, receiver), comparison, gso_size, segments, skbs,
                   written)
