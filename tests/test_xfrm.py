"""xfrm_output's GSO decision and the ESP frames each path puts on the wire.

Covers flowsim.models.xfrm (decision table), flowsim.kernel.esp (ESP output paths, receiver)
and the ESP / UDP-tunnel cases of flowsim.kernel.gso (software segmentation).  Frames are checked with scapy
(dissection, checksums, and scapy's own ESP AES-GCM decryption) and with the
real tcpdump binary running the filters of the Oct-2026 patch.
"""

from __future__ import annotations

import itertools
import shutil
import struct
import subprocess

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scapy.contrib.geneve import GENEVE  # noqa: F401  (binds UDP 6081)
from scapy.layers.inet import IP, TCP
from scapy.layers.inet6 import IPv6
from scapy.layers.ipsec import ESP, SecurityAssociation
from scapy.layers.l2 import Ether
from scapy.layers.vxlan import VXLAN  # noqa: F401  (binds UDP 4789)

from flowsim.errors import ConfigError
from flowsim.kernel.esp import (
    DEFAULT_KEY,
    XfrmReceiver,
    XfrmState,
    build_gso_skb,
    xfrm_transport_output_gso,
    xfrm_tunnel_encap_add_gso,
)
from flowsim.kernel.gso import GsoError
from flowsim.models.xfrm import (
    OUTCOMES,
    VARIANTS,
    XfrmInputs,
    decision_table_row,
    esp_layout,
    get_variant,
    malformed_filter,
    simulate,
    xfrm_output,
)

V = ("v0", "v1", "v2", "v3")
SPI = 0x1001


# --- helpers ------------------------------------------------------------------------

def tcpdump_count(pcap, expr: str) -> int:
    """Packets of *pcap* the real tcpdump binary matches with *expr* (never skipped: CI installs tcpdump)."""
    exe = shutil.which("tcpdump")
    assert exe, "tcpdump is required by these tests: apt-get install tcpdump (.ci/run installs it)"
    out = subprocess.run([exe, "-r", str(pcap), "-nn", expr], capture_output=True, text=True, check=True)
    return sum(1 for line in out.stdout.splitlines() if line.strip())


def assert_checksums(pkt) -> None:
    """Every IPv4/TCP/UDP checksum in *pkt* equals what scapy recomputes."""
    clone = pkt.copy()
    layer = clone
    while layer:
        if any(f.name == "chksum" for f in layer.fields_desc):
            layer.chksum = None
        layer = layer.payload
    rebuilt = type(pkt)(bytes(clone))
    for a, b in zip(_layers(pkt), _layers(rebuilt)):
        if hasattr(a, "chksum"):
            assert a.chksum == b.chksum, f"{a.name} checksum 0x{a.chksum:04x} != 0x{b.chksum:04x}"


def _layers(pkt):
    while pkt:
        yield pkt
        pkt = pkt.payload


def scapy_sa() -> SecurityAssociation:
    return SecurityAssociation(ESP, spi=SPI, crypt_algo="AES-GCM", crypt_key=DEFAULT_KEY, auth_algo="NULL")


def inputs(ip, mode, dev, t, hw=False, **kw):
    return XfrmInputs(inner_protocol=ip, mode=mode, offload_dev=dev, type_offload=t, hw_gso=hw, **kw)


# --- the decision table (decision_table_row), row by row ------------------------------------------------

# (row, inputs, outcome in V0, V1, V2, V3).
TABLE = [
    (1, inputs(True, "transport", False, False), ("SWGSO",) * 4),
    (1, inputs(False, "tunnel", False, False), ("SWGSO",) * 4),
    (1, inputs(True, "tunnel", True, False, hw=True), ("SWGSO",) * 4),
    (1, inputs(True, "transport", False, True, encap=True), ("SWGSO",) * 4),
    (1, inputs(True, "transport", False, True, sw_sa_offload_ok=False), ("SWGSO",) * 4),
    (2, inputs(False, "tunnel", False, True), ("ESPSW-T",) * 4),
    (3, inputs(False, "transport", False, True), ("ESPSW-X",) * 4),
    (4, inputs(False, "tunnel", True, True, hw=True), ("HW",) * 4),
    (4, inputs(False, "transport", True, True, hw=True), ("HW",) * 4),
    (4, inputs(False, "beet", True, True, hw=True), ("HW",) * 4),
    (5, inputs(False, "tunnel", True, True), ("ESPSW-T",) * 4),
    (5, inputs(False, "transport", True, True), ("ESPSW-X",) * 4),
    (5, inputs(False, "beet", True, True), ("ESPSW-B",) * 4),
    (6, inputs(True, "tunnel", False, True), ("ESPSW-T", "SWGSO", "SWGSO", "SWGSO")),
    (7, inputs(True, "tunnel", True, True, hw=True), ("HW", "SWGSO", "SWGSO", "SWGSO")),
    (8, inputs(True, "transport", False, True), ("ESPSW-X", "SWGSO", "ESPSW-X", "SWGSO")),
    (9, inputs(True, "transport", True, True, hw=True), ("HW", "SWGSO", "HW", "HW")),
    (10, inputs(True, "transport", True, True), ("ESPSW-X", "SWGSO", "ESPSW-X", "ESPSW-X")),
    (11, inputs(True, "beet", False, True), ("ESPSW-B", "SWGSO", "ESPSW-B", "SWGSO")),
    (12, inputs(True, "beet", True, True, hw=True), ("HW", "SWGSO", "HW", "HW")),
    (12, inputs(True, "beet", True, True), ("ESPSW-B", "SWGSO", "ESPSW-B", "ESPSW-B")),
]

CASES = [pytest.param(row, inp, v, out[k], id=f"row{row}-{v}-{inp.mode}-{'dev' if inp.offload_dev else 'sw'}"
                      f"{'-hw' if inp.hw_gso else ''}{'-T' if inp.type_offload else ''}"
                      f"{'-encap' if inp.encap else ''}{'-v615' if not inp.sw_sa_offload_ok else ''}")
         for row, inp, out in TABLE for k, v in enumerate(V)]


@pytest.mark.parametrize(("row", "inp", "variant", "expected"), CASES)
def test_decision_table(row, inp, variant, expected):
    """Each decision-table row gives the outcome the table lists for each variant."""
    d = xfrm_output(variant, inp)
    assert (d.outcome, d.row) == (expected, row)
    assert d.branch == ("else" if row == 1 else "offload-ok")
    assert d.outcome in OUTCOMES and d.segmenter and d.encrypter


@pytest.mark.parametrize("variant", V)
def test_row13_packet_offload(variant):
    """Row 13: packet offload hands the skb to the NIC as it is; V0 predates packet offload (v6.2)."""
    inp = inputs(True, "transport", True, True, packet_offload=True)
    if variant == "v0":
        with pytest.raises(ConfigError, match="packet offload"):
            xfrm_output(variant, inp)
    else:
        d = xfrm_output(variant, inp)
        assert (d.branch, d.outcome, d.row) == ("packet-offload", "PACKET-HW", 13)


def _all_inputs():
    for ip, mode, dev, t, hw in itertools.product((False, True), ("tunnel", "transport", "beet"),
                                                  (False, True), (False, True), (False, True)):
        if hw and not dev:
            continue
        yield inputs(ip, mode, dev, t, hw)


@pytest.mark.parametrize(("old", "new", "changed"), [
    ("v0", "v1", lambda i: i.inner_protocol),
    ("v1", "v2", lambda i: i.inner_protocol and i.mode != "tunnel"),
    ("v2", "v3", lambda i: i.inner_protocol and i.mode != "tunnel" and not i.offload_dev),
])
def test_each_patch_changes_exactly_its_condition(old, new, changed):
    """Between consecutive variants the outcome changes exactly where the variant's condition changed (offload-ok only)."""
    for inp in _all_inputs():
        a, b = xfrm_output(old, inp), xfrm_output(new, inp)
        expect_change = bool(changed(inp)) and a.branch == "offload-ok"
        assert (a.outcome != b.outcome) == expect_change, inp
        if expect_change:
            assert "SWGSO" in (a.outcome, b.outcome), inp


def test_v3_swgso_iff_condition_from_patch():
    """V3 sends a GSO skb to xfrm_output_gso iff inner_protocol && (tunnel || !xso.dev), when offload is ok."""
    for inp in _all_inputs():
        d = xfrm_output("v3", inp)
        if d.branch == "offload-ok":
            cond = inp.inner_protocol and (inp.mode == "tunnel" or not inp.offload_dev)
            assert (d.outcome == "SWGSO") == cond, inp


def test_hw_gso_without_device_is_refused():
    """HWGSO needs xso.dev == skb->dev: a software SA cannot claim hardware ESP GSO."""
    with pytest.raises(ConfigError, match="crypto-offload device"):
        inputs(True, "transport", False, True, hw=True)


@pytest.mark.parametrize("name", ["V2", "0aae2867aa60", "oct-2026-fix", "pre-a204aef9fd77"])
def test_variant_aliases(name):
    """Variants are found by name, case-insensitively, or by the commit that defines them."""
    assert get_variant(name).name in VARIANTS


def test_row_lookup_matches_table():
    """decision_table_row names the row of every tabled input."""
    for row, inp, _ in TABLE:
        assert decision_table_row(inp) == row


# --- esp_layout: which layouts are right ----------------------------------------------------

LAYOUTS = [
    # (variant, inputs, inner, kind)
    ("v2", inputs(True, "transport", False, True), "ipip", "malformed"),
    ("v2", inputs(True, "transport", False, True), "ip6tnl", "malformed"),
    ("v2", inputs(True, "transport", False, True), "vxlan", "correct"),
    ("v2", inputs(True, "transport", False, True), "geneve", "correct"),
    ("v2", inputs(False, "transport", False, True), "none", "correct"),
    ("v0", inputs(True, "transport", False, True), "ipip", "correct"),
    ("v0", inputs(True, "tunnel", False, True), "vxlan", "kernel-bug"),
    ("v2", inputs(True, "transport", True, True), "ipip", "malformed"),
    ("v3", inputs(True, "transport", True, True), "ipip", "malformed"),
    ("v3", inputs(True, "transport", False, True), "ipip", "correct"),
    ("v2", inputs(True, "transport", True, True, hw=True), "ipip", "hardware"),
]


@pytest.mark.parametrize(("variant", "inp", "inner", "kind"), LAYOUTS)
def test_layout_classification(variant, inp, inner, kind):
    """ESPSW-X misplaces ESP only for IP-in-IP and only with the 06a0afcfe2f5 prep; row 10 stays broken in V3."""
    assert esp_layout(xfrm_output(variant, inp), inner).kind == kind


# --- real frames: the tcpdump filters of the Oct-2026 patch ----------------------------------

@pytest.mark.parametrize("inner", ["ipip", "ip6tnl"])
def test_v2_malformed_frames_match_patch_filter(inner, tmp_path):
    """V2, software SA + ESP offload module: tcpdump matches every segment, none decrypts, 4 inner bytes clear."""
    pcap = tmp_path / f"{inner}.pcap"
    r = simulate("v2", inner, "transport", esp_offload_module=True, segments=8, pcap=pcap)
    assert (r.decision.outcome, r.layout.kind) == ("ESPSW-X", "malformed")
    assert tcpdump_count(pcap, malformed_filter(r.family, SPI)) == 8 == len(r.frames)
    assert r.rx_counters["decrypted"] == 0 and r.rx_counters["XfrmInStateProtoError"] == 8
    hl = 20 if inner == "ipip" else 40
    for f in r.frames:
        inner_hdr = f.plain[hl:hl + 4]  # the inner IPv4 header of this segment, before ESP
        assert inner_hdr[:2] == b"\x45\x00"
        assert f.packet[hl + 16:hl + 20] == inner_hdr == r.clear_inner_bytes(f)


@pytest.mark.parametrize("inner", ["ipip", "ip6tnl"])
def test_v3_fix_frames_all_decrypt(inner, tmp_path):
    """With the Oct-2026 fix the same setup takes SWGSO: tcpdump matches nothing and every frame decrypts."""
    pcap = tmp_path / f"{inner}.pcap"
    r = simulate("v3", inner, "transport", esp_offload_module=True, segments=8, pcap=pcap)
    assert (r.decision.outcome, r.layout.kind) == ("SWGSO", "correct")
    assert tcpdump_count(pcap, malformed_filter(r.family, SPI)) == 0
    assert tcpdump_count(pcap, "esp") == 8
    assert r.rx_counters["decrypted"] == r.rx_intact == 8
    assert r.rx_counters["XfrmInStateProtoError"] == 0


@pytest.mark.parametrize(("variant", "dev"), [("v0", False), ("v1", False), ("v2", True), ("v3", True)])
def test_filter_is_silent_on_correct_paths(variant, dev, tmp_path):
    """Paths that place ESP correctly (old prep, SWGSO, HW) never match the patch's filter."""
    pcap = tmp_path / "x.pcap"
    r = simulate(variant, "ipip", "transport", esp_offload_module=True, offload_dev=dev, segments=4, pcap=pcap)
    assert r.malformed == 0 and tcpdump_count(pcap, malformed_filter(4, SPI)) == 0
    assert r.rx_counters["decrypted"] == 4


@pytest.mark.parametrize("variant", V)
@pytest.mark.parametrize("inner", ["vxlan", "geneve"])
@pytest.mark.parametrize("mode", ["transport", "tunnel"])
def test_udp_tunnel_inner_every_variant(variant, inner, mode):
    """VXLAN/Geneve inner is correct in every variant; only V0 tunnel mode hits the a204aef9fd77 bug."""
    r = simulate(variant, inner, mode, esp_offload_module=True, segments=4)
    if (variant, mode) == ("v0", "tunnel"):
        assert r.layout.kind == "kernel-bug" and not r.frames
        return
    assert r.layout.kind == "correct" and r.malformed == 0
    assert r.rx_counters["decrypted"] == r.rx_intact == 4


def test_malformed_ipip_bytes_match_reference_layout():
    """The ipip ESPSW-X frame has the misplaced-ESP byte layout (ESP at 20 + 20), wire length 1476 for T = 32, payload 1368."""
    r = simulate("v2", "ipip", "transport", esp_offload_module=True, segments=3, mss=1368, seq_first=7)
    for k, f in enumerate(r.frames):
        p = f.packet
        assert len(p) == 1476 and p[9] == 50 and struct.unpack("!H", p[2:4])[0] == 1476
        assert struct.unpack("!II", p[20:28]) == (SPI, 7)  # template: batch-first seq in every segment
        assert p[28:36] == bytes([192, 0, 2, 1, 192, 0, 2, 2])  # stale outer saddr/daddr
        assert p[36:40] == f.plain[20:24]  # inner IPv4 bytes 0-3 in clear
        assert struct.unpack("!II", p[40:48]) == (SPI, 7 + k)  # esp_xmit's header, per-segment seq
        assert p[48:56] == struct.pack("!Q", 7 + k)  # seqiv IV (salt 0)


def test_malformed_ip6tnl_bytes_match_reference_layout():
    """The ip6tnl (4in6) ESPSW-X frame has the misplaced-ESP layout: template at 40, stale dst tail, ESP at 60."""
    r = simulate("v2", "ip6tnl", "transport", esp_offload_module=True, segments=2)
    for k, f in enumerate(r.frames):
        p = f.packet
        assert p[6] == 50 and struct.unpack("!H", p[4:6])[0] == len(p) - 40
        assert struct.unpack("!II", p[40:48]) == (SPI, 1)
        assert p[48:56] == p[32:40]  # last 8 bytes of the outer destination address
        assert p[56:60] == f.plain[40:44]
        assert struct.unpack("!II", p[60:68]) == (SPI, 1 + k)
        assert f.esp_offset == 40 + 20  # outer_len + inner_ip_len


@pytest.mark.parametrize("outcome_variant", ["v1", "v2"])
def test_sequence_numbers_per_segment(outcome_variant):
    """Both paths give segment k the sequence number first + k (xfrm_replay_overflow / _offload)."""
    r = simulate(outcome_variant, "ipip", "transport", esp_offload_module=True, segments=5, seq_first=100)
    assert [f.seq for f in r.frames] == list(range(100, 105))


# --- scapy: dissection, checksums, independent decryption -------------------------------

CORRECT = [("v3", "ipip", "transport"), ("v3", "ip6tnl", "transport"), ("v3", "ipip", "tunnel"),
           ("v2", "ip6tnl", "tunnel"), ("v2", "none", "transport"), ("v2", "none", "tunnel"),
           ("v2", "vxlan", "transport"), ("v3", "geneve", "tunnel"), ("v0", "ipip", "transport")]


@pytest.mark.parametrize(("variant", "inner", "mode"), CORRECT)
def test_frames_decode_and_decrypt_in_scapy(variant, inner, mode):
    """Correct frames carry valid checksums, and scapy's own AES-GCM ESP decrypts them to checksummed packets."""
    r = simulate(variant, inner, mode, esp_offload_module=True, segments=3)
    sa = scapy_sa()
    for f in r.frames:
        e = Ether(f.frame)
        assert_checksums(e)
        l3 = e[IP] if IP in e else e[IPv6]
        assert ESP in l3 and l3[ESP].spi == SPI and l3[ESP].seq == f.seq
        clear = sa.decrypt(l3)
        assert TCP in clear
        assert_checksums(clear)
        if mode == "transport":
            assert bytes(clear) == f.plain


def test_malformed_frame_still_dissects():
    """A misplaced-ESP frame is still a valid IP/ESP packet to scapy, with a correct outer checksum."""
    r = simulate("v2", "ipip", "transport", esp_offload_module=True, segments=2)
    e = Ether(r.frames[0].frame)
    assert_checksums(e)
    assert e[ESP].spi == SPI and e[ESP].seq == 1


# --- the receiver ----------------------------------------------------------------

def test_receiver_counts_replay_unknown_spi_and_bad_key():
    """xfrm_input: replay → XfrmInStateSeqError, unknown SPI → XfrmInNoStates, wrong key → ProtoError."""
    r = simulate("v3", "none", "transport", segments=2)
    rx = XfrmReceiver({SPI: r.state})
    assert rx.xfrm_input(r.frames[0].frame).verdict == "ok"
    assert rx.xfrm_input(r.frames[0].frame).verdict == "XfrmInStateSeqError"
    assert XfrmReceiver({0x2002: r.state}).xfrm_input(r.frames[1].frame).verdict == "XfrmInNoStates"
    bad = XfrmState(spi=SPI, key=bytes(20))
    assert XfrmReceiver({SPI: bad}).xfrm_input(r.frames[1].frame).verdict == "XfrmInStateProtoError"


def test_receiver_window_does_not_advance_on_malformed():
    """Malformed frames repeat the template seq yet pass the replay check: nothing ever authenticates."""
    r = simulate("v2", "ip6tnl", "transport", esp_offload_module=True, segments=6)
    assert r.rx_counters["XfrmInStateSeqError"] == 0 and r.rx_counters["XfrmInStateProtoError"] == 6


# --- software GSO (flowsim.kernel.gso) -------------------------------------------------------------

TCP_FLAG_PSH = 0x08


def _offsets(segs):
    """(transport header, IP packet) of each segment, offsets from the network header."""
    return [(s.transport_header - s.network_header, bytes(s.buf[s.network_header:])) for s in segs]


@pytest.mark.parametrize(("inner", "transport"), [("none", 20), ("ipip", 40), ("ip6tnl", 60), ("vxlan", 20),
                                                  ("geneve", 20)])
def test_transport_header_after_software_gso(inner, transport):
    """skb_gso_segment leaves the transport header at the innermost TCP for IP-in-IP, at UDP for tunnels."""
    segs = build_gso_skb(inner, segments=3).segment()
    assert {t for t, _ in _offsets(segs)} == {transport}


@pytest.mark.parametrize(("inner", "transport"), [("none", 36), ("ipip", 56), ("ip6tnl", 76), ("vxlan", 36)])
def test_transport_header_after_esp_gso(inner, transport):
    """esp{4,6}_gso_segment → xfrm{4,6}_transport_gso_segment: the transport header moves past ESP + IV, then
    the inner callbacks leave it where they would without ESP (what 06a0afcfe2f5's __xfrm_transport_prep reads).
    Every segment keeps the ESP slot as esp_gso_encap wrote it: SPI and the batch's first sequence number."""
    esp_skb = xfrm_transport_output_gso(XfrmState(spi=0x1001), build_gso_skb(inner, segments=3), 7)
    trace: list[str] = []
    segs = _offsets(esp_skb.segment(trace))
    v = esp_skb.family
    assert trace[1:3] == [f"esp{v}_gso_segment", f"xfrm{v}_transport_gso_segment"]
    assert {t for t, _ in segs} == {transport}
    hlen = 20 if v == 4 else 40
    assert {p[hlen:hlen + 8] for _, p in segs} == {struct.pack("!II", 0x1001, 7)}


def test_esp_gso_checks_in_kernel_order():
    """esp4_gso_segment: SKB_GSO_ESP, then the SPI (both -EINVAL); without xfrm_offload ESP has no callback."""
    skb = xfrm_transport_output_gso(XfrmState(spi=0x1001), build_gso_skb("none", segments=2), 1)
    with pytest.raises(GsoError) as exc:
        attrs.evolve(skb, gso_type=skb.gso_type & ~(1 << 15)).segment()
    assert (exc.value.func, exc.value.errno_name) == ("esp4_gso_segment", "-EINVAL")
    with pytest.raises(GsoError, match="SPI"):
        attrs.evolve(skb, xo=attrs.evolve(skb.xo, spi=0x2002)).segment()
    with pytest.raises(GsoError) as exc:
        attrs.evolve(skb, xo=None).segment()
    assert (exc.value.func, exc.value.errno_name) == ("inet_gso_segment", "-EPROTONOSUPPORT")


def test_esp_tunnel_gso_chain():
    """Tunnel mode: xfrm4_tunnel_gso_segment hands the inner packet to skb_mac_gso_segment."""
    skb = xfrm_tunnel_encap_add_gso(XfrmState(mode="tunnel"), build_gso_skb("ipip", segments=2), 1, 4)
    trace: list[str] = []
    skb.segment(trace)
    assert trace == ["inet_gso_segment", "esp4_gso_segment", "xfrm4_tunnel_gso_segment", "skb_mac_gso_segment",
                     "inet_gso_segment", "ipip_gso_segment", "inet_gso_segment", "tcp4_gso_segment"]


def test_tcp_segmentation_fields():
    """tcp_gso_segment: seq advances by mss, PSH only on the last segment; inet_gso_segment: ids increment."""
    skb = build_gso_skb("none", segments=4, mss=100)
    segs = [IP(p) for _, p in _offsets(skb.segment())]
    assert [p[TCP].seq - segs[0][TCP].seq for p in segs] == [0, 100, 200, 300]
    assert [bool(p[TCP].flags & TCP_FLAG_PSH) for p in segs] == [False, False, False, True]
    assert [p[IP].id - segs[0][IP].id for p in segs] == [0, 1, 2, 3]


@settings(max_examples=25, deadline=None)
@given(inner=st.sampled_from(["none", "ipip", "ip6tnl", "vxlan", "geneve"]), family=st.sampled_from([4, 6]),
       segments=st.integers(2, 6), mss=st.integers(1, 1400), data=st.data())
def test_segments_reassemble_and_checksum(inner, family, segments, mss, data):
    """Any GSO skb: the segments' TCP payloads concatenate to the original; scapy accepts every checksum."""
    last = data.draw(st.integers(1, mss))
    skb = build_gso_skb(inner, family, segments, mss, last)
    whole = IP(skb.packet) if skb.family == 4 else IPv6(skb.packet)
    assert_checksums(whole)
    segs = skb.segment()
    assert len(segs) == segments
    payload = b""
    for _, p in _offsets(segs):
        pkt = IP(p) if p[0] >> 4 == 4 else IPv6(p)
        assert_checksums(pkt)
        payload += bytes(pkt[TCP].payload)
    assert payload == bytes(whole[TCP].payload)


# --- bad input ---------------------------------------------------------------------------

@pytest.mark.parametrize(("kwargs", "match"), [
    (dict(variant="v7", inner="ipip", mode="transport"), "unknown xfrm variant"),
    (dict(variant="v2", inner="gre", mode="transport"), "unknown inner"),
    (dict(variant="v2", inner="ipip", mode="beet"), "transport and tunnel"),
    (dict(variant="v2", inner="ipip", mode="transport", segments=1), "at least 2"),
    (dict(variant="v2", inner="ipip", mode="transport", segments=60), "64 KiB"),
    (dict(variant="v2", inner="ipip", mode="transport", key=b"short"), "key must be"),
])
def test_bad_arguments_raise_config_error(kwargs, match):
    """Bad arguments raise ConfigError naming the value, never a bare exception."""
    with pytest.raises(ConfigError, match=match):
        simulate(**kwargs)
