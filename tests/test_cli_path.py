"""`flowsim path`: text and JSON output, exit status (the contract in issue 3)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flowsim.cli import main

TOPOLOGIES = Path(__file__).resolve().parent.parent / "topologies"


def run(capsys, *args):
    rc = main(["path", *map(str, args)])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_json_keys_for_a_tunnel_path(capsys):
    """JSON has stack[].{type,dev}, info.{indev,outdev,encap,tun,xmit_type,h_source,h_dest} and error."""
    rc, out, _ = run(capsys, TOPOLOGIES / "ipip-over-vlan.toml", "--netns", "nsr1", "--dst", "10.0.2.99",
                     "--profile", "linux-7.0", "--json")
    data = json.loads(out)
    assert rc == 0 and data["error"] is None and data["profile"] == "linux-7.0"
    assert [(e["type"], e["dev"]) for e in data["stack"]] == [("TUN", "tun0.10"), ("VLAN", "veth1.10"),
                                                              ("ETHERNET", "veth1")]
    info = data["info"]
    assert {"indev", "outdev", "encap", "tun", "xmit_type", "h_source", "h_dest"} <= set(info)
    assert info["indev"] == info["outdev"] == "veth1" and info["xmit_type"] == "neigh"
    assert info["encap"] == [{"id": 10, "proto": 0x8100}]  # one JSON form for an Encap: integers (8304288)
    assert info["tun"] == {"src": "192.168.20.1", "dst": "192.168.20.2", "l3_proto": 4}


def test_json_error_names_the_entry(capsys):
    """A refused path: exit 1, `error` with the entry index, device and kernel function."""
    rc, out, _ = run(capsys, TOPOLOGIES / "ip6ip6-rx-encaplimit.toml", "--netns", "router", "--dst",
                     "2001:db8:3::2", "--json")
    data = json.loads(out)
    assert rc == 1 and data["profile"] == "linux-7.2"
    assert data["error"]["func"] == "ip6_tnl_fill_forward_path" and data["error"]["entry"] == 0
    assert data["error"]["dev"] == "tun0" and data["error"]["errname"] == "-EOPNOTSUPP"


def test_text_shows_stack_info_and_error(capsys):
    """Text output lists the stack entries with what they recorded, the aggregate and the error."""
    rc, out, _ = run(capsys, TOPOLOGIES / "dsa.toml", "--netns", "router", "--dst", "192.168.20.3")
    assert rc == 0
    assert "BRIDGE    br-lan     vlan_mode=UNTAG_HW vlan_id=20" in out
    assert "DSA       lan3       port=3 proto=mtk" in out
    assert "indev     lan3" in out and "(ingress_vlans 0x1)" in out and "error: none" in out


def test_src_resolves_both_directions_and_the_flow(capsys):
    """--src runs nft_flow_route: both directions and the per-direction route in the JSON."""
    rc, out, _ = run(capsys, TOPOLOGIES / "ipip.toml", "--netns", "nsr1", "--src", "10.0.1.99", "--dst",
                     "10.0.2.99", "--json")
    data = json.loads(out)
    assert rc == 0 and data["flow"]["created"]
    assert data["stack"][0]["type"] == "TUN" and data["reply"]["stack"][0]["dev"] == "veth0"
    assert data["flow"]["tuple"][1]["in"]["tun"] == {"src": "192.168.10.2", "dst": "192.168.10.1", "l3_proto": 4}
    rc, out, _ = run(capsys, TOPOLOGIES / "ipip.toml", "--netns", "nsr1", "--src", "10.0.1.99", "--dst",
                     "10.0.2.99")
    assert "original (10.0.1.99 -> 10.0.2.99):" in out and "flow: created" in out


def test_profile_and_set_switch(capsys):
    """--profile and --set change the resolvers: 6.18 has no ipip resolver, --set can add it back."""
    args = (TOPOLOGIES / "ipip.toml", "--netns", "nsr1", "--dst", "10.0.2.99", "--json")
    rc, out, _ = run(capsys, *args, "--profile", "linux-6.18")
    assert rc == 1 and json.loads(out)["stack"] == [{"type": "ETHERNET", "dev": "tun0", "ifindex": 4}]
    rc, out, _ = run(capsys, *args, "--profile", "linux-6.18", "--set", "ipip_fill_forward_path=1")
    assert rc == 0 and json.loads(out)["stack"][0]["type"] == "TUN"


@pytest.mark.parametrize("args,message", [
    (("--dst", "10.0.2.300"), "bad address"),
    (("--dst", "10.0.2.99", "--flowtable", "nope"), "no flowtable"),
    (("--dst", "10.0.2.99", "--src", "dead:1::99"), "differ in family"),
])
def test_bad_input_exits_2(capsys, args, message):
    """Bad addresses or names are one-line errors with exit status 2."""
    rc, _, err = run(capsys, TOPOLOGIES / "selftest.toml", "--netns", "nsr1", *args)
    assert rc == 2 and message in err and err.startswith("flowsim: error:")


def test_topology_error_exits_2(capsys):
    """A broken topology file is reported with file and line."""
    bad = Path(__file__).resolve().parent / "data" / "topologies" / "upper-cycle.toml"
    rc, _, err = run(capsys, bad, "--netns", "r", "--dst", "10.0.0.1")
    assert rc == 2 and "upper-cycle.toml:6" in err
