"""Bad inputs, one row each: exit status 2 and the message it must give, never the internal-error line (issue 15).

One table, :data:`BAD_INPUTS`, of ``(id, argv or file content, expected
fragment of stderr)``, run in process through :func:`flowsim.cli.main`.
``argv`` may hold :class:`File` (written to a temporary file whose path
replaces it) and ``{tmp}`` (the temporary directory); a bare ``str`` or
``bytes`` instead of argv is a topology file's content, run as
``flowsim run FILE``.  Add rows for every bad input a change learns to
refuse.
"""

from __future__ import annotations

import json
import os
import re
import struct
import threading
from pathlib import Path

import attrs
import pytest

import flowsim.commands.reasons
from flowsim.cli import main

ROOT = Path(__file__).resolve().parent.parent
TOPO = str(ROOT / "topologies" / "selftest.toml")
PCAP = str(ROOT / "tests" / "data" / "corpus" / "suricata-verify" / "eve-flow-esp__input.pcap")
BAD = ROOT / "tests" / "data" / "topologies"


@attrs.frozen
class File:
    """A temporary file with this content, in argv."""

    content: bytes | str
    name: str = "input"


def _block(btype: int, body: bytes) -> bytes:
    """A little-endian pcapng block (draft-ietf-opsawg-pcapng: type, length, body padded to 32 bits, length)."""
    body += bytes(-len(body) % 4)
    return struct.pack("<II", btype, len(body) + 12) + body + struct.pack("<I", len(body) + 12)


SHB = _block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1))
IDB = _block(1, struct.pack("<HHI", 1, 0, 0))
FRAME = bytes(12) + b"\x08\x00" + bytes(20)


def _epb(caplen: int, data: bytes = FRAME, iface: int = 0) -> bytes:
    return _block(6, struct.pack("<IIIII", iface, 0, 0, caplen, len(data)) + data)


# the fixtures of tests/data/topologies: file, line, what the message says
_TOPOLOGY_FILES = [
    ("bad-address.toml", 7, "bad address '10.0.300.1/24'"),
    ("bad-gateway.toml", 7, "gateway 10.1.0.1 is not on a connected subnet"),
    ("bad-gso.toml", 15, "bad gso_size 0"),
    ("bad-toml.toml", 2, "invalid TOML"),
    ("bad-traffic.toml", 11, "bad proto 'sctp'"),
    ("duplicate-name.toml", 6, "device 'br0' already exists"),
    ("missing-device.toml", 10, "device 'veth1' does not exist"),
    ("unknown-command.toml", 5, "unknown command 'ifconfig'"),
    ("unknown-key.toml", 3, "unknown key 'comands'"),
    ("unknown-kind.toml", 4, "unknown device type 'bond'"),
    ("upper-cycle.toml", 6, "cycle of upper devices"),
    ("bridge-in-bridge.toml", 6, "Can not enslave a bridge to a bridge: br0 is one"),
    ("nest-too-deep.toml", 15, "too many stacked devices: br7 and the 7 below it"),
]

BAD_INPUTS: list[tuple[str, list | str | bytes, str]] = [
    # numeric options: finite, in range (flowsim/commands/_args.py)
    ("run-duration-inf", ["run", TOPO, "--duration", "inf"], "argument --duration: bad --duration 'inf' (expected a finite number"),
    ("run-duration-nan", ["run", TOPO, "--duration", "nan"], "bad --duration 'nan' (expected a finite number"),
    ("run-duration-negative", ["run", TOPO, "--duration", "-1"], "bad --duration '-1' (expected seconds >= 0)"),
    ("run-headlen-below-ethernet", ["run", TOPO, "--headlen", "13"], "bad --headlen '13' (expected at least 14"),
    ("explain-duration-nan", ["explain", TOPO, "--duration", "nan"], "bad --duration 'nan' (expected a finite number"),
    ("compare-duration-inf", ["compare", TOPO, "--profile", "linux-7.0", "--profile", "linux-7.1.5", "--duration", "inf"],
     "bad --duration 'inf' (expected a finite number"),
    ("compare-headlen-3", ["compare", TOPO, "--profile", "linux-7.0", "--profile", "linux-7.1.5", "--headlen", "3"],
     "bad --headlen '3' (expected at least 14"),
    ("trace-limit-negative", ["trace", TOPO, "--limit", "-1"], "bad --limit '-1' (expected a number of packets >= 1)"),
    ("trace-packet-negative", ["trace", TOPO, "--packet", "-1"], "bad --packet '-1' (expected a packet index >= 0)"),
    ("trace-headlen-2", ["trace", TOPO, "--headlen", "2"], "bad --headlen '2' (expected at least 14"),
    ("tuple-iif-negative", ["tuple", PCAP, "--iif", "-1"], "bad --iif '-1' (expected an ifindex 1..2147483647)"),
    ("tuple-iif-zero", ["tuple", PCAP, "--iif", "0"], "bad --iif '0' (expected an ifindex 1..2147483647)"),
    ("tuple-iif-name", ["tuple", PCAP, "--iif", "eth0"], "bad --iif 'eth0' (expected an ifindex, an integer)"),
    ("tuple-headlen-negative", ["tuple", PCAP, "--headlen", "-3"], "bad --headlen '-3' (expected a byte count >= 0)"),
    ("sweep-workers-0", ["sweep", TOPO, "--grid", "profile=linux-7.0", "--workers", "0"],
     "bad --workers '0' (expected a number of processes 1..1024)"),
    ("ovpn-segments-0", ["ovpn", "--segments", "0"], "--segments out of range: 0 (expected 1..65535)"),
    ("xfrm-mss-text", ["xfrm", "--mss", "big"], "--mss must be an integer: 'big'"),
    ("run-unknown-profile", ["run", TOPO, "--profile", "linux-0.1"], "unknown profile"),
    # file options: a clean error naming the option and the file
    ("conform-results-missing", ["conform", TOPO, "--results", "{tmp}/missing.log"],
     "--results {tmp}/missing.log: cannot read: No such file or directory (expected a readable file)"),
    ("conform-results-directory", ["conform", TOPO, "--results", "{tmp}"], "--results {tmp}: cannot read: Is a directory"),
    ("conform-results-bad-gzip", ["conform", TOPO, "--results", File(b"\x1f\x8b\x08junk")], "not a readable gzip file"),
    ("conform-results-endless", ["conform", TOPO, "--results", "/dev/zero"],
     "--results /dev/zero: more than 256 MiB, the most a results channel may hold"),
    ("conform-update-doc-no-directory", ["conform", TOPO, "--results", File(b""), "--update-doc", "{tmp}/no/x.md"],
     "--update-doc {tmp}/no/x.md: no directory {tmp}/no"),
    ("run-topology-missing", ["run", "{tmp}/missing.toml"], "cannot read topology"),
    ("run-topology-directory", ["run", "{tmp}"], "cannot read topology"),
    # an endless device: read up to the bound (flowsim.config.limits.read_bounded), never until the memory is full
    *[(f"{cmd}-topology-endless", [cmd, "/dev/zero", *more],
       "cannot read topology" + (" '/dev/zero'" if cmd == "sweep" else "") + ": more than 64 MiB")
      for cmd, more in [("run", []), ("explain", []), ("graph", []), ("sweep", ["--grid", "udp_timeout=1"])]],
    ("import-traffic-from-endless", ["import", str(ROOT / "tests" / "data" / "snapshot" / "bridge"), "--traffic-from",
                                     "/dev/zero", "-o", "{tmp}/o.toml"], "/dev/zero: cannot read: more than 64 MiB"),
    ("tuple-capture-missing", ["tuple", "{tmp}/missing.pcap"], "{tmp}/missing.pcap: cannot open: No such file or directory"),
    ("tuple-capture-directory", ["tuple", "{tmp}"], "cannot open: Is a directory"),
    ("xfrm-pcap-no-directory", ["xfrm", "--pcap", "{tmp}/no/x.pcap"], "cannot write pcap"),
    ("ovpn-pcap-no-directory", ["ovpn", "--pcap", "{tmp}/no/x.pcap"], "cannot write pcap"),
    # captures (flowsim/kernel/capture.py): one CaptureError naming the file, the block's offset, what was expected
    ("pcap-not-a-capture", ["tuple", File(b"hello")], "not a pcap or pcapng capture (magic 68656c6c)"),
    ("pcapng-idb-short", ["tuple", File(SHB + _block(1, b"\x01\x00"))],
     "offset 28: pcapng interface description block body of 4 bytes is shorter than its fixed fields (expected at least 8)"),
    ("pcapng-spb-short", ["tuple", File(SHB + IDB + _block(3, b""))],
     "offset 48: pcapng simple packet block body of 0 bytes is shorter than its fixed fields (expected at least 4)"),
    ("pcapng-epb-short", ["tuple", File(SHB + IDB + _block(6, bytes(16)))],
     "pcapng enhanced packet block body of 16 bytes is shorter than its fixed fields (expected at least 20)"),
    ("pcapng-epb-caplen-beyond-block", ["tuple", File(SHB + IDB + _epb(500))],
     "offset 48: pcapng enhanced packet block captured length 500 exceeds the block (expected at most 36)"),
    ("pcapng-length-not-multiple-of-4", ["tuple", File(SHB + struct.pack("<II", 6, 13) + bytes(5))],
     "offset 28: bad pcapng block length 13 (expected a multiple of 4, at least 12)"),
    ("pcapng-length-absurd", ["tuple", File(SHB + struct.pack("<II", 6, 0xFFFFFFF0))],
     "pcapng block length 4294967280 is not plausible"),
    ("pcapng-bad-byte-order-magic", ["tuple", File(SHB[:8] + b"ABCD" + SHB[12:])], "bad pcapng byte-order magic 41424344"),
    ("pcapng-interface-out-of-range", ["tuple", File(SHB + IDB + _epb(len(FRAME), iface=3))],
     "packet block names interface 3, which is not described (expected below 1)"),
    ("pcapng-truncated", ["tuple", File((SHB + IDB + _epb(len(FRAME)))[:-6])], "offset 48: truncated pcapng block"),
    ("pcapng-unknown-link-type", ["tuple", File(SHB + _block(1, struct.pack("<HHI", 147, 0, 0)) + _epb(len(FRAME)))],
     "frame 1: link type 147 is not supported"),
    # topology files
    *[(name, ["run", str(BAD / name)], f"{BAD / name}:{line}: {what}") for name, line, what in _TOPOLOGY_FILES],
]


def _argv(spec: list | str | bytes, tmp: Path) -> list[str]:
    """The command line of a row, its files written under *tmp*."""
    if isinstance(spec, (str, bytes)):
        spec = ["run", File(spec, "topology.toml")]
    out = []
    for n, arg in enumerate(spec):
        if isinstance(arg, File):
            path = tmp / f"{n}-{arg.name}"
            if isinstance(arg.content, bytes):
                path.write_bytes(arg.content)
            else:
                path.write_text(arg.content)
            arg = str(path)
        out.append(arg.replace("{tmp}", str(tmp)))
    return out


@pytest.mark.parametrize("spec, fragment", [row[1:] for row in BAD_INPUTS], ids=[row[0] for row in BAD_INPUTS])
def test_bad_input_is_one_clean_error(tmp_path, capsys, spec, fragment):
    """A bad input: exit status 2 and its expected message on stderr, never a traceback or an internal error."""
    rc = main(_argv(spec, tmp_path))
    err = capsys.readouterr().err
    assert "internal error" not in err and "Traceback" not in err
    assert rc == 2 and fragment.replace("{tmp}", str(tmp_path)) in err, err


def test_ids_are_unique():
    """Each row has its own id (pytest would silently suffix a duplicate)."""
    ids = [row[0] for row in BAD_INPUTS]
    assert len(ids) == len(set(ids))


def _boom(args):
    raise RuntimeError("a flowsim bug\nover two lines")


@pytest.mark.parametrize("argv, traceback", [(["reasons"], False), (["--debug", "reasons"], True)])
def test_internal_error_is_one_line_exit_3(monkeypatch, capsys, argv, traceback):
    """An exception that is not a FlowsimError: one `internal error, please report` line, exit 3; the traceback only with --debug."""
    monkeypatch.setattr(flowsim.commands.reasons, "run", _boom)
    rc = main(argv)
    err = capsys.readouterr().err
    assert rc == 3 and err.endswith("flowsim: internal error, please report: RuntimeError: a flowsim bug over two lines\n")
    assert ("Traceback (most recent call last)" in err) is traceback
    assert err.count("\n") == 1 or traceback


def test_help_and_version_return_0(capsys):
    """--help and --version return status 0 from main instead of raising SystemExit."""
    assert main(["--version"]) == 0 and main(["run", "--help"]) == 0
    assert "flowsim" in capsys.readouterr().out


@pytest.mark.parametrize("path", sorted(BAD.glob("*.toml")), ids=lambda p: p.name)
def test_every_bad_topology_fixture_is_one_located_error(capsys, path):
    """Every fixture of tests/data/topologies (their exact messages are in test_topology.py): `flowsim run`
    exits 2 with one line naming the file and a line number, never an internal error."""
    rc = main(["run", str(path)])
    err = capsys.readouterr().err
    assert rc == 2 and "internal error" not in err and "Traceback" not in err
    assert err.count("\n") == 1 and re.match(rf"flowsim: error: {re.escape(str(path))}:\d+: ", err), err


def test_a_topology_from_a_pipe_is_read_like_a_file(capsys):
    """The bound on a topology's size does not refuse a pipe (``flowsim run <(make-topology)``): it reads until
    the writer closes, as from a file."""
    r, w = os.pipe()
    text = Path(TOPO).read_bytes()
    writer = threading.Thread(target=lambda: (os.write(w, text), os.close(w)))
    writer.start()
    try:
        assert main(["run", "-q", "--json", f"/dev/fd/{r}"]) == 0
    finally:
        writer.join()
        os.close(r)
    out = json.loads(capsys.readouterr().out)
    assert out["topology"] == f"/dev/fd/{r}" and out["packets"]["injected"] == out["packets"]["delivered"] == 812
