"""``flowsim run --pcapng``: one pcapng per run, read back by flowsim, scapy and (when installed) tshark."""

from __future__ import annotations

import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from flowsim.config.topology import load_topology
from flowsim.kernel.capture import LINKTYPE_ETHERNET, LINKTYPE_LINUX_SLL, PcapngWriter, read_capture
from flowsim.sim.report import build_report
from flowsim.sim.simulation import Simulation

TOPOLOGIES = Path(__file__).resolve().parent.parent / "topologies"


def _blocks(path: Path):
    """(type, body) of every block of a little-endian pcapng file."""
    data = path.read_bytes()
    at = 0
    while at < len(data):
        btype, blen = struct.unpack_from("<II", data, at)
        yield btype, data[at + 8:at + blen - 4]
        at += blen


def _options(body: bytes):
    out = {}
    at = 0
    while at + 4 <= len(body):
        code, n = struct.unpack_from("<HH", body, at)
        if code == 0:
            break
        out.setdefault(code, []).append(body[at + 4:at + 4 + n])
        at += 4 + n + (-n % 4)
    return out


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    topo = load_topology(TOPOLOGIES / "ip6ip6-rx.toml")
    path = tmp_path_factory.mktemp("pcapng") / "run.pcapng"
    sim = Simulation(topo, pcapng=path).run(0.2)
    return sim, build_report(sim), path


def _frames(path: Path):
    """(interface name, link type, epb_flags, packet id, comment) per enhanced packet block."""
    ifaces, out = [], []
    for btype, body in _blocks(path):
        if btype == 1:
            linktype = struct.unpack_from("<H", body)[0]
            ifaces.append((_options(body[8:])[2][0].decode(), linktype))
        elif btype == 6:
            iface, _hi, _lo, caplen, _wire = struct.unpack_from("<IIIII", body)
            opts = _options(body[20 + caplen + (-caplen % 4):])
            flags = struct.unpack("<I", opts[2][0])[0] if 2 in opts else None
            pid = struct.unpack("<Q", opts[5][0])[0] if 5 in opts else None
            comment = opts[1][0].decode() if 1 in opts else None
            out.append((*ifaces[iface], flags, pid, comment))
    return out


def test_interfaces_named_netns_dev_with_their_link_types(run):
    _sim, _report, path = run
    frames = _frames(path)
    names = {(name, lt) for name, lt, *_ in frames}
    assert ("router/eth0", LINKTYPE_ETHERNET) in names
    # ip6tnl: Linux cooked, as tcpdump recorded ARPHRD_TUNNEL6 in the conformance guest (ipip: raw IP)
    assert ("router/tun0", LINKTYPE_LINUX_SLL) in names
    assert all("/" in name for name, _ in names)


def test_verdict_comments_match_the_report(run):
    _sim, report, path = run
    (ft,) = [f for f in report["flowtables"] if (f["netns"], f["name"]) == ("router", "ft")]
    comments = [c for *_, c in _frames(path) if c is not None]
    assert comments.count("fastpath") == ft["fastpath"] > 0
    assert sum(c.startswith("slowpath ") for c in comments) == ft["slowpath"] > 0
    assert sum(c.startswith("drop ") for c in comments) == ft.get("drops", 0)
    # the hook runs on received frames only, on the devices the flowtable lists
    for name, _lt, flags, _pid, comment in _frames(path):
        if comment is not None:
            assert flags == 1 and name in ("router/eth0", "router/eth1"), (name, flags, comment)


def test_direction_and_packet_ids_link_frames(run):
    _sim, _report, path = run
    frames = _frames(path)
    assert {f[2] for f in frames} == {1, 2}  # inbound and outbound
    by_id: dict = {}
    for name, _lt, _flags, pid, _c in frames:
        assert pid is not None
        by_id.setdefault(pid, []).append(name)
    # a forwarded packet crosses several devices under one id: client -> router -> tunnel -> server
    assert max(len(v) for v in by_id.values()) >= 4


def test_flowsim_and_scapy_read_it(run):
    _sim, _report, path = run
    ours = list(read_capture(path))
    assert len(ours) == len(_frames(path)) > 0
    scapy = pytest.importorskip("scapy.all")
    assert len(scapy.rdpcap(str(path))) == len(ours)


def test_tshark_filters_the_comments(run):
    tshark = shutil.which("tshark")
    if tshark is None:
        pytest.skip("tshark is not installed (Debian: apt-get install tshark)")
    _sim, report, path = run
    (ft,) = [f for f in report["flowtables"] if (f["netns"], f["name"]) == ("router", "ft")]
    out = subprocess.run([tshark, "-r", str(path), "-Y", 'frame.comment contains "slowpath"'],
                         capture_output=True, text=True, check=True).stdout
    assert len(out.splitlines()) == ft["slowpath"]


def test_writer_round_trip(tmp_path):
    path = tmp_path / "w.pcapng"
    eth = bytes(6) + bytes(range(1, 7)) + b"\x86\xdd" + bytes([0x60]) + bytes(39)
    with PcapngWriter(path) as w:
        a = w.device("ns/eth0", "ether")
        b = w.device("ns/tun0", "tunnel6")
        c = w.device("ns/ppp0", "ppp")
        w.write(a, eth, 1.5, outbound=False, packetid=7, comment="fastpath")
        w.write(b, bytes(12) + eth[12:], 1.5, outbound=True, packetid=7)
        w.write(c, bytes(12) + eth[12:], 2.0)
    frames = list(read_capture(path))
    assert [f.data for f in frames] == [eth, bytes(12) + eth[12:], bytes(12) + eth[12:]]
    assert [f.linktype for f in frames] == [1, 113, 113]
    got = _frames(path)
    assert got[0] == ("ns/eth0", 1, 1, 7, "fastpath")
    assert got[1] == ("ns/tun0", 113, 2, 7, None)
