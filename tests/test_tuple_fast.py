"""The one parser of the flowtable hook (flowsim/kernel/flowtable/tuple.py) against the step-by-step
transcription it replaced (tests/tuple_reference.py), on every frame of the corpus in tests/data and on
structured random stacks (VLAN / QinQ / 802.1AD / PPPoE / IPIP / IP6IP6 / 4in6 / 6in4 / extension headers,
built by tests/frames.py, then cut), under every profile, every flowtable family, with and without
rx-vlan-offload and at every linear length.

Equal means everything a caller can see: the tuple, the reason id and its detail, the hook, every field of
nf_flowtable_ctx (also when the parse failed), and what the parse did to the skb (its linear area and the
cost counters of pskb_may_pull / skb_header_pointer).  The frame entry (``flow_tuple_from_frame``, what
``flowsim tuple`` runs) must give the skb entry's answer for the whole frame.
"""

from __future__ import annotations

import struct
import sys
from pathlib import Path

import pytest
from frames import frames
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tuple_reference import reference_tuple_from_skb

from flowsim.kernel.capture import read_capture
from flowsim.kernel.flowtable.tuple import HOOKS, flow_tuple_from_frame, flow_tuple_from_skb
from flowsim.kernel.skb import skb_from_frame
from flowsim.profiles import PROFILES

DATA = Path(__file__).parent / "data"
CORPUS = sorted(DATA.rglob("*.pcap")) + sorted(DATA.rglob("*.pcapng"))
BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def _skb_state(skb) -> tuple:
    return skb.data, skb.linear_end, len(skb.buf), skb.copies, skb.reallocs, skb.bytes_copied, skb.pull_bugs


def _observed(res, skb) -> tuple:
    return res.tuple, res.reason, res.detail, res.hook, res.ctx, _skb_state(skb)


def assert_same(frame: bytes, pname: str, family: str, offload: bool, headlen: int | None) -> None:
    """The parser and the reference agree on *frame*; so does the frame entry when the whole frame is linear."""
    profile = PROFILES[pname]
    fast_skb = skb_from_frame(frame, iif=6, headlen=headlen, rx_vlan_offload=offload)
    ref_skb = skb_from_frame(frame, iif=6, headlen=headlen, rx_vlan_offload=offload)
    if fast_skb is None:
        assert ref_skb is None
        if headlen is None:
            assert flow_tuple_from_frame(frame, 6, family, profile) is None
        return
    fast = flow_tuple_from_skb(fast_skb, iifidx=6, family=family, profile=profile)
    ref = reference_tuple_from_skb(ref_skb, iifidx=6, family=family, profile=profile)
    assert _observed(fast, fast_skb) == _observed(ref, ref_skb), (pname, family, offload, headlen, frame.hex())
    if headlen is None and offload:
        got = flow_tuple_from_frame(frame, 6, family, profile)
        if ref.ok:
            c = ref.ctx
            assert got == (ref.tuple, c.offset, c.hdrsize, c.tun_hdr_size, c.tun_proto, c.ether_type)
        else:
            assert got == (ref.reason, ref.detail)


def _corpus_frames() -> list[tuple[str, int, bytes]]:
    return [(p.name, f.index, f.data) for p in CORPUS for f in read_capture(p)]


def test_the_corpus_is_there():
    assert len(CORPUS) >= 18 and len(_corpus_frames()) >= 80


@pytest.mark.parametrize("pname", sorted(PROFILES))
def test_every_corpus_frame_every_profile(pname):
    """Every frame of tests/data, every family, offload on/off, whole and cut linear areas."""
    for _name, _index, frame in _corpus_frames():
        for family in HOOKS:
            for offload in (True, False):
                for headlen in (None, 14, 18, 30, 38, 54, 62, 78):
                    assert_same(frame, pname, family, offload, headlen)


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(frames(), st.sampled_from(sorted(PROFILES)), st.sampled_from(HOOKS), st.booleans())
def test_generated_stacks(frame_headlen, pname, family, offload):
    """Random stacks (tests/frames.py), cut at random lengths, random linear lengths."""
    frame, headlen = frame_headlen
    assert_same(frame, pname, family, offload, headlen)
    assert_same(frame, pname, family, True, None)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(frames(clean=True), st.sampled_from(sorted(PROFILES)), st.sampled_from(HOOKS))
def test_generated_clean_stacks(frame_headlen, pname, family):
    """Stacks the fast path takes (tuples, not only reasons), at random linear lengths."""
    frame, headlen = frame_headlen
    assert_same(frame, pname, family, True, headlen)
    assert_same(frame, pname, family, True, None)


def test_the_benchmark_capture():
    """The first frames of benchmarks/mixed_capture.py (one per layout, twice) parse alike, and are what
    scapy dissects them as (the generator packs headers by hand)."""
    from scapy.layers.inet import IP, TCP, UDP
    from scapy.layers.inet6 import IPv6
    from scapy.layers.l2 import Dot1AD, Dot1Q, Ether
    from scapy.layers.ppp import PPPoE

    sys.path.insert(0, str(BENCHMARKS))
    try:
        import mixed_capture
    finally:
        sys.path.remove(str(BENCHMARKS))
    expected = {"ipv4": (IP, TCP), "qinq": (Dot1AD, Dot1Q, IP, UDP), "pppoe": (PPPoE, IPv6, TCP),
                "ipip": (IP, IP, TCP), "ip6ip6": (IPv6, IPv6, UDP), "ip6ip6_vlan": (Dot1Q, IPv6, IPv6, TCP)}
    for i in range(2 * len(mixed_capture.LAYOUTS)):
        frame = mixed_capture.frame(i)
        pkt = Ether(frame)
        layers = expected[mixed_capture.LAYOUTS[i % len(mixed_capture.LAYOUTS)]]
        assert all(pkt.haslayer(layer) for layer in layers), (i, pkt.summary())
        assert pkt[layers[-1]].sport == 1024 + i
        for pname in PROFILES:
            assert_same(frame, pname, "inet", True, None)


def test_interned_values_start_over(monkeypatch):
    """The parser interns its Encap and Tunnel values; a cache past _INTERN_MAX starts over, and the tuples
    are the same values whether they were found in the cache or built."""
    from flowsim.kernel.flowtable import tuple as ft

    sys.path.insert(0, str(BENCHMARKS))
    try:
        import mixed_capture
    finally:
        sys.path.remove(str(BENCHMARKS))
    frames_ = mixed_capture.frames(120)
    for pname in ("linux-7.0", "linux-7.2", "linux-7.3"):
        cached = [flow_tuple_from_frame(f, 3, "inet", PROFILES[pname]) for f in frames_]
        assert any(r[0].encap for r in cached) and any(r[0].tun for r in cached)
        with monkeypatch.context() as m:
            m.setattr(ft, "_INTERN_MAX", 1)
            ft._ENCAPS.clear()
            ft._TUNNELS.clear()
            built = [flow_tuple_from_frame(f, 3, "inet", PROFILES[pname]) for f in frames_]
            assert len(ft._ENCAPS) <= 1 and len(ft._TUNNELS) <= 1
        assert built == cached


def _pcap(path: Path, linktype: int, records: list[bytes]) -> Path:
    with path.open("wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, linktype))
        for rec in records:
            f.write(struct.pack("<IIII", 1, 2, len(rec), len(rec)) + rec)
    return path


def test_read_frames_is_read_capture(tmp_path):
    """read_frames (flowsim tuple's reader) yields read_capture's frames, and fails after the same frames:
    the corpus, cut files, raw-IP / cooked / unknown link types, a pcapng with two link types."""
    from flowsim.errors import CaptureError
    from flowsim.kernel.capture import PcapngWriter, read_frames

    ip = bytes.fromhex("4500002800004000400600000a0000010a000002") + bytes(20)
    raw = CORPUS[0].read_bytes()
    paths = list(CORPUS)
    for cut in (10, 24, 30, len(raw) - 3):
        paths.append(tmp_path / f"cut-{cut}.pcap")
        paths[-1].write_bytes(raw[:cut])
    paths.append(_pcap(tmp_path / "raw.pcap", 101, [ip, ip[:7]]))
    paths.append(_pcap(tmp_path / "sll.pcap", 113, [bytes(14) + b"\x08\x00" + ip, b"\x00"]))
    paths.append(_pcap(tmp_path / "unknown.pcap", 999, [ip]))
    paths.append(_pcap(tmp_path / "unknown-empty.pcap", 999, []))
    with PcapngWriter(tmp_path / "two.pcapng") as w:
        tun, eth = w.device("tun0", "tunnel6"), w.device("eth0", "ether")
        w.write(tun, bytes(12) + b"\x86\xdd" + bytes(40))
        w.write(eth, bytes(60))
    paths.append(tmp_path / "two.pcapng")
    for path in paths:
        outcomes = []
        for reader in (lambda p: (f.data for f in read_capture(p)), read_frames):
            got: list[bytes] = []
            try:
                got.extend(reader(path))
                outcomes.append((got, None))
            except CaptureError as exc:
                outcomes.append((got, str(exc)))
        assert outcomes[0] == outcomes[1], path.name


def test_json_writer_is_json_dumps():
    """flowsim tuple --json writes each tuple line by hand: the text json.dumps gives for the same object."""
    import json

    from flowsim.commands.tuple import _JsonWriter, _tuple_obj
    from flowsim.schemas import schema_id

    writer = _JsonWriter()
    seen = 0
    frames_ = [f for _n, _i, f in _corpus_frames()]
    sys.path.insert(0, str(BENCHMARKS))
    try:
        import mixed_capture
    finally:
        sys.path.remove(str(BENCHMARKS))
    frames_ += mixed_capture.frames(600)
    for pname in PROFILES:
        for index, frame in enumerate(frames_, 1):
            for family in HOOKS:
                res = flow_tuple_from_frame(frame, 3, family, PROFILES[pname])
                if res is not None and len(res) == 6:
                    seen += 1
                    expected = json.dumps({"schema": schema_id("tuple"), **_tuple_obj(index, res)}) + "\n"
                    assert writer.line(index, res) == expected
    assert seen > 1000


def test_addr_text_is_ipaddress():
    """headers.addr_text (inet_ntop where it writes the same text) is ipaddress's text, zero runs included."""
    import ipaddress
    import random

    from flowsim.kernel.headers import AF_INET, AF_INET6, addr_text

    rnd = random.Random(16)
    for _ in range(20000):
        words = [rnd.choice((0, 0, 0, 1, 0xFFFF, rnd.randrange(65536))) for _ in range(8)]
        raw = b"".join(w.to_bytes(2, "big") for w in words)
        assert addr_text(raw, AF_INET6) == str(ipaddress.IPv6Address(raw))
        assert addr_text(raw, AF_INET) == str(ipaddress.IPv4Address(raw[:4]))
