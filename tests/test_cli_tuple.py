"""``flowsim tuple``: one line per frame, the JSON contract, and one-line errors (DESIGN.md "Contracts")."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from scapy.layers.inet import IP, TCP
from scapy.layers.l2 import Dot1Q, Ether
from scapy.utils import wrpcap

from flowsim.cli import main

CORPUS = Path(__file__).parent / "data" / "corpus" / "suricata-verify"


def run(capsys, *argv):
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def test_json_contract(capsys):
    """--json: one object per frame with index, result, reason and the tuple's fields as text/integers."""
    rc, out, _ = run(capsys, "tuple", str(CORPUS / "bug-4571-03__ipv6_over_ipv6.pcap"), "--json", "--iif", "4")
    assert rc == 0
    (obj,) = [json.loads(line) for line in out.splitlines()]
    assert obj["index"] == 1 and obj["result"] == "tuple" and obj["reason"] is None
    t = obj["tuple"]
    assert set(t) == {"src", "dst", "sport", "dport", "l3proto", "l4proto", "iifidx", "encap", "tun"}
    assert (t["l3proto"], t["l4proto"], t["iifidx"], t["sport"]) == (10, 6, 4, 80)
    assert t["tun"] == {"src": "2001:db8:85a3::8a2e:370:7334", "dst": "2001:db8:85a3::8a2e:370:7335", "l3_proto": 41}


def test_slowpath_line_names_reason(capsys):
    """A slow-path frame prints `slowpath` and its reason id."""
    rc, out, _ = run(capsys, "tuple", str(CORPUS / "eve-flow-esp__input.pcap"))
    assert rc == 0 and out.splitlines()[0].split()[1:3] == ["slowpath", "l4proto-unsupported:"]


def test_vlan_offload_flag(tmp_path, capsys):
    """--no-rx-vlan-offload: __netif_receive_skb_core still untags (skb_vlan_untag), so the hook sees the same skb."""
    path = tmp_path / "v.pcap"
    wrpcap(str(path), [Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / Dot1Q(vlan=7) / IP(src="1.1.1.1", dst="2.2.2.2") / TCP()])
    outs = [json.loads(run(capsys, "tuple", str(path), "--json", *flag)[1]) for flag in ([], ["--no-rx-vlan-offload"])]
    assert outs[0]["tuple"] == outs[1]["tuple"] and outs[0]["tuple"]["encap"] == [{"id": 7, "proto": 0x8100}]
    assert (outs[0]["offset"], outs[1]["offset"]) == (0, 0)


def test_profile_and_set(capsys):
    """--profile and --set select the kernel behaviour."""
    pcap = str(CORPUS / "bug-4571-01__ipv4_over_ipv4.pcap")
    assert "l4proto-unsupported" in run(capsys, "tuple", pcap, "--profile", "linux-6.18")[1]
    assert "l4proto-unsupported" in run(capsys, "tuple", pcap, "--set", "ipip_rx=0")[1]


@pytest.mark.parametrize("argv,match", [
    (["tuple", "README.md"], "not a pcap or pcapng capture"),
    (["tuple", "/nonexistent.pcap"], "cannot open"),
    (["tuple", str(CORPUS / "eve-flow-esp__input.pcap"), "--profile", "linux-0"], "unknown profile"),
    (["tuple", str(CORPUS / "eve-flow-esp__input.pcap"), "--set", "x=1"], "unknown profile switch"),
])
def test_errors_are_one_line_exit_2(argv, match):
    """A bad file or option: one `flowsim: error:` line, exit status 2, no traceback."""
    proc = subprocess.run([sys.executable, "-m", "flowsim", *argv], capture_output=True, text=True,
                          cwd=Path(__file__).parent.parent)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("flowsim: error:") and match in proc.stderr
    assert "Traceback" not in proc.stderr


def test_json_addresses_of_both_families_with_the_same_leading_bytes(tmp_path, capsys):
    """--json caches address texts per family: 2001:db8:: after 32.1.13.184 (the same first four bytes, the
    rest zero) prints as IPv6, and the reverse order too (the writer once keyed the cache by bytes alone)."""
    from scapy.layers.inet6 import IPv6
    v4 = Ether() / IP(src="32.1.13.184", dst="10.0.0.2") / TCP(sport=1000, dport=80)
    v6 = Ether() / IPv6(src="2001:db8::", dst="2001:db8::2") / TCP(sport=1000, dport=80)
    for order in ([v4, v6], [v6, v4]):
        cap = tmp_path / "mixed.pcap"
        wrpcap(str(cap), order)
        rc, out, _ = run(capsys, "tuple", str(cap), "--json")
        assert rc == 0
        srcs = {json.loads(line)["tuple"]["src"] for line in out.splitlines()}
        assert srcs == {"32.1.13.184", "2001:db8::"}
