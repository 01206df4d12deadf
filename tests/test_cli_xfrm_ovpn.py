"""``flowsim xfrm`` and ``flowsim ovpn``: text and JSON reports, pcaps tcpdump can read, one-line errors."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from flowsim.cli import main


def run(capsys, *argv):
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def tcpdump_count(pcap, expr: str) -> int:
    exe = shutil.which("tcpdump")
    assert exe, "tcpdump is required by these tests: apt-get install tcpdump (.ci/run installs it)"
    out = subprocess.run([exe, "-r", str(pcap), "-nn", expr], capture_output=True, text=True, check=True)
    return sum(1 for line in out.stdout.splitlines() if line.strip())


# --- flowsim xfrm ---------------------------------------------------------------------------

def test_xfrm_json_v2_ip6tnl(capsys, tmp_path):
    """--json: one object with the decision, layout and receiver counters; the pcap matches the patch's filter."""
    pcap = tmp_path / "v2.pcap"
    rc, out, _ = run(capsys, "xfrm", "--variant", "v2", "--inner", "ip6tnl", "--mode", "transport",
                     "--esp-offload-module", "--segments", "6", "--pcap", str(pcap), "--json")
    assert rc == 0
    obj = json.loads(out)
    assert obj["decision"]["outcome"] == "ESPSW-X" and obj["decision"]["row"] == 8
    assert obj["layout"]["kind"] == "malformed" and obj["malformed"] == 6
    assert obj["receiver"]["XfrmInStateProtoError"] == 6 and obj["receiver"]["decrypted"] == 0
    assert obj["tcpdump_filter"] == "ip6 proto 50 and ip6[56:2] = 0x4500 and ip6[60:4] = 0x1001"
    assert tcpdump_count(pcap, obj["tcpdump_filter"]) == 6
    assert {f["esp_offset"] for f in obj["frames"]} == {60}


def test_xfrm_text_v3(capsys, tmp_path):
    """Default text output names the variant, outcome, layout, chain and receiver result."""
    pcap = tmp_path / "v3.pcap"
    rc, out, _ = run(capsys, "xfrm", "--variant", "v3", "--inner", "ipip", "--mode", "transport",
                     "--esp-offload-module", "--segments", "4", "--pcap", str(pcap))
    assert rc == 0
    assert "variant v3" in out and "-> SWGSO" in out and "CORRECT" in out
    assert "xfrm_output_gso → skb_gso_segment → inet_gso_segment → ipip_gso_segment" in out
    assert "decrypted 4/4" in out and "XfrmInStateProtoError 0" in out
    assert tcpdump_count(pcap, "ip proto 50 and ip[36:2] = 0x4500 and ip[40:4] = 0x1001") == 0


@pytest.mark.parametrize(("argv", "needle"), [
    (["--variant", "v0", "--inner", "vxlan", "--mode", "tunnel", "--esp-offload-module"], "KERNEL-BUG"),
    (["--variant", "v2", "--inner", "geneve", "--mode", "transport", "--esp-offload-module"], "CORRECT"),
    (["--variant", "v2", "--inner", "ipip", "--mode", "transport", "--offload-dev"], "-> HW"),
    (["--variant", "v2", "--inner", "ipip", "--mode", "transport", "--offload-dev", "--no-hw-gso"], "MALFORMED"),
    (["--variant", "v3", "--inner", "none", "--mode", "tunnel", "--family", "6"], "-> SWGSO"),
])
def test_xfrm_other_cases(capsys, argv, needle):
    """Other inner kinds, offload devices and families run and report their outcome."""
    rc, out, _ = run(capsys, "xfrm", *argv)
    assert rc == 0 and needle in out


# --- flowsim ovpn ---------------------------------------------------------------------------

def test_ovpn_json(capsys, tmp_path):
    """--json: paths, batches, stats, invariants, both paths' costs and the quoted cover letter."""
    pcap = tmp_path / "o.pcap"
    rc, out, _ = run(capsys, "ovpn", "--mode", "udp-gso", "--crypto", "sync", "--gso-size", "1364",
                     "--segments", "16", "--pcap", str(pcap), "--json")
    assert rc == 0
    obj = json.loads(out)
    assert obj["paths"] == ["udp-gso"] and obj["batches"][0]["first_id"] == 1 and obj["batches"][0]["count"] == 16
    assert all(obj["invariants"].values()) and obj["receiver"]["accepted"] == 16
    assert obj["cost_comparison"]["per-record"]["lower_xmit_calls"] == 16
    assert obj["cost_comparison"]["udp-gso"]["lower_xmit_calls"] == 1
    assert "16.932" in obj["cover_letter"]["throughput"]
    assert tcpdump_count(pcap, "udp and dst port 1194") == 16


def test_ovpn_text_async_fallback(capsys):
    """Text output shows the fallback reason, the invariants and the cover letter as a quotation."""
    rc, out, _ = run(capsys, "ovpn", "--mode", "udp-gso", "--crypto", "async", "--segments", "8")
    assert rc == 0
    assert "fallback  asynchronous crypto" in out and "ok   nonces_unique_per_key" in out
    assert "quoted facts, not computed" in out and "13.431 Gbit/s" in out


def test_ovpn_exhaustion_reported(capsys):
    """--first-packet-id near 2^32−1 shows the key killed and the invariants still hold."""
    rc, out, _ = run(capsys, "ovpn", "--mode", "per-record", "--segments", "8", "--first-packet-id", "0xfffffffd")
    assert rc == 0 and "key DEAD" in out and "killed" in out and "FAIL" not in out


# --- errors ---------------------------------------------------------------------------------

BAD = [
    ["xfrm", "--variant", "v9"],
    ["xfrm", "--inner", "gre"],
    ["xfrm", "--mode", "beet"],
    ["xfrm", "--segments", "many"],
    ["xfrm", "--segments", "1"],
    ["xfrm", "--inner", "ipip", "--family", "6"],
    ["xfrm", "--no-hw-gso"],
    ["xfrm", "--key", "zz"],
    ["xfrm", "--pcap", "/nonexistent/dir/x.pcap"],
    ["ovpn", "--mode", "batch"],
    ["ovpn", "--crypto", "maybe"],
    ["ovpn", "--gso-size", "9000"],
    ["ovpn", "--segments", "0"],
    ["ovpn", "--ll-max-header", "64"],
    ["ovpn", "--fail-segment", "99"],
    ["ovpn", "--cipher", "rot13"],
]


@pytest.mark.parametrize("argv", BAD, ids=[" ".join(a) for a in BAD])
def test_bad_input_one_line_exit_2(capsys, argv):
    """Bad input prints exactly one `flowsim: error:` line and exits 2, never a traceback."""
    rc, out, err = run(capsys, *argv)
    assert rc == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("flowsim: error: ") and "Traceback" not in err


def test_console_entry_point_error():
    """`python -m flowsim xfrm --variant nope` from a shell: exit 2, one line on stderr."""
    proc = subprocess.run([sys.executable, "-m", "flowsim", "xfrm", "--variant", "nope"],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "unknown xfrm variant" in proc.stderr
