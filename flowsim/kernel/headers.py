"""Protocol constants, header layouts and checksum helpers (<linux/if_ether.h>, <linux/ip.h>, …).

The data path reads headers straight from the packet bytes with
``struct.unpack_from`` at offsets (header-pointer style); this module holds
what those readers share: the numbers the kernel uses, the fixed header
sizes, the Internet checksum and its incremental update (RFC 1624, the
kernel's ``csum_replace2/4`` and ``inet_proto_csum_replace*``), and the
IPv6 extension-header walk ``ipv6_skip_exthdr``.
"""

from __future__ import annotations

import functools
import ipaddress
import socket
import struct
from typing import NamedTuple

__all__ = [
    "shared_u16",
    "ETH_HLEN", "VLAN_HLEN", "PPPOE_SES_HLEN", "IPV4_HLEN", "IPV6_HLEN", "IPV6_MIN_MTU",
    "ETH_P_IP", "ETH_P_IPV6", "ETH_P_8021Q", "ETH_P_8021AD", "ETH_P_PPP_SES", "ETH_P_ARP",
    "PPP_IP", "PPP_IPV6", "IPPROTO_IPIP", "IPPROTO_TCP", "IPPROTO_UDP", "IPPROTO_GRE",
    "IPPROTO_IPV6", "IPPROTO_ICMP", "IPPROTO_ICMPV6", "IPPROTO_ESP",
    "NEXTHDR_HOP", "NEXTHDR_ROUTING", "NEXTHDR_FRAGMENT", "NEXTHDR_AUTH", "NEXTHDR_NONE", "NEXTHDR_DEST",
    "HZ", "AF_INET", "AF_INET6", "L4_HDRSIZE", "GRE_HLEN", "GRE_VERSION", "GRE_VERSION_1",
    "ipv6_ext_hdr", "ipv6_skip_exthdr", "pppoe_proto_to_ethertype",
    "csum_fold", "internet_checksum", "csum_replace", "ip_send_check",
    "addr_bytes", "addr_text", "ETHERTYPE_TO_PPP", "PPP_TO_ETHERTYPE", "mac_aton", "mac_ntoa",
    "GSO_LEGACY_MAX_SIZE", "Encap",
    "RT_SCOPE_UNIVERSE", "RT_SCOPE_SITE", "RT_SCOPE_LINK", "RT_SCOPE_HOST", "RT_SCOPE_NOWHERE", "RT_SCOPE_NAMES",
]

_inet_ntop = socket.inet_ntop
_AF_INET_SOCKET, _AF_INET6_SOCKET = socket.AF_INET, socket.AF_INET6

ETH_HLEN = 14
VLAN_HLEN = 4
PPPOE_SES_HLEN = 8  # 6-byte PPPoE header + 2-byte PPP protocol
IPV4_HLEN = 20
IPV6_HLEN = 40
IPV6_MIN_MTU = 1280  # include/linux/ipv6.h: the least MTU an IPv6 link may have (RFC 8200)

ETH_P_IP = 0x0800
ETH_P_ARP = 0x0806
ETH_P_IPV6 = 0x86DD
ETH_P_8021Q = 0x8100
ETH_P_8021AD = 0x88A8
ETH_P_PPP_SES = 0x8864

PPP_IP = 0x0021
PPP_IPV6 = 0x0057

IPPROTO_ICMP = 1
IPPROTO_IPIP = 4
IPPROTO_TCP = 6
IPPROTO_UDP = 17
IPPROTO_IPV6 = 41
IPPROTO_GRE = 47
IPPROTO_ESP = 50
IPPROTO_ICMPV6 = 58

NEXTHDR_HOP = 0
NEXTHDR_ROUTING = 43
NEXTHDR_FRAGMENT = 44
NEXTHDR_AUTH = 51
NEXTHDR_NONE = 59
NEXTHDR_DEST = 60
_EXT_HDRS = frozenset((NEXTHDR_HOP, NEXTHDR_ROUTING, NEXTHDR_FRAGMENT, NEXTHDR_AUTH, NEXTHDR_NONE, NEXTHDR_DEST))

AF_INET = 2
AF_INET6 = 10

HZ = 250  # CONFIG_HZ of Debian's amd64 kernels: a jiffy is 4 ms

GRE_HLEN = 4  # sizeof(struct gre_base_hdr): flags and version, protocol
# include/net/gre.h: the version bits of gre_base_hdr's flags (the low three bits of its second byte); version 1
# is PPTP's enhanced GRE (RFC 2637)
GRE_VERSION, GRE_VERSION_1 = 0x07, 0x01

# Bytes of L4 header the flowtable pulls (sizeof tcphdr / udphdr / gre_base_hdr).
L4_HDRSIZE = {IPPROTO_TCP: 20, IPPROTO_UDP: 8, IPPROTO_GRE: GRE_HLEN}

# The PPP protocol numbers that carry IP, and back (``__nf_flow_pppoe_proto``, ``ppp_start_xmit``'s npindex).
PPP_TO_ETHERTYPE = {PPP_IP: ETH_P_IP, PPP_IPV6: ETH_P_IPV6}
ETHERTYPE_TO_PPP = {ETH_P_IP: PPP_IP, ETH_P_IPV6: PPP_IPV6}

# <linux/netdevice.h>: the largest GSO skb a device takes unless it says more (16-bit IPv4 total length).
GSO_LEGACY_MAX_SIZE = 65536

# include/uapi/linux/rtnetlink.h, enum rt_scope_t: an address's (ifa_scope) and a route's (rtm_scope) reach,
# narrower with a higher number; the names are iproute2's (lib/rt_names.c rtnl_rtscope_tab, "universe" its alias)
RT_SCOPE_UNIVERSE = 0
RT_SCOPE_SITE = 200
RT_SCOPE_LINK = 253
RT_SCOPE_HOST = 254
RT_SCOPE_NOWHERE = 255
RT_SCOPE_NAMES = {"global": RT_SCOPE_UNIVERSE, "universe": RT_SCOPE_UNIVERSE, "site": RT_SCOPE_SITE,
                  "link": RT_SCOPE_LINK, "host": RT_SCOPE_HOST, "nowhere": RT_SCOPE_NOWHERE}


def pppoe_proto_to_ethertype(ppp_proto: int) -> int:
    """Mirror ``__nf_flow_pppoe_proto``: PPP_IP → IPv4, PPP_IPV6 → IPv6, else 0."""
    return PPP_TO_ETHERTYPE.get(ppp_proto, 0)


@functools.lru_cache(maxsize=4096)
def mac_aton(text: str | None) -> bytes:
    """``aa:bb:cc:dd:ee:ff`` as 6 bytes; None gives the zero address (``eth_zero_addr``)."""
    return bytes.fromhex(text.replace(":", "")) if text else bytes(6)


@functools.lru_cache(maxsize=4096)
def mac_ntoa(raw: bytes) -> str:
    """The first 6 bytes of *raw* (zero padded) as ``aa:bb:cc:dd:ee:ff`` (``%pM``)."""
    return ":".join(f"{b:02x}" for b in (bytes(raw) + bytes(6))[:6])


def ipv6_ext_hdr(nexthdr: int) -> bool:
    """Mirror ``ipv6_ext_hdr``: hop-by-hop, routing, fragment, AH, none, dest-opts."""
    return nexthdr in _EXT_HDRS


def ipv6_skip_exthdr(read, start: int, nexthdr: int) -> tuple[int, int, int]:
    """Mirror ``ipv6_skip_exthdr``: walk the extension-header chain.

    *read(offset, length)* is a header-pointer style reader returning bytes
    or ``None`` beyond the end.  Returns ``(offset, nexthdr, frag_off)``;
    offset is -1 on error (truncated chain, or next header NONE).  A
    non-first fragment stops the walk at the fragment header, as in the kernel.
    """
    frag_off = 0
    while nexthdr in _EXT_HDRS:
        if nexthdr == NEXTHDR_NONE:
            return -1, nexthdr, frag_off
        hp = read(start, 2)
        if hp is None:
            return -1, nexthdr, frag_off
        if nexthdr == NEXTHDR_FRAGMENT:
            fp = read(start + 2, 2)
            if fp is None:
                return -1, nexthdr, frag_off
            frag_off = (fp[0] << 8) | fp[1]
            if frag_off & ~0x7:
                break
            hdrlen = 8
        elif nexthdr == NEXTHDR_AUTH:
            hdrlen = (hp[1] + 2) << 2
        else:
            hdrlen = (hp[1] + 1) << 3
        nexthdr = hp[0]
        start += hdrlen
    return start, nexthdr, frag_off


# --- checksums -------------------------------------------------------------

def csum_fold(total: int) -> int:
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return total


_from_bytes = int.from_bytes

#: the int object of each 16-bit value handed to shared_u16 (a list: 512 KiB, a quarter of a full dict's)
_U16: list[int | None] = [None] * 0x10000


def shared_u16(n: int) -> int:
    """The one int object for the 16-bit value *n* (a port, a length, an IP ID); other values as they are.

    Python makes a 28-byte object for every int above 256 it computes or unpacks: what a run keeps per
    connection (the sockets' ports, conntrack's tuples, the tags of the packets in flight) holds the shared
    one instead of one per packet parsed (issue 16: memory per connection).
    """
    if not 0 <= n <= 0xFFFF:
        return n
    shared = _U16[n]
    if shared is None:
        shared = _U16[n] = n
    return shared


def internet_checksum(data: bytes | bytearray | memoryview, initial: int = 0) -> int:
    """RFC 1071 one's-complement checksum of *data* (returned complemented); *initial* is an unfolded sum to
    add (a pseudo-header's).

    The one's-complement sum of the 16-bit words is the sum folded with end-around carries
    (:func:`csum_fold`), which is the sum's residue modulo 0xFFFF taken in 1..0xFFFF (0 only for a zero
    sum).  As 2**16 = 1 modulo 0xFFFF, the whole data read as one big-endian number (a trailing odd byte
    padded with a zero) has the same residue as the sum of its words: one ``int.from_bytes`` and one
    remainder instead of a word-by-word sum.
    """
    total = _from_bytes(data, "big")
    if len(data) & 1:
        total <<= 8
    total += initial
    return ~((total - 1) % 0xFFFF + 1) & 0xFFFF if total else 0xFFFF


def csum_replace(check: int, old: bytes, new: bytes) -> int:
    """Incremental update of a stored checksum (RFC 1624 eqn. 3, ``csum_replace4``/``inet_proto_csum_replace16``).

    *old* and *new* are the replaced field's bytes (even length).
    """
    total = ~check & 0xFFFF
    for (o,) in struct.iter_unpack("!H", old):
        total += ~o & 0xFFFF
    for (n,) in struct.iter_unpack("!H", new):
        total += n
    return ~csum_fold(total) & 0xFFFF


def ip_send_check(buf: bytearray, off: int) -> None:
    """Mirror ``ip_send_check``: recompute the IPv4 header checksum in place."""
    ihl = (buf[off] & 0x0F) * 4
    buf[off + 10:off + 12] = b"\0\0"
    struct.pack_into("!H", buf, off + 10, internet_checksum(buf[off:off + ihl]))


# --- addresses ---------------------------------------------------------------

def addr_bytes(text: str) -> bytes:
    """An address as the 16-byte union the kernel keys on (IPv4 in the first 4 bytes)."""
    ip = ipaddress.ip_address(text)
    return ip.packed.ljust(16, b"\0")


_ZERO10 = bytes(10)


def addr_text(raw: bytes, l3proto: int) -> str:
    """Text form of a 16-byte address union for family *l3proto* (AF_INET / AF_INET6): ``ipaddress``'s.

    The C formatter (``inet_ntop``) writes the same RFC 5952 text (longest run of two or more zero
    groups compressed, the first of equal runs, lower case), five times faster, except for addresses
    whose first 80 bits are zero, which it may write with a dotted IPv4 tail (``::ffff:1.2.3.4``):
    those go to ``ipaddress`` (tests/test_tuple_fast.py compares the two).
    """
    if l3proto == AF_INET:
        return _inet_ntop(_AF_INET_SOCKET, bytes(raw[:4]))
    raw = bytes(raw)
    if len(raw) == 16 and raw[:10] != _ZERO10:
        return _inet_ntop(_AF_INET6_SOCKET, raw)
    return str(ipaddress.IPv6Address(raw))


# --- path values ---------------------------------------------------------------

class Encap(NamedTuple):
    """One L2 encapsulation ``{u16 id; __be16 proto}``: ``net_device_path_ctx.vlan[]``,
    ``nft_forward_info.encap[]`` and ``flow_offload_tuple.encap[]`` alike.

    ``id`` is the VLAN TCI as stored (or the PPPoE session id), ``proto`` the
    ethertype.  A NamedTuple, not an attrs class: it is part of the flow key,
    which the fast path hashes and compares per packet (in C, like the
    kernel's jhash/memcmp of the key bytes).  Here, not in ``devices.base`` (which re-exports it), so that
    the tuple parser does not import every device model (``flowsim tuple``'s start-up).
    """

    id: int
    proto: int

    def to_json(self) -> dict:
        """The one JSON form: both numbers as integers."""
        return {"id": self.id, "proto": self.proto}

    def __str__(self) -> str:
        return f"{self.id}/0x{self.proto:04x}"
