"""topologies/openwrt-fw4.toml: the questions OpenWrt users ask about software flow offloading, answered by
``flowsim explain``/``path``/``run`` on firewall4's own ruleset (openwrt/firewall4
tests/01_configuration/01_ruleset, devices as tests/01_configuration/03_software_offload_devices lists them:
{ br-lan, ds-dslite, pppoe-wan, wan, wan.7 }).  Every number is checked exactly."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest

from flowsim.config.topology import load_topology
from flowsim.kernel.flowtable.path import resolve_path, ruleset_flowtables
from flowsim.profiles import get_profile
from flowsim.sim.explain import explain
from flowsim.sim.report import build_report
from flowsim.sim.simulation import Simulation

TOPO = load_topology(Path(__file__).resolve().parent.parent / "topologies" / "openwrt-fw4.toml")
CONNECTIONS = ["tcp 192.168.1.10:40000 -> 198.51.100.10:443",
               "tcp [2001:db8:1000::10]:40200 -> [2001:db8:100::10]:443",
               "tcp 192.168.1.10:40300 -> 203.0.113.10:8080",
               "udp 192.168.1.10:40000 -> 198.51.100.10:27015",
               "udp 192.168.1.10:40001 -> 198.51.100.10:27015"]


def resolve(dst: str, profile: str):
    """`flowsim path --netns router --dst DST`: resolve_path, the first half of nft_dev_forward_path."""
    ns = TOPO.netns("router")
    daddr = ipaddress.ip_address(dst)
    return resolve_path(ns, ns.fib.lookup(daddr), daddr, ruleset_flowtables(ns.nft.text if ns.nft else "")[0], get_profile(profile))


@pytest.fixture(scope="module", params=["linux-6.12", "linux-7.2", "linux-7.3"])
def sim(request):
    return Simulation(TOPO, request.param).run()


def test_which_devices_the_flowtable_needs():
    """"Which devices must be in the flowtable?"  dev_fill_forward_path from the route's device, then
    nft_dev_path_info, give the ingress device nft_dev_forward_path looks up in the flowtable
    (nft_flowtable_find_dev): towards the ISP the walk ends on `wan`, below PPPoE and VLAN 7 -- fw4 lists it
    (the VLAN's lower device) -- with both encapsulations and DIRECT xmit; towards the LAN it ends on the
    bridge port lan1, which fw4's software selection does not list (it keeps br-lan itself)."""
    wan = resolve("198.51.100.10", "linux-7.2")
    assert [(e.type.name, e.dev) for e in wan.stack] == [("PPPOE", "pppoe-wan"), ("VLAN", "wan.7"), ("ETHERNET", "wan")]
    assert (wan.info.indev, wan.info.xmit_type.name, [(e.id, e.proto) for e in wan.info.encaps]) == \
        ("wan", "DIRECT", [(0x42, 0x8864), (7, 0x8100)])
    assert wan.error is None
    lan = resolve("192.168.1.10", "linux-7.2")
    assert [(e.type.name, e.dev) for e in lan.stack] == [("BRIDGE", "br-lan"), ("ETHERNET", "lan1")]
    assert lan.info.indev == "lan1"
    assert (lan.error.func, lan.error.dev) == ("nft_dev_forward_path", "lan1")


EXPECTED_FT = {  # profile -> (fastpath, slowpath, slow-path reasons, flows created)
    "linux-6.12": (2119, 1105, {"flow-teardown": 71, "l4proto-unsupported": 906, "no-flow-entry": 125,
                                "tcp-fin-rst": 3}, 6),
    "linux-7.2": (0, 5582, {"l4proto-unsupported": 906, "no-flow-entry": 4676}, 0),
    "linux-7.3": (0, 5582, {"l4proto-unsupported": 906, "no-flow-entry": 4676}, 0),
}


def test_why_bridged_and_pppoe_traffic_stays_slow(sim):
    """"Offloading is on but nothing is offloaded": nft_flow_offload_eval -> nft_flow_route ->
    nft_dev_forward_path.  The reply direction's path ends on bridge port lan1, not in fw4's list.  6.12
    falls back to the route's device (br-lan, NEIGH xmit) and offloads; the 7.x profiles refuse the flow
    (switch path_failure=no-flow): every connection stops at flow-add-path, fast path 0.  With pppoe-wan, wan.7
    and wan all listed, each WAN packet meets the ingress hook up to three times (nf_flow_offload_ip_hook on
    wan, wan.7, pppoe-wan), so the slow path counts more verdicts than packets."""
    profile = sim.profile.name
    answers = explain(sim)
    assert [a.connection for a in answers] == CONNECTIONS
    if profile == "linux-6.12":
        assert [(a.offloaded, a.stopped_by) for a in answers] == [(True, None)] * 5
    else:
        assert [(a.offloaded, a.stopped_by) for a in answers] == [(False, "flow-add-path")] * 5
        lan1 = "the path's device lan1 is not in flowtable ft's device list"
        # 7.3's ip6_tnl_fill_forward_path refuses the DS-Lite connection first: IPv4 into an ip6tnl
        dslite = lan1 if profile == "linux-7.2" else ("path resolution failed: ip6_tnl_fill_forward_path: packet "
                                                      "ethertype 0x0800 is not IPv6 (7.3) [entry 0 (ds-dslite), "
                                                      "-EOPNOTSUPP]")
        assert [a.why for a in answers] == [lan1, lan1, dslite, lan1, lan1]
    report = build_report(sim)
    ft = report["flowtables"][0]
    assert (ft["fastpath"], ft["slowpath"], ft["reasons"], ft["flows_created"]) == EXPECTED_FT[profile]
    dl = next(t for t in report["traffic"] if t["name"] == "tcp-download")["directions"]["reply"]
    assert (dl["sent"], dl["fastpath"], dl["slowpath"]) == \
        {"linux-6.12": (502, 475, 81)}.get(profile, (502, 0, 1506))


def test_counters_without_counter_statement(sim):
    """"My firewall counters do not match the traffic": fw4's forward chain accepts established packets in
    `ct state vmap { established : accept, … }` without a counter; the zone rule `oifname { "pppoe-wan",
    "ds-dslite" } counter accept` (accept_to_wan) counts only the packets that reach it on the slow path.
    Fast-path packets (nf_flow_offload_ip_hook) never enter the forward chain, but the flowtable's
    `counter` flag (NF_FLOWTABLE_COUNTER, nf_flow_table_acct) still adds them to conntrack's counters."""
    profile = sim.profile.name
    nft = sim.kernel.netns["router"].nft
    counted = sum(c.packets for k, c in nft.rule_counters.items() if k[2] == "accept_to_wan")
    # the one-way stream udp-voip-after-pause stays NEW (no reply): its packets reach accept_to_wan until
    # the flow takes them (6.12: 2 of 100), or all 100 when no flow is ever created (7.x)
    assert counted == {"linux-6.12": 9}.get(profile, 113)
    report = build_report(sim)
    sent = sum(t["directions"]["original"]["sent"] for t in report["traffic"])
    assert sent == 672
    ct = {e["original"]: e["counters"]["original"]["packets"] for e in report["conntrack"]["router"]}
    assert ct["192.168.1.10:40000 -> 198.51.100.10:443"] == 24  # every packet, fast or slow


def test_long_udp_flow_times_out_in_a_pause():
    """"Long UDP streams fall back to the slow path": a flow lives nf_flowtable_udp_timeout (30 s) after its
    last fast-path packet; nf_flow_table_gc / nf_flow_offload_gc_step tear it down when it expires
    (flow_offload_has_expired).  udp-voip stops at 20 s; its flow expires at the GC tick of 50 s; after
    the pause (80 s) the stream, from the next source port, gets a new flow (two slow-path packets: the first
    is unconfirmed when `flow add` runs; then fast).  Shown under 6.12,
    where flows are created at all (see test_why_bridged_and_pppoe_traffic_stays_slow)."""
    sim = Simulation(TOPO, "linux-6.12").run()
    ft = sim.kernel.netns["router"].flowtables["ft"]
    events = [(round(t, 1), ev, fid, why) for t, ev, fid, why in ft.history if fid in (2, 6)]
    assert events == [(0.0, "add", 2, ""), (50.0, "teardown", 2, "expired"), (50.0, "free", 2, ""),
                      (80.1, "add", 6, "")]
    report = build_report(sim)
    after = next(t for t in report["traffic"] if t["name"] == "udp-voip-after-pause")["directions"]["original"]
    assert (after["sent"], after["fastpath"], after["slowpath"]) == (100, 98, 2)
