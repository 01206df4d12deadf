"""nft ``quota``: net/netfilter/nft_quota.c.

Every packet that reaches a quota adds its ``skb->len`` to the bytes consumed, within the quota or not
(``nft_overquota``: ``atomic64_add_return``); the rule breaks once the consumed bytes are over the quota
(``consumed > quota``; Debian's 6.1.192, 6.12.118 and 7.x sources all compare so) or, with ``over``
(``NFT_QUOTA_F_INV``), while they are not.  ``used`` is ``NFTA_QUOTA_CONSUMED`` at load.  A named quota
(``quota NAME { … }``, ``quota name "NAME"``) is one object for every rule naming it.
``nft_quota_do_init`` refuses a quota past S64_MAX (-EOVERFLOW) and more used than the quota (-EINVAL).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flowsim.config.topology import load_topology
from flowsim.errors import RulesetError
from flowsim.nft.eval import Nftables, NftPacket
from flowsim.nft.model import QuotaDef, QuotaStmt
from flowsim.nft.parse import parse_ruleset
from flowsim.sim.report import build_report
from flowsim.sim.simulation import Simulation

TOPOLOGIES = Path(__file__).resolve().parent.parent / "topologies"


def ruleset(rules: str, objects: str = ""):
    return parse_ruleset("table inet t {\n" + objects + "\n chain c {\n  type filter hook forward priority 0; "
                         "policy accept;\n" + rules + "\n }\n}\n", file="quota.nft")


def verdicts(nft: Nftables, lengths: list[int], dport: int = 53) -> list[str]:
    return [nft.eval_hook("forward", NftPacket(nfproto=2, l4proto=17, dport=dport, length=n)).verdict
            for n in lengths]


@pytest.mark.parametrize("text, quota, over, used", [
    ("quota 100 bytes", 100, False, 0),
    ("quota until 5 kbytes used 1 kbytes", 5120, False, 1024),
    ("quota over 2 mbytes", 2 << 20, True, 0),
])
def test_quota_statements_parse_to_bytes(text, quota, over, used):
    (stmt,) = ruleset(f"  {text}").tables[0].chains["c"].rules[0].exprs
    assert stmt == QuotaStmt(quota, over, used)


def test_a_quota_passes_until_the_consumed_bytes_are_over_it():
    # 1000-byte packets against 3000 bytes: the third makes exactly 3000, not over it (consumed > quota)
    nft = Nftables(ruleset("  quota 3000 bytes accept\n  drop"))
    assert verdicts(nft, [1000] * 5) == ["accept"] * 3 + ["drop"] * 2
    # what is over the quota is consumed too
    assert nft.quotas_consumed == {("inet", "t", "c", 0, 0): 5000}


def test_over_breaks_while_within_and_used_counts_from_the_start():
    nft = Nftables(ruleset("  quota over 1000 bytes used 500 bytes drop"))
    assert verdicts(nft, [500] * 4) == ["accept", "drop", "drop", "drop"]


def test_a_named_quota_is_shared_by_every_rule_naming_it():
    nft = Nftables(ruleset('  udp dport 1 quota name "q" accept\n  udp dport 2 quota name "q" accept\n  drop',
                           "  quota q { 2500 bytes }"))
    assert ruleset("", "  quota q { over 2 kbytes used 1 kbytes }").tables[0].quotas["q"] == \
        QuotaDef("q", 2048, True, 1024)
    assert verdicts(nft, [1000], dport=1) + verdicts(nft, [1000], dport=2) + verdicts(nft, [1000], dport=1) \
        == ["accept", "accept", "drop"]
    assert nft.quotas_consumed == {("inet", "t", "q"): 3000}


def test_anonymous_quotas_are_one_per_expression():
    nft = Nftables(ruleset("  udp dport 1 quota 1000 bytes accept\n  udp dport 1 quota 1000 bytes accept\n  drop"))
    assert verdicts(nft, [1000] * 3, dport=1) == ["accept", "accept", "drop"]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(20, 1500), min_size=1, max_size=30), st.integers(0, 20000), st.integers(0, 20000),
       st.booleans())
def test_a_quota_accepts_exactly_the_packets_that_leave_it_not_over(lengths, quota, used, over):
    """The rule matches packet i exactly when used + the lengths up to i (itself included) do not pass the quota
    (``over``: when they do), whatever came before."""
    used = min(used, quota)
    mode = "over " if over else ""
    nft = Nftables(ruleset(f"  quota {mode}{quota} bytes used {used} bytes drop"))
    got = verdicts(nft, lengths)
    consumed = used
    for n, v in zip(lengths, got):
        consumed += n
        assert (v == "drop") == ((consumed > quota) == over)


@pytest.mark.parametrize("text, objects, message", [
    ("quota 5 mbytes used 6 mbytes", "", "Invalid argument"),  # nft_quota_do_init: consumed > quota
    ("quota over 9223372036854775808 bytes", "", "Value too large for defined data type"),  # past S64_MAX
    ("quota 5 gbytes", "", "unknown byte unit 'gbytes'"),  # data_unit_parse
    ('quota name "nope"', "", "no quota 'nope' in table inet t"),
    ("", "  quota q { 1 kbytes used 2 kbytes }", "Invalid argument"),
])
def test_quotas_the_kernel_or_nft_refuse_are_located_errors(text, objects, message):
    with pytest.raises(RulesetError, match=re.escape(message)) as err:
        ruleset(f"  {text}", objects)
    assert err.value.file == "quota.nft" and err.value.line in (2, 5)


def test_conform_limit_quotas_through_the_stack():
    """topologies/conform-limit.toml's quotas: the named one passes three 1000-byte packets of six (the third
    makes it exactly 3000 bytes), `quota over 1000 bytes used 500 bytes drop` one 500-byte packet of five."""
    sim = Simulation(load_topology(TOPOLOGIES / "conform-limit.toml"))
    sim.run()
    got = {t["name"]: t["directions"]["original"]["delivered"] for t in build_report(sim)["traffic"]}
    assert (got["udp-quota"], got["udp-quota-over"]) == (3, 1)
    assert sim.kernel.netns["r"].nft.quotas_consumed[("inet", "filter", "q5205")] == 6000


def test_a_quota_object_as_nft_lists_it():
    # `nft list ruleset` (1.0.6) writes an object's comment first, each on its own line
    rs = parse_ruleset('table inet t {\n\tquota q1 {\n\t\tover 10 kbytes used 3 kbytes\n\t}\n\n'
                       '\tquota q2 {\n\t\tcomment "cap"\n\t\t5 mbytes\n\t}\n}\n')
    assert dict(rs.tables[0].quotas) == {"q1": QuotaDef("q1", 10240, True, 3072), "q2": QuotaDef("q2", 5 << 20)}


@pytest.mark.parametrize("body", ["", "1 kbytes; 2 kbytes", 'comment "x"'])
def test_a_quota_object_has_exactly_one_amount(body):
    with pytest.raises(RulesetError, match="quota q has [02] amounts"):
        parse_ruleset(f"table inet t {{ quota q {{ {body} }} }}", file="quota.nft")


def test_the_run_report_shows_named_quotas_only_where_there_are_some():
    sim = Simulation(load_topology(TOPOLOGIES / "conform-limit.toml"))
    sim.run()
    report = build_report(sim)
    # six 1000-byte packets reached the rule naming q5205: all are consumed, three of them past the quota
    assert report["quotas"] == {"r": {"inet filter q5205": {"quota": 3000, "consumed": 6000, "over": False,
                                                            "exceeded": True}}}
    plain = Simulation(load_topology(TOPOLOGIES / "conform-forward.toml"))
    plain.run()
    assert "quotas" not in build_report(plain)
