"""`flowsim compare`: the same traffic under two profiles, side by side (issue 6)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flowsim.cli import main
from flowsim.sim.compare import compare, hexdump_frame

TOPO = Path(__file__).resolve().parent.parent / "topologies"


def test_715_vs_70_encaplimit():
    """7.0 accelerates a tunnel with the default encap limit; 7.1.5 refuses to resolve it
    (ip6_tnl_fill_forward_path requires 'encaplimit none')."""
    c = compare(str(TOPO / "ip6ip6-rx-encaplimit.toml"), "linux-7.0", "linux-7.1.5")
    (ft,) = c.flowtables()
    assert ft["a"]["fastpath"] > 1000 and ft["b"]["fastpath"] == 0
    div = c.first_divergence()
    assert div is not None and div["verdicts"]["a"] != div["verdicts"]["b"]
    assert c.frame_differences()  # the destination-options header on the wire (7.0 only)


def test_header_access_cost_with_non_linear_frames():
    """With 14 linear bytes, REF's header pointer copies the outer IPv6 header; 7.1.5 pulls it instead
    (nf_flow_ip6_tunnel_proto: skb_header_pointer vs pskb_may_pull)."""
    c = compare(str(TOPO / "ip6ip6-rx.toml"), "linux-7.0", "linux-7.1.5", headlen=14)
    (ft,) = c.flowtables()
    a, b = ft["skb_cost"]["a"], ft["skb_cost"]["b"]
    assert a["copies"] > 0 and b["copies"] == 0
    assert ft["a"]["fastpath"] == ft["b"]["fastpath"]


def test_same_profile_is_identical():
    """A profile compared with itself: no divergence, identical bytes (runs are deterministic)."""
    c = compare(str(TOPO / "selftest.toml"), "linux-7.1.5", "linux-7.1.5")
    assert c.first_divergence() is None and c.frame_differences() == []


@pytest.mark.parametrize("argv", [
    ["--profile", "linux-7.1.5", "--profile", "linux-6.12"],
    ["--profile", "linux-7.1.5", "--set-b", "tcp_fin_rst=teardown"],
])
def test_cli(capsys, argv):
    """Text and JSON forms; one profile with --set-b varies a single switch (the FIN/RST CLOSING change)."""
    assert main(["compare", str(TOPO / "selftest.toml"), *argv, "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["profile_switches"]["tcp_fin_rst"] == ["closing", "teardown"]
    assert main(["compare", str(TOPO / "selftest.toml"), *argv]) == 0
    assert "first packet whose verdict differs" in capsys.readouterr().out


def test_hexdump_marks_header_boundaries():
    """Ethernet | 802.1Q | IPv4 | payload."""
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Dot1Q, Ether

    frame = bytes(Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / Dot1Q(vlan=5) / IP() / UDP())
    parts = hexdump_frame(frame).split(" | ")
    assert [len(p) for p in parts[:3]] == [28, 8, 40]


def test_one_loaded_topology_serves_both_sides():
    """compare loads a file once and instantiates it per side; a loaded topology gives the same comparison."""
    from flowsim.config.topology import load_topology

    path = TOPO / "selftest.toml"
    by_file = compare(str(path), "linux-7.0", "linux-7.1.5")
    loaded = compare(load_topology(path), "linux-7.0", "linux-7.1.5")
    assert loaded.topology == by_file.topology
    assert (loaded.a.report, loaded.b.report) == (by_file.a.report, by_file.b.report)
