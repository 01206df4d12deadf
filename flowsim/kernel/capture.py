"""Reading and writing captures: pcap and pcapng, with their link types.

A small reader of our own rather than scapy's: it never raises anything but
:class:`~flowsim.errors.CaptureError`, reads pcapng files whose interfaces have
different link types, and yields raw bytes without dissecting them.

Every frame is handed on as an Ethernet frame, the form a flowtable's
ingress device receives: raw IPv4/IPv6 (``LINKTYPE_RAW``, ``IPV4``, ``IPV6``)
and Linux cooked captures (``SLL``, ``SLL2``) get a synthetic Ethernet header
(zero MAC addresses) carrying their protocol.

Writing uses the classic pcap format (Ethernet link type), which tcpdump,
Wireshark and scapy all read: :class:`PcapWriter` for the simulator's
per-device captures, :func:`write_pcap` for the frames of a model run, with
fixed timestamps so the file is reproducible byte for byte.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import BinaryIO

import attrs

from flowsim.errors import CaptureError
from flowsim.kernel.headers import ETH_P_IP, ETH_P_IPV6

__all__ = ["Frame", "read_capture", "PcapWriter", "write_pcap", "ether_frame", "LINKTYPES"]

LINKTYPE_ETHERNET = 1
LINKTYPE_RAW = 101
LINKTYPE_LINUX_SLL = 113
LINKTYPE_IPV4 = 228
LINKTYPE_IPV6 = 229
LINKTYPE_LINUX_SLL2 = 276
# DLT_RAW's historical values on some platforms (12 on most BSDs, 14 on OpenBSD).
_RAW_ALIASES = {12, 14}

LINKTYPES = {
    LINKTYPE_ETHERNET: "ethernet", LINKTYPE_RAW: "raw", 12: "raw", 14: "raw",
    LINKTYPE_LINUX_SLL: "linux-sll", LINKTYPE_IPV4: "ipv4", LINKTYPE_IPV6: "ipv6",
    LINKTYPE_LINUX_SLL2: "linux-sll2",
}

_PCAP_MAGICS = {
    b"\xd4\xc3\xb2\xa1": "<", b"\xa1\xb2\xc3\xd4": ">",  # microseconds
    b"\x4d\x3c\xb2\xa1": "<", b"\xa1\xb2\x3c\x4d": ">",  # nanoseconds
}
_PCAPNG_SHB = 0x0A0D0D0A


@attrs.frozen
class Frame:
    """One captured frame, as an Ethernet frame, with where it came from."""

    index: int  # 1-based, as tcpdump and Wireshark number frames
    data: bytes  # Ethernet frame (synthesised header for non-Ethernet link types)
    linktype: int
    wirelen: int


def ether_frame(packet: bytes, dst: bytes = bytes(6), src: bytes = bytes(6), proto: int | None = None) -> bytes:
    """An IP packet behind an Ethernet header (``eth_header``); the ethertype from the version nibble unless given."""
    if proto is None:
        proto = ETH_P_IPV6 if packet and packet[0] >> 4 == 6 else ETH_P_IP
    return dst + src + proto.to_bytes(2, "big") + packet


def _to_ethernet(data: bytes, linktype: int) -> bytes | None:
    """The frame as an Ethernet device would receive it, or None if the link type is unknown."""
    if linktype == LINKTYPE_ETHERNET:
        return data
    if linktype == LINKTYPE_IPV4:
        return ether_frame(data, proto=ETH_P_IP)
    if linktype == LINKTYPE_IPV6:
        return ether_frame(data, proto=ETH_P_IPV6)
    if linktype in (LINKTYPE_RAW, *_RAW_ALIASES):
        return ether_frame(data)
    if linktype == LINKTYPE_LINUX_SLL:
        if len(data) < 16:
            return bytes(12) + data[14:16].rjust(2, b"\0")
        return bytes(12) + data[14:16] + data[16:]
    if linktype == LINKTYPE_LINUX_SLL2:
        if len(data) < 20:
            return bytes(12) + data[0:2].rjust(2, b"\0")
        return bytes(12) + data[0:2] + data[20:]
    return None


def _read_exact(fh: BinaryIO, n: int, path: str, what: str) -> bytes:
    data = fh.read(n)
    if len(data) != n:
        raise CaptureError(f"{path}: truncated {what} ({len(data)} of {n} bytes)")
    return data


def _pcap_frames(fh: BinaryIO, path: str, endian: str) -> Iterator[tuple[bytes, int, int]]:
    header = _read_exact(fh, 20, path, "pcap file header")
    linktype = struct.unpack(endian + "HHiIII", header)[5] & 0x0FFFFFFF
    while True:
        rec = fh.read(16)
        if not rec:
            return
        if len(rec) != 16:
            raise CaptureError(f"{path}: truncated pcap record header")
        _sec, _frac, caplen, wirelen = struct.unpack(endian + "IIII", rec)
        if caplen > 0x4000000:
            raise CaptureError(f"{path}: record length {caplen} is not plausible")
        yield _read_exact(fh, caplen, path, "pcap record"), linktype, wirelen


def _pcapng_frames(fh: BinaryIO, path: str) -> Iterator[tuple[bytes, int, int]]:
    endian = "<"
    linktypes: list[int] = []
    while True:
        head = fh.read(8)
        if not head:
            return
        if len(head) != 8:
            raise CaptureError(f"{path}: truncated pcapng block header")
        btype = struct.unpack(endian + "I", head[:4])[0]
        if btype == _PCAPNG_SHB:
            bom = _read_exact(fh, 4, path, "pcapng section header")
            if bom == b"\x4d\x3c\x2b\x1a":
                endian = "<"
            elif bom == b"\x1a\x2b\x3c\x4d":
                endian = ">"
            else:
                raise CaptureError(f"{path}: bad pcapng byte-order magic")
            blen = struct.unpack(endian + "I", head[4:])[0]
            if blen < 28 or blen % 4:
                raise CaptureError(f"{path}: bad pcapng section header length {blen}")
            _read_exact(fh, blen - 12, path, "pcapng section header")
            linktypes = []
            continue
        blen = struct.unpack(endian + "I", head[4:])[0]
        if blen < 12 or blen % 4:
            raise CaptureError(f"{path}: bad pcapng block length {blen}")
        body = _read_exact(fh, blen - 8, path, "pcapng block")[:-4]
        if btype == 1:  # Interface Description Block
            linktypes.append(struct.unpack(endian + "H", body[:2])[0])
        elif btype in (6, 2):  # Enhanced Packet Block / obsolete Packet Block
            if len(body) < 20:
                raise CaptureError(f"{path}: truncated pcapng packet block")
            if btype == 6:
                iface, _hi, _lo, caplen, wirelen = struct.unpack(endian + "IIIII", body[:20])
            else:
                iface, _drops, _hi, _lo, caplen, wirelen = struct.unpack(endian + "HHIIII", body[:20])
            if iface >= len(linktypes):
                raise CaptureError(f"{path}: packet block names interface {iface}, which is not described")
            yield body[20:20 + caplen], linktypes[iface], wirelen
        elif btype == 3:  # Simple Packet Block: interface 0
            if not linktypes:
                raise CaptureError(f"{path}: simple packet block before any interface")
            wirelen = struct.unpack(endian + "I", body[:4])[0]
            yield body[4:4 + wirelen], linktypes[0], wirelen
        # other blocks (name resolution, statistics, custom) carry no frames


def read_capture(path: str | Path) -> Iterator[Frame]:
    """Yield the frames of a pcap or pcapng file as Ethernet frames.

    Raises :class:`CaptureError` for a file that is not a capture, a link
    type flowsim cannot turn into Ethernet, or a truncated record (after
    yielding the frames before it).
    """
    path = str(path)
    try:
        # not a `with` around the try: only open() may raise the "cannot open" error;
        # the `with fh:` below closes it
        fh = open(path, "rb")  # noqa: SIM115
    except OSError as exc:
        raise CaptureError(f"{path}: cannot open: {exc.strerror}") from None
    with fh:
        magic = fh.read(4)
        if magic in _PCAP_MAGICS:
            frames = _pcap_frames(fh, path, _PCAP_MAGICS[magic])
        elif len(magic) == 4 and struct.unpack("<I", magic)[0] == _PCAPNG_SHB:
            fh.seek(0)
            frames = _pcapng_frames(fh, path)
        else:
            raise CaptureError(f"{path}: not a pcap or pcapng capture (magic {magic.hex() or 'empty'})")
        for index, (data, linktype, wirelen) in enumerate(frames, 1):
            frame = _to_ethernet(data, linktype)
            if frame is None:
                raise CaptureError(f"{path}: frame {index}: link type {linktype} is not supported "
                                   f"(supported: {', '.join(sorted(set(LINKTYPES.values())))})")
            yield Frame(index, frame, linktype, wirelen)


class PcapWriter:
    """Write Ethernet frames to a classic pcap file (microsecond timestamps)."""

    def __init__(self, path: str | Path, snaplen: int = 262144):
        # the writer owns the file for its lifetime (frames arrive one by one during a run);
        # close() / the context manager closes it
        self._fh = open(path, "wb")  # noqa: SIM115
        self._fh.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, snaplen, LINKTYPE_ETHERNET))

    def write(self, frame: bytes, ts: float = 0.0) -> None:
        sec = int(ts)
        usec = int(round((ts - sec) * 1_000_000))
        self._fh.write(struct.pack("<IIII", sec, usec, len(frame), len(frame)))
        self._fh.write(frame)

    def close(self) -> None:
        self._fh.close()

    def __enter__(self) -> PcapWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def write_pcap(path: str | Path, frames: Iterable[bytes], start: int = 1_800_000_000) -> int:
    """Write Ethernet *frames* to a pcap file with fixed timestamps: *start* s + 1 µs per frame.

    The header is the one tcpdump and scapy write by default (snaplen
    65535), so a run's capture is reproducible byte for byte.  Returns the
    number of frames written; a file that cannot be created is a
    :class:`CaptureError`.
    """
    try:
        writer = PcapWriter(path, snaplen=0xFFFF)
    except OSError as exc:
        raise CaptureError(f"cannot write pcap {str(path)!r}: {exc.strerror}") from None
    n = 0
    with writer:
        for n, frame in enumerate(frames, 1):
            writer.write(frame, start + n / 1_000_000)
    return n
