"""`flowsim run`: JSON and text output, options, and one-line errors with exit status 2 (issue 5, Report and CLI)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flowsim.cli import main

ROOT = Path(__file__).resolve().parent.parent
TOPOLOGIES = ROOT / "topologies"
BAD = ROOT / "tests" / "data" / "topologies"


def run(capsys, *args):
    rc = main(["run", *map(str, args)])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_json_has_the_contract_keys(capsys):
    """--json: profile, packets.{injected,delivered,dropped,in_flight}, drops, flowtables[], traffic[] (DESIGN contracts)."""
    rc, out, err = run(capsys, TOPOLOGIES / "ip6ip6-rx.toml", "--json", "--profile", "linux-7.0")
    data = json.loads(out)
    assert rc == 0 and err == "" and data["profile"] == "linux-7.0"
    assert {"injected", "delivered", "dropped", "in_flight"} <= set(data["packets"])
    assert isinstance(data["drops"], dict) and data["conntrack"]["router"]
    (ft,) = data["flowtables"]
    assert {"netns", "name", "fastpath", "slowpath", "reasons", "flows"} <= set(ft) and ft["netns"] == "router"
    for t in data["traffic"]:
        for d in ("original", "reply"):
            assert {"sent", "delivered", "fastpath", "slowpath"} <= set(t["directions"][d])
    p = data["packets"]
    assert p["injected"] == p["delivered"] + p["dropped"] + p["in_flight"]


def test_set_switch_names_the_derived_profile(capsys):
    """--profile P --set K=V: the report names the derived profile."""
    rc, out, _ = run(capsys, TOPOLOGIES / "selftest.toml", "--json", "--profile", "linux-6.12", "--set",
                     "tcp_fin_rst=closing")
    assert rc == 0 and json.loads(out)["profile"] == "linux-6.12+tcp_fin_rst=closing"


def test_text_report(capsys):
    """Without --json: the readable tables."""
    rc, out, _ = run(capsys, TOPOLOGIES / "dsa.toml")
    assert rc == 0 and out.startswith("flowsim run ") and "host1-web" in out and "flowtables" in out


def test_no_flowtables_and_duration(capsys):
    """--no-flowtables keeps every packet on the slow path; --duration runs the GC up to that time."""
    rc, out, _ = run(capsys, TOPOLOGIES / "stack-limit.toml", "--json", "--no-flowtables", "--duration", "31")
    data = json.loads(out)
    assert rc == 0 and data["flowtables_enabled"] is False and data["time"] == 31.0
    assert data["flowtables"][0]["fastpath"] == 0
    assert [e["proto"] for e in data["conntrack"]["cpe"]] == ["ipip"]  # the UDP entries timed out


def test_pcap_dir_and_headlen(capsys, tmp_path):
    """--pcap-dir writes NETNS-DEVICE.pcap files; --headlen sets the linear area of received skbs."""
    rc, _out, _ = run(capsys, TOPOLOGIES / "ipip.toml", "--pcap-dir", tmp_path / "caps", "--headlen", "64")
    assert rc == 0 and (tmp_path / "caps" / "nsr1-tun0.pcap").exists() and (tmp_path / "caps" / "ns2-eth0.pcap").exists()


@pytest.mark.parametrize("name", sorted(p.name for p in BAD.glob("*.toml")))
def test_bad_topology_is_one_error_line(capsys, name):
    """A bad topology file: `flowsim: error: FILE:LINE: …` on one line, exit status 2, no traceback."""
    rc, out, err = run(capsys, BAD / name)
    assert rc == 2 and out == ""
    assert err.startswith("flowsim: error: ") and err.count("\n") == 1 and name in err


def test_bad_ruleset_is_one_error_line(capsys, tmp_path):
    """A ruleset error names the topology file and the absolute line of the bad rule."""
    text = (TOPOLOGIES / "selftest.toml").read_text().replace("ct state established,related accept",
                                                               "ct state established,related acept")
    path = tmp_path / "bad.toml"
    path.write_text(text)
    line = next(i for i, l in enumerate(text.split("\n"), 1) if "acept" in l)
    rc, _out, err = run(capsys, path)
    assert rc == 2 and err.startswith(f"flowsim: error: {path}:{line}:") and err.count("\n") == 1


@pytest.mark.parametrize("args, needle", [
    (["nope.toml"], "cannot read topology"),
    (["TOPO", "--profile", "linux-0.1"], "unknown profile"),
    (["TOPO", "--set", "nope=1"], "unknown profile switch"),
])
def test_bad_input_exits_2(capsys, args, needle):
    """Unreadable file, unknown profile or switch: one error line, exit 2."""
    args = [str(TOPOLOGIES / "selftest.toml") if a == "TOPO" else a for a in args]
    rc, _out, err = run(capsys, *args)
    assert rc == 2 and needle in err and err.count("\n") == 1


@pytest.mark.parametrize("duration, expected", [
    ("-1", "seconds >= 0"),
    ("inf", "a finite number"),  # a TypeError in the progress bar once
    ("nan", "a finite number"),  # ran as if no duration was given once
    ("1e400", "a finite number"),
    ("soon", "seconds, e.g. 35 or 0.5"),
])
def test_bad_duration_is_a_usage_error(capsys, duration, expected):
    """A negative, infinite, nan or non-numeric --duration is refused by the argument parser (exit 2)."""
    rc = main(["run", str(TOPOLOGIES / "selftest.toml"), "--duration", duration])
    err = capsys.readouterr().err
    assert rc == 2 and f"bad --duration {duration!r} (expected {expected}" in err
