"""``flowsim conform --frames`` without qemu: frames from the simulation, the guest script, pcaps from the
results channel, the byte and verdict comparison (including the cases that must fail), and a saved boot."""

from __future__ import annotations

import base64
import ipaddress
import collections
import json
import shlex
import struct
from pathlib import Path

import attrs
import jsonschema
import pytest
from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.l2 import Ether

from flowsim.cli import main
from flowsim.config.topology import load_topology
from flowsim.conform.frames import (
    FRAMES_TABLE, GSO_SUFFIX, NFLOG_GROUP, KernelFrames, compare_frames, frames_files, hexdump, l3_bytes,
    nflog_payload, render_frames_init, render_frames_scenario, simulate_frames, tcp_checksum_seed, virtio_gso_type,
)
from flowsim.conform.known import TCP_SEED
from flowsim.conform.guest import plan_scenario
from flowsim.conform.harness import load_scenarios, run_conformance
from flowsim.conform.parse import Pcap, parse_pcap
from flowsim.errors import ConfigError
from flowsim.kernel.capture import LINKTYPE_ETHERNET, LINKTYPE_LINUX_SLL, LINKTYPE_RAW, write_pcap
from flowsim.kernel.devices.base import mac_for
from flowsim.kernel.gso import SKB_GSO_DODGY, SKB_GSO_IPXIP4, SKB_GSO_TCPV4, SKB_GSO_TCPV6, SKB_GSO_UDP_L4
from flowsim.schemas import load

ROOT = Path(__file__).resolve().parent.parent
FORWARD = ROOT / "topologies" / "conform-forward.toml"
SAVED = ROOT / "tests" / "data" / "conform" / "frames-forward-debian-6.12.log.gz"


@pytest.fixture(scope="module")
def forward():
    (topo, plan), = load_scenarios([str(FORWARD)])
    return topo, plan, simulate_frames(topo, plan, "linux-6.12", 3)


def _kernel_like(fplan, edit=None) -> KernelFrames:
    """What a kernel that behaves exactly like flowsim would have captured (optionally edited)."""
    pcaps = {}
    for ns, dev in fplan.captured:
        for out in (False, True):
            frames = [f.data for f in fplan.expected(ns, dev, out)]
            pcaps[(ns, dev, out)] = Pcap(LINKTYPE_ETHERNET, tuple(frames))
    nflog = {ns: [l3_bytes(f.data, f.linktype) for f in fplan.frames
                  if f.netns == ns and f.verdict and f.verdict.startswith("slowpath")] for ns in fplan.router_netns}
    kf = KernelFrames(pcaps, nflog)
    return edit(kf) if edit else kf


# ---------------------------------------------------------------------- simulation

def test_frames_from_the_simulation(forward):
    topo, plan, fp = forward
    assert fp.endpoints == ("ns1", "ns2")
    assert fp.wires == (("ns1", "eth0"), ("ns2", "eth0"))
    assert fp.router_netns == ("r",)
    assert set(fp.captured) == {("r", "veth0"), ("r", "veth1"), ("ns1", "eth0"), ("ns2", "eth0")}
    assert fp.max_packets == 3 and set(fp.capped) == {"tcp4", "udp4", "tcp6", "udp6"}
    # every injected frame is a transmission on an endpoint's wire, in tap order
    assert all(f.outbound and (f.netns, f.dev) in fp.wires for f in fp.inject)
    assert [f.index for f in fp.inject] == sorted(f.index for f in fp.inject)
    first = Ether(fp.inject[0].data)
    assert first.src == mac_for("ns1", "eth0") and first.dst == mac_for("r", "veth0")
    assert first[TCP].flags == "S" and first[IP].dst == "198.51.100.2"
    # the router's copy of the same packet: TTL one less, its own MACs, and a hook verdict
    fwd = next(f for f in fp.frames if (f.netns, f.dev, f.outbound) == ("r", "veth1", True))
    assert Ether(fwd.data)[IP].ttl == first[IP].ttl - 1
    rx = [f for f in fp.frames if (f.netns, f.dev, f.outbound) == ("r", "veth0", False)]
    assert all(f.verdict for f in rx) and {f.verdict.split()[0] for f in rx} == {"fastpath", "slowpath"}
    # both sides' MACs and the pre-resolved neighbours, as flowsim has them
    assert ("ns2", "eth0", mac_for("ns2", "eth0")) in fp.macs
    assert ("r", "veth1", "198.51.100.2", mac_for("ns2", "eth0")) in fp.neigh
    assert ("ns1", "eth0", "192.0.2.1", mac_for("r", "veth0")) in fp.neigh


def test_max_packets_caps_every_direction():
    (topo, plan), = load_scenarios([str(FORWARD)])
    full = simulate_frames(topo, plan, "linux-6.12")
    short = simulate_frames(topo, plan, "linux-6.12", 1)
    assert full.capped == () and len(full.inject) == 372
    # TCP: handshake, one segment, no close; UDP: one datagram each way
    assert len(short.inject) < 30


def test_endpoint_with_a_flowtable_is_refused(tmp_path):
    text = FORWARD.read_text().replace('[[traffic]]\nname = "tcp4"\nproto = "tcp"\nfrom = "ns1"',
                                       '[[traffic]]\nname = "tcp4"\nproto = "tcp"\nfrom = "r"', 1)
    p = tmp_path / "t.toml"
    p.write_text(text)
    topo = load_topology(str(p))
    with pytest.raises(ConfigError, match="has a flowtable"):
        simulate_frames(topo, plan_scenario(topo), "linux-6.12", 2)


# ---------------------------------------------------------------------- guest script

def _odd_names(tmp_path) -> Path:
    """conform-forward with a namespace whose name is shell syntax."""
    text = FORWARD.read_text().replace("[netns.ns1]", "[netns.\"ns'1;reboot\"]")
    text = text.replace("netns ns1", "netns \"ns'1;reboot\"").replace('from = "ns1"', "from = \"ns'1;reboot\"")
    p = tmp_path / "odd.toml"
    p.write_text(text)
    return p


def test_guest_script_quotes_every_name(tmp_path):
    scenarios = load_scenarios([str(_odd_names(tmp_path))])
    (topo, plan), = scenarios
    fp = simulate_frames(topo, plan, "linux-6.12", 2)
    script = render_frames_scenario(topo, plan, fp)
    odd = "ns'1;reboot"
    for line in script.splitlines()[1:-1]:
        tokens = shlex.split(line)  # every line is well-formed shell: no name ends a quote
        if odd in line or "ns'\"'\"'1" in line:
            assert odd in tokens or any(odd in t for t in tokens), line
    assert "reboot" not in script.replace(shlex.quote(odd), "").replace("ns'\"'\"'1;reboot", "")
    assert f"capture {shlex.quote(odd)} eth0 in" in script
    assert f"log group {NFLOG_GROUP}" in frames_files(fp, plan.index)[f"conform/s{plan.index}/log.nft"].decode()
    mute = frames_files(fp, plan.index)[f"conform/s{plan.index}/{odd}.mute.nft"].decode()
    assert 'device "eth0"' in mute and "policy drop" in mute and FRAMES_TABLE in mute
    # one socat per frame file, the files in flowsim's order, each file exactly the frame's bytes
    files = render_frames_init(scenarios, [fp])
    order = [int(t.rsplit("/", 1)[1]) for t in shlex.split(" ".join(
        line for line in script.splitlines() if "INTERFACE" in line)) if t.startswith(f"/conform/s{plan.index}/f/")]
    assert order == list(range(len(fp.inject)))
    assert all(files[f"conform/s{plan.index}/f/{k}"] == f.data for k, f in enumerate(fp.inject))
    assert "@SCENARIOS@" not in files["init"].decode() and "capture_ready()" in files["init"].decode()


def test_unsafe_device_name_is_refused(tmp_path):
    text = FORWARD.read_text().replace("veth0", "v,0").replace("{ v,0, veth1 }", '{ "v,0", veth1 }')
    p = tmp_path / "t.toml"
    p.write_text(text)
    (topo, plan), = load_scenarios([str(p)])
    with pytest.raises(ConfigError, match="cannot be captured"):
        simulate_frames(topo, plan, "linux-6.12", 1)


# ---------------------------------------------------------------------- results channel

def test_pcap_from_the_results_channel(tmp_path):
    frames = [bytes(range(60)), b"\x02" * 14 + b"x" * 100]
    path = tmp_path / "a.pcap"
    write_pcap(path, frames)
    raw = path.read_bytes()
    text = "\n".join(base64.encodebytes(raw).decode().split("\n"))
    p = parse_pcap(text)
    assert p.error is None and p.linktype == LINKTYPE_ETHERNET and p.frames == tuple(frames)
    assert parse_pcap(base64.b64encode(raw[:-5]).decode()).error.startswith("truncated record")
    assert parse_pcap(base64.b64encode(raw[:-5]).decode()).frames == (frames[0],)
    assert parse_pcap("missing: tcpdump: eth9: No such device").error.startswith("missing")
    assert parse_pcap(base64.b64encode(b"nope" * 10).decode()).error.startswith("not a pcap")
    assert parse_pcap("").error == "empty capture"


def test_nflog_payload():
    packet = bytes(IP(src="192.0.2.2", dst="198.51.100.2") / TCP())
    tlv = lambda kind, value: struct.pack("<HH", 4 + len(value), kind) + value + bytes(-len(value) % 4)  # noqa: E731
    record = b"\x02\x00\x00\x07" + tlv(1, b"\x08\x00\x03\x00") + tlv(4, struct.pack("!I", 3)) + tlv(9, packet)
    assert nflog_payload(record) == packet
    assert nflog_payload(b"\x02\x00\x00\x07") == b""


def test_l3_bytes_skips_vlan_tags():
    packet = bytes(IP() / TCP())
    eth = b"\x02" * 12
    assert l3_bytes(eth + b"\x08\x00" + packet, LINKTYPE_ETHERNET) == packet
    assert l3_bytes(eth + b"\x81\x00\x00\x0a\x08\x00" + packet, LINKTYPE_ETHERNET) == packet
    assert l3_bytes(packet, 101) == packet


# ---------------------------------------------------------------------- comparison

def test_identical_captures_agree(forward):
    _, plan, fp = forward
    rows = compare_frames(plan.name, fp, _kernel_like(fp))
    assert rows and all(r.status == "agrees" and r.tolerance == "exact" for r in rows)
    verdicts = [r for r in rows if r.fact == "flowtable verdicts"]
    assert [r.subject for r in verdicts] == ["r/veth0 in", "r/veth1 in"]
    assert "slowpath" in verdicts[0].kernel and "fastpath" in verdicts[0].kernel


def test_one_changed_byte_is_a_difference_with_hexdumps(forward):
    _, plan, fp = forward

    def ttl_off_by_one(kf):
        frames = list(kf.pcaps[("r", "veth1", True)].frames)
        f = bytearray(frames[0])
        f[14 + 8] += 1  # the IPv4 TTL (frame 0 is IPv4: see below)
        frames[0] = bytes(f)
        kf.pcaps[("r", "veth1", True)] = Pcap(LINKTYPE_ETHERNET, tuple(frames))
        return kf

    assert Ether(fp.expected("r", "veth1", True)[0].data).type == 0x0800
    rows = compare_frames(plan.name, fp, _kernel_like(fp, ttl_off_by_one))
    bad = [r for r in rows if r.status != "agrees"]
    assert len(bad) == 1
    row = bad[0]
    assert (row.subject, row.fact, row.status) == ("r/veth1 out", "bytes", "differs")
    assert row.kernel.startswith("frame 0: Ether / IP") and row.sim.startswith("frame 0: Ether / IP")
    assert "first difference: frame 0, byte 22" in row.note
    assert row.note.count("0010  ") == 2 and "<" in row.note  # both hexdumps, the differing line marked


def test_missing_and_extra_frames_differ(forward):
    _, plan, fp = forward

    def drop_last(kf):
        p = kf.pcaps[("ns2", "eth0", False)]
        kf.pcaps[("ns2", "eth0", False)] = Pcap(p.linktype, p.frames[:-1])
        p = kf.pcaps[("ns1", "eth0", False)]
        kf.pcaps[("ns1", "eth0", False)] = Pcap(p.linktype, p.frames + (b"\x00" * 60,))
        return kf

    rows = {(r.subject, r.fact): r for r in compare_frames(plan.name, fp, _kernel_like(fp, drop_last))}
    n = len(fp.expected("ns2", "eth0", False))
    assert rows[("ns2/eth0 in", "frames")].kernel == n - 1 and rows[("ns2/eth0 in", "frames")].status == "differs"
    assert rows[("ns2/eth0 in", "bytes")].kernel == f"frame {n - 1}: -"
    assert "kernel: (no frame)" in rows[("ns2/eth0 in", "bytes")].note
    assert rows[("ns1/eth0 in", "bytes")].sim.endswith(": -")


def test_a_verdict_the_kernel_did_not_give_differs(forward):
    _, plan, fp = forward

    def fast_everywhere(kf):  # the kernel logged nothing: every frame bypassed prerouting
        return attrs.evolve(kf, nflog={ns: [] for ns in kf.nflog})

    rows = [r for r in compare_frames(plan.name, fp, _kernel_like(fp, fast_everywhere)) if r.status != "agrees"]
    assert {r.subject for r in rows} == {"r/veth0 in", "r/veth1 in"} and {r.fact for r in rows} == {
        "flowtable verdicts"}
    first_slow = next(i for i, f in enumerate(fp.expected("r", "veth0", False)) if f.verdict.startswith("slow"))
    veth0 = next(r for r in rows if r.subject == "r/veth0 in")
    assert veth0.note.startswith(f"first difference: frame {first_slow}: kernel fastpath, flowsim slowpath ")


def test_capture_errors_are_error_rows(forward):
    _, plan, fp = forward
    kf = _kernel_like(fp, lambda kf: attrs.evolve(kf, errors=("r/veth0 in: truncated record at byte 24",)))
    rows = compare_frames(plan.name, fp, kf)
    assert rows[0].status == "error" and "truncated" in rows[0].kernel


def test_hexdump_marks_the_line():
    text = hexdump(bytes(range(40)), 17)
    assert text.splitlines()[1].endswith("<") and not text.splitlines()[0].endswith("<")
    assert text.splitlines()[2].startswith("0020  20 21")


# ---------------------------------------------------------------------- a saved boot

@pytest.fixture
def recorded_link_delay(monkeypatch):
    """The saved boot was played from a simulation with flowsim's default 20 us link delay (before
    FRAMES_LINK_DELAY): its injected frames are that simulation's, so its replay simulates the same way."""
    import flowsim.conform.frames as fr
    monkeypatch.setattr(fr, "FRAMES_LINK_DELAY", 20e-6)


def test_saved_boot_agrees_frame_for_frame(recorded_link_delay):
    """A --frames boot of Debian 6.12 (92 frames injected, --max-packets 10), replayed."""
    r = run_conformance([str(FORWARD)], "debian-6.12", results=str(SAVED), frames=True, max_packets=10)
    assert r.status == 0, r.text()
    facts = r.facts
    assert len(facts) == 18 and all(f.status == "agrees" for f in facts)
    assert {f.subject for f in facts if f.fact == "frames"} == {
        "r/veth0 in", "r/veth0 out", "r/veth1 in", "r/veth1 out", "ns1/eth0 in", "ns1/eth0 out",
        "ns2/eth0 in", "ns2/eth0 out"}
    data = r.to_json()
    assert data["frames"] == {"max_packets": 10, "injected": 92, "capped": ["tcp4", "tcp6", "udp4", "udp6"]}
    jsonschema.validate(data, load("conform"))
    # the same boot compared with a longer simulation: the kernel saw fewer frames, and that fails
    r = run_conformance([str(FORWARD)], "debian-6.12", results=str(SAVED), frames=True, max_packets=11)
    assert r.status == 1


def test_cli_frames_json_and_problems(capsys, recorded_link_delay):
    assert main(["conform", str(FORWARD), "--frames", "--max-packets", "10", "--results", str(SAVED),
                 "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["status"] == 0 and data["frames"]["injected"] == 92
    assert main(["conform", str(FORWARD), "--frames", "--max-packets", "10", "--results", str(SAVED),
                 "--problems"]) == 0
    out = capsys.readouterr().out
    assert "frames: 92 injected, at most 10 packets per traffic direction" in out and "18 agree" in out


def test_cli_max_packets_at_least_one(capsys):
    assert main(["conform", str(FORWARD), "--frames", "--max-packets", "0"]) == 2
    assert "at least 1 packet" in capsys.readouterr().err


def test_cooked_capture_of_a_tunnel_is_compared_as_its_packet():
    """libpcap captures an ip6tnl device in cooked mode; flowsim's frame there is the raw packet."""
    from flowsim.conform.frames import FramePlan, SimFrame

    packet = bytes(IP(src="192.0.2.2", dst="198.51.100.2") / TCP())
    fp = FramePlan((SimFrame(0, "r", "t6", packet, 101, False, 1, None),), (), (("r", "t6"),), (), (), (), (), ())
    cooked = struct.pack("!HHH8sH", 0, 769, 0, b"", 0x0800)
    kf = KernelFrames({("r", "t6", False): Pcap(113, (cooked + packet,)), ("r", "t6", True): Pcap(113, ())}, {})
    rows = compare_frames("s", fp, kf)
    assert [r.status for r in rows] == ["agrees"] * 4
    kf = KernelFrames({("r", "t6", False): Pcap(113, (cooked + packet[:-1] + b"\x01",)),
                       ("r", "t6", True): Pcap(113, ())}, {})
    assert [r.status for r in compare_frames("s", fp, kf)] == ["agrees", "differs", "agrees", "agrees"]


def _one_frame_plan(data: bytes, linktype: int, dev: str = "eth0"):
    from flowsim.conform.frames import FramePlan, SimFrame
    return FramePlan((SimFrame(0, "r", dev, data, linktype, True, 1, None),), (), (("r", dev),), (), (), (), (), ())


def _kernel(dev: str, linktype: int, frame: bytes) -> KernelFrames:
    return KernelFrames({("r", dev, True): Pcap(linktype, (frame,)), ("r", dev, False): Pcap(linktype, ())}, {})


def _ipip_frame(ident: int, inner_id: int = 7, vlan: bool = True) -> bytes:
    from scapy.layers.l2 import Dot1Q, Ether
    inner = IP(src="10.0.1.2", dst="10.0.2.2", id=inner_id) / TCP(sport=1000, dport=2000) / (b"x" * 10)
    outer = IP(src="192.0.2.1", dst="192.0.2.2", id=ident, proto=4, flags="DF") / inner
    l2 = Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
    return bytes((l2 / Dot1Q(vlan=10) if vlan else l2) / outer)


def test_ipip_outer_id_is_kernel_random_and_only_that():
    """An ipip outer IPv4 ID (+ checksum) differing alone is 'known' with iptunnel_xmit/__ip_select_ident;
    the inner header's ID, a broken checksum or any other byte still differs."""
    from flowsim.conform.frames import kernel_random_fields
    sim = _ipip_frame(0x1234)
    fp = _one_frame_plan(sim, LINKTYPE_ETHERNET)
    rows = compare_frames("s", fp, _kernel("eth0", LINKTYPE_ETHERNET, _ipip_frame(0xBEEF)))
    row = next(r for r in rows if r.fact == "bytes" and r.subject == "r/eth0 out")
    assert row.status == "known" and "__ip_select_ident" in row.note and "ip_idents_hashrnd" in row.note
    assert row.kernel == "0 frames identical, 1 equal but for kernel-random fields"
    assert kernel_random_fields(_ipip_frame(0xBEEF), sim, LINKTYPE_ETHERNET) == (
        "ipip outer IPv4 ID and header checksum",)
    # the inner packet's ID is the sender's: exact
    assert kernel_random_fields(_ipip_frame(0x1234, inner_id=8), sim, LINKTYPE_ETHERNET) is None
    # the kernel's checksum must be valid
    bad = bytearray(_ipip_frame(0xBEEF))
    bad[18 + 10] ^= 0xFF
    assert kernel_random_fields(bytes(bad), sim, LINKTYPE_ETHERNET) is None
    # not a tunnel frame: an IPv4 ID difference is a difference
    plain = bytes(IP(src="10.0.1.2", dst="10.0.2.2", id=1) / TCP())
    assert kernel_random_fields(bytes(IP(src="10.0.1.2", dst="10.0.2.2", id=2) / TCP()), plain, LINKTYPE_RAW) is None


def test_ip6tnl_flow_label_is_kernel_random_behind_a_cooked_header():
    """An ip6tnl device's cooked capture (ARPHRD_TUNNEL6), outer flow label alone differing: known, with
    ip6_make_flowlabel; the encapsulation limit option is walked; the traffic class still counts."""
    from scapy.layers.inet6 import IPv6, IPv6ExtHdrDestOpt
    from flowsim.conform.frames import kernel_random_fields
    from scapy.layers.inet6 import HBHOptUnknown

    def frame(fl: int, tc: int = 0) -> bytes:
        inner = IPv6(src="2001:db8:1::2", dst="2001:db8:3::2", fl=5) / TCP() / b"y"
        limit = IPv6ExtHdrDestOpt(options=[HBHOptUnknown(otype=4, optdata=b"\x04")])
        return bytes(IPv6(src="2001:db8::1", dst="2001:db8::2", fl=fl, tc=tc) / limit / inner)

    sim = frame(0)
    fp = _one_frame_plan(sim, LINKTYPE_RAW, "t6")
    cooked = struct.pack("!HHH8sH", 4, 769, 0, b"", 0x86DD)
    rows = compare_frames("s", fp, _kernel("t6", LINKTYPE_LINUX_SLL, cooked + frame(0xABCDE)))
    row = next(r for r in rows if r.fact == "bytes" and r.subject == "r/t6 out")
    assert row.status == "known" and "ip6_make_flowlabel" in row.note
    assert kernel_random_fields(frame(0xABCDE, tc=4), sim, LINKTYPE_RAW) is None
    # the inner packet's flow label is the sender's
    inner_changed = bytearray(sim)
    inner_changed[48 + 3] ^= 1
    assert kernel_random_fields(bytes(inner_changed), sim, LINKTYPE_RAW) is None


def test_ipv6_fragment_identification_is_kernel_random_and_only_that():
    """A router that cuts a reassembled IPv6 packet again draws each datagram's fragment identification at random
    (ip6_fragment -> ipv6_select_ident: get_random_u32_above(0)): known, inside an ip6tnl packet too; the
    offset, the M flag and the data still count."""
    from scapy.layers.inet6 import IPv6, IPv6ExtHdrFragment
    from scapy.layers.l2 import Ether
    from flowsim.conform.frames import kernel_random_fields, random_field_offsets

    def frame(ident: int, offset: int = 0, fl: int = 0) -> bytes:
        inner = IPv6(src="2001:db8:1::1", dst="2001:db8:3::2") / IPv6ExtHdrFragment(id=ident, offset=offset, m=1) \
            / UDP(sport=1, dport=2) / bytes(64)
        return bytes(Ether() / IPv6(src="2001:db8:2::1", dst="2001:db8:2::2", fl=fl) / inner)

    sim = frame(1)
    assert kernel_random_fields(frame(0x9ABCDEF0, fl=0x12345), sim, LINKTYPE_ETHERNET) == (
        "ip6tnl outer IPv6 flow label", "IPv6 fragment identification")
    assert kernel_random_fields(frame(0x9ABCDEF0, offset=8), sim, LINKTYPE_ETHERNET) is None
    assert {14 + 40 + 40 + i for i in range(4, 8)} <= random_field_offsets(frame(7), sim, LINKTYPE_ETHERNET)
    bare = bytes(IPv6(src="2001:db8:1::1", dst="2001:db8:3::2") / IPv6ExtHdrFragment(id=1) / UDP() / b"x")
    other = bytearray(bare)
    other[44:48] = (0xFFFFFFFF).to_bytes(4, "big")
    assert kernel_random_fields(bytes(other), bare, LINKTYPE_RAW) == ("IPv6 fragment identification",)


def test_a_fragment_quoted_by_an_icmpv6_error_keeps_only_its_identification_random():
    """conform-frag6-later on 7.2: remote answers Packet Too Big for fragments the router cut again; the error
    quotes a fragment whose identification the router drew (ipv6_select_ident), and the ICMPv6 checksum covers
    it. Known, inside the tunnel too (the error goes back through tun0), when both checksums are right; any other
    quoted byte still counts."""
    from scapy.layers.inet6 import ICMPv6PacketTooBig, IPv6, IPv6ExtHdrFragment
    from scapy.layers.l2 import Ether
    from flowsim.conform.frames import kernel_random_fields, random_field_offsets

    def error(ident: int, fl: int = 0, outer_fl: int | None = None, dport: int = 2) -> bytes:
        quoted = IPv6(src="2001:db8:1::1", dst="2001:db8:3::2", hlim=62) / IPv6ExtHdrFragment(id=ident, m=1) \
            / UDP(sport=1, dport=dport) / bytes(64)
        ptb = IPv6(src="2002:db8:1::2", dst="2001:db8:1::1", fl=fl) / ICMPv6PacketTooBig(mtu=1400) / quoted
        if outer_fl is None:
            return bytes(Ether() / ptb)
        return bytes(Ether() / IPv6(src="2001:db8:2::2", dst="2001:db8:2::1", fl=outer_fl) / ptb)

    assert kernel_random_fields(error(0x3D701A3F, fl=0x8BC6D), error(1), LINKTYPE_ETHERNET) == (
        "ICMPv6 error's flow label", "IPv6 fragment identification")
    assert kernel_random_fields(error(0x3D701A3F, 5, outer_fl=7), error(1, outer_fl=0), LINKTYPE_ETHERNET) == (
        "ip6tnl outer IPv6 flow label", "ICMPv6 error's flow label", "IPv6 fragment identification")
    assert kernel_random_fields(error(0x3D701A3F, dport=3), error(1), LINKTYPE_ETHERNET) is None
    broken = bytearray(error(0x3D701A3F))
    broken[14 + 42] ^= 0xFF  # the ICMPv6 checksum
    assert kernel_random_fields(bytes(broken), error(1), LINKTYPE_ETHERNET) is None
    assert {14 + 48 + 44 + i for i in range(4)} | {14 + 42, 14 + 43} <= random_field_offsets(
        error(7), error(1), LINKTYPE_ETHERNET)


@pytest.mark.parametrize("arphrd, flowsim_linktype", [(512, 101), (778, 101), (823, 101), (769, 101)],
                         ids=["ppp", "gre", "ip6gre", "ip6tnl"])
def test_every_cooked_capture_is_compared_as_its_packet(arphrd, flowsim_linktype):
    """libpcap's cooked captures (ppp always; ip6tnl, gre, ip6gre: ARPHRD types it has no mapping for) lose
    their 16-byte header; a protocol field that does not match the packet keeps it (and differs)."""
    packet = bytes(IP(src="192.0.2.2", dst="198.51.100.2") / TCP())
    fp = _one_frame_plan(packet, flowsim_linktype, "d")
    good = struct.pack("!HHH8sH", 4, arphrd, 0, b"", 0x0800) + packet
    assert [r.status for r in compare_frames("s", fp, _kernel("d", LINKTYPE_LINUX_SLL, good))] == ["agrees"] * 2 + [
        "agrees"] * 2
    wrong = struct.pack("!HHH8sH", 4, arphrd, 0, b"", 0x86DD) + packet
    statuses = [r.status for r in compare_frames("s", fp, _kernel("d", LINKTYPE_LINUX_SLL, wrong))]
    assert "differs" in statuses


def test_both_sides_cooked_compare_whole_frames():
    """flowsim records ppp/gre devices cooked as well: then the cooked headers are compared too."""
    packet = bytes(IP(src="192.0.2.2", dst="198.51.100.2") / TCP())
    frame = struct.pack("!HHH8sH", 4, 512, 0, b"", 0x0800) + packet
    fp = _one_frame_plan(frame, LINKTYPE_LINUX_SLL, "ppp0")
    assert all(r.status == "agrees" for r in compare_frames("s", fp, _kernel("ppp0", LINKTYPE_LINUX_SLL, frame)))
    other = struct.pack("!HHH8sH", 0, 512, 0, b"", 0x0800) + packet
    assert any(r.status == "differs" for r in compare_frames("s", fp, _kernel("ppp0", LINKTYPE_LINUX_SLL, other)))


def test_icmp_error_ipv4_id_is_kernel_random():
    """A router's fragmentation-needed error (no DF) carries a __ip_select_ident ID: masked with its checksum
    (sid, conform-mtu: 0x707a against flowsim's 1); the quoted packet and an echo reply stay exact."""
    from scapy.layers.inet import ICMP, UDP
    from flowsim.conform.frames import kernel_random_fields

    def err(ident: int, quoted_id: int = 5) -> bytes:
        quoted = IP(src="192.0.2.2", dst="198.51.100.2", id=quoted_id, flags="DF") / UDP(sport=1, dport=2)
        return bytes(IP(src="192.0.2.1", dst="192.0.2.2", id=ident, tos=0xC0) / ICMP(type=3, code=4, nexthopmtu=1500)
                     / quoted)
    assert kernel_random_fields(err(0x707A), err(1), LINKTYPE_RAW) == ("ICMP error's IPv4 ID and header checksum",)
    assert kernel_random_fields(err(0x707A, quoted_id=6), err(1), LINKTYPE_RAW) is None
    echo = [bytes(IP(src="192.0.2.1", dst="192.0.2.2", id=i) / ICMP(type=0)) for i in (1, 2)]
    assert kernel_random_fields(echo[1], echo[0], LINKTYPE_RAW) is None


def test_icmpv6_error_flow_label_is_kernel_random():
    """A router's Packet Too Big carries an automatic flow label (sid: 0x55db5, flowsim 0): masked; the
    quoted packet stays exact, and an echo reply's label is not masked."""
    from scapy.layers.inet6 import ICMPv6EchoReply, ICMPv6PacketTooBig, IPv6
    from flowsim.conform.frames import kernel_random_fields

    def ptb(fl: int, quoted_fl: int = 0) -> bytes:
        quoted = IPv6(src="dead:1::99", dst="dead:2::99", fl=quoted_fl) / TCP()
        return bytes(IPv6(src="dead:1::1", dst="dead:1::99", fl=fl) / ICMPv6PacketTooBig(mtu=1500) / quoted)
    assert kernel_random_fields(ptb(0x55DB5), ptb(0), LINKTYPE_RAW) == ("ICMPv6 error's flow label",)
    assert kernel_random_fields(ptb(0x55DB5, quoted_fl=1), ptb(0), LINKTYPE_RAW) is None
    echo = [bytes(IPv6(src="dead:1::1", dst="dead:1::99", fl=f) / ICMPv6EchoReply()) for f in (0, 7)]
    assert kernel_random_fields(echo[1], echo[0], LINKTYPE_RAW) is None


def test_frames_leave_pppoe_session_devices_alone():
    """A PPPoE session's Ethernet devices get flowsim's MACs before the session starts; --frames must not
    set them again (a MAC change, even to the same address, flushes the session: sid showed no ppp0)."""
    topo = load_topology(ROOT / "topologies" / "ip6ip6-over-pppoe.toml")
    plan = plan_scenario(topo, frames=True)
    script = render_frames_scenario(topo, plan, simulate_frames(topo, plan, "linux-7.2", 2))
    assert "run - /usr/sbin/ip -n cpe link set dev eth1 address" not in script
    assert "run - /usr/sbin/ip -n bras link set dev eth0 address" not in script
    assert "run - /usr/sbin/ip -n cpe link set dev eth0 address" in script


def test_verdicts_pair_a_packet_whose_dscp_the_ingress_chain_rewrote():
    """selftest-dscp-ingress: a netdev ingress chain sets cs3 after the capture and before the log chain;
    the logged packet is still the captured frame's (sid: every slow-path frame read as fast path)."""
    from flowsim.conform.frames import FramePlan, SimFrame
    pkt = IP(src="10.0.1.99", dst="10.0.2.99", tos=0) / TCP(flags="S")
    frame = bytes(Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / pkt)
    logged = bytes(IP(src="10.0.1.99", dst="10.0.2.99", tos=0x60) / TCP(flags="S"))
    fp = FramePlan((SimFrame(0, "r", "veth0", frame, LINKTYPE_ETHERNET, False, 1, "slowpath no-flow-entry"),),
                   (), (("r", "veth0"),), (), (), (), (), ("r",))
    kf = KernelFrames({("r", "veth0", False): Pcap(LINKTYPE_ETHERNET, (frame,)),
                       ("r", "veth0", True): Pcap(LINKTYPE_ETHERNET, ())}, {"r": [logged]})
    row = next(r for r in compare_frames("s", fp, kf) if r.fact == "flowtable verdicts")
    assert row.status == "agrees" and row.kernel == "slowpath 1"


def test_pppoe_frames_reduce_to_their_packet_and_ppp_devices_are_cooked():
    """A PPPoE session frame's packet follows the 6-byte PPPoE and 2-byte PPP headers (verdict pairing and
    kernel-random fields find it); flowsim's ppp0 frames carry the cooked header libpcap records."""
    from flowsim.conform.frames import l3_bytes
    pkt = bytes(IP(src="192.0.2.2", dst="198.51.100.2") / TCP())
    frame = bytes(Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02", type=0x8864)) + \
        bytes.fromhex("1100123400") + bytes([len(pkt) + 2]) + b"\x00\x21" + pkt
    assert l3_bytes(frame, LINKTYPE_ETHERNET) == pkt
    topo = load_topology(ROOT / "topologies" / "ip6ip6-over-pppoe.toml")
    plan = plan_scenario(topo, frames=True)
    fp = simulate_frames(topo, plan, "linux-7.2", 1)
    ppp = [f for f in fp.frames if f.dev == "ppp0"]
    assert ppp and all(f.linktype == LINKTYPE_LINUX_SLL and f.data[2:4] == b"\x02\x00" for f in ppp)
    assert all(f.data[:2] == (b"\x00\x04" if f.outbound else b"\x00\x00") for f in ppp)


def test_frames_simulation_carries_one_packet_at_a_time():
    """The guest runs each injected frame to its end before the next: flowsim is run so too.  bridge-vlan
    under linux-6.12: the server's data crossing the client's FIN reaches the router first, fast path, as
    the 6.12 guest showed (with the 20 us default flowsim had it after the FIN: 'flow-teardown')."""
    topo = load_topology(ROOT / "topologies" / "bridge-vlan.toml")
    plan = plan_scenario(topo, frames=True)
    fp = simulate_frames(topo, plan, "linux-6.12", 3)
    got = [f.verdict.split()[0] for f in fp.frames if f.verdict and (f.netns, f.dev) == ("nsr1", "veth1")]
    assert got == ["slowpath", "fastpath", "fastpath", "fastpath", "slowpath"]


def test_l3_bytes_of_a_cooked_frame_is_its_packet():
    """A Linux cooked (SLL) capture — ip6tnl, ppp, gre — carries 16 bytes before the packet; the slow-path log
    (nflog) holds the packet alone, so a cooked frame must be paired by what follows the header."""
    from flowsim.conform.frames import l3_bytes
    from flowsim.kernel.capture import LINKTYPE_LINUX_SLL

    packet = bytes.fromhex("6000000000083b40") + bytes(32)
    sll = bytes.fromhex("0000030100000000000000000000") + b"\x86\xdd"    # host, ARPHRD_TUNNEL6, no address
    assert l3_bytes(sll + packet, LINKTYPE_LINUX_SLL) == packet


def test_a_packet_through_stacked_flowtable_devices_is_logged_once():
    """openwrt-fw4 lists wan, its VLAN wan.7 and the PPPoE session pppoe-wan on it in one flowtable: a packet
    from the BRAS meets the hook of each (three slow-path verdicts) and the log chain at prerouting once.  Each
    device is paired with the log on its own; with one shared pool, wan took the entries and wan.7 and
    pppoe-wan read as fast-pathed (Debian 6.1, --frames: 11 frames each)."""
    (topo, plan), = load_scenarios([str(ROOT / "topologies" / "openwrt-fw4.toml")])
    fp = simulate_frames(topo, plan, "linux-6.1", 3)
    pcaps = {}
    for ns, dev in fp.captured:
        for out in (False, True):
            want = fp.expected(ns, dev, out)
            pcaps[(ns, dev, out)] = Pcap(want[0].linktype if want else LINKTYPE_ETHERNET,
                                         tuple(f.data for f in want))
    per_device: dict = {}
    for f in fp.frames:
        if f.netns == "router" and f.verdict and f.verdict.startswith("slowpath"):
            per_device.setdefault((f.dev, _key(f)), 0)
            per_device[(f.dev, _key(f))] += 1
    once: collections.Counter = collections.Counter()
    for (_dev, key), n in per_device.items():      # the most any one device saw it: one log entry each time
        once[key] = max(once[key], n)
    stacked = [key for key in once if sum(k == key for _, k in per_device) > 1]
    assert stacked                                  # packets that crossed more than one flowtable device
    kf = KernelFrames(pcaps, {"router": [k for k, n in once.items() for _ in range(n)]})
    rows = [r for r in compare_frames(plan.name, fp, kf) if r.fact == "flowtable verdicts"]
    assert {r.subject for r in rows} >= {"router/wan in", "router/wan.7 in", "router/pppoe-wan in"}
    assert all(r.status == "agrees" for r in rows), [(r.subject, r.note) for r in rows if r.status != "agrees"]


def _key(f) -> bytes:
    return l3_bytes(f.data, f.linktype)


def test_esp_frames_are_compared_by_header_and_plaintext():
    """The IV of an ESP frame is the sequence number XOR a salt the kernel draws per SA (seqiv_aead_encrypt,
    crypto/seqiv.c; aead_init_geniv, crypto/geniv.c): IV, ciphertext and ICV differ per boot.  With the SA's
    key the frames are opened and compared: the same header and plaintext is the known, kernel-random
    difference; another plaintext, or no key, is a real one."""
    from flowsim.conform import known
    from flowsim.conform.frames import kernel_random_fields
    from flowsim.kernel import esp
    from flowsim.kernel.pkt import build_ipv4, ip_addr, tcp_segment

    src, dst = ip_addr(ipaddress.ip_address("10.0.1.99")), ip_addr(ipaddress.ip_address("10.0.2.99"))
    inner = build_ipv4(src, dst, 6, tcp_segment(src, dst, 40000, 12345, 1, 0, 0x02))
    other = build_ipv4(src, dst, 6, tcp_segment(src, dst, 40000, 12345, 2, 0, 0x02))
    kernel_sa = esp.XfrmState(spi=0x1001, mode="tunnel", iv_salt=0x5A5A1234, tunnel=("192.168.10.1", "192.168.10.2"))
    model_sa = attrs.evolve(kernel_sa, iv_salt=0)
    eth = b"\x02" * 12 + b"\x08\x00"
    k = eth + esp.xfrm_tunnel_esp_output(kernel_sa, inner, 7, 4, 0)[0]
    s = eth + esp.xfrm_tunnel_esp_output(model_sa, inner, 7, 4, 0)[0]
    assert k != s
    keys = {0x1001: kernel_sa.key}
    assert kernel_random_fields(k, s, LINKTYPE_ETHERNET, keys) == ("ESP IV, ciphertext and ICV",)
    assert kernel_random_fields(k, s, LINKTYPE_ETHERNET) is None                   # no key: a real difference
    s_other = eth + esp.xfrm_tunnel_esp_output(model_sa, other, 7, 4, 0)[0]
    assert kernel_random_fields(k, s_other, LINKTYPE_ETHERNET, keys) is None       # another plaintext
    s_seq = eth + esp.xfrm_tunnel_esp_output(model_sa, inner, 8, 4, 0)[0]
    assert kernel_random_fields(k, s_seq, LINKTYPE_ETHERNET, keys) is None         # another sequence number
    assert "ESP IV, ciphertext and ICV" in known.KERNEL_RANDOM


# ---------------------------------------------------------------------- GSO skbs (pppoe-over-vlan's TSO upload)

POV = ROOT / "topologies" / "pppoe-over-vlan.toml"


@pytest.fixture(scope="module")
def tso():
    (topo, plan), = load_scenarios([str(POV)], frames=True, max_packets=3)
    return topo, plan, simulate_frames(topo, plan, "linux-7.2", 3)


def test_gso_skbs_are_injected_with_a_virtio_net_hdr(tso):
    """A GSO skb the client sends is written through a PACKET_VNET_HDR socket (packet_snd ->
    virtio_net_hdr_to_skb): VIRTIO_NET_HDR_GSO_TCPV4, gso_size as flowsim's skb, hdr_len up to the TCP
    payload; the other frames as they are."""
    _, plan, fp = tso
    gso = [(k, f) for k, f in enumerate(fp.inject) if f.gso_size]
    assert len(gso) == 3 and all(f.gso_size == 1400 and len(f.data) > 16000 for _, f in gso)
    files = frames_files(fp, plan.index)
    script = render_frames_scenario(*tso[:2], fp)
    for k, f in enumerate(fp.inject):
        name = f"conform/s{plan.index}/f/{k}" + (GSO_SUFFIX if f.gso_size else "")
        assert name.removeprefix("conform") in script  # the file the script injects is the file written
        data = files[name]
        if not f.gso_size:
            assert data == f.data
            continue
        flags, vtype, hdr_len, gso_size, start, off = struct.unpack("<BBHHHH", data[:10])
        assert (flags, vtype, hdr_len, gso_size, start, off) == (0, 1, 14 + 20 + 20, 1400, 0, 0)
        assert data[10:] == f.data
    assert "setsockopt-int=263:15:1" in script and f"*{GSO_SUFFIX})" in script
    # TSO back on where the GSO skbs are sent, 'gso' where they are received whole (libpcap's slot size)
    assert [ln.split("NS ")[1] for ln in script.splitlines() if " -K " in ln] == [
        "client /usr/sbin/ethtool -K eth0 tso on || return", "cpe /usr/sbin/ethtool -K lan0 gso on || return"]


def test_gso_type_a_packet_socket_cannot_carry():
    """virtio_net_hdr has TCPv4/TCPv6 (and UDP types that need a seeded checksum): an IPIP GSO skb has none."""
    assert virtio_gso_type(SKB_GSO_TCPV4) == 1 and virtio_gso_type(SKB_GSO_TCPV6 | SKB_GSO_DODGY) == 4
    assert virtio_gso_type(SKB_GSO_TCPV4 | SKB_GSO_IPXIP4) is None and virtio_gso_type(SKB_GSO_UDP_L4) is None


def test_gso_checksum_seed_is_a_kernel_set_field(tso):
    """Captures of the unsegmented skb show the pseudo-header seed validate_xmit_skb -> tcp4_gso_segment
    wrote (10.0.0.1 -> 10.0.0.2, 4020 TCP bytes: 0x23bd, as a host kernel wrote it for this project); it
    is checked, not masked: any other value, or any other byte changed, is a difference."""
    f = bytes(Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / IP(src="10.0.0.1", dst="10.0.0.2")
              / TCP(sport=1, dport=2, flags="A") / (b"x" * 4000))
    seeded = f[:50] + b"\x23\xbd" + f[52:]
    assert tcp_checksum_seed(seeded, f, LINKTYPE_ETHERNET)
    assert not tcp_checksum_seed(f[:50] + b"\x23\xbe" + f[52:], f, LINKTYPE_ETHERNET)
    assert not tcp_checksum_seed(seeded[:-1] + b"y", f, LINKTYPE_ETHERNET)
    _, plan, fp = tso

    def seed_the_gso_skbs(kf):
        for key in (("client", "eth0", True), ("cpe", "lan0", False)):
            frames = []
            for sf in fp.expected(*key):
                d = bytearray(sf.data)
                if sf.gso_size:
                    ip = IP(d[14:])
                    pseudo = bytes(ip)[12:20] + struct.pack("!HH", 6, ip.len - 20)
                    s = sum(struct.unpack(f"!{len(pseudo) // 2}H", pseudo))
                    while s >> 16:
                        s = (s & 0xFFFF) + (s >> 16)
                    d[50:52] = s.to_bytes(2, "big")
                frames.append(bytes(d))
            kf.pcaps[key] = Pcap(LINKTYPE_ETHERNET, tuple(frames))
        return kf

    rows = {(r.subject, r.fact): r for r in compare_frames(plan.name, fp, _kernel_like(fp, seed_the_gso_skbs))}
    assert all(r.status in ("agrees", "known") for r in rows.values())
    row = rows[("cpe/lan0 in", "bytes")]
    assert row.status == "known" and row.kernel.endswith("3 equal but for kernel-set fields")
    assert TCP_SEED in row.note and "tcp4_gso_segment" in row.note
    assert rows[("cpe/lan0 in", "flowtable verdicts")].status == "agrees"


TSO_SAVED = ROOT / "tests" / "data" / "conform" / "frames-pppoe-over-vlan-tso-debian-sid.log.gz"


def test_saved_tso_boot_agrees_on_linux_7_2():
    """pppoe-over-vlan on Debian sid's 7.2.13, --frames --max-packets 3, replayed: the client's three
    16000-byte GSO skbs reach the CPE whole, take the fast path, and leave cut into 1400-byte segments,
    each with its own VLAN 7 + PPPoE headers (nf_flow_encap_gso_xmit: skb_gso_segment, then
    nf_flow_encap_push per segment) — byte for byte as flowsim cuts them.  Only the seed in the unsegmented
    skb's TCP checksum is kernel-set."""
    r = run_conformance([str(POV)], "debian-sid", results=str(TSO_SAVED), frames=True, max_packets=3)
    assert r.status == 0, r.text()
    rows = {(f.subject, f.fact): f for f in r.facts}
    assert {k for k, f in rows.items() if f.status == "known"} == {("client/eth0 out", "bytes"),
                                                                     ("cpe/lan0 in", "bytes")}
    assert all(f.status == "agrees" for k, f in rows.items() if f.status != "known")
    assert rows[("cpe/lan0 in", "flowtable verdicts")].kernel == "fastpath 11, slowpath 6"
    assert rows[("cpe/eth1 out", "frames")].kernel == 50
    # ... and a model that did not cut the GSO skb on the fast path would be told so
    seg = [f for f in r.facts if f.subject == "cpe/eth1 out" and f.fact == "bytes"]
    assert seg and seg[0].kernel == "50 frames identical"


def test_virtio_net_hdr_of_an_ipv6_gso_skb():
    """TCPv6: VIRTIO_NET_HDR_GSO_TCPV6, hdr_len past the 40-byte header and the TCP options; the seed is the
    IPv6 pseudo-header's (__tcp_v6_send_check)."""
    from scapy.layers.inet6 import IPv6
    from flowsim.conform.frames import SimFrame, virtio_net_hdr
    f = bytes(Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / IPv6(src="2001:db8::1", dst="2001:db8::2")
              / TCP(sport=1, dport=2, flags="A", options=[("NOP", None), ("NOP", None), ("Timestamp", (1, 2))])
              / (b"y" * 3000))
    sf = SimFrame(0, "a", "eth0", f, LINKTYPE_ETHERNET, True, 1, None, 1200, SKB_GSO_TCPV6)
    assert struct.unpack("<BBHHHH", virtio_net_hdr(sf)) == (0, 4, 14 + 40 + 32, 1200, 0, 0)
    pseudo = bytes(IPv6(f[14:]))[8:40] + struct.pack("!IxxxB", 3032, 6)
    s = sum(struct.unpack("!20H", pseudo))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    seeded = f[:14 + 40 + 16] + s.to_bytes(2, "big") + f[14 + 40 + 18:]
    assert tcp_checksum_seed(seeded, f, LINKTYPE_ETHERNET) and not tcp_checksum_seed(f, seeded, LINKTYPE_ETHERNET)
