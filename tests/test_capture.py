"""Capture reading: pcap and pcapng, each link type, and clear errors for bad files."""

from __future__ import annotations

import struct

import pytest
from scapy.layers.inet import IP, TCP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import CookedLinux, CookedLinuxV2, Ether
from scapy.utils import PcapNgWriter, wrpcap

from flowsim.errors import CaptureError
from flowsim.kernel.capture import PcapWriter, ether_frame, read_capture, write_pcap

PKT = IP(src="10.0.0.1", dst="10.0.0.2") / TCP(sport=1, dport=2)


@pytest.mark.parametrize("linktype,layer", [
    (1, lambda: Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / PKT),
    (101, lambda: PKT),
    (228, lambda: PKT),
    (113, lambda: CookedLinux(proto=0x0800) / PKT),
    (276, lambda: CookedLinuxV2(proto=0x0800) / PKT),
])
@pytest.mark.parametrize("fmt", ["pcap", "pcapng"])
def test_link_types_become_ethernet(tmp_path, linktype, layer, fmt):
    """Every supported link type yields an Ethernet frame carrying the same IP packet."""
    path = tmp_path / f"x.{fmt}"
    if fmt == "pcap":
        wrpcap(str(path), [layer()], linktype=linktype)
    else:
        w = PcapNgWriter(str(path))
        w.linktype = linktype
        w.write(layer())
        w.close()
    (frame,) = list(read_capture(path))
    assert frame.linktype == linktype and frame.index == 1
    assert frame.data[12:14] == b"\x08\x00" and frame.data[14:] == bytes(PKT)


def test_writer_round_trip(tmp_path):
    """PcapWriter's files read back frame for frame."""
    frames = [bytes(Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / PKT), bytes(Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / PKT / b"x")]
    with PcapWriter(tmp_path / "w.pcap") as w:
        for i, f in enumerate(frames):
            w.write(f, ts=i * 0.5)
    assert [f.data for f in read_capture(tmp_path / "w.pcap")] == frames


@pytest.mark.parametrize("content,match", [
    (b"", "not a pcap or pcapng capture"),
    (b"hello world, not a capture", "not a pcap or pcapng capture"),
    (b"\xd4\xc3\xb2\xa1\x02\x00", "truncated pcap file header"),
])
def test_not_a_capture(tmp_path, content, match):
    """A file that is not a capture is one CaptureError naming the file."""
    path = tmp_path / "bad.pcap"
    path.write_bytes(content)
    with pytest.raises(CaptureError, match=match) as info:
        list(read_capture(path))
    assert str(path) in str(info.value)


def test_truncated_record_keeps_earlier_frames(tmp_path):
    """A truncated last record: the frames before it are still delivered, then the error."""
    path = tmp_path / "t.pcap"
    wrpcap(str(path), [Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / PKT, Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / PKT])
    path.write_bytes(path.read_bytes()[:-10])
    got = []
    with pytest.raises(CaptureError, match="truncated pcap record"):
        for f in read_capture(path):
            got.append(f)
    assert len(got) == 1


def test_unsupported_link_type(tmp_path):
    """An unknown link type names itself and the supported ones."""
    path = tmp_path / "u.pcap"
    wrpcap(str(path), [PKT], linktype=147)
    with pytest.raises(CaptureError, match="link type 147 is not supported"):
        list(read_capture(path))


def test_write_pcap_matches_scapy_and_reads_back(tmp_path):
    """write_pcap: scapy's default header (snaplen 65535), start + 1 µs per frame, frames read back unchanged."""
    from scapy.utils import PcapWriter as ScapyWriter

    frames = [ether_frame(bytes(PKT), b"\x02" * 6, b"\x04" * 6), ether_frame(bytes(IPv6(src="::1", dst="::2")))]
    assert write_pcap(tmp_path / "ours.pcap", frames) == 2
    ref = ScapyWriter(str(tmp_path / "ref.pcap"), linktype=1, sync=False)
    ref.write_header(None)
    for n, frame in enumerate(frames, 1):
        ref.write_packet(frame, sec=1_800_000_000, usec=n)
    ref.close()
    assert (tmp_path / "ours.pcap").read_bytes() == (tmp_path / "ref.pcap").read_bytes()
    got = list(read_capture(tmp_path / "ours.pcap"))
    assert [f.data for f in got] == frames and frames[1][12:14] == b"\x86\xdd"


def test_write_pcap_unwritable_path(tmp_path):
    """A capture that cannot be created is a CaptureError naming the path."""
    with pytest.raises(CaptureError, match="cannot write pcap"):
        write_pcap(tmp_path / "no" / "such" / "dir.pcap", [])


# ---------------------------------------------------------------- pcapng built by hand (draft-ietf-opsawg-pcapng)

ETH = bytes(Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / PKT)


def block(btype: int, body: bytes, endian: str = "<", trailer: int | None = None) -> bytes:
    """One pcapng block: type, total length, body padded to 32 bits, total length again."""
    body += bytes(-len(body) % 4)
    n = len(body) + 12
    return struct.pack(endian + "II", btype, n) + body + struct.pack(endian + "I", n if trailer is None else trailer)


def shb(endian: str = "<", major: int = 1) -> bytes:
    return block(0x0A0D0D0A, struct.pack(endian + "IHHq", 0x1A2B3C4D, major, 0, -1), endian)


def idb(linktype: int = 1, snaplen: int = 0, endian: str = "<") -> bytes:
    return block(1, struct.pack(endian + "HHI", linktype, 0, snaplen), endian)


def epb(data: bytes = ETH, iface: int = 0, caplen: int | None = None, endian: str = "<") -> bytes:
    caplen = len(data) if caplen is None else caplen
    return block(6, struct.pack(endian + "IIIII", iface, 0, 0, caplen, len(data)) + data, endian)


def spb(data: bytes = ETH, wirelen: int | None = None) -> bytes:
    return block(3, struct.pack("<I", len(data) if wirelen is None else wirelen) + data)


def read_all(tmp_path, content: bytes) -> tuple[list, CaptureError | None]:
    """The frames read before the error, and the error (None if the file was read to its end)."""
    path = tmp_path / "x.pcapng"
    path.write_bytes(content)
    got = []
    try:
        for frame in read_capture(path):
            got.append(frame)
    except CaptureError as exc:
        return got, exc
    return got, None


@pytest.mark.parametrize("content,frames", [
    (shb() + idb() + epb() + epb(ETH[:20]), [ETH, ETH[:20]]),
    (shb(">") + idb(endian=">") + epb(endian=">"), [ETH]),
    (shb() + idb() + block(4, b"") + block(5, bytes(12)) + block(0x0BAD, bytes(8)) + block(0x1234, b"") + epb(), [ETH]),
    (shb() + idb(snaplen=20) + spb(), [ETH[:20]]),
    (shb() + idb() + spb(), [ETH]),
    (shb() + idb(147) + idb() + epb(iface=1), [ETH]),
    (shb() + idb() + epb() + shb(">") + idb(endian=">") + epb(endian=">"), [ETH, ETH]),
])
def test_pcapng_blocks_read(tmp_path, content, frames):
    """Both byte orders, simple packet blocks cut to the snap length, skipped blocks, an unused odd link type, two sections."""
    got, err = read_all(tmp_path, content)
    assert err is None and [f.data for f in got] == frames


@pytest.mark.parametrize("content,frames_before,match", [
    (shb() + block(1, b"\x01\x00"), 0,
     "offset 28: pcapng interface description block body of 4 bytes is shorter than its fixed fields (expected at least 8)"),
    (shb() + idb() + block(3, b""), 0, "offset 48: pcapng simple packet block body of 0 bytes is shorter"),
    (shb() + idb() + epb() + block(6, bytes(16)), 1, "enhanced packet block body of 16 bytes is shorter"),
    (shb() + idb() + block(2, bytes(12)), 0, "pcapng packet block body of 12 bytes is shorter"),
    (shb() + block(5, bytes(8)), 0, "interface statistics block body of 8 bytes is shorter"),
    (shb() + block(0x0A, bytes(4)), 0, "decryption secrets block body of 4 bytes is shorter"),
    (block(0x0A0D0D0A, bytes.fromhex("4d3c2b1a")), 0, "offset 0: pcapng section header block body of 4 bytes"),
    (shb() + idb() + epb() + epb(caplen=len(ETH) + 100), 1,
     f"captured length {len(ETH) + 100} exceeds the block (expected at most {len(ETH) + 2})"),
    (shb() + idb() + spb(wirelen=1000), 0, "simple packet block captured length 1000 exceeds the block"),
    (shb() + idb() + epb() + struct.pack("<II", 6, 13) + bytes(5), 1, "bad pcapng block length 13 (expected a multiple of 4"),
    (shb() + struct.pack("<II", 6, 8), 0, "offset 28: bad pcapng block length 8"),
    (shb() + struct.pack("<II", 6, 0x7FFFFFFC), 0, "pcapng block length 2147483644 is not plausible"),
    (shb() + idb() + epb()[:-4] + struct.pack("<I", 12), 0, "at its start but 12 at its end"),
    (shb() + idb() + epb() + epb()[:-3], 1, "offset 136: truncated pcapng block"),
    (shb() + idb() + epb()[:5], 0, "truncated pcapng block header (5 of 8 bytes)"),
    (shb()[:10], 0, "offset 0: truncated pcapng section header (2 of 4 bytes)"),
    (shb()[:8] + b"ABCD" + shb()[12:], 0, "bad pcapng byte-order magic 41424344"),
    (shb(major=2), 0, "pcapng version 2.0 is not supported (expected 1.x)"),
    (shb() + idb() + epb(iface=1), 0, "packet block names interface 1, which is not described (expected below 1)"),
    (shb() + spb(), 0, "simple packet block before any interface description"),
    (shb() + idb(147) + epb(), 0, "offset 48: frame 1: link type 147 is not supported"),
    (shb() + idb() + shb() + epb(), 0, "offset 76: packet block names interface 0"),  # ids are per section
])
def test_bad_pcapng_is_one_capture_error(tmp_path, content, frames_before, match):
    """Each malformed block is one CaptureError naming the file, the block's offset and what was expected."""
    got, err = read_all(tmp_path, content)
    assert len(got) == frames_before and err is not None
    assert str(err).startswith(f"{tmp_path / 'x.pcapng'}: offset ") and match in str(err)


def test_pcap_record_of_absurd_length(tmp_path):
    """A classic pcap record header claiming gigabytes: one CaptureError, not an allocation."""
    path = tmp_path / "a.pcap"
    wrpcap(str(path), [Ether() / PKT])
    path.write_bytes(path.read_bytes() + struct.pack("<IIII", 0, 0, 0xFFFFFFF0, 60))
    got, err = read_all(tmp_path, path.read_bytes())
    assert len(got) == 1 and "pcap record length 4294967280 is not plausible" in str(err)
