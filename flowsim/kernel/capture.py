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
:class:`PcapngWriter` writes one pcapng for a whole run: an interface per
device with the link type libpcap gives that device type
(:func:`device_linktype`), the direction, a packet id and a comment per frame.
"""

from __future__ import annotations

import io
import mmap
import struct
from collections.abc import Iterable, Iterator
from itertools import chain
from pathlib import Path
from typing import BinaryIO

import attrs

from flowsim.errors import CaptureError
from flowsim.kernel.headers import ETH_P_IP, ETH_P_IPV6

__all__ = ["Frame", "INBOUND", "OUTBOUND", "read_capture", "read_frames",
           "PcapWriter", "PcapngWriter", "write_pcap", "ether_frame", "LINKTYPES",
           "device_linktype"]

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
_PCAP_NANO = {b"\x4d\x3c\xb2\xa1", b"\xa1\xb2\x3c\x4d"}
_PCAPNG_SHB = 0x0A0D0D0A


#: :attr:`Frame.direction` values: the capturing interface received the frame, or sent it
INBOUND, OUTBOUND = "inbound", "outbound"


@attrs.frozen
class Frame:
    """One captured frame, as an Ethernet frame, with where it came from.

    ``ts`` is the capture's timestamp in seconds (pcap: seconds and micro- or
    nanoseconds; pcapng: the interface's ``if_tsresol`` and ``if_tsoffset``;
    None for a simple packet block, which has none).  ``direction`` is
    :data:`INBOUND` or :data:`OUTBOUND` when the capture records it (pcapng
    ``epb_flags`` bits 0-1; a Linux cooked header's packet type, ``PACKET_OUTGOING``
    or not), else None (classic pcap of Ethernet or raw IP).  ``interface`` is the
    pcapng interface's ``if_name`` when it has one.
    """

    index: int  # 1-based, as tcpdump and Wireshark number frames
    data: bytes  # Ethernet frame (synthesised header for non-Ethernet link types)
    linktype: int
    wirelen: int
    ts: float | None = None
    direction: str | None = None
    interface: str | None = None


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


def _sll_direction(data: bytes, linktype: int) -> str | None:
    """A Linux cooked header's packet type (``sll_pkttype``): PACKET_OUTGOING (4) was sent, the others received."""
    if linktype == LINKTYPE_LINUX_SLL2:  # protocol, reserved, ifindex, hatype, then the 1-byte packet type
        if len(data) < 11:
            return None
        pkttype = data[10]
    else:  # the 2-byte packet type first
        if len(data) < 2:
            return None
        pkttype = struct.unpack_from("!H", data)[0]
    return OUTBOUND if pkttype == _SLL_OUTGOING else INBOUND


# libpcap refuses blocks larger than this (sf-pcapng.c, MAX_BLOCKSIZE_MAX); a length
# above it is a corrupt header, not a frame worth allocating for.
_MAX_BLOCK = 16 * 1024 * 1024
# the classic format's record limit (libpcap's largest snapshot length is 256 KiB; be generous)
_MAX_RECORD = 64 * 1024 * 1024

# pcapng block types (draft-ietf-opsawg-pcapng, "Block Types") with the size of their
# fixed fields: a body shorter than that is corrupt, whether or not flowsim reads the block.
_SHB, _IDB, _PB, _SPB, _NRB, _ISB, _EPB, _DSB = _PCAPNG_SHB, 1, 2, 3, 4, 5, 6, 0x0A
_BLOCKS = {
    _SHB: ("section header block", 16),  # byte-order magic, major, minor, section length
    _IDB: ("interface description block", 8),  # link type, reserved, snap length
    _PB: ("packet block", 20),  # interface id, drops count, timestamp (2), captured and original length
    _SPB: ("simple packet block", 4),  # original packet length
    _NRB: ("name resolution block", 0),
    _ISB: ("interface statistics block", 12),  # interface id, timestamp (2)
    _EPB: ("enhanced packet block", 20),  # interface id, timestamp (2), captured and original length
    _DSB: ("decryption secrets block", 8),  # secrets type, secrets length
    0x00000BAD: ("custom block", 4),  # private enterprise number
    0x40000BAD: ("custom block", 4),
}
_BOM = {b"\x4d\x3c\x2b\x1a": "<", b"\x1a\x2b\x3c\x4d": ">"}

# (frame data, link type, original length, file offset of its record or block,
#  timestamp in seconds or None, direction or None, interface name or None)
_Raw = tuple[bytes, int, int, int, float | None, str | None, str | None]


def _read_exact(fh: BinaryIO, n: int, path: str, offset: int, what: str) -> bytes:
    data = fh.read(n)
    if len(data) != n:
        raise CaptureError(f"{path}: offset {offset}: truncated {what} ({len(data)} of {n} bytes)")
    return data


def _pcap_frames(fh: BinaryIO, path: str, endian: str, nano: bool) -> Iterator[_Raw]:
    """The records of a classic pcap as :data:`_Raw` tuples."""
    linktype = _pcap_linktype(fh, path, endian)
    # the records are read from one buffer (a memory map of the file when it has one): a slice per frame
    # instead of two reads, which is most of the reader's cost on a large capture
    data = _file_buffer(fh)
    end = len(data)
    record = struct.Struct(endian + "IIII").unpack_from
    scale = 1e9 if nano else 1e6
    offset = 24
    while offset < end:
        if offset + 16 > end:
            raise CaptureError(f"{path}: offset {offset}: truncated pcap record header ({end - offset} of 16 bytes)")
        sec, frac, caplen, wirelen = record(data, offset)
        if caplen > _MAX_RECORD:
            raise _implausible(path, offset, caplen)
        start = offset + 16
        stop = start + caplen
        if stop > end:
            raise CaptureError(f"{path}: offset {offset}: truncated pcap record ({end - start} of {caplen} bytes)")
        yield data[start:stop], linktype, wirelen, offset, sec + frac / scale, None, None
        offset = stop


def _pcap_linktype(fh: BinaryIO, path: str, endian: str) -> int:
    header = _read_exact(fh, 20, path, 4, "pcap file header")
    return struct.unpack(endian + "HHiIII", header)[5] & 0x0FFFFFFF  # the top bits carry FCS flags


def _implausible(path: str, offset: int, caplen: int) -> CaptureError:
    return CaptureError(f"{path}: offset {offset}: pcap record length {caplen} is not plausible "
                        f"(expected at most {_MAX_RECORD})")


_BATCH = range(1024)  # frames per list of _pcap_batches


def _pcap_batches(fh: BinaryIO, path: str, endian: str) -> Iterator[list[bytes]]:
    """The records of a classic pcap as Ethernet frames, in lists of up to 1024 (:func:`read_frames` chains
    them: a list iterator per frame, not a generator's frame), with :func:`_pcap_frames`'s checks and errors:
    the list of the frames before a bad record comes first, then the error; the link type's error at the
    first record, as :func:`read_capture`."""
    linktype = _pcap_linktype(fh, path, endian)
    convert = linktype != LINKTYPE_ETHERNET
    data = _file_buffer(fh)
    end = len(data)
    caplen_at = struct.Struct(endian + "8xI").unpack_from  # the captured length of the record at an offset
    max_record = _MAX_RECORD
    offset = 24
    error = None
    while offset < end and error is None:
        batch: list[bytes] = []
        append = batch.append
        for _ in _BATCH:
            start = offset + 16
            if start > end:  # the end of the file (offset == end), or a truncated record header
                if offset < end:
                    error = CaptureError(f"{path}: offset {offset}: truncated pcap record header "
                                         f"({end - offset} of 16 bytes)")
                break
            caplen = caplen_at(data, offset)[0]
            stop = start + caplen
            if stop > end or caplen > max_record:
                error = (_implausible(path, offset, caplen) if caplen > max_record else
                         CaptureError(f"{path}: offset {offset}: truncated pcap record "
                                      f"({end - start} of {caplen} bytes)"))
                break
            append(data[start:stop])
            offset = stop
        if convert and batch:
            frames = [_to_ethernet(frame, linktype) for frame in batch]
            if frames[0] is None:  # the link type is the file's: the first record fails
                raise _unsupported(path, 24, 1, linktype)
            batch = frames  # type: ignore[assignment]  # None only for an unknown link type, refused above
        yield batch
    if error is not None:
        raise error


def _file_buffer(fh: BinaryIO):
    """The rest of *fh* from offset 24 (after a pcap file header), as a buffer whose slices are bytes:
    a read-only memory map of a regular file, else everything read at once."""
    try:
        mapped = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError, io.UnsupportedOperation):  # empty file, pipe, or no file descriptor
        return b"\0" * 24 + fh.read()
    return mapped


def _block_error(path: str, offset: int, text: str) -> CaptureError:
    return CaptureError(f"{path}: offset {offset}: {text}")


def _pcapng_block(fh: BinaryIO, path: str, offset: int, endian: str) -> tuple[int, bytes, str] | None:
    """The next block as (type, body, byte order), its trailing length checked; None at the end of the file.

    A section header sets the byte order of its section: its own length is
    read in the order its byte-order magic gives.
    """
    head = fh.read(8)
    if not head:
        return None
    if len(head) != 8:
        raise _block_error(path, offset, f"truncated pcapng block header ({len(head)} of 8 bytes)")
    btype = struct.unpack(endian + "I", head[:4])[0]
    if btype == _SHB:
        bom = _read_exact(fh, 4, path, offset, "pcapng section header")
        if bom not in _BOM:
            raise _block_error(path, offset, f"bad pcapng byte-order magic {bom.hex()} "
                                             "(expected 1a2b3c4d in either byte order)")
        endian = _BOM[bom]
    blen = struct.unpack(endian + "I", head[4:])[0]
    least = 16 if btype == _SHB else 12  # type, length, (byte-order magic,) trailing length
    if blen < least or blen % 4:
        raise _block_error(path, offset, f"bad pcapng block length {blen} "
                                         f"(expected a multiple of 4, at least {least})")
    if blen > _MAX_BLOCK:
        raise _block_error(path, offset, f"pcapng block length {blen} is not plausible "
                                         f"(expected at most {_MAX_BLOCK})")
    rest = _read_exact(fh, blen - 8 - (4 if btype == _SHB else 0), path, offset, "pcapng block")
    body = (bom if btype == _SHB else b"") + rest[:-4]
    trailer = struct.unpack(endian + "I", rest[-4:])[0]
    if trailer != blen:
        raise _block_error(path, offset, f"pcapng block length {blen} at its start but {trailer} at its end "
                                         "(expected the same)")
    name, fixed = _BLOCKS.get(btype, ("block", 0))
    if len(body) < fixed:
        raise _block_error(path, offset, f"pcapng {name} body of {len(body)} bytes is shorter than "
                                         f"its fixed fields (expected at least {fixed})")
    return btype, body, endian


def _packet_data(path: str, offset: int, body: bytes, start: int, caplen: int, name: str) -> bytes:
    """*caplen* bytes of packet data at *start* of a block body, which must hold them."""
    room = len(body) - start
    if caplen > room:
        raise _block_error(path, offset, f"pcapng {name} captured length {caplen} exceeds the block "
                                         f"(expected at most {room})")
    return body[start:start + caplen]


def _options(body: bytes, endian: str) -> dict[int, bytes]:
    """The options of a pcapng block (the first value of each code), read leniently: an option that does
    not fit ends the list, as if it were ``opt_endofopt`` (a frame is never refused for its options)."""
    out: dict[int, bytes] = {}
    at = 0
    while at + 4 <= len(body):
        code, n = struct.unpack_from(endian + "HH", body, at)
        if code == 0 or at + 4 + n > len(body):
            break
        out.setdefault(code, body[at + 4:at + 4 + n])
        at += 4 + n + (-n % 4)
    return out


def _tsresol(value: bytes | None) -> float:
    """Seconds per timestamp unit from ``if_tsresol`` (default microseconds; bit 7: a power of two)."""
    if not value:
        return 1e-6
    v = value[0]
    return 2.0 ** -(v & 0x7F) if v & 0x80 else 10.0 ** -min(v, 30)


def _epb_direction(options: dict[int, bytes], endian: str) -> str | None:
    """``epb_flags`` bits 0-1: 01 inbound, 10 outbound, 00 (or no flags) unknown."""
    flags = options.get(_EPB_FLAGS)
    if flags is None or len(flags) != 4:
        return None
    return {1: INBOUND, 2: OUTBOUND}.get(struct.unpack(endian + "I", flags)[0] & 3)


def _pcapng_frames(fh: BinaryIO, path: str) -> Iterator[_Raw]:
    endian = "<"
    # (link type, snap length, seconds per timestamp unit, if_tsoffset, if_name) per interface id of the section
    interfaces: list[tuple[int, int, float, int, str | None]] = []
    offset = 0
    while (block := _pcapng_block(fh, path, offset, endian)) is not None:
        btype, body, endian = block
        here, offset = offset, offset + len(body) + 12
        if btype == _SHB:
            major, minor = struct.unpack(endian + "HH", body[4:8])
            if major != 1:
                raise _block_error(path, here, f"pcapng version {major}.{minor} is not supported (expected 1.x)")
            interfaces = []  # interface ids are per section
        elif btype == _IDB:
            linktype, _reserved, snaplen = struct.unpack(endian + "HHI", body[:8])
            opts = _options(body[8:], endian)
            tsoffset = opts.get(_IF_TSOFFSET, b"")
            raw_name = opts.get(_IF_NAME)
            interfaces.append((linktype, snaplen, _tsresol(opts.get(_IF_TSRESOL)),
                               struct.unpack(endian + "q", tsoffset)[0] if len(tsoffset) == 8 else 0,
                               raw_name.decode("utf-8", "replace") if raw_name is not None else None))
        elif btype in (_EPB, _PB):
            if btype == _EPB:
                iface, hi, lo, caplen, wirelen = struct.unpack(endian + "IIIII", body[:20])
            else:
                iface, _drops, hi, lo, caplen, wirelen = struct.unpack(endian + "HHIIII", body[:20])
            if iface >= len(interfaces):
                raise _block_error(path, here, f"packet block names interface {iface}, which is not described "
                                               f"(expected below {len(interfaces)})")
            data = _packet_data(path, here, body, 20, caplen, _BLOCKS[btype][0])
            linktype, _snaplen, unit, tsoffset, name = interfaces[iface]
            direction = None
            if btype == _EPB:
                direction = _epb_direction(_options(body[20 + caplen + (-caplen % 4):], endian), endian)
            yield data, linktype, wirelen, here, tsoffset + ((hi << 32) | lo) * unit, direction, name
        elif btype == _SPB:
            if not interfaces:
                raise _block_error(path, here, "simple packet block before any interface description "
                                               "(expected interface 0 to be described)")
            linktype, snaplen, _unit, _tsoffset, name = interfaces[0]
            wirelen = struct.unpack(endian + "I", body[:4])[0]
            # the captured length is implicit: the original length, cut to the snap length (0: none)
            caplen = min(wirelen, snaplen) if snaplen else wirelen
            yield (_packet_data(path, here, body, 4, caplen, "simple packet block"), linktype, wirelen, here,
                   None, None, name)
        # other blocks (name resolution, statistics, secrets, custom) carry no frames


def _pcapng_ether(fh: BinaryIO, path: str) -> Iterator[bytes]:
    """The frames of a pcapng as Ethernet frames."""
    for index, (data, linktype, _wirelen, offset, _ts, _direction, _name) in enumerate(_pcapng_frames(fh, path), 1):
        frame = data if linktype == LINKTYPE_ETHERNET else _to_ethernet(data, linktype)
        if frame is None:
            raise _unsupported(path, offset, index, linktype)
        yield frame


def _raw_frames(path: str, frames_only: bool = False) -> Iterator:
    """The records of a pcap or pcapng file, as they are stored (see :func:`read_capture` for the errors),
    or with *frames_only* iterables of its Ethernet frames, in order (:func:`read_frames` chains them)."""
    try:
        # not a `with` around the try: only open() may raise the "cannot open" error;
        # the `with fh:` below closes it
        fh = open(path, "rb")  # noqa: SIM115
    except OSError as exc:
        raise CaptureError(f"{path}: cannot open: {exc.strerror}") from None
    with fh:
        try:
            magic = fh.read(4)
        except OSError as exc:  # a directory, or an unreadable device
            raise CaptureError(f"{path}: cannot read: {exc.strerror}") from None
        if magic in _PCAP_MAGICS:
            if frames_only:
                yield from _pcap_batches(fh, path, _PCAP_MAGICS[magic])
            else:
                yield from _pcap_frames(fh, path, _PCAP_MAGICS[magic], magic in _PCAP_NANO)
        elif len(magic) == 4 and struct.unpack("<I", magic)[0] == _PCAPNG_SHB:
            fh.seek(0)
            if frames_only:
                yield _pcapng_ether(fh, path)  # one iterable of all the frames, read while the file is open
            else:
                yield from _pcapng_frames(fh, path)
        else:
            raise CaptureError(f"{path}: not a pcap or pcapng capture (magic {magic.hex() or 'empty'})")


def _unsupported(path: str, offset: int, index: int, linktype: int) -> CaptureError:
    return CaptureError(f"{path}: offset {offset}: frame {index}: link type {linktype} is not supported "
                        f"(expected one of: {', '.join(sorted(set(LINKTYPES.values())))})")


def read_capture(path: str | Path) -> Iterator[Frame]:
    """Yield the frames of a pcap or pcapng file as Ethernet frames.

    Raises one :class:`CaptureError` naming the file, the offset of the bad
    record or block and what was expected, for a file that is not a capture,
    a link type flowsim cannot turn into Ethernet, or a truncated or
    malformed record (after yielding the frames before it).
    """
    path = str(path)
    for index, (data, linktype, wirelen, offset, ts, direction, name) in enumerate(_raw_frames(path), 1):
        frame = _to_ethernet(data, linktype)
        if frame is None:
            raise _unsupported(path, offset, index, linktype)
        if direction is None and linktype in (LINKTYPE_LINUX_SLL, LINKTYPE_LINUX_SLL2):
            direction = _sll_direction(data, linktype)
        yield Frame(index, frame, linktype, wirelen, ts, direction, name)


def read_frames(path: str | Path) -> Iterator[bytes]:
    """The frames of :func:`read_capture` as Ethernet frames only (the *n*-th yielded is frame *n*), with
    the same errors at the same frame: for a consumer that needs nothing else (``flowsim tuple``), without
    a :class:`Frame` or a record tuple per frame."""
    return chain.from_iterable(_raw_frames(str(path), frames_only=True))


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


# libpcap's map_arphrd_to_dlt (pcap-linux.c) for the simulator's device link types, as tcpdump
# recorded them in the conformance guest (Debian 12's libpcap, Linux 7.2.13): Ethernet-like
# devices (veth, bridge, vlan, macvlan, dummy, loopback) capture as Ethernet; ARPHRD_TUNNEL
# (ipip) and ARPHRD_NONE (tun, wireguard) as raw IP; ARPHRD_TUNNEL6 (ip6tnl), PPP and GRE
# devices in Linux cooked mode (SLL: packet type, ARPHRD, no link-layer address, protocol),
# libpcap's choice for the types it does not map to a link type of their own.
_DEVICE_LINKTYPES = {"tunnel": LINKTYPE_RAW, "tunnel6": LINKTYPE_LINUX_SLL, "none": LINKTYPE_RAW,
                     "ppp": LINKTYPE_LINUX_SLL, "ipgre": LINKTYPE_LINUX_SLL}
_ARPHRD = {"tunnel6": 769, "ppp": 512, "ipgre": 778}  # the hardware type field of a cooked header
_SLL_HOST, _SLL_OUTGOING = 0, 4


def device_linktype(link_type: str) -> int:
    """The pcap link type of a device whose ``link_type`` is *link_type* (``ether``, ``tunnel6`` …)."""
    return _DEVICE_LINKTYPES.get(link_type, LINKTYPE_ETHERNET)


def _from_ethernet(frame: bytes, linktype: int, arphrd: int, outbound: bool) -> bytes:
    """The frame as a capture of *linktype* holds it (the inverse of :func:`_to_ethernet`).

    The simulator hands L3 devices' frames on behind a synthetic Ethernet
    header (zero MACs, the protocol): raw IP drops it, a cooked header replaces it.
    """
    if linktype == LINKTYPE_RAW:
        return frame[14:]
    if linktype == LINKTYPE_LINUX_SLL:
        return (struct.pack("!HHH8s", _SLL_OUTGOING if outbound else _SLL_HOST, arphrd, 0, b"")
                + frame[12:14] + frame[14:])
    return frame


def _option(code: int, value: bytes) -> bytes:
    return struct.pack("<HH", code, len(value)) + value + bytes(-len(value) % 4)


def _block(btype: int, body: bytes) -> bytes:
    body += bytes(-len(body) % 4)
    n = len(body) + 12
    return struct.pack("<II", btype, n) + body + struct.pack("<I", n)


_OPT_COMMENT, _IF_NAME, _IF_TSRESOL, _IF_TSOFFSET, _SHB_USERAPPL = 1, 2, 9, 14, 4
_EPB_FLAGS, _EPB_PACKETID = 2, 5
_EPB_INBOUND, _EPB_OUTBOUND = 1, 2
_END_OF_OPT = bytes(4)


class PcapngWriter:
    """Write a run's frames to one pcapng file (draft-ietf-opsawg-pcapng), all devices in one section.

    :meth:`interface` describes a device once (``if_name``, its link type,
    microsecond timestamps); :meth:`write` appends an enhanced packet block
    with the direction (``epb_flags``), a packet id (``epb_packetid``) and a
    comment (``opt_comment``) when given.  Frames are Ethernet frames as the
    simulator captures them; those of raw-IP and cooked interfaces are
    converted to their link type.
    """

    def __init__(self, path: str | Path, snaplen: int = 262144, application: str = "flowsim"):
        # the writer owns the file for its lifetime; close() / the context manager closes it
        try:
            self._fh = open(path, "wb")  # noqa: SIM115
        except OSError as exc:
            raise CaptureError(f"cannot write pcapng {str(path)!r}: {exc.strerror}") from None
        self.snaplen = snaplen
        self._ifaces: list[tuple[int, int]] = []  # (link type, ARPHRD for cooked headers) per interface id
        options = _option(_SHB_USERAPPL, application.encode()) + _END_OF_OPT
        # byte-order magic, version 1.0, section length unknown (-1)
        self._fh.write(_block(_PCAPNG_SHB, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1) + options))

    def interface(self, name: str, linktype: int = LINKTYPE_ETHERNET, arphrd: int = 0) -> int:
        """Describe an interface (an IDB named *name*); returns its interface id."""
        options = _option(_IF_NAME, name.encode()) + _option(_IF_TSRESOL, bytes([6])) + _END_OF_OPT
        self._fh.write(_block(_IDB, struct.pack("<HHI", linktype, 0, self.snaplen) + options))
        self._ifaces.append((linktype, arphrd))
        return len(self._ifaces) - 1

    def device(self, name: str, link_type: str) -> int:
        """Describe a simulated device (``link_type`` as the device has it); returns its interface id."""
        return self.interface(name, device_linktype(link_type), _ARPHRD.get(link_type, 0))

    def write(self, iface: int, frame: bytes, ts: float = 0.0, *, outbound: bool | None = None,
              packetid: int | None = None, comment: str | None = None) -> None:
        """One enhanced packet block: *frame* (Ethernet) on interface *iface* at *ts* seconds."""
        linktype, arphrd = self._ifaces[iface]
        data = _from_ethernet(frame, linktype, arphrd, bool(outbound))
        usec = int(round(ts * 1_000_000))
        options = b""
        if comment:
            options += _option(_OPT_COMMENT, comment.encode())
        if outbound is not None:
            options += _option(_EPB_FLAGS, struct.pack("<I", _EPB_OUTBOUND if outbound else _EPB_INBOUND))
        if packetid is not None:
            options += _option(_EPB_PACKETID, struct.pack("<Q", packetid))
        if options:
            options += _END_OF_OPT
        caplen = min(len(data), self.snaplen)
        body = struct.pack("<IIIII", iface, usec >> 32, usec & 0xFFFFFFFF, caplen, len(data))
        self._fh.write(_block(_EPB, body + data[:caplen] + bytes(-caplen % 4) + options))

    def close(self) -> None:
        self._fh.close()

    def __enter__(self) -> PcapngWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
