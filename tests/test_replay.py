"""``flowsim run --replay NETNS:DEV=CAPTURE``: a capture's frames injected at a device's receive path (issue 17 item 6).

The reference is flowsim's own capture: conform-forward.toml run with
``--pcap-dir`` and ``--pcapng``, then its router's two ports replayed into the
same topology without its traffic must give the same flowtable verdicts.
"""

from __future__ import annotations

import collections

import json
import struct
from pathlib import Path

import jsonschema
import pytest

from flowsim.cli import main
from flowsim.config.network import mac_for
from flowsim.kernel.capture import (
    INBOUND, LINKTYPE_ETHERNET, LINKTYPE_LINUX_SLL2, LINKTYPE_RAW, OUTBOUND, PcapngWriter, PcapWriter, read_capture,
)
from flowsim.kernel.headers import mac_aton
from flowsim.schemas import load

TOPO = Path(__file__).resolve().parent.parent / "topologies" / "conform-forward.toml"
R0, R1 = mac_aton(mac_for("r", "veth0")), mac_aton(mac_for("r", "veth1"))


def run(capsys, *args):
    rc = main(["run", *map(str, args)])
    out = capsys.readouterr()
    return rc, out.out, out.err


def run_json(capsys, *args) -> dict:
    rc, out, err = run(capsys, TOPO, "--json", "-q", *args)
    assert rc == 0, err
    return json.loads(out)


@pytest.fixture(scope="module")
def original(tmp_path_factory):
    """The reference run: its report, per-device pcaps and one pcapng."""
    d = tmp_path_factory.mktemp("replay")
    rc = main(["run", str(TOPO), "--json", "-q", "--pcap-dir", str(d / "caps"), "--pcapng", str(d / "run.pcapng")])
    assert rc == 0
    return d


@pytest.fixture(scope="module")
def reference(original, tmp_path_factory):
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(["run", str(TOPO), "--json", "-q"]) == 0
    return json.loads(buf.getvalue())


def _ft(report):
    (ft,) = report["flowtables"]
    return ft["fastpath"], ft["slowpath"], ft["reasons"], ft["drops"]


def _books(report):
    p = report["packets"]
    assert p["injected"] == p["delivered"] + p["dropped"] + p["in_flight"]
    assert p["injected"] == sum(o["injected"] for o in p["by_origin"].values())


def _ct(report):
    return [(e["original"], e["state"], e["status"], e["counters"]) for e in report["conntrack"]["r"]]


def test_both_ports_merged_give_the_original_counts(capsys, original, reference):
    """The router's two pcaps replayed together (--no-traffic): the same fast/slow counts, reasons and conntrack."""
    caps = original / "caps"
    rep = run_json(capsys, "--no-traffic", "--replay", f"r:veth0={caps / 'r-veth0.pcap'}",
                   "--replay", f"r:veth1={caps / 'r-veth1.pcap'}")
    assert _ft(rep) == _ft(reference) and _ft(rep)[0] > 0 and _ft(rep)[1] > 0
    assert _ct(rep) == _ct(reference)
    _books(rep)
    assert rep["traffic"] == [] and rep["packets"]["by_origin"]["replay"]["injected"] == rep["packets"]["injected"]
    # every frame listed once; what veth0 sent (its own source MAC) is skipped, the rest left through veth1
    frames = {(e["device"], e["index"]) for e in rep["replay"]}
    assert len(frames) == len(rep["replay"]) == 2 * len(list(read_capture(caps / "r-veth0.pcap")))
    for e in rep["replay"]:
        if e["fate"] == "skipped":
            assert e["reason"] == f"sent by {e['device'].split('/')[1]}" and e["verdicts"] == []
        else:
            assert e["fate"] == "forwarded" and e["where"] != e["device"] and e["out"] == [e["where"]]
            (v,) = e["verdicts"]
            assert v["hook"] == e["device"] and v["verdict"] in ("fastpath", "slowpath")
    times = [e["time"] for e in rep["replay"]]
    assert times == sorted(times)  # merged by timestamp
    src = {s["device"]: s for s in rep["replay_sources"]}
    assert sum(s["verdicts"].get("fastpath", 0) for s in src.values()) == _ft(reference)[0]
    jsonschema.validate(rep, load("run"))


@pytest.mark.parametrize("name, fmt", [
    ("selftest-nat", "pcap"),  # NAT: the frames on both sides of the masquerade
    ("dsa", "pcap"),  # DSA user ports in a bridge: frames routed out of lan1 carry br-lan's MAC
    ("ipip", "pcapng"),  # frames of both ports in one microsecond: only one file keeps their order
])
def test_other_topologies_give_the_original_counts(capsys, tmp_path, name, fmt):
    """Every flowtable port of a shipped topology replayed: the original fast/slow counts and reasons, exactly."""
    topo = TOPO.parent / f"{name}.toml"
    rc = main(["run", str(topo), "-q", "--json", "--pcap-dir", str(tmp_path), "--pcapng", str(tmp_path / "all.pcapng")])
    ref = json.loads(capsys.readouterr().out)
    assert rc == 0
    args = []
    for ft in ref["flowtables"]:
        for dev in ft["devices"]:
            path = tmp_path / f"{ft['netns']}-{dev}.pcap"
            if path.exists():
                args += ["--replay", f"{ft['netns']}:{dev}={path if fmt == 'pcap' else tmp_path / 'all.pcapng'}"]
    rc, out, err = run(capsys, topo, "--json", "-q", "--no-traffic", *args)
    assert rc == 0, err
    rep = json.loads(out)
    assert [_ft_of(f) for f in rep["flowtables"]] == [_ft_of(f) for f in ref["flowtables"]]
    _books(rep)
    # what the original run's flowtable routers dropped (selftest-nat: full-MSS segments over the 1500-byte
    # link, when writes queued behind the congestion window merged: frag-needed) is dropped again
    fates = collections.Counter(e["fate"] for e in rep["replay"])
    assert set(fates) - {"dropped"} == {"forwarded", "skipped"}
    replayed = {ft["netns"] for ft in ref["flowtables"]}
    assert fates["dropped"] == sum(d["where"].split()[0] in replayed for d in ref["drop_samples"])


def _ft_of(ft):
    return ft["netns"], ft["name"], ft["fastpath"], ft["slowpath"], ft["reasons"], ft["drops"]


def test_one_port_alone_breaks_the_handshake(capsys, original, reference):
    """Only the LAN port: no reply ever comes, so no TCP connection gets offloaded as in the original run."""
    rep = run_json(capsys, "--no-traffic", "--replay", f"r:veth0={original / 'caps' / 'r-veth0.pcap'}")
    _books(rep)
    assert _ft(rep) != _ft(reference)
    assert all(e["state"] != "ESTABLISHED" for e in rep["conntrack"]["r"])


def test_pcapng_of_the_whole_run_by_interface_and_direction(capsys, original, reference):
    """flowsim's own pcapng (every device, epb_flags): each port takes its interface's inbound frames."""
    ng = original / "run.pcapng"
    rep = run_json(capsys, "--no-traffic", "--replay", f"r:veth0={ng}", "--replay", f"r:veth1={ng}")
    assert _ft(rep) == _ft(reference) and _ct(rep) == _ct(reference)
    _books(rep)
    frames = list(read_capture(ng))
    outbound = sum(f.direction == OUTBOUND and f.interface in ("r/veth0", "r/veth1") for f in frames)
    assert sum(e["fate"] == "skipped" for e in rep["replay"]) == outbound


def _one_frame_pcapng(path: Path, frames):
    with PcapngWriter(path) as w:
        i = w.interface("veth0")
        for data, outbound in frames:
            w.write(i, data, 0.0, outbound=outbound)


def _syn(original) -> bytes:
    """The first frame ns1 sent to the router (as received on r/veth0)."""
    return next(f.data for f in read_capture(original / "caps" / "r-veth0.pcap") if f.data[6:12] != R0)


def test_direction_flag_beats_the_mac(capsys, original, tmp_path):
    """pcapng epb_flags decide: outbound is skipped whatever its MAC, inbound is injected even from our own MAC."""
    syn = _syn(original)
    own = syn[:6] + R0 + syn[12:]
    path = tmp_path / "dir.pcapng"
    _one_frame_pcapng(path, [(syn, True), (own, False), (syn, None)])
    assert [f.direction for f in read_capture(path)] == [OUTBOUND, INBOUND, None]
    rep = run_json(capsys, "--no-traffic", "--replay", f"r:veth0={path}")
    # veth1 is not replayed: the SYNs go on through its wire to ns2, which has no socket (--no-traffic)
    assert [(e["fate"], e["reason"], e["out"]) for e in rep["replay"]] == [
        ("skipped", "sent by veth0", []), ("dropped", "no-socket", ["r/veth1"]), ("dropped", "no-socket", ["r/veth1"])]
    _books(rep)


def test_pcap_own_source_mac_is_skipped(capsys, original, tmp_path):
    """A classic pcap records no direction: a frame from the device's own MAC was sent by it."""
    syn = _syn(original)
    path = tmp_path / "mac.pcap"
    with PcapWriter(path) as w:
        w.write(syn[:6] + R0 + syn[12:], 0.0)
        w.write(syn, 0.001)
    rep = run_json(capsys, "--no-traffic", "--replay", f"r:veth0={path}")
    assert [(e["fate"], e["reason"]) for e in rep["replay"]] == [("skipped", "sent by veth0"), ("dropped", "no-socket")]
    assert rep["replay_sources"][0]["fates"] == {"dropped: no-socket": 1, "skipped: sent by veth0": 1}


def test_otherhost_is_dropped_by_ip_rcv(capsys, original, tmp_path):
    """A frame for another MAC is PACKET_OTHERHOST: ip_rcv drops it (the port is no bridge port)."""
    syn = _syn(original)
    path = tmp_path / "other.pcap"
    with PcapWriter(path) as w:
        w.write(bytes.fromhex("02aabbccddee") + syn[6:], 0.0)
    rep = run_json(capsys, "--no-traffic", "--replay", f"r:veth0={path}")
    (e,) = rep["replay"]
    assert (e["fate"], e["reason"], e["where"]) == ("dropped", "not-for-host", "r veth0")
    assert rep["drops"] == {"not-for-host": 1}
    _books(rep)


def test_raw_ip_gets_the_device_mac(capsys, original, tmp_path):
    """A raw-IP capture is injected behind an Ethernet header addressed to the device (tcprewrite --dlt=enet)."""
    syn = _syn(original)
    path = tmp_path / "raw.pcapng"
    with PcapngWriter(path) as w:
        i = w.interface("wan", LINKTYPE_RAW)
        w.write(i, syn, 0.0)
    (f,) = read_capture(path)
    assert f.linktype == LINKTYPE_RAW and f.direction is None
    # veth1's capture replayed too (empty of this flow): the SYN is absorbed on veth1's wire
    rep = run_json(capsys, "--no-traffic", "--replay", f"r:veth0={path}",
                   "--replay", f"r:veth1={original / 'caps' / 'r-veth1.pcap'}")
    assert [(e["fate"], e["where"]) for e in rep["replay"] if e["device"] == "r/veth0"] == [("forwarded", "r/veth1")]


def test_cooked_sll2_packet_type_is_the_direction(tmp_path):
    """A Linux cooked (SLL2) capture's packet type: PACKET_OUTGOING is outbound, PACKET_HOST inbound."""
    path = tmp_path / "sll2.pcap"
    packet = bytes.fromhex("45000014000000004000000000000000000000000000")[:20]
    with open(path, "wb") as fh:
        fh.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, LINKTYPE_LINUX_SLL2))
        for pkttype in (4, 0):
            rec = struct.pack("!HHIHBB8s", 0x0800, 0, 2, 1, pkttype, 6, bytes(8)) + packet
            fh.write(struct.pack("<IIII", 5, 250000, len(rec), len(rec)) + rec)
    frames = list(read_capture(path))
    assert [f.direction for f in frames] == [OUTBOUND, INBOUND] and frames[0].ts == 5.25


def test_rate_paces_evenly(capsys, original, reference):
    """--replay-rate PPS: the merged injected frames at i/PPS seconds; the order (and here the counts) stay."""
    caps = original / "caps"
    rep = run_json(capsys, "--no-traffic", "--replay-rate", "1000", "--replay", f"r:veth0={caps / 'r-veth0.pcap'}",
                   "--replay", f"r:veth1={caps / 'r-veth1.pcap'}")
    times = [e["time"] for e in rep["replay"] if e["fate"] != "skipped"]
    assert times == [pytest.approx(i / 1000) for i in range(len(times))]
    assert _ft(rep) == _ft(reference)
    _books(rep)


def test_replay_next_to_traffic_adds_up(capsys, original):
    """Replayed frames coexist with the [[traffic]] tables: both counted, the books add up."""
    rep = run_json(capsys, "--replay", f"r:veth0={original / 'caps' / 'r-veth0.pcap'}")
    _books(rep)
    assert rep["packets"]["by_origin"]["host"]["injected"] > 0 and rep["packets"]["by_origin"]["replay"]["injected"]
    jsonschema.validate(rep, load("run"))


def test_text_report_and_pcap_dir(capsys, original, tmp_path):
    """The text report has a replay table; --pcap-dir and --pcapng capture the replayed frames as usual."""
    caps = original / "caps"
    rc, out, err = run(capsys, TOPO, "-q", "--no-traffic", "--pcap-dir", tmp_path / "again",
                       "--pcapng", tmp_path / "again.pcapng",
                       "--replay", f"r:veth0={caps / 'r-veth0.pcap'}", "--replay", f"r:veth1={caps / 'r-veth1.pcap'}")
    assert rc == 0 and err == ""
    assert "\nreplay\n" in out and "replayed 372" in out and "skipped: sent by veth0" in out
    assert "\ntraffic\n" not in out
    # the same frames (frames of the two ports captured in the same microsecond may swap: separate pcaps do not
    # order them), 20 µs earlier: times count from the first frame of the captures
    again = list(read_capture(tmp_path / "again" / "r-veth0.pcap"))
    before = list(read_capture(caps / "r-veth0.pcap"))
    assert sorted(f.data for f in again) == sorted(f.data for f in before)
    assert [round(f.ts + 20e-6, 6) for f in again] == [f.ts for f in before]
    ng = [(f.interface, f.direction) for f in read_capture(tmp_path / "again.pcapng")]
    assert ng.count(("r/veth0", INBOUND)) == 308 and ng.count(("r/veth1", OUTBOUND)) == 308


@pytest.mark.parametrize("args, needle", [
    (["--replay", "r-veth0=x.pcap"], "bad --replay 'r-veth0=x.pcap' (expected NETNS:DEV"),
    (["--replay", "r:veth0"], "bad --replay 'r:veth0'"),
    (["--replay", "nope:veth0=CAP"], "--replay nope:veth0=CAP: no namespace 'nope'"),
    (["--replay", "r:eth9=CAP"], "--replay r:eth9=CAP: no device 'eth9' in namespace r"),
    (["--replay", "r:lo=CAP"], "r:lo=CAP: lo is a loopback device, which no wire delivers frames to"),
    (["--replay", "r:veth0=/nonexistent.pcap"], "--replay r:veth0=/nonexistent.pcap: /nonexistent.pcap: no such"),
    (["--replay", "r:veth0=TOPO"], "not a pcap or pcapng capture"),
    (["--replay", "r:veth0=NG"], None),
    (["--replay", "r:veth9=NG"], "no device 'veth9'"),
    (["--replay", "ns1:eth0=NG"], None),
    (["--no-traffic"], "--no-traffic without --replay"),
    (["--replay-rate", "10"], "--replay-rate without --replay"),
    (["--replay-rate", "0", "--replay", "r:veth0=CAP"], "bad --replay-rate '0' (expected a rate > 0)"),
])
def test_bad_inputs_exit_2(capsys, original, tmp_path, args, needle):
    """Each bad --replay is one error line naming the option and the file, exit status 2."""
    ng = tmp_path / "other.pcapng"
    with PcapngWriter(ng) as w:  # two interfaces, neither of them r/veth0
        w.write(w.interface("a/eth0"), bytes(60))
        w.write(w.interface("b/eth0"), bytes(60))
    subst = {"CAP": str(original / "caps" / "r-veth0.pcap"), "TOPO": str(TOPO), "NG": str(ng)}
    args = [next((a.replace(k, v) for k, v in subst.items() if k in a and "=" in a), a) for a in args]
    rc, out, err = run(capsys, TOPO, *args)
    assert rc == 2 and out == ""
    if "--replay-rate" not in (needle or ""):  # argparse's usage error has its usage lines
        assert err.count("\n") == 1, err
    if needle is not None:
        needle = next((needle.replace(k, v) for k, v in subst.items() if f"={k}" in needle), needle)
    else:
        needle = f"{ng} has interfaces a/eth0, b/eth0, none named"
    assert needle in err
    if args[0] == "--replay" and "=" in args[1] and "bad --replay" not in needle:
        assert args[1] in err or "not a pcap" in err


def test_link_type_is_kept_in_frames(original):
    """read_capture keeps Ethernet frames as they are and gives pcap timestamps (microseconds)."""
    frames = list(read_capture(original / "caps" / "r-veth0.pcap"))
    assert {f.linktype for f in frames} == {LINKTYPE_ETHERNET} and {f.direction for f in frames} == {None}
    assert frames[0].ts == pytest.approx(20e-6)


def test_capture_times_and_lenient_options(tmp_path):
    """Timestamps: pcap nanoseconds, pcapng if_tsresol; an epb option that does not fit is ignored, not an error."""
    ns = tmp_path / "ns.pcap"
    with open(ns, "wb") as fh:
        fh.write(struct.pack("<IHHiIII", 0xA1B23C4D, 2, 4, 0, 0, 65535, LINKTYPE_ETHERNET))
        fh.write(struct.pack("<IIII", 3, 5, 14, 14) + bytes(14))
    assert [f.ts for f in read_capture(ns)] == [pytest.approx(3.000000005)]

    def block(btype, body):
        body += bytes(-len(body) % 4)
        return struct.pack("<II", btype, len(body) + 12) + body + struct.pack("<I", len(body) + 12)

    shb = block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1))
    idb = block(1, struct.pack("<HHI", LINKTYPE_ETHERNET, 0, 0) + struct.pack("<HHB3x", 9, 1, 3) + bytes(4))
    frame = bytes(14)
    bad_option = struct.pack("<HH", 2, 200) + bytes(4)  # epb_flags claiming 200 bytes
    epb = block(6, struct.pack("<IIIII", 0, 0, 1500, 14, 14) + frame + bytes(2) + bad_option)
    ng = tmp_path / "ms.pcapng"
    ng.write_bytes(shb + idb + epb)
    (f,) = read_capture(ng)
    assert f.ts == pytest.approx(1.5) and f.direction is None and f.interface is None
