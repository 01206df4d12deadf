"""Benchmark: frames/s of the tuple builder vs scapy's dissection of the same frames.

Cases: IP6IP6 TCP and IPIP over 802.1Q, a few thousand distinct flows each.
Each case builds the skb from the frame (``skb_from_frame``, untagging the
VLAN) and runs the ``inet`` hook's parse (``flow_tuple_from_skb``): the work
the kernel does per packet before the table lookup.  The baseline is scapy's
``Ether(frame)`` dissection, measured in the same run on the same frames, so
the ratio holds on a shared, noisy machine.

Targets (issue 2): at least 40x scapy and at least 250k frames/s on one core.
Prints a table; the last line is one JSON object.
"""

from __future__ import annotations

import json
import sys
import time

from scapy.layers.inet import IP, TCP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Dot1Q, Ether

from flowsim.kernel.flowtable.tuple import flow_tuple_from_skb
from flowsim.kernel.skb import skb_from_frame
from flowsim.profiles import get_profile

FLOWS = 4096
TARGET_FPS = 250_000
TARGET_RATIO = 40


def ip6ip6_frames(n: int) -> list[bytes]:
    outer = IPv6(src="2001:db8:2::2", dst="2001:db8:2::1", nh=41)
    return [bytes(Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / outer / IPv6(src=f"2001:db8:3::{i + 1:x}", dst="2001:db8:1::1")
                  / TCP(sport=10000 + i, dport=443, flags="A") / (b"x" * 64)) for i in range(n)]


def ipip_vlan_frames(n: int) -> list[bytes]:
    outer = IP(src="192.168.20.2", dst="192.168.20.1", proto=4)
    return [bytes(Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / Dot1Q(vlan=10) / outer / IP(src=f"10.{i >> 8}.{i & 255}.2", dst="10.0.1.99")
                  / TCP(sport=10000 + i, dport=12345, flags="A") / (b"x" * 64)) for i in range(n)]


def best_rate(fn, frames, repeat: int) -> float:
    """Frames per second of the fastest of *repeat* passes."""
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn(frames)
        best = min(best, time.perf_counter() - t0)
    return len(frames) / best


def flowsim_pass(frames):
    """Device receive (frame → skb, VLAN untag) and the hook's parse."""
    profile = get_profile("linux-7.1.5")
    for f in frames:
        r = flow_tuple_from_skb(skb_from_frame(f, iif=2), iifidx=2, profile=profile)
        if r.tuple is None:
            raise AssertionError(r.reason)


def builder_pass(skbs):
    """The tuple builder alone, on the skbs the hook receives (parsing leaves a linear skb unchanged)."""
    profile = get_profile("linux-7.1.5")
    for skb in skbs:
        if flow_tuple_from_skb(skb, iifidx=2, profile=profile).tuple is None:
            raise AssertionError


def scapy_pass(frames):
    for f in frames:
        Ether(f)


def main() -> int:
    results = {}
    print(f"targets: tuple builder >= {TARGET_FPS:,} frames/s and >= {TARGET_RATIO}x scapy's dissection")
    print(f"{'case':<16}{'builder/s':>12}{'rx+builder/s':>14}{'scapy/s':>10}{'ratio':>8}{'rx+ ratio':>10}")
    for name, build in (("ip6ip6_tcp", ip6ip6_frames), ("ipip_vlan_tcp", ipip_vlan_frames)):
        frames = build(FLOWS)
        skbs = [skb_from_frame(f, iif=2) for f in frames]
        fps = best_rate(builder_pass, skbs, 7)
        rx_fps = best_rate(flowsim_pass, frames, 5)
        sfps = best_rate(scapy_pass, frames[:1024], 3)
        results[name] = {"frames_per_s": round(fps), "ratio_vs_scapy": round(fps / sfps, 1),
                         "rx_and_builder_frames_per_s": round(rx_fps),
                         "rx_and_builder_ratio_vs_scapy": round(rx_fps / sfps, 1),
                         "meets_targets": fps >= TARGET_FPS and fps / sfps >= TARGET_RATIO}
        print(f"{name:<16}{fps:>12,.0f}{rx_fps:>14,.0f}{sfps:>10,.0f}{fps / sfps:>8.1f}{rx_fps / sfps:>10.1f}")
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
