"""The nft syntax firewall4 renders that flowsim parses since topologies/openwrt-fw4.toml: ``define`` inside a
table, ``ct helper`` objects and ``ct helper set``, ``limit rate``, concatenations (``icmpv6 type . icmpv6
code { 130 . 0, … }``) and ``tcp option maxseg size set rt mtu`` — every construct from
openwrt/firewall4 tests/01_configuration/01_ruleset, evaluated as nft_ct_helper_obj_eval, nft_lookup on a
concatenated key, nft_limit_eval (tests/test_nft_limit.py) and nft_exthdr_tcp_set_eval (no options to clamp) do."""

from __future__ import annotations

import ipaddress

import pytest

from flowsim.errors import RulesetError
from flowsim.kernel.conntrack import IPS_CONFIRMED, CtEntry, CtTuple
from flowsim.nft.eval import Nftables, NftPacket
from flowsim.nft.model import ConcatMatch, LimitStmt, SetStmt, TcpOptStmt
from flowsim.nft.ruleset import parse_ruleset

FW4 = '''
table inet fw4 {
	ct helper ftp {
		type "ftp" protocol tcp;
	}

	ct helper Q.931 {
		type "Q.931" protocol tcp;
	}

	define lan_devices = { "br-lan" }

	chain forward {
		type filter hook forward priority filter; policy drop;

		tcp flags & (fin | syn | rst | ack) == syn jump syn_flood comment "!fw4: Rate limit TCP syn packets"
		iifname $lan_devices jump helper_lan
		meta nfproto ipv6 icmpv6 type . icmpv6 code { 2 . 0, 4 . 0, 4 . 1 } limit rate 1000/second counter accept
		oifname "pppoe-wan" tcp flags syn / syn,fin,rst tcp option maxseg size set rt mtu
		accept
	}

	chain syn_flood {
		limit rate 25/second burst 50 packets return comment "!fw4: Accept SYN packets below rate-limit"
		drop comment "!fw4: Drop excess packets"
	}

	chain helper_lan {
		meta l4proto tcp tcp dport 21 ct helper set "ftp" comment "!fw4: FTP passive connection tracking"
	}
}
'''

A, B = ipaddress.ip_address("192.168.1.10"), ipaddress.ip_address("198.51.100.10")
A6, B6 = ipaddress.ip_address("2001:db8:1::10"), ipaddress.ip_address("2001:db8:2::10")


def test_fw4_constructs_parse_to_their_statements():
    rs = parse_ruleset(FW4, file="fw4.nft")
    t = rs.tables[0]
    assert dict(t.helpers) == {"ftp": ("ftp", 6), "Q.931": ("Q.931", 6)}
    fwd = t.chains["forward"].rules
    concat = fwd[2].exprs[1]
    assert isinstance(concat, ConcatMatch) and concat.values == ((2, 0), (4, 0), (4, 1))
    assert fwd[2].exprs[2] == LimitStmt(1000, 1, 5)  # nft sends its default burst, 5
    assert isinstance(fwd[3].exprs[-1], TcpOptStmt)
    assert t.chains["syn_flood"].rules[0].exprs[0] == LimitStmt(25, 1, 50)
    set_stmt = t.chains["helper_lan"].rules[0].exprs[-1]
    assert isinstance(set_stmt, SetStmt) and set_stmt.value == "ftp"


def ct(dport: int) -> CtEntry:
    tup = CtTuple(A, B, 40000, dport, 2, 6)
    return CtEntry(tuplehash=[tup, tup.invert()])


def tcp(dport: int, entry: CtEntry, flags=0x02) -> NftPacket:
    return NftPacket(nfproto=2, l4proto=6, saddr=A, daddr=B, sport=40000, dport=dport, iif="br-lan",
                     oif="pppoe-wan", length=60, tcp_flags=flags, ct=entry, ct_state="new", ct_dir=0)


def test_ct_helper_set_attaches_the_helper_to_a_new_entry_only():
    """nft_ct_helper_obj_eval: a new (unconfirmed) entry gets the helper; a confirmed one keeps none."""
    n = Nftables(parse_ruleset(FW4))
    new = ct(21)
    assert n.eval_hook("forward", tcp(21, new)).verdict == "accept"  # syn_flood: within the rate, return
    assert new.helper == "ftp"
    other = ct(22)
    n.eval_hook("forward", tcp(22, other))
    assert other.helper is None
    confirmed = ct(21)
    confirmed.status |= IPS_CONFIRMED
    n.eval_hook("forward", tcp(21, confirmed, flags=0x10))
    assert confirmed.helper is None


@pytest.mark.parametrize("icmp_type, code, counted", [(4, 1, True), (4, 2, False), (2, 0, True), (1, 0, False)])
def test_concatenation_looks_up_the_pair(icmp_type, code, counted):
    n = Nftables(parse_ruleset(FW4))
    pkt = NftPacket(nfproto=10, l4proto=58, saddr=A6, daddr=B6, iif="pppoe-wan", oif="br-lan", length=100,
                    icmp_type=icmp_type, icmp_code=code, ct=None, ct_state="invalid")
    res = n.eval_hook("forward", pkt)
    assert res.verdict == "accept"
    assert (res.decided_by.chain, res.decided_by.index) == (("forward", 2) if counted else ("forward", 4))


@pytest.mark.parametrize("text, message", [
    ('table inet t { chain c { ct helper set "ftp" } }', "no ct helper object 'ftp'"),
    ('table inet t { ct helper h { type "x" protocol icmp; } }', "ct helper protocol 'icmp'"),
    ('table inet t { chain c { limit rate 5/fortnight } }', "unknown limit unit 'fortnight'"),
    ('table inet t { chain c { limit rate 5/second burst 10 kbytes } }', "a packet rate's burst is counted in packets"),
    ('table inet t { chain c { tcp option window size set rt mtu } }', "tcp option window size cannot be set"),
    ('table inet t { chain c { icmpv6 type . icmpv6 code { 1, 2 } accept } }', "a set element of 1 values"),
])
def test_fw4_constructs_errors_are_located(text, message):
    with pytest.raises(RulesetError, match=message):
        parse_ruleset(text, file="bad.nft")
