"""Capture reading: pcap and pcapng, each link type, and clear errors for bad files."""

from __future__ import annotations

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
