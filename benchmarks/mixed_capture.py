"""The mixed capture of issue 16's table, generated deterministically (no randomness, no scapy).

100,000 Ethernet frames cycling through six layouts, every frame its own
source port (and, past 64,000 frames, its own destination port too) — so no
flow repeats — from 251 client hosts, over 3×5 VLAN tag pairs and 16 PPPoE
sessions, as on a busy access router:

* ``ipv4``        IPv4 / TCP
* ``qinq``        802.1AD / 802.1Q / IPv4 / UDP (the outer tag becomes the hwaccel tag)
* ``pppoe``       PPPoE session / PPP / IPv6 / TCP
* ``ipip``        IPv4 / IPv4 (IPIP) / TCP
* ``ip6ip6``      IPv6 / IPv6 (IP6IP6) / UDP
* ``ip6ip6_vlan`` 802.1Q / IPv6 / IPv6 / TCP

Headers are packed with :mod:`struct` (checksums left zero: no flowtable
check reads them); ``tests/test_tuple_fast.py`` checks a few frames of each
layout against scapy's dissection.  Shared by ``bench_tuple`` and ``bench_cli``.
"""

from __future__ import annotations

import struct
from pathlib import Path

HOSTS = 251  # client addresses (a prime: every layout meets every host)
LAYOUTS = ("ipv4", "qinq", "pppoe", "ipip", "ip6ip6", "ip6ip6_vlan")
FRAMES = 100_000
PAYLOAD = b"x" * 32
_ETH = bytes.fromhex("020000000002" "020000000001")
_V6_OUTER = (bytes.fromhex("20010db8000200000000000000000002"), bytes.fromhex("20010db8000200000000000000000001"))


def _ipv4(src: bytes, dst: bytes, proto: int, payload_len: int) -> bytes:
    return struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + payload_len, 0, 0x4000, 64, proto, 0, src, dst)


def _ipv6(src: bytes, dst: bytes, nexthdr: int, payload_len: int) -> bytes:
    return struct.pack("!IHBB16s16s", 0x60000000, payload_len, nexthdr, 64, src, dst)


def _tcp(sport: int, dport: int) -> bytes:
    return struct.pack("!HHIIBBHHH", sport, dport, 1, 1, 0x50, 0x10, 65535, 0, 0) + PAYLOAD


def _udp(sport: int, dport: int) -> bytes:
    return struct.pack("!HHHH", sport, dport, 8 + len(PAYLOAD), 0) + PAYLOAD


def frame(i: int) -> bytes:
    """Frame *i* (0-based) of the capture."""
    layout = LAYOUTS[i % len(LAYOUTS)]
    sport, dport = 1024 + i % 64000, 5201 + i // 64000
    host = i % HOSTS
    v4 = (bytes((10, 1, 0, host)), bytes((10, 2, 0, 1)))
    v6 = (bytes.fromhex("20010db8000300000000000000000000")[:15] + bytes((host,)),
          bytes.fromhex("20010db8000100000000000000000001"))
    if layout == "ipv4":
        l4 = _tcp(sport, dport)
        return _ETH + b"\x08\x00" + _ipv4(*v4, 6, len(l4)) + l4
    if layout == "qinq":
        l4 = _udp(sport, dport)
        tags = struct.pack("!HHHH", 100 + i % 3, 0x8100, 0x2000 | (20 + i % 5), 0x0800)
        return _ETH + b"\x88\xa8" + tags + _ipv4(*v4, 17, len(l4)) + l4
    if layout == "pppoe":
        l4 = _tcp(sport, dport)
        ip = _ipv6(*v6, 6, len(l4)) + l4
        return _ETH + b"\x88\x64" + struct.pack("!BBHHH", 0x11, 0, 1 + i % 16, len(ip) + 2, 0x0057) + ip
    if layout == "ipip":
        l4 = _tcp(sport, dport)
        inner = _ipv4(*v4, 6, len(l4)) + l4
        return _ETH + b"\x08\x00" + _ipv4(bytes((192, 168, 20, 2)), bytes((192, 168, 20, 1)), 4, len(inner)) + inner
    if layout == "ip6ip6":
        l4 = _udp(sport, dport)
        inner = _ipv6(*v6, 17, len(l4)) + l4
        return _ETH + b"\x86\xdd" + _ipv6(*_V6_OUTER, 41, len(inner)) + inner
    l4 = _tcp(sport, dport)
    inner = _ipv6(*v6, 6, len(l4)) + l4
    return _ETH + b"\x81\x00" + struct.pack("!HH", 10, 0x86DD) + _ipv6(*_V6_OUTER, 41, len(inner)) + inner


def frames(n: int = FRAMES) -> list[bytes]:
    return [frame(i) for i in range(n)]


def write(path: str | Path, n: int = FRAMES) -> Path:
    """Write the capture (classic pcap, Ethernet) to *path* unless it is already there; returns the path."""
    from flowsim.kernel.capture import write_pcap

    path = Path(path)
    if not path.exists():
        tmp = path.with_suffix(".tmp")
        write_pcap(tmp, frames(n))
        tmp.replace(path)
    return path
