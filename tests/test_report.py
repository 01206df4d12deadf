"""The run report: JSON-ready data whose numbers add up, and the same as readable tables (issue 5, Report and CLI)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flowsim.config.topology import load_topology
from flowsim.sim.report import build_report, ct_status_names, format_report
from flowsim.sim.simulation import Simulation

TOPOLOGIES = Path(__file__).resolve().parent.parent / "topologies"


@pytest.fixture(scope="module")
def bridge_vlan():
    """bridge-vlan with the flowtable: DNAT + masquerade, named counters, one offloaded flow."""
    return build_report(Simulation(load_topology(TOPOLOGIES / "bridge-vlan.toml")).run())


def test_report_is_json_and_has_the_contract_keys(bridge_vlan):
    """profile, packets.{injected,delivered,dropped,in_flight}, drops, flowtables[], traffic[], conntrack, counters."""
    r = json.loads(json.dumps(bridge_vlan))
    assert {"profile", "packets", "drops", "flowtables", "traffic", "conntrack", "counters"} <= set(r)
    assert set(r["packets"]) >= {"injected", "delivered", "dropped", "in_flight"}
    ft = r["flowtables"][0]
    assert {"netns", "name", "fastpath", "slowpath", "reasons", "flows"} <= set(ft)
    d = r["traffic"][0]["directions"]
    assert set(d) == {"original", "reply"}
    assert all({"sent", "delivered", "fastpath", "slowpath"} <= set(x) for x in d.values())


def test_report_numbers_add_up(bridge_vlan):
    """Packets add up overall and per traffic direction; hook verdicts equal the flowtable's own counts."""
    p = bridge_vlan["packets"]
    assert p["injected"] == p["delivered"] + p["dropped"] + p["in_flight"] == 406
    assert p["dropped"] == sum(bridge_vlan["drops"].values())
    dirs = bridge_vlan["traffic"][0]["directions"]
    assert sum(x["sent"] for x in dirs.values()) == p["by_origin"]["host"]["injected"]
    assert all(x["sent"] == x["delivered"] + x["dropped"] + x["in_flight"] for x in dirs.values())
    ft = bridge_vlan["flowtables"][0]
    assert ft["fastpath"] == sum(x["fastpath"] for x in dirs.values())
    assert ft["slowpath"] == sum(x["slowpath"] for x in dirs.values())


def test_conntrack_entries_in_the_report(bridge_vlan):
    """conntrack: both tuples (NAT visible in the reply tuple), state, IPS_* names with OFFLOAD, counters."""
    (e,) = bridge_vlan["conntrack"]["nsr1"]
    assert e["original"] == "10.0.1.99:40000 -> 10.6.6.6:1666"
    assert e["reply"] == "10.0.2.99:12345 -> 192.168.10.1:40000"
    assert {"ASSURED", "SRC_NAT", "DST_NAT", "OFFLOAD"} <= set(e["status"]) and e["proto"] == "tcp"
    assert e["counters"]["original"]["packets"] >= 2 and e["mark"] == 1


def test_named_counters_in_the_report(bridge_vlan):
    """nft named counters per namespace: only slow-path packets reach the forward chain (nft_flowtable.sh's
    routed_orig / routed_repl counters)."""
    c = bridge_vlan["counters"]["nsr1"]
    assert set(c) == {"inet filter routed_orig", "inet filter routed_repl"}
    assert 0 < c["inet filter routed_orig"]["packets"] < 10


def test_drops_and_samples_in_the_report():
    """drops: reason → count, with the first drops sampled (time, packet, reason, where)."""
    import ipaddress

    from flowsim.sim.traffic import TrafficSpec

    t = load_topology(TOPOLOGIES / "selftest.toml")
    spec = TrafficSpec("x", "tcp", "ns1", ipaddress.ip_address("10.0.1.99"), ipaddress.ip_address("10.0.2.99"), 12345,
                       packets=2, handshake=False, ttl=1)
    r = build_report(Simulation(t, flowtables=False, traffic=[spec]).run())
    assert r["drops"] == {"ttl-exceeded-forward": 2}
    assert r["drop_samples"][0]["where"] == "nsr1 forward" and r["drop_samples"][0]["packet"] == "x/original#1:data"
    assert r["traffic"][0]["icmp_errors"] == {"sent": 2, "delivered": 2, "dropped": 0}
    assert r["packets"]["by_origin"]["stack"] == {"injected": 2, "delivered": 2}


def test_status_names_follow_the_kernel_bits():
    """ct_status_names reads IPS_* bits in uapi order."""
    assert ct_status_names((1 << 1) | (1 << 2) | (1 << 14)) == ["SEEN_REPLY", "ASSURED", "OFFLOAD"]


def test_text_report_has_the_tables(bridge_vlan):
    """The readable report: header, traffic, flowtables, conntrack and counter tables."""
    text = format_report(bridge_vlan)
    for needle in ("profile linux-7.2", "traffic", "tcp-dnat-1666", "original", "reply", "flowtables",
                   "no-flow-entry", "conntrack (nsr1)", "nft counters (nsr1)", "inet filter routed_orig"):
        assert needle in text, needle
    assert "packets: injected 406" in text


def test_gso_segmentation_in_the_report():
    """The fast path's software GSO before a PPPoE push is counted per flowtable, in JSON and in the text."""
    sim = Simulation(load_topology(TOPOLOGIES / "pppoe-over-vlan.toml")).run()
    report = build_report(sim)
    ft = report["flowtables"][0]
    assert ft["gso"]["segmented"] == 100 and ft["gso"]["segments"] == 100 * 12  # 16000-byte skbs, 1400-byte MSS
    assert "100 GSO skbs segmented in software into 1200" in format_report(report)


def test_events_that_ran_are_in_the_report():
    """The [[event]] lines a run executed are listed with their time and namespace, in JSON and in the text."""
    from flowsim.config.topology import load_topology_text

    text = (TOPOLOGIES / "selftest.toml").read_text() + (
        '\n[[event]]\nat = 0.0005\nnetns = "nsr1"\ncommand = "ip link set veth1 down"\n'
        '\n[[event]]\nat = 99\nnetns = "nsr1"\ncommand = "ip link set veth1 up"\n')
    report = build_report(Simulation(load_topology_text(text, "t.toml")).run(0.01))
    assert report["events"] == [{"at": 0.0005, "netns": "nsr1", "command": "ip link set veth1 down"}]
    assert "    0.500 ms  nsr1: ip link set veth1 down" in format_report(report)
