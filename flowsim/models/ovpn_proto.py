"""ovpn DATA_V2 records: constants, the key slot, AEAD seal and open, and the receiving peer.

Theory of operation (drivers/net/ovpn/proto.h, crypto_aead.c, pktid.h)
----------------------------------------------------------------------
A data record is the UDP payload::

    | opcode word (4) | packet id (4) | AEAD tag (16) | ciphertext (L) |
      type 9 ‖ key id ‖ peer id        ← AAD (8) →

The opcode word carries ``OVPN_DATA_V2`` in its top 5 bits, the key id in
3 bits and the peer id in the low 24 (``ovpn_opcode_compose``).  The nonce
is the 4-byte packet id followed by the key's 8-byte ``nonce_tail_xmit``
(``ovpn_pktid_aead_write``); the AAD is the first 8 bytes; the tag sits
*before* the ciphertext.  Overhead: 24 bytes per record, no padding.
Ciphers: ``gcm(aes)`` and ``rfc7539(chacha20,poly1305)``, both with a
16-byte tag and a 12-byte nonce.

:class:`OvpnReceiver` opens records as ``ovpn_recv`` → ``ovpn_aead_decrypt``
→ ``ovpn_decrypt_post`` do, the replay check (2048-id window,
:class:`flowsim.models.ovpn_pktid.PktidRecv`) after a successful decryption.
"""

from __future__ import annotations

import struct

import attrs
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM, ChaCha20Poly1305

from flowsim.errors import ConfigError
from flowsim.kernel.headers import IPPROTO_UDP
from flowsim.models.ovpn_pktid import PktidRecv, PktidXmit

__all__ = [
    "OVPN_DATA_V2", "OVPN_OPCODE_PEERID_MASK", "OVPN_AUTH_TAG_SIZE", "OVPN_AAD_SIZE", "OVPN_RECORD_OVERHEAD",
    "OVPN_HEAD_ROOM", "OVPN_DEFAULT_MTU", "CIPHERS", "ovpn_opcode_compose", "OvpnKeySlot", "ovpn_aead_encrypt",
    "ovpn_aead_decrypt", "OvpnReceiver",
]

OVPN_DATA_V2 = 9
OVPN_OPCODE_PKTTYPE_MASK = 0xF8000000
OVPN_OPCODE_KEYID_MASK = 0x07000000
OVPN_OPCODE_PEERID_MASK = 0x00FFFFFF
OVPN_OPCODE_SIZE = 4
OVPN_NONCE_SIZE = 12
OVPN_NONCE_TAIL_SIZE = 8
OVPN_NONCE_WIRE_SIZE = OVPN_NONCE_SIZE - OVPN_NONCE_TAIL_SIZE
OVPN_AUTH_TAG_SIZE = 16
OVPN_AAD_SIZE = OVPN_OPCODE_SIZE + OVPN_NONCE_WIRE_SIZE
OVPN_RECORD_OVERHEAD = OVPN_OPCODE_SIZE + OVPN_NONCE_WIRE_SIZE + OVPN_AUTH_TAG_SIZE  # 24
OVPN_HEAD_ROOM = OVPN_RECORD_OVERHEAD + 20 + 40  # + max(UDP 8, TCP 20) + max(IPv6 40, IPv4 20) = 84
OVPN_DEFAULT_MTU = 1500 - OVPN_HEAD_ROOM  # 1416

CIPHERS = {"aes-gcm": AESGCM, "chacha20-poly1305": ChaCha20Poly1305}
_KEY_SIZES = {"aes-gcm": (16, 24, 32), "chacha20-poly1305": (32,)}


def ovpn_opcode_compose(opcode: int, key_id: int, peer_id: int) -> int:
    """``ovpn_opcode_compose``: packet type in the top 5 bits, key id in 3, peer id in the low 24."""
    return ((opcode << 27) & OVPN_OPCODE_PKTTYPE_MASK) | ((key_id << 24) & OVPN_OPCODE_KEYID_MASK) \
        | (peer_id & OVPN_OPCODE_PEERID_MASK)


# --- keys and records ------------------------------------------------------------

@attrs.define(slots=True)
class OvpnKeySlot:
    """``struct ovpn_crypto_key_slot`` (transmit side): cipher, key, nonce tail, packet-id counter."""

    key_id: int
    cipher: str
    key: bytes
    nonce_tail: bytes
    pid: PktidXmit = attrs.field(factory=PktidXmit)
    dead: bool = False
    sealed: list[int] = attrs.field(factory=list)  # every id used as a nonce, in order

    def __attrs_post_init__(self):
        if self.cipher not in CIPHERS:
            raise ConfigError(f"unknown ovpn cipher: {self.cipher!r}", value=self.cipher, expected=", ".join(CIPHERS))
        if len(self.key) not in _KEY_SIZES[self.cipher]:
            raise ConfigError(f"{self.cipher} key has the wrong size: {len(self.key)!r}", value=len(self.key),
                              expected=" or ".join(map(str, _KEY_SIZES[self.cipher])) + " bytes")
        if len(self.nonce_tail) != OVPN_NONCE_TAIL_SIZE:
            raise ConfigError(f"the nonce tail is 8 bytes: {len(self.nonce_tail)!r}", value=len(self.nonce_tail))
        if not 0 <= self.key_id <= 7:
            raise ConfigError(f"key id is 3 bits: {self.key_id!r}", value=self.key_id, expected="0..7")
        self._aead = CIPHERS[self.cipher](self.key)

    _aead: object = attrs.field(init=False, default=None, repr=False, eq=False)


def _nonce(pid: int, tail: bytes) -> bytes:
    """``ovpn_pktid_aead_write``: the packet id, big-endian, then the key's nonce tail."""
    return struct.pack("!I", pid) + tail


def ovpn_aead_encrypt(ks: OvpnKeySlot, peer_id: int, pid: int, plaintext: bytes) -> bytes:
    """Seal one DATA_V2 record (``ovpn_aead_encrypt``): opcode, packet id, tag, ciphertext."""
    aad = struct.pack("!II", ovpn_opcode_compose(OVPN_DATA_V2, ks.key_id, peer_id), pid)
    sealed = ks._aead.encrypt(_nonce(pid, ks.nonce_tail), plaintext, aad)
    ks.sealed.append(pid)
    return aad + sealed[-OVPN_AUTH_TAG_SIZE:] + sealed[:-OVPN_AUTH_TAG_SIZE]


def ovpn_aead_decrypt(cipher: str, key: bytes, nonce_tail: bytes, record: bytes) -> bytes | None:
    """Open one record (``ovpn_aead_decrypt``): the plaintext, or ``None`` if authentication fails."""
    pid = struct.unpack_from("!I", record, OVPN_OPCODE_SIZE)[0]
    tag, ct = record[OVPN_AAD_SIZE:OVPN_RECORD_OVERHEAD], record[OVPN_RECORD_OVERHEAD:]
    try:
        return CIPHERS[cipher](key).decrypt(_nonce(pid, nonce_tail), ct + tag, record[:OVPN_AAD_SIZE])
    except InvalidTag:
        return None


# --- receiver ---------------------------------------------------------------------

@attrs.define(slots=True)
class OvpnReceiver:
    """The receiving peer: ``ovpn_recv`` → ``ovpn_aead_decrypt`` → ``ovpn_decrypt_post`` → ``ovpn_pktid_recv``.

    Opens every DATA_V2 record with the sender's key; the replay check runs
    after a successful decryption, as in ``ovpn_decrypt_post``.
    """

    peer_id: int
    key_id: int
    cipher: str
    key: bytes
    nonce_tail: bytes
    window: PktidRecv = attrs.field(factory=PktidRecv)
    counters: dict[str, int] = attrs.field(factory=lambda: dict.fromkeys(
        ("accepted", "replay", "decrypt_error", "unknown_key", "malformed"), 0))
    delivered: list[bytes] = attrs.field(factory=list)

    @classmethod
    def for_peer(cls, peer) -> OvpnReceiver:
        """The receiver matching *peer*'s peer id and primary key."""
        k = peer.key
        return cls(peer.peer_id, k.key_id, k.cipher, k.key, k.nonce_tail)

    def ovpn_recv(self, frame: bytes) -> str:
        """Receive one Ethernet frame; return and count the verdict."""
        verdict = self._recv(frame)
        self.counters[verdict] += 1
        return verdict

    def _recv(self, frame: bytes) -> str:
        pkt = frame[14:]
        if len(pkt) < 28 or pkt[0] != 0x45 or pkt[9] != IPPROTO_UDP:
            return "malformed"
        rec = pkt[28:]
        if len(rec) < OVPN_RECORD_OVERHEAD:
            return "malformed"
        word, pid = struct.unpack_from("!II", rec)
        if (word >> 27) != OVPN_DATA_V2:
            return "malformed"
        if (word & OVPN_OPCODE_PEERID_MASK) != self.peer_id or ((word >> 24) & 7) != self.key_id:
            return "unknown_key"
        plain = ovpn_aead_decrypt(self.cipher, self.key, self.nonce_tail, rec)
        if plain is None:
            return "decrypt_error"
        if self.window.ovpn_pktid_recv(pid) != 0:
            return "replay"
        self.delivered.append(plain)
        return "accepted"
