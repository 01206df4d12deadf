"""End to end: boot Debian's 6.12 kernel under qemu (TCG) and compare a few scenarios with flowsim.

One boot runs four scenarios batched into the guest: plain IPv4/IPv6 TCP and
UDP forwarding, an ipip tunnel whose device is not in the flowtable (the
decapsulated direction goes through forward), FIN teardown next to a
connection left open, and masquerade plus DNAT.  About a minute on a warm
cache (kernel package and initramfs cached in ~/.cache/flowsim/conform);
the first run also installs the Debian tools and downloads the kernel.

The test fails when the kernel and flowsim disagree.  Without root (the
tools cannot be installed) or without a package mirror it is skipped with
the reason — except in CI (``CI=true``), where missing set-up is a failure.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from flowsim.conform.compare import format_facts
from flowsim.conform.harness import ConformSetupError, run_conformance

ROOT = Path(__file__).resolve().parent.parent
SUBSET = ["conform-forward", "conform-ipip", "conform-fin", "conform-nat"]


@pytest.mark.slow
def test_real_kernel_agrees_with_flowsim():
    """Debian 6.12 in qemu and flowsim's linux-6.12 profile agree on every compared fact of the subset."""
    paths = [str(ROOT / "topologies" / f"{name}.toml") for name in SUBSET]
    try:
        result = run_conformance(paths, "debian-6.12")
    except ConformSetupError as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"conformance set-up failed in CI: {exc}")
        pytest.skip(f"conformance set-up not possible here: {exc}")
    problems = [f for f in result.facts if f.status not in ("agrees", "known")]
    timings = ", ".join(f"{k} {v:.1f} s" for k, v in result.timings.items())
    assert not problems, f"kernel {result.release} vs flowsim ({timings}):\n" + format_facts(problems)
    assert [s.plan.name for s in result.scenarios] == SUBSET
    assert all(s.observation.conns for s in result.scenarios)


@pytest.mark.slow
def test_real_kernel_frames_agree_with_flowsim():
    """``--frames`` on conform-forward: flowsim's 372 frames injected one by one into Debian 6.12; every frame
    on every device and direction byte-identical, every flowtable verdict the same (about a minute)."""
    path = str(ROOT / "topologies" / "conform-forward.toml")
    try:
        result = run_conformance([path], "debian-6.12", frames=True, max_packets=1000)   # above the default cap
    except ConformSetupError as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"conformance set-up failed in CI: {exc}")
        pytest.skip(f"conformance set-up not possible here: {exc}")
    problems = [f for f in result.facts if f.status != "agrees"]
    timings = ", ".join(f"{k} {v:.1f} s" for k, v in result.timings.items())
    assert not problems, f"kernel {result.release} vs flowsim ({timings}):\n" + format_facts(problems)
    assert result.frames is not None and result.frames["injected"] == 372
    assert sum(1 for f in result.facts if f.fact == "bytes") == 8          # 4 devices, 2 directions
    assert sum(1 for f in result.facts if f.fact == "flowtable verdicts") == 2


@pytest.mark.slow
def test_cover_letter_ip6ip6_rx_on_linux_72():
    """The IP6IP6 rx router of the cover letter on Debian sid's 7.2 (the first real kernel with
    ``ip6_tnl_fill_forward_path``), against profile linux-7.2: offloaded both ways, every fact agreeing.
    Traffic capped at 100 packets per direction (the report says so) to keep the boot near a minute."""
    path = str(ROOT / "topologies" / "ip6ip6-rx.toml")
    try:
        result = run_conformance([path], "debian-sid", max_packets=100)
    except ConformSetupError as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"conformance set-up failed in CI: {exc}")
        pytest.skip(f"conformance set-up not possible here: {exc}")
    assert result.profile == "linux-7.2" and result.release.startswith("7.2.")
    problems = [f for f in result.facts if f.status not in ("agrees", "known")]
    timings = ", ".join(f"{k} {v:.1f} s" for k, v in result.timings.items())
    assert not problems, f"kernel {result.release} vs flowsim ({timings}):\n" + format_facts(problems)
    fast = {(f.subject, f.fact): int(f.kernel) for f in result.facts if f.fact.startswith("fast path")}
    # offloaded: the TCP connection out of the tunnel both ways, the UDP stream into it (it has no replies)
    assert fast[("tcp-rx-from-tunnel", "fast path original")] > 0 and fast[("tcp-rx-from-tunnel", "fast path reply")] > 0
    assert fast[("udp-tx-into-tunnel", "fast path original")] > 0, fast
