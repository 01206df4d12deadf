"""``flowsim conform --patch SERIES --compare-stock``: the stock and the patched kernel side by side.

The pairing and rendering are checked on hand-made facts and on two saved results channels of a real
run (Debian sid 7.2.13, ip6ip6-rx --max-packets 100, stock and with tests/data/patches/ipv6-hook-accept.patch);
no qemu.  The real two-boot run is ``slow`` and heavy (two guests): it runs under ``make conform``
(FLOWSIM_CONFORM_HEAVY=1) and is skipped with that reason elsewhere.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import jsonschema
import pytest

from flowsim.conform.ab import CHANGES, StockComparison, beyond_tolerance, pair_rows
from flowsim.conform.compare import Fact
from flowsim.conform.harness import ConformResult
from flowsim.schemas import load
from tests.realkernel import patched_boot

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "conform"
PATCHES = ROOT / "tests" / "data" / "patches"
PATCH = {"series": ["ipv6-hook-accept.patch"], "patches": ["ipv6-hook-accept.patch: x"], "digest": "d",
         "modules": ["net/netfilter/nf_flow_table.ko"], "ignored": [],
         "label": "7.2.13+deb14-amd64 + ipv6-hook-accept.patch (1 module rebuilt)"}


def _fact(fact: str, kernel, sim, status: str, subject: str = "tcp", tolerance: str = "exact") -> Fact:
    return Fact("ip6ip6-rx", subject, fact, kernel, sim, tolerance, status)


TCP = "-1..+105 (TCP control + pure ACKs + retransmissions)"


class _Result(ConformResult):
    """A conformance result holding given facts (no scenario plan needed)."""

    @property
    def facts(self) -> list[Fact]:
        return self.given


def _result(facts: list[Fact], patch: dict | None = None, profile: str = "linux-7.2") -> ConformResult:
    r = _Result("debian-sid", "linux-image-7.2.13+deb14-amd64", "7.2.13-1", "7.2.13+deb14-amd64",
                profile, "2026-12-01", {"guest": 50.0}, [], patch=patch)
    r.given = facts
    return r


STOCK = [_fact("fast path original", 98, 98, "agrees"), _fact("slow path original", 4, 4, "agrees"),
         _fact("delivered original", 103, 102, "agrees", tolerance=TCP),
         _fact("offloaded (flow created)", True, True, "agrees"),
         _fact("offloaded (flow created)", True, True, "agrees", "udp")]
PATCHED = [_fact("fast path original", 0, 98, "differs"), _fact("slow path original", 102, 4, "differs"),
           _fact("delivered original", 104, 102, "agrees", tolerance=TCP),
           _fact("offloaded (flow created)", True, True, "agrees"),
           _fact("offloaded (flow created)", False, False, "agrees", "udp"),   # as a --set predicted
           _fact("packets", 3, 3, "agrees", "router rule flow add")]


def test_rows_pair_by_fact_and_put_differences_first():
    rows = pair_rows(STOCK, PATCHED)
    assert [(r.fact, r.change) for r in rows] == [
        ("fast path original", "verdict"), ("slow path original", "verdict"),
        ("packets", "verdict"),                     # on the patched side only
        ("offloaded (flow created)", "value"),      # udp: exact, yes -> no
        ("delivered original", "noise"),            # within the TCP band
        ("offloaded (flow created)", "same")]
    first = rows[0]
    assert (first.stock, first.patched, first.sim_stock, first.sim_patched) == (98, 0, 98, 98)
    assert (first.status_stock, first.status_patched) == ("agrees", "differs")
    assert rows[2].stock is None and rows[2].status_stock == "-"
    assert tuple(CHANGES) == ("verdict", "value", "noise", "same")
    assert beyond_tolerance(100, 107, "-1..+5 (x)") and not beyond_tolerance(100, 106, "-1..+5 (x)")
    assert beyond_tolerance("OFFLOAD", "UNREPLIED OFFLOAD", "exact") and not beyond_tolerance(3, 3, "exact")


def test_text_side_by_side_and_problems_only():
    cmp = StockComparison(_result(STOCK), _result(PATCHED, PATCH))
    text = cmp.text()
    lines = text.splitlines()
    assert lines[0].startswith("stock   7.2.13+deb14-amd64 (linux-image-7.2.13+deb14-amd64 7.2.13-1) vs flowsim")
    assert lines[1] == ("patched 7.2.13+deb14-amd64 + ipv6-hook-accept.patch (1 module rebuilt) "
                        "vs flowsim profile linux-7.2")
    header = next(ln for ln in lines if ln.startswith("scenario"))
    assert header.split() == ["scenario", "subject", "fact", "stock", "patched", "flowsim", "tolerance", "verdicts"]
    row = next(ln for ln in lines if "fast path original" in ln)
    assert "** agrees -> differs" in row and row.split()[5:8] == ["98", "0", "98"]
    assert lines[-1] == ("3 facts change their verdict with the patch (**), 1 their value beyond the tolerance (*), "
                         "1 within it (~), 1 are the same on both kernels")
    # --problems: the rows the patch changes only
    short = cmp.text(all_facts=False)
    assert "~  agrees" in short and "*  agrees" in short and short.count("offloaded (flow created)") == 1
    assert cmp.status == 1
    assert cmp.summary() == {"verdict": 3, "value": 1, "noise": 1, "same": 1}


def test_two_flowsim_columns_when_set_changes_the_patched_side():
    cmp = StockComparison(_result(STOCK), _result(PATCHED, PATCH, "linux-7.2 --set tunnel_push_dst=opposite"))
    header = next(ln for ln in cmp.text().splitlines() if ln.startswith("scenario"))
    assert "flowsim stock" in header and "flowsim patched" in header


def test_json_validates_and_holds_both_results():
    cmp = StockComparison(_result(STOCK), _result(PATCHED, PATCH))
    data = json.loads(json.dumps(cmp.to_json(), default=str))
    jsonschema.Draft202012Validator(load("conform")).validate(data)
    assert data["compare_stock"]["summary"] == {"verdict": 3, "value": 1, "noise": 1, "same": 1}
    assert data["patched"]["kernel"]["label"] == PATCH["label"]
    assert data["compare_stock"]["rows"][0]["change"] == "verdict"
    jsonschema.Draft202012Validator(load("conform")).validate([data, data])


def _saved(name: str) -> ConformResult:
    from flowsim.conform.harness import run_conformance

    return run_conformance([str(ROOT / "topologies" / "ip6ip6-rx.toml")], "debian-sid", max_packets=100,
                           results=str(DATA / name))


def test_saved_sid_runs_side_by_side():
    """Two boots of Debian sid 7.2.13 saved from ``--compare-stock`` with ipv6-hook-accept.patch: every fast-path
    fact agrees with flowsim on the stock kernel and is 0 on the patched one, and these rows come first."""
    stock = _saved("ab-ip6ip6-rx-stock-debian-sid.log.gz")
    patched = _saved("ab-ip6ip6-rx-hook-accept-debian-sid.log.gz")
    cmp = StockComparison(stock, patched)
    rows = cmp.rows
    fast = [r for r in rows if r.fact.startswith("fast path")]
    assert len(fast) == 4 and all(r.patched == 0 for r in fast)
    forward = [r for r in fast if r.fact == "fast path original"]   # both connections' data direction
    assert len(forward) == 2 and all(r.change == "verdict" and r.status_stock == "agrees"
                                     and r.status_patched == "differs" and r.stock > 90 for r in forward)
    ranks = [CHANGES.index(r.change) for r in rows]
    assert ranks == sorted(ranks) and ranks[0] == 0
    assert any(r.change == "same" and r.fact.endswith("offloaded (flow created)") for r in rows)
    text = cmp.text(all_facts=False)
    assert "offloaded (flow created)" not in text and text.count("**") >= 3


def test_cli_refuses_compare_stock_without_patch(capsys):
    from flowsim.cli import main

    assert main(["conform", str(ROOT / "topologies" / "ip6ip6-rx.toml"), "--kernel", "debian-sid",
                 "--compare-stock"]) == 2
    assert "--compare-stock needs --patch SERIES" in capsys.readouterr().err
    assert main(["conform", str(ROOT / "topologies" / "ip6ip6-rx.toml"), "--kernel", "debian-sid",
                 "--compare-stock", "--patch", str(PATCHES / "comment-only.patch"),
                 "--results", str(DATA / "results-debian-6.12.log.gz")]) == 2
    assert "takes neither --results nor --update-doc" in capsys.readouterr().err


def test_notes_of_changed_rows_under_the_table():
    """--frames: the first differing frame's note (hexdumps) of a row whose verdict changed is printed below."""
    stock = [Fact("s", "r/veth1 out", "bytes", "24 frames identical", "24 frames identical", "exact", "agrees")]
    patched = [Fact("s", "r/veth1 out", "bytes", "frame 3: Ether / IP / IP / TCP", "frame 3: Ether / IP / IP / TCP",
                    "exact", "differs", "first difference: frame 3, byte 22\nkernel: Ether / IP\n0010  03 fc <")]
    cmp = StockComparison(_result(stock), _result(patched, PATCH))
    text = cmp.text()
    assert "s r/veth1 out bytes, patched kernel:\n  first difference: frame 3, byte 22\n  kernel: Ether / IP\n" in text
    assert cmp.rows[0].note_patched.startswith("first difference") and cmp.rows[0].note_stock == ""


HEAVY = pytest.mark.skipif(os.environ.get("FLOWSIM_CONFORM_HEAVY") != "1",
                           reason="two guests (patched and stock): run by make conform (FLOWSIM_CONFORM_HEAVY=1)")


def _compare_stock(topology: Path, patch: str, **kw):
    from flowsim.conform.ab import run_compare_stock

    return patched_boot(run_compare_stock, [str(topology)], "debian-sid", patches=[str(PATCHES / patch)], **kw)


@pytest.mark.slow
@HEAVY
def test_compare_stock_on_sid_shows_the_disabled_fast_path_first():
    """Debian sid 7.2.13, ip6ip6-rx, ipv6-hook-accept.patch then stock: both data directions' fast-path rows
    change their verdict (agree on stock, 0 on the patched kernel) and come first."""
    cmp = _compare_stock(ROOT / "topologies" / "ip6ip6-rx.toml", "ipv6-hook-accept.patch", max_packets=100)
    forward = [r for r in cmp.rows if r.fact == "fast path original"]
    assert len(forward) == 2, cmp.text()
    assert all(r.change == "verdict" and r.patched == 0 and r.status_stock == "agrees" for r in forward), cmp.text()
    assert cmp.rows[0].change == "verdict"


def test_saved_real_patch_review_scenario_as_the_switch_predicts():
    """Debian sid 7.2.13 with 'net: ip6_tunnel: use tunnel parameters for fill_forward_path route lookup' on its
    review scenario (tun0 bound to eth2, which the flowtable does not list), saved: both connections offloaded on
    the stock kernel and not on the patched one, and flowsim with ip6tnl_resolver_lookup=tunnel-flow agrees."""
    from flowsim.conform.harness import run_conformance

    topo = [str(PATCHES / "ip6-tunnel-fill-forward-path-lookup.toml")]
    stock = run_conformance(topo, "debian-sid", results=str(DATA / "ab-tnl-lookup-link-stock-debian-sid.log.gz"))
    patched = run_conformance(topo, "debian-sid", settings=["ip6tnl_resolver_lookup=tunnel-flow"],
                              results=str(DATA / "ab-tnl-lookup-link-patched-debian-sid.log.gz"))
    cmp = StockComparison(stock, patched)
    offloaded = [r for r in cmp.rows if r.fact.endswith("offloaded (flow created)")]
    assert len(offloaded) == 2
    assert all((r.stock, r.patched, r.sim_stock, r.sim_patched, r.change) == (True, False, True, False, "value")
               and r.status_stock == r.status_patched == "agrees" for r in offloaded)
    assert cmp.summary()["verdict"] == 0
    assert all(r.status_patched == r.status_stock == "agrees" for r in cmp.rows if r.tolerance == "exact"), cmp.text()


@pytest.mark.slow
@HEAVY
def test_real_ip6_tunnel_patch_on_its_review_scenario():
    """Debian sid 7.2.13 with the net-next ip6_tunnel lookup patch (ip6_tunnel.ko rebuilt), then stock: offloaded
    on stock, not patched, and flowsim with ip6tnl_resolver_lookup=tunnel-flow agrees on every exact fact."""
    cmp = _compare_stock(PATCHES / "ip6-tunnel-fill-forward-path-lookup.toml", "ip6-tunnel-fill-forward-path-lookup.patch",
                         settings=["ip6tnl_resolver_lookup=tunnel-flow"])
    assert cmp.patched.patch is not None and cmp.patched.patch["modules"] == ["net/ipv6/ip6_tunnel.ko"]
    offloaded = [r for r in cmp.rows if r.fact.endswith("offloaded (flow created)")]
    assert len(offloaded) == 2 and all((r.stock, r.patched) == (True, False) for r in offloaded), cmp.text()
    assert all(r.status_patched == r.status_stock == "agrees" for r in cmp.rows if r.tolerance == "exact"), cmp.text()
