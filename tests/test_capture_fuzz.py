"""Property: the capture reader turns any bytes into frames or one CaptureError, never another exception (issue 15)."""

from __future__ import annotations

import struct
import tempfile
from pathlib import Path

from hypothesis import example, given, settings
from hypothesis import strategies as st
from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import CookedLinux, Ether
from scapy.utils import wrpcap, wrpcapng

from flowsim.errors import CaptureError
from flowsim.kernel.capture import Frame, read_capture

PACKETS = [Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / IP(src="10.0.0.1", dst="10.0.0.2") / TCP(),
           Ether() / IPv6(src="::1", dst="::2") / UDP() / b"payload",
           Ether() / IP() / IP() / UDP()]


def _files() -> list[bytes]:
    """Valid captures to mutate: pcap and pcapng by scapy, several link types, and a hand-built big-endian pcapng."""
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for n, (write, packets, linktype) in enumerate([
            (wrpcap, PACKETS, None), (wrpcapng, PACKETS, None), (wrpcap, [p[IP] for p in PACKETS[::2]], 101),
            (wrpcap, [CookedLinux(proto=0x800) / PACKETS[0][IP]], 113),
        ]):
            path = Path(tmp) / f"{n}.cap"
            write(str(path), packets, **({} if linktype is None else {"linktype": linktype}))
            out.append(path.read_bytes())

    def block(btype: int, body: bytes) -> bytes:
        body += bytes(-len(body) % 4)
        return struct.pack(">II", btype, len(body) + 12) + body + struct.pack(">I", len(body) + 12)

    data = bytes(PACKETS[1])
    out.append(block(0x0A0D0D0A, struct.pack(">IHHq", 0x1A2B3C4D, 1, 0, -1)) + block(1, struct.pack(">HHI", 1, 0, 64))
               + block(3, struct.pack(">I", len(data)) + data) + block(5, bytes(12))
               + block(6, struct.pack(">IIIII", 0, 0, 0, len(data), len(data)) + data))
    return out


VALID = _files()


def _blocks(data: bytes) -> list[tuple[str, int, bytes]] | None:
    """The (byte order, type, body) of each block of a valid pcapng file; None for a pcap file."""
    if data[:4] != b"\x0a\x0d\x0d\x0a":
        return None
    out, pos = [], 0
    while pos < len(data):
        endian = ">" if data[pos + 8:pos + 12] == b"\x1a\x2b\x3c\x4d" else out[-1][0] if out else "<"
        btype, n = struct.unpack(endian + "II", data[pos:pos + 8])
        out.append((endian, btype, data[pos + 8:pos + n - 4]))
        pos += n
    return out


@st.composite
def reframed(draw) -> bytes:
    """A valid pcapng file whose blocks are cut short, repeated or dropped, each framed with consistent lengths.

    Byte mutations rarely keep a block's two length fields in agreement; this
    reaches the fixed fields and packet data of every block type.
    """
    blocks = _blocks(draw(st.sampled_from([v for v in VALID if _blocks(v)])))
    assert blocks is not None
    out = b""
    for endian, btype, body in draw(st.lists(st.sampled_from(blocks), min_size=1, max_size=6)):
        if draw(st.booleans()):
            body = body[:draw(st.integers(0, len(body)))]
        body += bytes(-len(body) % 4)
        n = len(body) + 12
        out += struct.pack(endian + "II", btype, n) + body + struct.pack(endian + "I", n)
    return _shb(blocks) + out if draw(st.booleans()) else out


def _shb(blocks) -> bytes:
    endian, btype, body = blocks[0]
    return struct.pack(endian + "II", btype, len(body) + 12) + body + struct.pack(endian + "I", len(body) + 12)


@st.composite
def mutated(draw) -> bytes:
    """A valid capture with a few bytes overwritten, inserted or deleted, and perhaps cut short."""
    data = bytearray(draw(st.sampled_from(VALID)))
    for _ in range(draw(st.integers(1, 4))):
        pos = draw(st.integers(0, len(data)))
        kind = draw(st.sampled_from(["set", "insert", "delete", "word"]))
        if kind == "set" and pos < len(data):
            data[pos] = draw(st.integers(0, 255))
        elif kind == "insert":
            data[pos:pos] = draw(st.binary(min_size=1, max_size=8))
        elif kind == "delete":
            del data[pos:pos + draw(st.integers(1, 8))]
        elif kind == "word":  # a length field's worth: 0, tiny, huge
            data[pos:pos + 4] = struct.pack("<I", draw(st.sampled_from([0, 1, 3, 8, 12, 13, 0x7FFFFFFF, 0xFFFFFFFF])))
    if draw(st.booleans()):
        data = data[:draw(st.integers(0, len(data)))]
    return bytes(data)


def _read(data: bytes) -> list[Frame]:
    with tempfile.NamedTemporaryFile(suffix=".cap") as fh:
        fh.write(data)
        fh.flush()
        frames = []
        try:
            for frame in read_capture(fh.name):
                frames.append(frame)
        except CaptureError as exc:
            assert str(exc).startswith(f"{fh.name}: ") and "\n" not in str(exc)
        return frames


def test_valid_files_read():
    """Every seed file reads without an error (else the mutations would start from a broken file)."""
    for data in VALID:
        assert _read(data)


@settings(max_examples=200, deadline=None)
@given(st.one_of(st.binary(max_size=256), mutated(), reframed()))
@example(b"\n\r\r\n\x0c\x00\x00\x00M<+\x1a")  # a section header block of length 12: no room for its trailer
def test_any_bytes_give_frames_or_one_capture_error(data):
    """Any bytes, a mutated or reframed valid pcap/pcapng file: frames (Ethernet, numbered from 1) or one CaptureError."""
    frames = _read(data)
    assert [f.index for f in frames] == list(range(1, len(frames) + 1))
    assert all(isinstance(f.data, bytes) for f in frames)
