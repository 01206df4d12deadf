"""ESP on GSO skbs: where each xfrm output path puts the ESP header, with real AES-GCM.

Theory of operation
-------------------
An ``rfc4106(gcm(aes))`` SA has ``x->props.header_len`` = 16: an 8-byte ESP
header (SPI, sequence number) and an 8-byte IV (``esp_init_state`` in
net/ipv4/esp4.c).  A GSO skb reaches ESP in one of two shapes, and this
module builds the wire bytes of both mechanically, so a misplaced header is a
consequence of the modelled steps, not a hard-coded picture:

* **segment first** (:func:`esp_output_segmented`): software GSO cuts the
  plain packet (``xfrm_output_gso`` → ``skb_gso_segment(skb, 0)``,
  :func:`flowsim.kernel.gso.skb_gso_segment`), then each segment gets its
  ESP header right after the outer IP header (``xfrm{4,6}_transport_output``
  / ``xfrm{4,6}_tunnel_encap_add`` and ``esp_output``).  A NIC doing ESP GSO
  in hardware is assumed to produce the same bytes.
* **ESP first** (:func:`esp_output_skb_gso_esp`): ``xfrm_output_one`` opens
  the 16-byte ESP slot on the GSO skb itself and ``esp{4,6}_gso_encap``
  writes SPI and the batch's first sequence number into it; the device layer
  segments with ``esp{4,6}_gso_segment`` (the same
  :func:`~flowsim.kernel.gso.skb_gso_segment`, given the skb's
  ``xfrm_offload``); then per segment ``xfrm_outer_mode_prep`` decides where
  the ESP header goes and ``esp_xmit`` writes it there and encrypts
  everything after its IV.  Since 06a0afcfe2f5 the transport-mode prep
  (``__xfrm_transport_prep``) puts it at ``skb->transport_header −
  header_len``; for an IP-in-IP inner packet the segmentation left the
  transport header at the innermost TCP header, so ESP lands at *outer
  length + inner IP header length*, and the first four inner IPv4 bytes stay
  in clear in front of it.

Sequence numbers: the segment-first path takes one per segment
(``xfrm_replay_overflow``); the ESP-first path reserves ``gso_segs`` at once
(``xfrm_replay_overflow_offload``), writes the first in the template
(``esp4_gso_encap``) and gives segment *k* first + *k* in ``esp_xmit``.  The
IV is what ``seqiv`` makes: the 64-bit sequence number XOR a per-tfm salt
(:attr:`XfrmState.iv_salt`, 0 by default so captures are reproducible).

:class:`XfrmReceiver` is the other side: it reads ESP where a real receiver
does (right after the outer IP header), looks the SPI up, checks the replay
window, opens the AEAD and counts failures under the ``/proc/net/xfrm_stat``
names (``XfrmInStateProtoError`` for a bad ICV, from ``esp_input_done2``).

Packets are bytes: built with :mod:`flowsim.kernel.pkt`, segmented by
:mod:`flowsim.kernel.gso`, framed by :func:`flowsim.kernel.capture.ether_frame`.
"""

from __future__ import annotations

import functools
import ipaddress
import struct
from typing import TYPE_CHECKING

import attrs

from flowsim.errors import ConfigError
from flowsim.kernel.capture import ether_frame
from flowsim.kernel.gso import SKB_GSO_ESP, GsoSkb, XfrmOffload, gso_type_of
from flowsim.kernel.headers import (
    ETH_P_IP, IPPROTO_ESP, IPPROTO_IPIP, IPPROTO_IPV6, IPPROTO_TCP, IPPROTO_UDP, csum_replace, ip_send_check,
    mac_aton,
)
from flowsim.kernel.pkt import build_ipv4, build_ipv6, eth_header, tcp_segment, udp_datagram
from flowsim.kernel.skb import SkBuff

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

__all__ = [
    "XfrmState", "EspFrame", "XfrmReceiver", "RxResult", "INNER_KINDS", "ESP_HEADER_LEN",
    "build_gso_skb", "bulk_tcp_segment", "esp_output_segmented", "esp_output_skb_gso_esp", "esp_trailer",
    "xfrm_outer_mode_prep", "esp_xmit", "outer_header_len", "DEFAULT_KEY", "ETH_P_TEB",
]

ESP_HDR_LEN = 8
GCM_IV_LEN = 8
ICV_LEN = 16
ESP_HEADER_LEN = ESP_HDR_LEN + GCM_IV_LEN  # x->props.header_len for rfc4106 (esp_init_state)
GCM_SALT_LEN = 4

# 16-byte AES key + 4-byte salt, as `ip xfrm state … aead 'rfc4106(gcm(aes))' 0x<20 bytes> 128` takes it.
DEFAULT_KEY = bytes.fromhex("000102030405060708090a0b0c0d0e0f" "a0a1a2a3")

GSO_MAX = 65535  # the outer IPv4 total length is 16 bits (GSO_LEGACY_MAX_SIZE - 1)
ETH_P_TEB = 0x6558  # Transparent Ethernet Bridging: what vxlan/geneve put in skb->inner_protocol
VXLAN_PORT = 4789
GENEVE_PORT = 6081

INNER_KINDS = ("none", "ipip", "ip6tnl", "vxlan", "geneve")
"""The GSO skbs this module can build: plain TCP, TCP in ipip / ip6tnl (4in6), TCP in VXLAN / Geneve."""

# Addresses of the scenario (the patch's reproducer uses fd00:a::1/2 and 10.9.0.1/2).
_OUTER = {4: ("192.0.2.1", "192.0.2.2"), 6: ("fd00:a::1", "fd00:a::2")}
_SA_TUNNEL = {4: ("198.51.100.1", "198.51.100.2"), 6: ("2001:db8:100::1", "2001:db8:100::2")}
_INNER4 = ("10.9.0.1", "10.9.0.2")
_OUTER_ID, _INNER_ID = 0x1000, 0x2000
# The MAC addresses of the frames a run writes, and of the tunnels' inner Ethernet header.
_WIRE_DST, _WIRE_SRC = mac_aton("02:00:00:00:00:0b"), mac_aton("02:00:00:00:00:0a")
_INNER_DST, _INNER_SRC = mac_aton("02:00:00:00:00:02"), mac_aton("02:00:00:00:00:01")
_VNI = 42
_TUNNEL_SPORT = 49152

# A bulk sender's TCP header: ACK|PSH, window 502, NOP NOP and the timestamp option (tcp_options_write).
_TCP_ACK_PSH = 0x18
_TCP_TS_OPTION = struct.pack("!BBBBII", 1, 1, 8, 10, 0x01020304, 0x0A0B0C0D)


# --- the SA -------------------------------------------------------------------

@attrs.frozen
class XfrmState:
    """An outbound/inbound ESP SA with ``rfc4106(gcm(aes))`` (``struct xfrm_state``, the parts used).

    ``key`` is the AES key followed by the 4-byte salt (20, 28 or 36 bytes).
    ``tunnel`` holds the SA endpoints for tunnel mode (chosen from the outer
    family when ``None``).
    """

    spi: int = 0x1001
    key: bytes = DEFAULT_KEY
    mode: str = attrs.field(default="transport")
    replay_window: int = 128
    iv_salt: int = 0
    tunnel: tuple[str, str] | None = None

    @mode.validator
    def _check_mode(self, _attr, value):
        if value not in ("transport", "tunnel"):
            raise ConfigError(f"ESP packets are modelled for transport and tunnel mode only: {value!r}", value=value,
                              expected="transport or tunnel")

    def __attrs_post_init__(self):
        if len(self.key) not in (20, 28, 36):
            raise ConfigError(f"rfc4106(gcm(aes)) key must be 16, 24 or 32 bytes plus a 4-byte salt: {len(self.key)!r}",
                              value=len(self.key), expected="20, 28 or 36 bytes")
        if not 0 < self.spi <= 0xFFFFFFFF:
            raise ConfigError(f"SPI must be a non-zero 32-bit value: {self.spi!r}", value=self.spi)


@functools.lru_cache(maxsize=16)
def _aead(key: bytes) -> AESGCM:
    # imported with the first SA used: cryptography costs ~9 ms CPU of every run's start-up, and most runs have
    # no IPsec (issue 16)
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    return AESGCM(key[:-GCM_SALT_LEN])


def esp_trailer(plen: int, nexthdr: int) -> bytes:
    """The ESP trailer ``esp_output_head`` adds: pad to ``ALIGN(blocksize 1, 4)``, pad length, next header."""
    padlen = -(plen + 2) % 4
    return bytes(range(1, padlen + 1)) + bytes((padlen, nexthdr))


def _seqiv(state: XfrmState, seq: int) -> bytes:
    """The IV ``seqiv`` generates: the 64-bit sequence number XOR the tfm's salt."""
    return struct.pack("!Q", seq ^ state.iv_salt)


def esp_output_tail(state: XfrmState, seq: int, payload: bytes, nexthdr: int) -> bytes:
    """ESP header, IV, then AEAD over payload + trailer with the ESP header as AAD (``esp_output_tail``)."""
    esph = struct.pack("!II", state.spi, seq & 0xFFFFFFFF)
    iv = _seqiv(state, seq)
    nonce = state.key[-GCM_SALT_LEN:] + iv
    return esph + iv + _aead(state.key).encrypt(nonce, payload + esp_trailer(len(payload), nexthdr), esph)


def outer_header_len(packet: bytes | bytearray) -> int:
    """Length of the outer IP header (no options, no extension headers in this model)."""
    return (packet[0] & 0x0F) * 4 if packet[0] >> 4 == 4 else 40


def _set_outer_length(buf: bytearray) -> None:
    """What ``esp_xmit`` / ``esp_output`` do to the outer header: set the length (and IPv4 checksum)."""
    if buf[0] >> 4 == 4:
        struct.pack_into("!H", buf, 2, len(buf))
        ip_send_check(buf, 0)
    else:
        struct.pack_into("!H", buf, 4, len(buf) - 40)


def _set_protocol(buf: bytearray, proto: int) -> int:
    """Write *proto* into the outer protocol / next-header byte; return the old value."""
    off = 9 if buf[0] >> 4 == 4 else 6
    old = buf[off]
    buf[off] = proto
    return old


# --- frames ----------------------------------------------------------------------

def _ip_packet(seg: SkBuff) -> bytes:
    """A segment's IP packet: from its network header to the end."""
    return bytes(seg.buf[seg.network_header:])


def ip_frame(packet: bytes) -> bytes:
    """The Ethernet frame a run writes for an IP packet."""
    return ether_frame(packet, _WIRE_DST, _WIRE_SRC)


# --- segment first: xfrm_output_gso / hardware ----------------------------------

@attrs.frozen
class EspFrame:
    """One ESP frame on the wire, with what the sender knows about it.

    ``esp_offset``: where ``esp_xmit``/``esp_output`` wrote the ESP header,
    from the outer IP header; ``seq``: the sequence number written there;
    ``plain``: the plaintext segment a correct receiver must recover.
    """

    frame: bytes
    esp_offset: int
    seq: int
    plain: bytes

    @property
    def packet(self) -> bytes:
        return self.frame[14:]


def _tunnel_outer(state: XfrmState, family: int, inner: bytes, payload: bytes, ident: int = 0) -> bytes:
    """The outer header ``xfrm{4,6}_tunnel_encap_add`` builds around *payload*: SA endpoints, DSCP copied.

    The next header is ESP (``esp_output`` writes it through ``skb_mac_header``).
    """
    src, dst = (ipaddress.ip_address(a) for a in state.tunnel or _SA_TUNNEL[family])
    tos = inner[1] if inner[0] >> 4 == 4 else ((inner[0] & 0x0F) << 4) | (inner[1] >> 4)
    if family == 4:
        return build_ipv4(src, dst, IPPROTO_ESP, payload, tos=tos & 0xFC, ident=ident)
    return build_ipv6(src, dst, IPPROTO_ESP, payload, tclass=tos & 0xFC)


def _tunnel_nexthdr(inner: bytes) -> int:
    return IPPROTO_IPIP if inner[0] >> 4 == 4 else IPPROTO_IPV6


def xfrm_transport_esp_output(state: XfrmState, segment: bytes, seq: int) -> tuple[bytes, int]:
    """``xfrm{4,6}_transport_output`` + ``esp_output`` on one plain segment: ESP right after the IP header."""
    buf = bytearray(segment)
    hlen = outer_header_len(buf)
    nexthdr = _set_protocol(buf, IPPROTO_ESP)
    out = bytearray(buf[:hlen] + esp_output_tail(state, seq, bytes(buf[hlen:]), nexthdr))
    _set_outer_length(out)
    return bytes(out), hlen


def xfrm_tunnel_esp_output(state: XfrmState, segment: bytes, seq: int, family: int, ident: int) -> tuple[bytes, int]:
    """``xfrm{4,6}_tunnel_encap_add`` + ``esp_output`` on one plain segment."""
    body = esp_output_tail(state, seq, segment, _tunnel_nexthdr(segment))
    pkt = _tunnel_outer(state, family, segment, body, ident)
    return pkt, len(pkt) - len(body)


def esp_output_segmented(state: XfrmState, skb: GsoSkb, seq_first: int, sa_family: int,
                         trace: list[str] | None = None) -> list[EspFrame]:
    """Software GSO before ESP (``xfrm_output_gso``), then ESP on each segment.

    Every segment passes ``xfrm_output2`` → ``xfrm_output_one`` on its own and
    takes the next sequence number; the ESP header sits right after the
    outer IP header.  Also the bytes a NIC with ESP GSO is assumed to send.
    """
    frames = []
    for k, seg in enumerate(skb.segment(trace)):
        plain = _ip_packet(seg)
        seq = seq_first + k
        if state.mode == "transport":
            pkt, off = xfrm_transport_esp_output(state, plain, seq)
        else:
            pkt, off = xfrm_tunnel_esp_output(state, plain, seq, sa_family, k)
        frames.append(EspFrame(ip_frame(pkt), off, seq, plain))
    return frames


# --- ESP first: SKB_GSO_ESP and esp{4,6}_gso_segment ---------------------------

def xfrm_transport_output_gso(state: XfrmState, skb: GsoSkb, seq_first: int) -> GsoSkb:
    """``xfrm{4,6}_transport_output`` + ``esp{4,6}_gso_encap`` on the whole GSO skb.

    The IP header is moved ``header_len`` bytes towards the head, so the slot
    it leaves holds the tail of the old header (the memmove's leftovers:
    IPv4 source and destination, or the last bytes of the IPv6 destination);
    ``esp_gso_encap`` then writes SPI and the batch's first sequence number
    over the first eight, records the hidden protocol in ``xo->proto`` and
    sets SKB_GSO_ESP.  The IP header now announces ESP and covers the slot.
    """
    pkt = skb.packet
    hlen = outer_header_len(pkt)
    old_hdr = pkt[:hlen]
    stale = old_hdr[hlen - ESP_HEADER_LEN:]
    content = struct.pack("!II", state.spi, seq_first & 0xFFFFFFFF) + stale[ESP_HDR_LEN:]
    hdr = bytearray(old_hdr)
    proto = _set_protocol(hdr, IPPROTO_ESP)
    out = bytearray(hdr + content + pkt[hlen:])
    _set_outer_length(out)
    xo = XfrmOffload(proto, "transport", state.spi, ESP_HEADER_LEN)
    return attrs.evolve(skb, packet=bytes(out), gso_type=skb.gso_type | SKB_GSO_ESP,
                        inner_mac=skb.inner_mac + ESP_HEADER_LEN if skb.inner_mac >= 0 else -1, xo=xo)


def xfrm_tunnel_encap_add_gso(state: XfrmState, skb: GsoSkb, seq_first: int, family: int) -> GsoSkb:
    """``xfrm{4,6}_tunnel_encap_add`` + ``esp{4,6}_gso_encap``: new outer header and ESP slot."""
    inner = skb.packet
    content = struct.pack("!II", state.spi, seq_first & 0xFFFFFFFF) + bytes(GCM_IV_LEN)
    pkt = _tunnel_outer(state, family, inner, content + inner)
    hlen = len(pkt) - len(inner) - ESP_HEADER_LEN
    xo = XfrmOffload(_tunnel_nexthdr(inner), "tunnel", state.spi, ESP_HEADER_LEN)
    return attrs.evolve(skb, packet=pkt, gso_type=skb.gso_type | SKB_GSO_ESP,
                        inner_mac=skb.inner_mac + hlen + ESP_HEADER_LEN if skb.inner_mac >= 0 else -1, xo=xo)


def xfrm_outer_mode_prep(seg: SkBuff, mode: str, prep: str) -> int:
    """Where ``validate_xmit_xfrm`` → ``xfrm_outer_mode_prep`` puts the ESP header of a GSO segment.

    Offsets are from the segment's network header.

    * tunnel (``__xfrm_mode_tunnel_prep``): network header + outer IP header;
    * transport, ``prep="transport-header"`` (``__xfrm_transport_prep`` since
      06a0afcfe2f5): the segment's transport header − ``header_len``;
    * transport, ``prep="fixed"`` (before 06a0afcfe2f5): a fixed
      ``mac_len + hsize`` pull, i.e. right after the outer header.
    """
    if mode == "tunnel" or prep == "fixed":
        return outer_header_len(seg.buf[seg.network_header:seg.network_header + 1])
    if prep != "transport-header":
        raise ConfigError(f"unknown transport prep: {prep!r}", value=prep, expected="fixed or transport-header")
    return seg.transport_header - seg.network_header - ESP_HEADER_LEN


def esp_xmit(state: XfrmState, packet: bytes, esp_off: int, seq: int, nexthdr: int) -> bytes:
    """``esp_xmit`` / ``esp6_xmit`` (software fallback ``esp_output_head``/``esp_output_tail``).

    Writes SPI and this segment's sequence number at *esp_off*, the IV after
    them, encrypts everything from ``esp_off + header_len`` to the end plus
    the trailer (next header ``xo->proto``), and sets the outer length.
    Bytes in front of *esp_off* are sent as they are.
    """
    body = esp_output_tail(state, seq, packet[esp_off + ESP_HEADER_LEN:], nexthdr)
    out = bytearray(packet[:esp_off] + body)
    _set_outer_length(out)
    return bytes(out)


def esp_output_skb_gso_esp(state: XfrmState, skb: GsoSkb, seq_first: int, sa_family: int, prep: str,
                           trace: list[str] | None = None) -> list[EspFrame]:
    """The ``SKB_GSO_ESP`` path: ESP slot on the GSO skb, software ESP GSO, per-segment prep + ``esp_xmit``."""
    plain = [_ip_packet(s) for s in skb.segment()]
    if state.mode == "transport":
        esp_skb = xfrm_transport_output_gso(state, skb, seq_first)
    else:
        esp_skb = xfrm_tunnel_encap_add_gso(state, skb, seq_first, sa_family)
    assert esp_skb.xo is not None
    nexthdr = esp_skb.xo.proto  # xo->proto, recorded by esp_gso_encap
    frames = []
    for k, seg in enumerate(esp_skb.segment(trace)):
        off = xfrm_outer_mode_prep(seg, state.mode, prep)
        pkt = esp_xmit(state, _ip_packet(seg), off, seq_first + k, nexthdr)
        frames.append(EspFrame(ip_frame(pkt), off, seq_first + k, plain[k]))
    return frames


# --- the GSO skbs of the scenarios ----------------------------------------------

@functools.lru_cache(maxsize=8)
def _payload(n: int) -> bytes:
    """Deterministic, non-repeating-looking payload bytes (cached: a run builds the same skb several times)."""
    return bytes((i * 131 + (i >> 8) * 7 + 3) & 0xFF for i in range(n))


def bulk_tcp_segment(src, dst, payload: bytes, seq: int = 1000) -> bytes:
    """The TCP segment of a bulk sender (40000 → 5201, ACK|PSH): header, timestamp option, *payload*.

    ``tcp_segment`` builds header and checksum with the option bytes in
    front of the payload; the data offset is then raised over them
    (``tcp_options_write``) with the incremental checksum update.
    """
    seg = bytearray(tcp_segment(src, dst, 40000, 5201, seq, 1, _TCP_ACK_PSH, _TCP_TS_OPTION + payload, 502))
    old = bytes(seg[12:14])
    seg[12] = (20 + len(_TCP_TS_OPTION)) // 4 << 4
    check = struct.unpack_from("!H", seg, 16)[0]
    struct.pack_into("!H", seg, 16, csum_replace(check, old, bytes(seg[12:14])))
    return bytes(seg)


def _tunnel_header(inner: str) -> tuple[int, bytes]:
    """The UDP destination port and the 8-byte header of a VXLAN (RFC 7348) or Geneve (RFC 8926) tunnel."""
    if inner == "vxlan":
        return VXLAN_PORT, struct.pack("!II", 0x08000000, _VNI << 8)  # flags with the I bit, VNI
    return GENEVE_PORT, struct.pack("!BBHI", 0, 0, ETH_P_TEB, _VNI << 8)  # no options, protocol TEB, VNI


def build_gso_skb(inner: str, family: int = 4, segments: int = 8, mss: int = 1368,
                  last: int | None = None) -> GsoSkb:
    """A GSO skb of bulk TCP as the stack hands it to ``xfrm_output``.

    *inner*: ``none`` (plain TCP between the SA endpoints), ``ipip`` (IPv4 in
    IPv4), ``ip6tnl`` (IPv4 in IPv6, ``encaplimit none``), ``vxlan`` /
    ``geneve`` (TCP in an Ethernet frame in UDP).  *family* is the outer
    family for ``none``/``vxlan``/``geneve``; ipip is always 4 and ip6tnl 6.
    *last* is the payload of the last segment (default: a full ``mss``).
    """
    if inner not in INNER_KINDS:
        raise ConfigError(f"unknown inner packet kind: {inner!r}", value=inner, expected=", ".join(INNER_KINDS))
    if segments < 2:
        raise ConfigError(f"a GSO skb here has at least 2 segments: {segments!r}", value=segments, expected=">= 2")
    if mss < 1:
        raise ConfigError(f"mss must be positive: {mss!r}", value=mss)
    last = mss if last is None else last
    if not 1 <= last <= mss:
        raise ConfigError(f"the last segment's payload must be 1..mss bytes: {last!r}", value=last)
    family = {"ipip": 4, "ip6tnl": 6}.get(inner, family)
    if family not in (4, 6):
        raise ConfigError(f"family must be 4 or 6: {family!r}", value=family)
    size = 20 + 32 + mss * (segments - 1) + last  # inner IPv4 + TCP; checked before building 64 KiB of bytes
    size += {"none": -20, "ipip": 0, "ip6tnl": 0}.get(inner, 8 + 8 + 14) + (20 if family == 4 else 40)
    if size > GSO_MAX:
        raise ConfigError(f"{segments} segments of {mss} bytes exceed a 64 KiB GSO skb: {segments!r}",
                          value=segments, expected=f"a packet of at most {GSO_MAX} bytes")
    payload = _payload(mss * (segments - 1) + last)
    osrc, odst = (ipaddress.ip_address(a) for a in _OUTER[family])
    inner_protocol, inner_mac = 0, -1
    if inner == "none":
        l4 = bulk_tcp_segment(osrc, odst, payload)
        proto = IPPROTO_TCP
    else:
        isrc, idst = (ipaddress.ip_address(a) for a in _INNER4)
        ip = build_ipv4(isrc, idst, IPPROTO_TCP, bulk_tcp_segment(isrc, idst, payload), ident=_INNER_ID)
        if inner in ("ipip", "ip6tnl"):
            l4, proto, inner_protocol = ip, IPPROTO_IPIP, IPPROTO_IPIP  # iptunnel_xmit: skb_set_inner_ipproto
        else:
            port, tnl = _tunnel_header(inner)
            l4 = udp_datagram(osrc, odst, _TUNNEL_SPORT, port, tnl + eth_header(_INNER_DST, _INNER_SRC, ETH_P_IP) + ip)
            proto, inner_protocol = IPPROTO_UDP, ETH_P_TEB  # skb_set_inner_protocol(skb, htons(ETH_P_TEB))
            inner_mac = (20 if family == 4 else 40) + 8 + len(tnl)
    if family == 4:
        pkt = build_ipv4(osrc, odst, proto, l4, ident=_OUTER_ID)
    else:
        pkt = build_ipv6(osrc, odst, proto, l4)
    return GsoSkb(pkt, mss, gso_type_of(pkt, inner_mac), inner_protocol, inner_mac)


# --- the receiver -------------------------------------------------------------

@attrs.frozen
class RxResult:
    """What ``xfrm_input`` did with one frame: ``verdict`` is ``ok`` or a counter name."""

    verdict: str
    esp_offset: int | None = None
    seq: int | None = None
    plain: bytes | None = None


@attrs.define(slots=True)
class _Replay:
    """``xfrm_replay_check`` / ``xfrm_replay_advance`` (legacy bitmap, window ≤ 32·n)."""

    window: int
    top: int = 0
    bitmap: int = 0

    def check(self, seq: int) -> bool:
        if seq == 0:
            return False
        if seq > self.top:
            return True
        diff = self.top - seq
        return diff < self.window and not (self.bitmap >> diff) & 1

    def advance(self, seq: int) -> None:
        if seq > self.top:
            self.bitmap = ((self.bitmap << (seq - self.top)) | 1) & ((1 << self.window) - 1)
            self.top = seq
        else:
            self.bitmap |= 1 << (self.top - seq)


@attrs.define(slots=True)
class XfrmReceiver:
    """An inbound ESP receiver: ``xfrm_input`` → ``esp_input`` → ``xfrm{4,6}_*_input``.

    It reads ESP right after the outer IP header, as a real receiver does,
    and keeps ``/proc/net/xfrm_stat``-style counters.
    """

    states: dict[int, XfrmState]
    counters: dict[str, int] = attrs.field(factory=lambda: dict.fromkeys(
        ("decrypted", "XfrmInNoStates", "XfrmInStateSeqError", "XfrmInStateProtoError", "XfrmInHdrError"), 0))
    _replay: dict[int, _Replay] = attrs.field(factory=dict)

    def xfrm_input(self, frame: bytes) -> RxResult:
        """Receive one Ethernet frame; return the verdict and, on success, the recovered packet."""
        res = self._input(frame)
        self.counters["decrypted" if res.verdict == "ok" else res.verdict] += 1
        return res

    def _input(self, frame: bytes) -> RxResult:
        pkt = frame[14:]
        if len(pkt) < 20:
            return RxResult("XfrmInHdrError")
        hlen = outer_header_len(pkt)
        proto = pkt[9] if pkt[0] >> 4 == 4 else pkt[6]
        if proto != IPPROTO_ESP or len(pkt) < hlen + ESP_HEADER_LEN + ICV_LEN:
            return RxResult("XfrmInHdrError")
        spi, seq = struct.unpack_from("!II", pkt, hlen)
        state = self.states.get(spi)
        if state is None:
            return RxResult("XfrmInNoStates", hlen, seq)
        replay = self._replay.setdefault(spi, _Replay(state.replay_window))
        if not replay.check(seq):
            return RxResult("XfrmInStateSeqError", hlen, seq)
        plain = esp_input(state, pkt[hlen:])
        if plain is None:
            return RxResult("XfrmInStateProtoError", hlen, seq)
        replay.advance(seq)
        body, nexthdr = plain
        if state.mode == "tunnel":
            return RxResult("ok", hlen, seq, body)
        buf = bytearray(pkt[:hlen] + body)  # xfrm{4,6}_transport_input: restore protocol and length
        _set_protocol(buf, nexthdr)
        _set_outer_length(buf)
        return RxResult("ok", hlen, seq, bytes(buf))


def esp_input(state: XfrmState, esp: bytes) -> tuple[bytes, int] | None:
    """``esp_input`` + ``esp_input_done2``: open the AEAD, strip the trailer; ``None`` on a bad ICV or trailer."""
    from cryptography.exceptions import InvalidTag  # loaded by _aead: a lookup in sys.modules

    esph, iv, ct = esp[:ESP_HDR_LEN], esp[ESP_HDR_LEN:ESP_HEADER_LEN], esp[ESP_HEADER_LEN:]
    try:
        plain = _aead(state.key).decrypt(state.key[-GCM_SALT_LEN:] + iv, ct, esph)
    except InvalidTag:
        return None
    if len(plain) < 2 or plain[-2] + 2 > len(plain):
        return None
    padlen, nexthdr = plain[-2], plain[-1]
    return plain[:-2 - padlen], nexthdr
