"""`flowsim explain`: the first condition that stopped each connection, in plain words, with a fix (issue 6)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flowsim.cli import main
from flowsim.config.topology import load_topology
from flowsim.profiles import get_profile
from flowsim.sim.explain import explain
from flowsim.sim.simulation import Simulation

TOPO = Path(__file__).resolve().parent.parent / "topologies"


def answers(name, profile="linux-7.1.5", **switches):
    sim = Simulation(load_topology(TOPO / name), get_profile(profile).derive(**switches)).run()
    return {a.connection: a for a in explain(sim)}


@pytest.mark.parametrize("topology,profile,offloaded,needle,fix", [
    ("selftest.toml", "linux-7.1.5", True, "both directions take the fast path", None),
    ("ip6ip6-rx-encaplimit.toml", "linux-7.1.5", False, "encaplimit none", "encaplimit none"),
    ("ip6ip6-over-pppoe.toml", "linux-7.1.5", True, "tun: packets no tunnel, flow 2001:db8:2::2", None),
    ("dsa.toml", "linux-7.1.5", None, "UNTAG_HW", None),
    ("ipip-in-ipip.toml", "linux-7.1.5", False, "a second tunnel in the stack", None),
    ("ip6ip6-rx.toml", "linux-6.18", None, "no resolver for ip6tnl", "7.0"),
])
def test_explanations(topology, profile, offloaded, needle, fix):
    """Each scenario's answer names what the kernel did, e.g. which device, setting or version to change
    (nft_flow_route, nft_flow_offload_eval, nf_flow_offload_ip_hook)."""
    got = answers(topology, profile)
    hits = [a for a in got.values() if needle in a.why + json.dumps(a.directions, default=str)]
    assert hits, [a.why for a in got.values()]
    a = hits[0]
    if offloaded is not None:
        assert a.offloaded is offloaded
    if fix is not None:
        assert fix in (a.fix or "")


def test_device_missing_from_flowtable_names_the_device(tmp_path):
    """A flowtable without the egress device: explain names the device to add (nft_dev_forward_path:
    nft_flowtable_find_dev)."""
    text = (TOPO / "selftest.toml").read_text().replace("devices = { veth0, veth1 }", "devices = { veth0 }")
    path = tmp_path / "t.toml"
    path.write_text(text)
    got = answers(path)
    a = next(iter(got.values()))
    assert not a.offloaded and "add veth1" in a.fix


def test_cli_json(capsys):
    """--json prints one object per connection with the stacks per direction."""
    assert main(["explain", str(TOPO / "ip6ip6-rx.toml"), "--json", "--traffic", "tcp-rx-from-tunnel"]) == 0
    (obj,) = json.loads(capsys.readouterr().out)["answers"]
    assert obj["offloaded"] and obj["original"]["proto"] == "tcp"
    assert [e["type"] for e in obj["paths"]["reply"]["stack"]] == ["TUN", "ETHERNET"]


def test_xfrm_direction_names_its_bundle():
    """An XFRM direction shows the SA the flow transmits through (spi, mode, tunnel ends, MTU), which a FIB
    lookup alone cannot show; the other direction stays a plain path."""
    (answer,) = answers("ipsec-tunnel.toml").values()
    assert answer.paths["original"]["xfrm"] == {"dev": "veth1", "mtu": 1446, "spi": "0x1001", "mode": "tunnel",
                                                "src": "192.168.10.1", "dst": "192.168.10.2", "reqid": 1}
    assert "xfrm" not in answer.paths["reply"]
    assert "path original: XFRM spi 0x1001 tunnel 192.168.10.1 → 192.168.10.2 (mtu 1446)" in answer.text()


@pytest.mark.parametrize("topology", ["ip6ip6-over-pppoe.toml", "dsa.toml", "ipip.toml"])
def test_text_has_no_python_reprs_nor_repeats(topology):
    """Issue 18 item 5: readable answers: no None/dict/list reprs, each explaining sentence once, IPv6
    endpoints as [addr]:port."""
    for a in answers(topology).values():
        text = a.text()
        for repr_ in ("None", "{'", "['", "[]"):
            assert repr_ not in text, text
        lines = [ln.strip() for ln in text.splitlines()]
        for ln in lines:
            if len(ln) > 60:
                assert sum(ln in other for other in lines) == 1, text
        if a.original["src"].count(":"):
            assert f"[{a.original['src']}]:{a.original['sport']}" in a.connection
