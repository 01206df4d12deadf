"""Every scenario of the kernel selftest ``tools/testing/selftests/net/netfilter/nft_flowtable.sh`` (as in Linux
7.2.13 and 7.3-rc7, identical), as a shipped topology, with the script's own checks.

The script's checks, per transfer (``test_tcp_forwarding_ip``):

* "transfer complete" (``check_transfer``: ``cmp`` of the file against what each side received, both ways);
* ``check_counters``: the forward chain's named counters ``routed_orig`` / ``routed_repl`` on nsr1, read with
  ``nft reset counter`` (so per transfer), as *bytes*, must not exceed the file size — the flowtable took the
  stream, the forward chain saw only the packets before the flow existed;
* ``check_dscp``: ns2's ``ip4dscp0`` / ``ip4dscp3`` input counters (packets), per DSCP variant.

flowsim is deterministic, so each (scenario, profile) has exact counts, stored in :data:`EXPECTED` and compared
in full; the script's inequalities (its floor) are asserted as well.  One transfer is one ``[[traffic]]``
table of the scenario's topology, run alone, so the counters are the script's per-transfer reads.

What the simulator does not do, and how the checks read here:

* TCP is Linux's where the script depends on it (the topologies set ``acks = "linux"``): receivers send pure ACKs
  (quick ACKs, then delayed ACKs), and a segment PMTU discovery loses (``frag-needed`` / ``pkt-too-big`` at a
  router) is sent again at once cut to the new MSS (tcp_v4_mtu_reduced / tcp_v6_mtu_reduced →
  tcp_simple_retransmit), as is every write after it.  "Transfer complete" is therefore: nothing dropped but
  what PMTU discovery costs, and each receiver got every byte its peer sent (``rcv_nxt`` reached the peer's
  ``snd_nxt``).
* The files are scaled (see the topologies' header): 200 segments per direction for the script's 2 MiB file
  (PMTU discovery on), 50 for its 128 KiB ``nsin_small`` (off); the counter limit is that many segments of
  payload.

``python -m tests.test_selftest_scenarios`` prints the measured table (to refresh :data:`EXPECTED`) and
``python -m tests.test_selftest_scenarios --doc`` writes ``docs/selftest.md`` from the same data.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import NamedTuple

import pytest

from flowsim.config.topology import load_topology
from flowsim.profiles import PROFILES, Profile, get_profile
from flowsim.sim.report import build_report
from flowsim.sim.simulation import Simulation
from flowsim.sim.traffic import TCP_RETRIES2

ROOT = Path(__file__).resolve().parent.parent
TOPO = ROOT / "topologies"
SCRIPT = "tools/testing/selftests/net/netfilter/nft_flowtable.sh"
PMTU_LOSS = {"frag-needed", "pkt-too-big"}  # lost to PMTU discovery, then retransmitted (tcp_simple_retransmit)


class Row(NamedTuple):
    id: str
    topology: str
    traffic: str  # the [[traffic]] table run alone; "*" = all of them (check_dscp "dscp_none" reads after two)
    what: str  # the script's test name (its PASS/FAIL text)
    function: str  # the script's function
    checks: tuple[str, ...]  # "transfer", "counters", "dscp_none", "dscp_ingress", "dscp_egress", "dscp_fwd"
    needs: str = ""  # "ipip" / "ip6ip6": the profile must accelerate that tunnel (else the row is not in it)
    kernel: str = ""  # the kernel function that decides the result


ROWS: list[Row] = [
    Row("base-v4", "selftest-base.toml", "tcp-12345", "flow offloaded for ns1/ns2 (pmtu disabled)",
        "test_tcp_forwarding (first test)", ("transfer",),
        kernel="nf_flow_exceeds_mtu (2000-byte packets, 1500 flow MTU: slow path, ip_fragment)"),
    Row("base-v6", "selftest-base.toml", "tcp6-12345", "IPv6 flow offloaded for ns1/ns2",
        "test_tcp_forwarding (first test)", ("transfer",),
        kernel="nf_flow_offload_ipv6_hook / ip6_forward (Packet Too Big, IPv6 always discovers)"),
    Row("dscp-none", "selftest-base.toml", "*", "dscp_none", "check_dscp \"dscp_none\"", ("dscp_none",),
        kernel="nft_payload (ip dscp) in ns2's input chain"),
]
for _pmtu, _suffix in ((0, "-nopmtu"), (1, "")):
    for _kind, _kfn in (("ingress", "netdev ingress hook (nf_hook_ingress) before nf_flow_offload_ip_hook"),
                        ("egress", "netdev egress hook (nf_hook_egress) in dev_queue_xmit, after the fast path"),
                        ("fwd", "nft forward chain: only slow-path packets (nf_flow_offload_ip_hook skips it)")):
        ROWS.append(Row(f"dscp-{_kind}-pmtu{_pmtu}", f"selftest-dscp-{_kind}.toml", f"tcp-12345{_suffix}",
                        f"dscp_{_kind} (pmtu {_pmtu})", f"test_tcp_forwarding_set_dscp, check_dscp \"dscp_{_kind}\"",
                        ("transfer", f"dscp_{_kind}"), kernel=_kfn))
for _pmtu, _suffix in ((0, "-nopmtu"), (1, "")):
    _checks = ("transfer", "counters") if _pmtu else ("transfer",)
    ROWS += [
        Row(f"nat-masq-pmtu{_pmtu}", "selftest-nat-pmtu.toml", f"tcp-masquerade{_suffix}",
            f"flow offload for ns1/ns2 with masquerade (pmtu {_pmtu})", "test_tcp_forwarding_nat", _checks,
            kernel="nf_flow_offload_ip_hook: nf_flow_exceeds_mtu, nf_flow_nat_ip"),
        Row(f"nat-dnat-pmtu{_pmtu}", "selftest-nat-pmtu.toml", f"tcp-dnat-1666{_suffix}",
            f"flow offload for ns1/ns2 with dnat (pmtu {_pmtu})", "test_tcp_forwarding_nat", _checks,
            kernel="nf_flow_offload_ip_hook: nf_flow_exceeds_mtu, nf_flow_nat_ip"),
    ]
_TUN = "nf_flow_ip4_tunnel_proto / ipip_fill_forward_path, nf_flow_tunnel_v4_push"
_TUN6 = "nf_flow_ip6_tunnel_proto / ip6_tnl_fill_forward_path, nf_flow_tunnel_v6_push"
for _topo, _over, _fn in (("selftest-ipip.toml", "", "test_ipip"), ("selftest-ipip-vlan.toml", " over vlan", "test_ipip")):
    _id = "ipip-vlan" if _over else "ipip"
    ROWS += [
        Row(f"{_id}-masq", _topo, "tcp-12345", f"flow offload for ns1/ns2 with masquerade IPIP tunnel{_over}",
            f"{_fn} (test_tcp_forwarding_nat)", ("transfer", "counters"), "ipip", _TUN),
        Row(f"{_id}-dnat", _topo, "tcp-dnat-1666", f"flow offload for ns1/ns2 with dnat IPIP tunnel{_over}",
            f"{_fn} (test_tcp_forwarding_nat)", ("transfer", "counters"), "ipip", _TUN),
        Row(f"{_id}6", _topo, "tcp6-12345", f"flow offload for ns1/ns2 IP6IP6 tunnel{_over}",
            f"{_fn} (test_tcp_forwarding)", ("transfer", "counters"), "ip6ip6", _TUN6),
    ]
_BR = "br_fill_forward_path / nft_dev_path_info (bridge port veth0 in the flow's path)"
ROWS += [
    Row("bridge-masq", "selftest-bridge-nat.toml", "tcp-masquerade", "flow offload for ns1/ns2 with masquerade on bridge",
        "test_bridge (test_tcp_forwarding_nat)", ("transfer", "counters"), kernel=_BR),
    Row("bridge-dnat", "selftest-bridge-nat.toml", "tcp-dnat-1666", "flow offload for ns1/ns2 with dnat on bridge",
        "test_bridge (test_tcp_forwarding_nat)", ("transfer", "counters"), kernel=_BR),
    Row("bridge-ipip", "selftest-bridge-ipip.toml", "tcp-12345", "bridge + IPIP tunnel",
        "test_bridge (test_tcp_forwarding)", ("transfer", "counters"), "ipip",
        "nf_flow_tunnel_v4_push: the route it reads (opposite tuple's dst_cache before 7.2)"),
    Row("bridge-ip6ip6", "selftest-bridge-ipip.toml", "tcp6-12345", "bridge + IP6IP6 tunnel",
        "test_bridge (test_tcp_forwarding)", ("transfer", "counters"), "ip6ip6",
        "nf_flow_tunnel_v6_push: the route it reads (opposite tuple's dst_cache before 7.2)"),
    Row("bridge-vlan-masq", "selftest-bridge-vlan.toml", "tcp-masquerade",
        "flow offload for ns1/ns2 with masquerade bridge and VLAN", "test_bridge (test_tcp_forwarding_nat)",
        ("transfer", "counters"), kernel="br_fill_forward_path + vlan_dev_fill_forward_path, nf_flow_encap_push"),
    Row("bridge-vlan-dnat", "selftest-bridge-vlan.toml", "tcp-dnat-1666",
        "flow offload for ns1/ns2 with dnat bridge and VLAN", "test_bridge (test_tcp_forwarding_nat)",
        ("transfer", "counters"), kernel="br_fill_forward_path + vlan_dev_fill_forward_path, nf_flow_encap_push"),
    Row("ipsec-v4", "selftest-ipsec.toml", "tcp-12345", "ipsec tunnel mode for ns1/ns2",
        "do_esp, test_tcp_forwarding", ("transfer", "counters"),
        kernel="nft_flow_route (xfrm dst: FLOW_OFFLOAD_XMIT_XFRM), nf_flow_xmit_xfrm"),
    Row("ipsec-v6", "selftest-ipsec.toml", "tcp6-12345", "IPv6 ipsec tunnel mode for ns1/ns2",
        "do_esp, test_tcp_forwarding", ("transfer", "counters"),
        kernel="nf_flow_offload_ipv6_hook (IPv4-only selectors: not encrypted)"),
]
for _pmtu, _suffix in ((0, "-nopmtu"), (1, "")):
    _checks = ("transfer", "counters") if _pmtu else ("transfer",)
    ROWS += [
        Row(f"rerun-masq-pmtu{_pmtu}", "selftest-rerun-mtu.toml", f"tcp-masquerade{_suffix}",
            f"re-run -o 4000 -l 1300 -r 9000: masquerade (pmtu {_pmtu})", "$0 -o -l -r -s (test_tcp_forwarding_nat)",
            _checks, kernel="nf_flow_exceeds_mtu, ip_fragment / icmp_send (ICMP_FRAG_NEEDED)"),
        Row(f"rerun-dnat-pmtu{_pmtu}", "selftest-rerun-mtu.toml", f"tcp-dnat-1666{_suffix}",
            f"re-run -o 4000 -l 1300 -r 9000: dnat (pmtu {_pmtu})", "$0 -o -l -r -s (test_tcp_forwarding_nat)",
            _checks, kernel="nf_flow_exceeds_mtu, ip_fragment / icmp_send (ICMP_FRAG_NEEDED)"),
    ]


class Got(NamedTuple):
    """One transfer's result.  Per direction: sent, delivered, fast path, slow path (hook verdicts); the
    forward-chain counters (packets, bytes); ns2's DSCP counters (packets); drops by reason."""

    orig: tuple[int, int, int, int]
    repl: tuple[int, int, int, int]
    routed_orig: tuple[int, int]
    routed_repl: tuple[int, int]
    dscp0: int
    dscp3: int
    drops: tuple[tuple[str, int], ...]
    complete: bool = True  # every byte each end sent reached the other (check_transfer's cmp)


def in_kernel(row: Row, profile: Profile) -> bool:
    """Whether the profile's kernel has the row's tunnel acceleration (IPIP: 6.19, IP6IP6: 7.0)."""
    if row.needs == "ipip":
        return profile.ipip_rx and profile.ipip_fill_forward_path
    if row.needs == "ip6ip6":
        return profile.ip6ip6_rx and profile.ip6tnl_fill_forward_path
    return True


def measure(row: Row, profile: Profile) -> tuple[Got, Simulation, dict]:
    topo = load_topology(TOPO / row.topology)
    sim = Simulation(topo, profile)
    if row.traffic != "*":
        sim = Simulation(topo, profile, traffic=[s for s in sim.specs if s.name == row.traffic])
    sim.run()
    r = build_report(sim)
    c = r["counters"]
    def d(x):
        return (x["sent"], x["delivered"], x["fastpath"], x["slowpath"])
    t = r["traffic"][0]["directions"] if row.traffic != "*" else None
    orig = d(t["original"]) if t else (0, 0, 0, 0)
    repl = d(t["reply"]) if t else (0, 0, 0, 0)
    got = Got(orig, repl,
              (c["nsr1"]["inet filter routed_orig"]["packets"], c["nsr1"]["inet filter routed_orig"]["bytes"]),
              (c["nsr1"]["inet filter routed_repl"]["packets"], c["nsr1"]["inet filter routed_repl"]["bytes"]),
              c["ns2"]["inet filter ip4dscp0"]["packets"], c["ns2"]["inet filter ip4dscp3"]["packets"],
              tuple(sorted(r["drops"].items())), all(_received_all(c) for c in sim.conversations))
    return got, sim, r


def _received_all(conv) -> bool:
    """Both ends' ``rcv_nxt`` reached what the other end sent (its ``snd_nxt``, FIN included)."""
    ends = [conv.client, conv.server]
    return None not in ends and all(a.rcv_nxt == b.snd_nxt for a, b in (ends, ends[::-1]))


def script_checks(row: Row, got: Got, max_bytes: int | None) -> dict[str, bool]:
    """The script's own verdicts (its inequalities) on one transfer."""
    out = {}
    for check in row.checks:
        if check == "transfer":  # check_transfer, both ways: nothing lost but what PMTU discovery costs
            drops = dict(got.drops)
            lost = got.orig[0] - got.orig[1] + got.repl[0] - got.repl[1]
            out[check] = set(drops) <= PMTU_LOSS and lost == sum(drops.values()) and got.complete
        elif check == "counters":  # check_counters: the bytes the forward chain counted, at most the file
            assert max_bytes is not None
            out[check] = got.routed_orig[1] <= max_bytes and got.routed_repl[1] <= max_bytes
        elif check == "dscp_none":
            out[check] = got.dscp3 == 0 and got.dscp0 > 0
        elif check == "dscp_fwd":
            out[check] = got.dscp3 > 0 and got.dscp0 > 0
        else:  # dscp_ingress, dscp_egress
            out[check] = got.dscp3 > 0 and got.dscp0 == 0
    return out


def max_bytes(row: Row) -> int | None:
    """check_counters' limit (``du -sb`` of the file): the scaled file's payload bytes."""
    if row.traffic == "*":
        return None
    sim = Simulation(load_topology(TOPO / row.topology), get_profile(None))
    (spec,) = [s for s in sim.specs if s.name == row.traffic]
    return spec.packets * (spec.size - (20 if spec.dst.version == 4 else 40) - 20)


def verdict(row: Row, got: Got) -> list[str]:
    """The script checks that fail (empty: PASS)."""
    return sorted(k for k, ok in script_checks(row, got, max_bytes(row)).items() if not ok)


def cases() -> list[tuple[Row, str]]:
    return [(row, name) for row in ROWS for name, p in PROFILES.items() if in_kernel(row, p)]


# --- the exact results: generated by `python -m tests.test_selftest_scenarios`, checked against the run
EXPECTED: dict[tuple[str, str], Got] = {
    ('base-v4', 'linux-6.1'): Got((63, 63, 9, 54), (55, 55, 3, 102), (54, 100216), (52, 100112), 63, 0, ()),  # PASS
    ('base-v4', 'linux-6.12'): Got((63, 63, 9, 54), (55, 55, 3, 102), (54, 100216), (52, 100112), 63, 0, ()),  # PASS
    ('base-v4', 'linux-6.18'): Got((63, 63, 11, 52), (55, 55, 4, 101), (52, 100112), (51, 100060), 63, 0, ()),  # PASS
    ('base-v4', 'linux-6.19'): Got((63, 63, 11, 52), (55, 55, 4, 101), (52, 100112), (51, 100060), 63, 0, ()),  # PASS
    ('base-v4', 'linux-7.0'): Got((63, 63, 11, 52), (55, 55, 4, 101), (52, 100112), (51, 100060), 63, 0, ()),  # PASS
    ('base-v4', 'linux-7.1.5'): Got((63, 63, 11, 52), (55, 55, 4, 101), (52, 100112), (51, 100060), 63, 0, ()),  # PASS
    ('base-v4', 'linux-7.2'): Got((63, 63, 11, 52), (55, 55, 4, 101), (52, 100112), (51, 100060), 63, 0, ()),  # PASS
    ('base-v4', 'linux-7.3'): Got((63, 63, 11, 52), (55, 55, 4, 101), (52, 100112), (51, 100060), 63, 0, ()),  # PASS
    ('base-v6', 'linux-6.1'): Got((146, 142, 138, 8), (144, 140, 138, 2), (4, 296), (2, 152), 0, 0, (('pkt-too-big', 8),)),  # PASS
    ('base-v6', 'linux-6.12'): Got((146, 142, 138, 8), (144, 140, 138, 2), (4, 296), (2, 152), 0, 0, (('pkt-too-big', 8),)),  # PASS
    ('base-v6', 'linux-6.18'): Got((146, 142, 140, 6), (144, 140, 139, 1), (2, 152), (1, 80), 0, 0, (('pkt-too-big', 8),)),  # PASS
    ('base-v6', 'linux-6.19'): Got((146, 142, 140, 6), (144, 140, 139, 1), (2, 152), (1, 80), 0, 0, (('pkt-too-big', 8),)),  # PASS
    ('base-v6', 'linux-7.0'): Got((146, 142, 140, 6), (144, 140, 139, 1), (2, 152), (1, 80), 0, 0, (('pkt-too-big', 8),)),  # PASS
    ('base-v6', 'linux-7.1.5'): Got((146, 142, 140, 6), (144, 140, 139, 1), (2, 152), (1, 80), 0, 0, (('pkt-too-big', 8),)),  # PASS
    ('base-v6', 'linux-7.2'): Got((146, 142, 140, 6), (144, 140, 139, 1), (2, 152), (1, 80), 0, 0, (('pkt-too-big', 8),)),  # PASS
    ('base-v6', 'linux-7.3'): Got((146, 142, 140, 6), (144, 140, 139, 1), (2, 152), (1, 80), 0, 0, (('pkt-too-big', 8),)),  # PASS
    ('dscp-none', 'linux-6.1'): Got((0, 0, 0, 0), (0, 0, 0, 0), (58, 100512), (54, 100264), 63, 0, (('pkt-too-big', 8),)),  # PASS
    ('dscp-none', 'linux-6.12'): Got((0, 0, 0, 0), (0, 0, 0, 0), (58, 100512), (54, 100264), 63, 0, (('pkt-too-big', 8),)),  # PASS
    ('dscp-none', 'linux-6.18'): Got((0, 0, 0, 0), (0, 0, 0, 0), (54, 100264), (52, 100140), 63, 0, (('pkt-too-big', 8),)),  # PASS
    ('dscp-none', 'linux-6.19'): Got((0, 0, 0, 0), (0, 0, 0, 0), (54, 100264), (52, 100140), 63, 0, (('pkt-too-big', 8),)),  # PASS
    ('dscp-none', 'linux-7.0'): Got((0, 0, 0, 0), (0, 0, 0, 0), (54, 100264), (52, 100140), 63, 0, (('pkt-too-big', 8),)),  # PASS
    ('dscp-none', 'linux-7.1.5'): Got((0, 0, 0, 0), (0, 0, 0, 0), (54, 100264), (52, 100140), 63, 0, (('pkt-too-big', 8),)),  # PASS
    ('dscp-none', 'linux-7.2'): Got((0, 0, 0, 0), (0, 0, 0, 0), (54, 100264), (52, 100140), 63, 0, (('pkt-too-big', 8),)),  # PASS
    ('dscp-none', 'linux-7.3'): Got((0, 0, 0, 0), (0, 0, 0, 0), (54, 100264), (52, 100140), 63, 0, (('pkt-too-big', 8),)),  # PASS
    ('dscp-ingress-pmtu0', 'linux-6.1'): Got((63, 63, 9, 54), (55, 55, 3, 102), (54, 100216), (52, 100112), 0, 63, ()),  # PASS
    ('dscp-ingress-pmtu0', 'linux-6.12'): Got((63, 63, 9, 54), (55, 55, 3, 102), (54, 100216), (52, 100112), 0, 63, ()),  # PASS
    ('dscp-ingress-pmtu0', 'linux-6.18'): Got((63, 63, 11, 52), (55, 55, 4, 101), (52, 100112), (51, 100060), 0, 63, ()),  # PASS
    ('dscp-ingress-pmtu0', 'linux-6.19'): Got((63, 63, 11, 52), (55, 55, 4, 101), (52, 100112), (51, 100060), 0, 63, ()),  # PASS
    ('dscp-ingress-pmtu0', 'linux-7.0'): Got((63, 63, 11, 52), (55, 55, 4, 101), (52, 100112), (51, 100060), 0, 63, ()),  # PASS
    ('dscp-ingress-pmtu0', 'linux-7.1.5'): Got((63, 63, 11, 52), (55, 55, 4, 101), (52, 100112), (51, 100060), 0, 63, ()),  # PASS
    ('dscp-ingress-pmtu0', 'linux-7.2'): Got((63, 63, 11, 52), (55, 55, 4, 101), (52, 100112), (51, 100060), 0, 63, ()),  # PASS
    ('dscp-ingress-pmtu0', 'linux-7.3'): Got((63, 63, 11, 52), (55, 55, 4, 101), (52, 100112), (51, 100060), 0, 63, ()),  # PASS
    ('dscp-egress-pmtu0', 'linux-6.1'): Got((63, 63, 9, 54), (55, 55, 3, 102), (54, 100216), (52, 100112), 0, 63, ()),  # PASS
    ('dscp-egress-pmtu0', 'linux-6.12'): Got((63, 63, 9, 54), (55, 55, 3, 102), (54, 100216), (52, 100112), 0, 63, ()),  # PASS
    ('dscp-egress-pmtu0', 'linux-6.18'): Got((63, 63, 11, 52), (55, 55, 4, 101), (52, 100112), (51, 100060), 0, 63, ()),  # PASS
    ('dscp-egress-pmtu0', 'linux-6.19'): Got((63, 63, 11, 52), (55, 55, 4, 101), (52, 100112), (51, 100060), 0, 63, ()),  # PASS
    ('dscp-egress-pmtu0', 'linux-7.0'): Got((63, 63, 11, 52), (55, 55, 4, 101), (52, 100112), (51, 100060), 0, 63, ()),  # PASS
    ('dscp-egress-pmtu0', 'linux-7.1.5'): Got((63, 63, 11, 52), (55, 55, 4, 101), (52, 100112), (51, 100060), 0, 63, ()),  # PASS
    ('dscp-egress-pmtu0', 'linux-7.2'): Got((63, 63, 11, 52), (55, 55, 4, 101), (52, 100112), (51, 100060), 0, 63, ()),  # PASS
    ('dscp-egress-pmtu0', 'linux-7.3'): Got((63, 63, 11, 52), (55, 55, 4, 101), (52, 100112), (51, 100060), 0, 63, ()),  # PASS
    ('dscp-fwd-pmtu0', 'linux-6.1'): Got((63, 63, 9, 54), (55, 55, 3, 102), (54, 100216), (52, 100112), 9, 54, ()),  # PASS
    ('dscp-fwd-pmtu0', 'linux-6.12'): Got((63, 63, 9, 54), (55, 55, 3, 102), (54, 100216), (52, 100112), 9, 54, ()),  # PASS
    ('dscp-fwd-pmtu0', 'linux-6.18'): Got((63, 63, 11, 52), (55, 55, 4, 101), (52, 100112), (51, 100060), 11, 52, ()),  # PASS
    ('dscp-fwd-pmtu0', 'linux-6.19'): Got((63, 63, 11, 52), (55, 55, 4, 101), (52, 100112), (51, 100060), 11, 52, ()),  # PASS
    ('dscp-fwd-pmtu0', 'linux-7.0'): Got((63, 63, 11, 52), (55, 55, 4, 101), (52, 100112), (51, 100060), 11, 52, ()),  # PASS
    ('dscp-fwd-pmtu0', 'linux-7.1.5'): Got((63, 63, 11, 52), (55, 55, 4, 101), (52, 100112), (51, 100060), 11, 52, ()),  # PASS
    ('dscp-fwd-pmtu0', 'linux-7.2'): Got((63, 63, 11, 52), (55, 55, 4, 101), (52, 100112), (51, 100060), 11, 52, ()),  # PASS
    ('dscp-fwd-pmtu0', 'linux-7.3'): Got((63, 63, 11, 52), (55, 55, 4, 101), (52, 100112), (51, 100060), 11, 52, ()),  # PASS
    ('dscp-ingress-pmtu1', 'linux-6.1'): Got((596, 592, 588, 8), (594, 590, 588, 2), (4, 216), (2, 112), 0, 592, (('frag-needed', 8),)),  # PASS
    ('dscp-ingress-pmtu1', 'linux-6.12'): Got((596, 592, 588, 8), (594, 590, 588, 2), (4, 216), (2, 112), 0, 592, (('frag-needed', 8),)),  # PASS
    ('dscp-ingress-pmtu1', 'linux-6.18'): Got((596, 592, 590, 6), (594, 590, 589, 1), (2, 112), (1, 60), 0, 592, (('frag-needed', 8),)),  # PASS
    ('dscp-ingress-pmtu1', 'linux-6.19'): Got((596, 592, 590, 6), (594, 590, 589, 1), (2, 112), (1, 60), 0, 592, (('frag-needed', 8),)),  # PASS
    ('dscp-ingress-pmtu1', 'linux-7.0'): Got((596, 592, 590, 6), (594, 590, 589, 1), (2, 112), (1, 60), 0, 592, (('frag-needed', 8),)),  # PASS
    ('dscp-ingress-pmtu1', 'linux-7.1.5'): Got((596, 592, 590, 6), (594, 590, 589, 1), (2, 112), (1, 60), 0, 592, (('frag-needed', 8),)),  # PASS
    ('dscp-ingress-pmtu1', 'linux-7.2'): Got((596, 592, 590, 6), (594, 590, 589, 1), (2, 112), (1, 60), 0, 592, (('frag-needed', 8),)),  # PASS
    ('dscp-ingress-pmtu1', 'linux-7.3'): Got((596, 592, 590, 6), (594, 590, 589, 1), (2, 112), (1, 60), 0, 592, (('frag-needed', 8),)),  # PASS
    ('dscp-egress-pmtu1', 'linux-6.1'): Got((596, 592, 588, 8), (594, 590, 588, 2), (4, 216), (2, 112), 0, 592, (('frag-needed', 8),)),  # PASS
    ('dscp-egress-pmtu1', 'linux-6.12'): Got((596, 592, 588, 8), (594, 590, 588, 2), (4, 216), (2, 112), 0, 592, (('frag-needed', 8),)),  # PASS
    ('dscp-egress-pmtu1', 'linux-6.18'): Got((596, 592, 590, 6), (594, 590, 589, 1), (2, 112), (1, 60), 0, 592, (('frag-needed', 8),)),  # PASS
    ('dscp-egress-pmtu1', 'linux-6.19'): Got((596, 592, 590, 6), (594, 590, 589, 1), (2, 112), (1, 60), 0, 592, (('frag-needed', 8),)),  # PASS
    ('dscp-egress-pmtu1', 'linux-7.0'): Got((596, 592, 590, 6), (594, 590, 589, 1), (2, 112), (1, 60), 0, 592, (('frag-needed', 8),)),  # PASS
    ('dscp-egress-pmtu1', 'linux-7.1.5'): Got((596, 592, 590, 6), (594, 590, 589, 1), (2, 112), (1, 60), 0, 592, (('frag-needed', 8),)),  # PASS
    ('dscp-egress-pmtu1', 'linux-7.2'): Got((596, 592, 590, 6), (594, 590, 589, 1), (2, 112), (1, 60), 0, 592, (('frag-needed', 8),)),  # PASS
    ('dscp-egress-pmtu1', 'linux-7.3'): Got((596, 592, 590, 6), (594, 590, 589, 1), (2, 112), (1, 60), 0, 592, (('frag-needed', 8),)),  # PASS
    ('dscp-fwd-pmtu1', 'linux-6.1'): Got((596, 592, 588, 8), (594, 590, 588, 2), (4, 216), (2, 112), 588, 4, (('frag-needed', 8),)),  # PASS
    ('dscp-fwd-pmtu1', 'linux-6.12'): Got((596, 592, 588, 8), (594, 590, 588, 2), (4, 216), (2, 112), 588, 4, (('frag-needed', 8),)),  # PASS
    ('dscp-fwd-pmtu1', 'linux-6.18'): Got((596, 592, 590, 6), (594, 590, 589, 1), (2, 112), (1, 60), 590, 2, (('frag-needed', 8),)),  # PASS
    ('dscp-fwd-pmtu1', 'linux-6.19'): Got((596, 592, 590, 6), (594, 590, 589, 1), (2, 112), (1, 60), 590, 2, (('frag-needed', 8),)),  # PASS
    ('dscp-fwd-pmtu1', 'linux-7.0'): Got((596, 592, 590, 6), (594, 590, 589, 1), (2, 112), (1, 60), 590, 2, (('frag-needed', 8),)),  # PASS
    ('dscp-fwd-pmtu1', 'linux-7.1.5'): Got((596, 592, 590, 6), (594, 590, 589, 1), (2, 112), (1, 60), 590, 2, (('frag-needed', 8),)),  # PASS
    ('dscp-fwd-pmtu1', 'linux-7.2'): Got((596, 592, 590, 6), (594, 590, 589, 1), (2, 112), (1, 60), 590, 2, (('frag-needed', 8),)),  # PASS
    ('dscp-fwd-pmtu1', 'linux-7.3'): Got((596, 592, 590, 6), (594, 590, 589, 1), (2, 112), (1, 60), 590, 2, (('frag-needed', 8),)),  # PASS
    ('nat-masq-pmtu0', 'linux-6.1'): Got((63, 63, 9, 54), (55, 55, 3, 102), (54, 100216), (52, 100112), 63, 0, ()),  # PASS
    ('nat-masq-pmtu0', 'linux-6.12'): Got((63, 63, 9, 54), (55, 55, 3, 102), (54, 100216), (52, 100112), 63, 0, ()),  # PASS
    ('nat-masq-pmtu0', 'linux-6.18'): Got((63, 63, 11, 52), (55, 55, 4, 101), (52, 100112), (51, 100060), 63, 0, ()),  # PASS
    ('nat-masq-pmtu0', 'linux-6.19'): Got((63, 63, 11, 52), (55, 55, 4, 101), (52, 100112), (51, 100060), 63, 0, ()),  # PASS
    ('nat-masq-pmtu0', 'linux-7.0'): Got((63, 63, 11, 52), (55, 55, 4, 101), (52, 100112), (51, 100060), 63, 0, ()),  # PASS
    ('nat-masq-pmtu0', 'linux-7.1.5'): Got((63, 63, 11, 52), (55, 55, 4, 101), (52, 100112), (51, 100060), 63, 0, ()),  # PASS
    ('nat-masq-pmtu0', 'linux-7.2'): Got((63, 63, 11, 52), (55, 55, 4, 101), (52, 100112), (51, 100060), 63, 0, ()),  # PASS
    ('nat-masq-pmtu0', 'linux-7.3'): Got((63, 63, 11, 52), (55, 55, 4, 101), (52, 100112), (51, 100060), 63, 0, ()),  # PASS
    ('nat-dnat-pmtu0', 'linux-6.1'): Got((63, 63, 9, 54), (55, 55, 3, 102), (54, 100216), (52, 100112), 63, 0, ()),  # PASS
    ('nat-dnat-pmtu0', 'linux-6.12'): Got((63, 63, 9, 54), (55, 55, 3, 102), (54, 100216), (52, 100112), 63, 0, ()),  # PASS
    ('nat-dnat-pmtu0', 'linux-6.18'): Got((63, 63, 11, 52), (55, 55, 4, 101), (52, 100112), (51, 100060), 63, 0, ()),  # PASS
    ('nat-dnat-pmtu0', 'linux-6.19'): Got((63, 63, 11, 52), (55, 55, 4, 101), (52, 100112), (51, 100060), 63, 0, ()),  # PASS
    ('nat-dnat-pmtu0', 'linux-7.0'): Got((63, 63, 11, 52), (55, 55, 4, 101), (52, 100112), (51, 100060), 63, 0, ()),  # PASS
    ('nat-dnat-pmtu0', 'linux-7.1.5'): Got((63, 63, 11, 52), (55, 55, 4, 101), (52, 100112), (51, 100060), 63, 0, ()),  # PASS
    ('nat-dnat-pmtu0', 'linux-7.2'): Got((63, 63, 11, 52), (55, 55, 4, 101), (52, 100112), (51, 100060), 63, 0, ()),  # PASS
    ('nat-dnat-pmtu0', 'linux-7.3'): Got((63, 63, 11, 52), (55, 55, 4, 101), (52, 100112), (51, 100060), 63, 0, ()),  # PASS
    ('nat-masq-pmtu1', 'linux-6.1'): Got((596, 592, 588, 8), (594, 590, 588, 2), (4, 216), (2, 112), 592, 0, (('frag-needed', 8),)),  # PASS
    ('nat-masq-pmtu1', 'linux-6.12'): Got((596, 592, 588, 8), (594, 590, 588, 2), (4, 216), (2, 112), 592, 0, (('frag-needed', 8),)),  # PASS
    ('nat-masq-pmtu1', 'linux-6.18'): Got((596, 592, 590, 6), (594, 590, 589, 1), (2, 112), (1, 60), 592, 0, (('frag-needed', 8),)),  # PASS
    ('nat-masq-pmtu1', 'linux-6.19'): Got((596, 592, 590, 6), (594, 590, 589, 1), (2, 112), (1, 60), 592, 0, (('frag-needed', 8),)),  # PASS
    ('nat-masq-pmtu1', 'linux-7.0'): Got((596, 592, 590, 6), (594, 590, 589, 1), (2, 112), (1, 60), 592, 0, (('frag-needed', 8),)),  # PASS
    ('nat-masq-pmtu1', 'linux-7.1.5'): Got((596, 592, 590, 6), (594, 590, 589, 1), (2, 112), (1, 60), 592, 0, (('frag-needed', 8),)),  # PASS
    ('nat-masq-pmtu1', 'linux-7.2'): Got((596, 592, 590, 6), (594, 590, 589, 1), (2, 112), (1, 60), 592, 0, (('frag-needed', 8),)),  # PASS
    ('nat-masq-pmtu1', 'linux-7.3'): Got((596, 592, 590, 6), (594, 590, 589, 1), (2, 112), (1, 60), 592, 0, (('frag-needed', 8),)),  # PASS
    ('nat-dnat-pmtu1', 'linux-6.1'): Got((596, 592, 588, 8), (594, 590, 588, 2), (4, 216), (2, 112), 592, 0, (('frag-needed', 8),)),  # PASS
    ('nat-dnat-pmtu1', 'linux-6.12'): Got((596, 592, 588, 8), (594, 590, 588, 2), (4, 216), (2, 112), 592, 0, (('frag-needed', 8),)),  # PASS
    ('nat-dnat-pmtu1', 'linux-6.18'): Got((596, 592, 590, 6), (594, 590, 589, 1), (2, 112), (1, 60), 592, 0, (('frag-needed', 8),)),  # PASS
    ('nat-dnat-pmtu1', 'linux-6.19'): Got((596, 592, 590, 6), (594, 590, 589, 1), (2, 112), (1, 60), 592, 0, (('frag-needed', 8),)),  # PASS
    ('nat-dnat-pmtu1', 'linux-7.0'): Got((596, 592, 590, 6), (594, 590, 589, 1), (2, 112), (1, 60), 592, 0, (('frag-needed', 8),)),  # PASS
    ('nat-dnat-pmtu1', 'linux-7.1.5'): Got((596, 592, 590, 6), (594, 590, 589, 1), (2, 112), (1, 60), 592, 0, (('frag-needed', 8),)),  # PASS
    ('nat-dnat-pmtu1', 'linux-7.2'): Got((596, 592, 590, 6), (594, 590, 589, 1), (2, 112), (1, 60), 592, 0, (('frag-needed', 8),)),  # PASS
    ('nat-dnat-pmtu1', 'linux-7.3'): Got((596, 592, 590, 6), (594, 590, 589, 1), (2, 112), (1, 60), 592, 0, (('frag-needed', 8),)),  # PASS
    ('ipip-masq', 'linux-6.19'): Got((596, 592, 576, 20), (594, 590, 588, 2), (0, 0), (2, 112), 592, 0, (('frag-needed', 8),)),  # PASS
    ('ipip-masq', 'linux-7.0'): Got((596, 592, 576, 20), (594, 590, 588, 2), (0, 0), (2, 112), 592, 0, (('frag-needed', 8),)),  # PASS
    ('ipip-masq', 'linux-7.1.5'): Got((596, 592, 576, 20), (594, 590, 588, 2), (0, 0), (2, 112), 592, 0, (('frag-needed', 8),)),  # PASS
    ('ipip-masq', 'linux-7.2'): Got((596, 592, 576, 20), (594, 590, 588, 2), (0, 0), (2, 112), 592, 0, (('frag-needed', 8),)),  # PASS
    ('ipip-masq', 'linux-7.3'): Got((596, 592, 576, 20), (594, 590, 588, 2), (0, 0), (2, 112), 592, 0, (('frag-needed', 8),)),  # PASS
    ('ipip-dnat', 'linux-6.19'): Got((596, 592, 576, 20), (594, 590, 588, 2), (0, 0), (2, 112), 592, 0, (('frag-needed', 8),)),  # PASS
    ('ipip-dnat', 'linux-7.0'): Got((596, 592, 576, 20), (594, 590, 588, 2), (0, 0), (2, 112), 592, 0, (('frag-needed', 8),)),  # PASS
    ('ipip-dnat', 'linux-7.1.5'): Got((596, 592, 576, 20), (594, 590, 588, 2), (0, 0), (2, 112), 592, 0, (('frag-needed', 8),)),  # PASS
    ('ipip-dnat', 'linux-7.2'): Got((596, 592, 576, 20), (594, 590, 588, 2), (0, 0), (2, 112), 592, 0, (('frag-needed', 8),)),  # PASS
    ('ipip-dnat', 'linux-7.3'): Got((596, 592, 576, 20), (594, 590, 588, 2), (0, 0), (2, 112), 592, 0, (('frag-needed', 8),)),  # PASS
    ('ipip6', 'linux-7.0'): Got((598, 594, 379, 219), (596, 592, 590, 2), (0, 0), (2, 152), 0, 0, (('pkt-too-big', 8),)),  # PASS
    ('ipip6', 'linux-7.1.5'): Got((598, 594, 578, 20), (596, 592, 590, 2), (0, 0), (2, 152), 0, 0, (('pkt-too-big', 8),)),  # PASS
    ('ipip6', 'linux-7.2'): Got((598, 594, 578, 20), (596, 592, 590, 2), (0, 0), (2, 152), 0, 0, (('pkt-too-big', 8),)),  # PASS
    ('ipip6', 'linux-7.3'): Got((598, 594, 578, 20), (596, 592, 590, 2), (0, 0), (2, 152), 0, 0, (('pkt-too-big', 8),)),  # PASS
    ('ipip-vlan-masq', 'linux-6.19'): Got((596, 592, 576, 20), (594, 590, 588, 2), (0, 0), (2, 112), 592, 0, (('frag-needed', 8),)),  # PASS
    ('ipip-vlan-masq', 'linux-7.0'): Got((596, 592, 576, 20), (594, 590, 588, 2), (0, 0), (2, 112), 592, 0, (('frag-needed', 8),)),  # PASS
    ('ipip-vlan-masq', 'linux-7.1.5'): Got((596, 592, 576, 20), (594, 590, 588, 2), (0, 0), (2, 112), 592, 0, (('frag-needed', 8),)),  # PASS
    ('ipip-vlan-masq', 'linux-7.2'): Got((596, 592, 576, 20), (594, 590, 588, 2), (0, 0), (2, 112), 592, 0, (('frag-needed', 8),)),  # PASS
    ('ipip-vlan-masq', 'linux-7.3'): Got((596, 592, 576, 20), (594, 590, 588, 2), (0, 0), (2, 112), 592, 0, (('frag-needed', 8),)),  # PASS
    ('ipip-vlan-dnat', 'linux-6.19'): Got((596, 592, 576, 20), (594, 590, 588, 2), (0, 0), (2, 112), 592, 0, (('frag-needed', 8),)),  # PASS
    ('ipip-vlan-dnat', 'linux-7.0'): Got((596, 592, 576, 20), (594, 590, 588, 2), (0, 0), (2, 112), 592, 0, (('frag-needed', 8),)),  # PASS
    ('ipip-vlan-dnat', 'linux-7.1.5'): Got((596, 592, 576, 20), (594, 590, 588, 2), (0, 0), (2, 112), 592, 0, (('frag-needed', 8),)),  # PASS
    ('ipip-vlan-dnat', 'linux-7.2'): Got((596, 592, 576, 20), (594, 590, 588, 2), (0, 0), (2, 112), 592, 0, (('frag-needed', 8),)),  # PASS
    ('ipip-vlan-dnat', 'linux-7.3'): Got((596, 592, 576, 20), (594, 590, 588, 2), (0, 0), (2, 112), 592, 0, (('frag-needed', 8),)),  # PASS
    ('ipip-vlan6', 'linux-7.0'): Got((598, 594, 379, 219), (596, 592, 590, 2), (0, 0), (2, 152), 0, 0, (('pkt-too-big', 8),)),  # PASS
    ('ipip-vlan6', 'linux-7.1.5'): Got((598, 594, 578, 20), (596, 592, 590, 2), (0, 0), (2, 152), 0, 0, (('pkt-too-big', 8),)),  # PASS
    ('ipip-vlan6', 'linux-7.2'): Got((598, 594, 578, 20), (596, 592, 590, 2), (0, 0), (2, 152), 0, 0, (('pkt-too-big', 8),)),  # PASS
    ('ipip-vlan6', 'linux-7.3'): Got((598, 594, 578, 20), (596, 592, 590, 2), (0, 0), (2, 152), 0, 0, (('pkt-too-big', 8),)),  # PASS
    ('bridge-masq', 'linux-6.1'): Got((596, 592, 588, 8), (594, 590, 588, 2), (4, 216), (2, 112), 588, 4, (('frag-needed', 8),)),  # PASS
    ('bridge-masq', 'linux-6.12'): Got((596, 592, 588, 8), (594, 590, 588, 2), (4, 216), (2, 112), 588, 4, (('frag-needed', 8),)),  # PASS
    ('bridge-masq', 'linux-6.18'): Got((596, 592, 590, 6), (594, 590, 589, 1), (2, 112), (1, 60), 590, 2, (('frag-needed', 8),)),  # PASS
    ('bridge-masq', 'linux-6.19'): Got((596, 592, 590, 6), (594, 590, 589, 1), (2, 112), (1, 60), 590, 2, (('frag-needed', 8),)),  # PASS
    ('bridge-masq', 'linux-7.0'): Got((596, 592, 590, 6), (594, 590, 589, 1), (2, 112), (1, 60), 590, 2, (('frag-needed', 8),)),  # PASS
    ('bridge-masq', 'linux-7.1.5'): Got((596, 592, 590, 6), (594, 590, 589, 1), (2, 112), (1, 60), 590, 2, (('frag-needed', 8),)),  # PASS
    ('bridge-masq', 'linux-7.2'): Got((596, 592, 590, 6), (594, 590, 589, 1), (2, 112), (1, 60), 590, 2, (('frag-needed', 8),)),  # PASS
    ('bridge-masq', 'linux-7.3'): Got((596, 592, 590, 6), (594, 590, 589, 1), (2, 112), (1, 60), 590, 2, (('frag-needed', 8),)),  # PASS
    ('bridge-dnat', 'linux-6.1'): Got((596, 592, 588, 8), (594, 590, 588, 2), (4, 216), (2, 112), 588, 4, (('frag-needed', 8),)),  # PASS
    ('bridge-dnat', 'linux-6.12'): Got((596, 592, 588, 8), (594, 590, 588, 2), (4, 216), (2, 112), 588, 4, (('frag-needed', 8),)),  # PASS
    ('bridge-dnat', 'linux-6.18'): Got((596, 592, 590, 6), (594, 590, 589, 1), (2, 112), (1, 60), 590, 2, (('frag-needed', 8),)),  # PASS
    ('bridge-dnat', 'linux-6.19'): Got((596, 592, 590, 6), (594, 590, 589, 1), (2, 112), (1, 60), 590, 2, (('frag-needed', 8),)),  # PASS
    ('bridge-dnat', 'linux-7.0'): Got((596, 592, 590, 6), (594, 590, 589, 1), (2, 112), (1, 60), 590, 2, (('frag-needed', 8),)),  # PASS
    ('bridge-dnat', 'linux-7.1.5'): Got((596, 592, 590, 6), (594, 590, 589, 1), (2, 112), (1, 60), 590, 2, (('frag-needed', 8),)),  # PASS
    ('bridge-dnat', 'linux-7.2'): Got((596, 592, 590, 6), (594, 590, 589, 1), (2, 112), (1, 60), 590, 2, (('frag-needed', 8),)),  # PASS
    ('bridge-dnat', 'linux-7.3'): Got((596, 592, 590, 6), (594, 590, 589, 1), (2, 112), (1, 60), 590, 2, (('frag-needed', 8),)),  # PASS
    ('bridge-ipip', 'linux-6.19'): Got((97, 17, 0, 21), (63, 50, 40, 10), (0, 0), (10, 11952), 17, 0, (('frag-needed', 17), ('kernel-bug', 76)), complete=False),  # FAIL: transfer
    ('bridge-ipip', 'linux-7.0'): Got((97, 17, 0, 21), (63, 50, 40, 10), (0, 0), (10, 11952), 17, 0, (('frag-needed', 17), ('kernel-bug', 76)), complete=False),  # FAIL: transfer
    ('bridge-ipip', 'linux-7.1.5'): Got((97, 17, 0, 21), (63, 50, 40, 10), (0, 0), (10, 11952), 17, 0, (('frag-needed', 17), ('kernel-bug', 76)), complete=False),  # FAIL: transfer
    ('bridge-ipip', 'linux-7.2'): Got((596, 592, 576, 20), (594, 590, 588, 2), (0, 0), (2, 112), 592, 0, (('frag-needed', 8),)),  # PASS
    ('bridge-ipip', 'linux-7.3'): Got((596, 592, 576, 20), (594, 590, 588, 2), (0, 0), (2, 112), 592, 0, (('frag-needed', 8),)),  # PASS
    ('bridge-ip6ip6', 'linux-7.0'): Got((623, 215, 0, 219), (609, 605, 596, 9), (0, 0), (9, 10372), 0, 0, (('kernel-bug', 404), ('pkt-too-big', 8)), complete=False),  # FAIL: transfer
    ('bridge-ip6ip6', 'linux-7.1.5'): Got((97, 17, 0, 21), (63, 50, 40, 10), (0, 0), (10, 11832), 0, 0, (('kernel-bug', 76), ('pkt-too-big', 17)), complete=False),  # FAIL: transfer
    ('bridge-ip6ip6', 'linux-7.2'): Got((598, 594, 578, 20), (596, 592, 590, 2), (0, 0), (2, 152), 0, 0, (('pkt-too-big', 8),)),  # PASS
    ('bridge-ip6ip6', 'linux-7.3'): Got((598, 594, 578, 20), (596, 592, 590, 2), (0, 0), (2, 152), 0, 0, (('pkt-too-big', 8),)),  # PASS
    ('bridge-vlan-masq', 'linux-6.1'): Got((596, 592, 588, 8), (594, 590, 588, 2), (4, 216), (2, 112), 588, 4, (('frag-needed', 8),)),  # PASS
    ('bridge-vlan-masq', 'linux-6.12'): Got((596, 592, 588, 8), (594, 590, 588, 2), (4, 216), (2, 112), 588, 4, (('frag-needed', 8),)),  # PASS
    ('bridge-vlan-masq', 'linux-6.18'): Got((596, 592, 590, 6), (594, 590, 589, 1), (2, 112), (1, 60), 590, 2, (('frag-needed', 8),)),  # PASS
    ('bridge-vlan-masq', 'linux-6.19'): Got((596, 592, 590, 6), (594, 590, 589, 1), (2, 112), (1, 60), 590, 2, (('frag-needed', 8),)),  # PASS
    ('bridge-vlan-masq', 'linux-7.0'): Got((596, 592, 590, 6), (594, 590, 589, 1), (2, 112), (1, 60), 590, 2, (('frag-needed', 8),)),  # PASS
    ('bridge-vlan-masq', 'linux-7.1.5'): Got((596, 592, 590, 6), (594, 590, 589, 1), (2, 112), (1, 60), 590, 2, (('frag-needed', 8),)),  # PASS
    ('bridge-vlan-masq', 'linux-7.2'): Got((596, 592, 590, 6), (594, 590, 589, 1), (2, 112), (1, 60), 590, 2, (('frag-needed', 8),)),  # PASS
    ('bridge-vlan-masq', 'linux-7.3'): Got((596, 592, 590, 6), (594, 590, 589, 1), (2, 112), (1, 60), 590, 2, (('frag-needed', 8),)),  # PASS
    ('bridge-vlan-dnat', 'linux-6.1'): Got((596, 592, 588, 8), (594, 590, 588, 2), (4, 216), (2, 112), 588, 4, (('frag-needed', 8),)),  # PASS
    ('bridge-vlan-dnat', 'linux-6.12'): Got((596, 592, 588, 8), (594, 590, 588, 2), (4, 216), (2, 112), 588, 4, (('frag-needed', 8),)),  # PASS
    ('bridge-vlan-dnat', 'linux-6.18'): Got((596, 592, 590, 6), (594, 590, 589, 1), (2, 112), (1, 60), 590, 2, (('frag-needed', 8),)),  # PASS
    ('bridge-vlan-dnat', 'linux-6.19'): Got((596, 592, 590, 6), (594, 590, 589, 1), (2, 112), (1, 60), 590, 2, (('frag-needed', 8),)),  # PASS
    ('bridge-vlan-dnat', 'linux-7.0'): Got((596, 592, 590, 6), (594, 590, 589, 1), (2, 112), (1, 60), 590, 2, (('frag-needed', 8),)),  # PASS
    ('bridge-vlan-dnat', 'linux-7.1.5'): Got((596, 592, 590, 6), (594, 590, 589, 1), (2, 112), (1, 60), 590, 2, (('frag-needed', 8),)),  # PASS
    ('bridge-vlan-dnat', 'linux-7.2'): Got((596, 592, 590, 6), (594, 590, 589, 1), (2, 112), (1, 60), 590, 2, (('frag-needed', 8),)),  # PASS
    ('bridge-vlan-dnat', 'linux-7.3'): Got((596, 592, 590, 6), (594, 590, 589, 1), (2, 112), (1, 60), 590, 2, (('frag-needed', 8),)),  # PASS
    ('ipsec-v4', 'linux-6.1'): Got((598, 594, 590, 8), (596, 592, 590, 594), (4, 216), (2, 112), 590, 4, (('frag-needed', 8),)),  # PASS
    ('ipsec-v4', 'linux-6.12'): Got((598, 594, 590, 8), (596, 592, 590, 594), (4, 216), (2, 112), 590, 4, (('frag-needed', 8),)),  # PASS
    ('ipsec-v4', 'linux-6.18'): Got((598, 594, 592, 6), (596, 592, 591, 593), (2, 112), (1, 60), 592, 2, (('frag-needed', 8),)),  # PASS
    ('ipsec-v4', 'linux-6.19'): Got((598, 594, 592, 6), (596, 592, 591, 593), (2, 112), (1, 60), 592, 2, (('frag-needed', 8),)),  # PASS
    ('ipsec-v4', 'linux-7.0'): Got((598, 594, 592, 6), (596, 592, 591, 593), (2, 112), (1, 60), 592, 2, (('frag-needed', 8),)),  # PASS
    ('ipsec-v4', 'linux-7.1.5'): Got((598, 594, 592, 6), (596, 592, 591, 593), (2, 112), (1, 60), 592, 2, (('frag-needed', 8),)),  # PASS
    ('ipsec-v4', 'linux-7.2'): Got((598, 594, 592, 6), (596, 592, 591, 593), (2, 112), (1, 60), 592, 2, (('frag-needed', 8),)),  # PASS
    ('ipsec-v4', 'linux-7.3'): Got((598, 594, 592, 6), (596, 592, 591, 593), (2, 112), (1, 60), 592, 2, (('frag-needed', 8),)),  # PASS
    ('ipsec-v6', 'linux-6.1'): Got((596, 592, 588, 8), (594, 590, 588, 2), (4, 296), (2, 152), 0, 0, (('pkt-too-big', 8),)),  # PASS
    ('ipsec-v6', 'linux-6.12'): Got((596, 592, 588, 8), (594, 590, 588, 2), (4, 296), (2, 152), 0, 0, (('pkt-too-big', 8),)),  # PASS
    ('ipsec-v6', 'linux-6.18'): Got((596, 592, 590, 6), (594, 590, 589, 1), (2, 152), (1, 80), 0, 0, (('pkt-too-big', 8),)),  # PASS
    ('ipsec-v6', 'linux-6.19'): Got((596, 592, 590, 6), (594, 590, 589, 1), (2, 152), (1, 80), 0, 0, (('pkt-too-big', 8),)),  # PASS
    ('ipsec-v6', 'linux-7.0'): Got((596, 592, 590, 6), (594, 590, 589, 1), (2, 152), (1, 80), 0, 0, (('pkt-too-big', 8),)),  # PASS
    ('ipsec-v6', 'linux-7.1.5'): Got((596, 592, 590, 6), (594, 590, 589, 1), (2, 152), (1, 80), 0, 0, (('pkt-too-big', 8),)),  # PASS
    ('ipsec-v6', 'linux-7.2'): Got((596, 592, 590, 6), (594, 590, 589, 1), (2, 152), (1, 80), 0, 0, (('pkt-too-big', 8),)),  # PASS
    ('ipsec-v6', 'linux-7.3'): Got((596, 592, 590, 6), (594, 590, 589, 1), (2, 152), (1, 80), 0, 0, (('pkt-too-big', 8),)),  # PASS
    ('rerun-masq-pmtu0', 'linux-6.1'): Got((63, 63, 9, 54), (55, 55, 3, 202), (54, 200216), (52, 200112), 63, 0, ()),  # PASS
    ('rerun-masq-pmtu0', 'linux-6.12'): Got((63, 63, 9, 54), (55, 55, 3, 202), (54, 200216), (52, 200112), 63, 0, ()),  # PASS
    ('rerun-masq-pmtu0', 'linux-6.18'): Got((63, 63, 11, 52), (55, 55, 4, 201), (52, 200112), (51, 200060), 63, 0, ()),  # PASS
    ('rerun-masq-pmtu0', 'linux-6.19'): Got((63, 63, 11, 52), (55, 55, 4, 201), (52, 200112), (51, 200060), 63, 0, ()),  # PASS
    ('rerun-masq-pmtu0', 'linux-7.0'): Got((63, 63, 11, 52), (55, 55, 4, 201), (52, 200112), (51, 200060), 63, 0, ()),  # PASS
    ('rerun-masq-pmtu0', 'linux-7.1.5'): Got((63, 63, 11, 52), (55, 55, 4, 201), (52, 200112), (51, 200060), 63, 0, ()),  # PASS
    ('rerun-masq-pmtu0', 'linux-7.2'): Got((63, 63, 11, 52), (55, 55, 4, 201), (52, 200112), (51, 200060), 63, 0, ()),  # PASS
    ('rerun-masq-pmtu0', 'linux-7.3'): Got((63, 63, 11, 52), (55, 55, 4, 201), (52, 200112), (51, 200060), 63, 0, ()),  # PASS
    ('rerun-dnat-pmtu0', 'linux-6.1'): Got((63, 63, 9, 54), (55, 55, 3, 202), (54, 200216), (52, 200112), 63, 0, ()),  # PASS
    ('rerun-dnat-pmtu0', 'linux-6.12'): Got((63, 63, 9, 54), (55, 55, 3, 202), (54, 200216), (52, 200112), 63, 0, ()),  # PASS
    ('rerun-dnat-pmtu0', 'linux-6.18'): Got((63, 63, 11, 52), (55, 55, 4, 201), (52, 200112), (51, 200060), 63, 0, ()),  # PASS
    ('rerun-dnat-pmtu0', 'linux-6.19'): Got((63, 63, 11, 52), (55, 55, 4, 201), (52, 200112), (51, 200060), 63, 0, ()),  # PASS
    ('rerun-dnat-pmtu0', 'linux-7.0'): Got((63, 63, 11, 52), (55, 55, 4, 201), (52, 200112), (51, 200060), 63, 0, ()),  # PASS
    ('rerun-dnat-pmtu0', 'linux-7.1.5'): Got((63, 63, 11, 52), (55, 55, 4, 201), (52, 200112), (51, 200060), 63, 0, ()),  # PASS
    ('rerun-dnat-pmtu0', 'linux-7.2'): Got((63, 63, 11, 52), (55, 55, 4, 201), (52, 200112), (51, 200060), 63, 0, ()),  # PASS
    ('rerun-dnat-pmtu0', 'linux-7.3'): Got((63, 63, 11, 52), (55, 55, 4, 201), (52, 200112), (51, 200060), 63, 0, ()),  # PASS
    ('rerun-masq-pmtu1', 'linux-6.1'): Got((1165, 1161, 1157, 8), (1163, 1159, 1157, 2), (4, 216), (2, 112), 1161, 0, (('frag-needed', 8),)),  # PASS
    ('rerun-masq-pmtu1', 'linux-6.12'): Got((1165, 1161, 1157, 8), (1163, 1159, 1157, 2), (4, 216), (2, 112), 1161, 0, (('frag-needed', 8),)),  # PASS
    ('rerun-masq-pmtu1', 'linux-6.18'): Got((1165, 1161, 1159, 6), (1163, 1159, 1158, 1), (2, 112), (1, 60), 1161, 0, (('frag-needed', 8),)),  # PASS
    ('rerun-masq-pmtu1', 'linux-6.19'): Got((1165, 1161, 1159, 6), (1163, 1159, 1158, 1), (2, 112), (1, 60), 1161, 0, (('frag-needed', 8),)),  # PASS
    ('rerun-masq-pmtu1', 'linux-7.0'): Got((1165, 1161, 1159, 6), (1163, 1159, 1158, 1), (2, 112), (1, 60), 1161, 0, (('frag-needed', 8),)),  # PASS
    ('rerun-masq-pmtu1', 'linux-7.1.5'): Got((1165, 1161, 1159, 6), (1163, 1159, 1158, 1), (2, 112), (1, 60), 1161, 0, (('frag-needed', 8),)),  # PASS
    ('rerun-masq-pmtu1', 'linux-7.2'): Got((1165, 1161, 1159, 6), (1163, 1159, 1158, 1), (2, 112), (1, 60), 1161, 0, (('frag-needed', 8),)),  # PASS
    ('rerun-masq-pmtu1', 'linux-7.3'): Got((1165, 1161, 1159, 6), (1163, 1159, 1158, 1), (2, 112), (1, 60), 1161, 0, (('frag-needed', 8),)),  # PASS
    ('rerun-dnat-pmtu1', 'linux-6.1'): Got((1165, 1161, 1157, 8), (1163, 1159, 1157, 2), (4, 216), (2, 112), 1161, 0, (('frag-needed', 8),)),  # PASS
    ('rerun-dnat-pmtu1', 'linux-6.12'): Got((1165, 1161, 1157, 8), (1163, 1159, 1157, 2), (4, 216), (2, 112), 1161, 0, (('frag-needed', 8),)),  # PASS
    ('rerun-dnat-pmtu1', 'linux-6.18'): Got((1165, 1161, 1159, 6), (1163, 1159, 1158, 1), (2, 112), (1, 60), 1161, 0, (('frag-needed', 8),)),  # PASS
    ('rerun-dnat-pmtu1', 'linux-6.19'): Got((1165, 1161, 1159, 6), (1163, 1159, 1158, 1), (2, 112), (1, 60), 1161, 0, (('frag-needed', 8),)),  # PASS
    ('rerun-dnat-pmtu1', 'linux-7.0'): Got((1165, 1161, 1159, 6), (1163, 1159, 1158, 1), (2, 112), (1, 60), 1161, 0, (('frag-needed', 8),)),  # PASS
    ('rerun-dnat-pmtu1', 'linux-7.1.5'): Got((1165, 1161, 1159, 6), (1163, 1159, 1158, 1), (2, 112), (1, 60), 1161, 0, (('frag-needed', 8),)),  # PASS
    ('rerun-dnat-pmtu1', 'linux-7.2'): Got((1165, 1161, 1159, 6), (1163, 1159, 1158, 1), (2, 112), (1, 60), 1161, 0, (('frag-needed', 8),)),  # PASS
    ('rerun-dnat-pmtu1', 'linux-7.3'): Got((1165, 1161, 1159, 6), (1163, 1159, 1158, 1), (2, 112), (1, 60), 1161, 0, (('frag-needed', 8),)),  # PASS
}



def known_failure(row: Row, profile: Profile) -> tuple[list[str], str] | None:
    """The script checks that fail for *row* under *profile*, and why; None: the script passes."""
    if row.id in ("bridge-ipip", "bridge-ip6ip6") and profile.tunnel_push_dst == "opposite":
        return ["transfer"], ("kernel bug: the tunnel push (nf_flow_tunnel_v4_push / nf_flow_tunnel_v6_push) reads "
                              "the opposite tuple's dst_cache, which the DIRECT reply tuple towards br0's port does "
                              "not have (the 7.0 tree oopses; flowsim drops as kernel-bug)")
    return None


@pytest.mark.parametrize("row,profile", cases(), ids=[f"{r.id}/{p}" for r, p in cases()])
def test_selftest_scenario(row: Row, profile: str):
    """One transfer of nft_flowtable.sh under one profile: exact counts, and the script's checks.  Each row names
    the script function it replays (``row.function``) and the kernel function that decides it (``row.kernel``);
    both are in the failure message and in docs/selftest.md."""
    got, _sim, report = measure(row, get_profile(profile))
    where = f"{SCRIPT}: {row.function}; kernel: {row.kernel}"
    assert got == EXPECTED[(row.id, profile)], f"{row.id}/{profile} ({where}): {_fmt(got)}"
    assert report["packets"]["in_flight"] == 0
    failing = verdict(row, got)
    known = known_failure(row, get_profile(profile))
    assert failing == (known[0] if known else []), f"{row.id}/{profile} ({where}): script checks {failing} fail"


def test_every_row_has_expected_counts_for_every_profile_that_has_it():
    """A profile added later (PROFILES) must come with its counts: no silent skip."""
    assert {(r.id, p) for r, p in cases()} == set(EXPECTED)


def test_doc_matches_the_data():
    """docs/selftest.md is generated from this module (python -m tests.test_selftest_scenarios --doc)."""
    assert (ROOT / "docs" / "selftest.md").read_text() == _doc()


def _bridge_tunnel_bug_profiles() -> list[str]:
    return [n for n, p in PROFILES.items() if p.ipip_rx and p.ipip_fill_forward_path]


@pytest.mark.parametrize("profile", _bridge_tunnel_bug_profiles())
def test_bridge_ipip_crash_needs_this_directions_route(profile: str):
    """nft_flowtable.sh test_bridge "bridge + IPIP tunnel": the flow's reply tuple (towards br0's port veth0) is
    DIRECT xmit and holds no route; the tunnel push of the original direction (nf_flow_tunnel_v4_push, called
    from nf_flow_offload_ip_hook) reads the *opposite* tuple's dst_cache in the 7.0 tree — a NULL route: the
    kernel crashes there, flowsim counts a ``kernel-bug`` drop per packet.  From 7.2 (tunnel_push_dst ==
    "this") it reads its own tuple's route and every packet goes through."""
    p = get_profile(profile)
    got, sim, _report = measure(next(r for r in ROWS if r.id == "bridge-ipip"), p)
    ft = sim.kernel.netns["nsr1"].flowtables["f1"]
    if p.tunnel_push_dst == "opposite":
        assert dict(got.drops).get("kernel-bug", 0) > 0 and ft.kernel_bugs
        assert all("dst_cache" in b for b in ft.kernel_bugs)
    else:
        assert "kernel-bug" not in dict(got.drops) and not ft.kernel_bugs
        assert got.orig[2] > 0  # the original direction is on the fast path, pushed into tun0


def test_linux_70_bridge_ipip_is_a_kernel_bug_exit():
    """Under linux-7.0 the bridge + IPIP transfer ends in kernel-bug drops: every original-direction packet the
    hook matches against the flow (all but the handshake, the first segments before the flow and those lost to
    PMTU discovery) reaches nf_flow_tunnel_v4_push and is dropped there; none is forwarded by the fast path, and
    only 17 of 97 reach ns2.  The client's data and ACKs never arrive, so both senders stall after their window
    and retransmit on their RTO until tcp_write_timeout gives up (TCP_RETRIES2): the connection never closes.
    The reply direction (out of tun0 into br0, no push) is fast."""
    got, sim, _r = measure(next(r for r in ROWS if r.id == "bridge-ipip"), get_profile("linux-7.0"))
    assert dict(got.drops)["kernel-bug"] == 76 and got.orig[:3] == (97, 17, 0)
    assert got.repl[2] == 40 and not got.complete
    assert len(sim.kernel.netns["nsr1"].flowtables["f1"].kernel_bugs) == 76
    (conv,) = sim.conversations
    assert all(e.state == "closed" and e.cc.retransmits == TCP_RETRIES2 for e in (conv.client, conv.server))


# --------------------------------------------------------------------------- generation

def _fmt(got: Got) -> str:
    return (f"Got({got.orig}, {got.repl}, {got.routed_orig}, {got.routed_repl}, {got.dscp0}, {got.dscp3}, "
            f"{got.drops}{'' if got.complete else ', complete=False'})")


def _doc() -> str:
    exp = EXPECTED
    lines = ["# The kernel selftest nft_flowtable.sh in flowsim", "",
             f"Every scenario of `{SCRIPT}` (Linux 7.2.13 and 7.3-rc7 ship the same script) is a topology "
             "under `topologies/`; `tests/test_selftest_scenarios.py` runs each transfer alone under every "
             "profile whose kernel has the scenario and checks the exact counts below and the script's own "
             "checks. This page is generated from the test's data (`python -m tests.test_selftest_scenarios "
             "--doc`).", "",
             "Columns: *orig* / *repl* are per direction `sent/delivered fast/slow` (data segments plus "
             "handshake and FIN; fast/slow are flowtable hook verdicts); *routed_orig* / *routed_repl* are the "
             "forward chain's counters as `packets/bytes` (`check_counters` compares the bytes with the file); "
             "*dscp0/3* are ns2's input counters (`check_dscp`); *drops* by reason; *verdict* is the script's "
             "check on that run (`PASS`, or `FAIL:` the failing checks).", "",
             "The files are scaled: 200 segments per direction with PMTU discovery (the script's 2 MiB), 50 "
             "without (its 128 KiB); segments are 2000 bytes (the smaller end MTU). Both ends play Linux's TCP "
             "(`acks = \"linux\"`: pure ACKs; segments lost to PMTU discovery are resent at once, "
             "`tcp_simple_retransmit`), so \"transfer complete\" means nothing dropped but what PMTU discovery "
             "costs (`frag-needed`, `pkt-too-big`) and every byte arrived.", "",
             "| scenario | script | topology | checks | profile | orig | repl | routed_orig | routed_repl | "
             "dscp0/3 | drops | verdict |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in ROWS:
        for name in PROFILES:
            key = (row.id, name)
            if key not in exp:
                continue
            g = exp[key]
            failing = verdict(row, g)
            known = known_failure(row, PROFILES[name])
            v = "PASS" if not failing else "FAIL " + ", ".join(failing) + (f": {known[1]}" if known else "")
            drops = ", ".join(f"{k} {n}" for k, n in g.drops) or "-"
            lines.append(
                f"| {row.what} | `{row.function}` | `topologies/{row.topology}` | {', '.join(row.checks)} | {name} | "
                f"{g.orig[0]}/{g.orig[1]} {g.orig[2]}/{g.orig[3]} | {g.repl[0]}/{g.repl[1]} {g.repl[2]}/{g.repl[3]} | "
                f"{g.routed_orig[0]}/{g.routed_orig[1]} | {g.routed_repl[0]}/{g.routed_repl[1]} | "
                f"{g.dscp0}/{g.dscp3} | {drops} | {v} |")
    missing = [r.id for r in ROWS if not any((r.id, n) in exp for n in PROFILES)]
    lines += ["", "## Kernel functions that decide each scenario", "",
              "| scenario | script function | kernel |", "|---|---|---|"]
    lines += [f"| {r.what} | `{r.function}` | {r.kernel} |" for r in ROWS]
    lines += ["", "## What the topologies cannot say as the script does", "", *NOTES]
    lines += ["", "Scenarios not in a profile's kernel (no row): IPIP rows need `ipip_rx` and "
              "`ipip_fill_forward_path` (linux-6.19 and later), IP6IP6 rows `ip6ip6_rx` and "
              "`ip6tnl_fill_forward_path` (linux-7.0 and later)." + (f" Rows with no profile: {missing}." if missing else "")]
    return "\n".join(lines) + "\n"


NOTES = [
    "* **ESP algorithms.** `do_esp` adds states with `enc aes KEY auth sha1 KEY` and random keys and SPIs; "
    "flowsim models ESP only as `rfc4106(gcm(aes))`, so `selftest-ipsec.toml` uses that AEAD with fixed keys "
    "and SPIs. The flowtable's decisions (XFRM xmit type from the xfrm dst in `nft_flow_route`, "
    "`nf_flow_xmit_xfrm`) do not depend on the algorithm.",
    "* **IPv6 routes of a device taken down.** Restoring ns1 after the bridge-and-VLAN test, the script takes "
    "eth0 down and up and adds `default via dead:1::1` again; the kernel had deleted the old one "
    "(`addrconf_ifdown` -> `rt6_sync_down_dev`), flowsim keeps a downed device's routes (they stop matching "
    "while it is down), so the line is `ip -6 route replace` there. (The IPv4 counterpart, `fib_disable_ip` "
    "when the last IPv4 address goes, was added to flowsim for `ip addr flush dev eth0`.)",
    "* **TCP.** The topologies' TCP is modelled on Linux's (`acks = \"linux\"`): pure ACKs from quick-ACK "
    "mode and the delayed-ACK timer (`tcp_event_data_recv`, `__tcp_ack_snd_check`, `tcp_send_delayed_ack`), "
    "and after Fragmentation Needed / Packet Too Big the lost segments resent at once and every write cut to "
    "the new MSS (`tcp_simple_retransmit`); the sender keeps at most its congestion window in flight (ten "
    "segments at first, `tcp_cwnd_test`), so writes queued behind it merge into full-MSS segments, and "
    "retransmits on its RTO (`tcp_retransmit_timer`); tail-loss probes are not modelled. Nothing else is lost "
    "in these scenarios. With PMTU discovery off the pure ACKs are what takes "
    "the fast path: `dscp_fwd` passes under linux-6.1/6.12 as on the real 6.12 (`nf_flow_state_check` tears "
    "the flow down on FIN there).",
    "* **Files.** 200 segments per direction instead of 2 MiB, 50 instead of 128 KiB; `check_counters`' "
    "limit is the scaled file.",
    "* **Random MTUs.** The re-run draws `-o -l -r` at random; `selftest-rerun-mtu.toml` fixes "
    "`-o 4000 -l 1300 -r 9000` and repeats the masquerade and DNAT transfers with PMTU discovery off "
    "(`df = false`, the script's `ip_no_pmtu_disc=1`) and on; its other tests are the rows above with "
    "other MTUs.",
    "* **State carried between tests.** Each topology replays the script's commands from its setup to the "
    "scenario, so leftovers are kept: the two `ip dscp set cs3` forward rules of the `dscp_fwd` runs (which "
    "is why ns2 sees a few cs3 packets in later rows), the tunnel devices after `test_ipip`, the NAT table "
    "until the IPsec part. The DSCP-ingress and -egress topologies hold the state of their PMTU-off run (no "
    "forward `ip dscp set` yet); in the script's PMTU-on run one such rule is already there and sets the "
    "same cs3.",
    "",
    "## What the numbers show",
    "",
    "* In the tunnel rows `routed_orig` stays 0: the script inserts `meta oif tun0 accept` (and tun6, tun0.10, "
    "tun6.10) in front of the `flow add ... routed_orig` rules it inserts with them, so the flow is created "
    "by the reply-direction rule (`meta oif \"veth0\" tcp sport 12345 ... routed_repl`) and `check_counters`' "
    "original-direction limit is met trivially.",
    "* linux-7.0, IP6IP6 into the tunnel (rows `ipip6`, `ipip-vlan6`): the original direction stays on the "
    "slow path. The 7.0 profile's push adds the 8-byte encapsulation-limit option whatever the tunnel's "
    "`encaplimit` (switch `ip6ip6_tx_encap_limit`), so the flow MTU (`nf_flow_exceeds_mtu`) is 8 bytes below the 1460 the sender learnt from tun6; the "
    "script's checks still pass.",
    "* bridge + IPIP / IP6IP6 under every profile whose tunnel push reads the opposite tuple's route "
    "(`tunnel_push_dst = opposite`: linux-6.19 to 7.1.5): the push reads the DIRECT reply tuple's missing "
    "`dst_cache` — the 7.0 tree's crash, a `kernel-bug` drop per packet here; from linux-7.2 the transfer "
    "passes.",
]


def main(argv: list[str]) -> int:
    if argv[:1] == ["--doc"]:
        (ROOT / "docs" / "selftest.md").write_text(_doc())
        return 0
    print("EXPECTED = {")
    for row, name in cases():
        got, _sim, _report = measure(row, get_profile(name))
        failing = verdict(row, got)
        print(f"    ({row.id!r}, {name!r}): {_fmt(got)},  # {'FAIL: ' + ', '.join(failing) if failing else 'PASS'}")
    print("}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
