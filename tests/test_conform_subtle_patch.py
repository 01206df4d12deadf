"""A patch counts cannot see: tests/data/patches/ipip-outer-ttl.patch on Debian sid's 7.2.13.

nf_flow_tunnel_ipip_push (net/netfilter/nf_flow_table_ip.c) gives the pushed outer IPv4 header the inner
packet's TTL; the test patch raises it to the route's hop limit (64 instead of 63 for a forwarded packet).
The remote end decapsulates the same packets, so the socat mode's counts agree with flowsim, while the
frame-exact mode (--frames) reports the first fast-path frame on the underlay veth, at the TTL byte.

The replay of a saved patched ``--frames`` boot needs no qemu; the real runs are ``slow`` (root, the cached
build root of tests/test_conform_patch.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from scapy.layers.inet import IP, TCP
from scapy.layers.l2 import Ether

from flowsim.conform.frames import LINKTYPE_ETHERNET, first_difference, first_real_difference
from tests.realkernel import patched_boot

ROOT = Path(__file__).resolve().parent.parent
TOPO = str(ROOT / "topologies" / "conform-ipip-listed.toml")
PATCH = str(ROOT / "tests" / "data" / "patches" / "ipip-outer-ttl.patch")
SAVED = ROOT / "tests" / "data" / "conform" / "frames-ipip-listed-outer-ttl-debian-sid.log.gz"
TTL_BYTE = 14 + 8   # Ethernet header, then the outer IPv4 header's TTL


def _ipip(outer_ttl: int, ident: int) -> bytes:
    return bytes(Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
                 / IP(src="198.51.100.1", dst="198.51.100.2", proto=4, ttl=outer_ttl, id=ident, flags="DF")
                 / IP(src="192.0.2.2", dst="203.0.113.130", ttl=63) / TCP(sport=40100, dport=5201) / (b"\0" * 20))


def test_first_real_difference_skips_the_random_outer_id():
    """The outer ID (kernel-random, __ip_select_ident) comes before the TTL: the report points at the TTL."""
    kernel, sim = _ipip(64, 0x3C4D), _ipip(63, 1)
    assert first_difference(kernel, sim) == 14 + 4          # the ID
    assert first_real_difference(kernel, sim, LINKTYPE_ETHERNET) == TTL_BYTE
    # only the random fields differ: the plain first difference
    same_ttl = _ipip(63, 7)
    assert first_real_difference(same_ttl, sim, LINKTYPE_ETHERNET) == first_difference(same_ttl, sim) == 14 + 5


def _replay():
    from flowsim.conform.harness import run_conformance

    return run_conformance([TOPO], "debian-sid", frames=True, max_packets=10, results=str(SAVED))


def test_saved_patched_frames_boot_shows_the_ttl():
    """The patched kernel's --frames boot (saved): every frame count and flowtable verdict agrees; the bytes of
    the underlay veth differ from the first fast-path frame on, at the outer TTL (kernel 64, flowsim 63)."""
    result = _replay()
    differs = [f for f in result.facts if f.status == "differs"]
    assert {(f.subject, f.fact) for f in differs} == {("r/veth1 out", "bytes"), ("ns2/eth0 in", "bytes")}
    assert all(f.status == "agrees" for f in result.facts if f.fact in ("frames", "flowtable verdicts"))
    note = differs[0].note
    assert f"frame 3, byte {TTL_BYTE} (kernel-random tunnel fields before it not counted)" in note
    kernel_dump = note.split("flowsim:")[0]
    assert "0010  03 fc" in kernel_dump and " 40 04 " in kernel_dump.splitlines()[3]   # TTL 64, protocol 4


def _run(frames: bool):
    from flowsim.conform.harness import run_conformance

    # socat mode plays the file's traffic (40/30 and 30/30 packets): with 10 the UDP reply races the flow's
    # creation differently on the kernel and in flowsim (a timing artefact of the cap, not the patch)
    return patched_boot(run_conformance, [TOPO], "debian-sid", frames=frames, max_packets=10 if frames else None,
                        patches=[PATCH])


@pytest.mark.slow
def test_outer_ttl_patch_counts_agree_frames_differ():
    """Two boots of the patched kernel: socat mode, every fact agrees; --frames, the TTL byte differs."""
    from flowsim.conform.compare import format_facts

    socat = _run(frames=False)
    assert socat.patch is not None and socat.patch["modules"] == ["net/netfilter/nf_flow_table.ko"]
    problems = [f for f in socat.facts if f.status not in ("agrees", "known")]
    assert not problems, format_facts(problems)
    assert any(f.fact.endswith("offloaded (flow created)") and f.kernel is True for f in socat.facts)
    frames = _run(frames=True)
    differs = [f for f in frames.facts if f.status == "differs"]
    assert differs and all(f.fact == "bytes" for f in differs), format_facts(frames.facts)
    assert any(f.subject == "r/veth1 out" and f"byte {TTL_BYTE}" in f.note for f in differs), format_facts(differs)
