"""nft ``limit``: the token bucket of net/netfilter/nft_limit.c.

``nft_limit_init`` fills the bucket (a packet limit: its cost times the burst, ``nsecs / rate * burst``; a
byte limit: ``nsecs * (rate + burst) / rate``), ``nft_limit_eval`` refills it by the nanoseconds since the
last packet, capped at its size, and takes the packet's cost (``nft_limit_pkts_eval``: ``nsecs / rate``;
``nft_limit_bytes_eval``: ``nsecs * skb->len / rate``) or breaks the rule (``over``: the other way round).
nft's parser (src/parser_bison.y) sends a packet limit's default burst, 5, and refuses a zero one; the
kernel refuses a zero rate (-EINVAL) and a bucket past 64 bits (-EOVERFLOW).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flowsim.config.topology import load_topology, load_topology_text
from flowsim.errors import RulesetError
from flowsim.nft.eval import Nftables, NftPacket
from flowsim.nft.model import LimitStmt
from flowsim.nft.parse import parse_ruleset
from flowsim.sim.report import build_report
from flowsim.sim.simulation import Simulation

TOPOLOGIES = Path(__file__).resolve().parent.parent / "topologies"
NS = 1_000_000_000


def delivered(sim: Simulation) -> dict[str, int]:
    return {t["name"]: t["directions"]["original"]["delivered"] for t in build_report(sim)["traffic"]}


def limit_of(text: str) -> LimitStmt:
    rs = parse_ruleset(f"table inet t {{ chain c {{ type filter hook forward priority 0; {text} }} }}")
    (stmt,) = [e for e in rs.tables[0].chains["c"].rules[0].exprs if isinstance(e, LimitStmt)]
    return stmt


def verdicts(rule: str, packets: list[tuple[float, int]]) -> list[str]:
    """The forward hook's verdict for each (time in seconds, skb->len) through one chain: *rule*, then accept."""
    clock = [0.0]
    nft = Nftables(parse_ruleset("table inet t { chain c { type filter hook forward priority 0; policy accept;\n"
                                 f"{rule}\n}} }}"), clock=lambda: clock[0])
    out = []
    for t, length in packets:
        clock[0] = t
        out.append(nft.eval_hook("forward", NftPacket(nfproto=2, l4proto=17, dport=53, length=length)).verdict)
    return out


@pytest.mark.parametrize("text, rate, unit, burst, over, is_bytes, tokens_max, cost_100", [
    # firewall4's syn_flood: 40 ms a packet, a bucket of 50 packets
    ("limit rate 25/second burst 50 packets", 25, 1, 50, False, False, 50 * 40_000_000, 40_000_000),
    # no burst written: nft sends 5
    ("limit rate 1000/second", 1000, 1, 5, False, False, 5 * 1_000_000, 1_000_000),
    ("limit rate over 2/minute burst 3 packets", 2, 60, 3, True, False, 3 * 30 * NS, 30 * NS),
    # bytes: a bucket of unit * (rate + burst) / rate; a packet of 100 bytes costs 100 / rate of the unit
    ("limit rate 10 kbytes/second burst 2 kbytes", 10240, 1, 2048, False, True, NS * 12288 // 10240,
     NS * 100 // 10240),
    # a byte limit without a burst holds one unit's worth
    ("limit rate over 1 mbytes/hour", 1 << 20, 3600, 0, True, True, 3600 * NS, 3600 * NS * 100 // (1 << 20)),
])
def test_nft_limit_init_fills_the_bucket_as_the_kernel_does(text, rate, unit, burst, over, is_bytes, tokens_max,
                                                            cost_100):
    stmt = limit_of(text)
    assert (stmt.rate, stmt.unit, stmt.burst, stmt.over, stmt.bytes) == (rate, unit, burst, over, is_bytes)
    assert stmt.tokens_max == tokens_max
    assert stmt.cost(100) == cost_100


def test_a_packet_limit_passes_its_burst_then_one_packet_per_cost():
    # 2/second: 0.5 s a packet, a bucket of 1.5 s; a packet every 0.1 s
    got = verdicts("udp dport 53 limit rate over 2/second burst 3 packets drop", [(i / 10, 100) for i in range(10)])
    # tokens before each packet: 1.5 1.1 .7 .3 .4 .5 .1 .2 .3 .4 (s); a packet needs .5
    assert got == ["accept"] * 3 + ["drop", "drop", "accept", "drop", "drop", "drop", "drop"]


def test_the_refill_is_capped_at_the_bucket_size():
    # an hour idle refills the bucket once: the burst again, not an hour of packets
    packets = [(0.0, 100)] * 4 + [(3600.0, 100)] * 4
    got = verdicts("limit rate 1/second burst 3 packets accept\ndrop", packets)
    assert got == ["accept"] * 3 + ["drop"] + ["accept"] * 3 + ["drop"]


def test_a_byte_limit_costs_each_packet_its_length():
    # 1000 bytes/second with a 1000-byte burst: a bucket of 2 s; a 1500-byte packet costs 1.5 s, a 100-byte one .1 s
    got = verdicts("limit rate 1000 bytes/second burst 1000 bytes accept\ndrop",
                   [(0.0, 1500), (0.0, 1500), (0.0, 100), (0.0, 100), (0.0, 400), (0.0, 100)])
    assert got == ["accept", "drop", "accept", "accept", "drop", "accept"]


def test_over_inverts_the_answer_not_the_bucket():
    # nft_limit_eval takes the cost only from a packet within the rate, `over` or not: the same tokens decide
    within = verdicts("limit rate 1/second burst 2 packets accept\ndrop", [(0.0, 60)] * 3 + [(1.0, 60)] * 2)
    over = verdicts("limit rate over 1/second burst 2 packets drop", [(0.0, 60)] * 3 + [(1.0, 60)] * 2)
    assert within == over == ["accept", "accept", "drop", "accept", "drop"]


def test_each_limit_expression_has_its_own_bucket():
    got = verdicts("udp dport 53 limit rate 1/hour burst 1 packets accept\n"
                   "udp dport 53 limit rate 1/hour burst 1 packets accept\ndrop", [(0.0, 60)] * 3)
    assert got == ["accept", "accept", "drop"]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3 * NS), st.integers(28, 1500)), min_size=1, max_size=40),
       st.integers(1, 5000), st.integers(0, 3000), st.booleans())
def test_what_passes_never_costs_more_than_the_bucket_and_the_time(steps, rate, burst, is_bytes):
    """Token conservation: the packets a limit accepts cost at most its bucket plus the time elapsed (ns)."""
    text = f"limit rate {rate} bytes/second burst {burst} bytes" if is_bytes else \
        f"limit rate {rate}/second burst {burst or 1} packets"
    stmt = limit_of(text)
    t, packets = 0, []
    for dt, length in steps:
        t += dt
        packets.append((t / NS, length))
    got = verdicts(f"{text} accept\ndrop", packets)
    spent = sum(stmt.cost(length) for (_, length), v in zip(packets, got) if v == "accept")
    assert spent <= stmt.tokens_max + round(packets[-1][0] * NS)
    # and the first packet, into a full bucket, passes whenever it costs no more than the bucket holds
    assert (got[0] == "accept") == (stmt.cost(packets[0][1]) <= stmt.tokens_max)


@pytest.mark.parametrize("text, message", [
    ("limit rate 0/second", "Invalid argument"),  # nft_limit_init: a zero rate
    ("limit rate 5/second burst 0 packets", "packet limit burst must be > 0"),  # nft's parser
    ("limit rate 5/second burst 10 kbytes", "a packet rate's burst is counted in packets"),
    ("limit rate 5 gbytes/second", "unknown byte unit 'gbytes'"),  # data_unit_parse
    ("limit rate 5/fortnight", "unknown limit unit 'fortnight'"),  # time_unit_parse
    # nft_limit_init: unit * NSEC_PER_SEC * (rate + burst) past 64 bits
    ("limit rate 1 bytes/week burst 4000000000 bytes", "Value too large for defined data type"),
    # NFTA_LIMIT_BURST is 32 bits: nft 1.0.6 would send 705032704 for 5000000000 without a word
    ("limit rate 1/second burst 5000000000 packets", "does not fit in NFTA_LIMIT_BURST's 32 bits (nft would send "
                                                     "705032704)"),
    ("limit rate 1/week burst 4294967295 packets", "Value too large for defined data type"),
    ("limit rate 18446744073709551616/second", "limit rate 18446744073709551616 is too large"),
])
def test_limits_the_kernel_or_nft_refuse_are_located_errors(text, message):
    with pytest.raises(RulesetError, match=re.escape(message)) as err:
        parse_ruleset(f"table inet t {{\n  chain c {{\n    {text}\n  }}\n}}", file="limit.nft")
    assert err.value.file == "limit.nft" and err.value.line == 3


def test_conform_limit_counts_every_limit_through_the_stack():
    """topologies/conform-limit.toml: the limits at the forward hook and at netdev ingress, on the slow path; the
    fast path bypasses the forward chain (udp-offloaded's second datagram is the only one its limit drops)."""
    sim = Simulation(load_topology(TOPOLOGIES / "conform-limit.toml"))
    sim.run()
    got = delivered(sim)
    assert {k: got[k] for k in ("udp-pkts", "udp-bytes", "udp-ingress", "udp-offloaded")} == \
        {"udp-pkts": 3, "udp-bytes": 5, "udp-ingress": 2, "udp-offloaded": 9}
    ft = sim.kernel.netns["r"].flowtables["ft"]
    assert ft.fastpath == 8


def test_a_paced_flow_passes_at_the_limit_rate_on_the_run_clock():
    # the bucket refills on the simulation's clock: 10 packets a second through 5/second with a burst of 1
    text = (TOPOLOGIES / "conform-limit.toml").read_text()
    text = text.replace("udp dport 5201 limit rate over 1/hour burst 3 packets counter drop",
                        "udp dport 5201 limit rate over 5/second burst 1 packets counter drop")
    text = text.replace('dport = 5201\npackets = 10\n', 'dport = 5201\npackets = 10\nrate = 10\n')
    sim = Simulation(load_topology_text(text, "paced.toml"))
    sim.run()
    assert delivered(sim)["udp-pkts"] == 5
