"""The nft ruleset parser: the selftest's and OpenWrt's rulesets, every construct, and the errors (nft_flowtable.sh, fw4)."""

from __future__ import annotations

import ipaddress
import tomllib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flowsim.errors import RulesetError
from flowsim.nft.model import Range
from flowsim.nft.ruleset import (
    CounterStmt,
    FlowAdd,
    LogStmt,
    Match,
    NatStmt,
    RejectStmt,
    SetStmt,
    Verdict,
    VerdictMap,
    parse_ruleset,
)

RULESETS = Path(__file__).parent / "data" / "rulesets"
GOOD = sorted(p.name for p in RULESETS.glob("*.nft") if not p.name.startswith("bad-"))
TOPOLOGIES = Path(__file__).parent.parent / "topologies"
SHIPPED = sorted((p.name, ns) for p in TOPOLOGIES.glob("*.toml")
                 for ns, t in tomllib.loads(p.read_text()).get("netns", {}).items() if t.get("nft"))


def parse_file(name: str):
    path = RULESETS / name
    return parse_ruleset(path.read_text(), file=str(path))


def one_rule(rule: str, family: str = "inet", hook: str = "forward", ctype: str = "filter", extra: str = ""):
    """Parse *rule* alone in a base chain and return its expressions."""
    rs = parse_ruleset(f"""table {family} t {{
        flowtable ft {{ hook ingress priority 0; devices = {{ "eth0" }}; }}
        counter c1 {{ }}
        counter c2 {{ }}
        {extra}
        chain c {{
            type {ctype} hook {hook} priority 0; policy accept;
            {rule}
        }}
        chain other {{ }}
    }}""" if family != "netdev" else f"""table netdev t {{
        chain c {{ type filter hook ingress device "eth0" priority 0; policy accept; {rule} }} }}""")
    return rs.chain(family, "t", "c").rules[0].exprs


@pytest.mark.parametrize("name", GOOD)
def test_fixture_rulesets_parse(name):
    """Every fixture ruleset (selftest nft_flowtable.sh, OpenWrt fw4) parses and has at least one base chain or flowtable."""
    rs = parse_file(name)
    assert rs.base_chains or rs.flowtables


@pytest.mark.parametrize("topo, netns", SHIPPED)
def test_shipped_topology_rulesets_parse(topo, netns):
    """The ruleset of every namespace of every shipped topology parses; its flowtables list devices."""
    text = tomllib.loads((TOPOLOGIES / topo).read_text())["netns"][netns]["nft"]
    rs = parse_ruleset(text, file=topo)
    assert all(ft.devices for ft in rs.flowtables)


def test_selftest_nsr1_structure():
    """nft_flowtable.sh: nsr1's table inet filter: flowtable f1 on veth0/veth1 at priority 0, counters, forward policy drop."""
    rs = parse_file("selftest-nsr1-filter.nft")
    t = rs.table("inet", "filter")
    ft = t.flowtables["f1"]
    assert (ft.hook, ft.priority, ft.devices, ft.counter, ft.flags) == ("ingress", 0, ("veth0", "veth1"), False, frozenset())
    assert set(t.counters) == {"routed_orig", "routed_repl"}
    fwd = t.chains["forward"]
    assert (fwd.hook.type, fwd.hook.hook, fwd.hook.priority, fwd.hook.policy) == ("filter", "forward", 0, "drop")
    a, b, est, icmp4, icmp6 = fwd.rules
    assert [type(e) for e in a.exprs] == [Match, Match, SetStmt, FlowAdd, CounterStmt, Verdict]
    assert a.exprs[3] == FlowAdd("f1", "add")
    assert a.exprs[4].name == "routed_orig"
    cmap = b.exprs[1]
    assert cmap.map_selector.key == "direction" and cmap.map_entries == ((0, "routed_orig"), (1, "routed_repl"))
    assert est.exprs[0].flagcmp and est.exprs[0].values == (2 | 4,)
    assert a.loc.line == 15 and a.text.startswith('meta oif "veth1" tcp dport 12345')


def test_selftest_nat_structure():
    """nft_flowtable.sh: `dnat ip to 10.0.2.99:12345` in `table ip nat` and `masquerade` after `meta oifname "veth1"`."""
    rs = parse_file("selftest-nsr1-nat.nft")
    pre = rs.chain("ip", "nat", "prerouting")
    dnat = pre.rules[0].exprs[-1]
    assert dnat == NatStmt("dnat", 2, ipaddress.ip_address("10.0.2.99"), ipaddress.ip_address("10.0.2.99"),
                           12345, 12345, frozenset())
    post = rs.chain("ip", "nat", "postrouting")
    assert post.hook.type == "nat" and post.rules[0].exprs[-1].kind == "masquerade"


@pytest.mark.parametrize("name, hook, device", [("selftest-dscp-ingress.nft", "ingress", "veth0"),
                                                ("selftest-dscp-egress.nft", "egress", "veth1")])
def test_selftest_netdev_dscp_chains(name, hook, device):
    """nft_flowtable.sh DSCP test: netdev ingress/egress chains bound to one device, `ip dscp set cs3` (= 24)."""
    rs = parse_file(name)
    ch = rs.chain("netdev", "dscpmangle", "setdscp0")
    assert ch.hook.hook == hook and ch.hook.devices == (device,) and ch.hook.policy == "accept"
    assert ch.rules[0].exprs == (SetStmt(ch.rules[0].exprs[0].selector, 24),)


def test_selftest_ns2_anonymous_goto_chain():
    """nft_flowtable.sh check_dscp: `goto { … }` makes an anonymous regular chain holding the two DSCP counters."""
    rs = parse_file("selftest-ns2-dscp.nft")
    t = rs.table("inet", "filter")
    verdict = t.chains["input"].rules[0].exprs[-1]
    assert verdict.kind == "goto" and t.chains[verdict.chain].anonymous
    assert [r.exprs[1].name for r in t.chains[verdict.chain].rules] == ["ip4dscp3", "ip4dscp0"]


def test_insert_rule_prepends():
    """`insert rule` puts the rule first, as the selftest's IPIP step relies on (nft_flowtable.sh IPIP test)."""
    rs = parse_file("selftest-nsr1-ipip.nft")
    texts = [r.text for r in rs.chain("inet", "filter", "forward").rules]
    assert texts[0].startswith('meta oif "veth0" tcp sport 12345')
    assert texts[1] == "meta oif tun0 accept" and texts[2] == "ip dscp set cs3"
    assert [r.index for r in rs.chain("inet", "filter", "forward").rules] == list(range(8))


def test_openwrt_fw4():
    """fw4: `flush table`, defines, `flow offload @ft`, vmaps, interval set, flowtable `counter`."""
    rs = parse_file("openwrt-fw4.nft")
    t = rs.table("inet", "fw4")
    assert t.flowtables["ft"].counter and t.flowtables["ft"].nf_flowtable_flags == 0x2
    fwd = t.chains["forward"]
    assert fwd.rules[0].exprs[1] == FlowAdd("ft", "offload")
    assert isinstance(fwd.rules[1].exprs[0], VerdictMap)
    assert fwd.rules[2].exprs[0].values == ("br-lan",) and fwd.rules[2].exprs[0].is_set
    assert t.sets["lan_subnets"].elements == (ipaddress.ip_network("192.168.1.0/24"),
                                              ipaddress.ip_network("192.168.2.0/24"))
    assert t.chains["dstnat"].hook.priority == -100 and t.chains["srcnat"].hook.priority == 100
    assert t.chains["raw_prerouting"].hook.priority == -300 and t.chains["mangle_forward"].hook.priority == -150
    syn = t.chains["input"].rules[2].exprs[0]
    assert (syn.values, syn.mask, syn.op) == ((0x02,), 0x17, "==")
    assert isinstance(t.chains["handle_reject"].rules[0].exprs[-1], RejectStmt)


def test_openwrt_both_spellings():
    """`meta l4proto { tcp, udp } flow add @ft` and `ip protocol { tcp, udp } flow offload @ft` (fw4/OpenWrt)."""
    rules = parse_file("openwrt-ft-minimal.nft").chain("inet", "filter", "forward").rules
    assert [r.exprs[1] for r in rules] == [FlowAdd("ft", "add"), FlowAdd("ft", "offload")]
    assert rules[0].exprs[0].values == (6, 17) and rules[1].exprs[0].selector.key == "protocol"


def test_flowtable_priority_and_flags():
    """`priority filter - 10`, `flags offload`, `counter` in an ip6 flowtable."""
    ft = parse_file("offload-hw.nft").flowtables[0]
    assert (ft.family, ft.priority, ft.flags, ft.counter, ft.nf_flowtable_flags) == ("ip6", -10, {"offload"}, True, 3)


@pytest.mark.parametrize("text, prio", [
    ("0", 0), ("-300", -300), ("raw", -300), ("mangle", -150), ("dstnat", -100), ("filter", 0), ("security", 50),
    ("srcnat", 100), ("filter + 10", 10), ("filter+10", 10), ("filter - 5", -5), ("filter-5", -5),
    ("dstnat + 1", -99), ("0x10", 16),
])
def test_chain_priorities(text, prio):
    """Numeric and named chain priorities (nft(8) PRIORITY table) with offsets."""
    rs = parse_ruleset(f"table inet t {{ chain c {{ type filter hook input priority {text}; }} }}")
    assert rs.chain("inet", "t", "c").hook.priority == prio


@pytest.mark.parametrize("rule, expected", [
    ("meta l4proto tcp", Match(None, "implicit", (6,))),
    ("meta nfproto ipv6", Match(None, "implicit", (10,))),
    ("meta mark 0x10", Match(None, "implicit", (16,))),
    ("mark != 3", Match(None, "!=", (3,))),
    ('iifname "eth*"', Match(None, "implicit", ("eth*",))),
    ('oifname { "lan1", "lan2" }', Match(None, "implicit", ("lan1", "lan2"), is_set=True)),
    ("meta iif 3", Match(None, "implicit", (3,))),
    ("ip saddr 10.0.0.0/8", Match(None, "implicit", (ipaddress.ip_network("10.0.0.0/8"),))),
    ("ip daddr 10.0.0.1-10.0.0.9", Match(None, "implicit", (Range(ipaddress.ip_address("10.0.0.1"),
                                                                  ipaddress.ip_address("10.0.0.9")),))),
    ("ip6 saddr dead:1::99", Match(None, "implicit", (ipaddress.ip_address("dead:1::99"),))),
    ("ip6 daddr != fe80::/10", Match(None, "!=", (ipaddress.ip_network("fe80::/10"),))),
    ("ip protocol udp", Match(None, "implicit", (17,))),
    ("ip6 nexthdr icmpv6", Match(None, "implicit", (58,))),
    ("ip dscp cs3", Match(None, "implicit", (24,))),
    ("ip6 dscp ef", Match(None, "implicit", (46,))),
    ("tcp dport 1024-65535", Match(None, "implicit", (Range(1024, 65535),))),
    ("udp sport { 53, 123 }", Match(None, "implicit", (53, 123), is_set=True)),
    ("tcp dport >= 1024", Match(None, ">=", (1024,))),
    ("th dport ssh", Match(None, "implicit", (22,))),
    ("tcp flags syn", Match(None, "implicit", (2,), flagcmp=True)),
    ("tcp flags == syn", Match(None, "==", (2,))),
    ("tcp flags & (syn|ack) == syn", Match(None, "==", (2,), mask=0x12)),
    ("ct state new", Match(None, "implicit", (8,), flagcmp=True)),
    ("ct state != invalid", Match(None, "!=", (1,), flagcmp=True)),
    ("ct state { established, related }", Match(None, "implicit", (2, 4), is_set=True)),
    ("ct status dnat", Match(None, "implicit", (32,), flagcmp=True)),
    ("ct direction reply", Match(None, "implicit", (1,))),
    ("ct mark 1", Match(None, "implicit", (1,))),
    ("ct original saddr 10.0.1.99", Match(None, "implicit", (ipaddress.ip_address("10.0.1.99"),))),
    ("icmp type echo-request", Match(None, "implicit", (8,))),
    ("icmpv6 type { nd-neighbor-solicit, nd-neighbor-advert }", Match(None, "implicit", (135, 136), is_set=True)),
])
def test_matches(rule, expected):
    """Each selector's right-hand side is typed by its data type (nft evaluation step)."""
    m = one_rule(rule)[0]
    assert (m.op, m.values, m.is_set, m.flagcmp, m.mask) == (
        expected.op, expected.values, expected.is_set, expected.flagcmp, expected.mask)


@pytest.mark.parametrize("rule, check", [
    ("accept", lambda e: e == (Verdict("accept"),)),
    ("drop", lambda e: e == (Verdict("drop"),)),
    ("return", lambda e: e == (Verdict("return"),)),
    ("jump other", lambda e: e == (Verdict("jump", "other"),)),
    ("goto other", lambda e: e == (Verdict("goto", "other"),)),
    ("counter", lambda e: e == (CounterStmt(),)),
    ("counter packets 5 bytes 300", lambda e: e == (CounterStmt(packets=5, bytes=300),)),
    ("counter name c1", lambda e: e == (CounterStmt(name="c1"),)),
    ('counter name "c2"', lambda e: e == (CounterStmt(name="c2"),)),
    ("flow add @ft", lambda e: e == (FlowAdd("ft"),)),
    ("flow offload @ft", lambda e: e == (FlowAdd("ft", "offload"),)),
    ("ct mark set 0x2", lambda e: e[0].value == 2 and e[0].selector.kind == "ct"),
    ("meta mark set 7", lambda e: e[0].value == 7 and e[0].selector.kind == "meta"),
    ("mark set ct mark", lambda e: e[0].value.kind == "ct" and e[0].value.key == "mark"),
    ("ct mark set meta mark", lambda e: e[0].value.kind == "meta"),
    ("ip dscp set af41", lambda e: e[0].value == 34),
    ("ip6 dscp set 0", lambda e: e[0].value == 0 and e[0].selector.kind == "ip6"),
    ("meta nftrace set 1", lambda e: e[0].value == 1),
    ('log prefix "fwd: " level info', lambda e: e == (LogStmt((("prefix", "fwd: "), ("level", "info"))),)),
    ("log", lambda e: e == (LogStmt(),)),
    ("reject with icmpx type admin-prohibited", lambda e: e[0].with_ == "icmpx admin-prohibited"),
    ("ct state vmap { new : jump other, invalid : drop }",
     lambda e: e[0].entries == ((8, Verdict("jump", "other")), (1, Verdict("drop")))),
])
def test_statements(rule, check):
    """Each statement parses to its model value."""
    assert check(one_rule(rule))


@pytest.mark.parametrize("rule, hook, expected", [
    ("masquerade", "postrouting", NatStmt("masquerade")),
    ("masquerade random,persistent", "postrouting", NatStmt("masquerade", flags=frozenset({"random", "persistent"}))),
    ("meta l4proto tcp masquerade to :1024-2047", "postrouting", NatStmt("masquerade", port_min=1024, port_max=2047)),
    ("snat ip to 192.168.10.1", "postrouting",
     NatStmt("snat", 2, ipaddress.ip_address("192.168.10.1"), ipaddress.ip_address("192.168.10.1"))),
    ("snat to 10.0.0.1-10.0.0.4", "postrouting",
     NatStmt("snat", 2, ipaddress.ip_address("10.0.0.1"), ipaddress.ip_address("10.0.0.4"))),
    ("tcp dport 80 dnat ip6 to [dead:2::99]:8080", "prerouting",
     NatStmt("dnat", 10, ipaddress.ip_address("dead:2::99"), ipaddress.ip_address("dead:2::99"), 8080, 8080)),
    ("dnat to dead:2::99", "prerouting",
     NatStmt("dnat", 10, ipaddress.ip_address("dead:2::99"), ipaddress.ip_address("dead:2::99"))),
    ("tcp dport 80 redirect to :3128", "prerouting", NatStmt("redirect", port_min=3128, port_max=3128)),
])
def test_nat_statements(rule, hook, expected):
    """snat/dnat (family from `ip`/`ip6` or the address, ports, ranges), masquerade, redirect in inet nat chains."""
    assert one_rule(rule, hook=hook, ctype="nat")[-1] == expected


def test_defines_and_variables():
    """`define` values are substituted: scalars, sets as anonymous sets, and in flowtable devices."""
    rs = parse_ruleset("""
        define wan = "eth1"
        define lans = { "eth2", "eth3" }
        define web = 80
        table inet t {
            flowtable ft { hook ingress priority 0; devices = { $wan, eth2 }; }
            chain c { type filter hook forward priority 0;
                iifname $lans oifname $wan tcp dport $web accept
            }
        }""")
    assert rs.flowtables[0].devices == ("eth1", "eth2")
    m = rs.chain("inet", "t", "c").rules[0].exprs
    assert (m[0].values, m[0].is_set, m[1].values, m[2].values) == (("eth2", "eth3"), True, ("eth1",), (80,))


def test_separators_comments_and_continuations():
    """`;` and newlines separate, newlines inside set braces do not, `#` comments and `\\` continuations are skipped."""
    rs = parse_ruleset("table ip t {\n chain c { type filter hook input priority 0; policy accept; tcp dport {\n"
                       " 22, # ssh\n 80\n } \\\n accept; udp dport 53 drop }\n}\n")
    rules = rs.chain("ip", "t", "c").rules
    assert len(rules) == 2 and rules[0].exprs[0].values == (22, 80) and rules[0].exprs[1] == Verdict("accept")


def test_commands_flush_delete_add():
    """`flush ruleset`, `add table`, `add chain`, `add rule`, `flush table`, `delete table` act in order."""
    rs = parse_ruleset("""
        table ip old { chain c { type filter hook input priority 0; } }
        flush ruleset
        add table inet t
        add chain inet t c { type filter hook forward priority 0; policy drop; }
        add rule inet t c tcp dport 22 accept
        add table ip gone
        delete table ip gone
        table ip6 x { chain c { type filter hook input priority 0; drop } }
        flush table ip6 x
    """)
    assert [(t.family, t.name) for t in rs.tables] == [("inet", "t"), ("ip6", "x")]
    assert len(rs.chain("inet", "t", "c").rules) == 1 and rs.chain("ip6", "x", "c").rules == ()


def test_named_sets_and_maps():
    """Named sets (`type`, `typeof`, interval elements) and verdict maps referenced with @name."""
    rs = parse_ruleset("""table inet t {
        set ports { type inet_service; elements = { 22, 80-88 } }
        set nets { typeof ip saddr; flags interval; elements = { 10.0.0.0/8 } }
        map vm { type ifname : verdict; elements = { "eth0" : accept, "eth1" : jump other } }
        chain other { }
        chain c { type filter hook forward priority 0;
            tcp dport @ports ip saddr != @nets accept
            iifname vmap @vm
        } }""")
    r0, r1 = rs.chain("inet", "t", "c").rules
    assert r0.exprs[0].values == (22, Range(80, 88)) and r0.exprs[0].set_name == "ports"
    assert r0.exprs[1].op == "!=" and r0.exprs[1].is_set
    assert r1.exprs[0].set_name == "vm" and r1.exprs[0].entries[1] == ("eth1", Verdict("jump", "other"))


def test_line_offset_and_file():
    """`file=` and `line_offset=` make errors name the enclosing file and absolute lines."""
    with pytest.raises(RulesetError) as ei:
        parse_ruleset("table inet t {\n  chain c {\n    bogus 1\n  }\n}", file="topo.toml", line_offset=20)
    e = ei.value
    assert (e.file, e.line, e.column) == ("topo.toml", 23, 5) and str(e).startswith("topo.toml:23:5:")
    rs = parse_ruleset("table inet t {\n chain c { }\n}", file="topo.toml", line_offset=20)
    assert rs.chain("inet", "t", "c").loc.line == 22


def test_devices_referenced():
    """The ruleset lists the interface names it refers to, for the topology loader to check."""
    rs = parse_file("selftest-nsr1-filter.nft")
    assert {d for d, _ in rs.devices_referenced} == {"veth0", "veth1"}


@pytest.mark.parametrize("name, line, column, fragment", [
    ("bad-unknown-keyword.nft", 4, 16, "'synproxy' is nft syntax flowsim does not support"),
    ("bad-missing-brace.nft", 6, 2, "missing '}' before 'chain' (the '{' at line 2 is not closed)"),
    ("bad-jump-missing-chain.nft", 4, 22, "jump to undefined chain 'forward_lan'"),
    ("bad-flow-add-undefined.nft", 7, 20, "flow add to undefined flowtable 'f2'"),
    ("bad-flow-add-not-forward.nft", 10, 29, "flow offload is only valid in chains hooked at forward"),
    ("bad-bridge-family.nft", 1, 7, "the bridge family is not supported"),
])
def test_bad_fixture_errors(name, line, column, fragment):
    """Bad rulesets fail with a RulesetError naming file, line, column and what was expected."""
    with pytest.raises(RulesetError) as ei:
        parse_file(name)
    e = ei.value
    assert (e.line, e.column) == (line, column)
    assert fragment in str(e) and e.file.endswith(name) and e.expected


T = "table inet t {\n  flowtable ft { hook ingress priority 0; devices = { \"eth0\" }; }\n  counter c1 { }\n"


@pytest.mark.parametrize("text, line, column, fragment", [
    (T + "  chain c {\n    type filter hook forward priority 0;\n    meta foo 1\n  }\n}", 6, 10, "unknown meta key 'foo'"),
    (T + "  chain c {\n    type filter hook forward priority 0;\n    ct state bogus accept\n  }\n}", 6, 14,
     "'bogus' is not a valid ct state value"),
    (T + "  chain c {\n    type filter hook forward priority 0;\n    ip saddr dead::1\n  }\n}", 6, 14,
     "is not a valid ipv4 addr"),
    (T + "  chain c {\n    type filter hook forward priority 0;\n    tcp dport 22,80 accept\n  }\n}", 6, 18,
     "comma-separated list is only valid for flag types"),
    (T + "  chain c {\n    type filter hook input priority 0;\n    masquerade\n  }\n}", 6, 5,
     "masquerade is only valid in nat chains at postrouting"),
    (T + "  chain c {\n    type nat hook prerouting priority 0;\n    masquerade\n  }\n}", 6, 5,
     "masquerade is only valid in nat chains"),
    (T + "  chain c {\n    type nat hook prerouting priority 0;\n    dnat to 10.0.0.1:80\n  }\n}", 6, 5,
     "transport protocol mapping is only valid after a transport protocol match"),
    (T + "  chain c {\n    type filter hook forward priority 0;\n    accept counter\n  }\n}", 6, 12,
     "statement after terminal statement has no effect"),
    (T + "  chain c {\n    type filter hook forward priority 0;\n    counter name nope\n  }\n}", 6, 18,
     "no counter 'nope'"),
    (T + "  chain c {\n    type filter hook forward priority 0;\n    jump d\n  }\n  chain d {\n    jump c\n  }\n}",
     9, 10, "cannot jump to base chain 'c'"),
    (T + "  chain c {\n    type filter hook forward priority 0;\n    jump d\n  }\n  chain d {\n    jump e\n  }\n"
     "  chain e {\n    jump d\n  }\n}", 8, 9, "jump loop: c -> d -> e -> d"),
    (T + "  chain c {\n    type filter hook forward priority 0;\n    iifname $nope accept\n  }\n}", 6, 13,
     "undefined variable $nope"),
    (T + "  chain c {\n    policy drop;\n  }\n}", 5, 12, "policy on a chain without a hook"),
    (T + "  chain c {\n    type filter hook forward priority sideways;\n  }\n}", 5, 39, "unknown priority 'sideways'"),
    (T + "  chain c {\n    type filter hook ingress priority 0;\n  }\n}", 5, 22, "a ingress chain needs a device"),
    (T + "  chain c {\n    type nat hook forward priority 0;\n  }\n}", 5, 19, "nat chains cannot use hook 'forward'"),
    (T + "  chain c {\n    type filter hook forward priority 0;\n    meta mark set 1 ct mark\n  }\n}", 6, 28,
     "unexpected token newline"),
    (T + "  flowtable f2 { hook ingress priority 0; devices = { \"eth0\" }; }\n}", 4, 13,
     "device 'eth0' is already in flowtable 'ft'"),
    (T + "  flowtable f3 { hook egress priority 0; }\n}", 4, 23, "flowtable hook 'egress'"),
    ("table netdev n {\n  chain c {\n    type filter hook ingress device eth0 priority 0;\n"
     "    flow add @ft\n  }\n}", 4, 5, "undefined flowtable 'ft'"),
    ("table ip t {\n  chain c {\n    type nat hook postrouting priority 0;\n    snat ip6 to dead::1\n  }\n}",
     4, 5, "NAT family does not match the ip table"),
    ("table inet t {\n  chain c {\n    type filter hook forward priority 0; ct mark 1 accept\n}", 1, 14,
     "missing '}': this '{' is never closed"),
    ("table inet t {\n  chain c {\n    type filter hook forward priority 0;\n    tcp dport 22 $ accept\n  }\n}",
     4, 18, "unexpected character '$'"),
    ("table inet t {\n  chain a { type filter hook input priority 0; } chain b { }\n}", 2, 50,
     "missing ';' or newline before 'chain'"),
])
def test_error_messages(text, line, column, fragment):
    """Semantic and syntax errors point at the offending token with line and column."""
    with pytest.raises(RulesetError) as ei:
        parse_ruleset(text)
    e = ei.value
    assert fragment in str(e), str(e)
    assert (e.line, e.column) == (line, column), str(e)


ports = st.integers(1, 65535)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(ports, st.tuples(ports, ports).map(sorted)), min_size=1, max_size=6),
       st.sampled_from([" ", "\n", "\n\t", "  \n  "]))
def test_port_sets_any_layout(elems, ws):
    """A port set parses to the same typed elements whatever the whitespace and newlines inside the braces."""
    text = ("," + ws).join(str(e) if isinstance(e, int) else f"{e[0]}-{e[1]}" for e in elems)
    m = one_rule("tcp dport {" + ws + text + ws + "} accept")[0]
    want = tuple(e if isinstance(e, int) else Range(*e) for e in elems)
    assert m.values == want and m.is_set


@settings(max_examples=60, deadline=None)
@given(st.ip_addresses(v=4), st.integers(0, 32))
def test_ipv4_prefix_property(addr, plen):
    """`ip saddr A/N` is the network of A with prefix length N (host bits ignored, as nft does)."""
    m = one_rule(f"ip saddr {addr}/{plen}")[0]
    assert m.values == (ipaddress.ip_network(f"{addr}/{plen}", strict=False),)


def _chain_ladder(n: int, kind: str = "jump", first: str = "c1") -> str:
    """Regular chains c1 … cN, each jumping (or going) to the next; cN accepts."""
    return "".join(f"  chain c{i} {{\n    {kind} c{i + 1}\n  }}\n" for i in range(1, n)) + \
        f"  chain c{n} {{\n    accept\n  }}\n"


_BASE = "table inet t {\n  chain base {\n    type filter hook forward priority 0;\n    jump c1\n  }\n"


@pytest.mark.parametrize("text, error", [
    (_BASE + _chain_ladder(15) + "}\n", None),
    (_BASE + _chain_ladder(16) + "}\n", ("x.nft:49:10", "jump to 'c16' nests chains 16 deep")),
    (_BASE + _chain_ladder(16, "goto") + "}\n", ("x.nft:49:10", "goto to 'c16' nests chains 16 deep")),
    # a diamond: c1..c15 first explored from base at level 1..15, then reached again two levels deeper
    (_BASE.replace("    jump c1\n", "    jump c1\n    jump a1\n") + _chain_ladder(15)
     + "  chain a1 {\n    jump a2\n  }\n  chain a2 {\n    jump c1\n  }\n}\n", ("x.nft:44:10", "jump to 'c14' nests chains 16 deep")),
])
def test_jump_depth_is_nft_chain_validate(text, error):
    """nft_chain_validate: a chain reached through NFT_JUMP_STACK_SIZE (16) jumps or gotos is EMLINK, at the jump."""
    if error is None:
        parse_ruleset(text, file="x.nft")
        return
    with pytest.raises(RulesetError, match="Too many links") as exc:
        parse_ruleset(text, file="x.nft")
    assert str(exc.value).startswith(error[0]) and error[1] in str(exc.value)


@pytest.mark.parametrize("text, value", [
    # what nft 1.0.6 lists back for `tcp dport TEXT` (src/scanner.l: hex, then octal for 0 and octal digits, else
    # decimal): these crashed the parser (int(text, 0) refuses a leading zero)
    ("022", 18), ("017", 15), ("0777", 511), ("00", 0), ("007", 7), ("08", 8), ("09", 9), ("018", 18),
    ("0x1f", 31), ("0X1F", 31), ("443", 443),
])
def test_numbers_are_read_as_nft_reads_them(text, value):
    from flowsim.nft.types import nft_number
    assert nft_number(text) == value
    rs = parse_ruleset(f"table inet t {{ chain c {{ tcp dport {text} counter packets {text} bytes 0 }} }}")
    match, counter = rs.tables[0].chains["c"].rules[0].exprs
    assert match.values == (value,) and counter.packets == value
