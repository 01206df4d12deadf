"""The nft evaluator: hook order, chains, every statement's effect, and the selftest's forward chain (nft_flowtable.sh)."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flowsim.kernel.conntrack import IPS_DST_NAT_DONE, IPS_SRC_NAT_DONE, CtEntry, CtTuple
from flowsim.nft.parse import SYMBOLS
from flowsim.nft.ruleset import (
    NF_IP_PRI_CONNTRACK,
    DscpSet,
    MarkSet,
    Nftables,
    NftPacket,
    NftraceSet,
    parse_ruleset,
)

RULESETS = Path(__file__).parent / "data" / "rulesets"
A1, A2 = ipaddress.ip_address("10.0.1.99"), ipaddress.ip_address("10.0.2.99")
B1, B2 = ipaddress.ip_address("dead:1::99"), ipaddress.ip_address("dead:2::99")


def load(name: str) -> Nftables:
    return Nftables(parse_ruleset((RULESETS / name).read_text(), file=name))


def nft(text: str) -> Nftables:
    return Nftables(parse_ruleset(text))


def ct_entry(v=4, mark=0, status=0):
    a, b = (A1, A2) if v == 4 else (B1, B2)
    t = CtTuple(a, b, 40000, 12345, 2 if v == 4 else 10, 6)
    return CtEntry(tuplehash=[t, t.invert()], mark=mark, status=status)


def tcp(v=4, dir=0, oif="veth1", iif="veth0", ct=None, state="established", **kw):
    a, b = (A1, A2) if v == 4 else (B1, B2)
    src, dst, sp, dp = (a, b, 40000, 12345) if dir == 0 else (b, a, 12345, 40000)
    if dir == 1:
        iif, oif = oif, iif
    fields = dict(nfproto=2 if v == 4 else 10, l4proto=6, saddr=src, daddr=dst, sport=sp, dport=dp, iif=iif,
                  oif=oif, length=1000, tcp_flags=0x10, ct=ct, ct_state=state, ct_dir=dir if ct is not None else None)
    return NftPacket(**{**fields, **kw})


# ---------------------------------------------------------------- the selftest's forward chain (nft_flowtable.sh)

@pytest.mark.parametrize("v", [4, 6])
def test_selftest_rule_a_flow_add_fails_then_rule_b_counts(v):
    """nft_flowtable.sh: a refused `flow add` (NFT_BREAK) breaks rule A (no routed_orig count there); rule B sees ct mark 1 and counts."""
    n = load("selftest-nsr1-filter.nft")
    ct = ct_entry(v)
    calls = []
    res = n.eval_hook("forward", tcp(v, ct=ct, state="new"), on_flow_add=lambda ft, p: calls.append(ft.name) or False)
    assert calls == ["f1"] and res.flow_adds[0].ok is False
    assert ct.mark == 1 and res.effects == (MarkSet("ct", 1),)
    assert res.verdict == "accept" and res.decided_by.index == 1
    assert (n.counter("routed_orig").packets, n.counter("routed_orig").bytes) == (1, 1000)
    assert n.counter("routed_repl").packets == 0
    assert "NFT_BREAK" in res.trace[0].note


def test_selftest_rule_a_flow_add_succeeds():
    """A successful `flow add` lets the rest of rule A run: counter routed_orig and accept decide."""
    n = load("selftest-nsr1-filter.nft")
    res = n.eval_hook("forward", tcp(ct=ct_entry()), on_flow_add=lambda ft, p: True)
    assert res.decided_by.index == 0 and res.flow_adds[0].ok and n.counter("routed_orig").packets == 1
    assert len(res.trace) == 1


def test_selftest_reply_direction_counted_in_routed_repl():
    """nft_flowtable.sh: reply packets (oif veth0) skip rule A and are counted by the direction map into routed_repl."""
    n = load("selftest-nsr1-filter.nft")
    res = n.eval_hook("forward", tcp(dir=1, ct=ct_entry(mark=1)))
    assert res.accepted and res.flow_adds == ()
    assert (n.counter("routed_orig").packets, n.counter("routed_repl").packets) == (0, 1)


@pytest.mark.parametrize("pkt, verdict, rule", [
    (NftPacket(nfproto=2, l4proto=1, ct_state="new"), "accept", 3),
    (NftPacket(nfproto=10, l4proto=58, ct_state="new"), "accept", 4),
    (NftPacket(nfproto=10, l4proto=1, ct_state="new"), "drop", None),
    (NftPacket(nfproto=2, l4proto=17, dport=53, oif="veth1", ct_state="new"), "drop", None),
    (NftPacket(nfproto=2, l4proto=17, oif="veth1", ct_state="related"), "accept", 2),
])
def test_selftest_other_traffic(pkt, verdict, rule):
    """nft_flowtable.sh: ICMP per family accepted, established/related accepted, anything else hits policy drop."""
    res = load("selftest-nsr1-filter.nft").eval_hook("forward", pkt)
    assert res.verdict == verdict and res.decided_by.index == rule


def test_selftest_dscp_counters_on_ns2():
    """nft_flowtable.sh check_dscp: ns2's input chain counts CS3 and DSCP 0 TCP separately via the anonymous goto chain."""
    n = load("selftest-ns2-dscp.nft")
    for d in (24, 0, 0):
        assert n.eval_hook("input", tcp(dscp=d, length=100)).accepted
    assert (n.counter("ip4dscp3").packets, n.counter("ip4dscp0").packets) == (1, 2)


@pytest.mark.parametrize("name, hook, dev", [("selftest-dscp-ingress.nft", "ingress", "veth0"),
                                             ("selftest-dscp-egress.nft", "egress", "veth1")])
def test_selftest_netdev_dscp_set(name, hook, dev):
    """nft_flowtable.sh: the netdev chain sets CS3 on IPv4 packets of its device only; IPv6 breaks the rule (implicit dependency)."""
    n = load(name)
    assert n.eval_hook(hook, tcp(iif="veth0", oif="veth1")).dscp == 24
    assert n.eval_hook(hook, tcp(v=6, iif="veth0", oif="veth1")).dscp is None
    other = tcp(iif="eth9", oif="eth9")
    assert n.eval_hook(hook, other).dscp is None and n.eval_hook(hook, other).trace == ()


# ---------------------------------------------------------------- hook order and families

def test_hook_order_priority_then_later_registration_first():
    """nf_hook_entries_grow: lower priority first; equal priorities run the later-registered chain first."""
    n = nft("""
        table inet a { chain x { type filter hook forward priority 0; }; chain y { type filter hook forward priority -5; } }
        table inet b { chain z { type filter hook forward priority 0; } }""")
    assert [e.chain.name for e in n.hook_entries("forward", nfproto=2)] == ["y", "z", "x"]


def test_nat_chains_run_at_nat_core_priority():
    """NAT chains run from the NAT core hook (-100 prerouting, 100 postrouting), ordered among themselves."""
    n = nft("""table ip t {
        chain n1 { type nat hook postrouting priority -200; }
        chain f { type filter hook postrouting priority 50; }
        chain n2 { type nat hook postrouting priority -300; }
        chain g { type filter hook postrouting priority 150; } }""")
    entries = n.hook_entries("postrouting", nfproto=2)
    assert [e.chain.name for e in entries] == ["f", "n2", "n1", "g"]
    assert [e.priority for e in entries] == [50, 100, 100, 150]


def test_ingress_entries_include_flowtable():
    """At ingress the flowtable is registered alongside netdev chains of the same device (``nft_register_flowtable_net_hooks``)."""
    n = nft("""table inet f { flowtable ft { hook ingress priority 10; devices = { veth0 }; } }
               table netdev d { chain c { type filter hook ingress device veth0 priority -10; }
                                chain e { type filter hook ingress device veth1 priority 0; } }""")
    entries = n.hook_entries("ingress", device="veth0")
    assert [(e.priority, e.chain.name if e.chain else e.flowtable.name) for e in entries] == [(-10, "c"), (10, "ft")]


@pytest.mark.parametrize("family, v4, v6", [("ip", True, False), ("ip6", False, True), ("inet", True, True)])
def test_family_filters_packets(family, v4, v6):
    """An ip chain sees only IPv4, ip6 only IPv6, inet both."""
    n = nft(f"table {family} t {{ chain c {{ type filter hook forward priority 0; policy drop; }} }}")
    assert (n.eval_hook("forward", tcp(4)).verdict == "drop") == v4
    assert (n.eval_hook("forward", tcp(6)).verdict == "drop") == v6


def test_priority_range_splits_around_conntrack():
    """`priority_range` lets the stack run raw chains before conntrack (-200) and the rest after."""
    n = nft("""table inet t { chain raw { type filter hook prerouting priority raw; meta mark set 1 }
                              chain m { type filter hook prerouting priority mangle; meta mark set 2 } }""")
    assert n.eval_hook("prerouting", tcp(), priority_range=(None, NF_IP_PRI_CONNTRACK)).meta_mark == 1
    assert n.eval_hook("prerouting", tcp(), priority_range=(NF_IP_PRI_CONNTRACK, None)).meta_mark == 2


def test_accept_continues_to_next_base_chain_drop_stops():
    """accept ends one base chain only; a later base chain may still drop; drop ends the hook."""
    n = nft("""table inet t { chain a { type filter hook input priority 0; accept }
                              chain b { type filter hook input priority 10; drop }
                              chain c { type filter hook input priority 20; accept } }""")
    res = n.eval_hook("input", tcp())
    assert res.verdict == "drop" and res.decided_by.chain == "b" and len(res.trace) == 2


# ---------------------------------------------------------------- NAT chains

NAT = """table ip nat {
    chain pre { type nat hook prerouting priority dstnat; ip daddr 10.6.6.6 tcp dport 1666 dnat to 10.0.2.99:12345 }
    chain post1 { type nat hook postrouting priority 0; oifname "veth1" masquerade }
    chain post2 { type nat hook postrouting priority 10; snat to 1.2.3.4 } }"""


def test_nat_request_for_new_connection():
    """A new connection's first packet gets the DNAT request at prerouting (nft_nat_eval is terminal: accept)."""
    pkt = NftPacket(nfproto=2, l4proto=6, saddr=A1, daddr=ipaddress.ip_address("10.6.6.6"), sport=40000, dport=1666,
                    ct=ct_entry(), ct_state="new")
    res = nft(NAT).eval_hook("prerouting", pkt)
    assert res.nat.kind == "dnat" and res.nat.manip == "dst" and res.nat_manip == "dst"
    assert (res.nat.addr_min, res.nat.port_min, res.nat.port_max) == (A2, 12345, 12345)


def test_selftest_nat_end_to_end():
    """nft_flowtable.sh's DNAT test with nft_flow_offload_eval's tuples: DNAT at prerouting, masquerade at postrouting, the REPLY tuple the flow will use."""
    from flowsim.kernel.conntrack import TCP_SYN, ConntrackTable, CtTuple, NatRange
    n, table = load("selftest-nsr1-nat.nft"), ConntrackTable()
    vip, masq = ipaddress.ip_address("10.6.6.6"), ipaddress.ip_address("192.168.10.1")
    r = table.nf_conntrack_in(CtTuple(A1, vip, 40000, 1666, 2, 6), 0.0, tcp_flags=TCP_SYN, length=60)
    pkt = NftPacket(nfproto=2, l4proto=6, saddr=A1, daddr=vip, sport=40000, dport=1666, iif="veth0", length=60,
                    ct=r.entry, ct_state=r.state, ct_dir=r.dir)
    pre = n.eval_hook("prerouting", pkt)
    table.nf_nat_setup_info(r.entry, pre.nat_manip, NatRange.from_request(pre.nat))
    post = n.eval_hook("postrouting", attrs.evolve(pkt, daddr=A2, dport=12345, oif="veth1"))
    table.nf_nat_setup_info(r.entry, post.nat_manip, NatRange.from_request(post.nat, addr=masq))
    assert table.nf_conntrack_confirm(r.entry, 0.0)
    assert r.entry.reply == CtTuple(A2, masq, 12345, 40000, 2, 6)
    assert n.rule_counter("ip", "nat", "prerouting", 0).packets == 1
    assert n.rule_counter("ip", "nat", "postrouting", 0).packets == 1


def test_nat_first_binding_chain_wins():
    """After the first nat chain that binds, later nat chains at the hook are skipped (nf_nat_inet_fn)."""
    res = nft(NAT).eval_hook("postrouting", tcp(ct=ct_entry(), state="new"))
    assert res.nat.kind == "masquerade" and res.nat.rule.chain == "post1"
    assert res.trace[-1].note.startswith("skipped")


def test_nat_no_rule_means_null_binding():
    """Nat chains ran without a NAT statement: nat is None, nat_manip tells the caller to bind the null mapping."""
    res = nft(NAT).eval_hook("prerouting", tcp(ct=ct_entry(), state="new"))
    assert res.nat is None and res.nat_manip == "dst"


@pytest.mark.parametrize("state, status, hook", [
    ("established", 0, "postrouting"),
    ("new", IPS_SRC_NAT_DONE, "postrouting"),
    ("new", IPS_DST_NAT_DONE, "prerouting"),
])
def test_nat_chains_skipped_when_initialized_or_established(state, status, hook):
    """Nat chains only see new/related packets whose NAT for this manip is not yet set up (nf_nat_initialized)."""
    res = nft(NAT).eval_hook(hook, tcp(ct=ct_entry(status=status), state=state))
    assert res.nat is None and res.nat_manip is None


def test_nat_without_conntrack_skipped():
    """No conntrack entry, no NAT."""
    assert nft(NAT).eval_hook("postrouting", tcp(ct=None, state=None)).nat_manip is None


def test_dnat_ip_in_inet_table_ignores_ipv6():
    """`dnat ip to` in an inet table carries an implicit IPv4 dependency: an IPv6 packet breaks the rule."""
    n = nft("table inet t { chain p { type nat hook prerouting priority dstnat; tcp dport 80 dnat ip to 10.0.2.99 } }")
    assert n.eval_hook("prerouting", tcp(6, ct=ct_entry(6), state="new", dport=80)).nat is None


# ---------------------------------------------------------------- statements

def test_meta_mark_set_visible_to_later_rules_and_chains():
    """`meta mark set` changes skb->mark for the rest of the hook, across base chains."""
    n = nft("""table inet t { chain a { type filter hook forward priority 0; meta mark set 0x10 }
                              chain b { type filter hook forward priority 5; policy drop; mark 0x10 accept } }""")
    res = n.eval_hook("forward", tcp())
    assert res.accepted and res.meta_mark == 0x10 and MarkSet("meta", 0x10) in res.effects


def test_ct_mark_set_from_meta_mark_and_without_ct():
    """`ct mark set meta mark` copies the mark into the ct; without a ct the statement does nothing."""
    n = nft("table inet t { chain a { type filter hook forward priority 0; meta mark set 7 ct mark set meta mark } }")
    ct = ct_entry()
    n.eval_hook("forward", tcp(ct=ct))
    assert ct.mark == 7
    assert n.eval_hook("forward", tcp(ct=None, state=None)).effects == (MarkSet("meta", 7),)


def test_dscp_and_nftrace_and_log():
    """`ip6 dscp set`, `meta nftrace set 1` and `log` (no-op) record their effects."""
    n = nft("table inet t { chain a { type filter hook forward priority 0; ip6 dscp set cs1 meta nftrace set 1 log } }")
    res = n.eval_hook("forward", tcp(6))
    assert res.dscp == 8 and res.nftrace and res.effects == (DscpSet(10, 8), NftraceSet(1))


def test_reject_drops():
    """`reject` is terminal: the verdict is drop and the result says an error reply is due."""
    n = nft("table inet t { chain a { type filter hook input priority 0; tcp dport 23 reject with tcp reset } }")
    res = n.eval_hook("input", tcp(dport=23))
    assert res.verdict == "drop" and (res.reject.kind, res.reject.with_) == ("tcp-reset", "tcp reset")


def test_jump_goto_return_policy():
    """jump returns to the next rule of the caller, goto does not, return in a base chain applies the policy."""
    n = nft("""table inet t {
        chain base { type filter hook forward priority 0; policy drop;
            jump j
            mark 1 accept
            goto g
            accept }
        chain j { meta mark set 1 return; drop }
        chain g { mark 1 meta mark set 2 } }""")
    res = n.eval_hook("forward", tcp())
    assert res.accepted and res.decided_by.index == 1 and res.meta_mark == 1
    res = n.eval_hook("forward", tcp(mark=5))
    assert res.meta_mark == 1 and res.decided_by.chain == "base"


def test_goto_falls_back_to_policy():
    """Falling off a goto'ed chain applies the base chain's policy (no return point)."""
    n = nft("""table inet t { chain base { type filter hook forward priority 0; policy drop; goto g; accept }
                              chain g { counter } }""")
    res = n.eval_hook("forward", tcp())
    assert res.verdict == "drop" and res.decided_by.index is None and res.decided_by.text == "policy drop"


def test_vmap_and_miss():
    """A verdict map picks the verdict for the key; a miss breaks the rule."""
    n = nft("""table inet t { chain c { type filter hook forward priority 0; policy accept;
                 ct state vmap { established : accept, invalid : drop }
                 meta mark set 9 } }""")
    assert n.eval_hook("forward", tcp(state="invalid")).verdict == "drop"
    assert n.eval_hook("forward", tcp(state="new")).meta_mark == 9


def test_counters_rule_named_initial_and_reset():
    """Anonymous counters count per rule (packets, bytes = skb->len), named ones are shared; reset zeroes all."""
    n = nft("""table inet t { counter shared { packets 10 bytes 1000 }
        chain c { type filter hook forward priority 0; counter packets 5 bytes 300; counter name shared; counter name shared } }""")
    n.eval_hook("forward", tcp(length=100))
    rc = n.rule_counter("inet", "t", "c", 0)
    assert (rc.packets, rc.bytes) == (6, 400)
    assert (n.counter("shared").packets, n.counter("shared").bytes) == (12, 1200)
    n.reset_counters()
    assert (rc.packets, n.counter("shared").bytes) == (0, 0)


@pytest.mark.parametrize("rule, pkt_kw, matches", [
    ('iifname "eth*"', {"iif": "eth3"}, True),
    ('iifname "eth*"', {"iif": "wlan0"}, False),
    ('meta iif "veth0"', {}, True),
    ("meta iif 7", {"iifindex": 7}, True),
    ("meta iif 7", {"iifindex": 8}, False),
    ("ct state invalid", {"ct": None, "state": None}, True),
    ("ct state untracked", {"ct": None, "state": "untracked"}, True),
    ("ct direction original", {"ct": None}, False),
    ("ct status snat", {"ct": ct_entry(status=16)}, True),
    ("ct original saddr 10.0.1.99", {"ct": ct_entry()}, True),
    ("ct reply saddr 10.0.1.99", {"ct": ct_entry()}, False),
    ("ct l3proto ipv4", {"ct": ct_entry()}, True),
    ("ip saddr 10.0.0.0/16", {}, True),
    ("ip saddr != 10.0.0.0/16", {}, False),
    ("ip6 saddr dead::/16", {}, False),
    ("tcp flags ack", {}, True),
    ("tcp flags syn / syn,ack", {}, False),
    ("tcp dport > 12000", {}, True),
    ("udp dport 12345", {}, False),
    ("th dport 12345", {}, True),
    ("meta length 1000", {}, True),
    ("meta protocol ip", {}, True),
    ("icmp type echo-request", {}, False),
])
def test_match_semantics(rule, pkt_kw, matches):
    """Each selector reads the packet view; a missing header or ct is a miss (NFT_BREAK)."""
    n = nft(f"table inet t {{ chain c {{ type filter hook forward priority 0; policy drop; {rule} accept }} }}")
    assert n.eval_hook("forward", tcp(**pkt_kw)).accepted is matches


def test_trace_steps():
    """Each evaluated rule leaves a trace step (chain, index, text, matched, verdict), then the policy."""
    n = load("selftest-nsr1-filter.nft")
    res = n.eval_hook("forward", NftPacket(nfproto=2, l4proto=17, ct_state="new"))
    assert [(s.index, s.matched, s.verdict) for s in res.trace] == [
        (0, False, None), (1, False, None), (2, False, None), (3, False, None), (4, False, None), (None, True, "drop")]
    assert "policy drop" in res.format_trace() and res.trace[0].loc.line == 15


def test_ct_status_bits_match_conntrack():
    """The `ct status` names use the same IPS_* bits as flowsim.kernel.conntrack."""
    from flowsim.kernel import conntrack as c
    assert SYMBOLS["ct_status"] == {"expected": c.IPS_EXPECTED, "seen-reply": c.IPS_SEEN_REPLY,
                                    "assured": c.IPS_ASSURED, "confirmed": c.IPS_CONFIRMED, "snat": c.IPS_SRC_NAT,
                                    "dnat": c.IPS_DST_NAT, "dying": c.IPS_DYING}


_RANGE = nft("table inet t { chain c { type filter hook forward priority 0; policy drop; tcp dport 1000-2000 accept; "
             "ip daddr 10.0.0.0/12 accept } }")


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 65535), st.ip_addresses(v=4))
def test_port_range_and_prefix_property(port, addr):
    """`tcp dport 1000-2000` and `ip daddr 10.0.0.0/12` accept exactly what the range and the prefix contain."""
    pkt = NftPacket(nfproto=2, l4proto=6, dport=port, daddr=addr)
    want = 1000 <= port <= 2000 or addr in ipaddress.ip_network("10.0.0.0/12")
    assert _RANGE.eval_hook("forward", pkt).accepted is want
