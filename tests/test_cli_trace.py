"""`flowsim trace`: chosen packets hop by hop, flowtable steps included (issue 6)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from flowsim.cli import main

TOPO = Path(__file__).resolve().parent.parent / "topologies"


def test_fast_path_packet_never_reaches_forward(capsys):
    """A data packet of an offloaded flow: lookup hit, fast-path xmit, no forward-chain step
    (nf_flow_offload_ip_hook)."""
    assert main(["trace", str(TOPO / "selftest.toml"), "--match", "traffic=tcp-12345,kind=data", "--limit", "1",
                 "--json"]) == 0
    (pkt,) = json.loads(capsys.readouterr().out)["packets"]
    whats = [s["what"] for s in pkt["steps"]]
    assert any(w.startswith("lookup hit") for w in whats) and any(w.startswith("fast path") for w in whats)
    assert not any(s["where"].endswith("forward") for s in pkt["steps"])
    assert pkt["state"] == "delivered"


def test_first_packet_goes_through_forward_with_its_rule(capsys):
    """The SYN misses the flowtable and crosses the forward chain, where `flow add` breaks (nft_flow_offload_eval)."""
    assert main(["trace", str(TOPO / "selftest.toml"), "--traffic", "tcp-12345", "--packet", "0", "--hex"]) == 0
    out = capsys.readouterr().out
    assert "no-flow-entry" in out and "flow add @f1 failed" in out and " | " in out


def test_bad_match_is_one_error_line():
    """An unknown field: one error line, exit 2."""
    proc = subprocess.run([sys.executable, "-m", "flowsim", "trace", str(TOPO / "selftest.toml"), "--match", "color=red"],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stderr.startswith("flowsim: error:") and "Traceback" not in proc.stderr


def test_json_details_are_typed(capsys):
    """Issue 18 item 1: trace details are JSON values, never str() of a Python object: no VLAN is null (not
    "None"), lengths and encaplimit are integers (or null), IPv6 endpoints read [addr]:port."""
    assert main(["trace", str(TOPO / "ip6ip6-rx-encaplimit.toml"), "--profile", "linux-6.12", "--packet", "0",
                 "--json"]) == 0
    (pkt,) = json.loads(capsys.readouterr().out)["packets"]
    details = [s["details"] for s in pkt["steps"]]
    assert not [d for d in details if "None" in d.values()]
    rx = [d for s, d in zip(pkt["steps"], details) if s["what"] == "rx"]
    assert rx and all(d["vlan"] is None and isinstance(d["len"], int) for d in rx)
    encap = [d for s, d in zip(pkt["steps"], details) if s["what"] == "encapsulated"]
    assert encap and all(isinstance(d["encaplimit"], int) or d["encaplimit"] is None for d in encap)
    tuples = [d["detail"] for d in details if "detail" in d and "ipv6 " in d["detail"]]
    assert all("]:" in t for t in tuples)
