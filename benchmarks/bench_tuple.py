"""Benchmark: the flow tuple of each frame of a capture — flowsim against scapy, dpkt and a bare struct parse.

The frames: issue 16's mixed capture (benchmarks/mixed_capture.py: IPv4, QinQ, PPPoE, IPIP, IP6IP6,
IP6IP6 over VLAN, every frame its own port), read back from the pcap file, the same frames for every
side.  Each side turns a frame into (source, destination, ports, L4 protocol):

* ``struct``        the floor: a bare ``struct.unpack_from`` walk of the layouts, no check at all;
* ``flowsim``       ``flow_tuple_from_frame``: the flowtable hook's parse with every kernel check, in the
                    kernel's order (what ``flowsim tuple`` runs per frame);
* ``flowsim+json``  the same and the ``--json`` line, as ``flowsim tuple`` runs them (one parser for the
                    run, :meth:`_JsonWriter.extend` over its results): the command's per-frame work, reader aside;
* ``flowsim-skb``   ``skb_from_frame`` + ``flow_tuple_from_skb``: the simulator's path (an skb per frame);
* ``dpkt``          ``dpkt.ethernet.Ethernet`` and a walk to the innermost IP header (when installed:
                    ``pip install '.[bench]'``);
* ``scapy``         ``Ether(frame)`` and the same walk.

CPU time (``time.process_time``), the sides interleaved in every round, best of the rounds with the
spread (benchmarks/_bench.py).  Before timing, every side's ports and protocol are checked against
flowsim's on every frame.  The end-to-end command (``flowsim tuple CAPTURE --json`` as a user runs it,
start-up and reader included) is bench_cli's.  Prints the targets, a table; the last line is one JSON
object.
"""

from __future__ import annotations

import struct
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import mixed_capture  # noqa: E402
from _bench import interleave, last_line, targets, verdict  # noqa: E402

from flowsim.commands.tuple import _JsonWriter  # noqa: E402
from flowsim.kernel.capture import read_frames  # noqa: E402
from flowsim.kernel.flowtable.tuple import flow_tuple_from_frame, flow_tuple_from_skb, frame_parser  # noqa: E402
from flowsim.kernel.skb import skb_from_frame  # noqa: E402
from flowsim.profiles import get_profile  # noqa: E402

FRAMES = 30_000  # of the 100k capture (the layouts cycle, so every layout is 1/6 of them); scapy sets the pace
ROUNDS = 5
TARGET_FPS = 300_000  # flowsim tuple CAPTURE --json: frames per CPU-second (bench_cli measures the command)
TARGET_FLOOR_RATIO = 4.0  # "within 4x of the floor" (the floor: 1.1M/s)
BEFORE = {"cli_fps": 29_000, "floor_fps": 1_100_000, "vs_scapy": 8}  # issue 16's "now" column

_H = struct.Struct("!H").unpack_from
_V4 = struct.Struct("!4s4s").unpack_from
_V6 = struct.Struct("!16s16s").unpack_from
_PORTS = struct.Struct("!HH").unpack_from


def struct_tuple(f: bytes):
    """The floor: walk the capture's layouts with struct, no check (no TTL, fragment, length, version)."""
    at = 12
    etype = _H(f, at)[0]
    while etype in (0x8100, 0x88A8):
        at += 4
        etype = _H(f, at)[0]
    at += 2
    if etype == 0x8864:
        etype = 0x0800 if _H(f, at + 6)[0] == 0x0021 else 0x86DD
        at += 8
    while True:
        if etype == 0x0800:
            proto = f[at + 9]
            if proto == 4:
                at += 20
                continue
            src, dst = _V4(f, at + 12)
            sport, dport = _PORTS(f, at + 20)
        else:
            proto = f[at + 6]
            if proto == 41:
                at += 40
                continue
            src, dst = _V6(f, at + 8)
            sport, dport = _PORTS(f, at + 40)
        return src, dst, sport, dport, proto


def scapy_walker():
    import scapy.layers.inet6
    import scapy.layers.ppp  # noqa: F401 - the imports bind IPv6 and PPPoE into Ether's dissection
    from scapy.layers.inet import TCP, UDP
    from scapy.layers.l2 import Ether

    def scapy_tuple(f: bytes):
        pkt = Ether(f)
        l4 = pkt.getlayer(TCP) or pkt.getlayer(UDP)
        ip = l4.underlayer
        return ip.src, ip.dst, l4.sport, l4.dport, ip.proto if ip.version == 4 else ip.nh
    return scapy_tuple


def dpkt_walker():
    import dpkt

    ip_types = (dpkt.ip.IP, dpkt.ip6.IP6)
    l2_types = (dpkt.pppoe.PPPoE, dpkt.ppp.PPP)

    def dpkt_tuple(f: bytes):
        x = dpkt.ethernet.Ethernet(f).data
        while isinstance(x, l2_types):
            x = x.data
        while isinstance(x.data, ip_types):
            x = x.data
        l4 = x.data
        return x.src, x.dst, l4.sport, l4.dport, x.p if isinstance(x, dpkt.ip.IP) else x.nxt
    return dpkt_tuple


def main() -> int:
    profile = get_profile(None)
    with tempfile.TemporaryDirectory() as tmp:
        capture = mixed_capture.write(Path(tmp) / "mixed.pcap", FRAMES)
        frames = list(read_frames(capture))
    assert len(frames) == FRAMES

    try:
        dpkt_tuple = dpkt_walker()
    except ImportError:
        dpkt_tuple = None

    # every side finds the same ports and protocol as flowsim on every frame
    expected = []
    for f in frames:
        res = flow_tuple_from_frame(f, 1, "inet", profile)
        assert res is not None and len(res) == 6, res
        key = res[0]
        expected.append((key.sport, key.dport, key.l4proto))
    scapy_tuple = scapy_walker()
    others = {"struct": struct_tuple, "scapy": scapy_tuple}
    if dpkt_tuple is not None:
        others["dpkt"] = dpkt_tuple
    for name, fn in others.items():
        got = [fn(f)[2:] for f in frames]
        assert got == expected, f"{name} disagrees with flowsim"

    def flowsim():
        for f in frames:
            flow_tuple_from_frame(f, 1, "inet", profile)

    def flowsim_json():
        # as flowsim tuple runs it: one parser for the run, the writer's loop over its results
        _JsonWriter().extend([], map(frame_parser(profile, "inet", 1), frames), 1)

    def flowsim_skb():
        for f in frames:
            flow_tuple_from_skb(skb_from_frame(f, iif=1), iifidx=1, profile=profile)

    def run(fn):
        def side():
            for f in frames:
                fn(f)
        return side

    sides = {"struct": run(struct_tuple), "flowsim": flowsim, "flowsim+json": flowsim_json, "flowsim-skb": flowsim_skb}
    if dpkt_tuple is not None:
        sides["dpkt"] = run(dpkt_tuple)
    sides["scapy"] = run(scapy_tuple)

    targets([f"flowsim tuple CAPTURE --json >= {TARGET_FPS:,} frames per CPU-s (end to end: bench_cli)",
             f"within {TARGET_FLOOR_RATIO:g}x of the bare struct parse (the floor; the issue measured it at 1.1M/s)",
             f"before: {BEFORE['cli_fps']:,}/s end to end, 38x the floor ({BEFORE['floor_fps']:,}/s), "
             f"{BEFORE['vs_scapy']}x scapy"])
    t = interleave(sides, ROUNDS)
    floor = t.rate("struct", FRAMES)
    print(f"\n{FRAMES:,} frames, {ROUNDS} rounds interleaved, CPU time")
    print(f"{'side':<14}{'frames/CPU-s':>14}{'x floor':>9}{'x scapy':>9}  spread")
    scapy = t.rate("scapy", FRAMES)
    out: dict = {"frames": FRAMES, "rounds": ROUNDS}
    for name in sides:
        fps = t.rate(name, FRAMES)
        print(f"{name:<14}{fps:>14,.0f}{floor / fps:>9.1f}{fps / scapy:>9.1f}  {t.spread(name):.2f}")
        out[name] = {"frames_per_cpu_s": round(fps), "x_floor": round(floor / fps, 2),
                     "x_scapy": round(fps / scapy, 1), "spread": round(t.spread(name), 2)}
    if dpkt_tuple is None:
        print("dpkt: not installed (pip install '.[bench]')")
    # the 300k is "within 4x of the floor" of its 1.1M/s struct figure; the walk here is tighter
    # (no reader, one pass), so the rate is the target and the ratio is shown for what it is
    per_frame = t.rate("flowsim+json", FRAMES)
    ok = per_frame >= TARGET_FPS
    print(f"\nflowsim+json (the command's per-frame work, reader and start-up aside): {per_frame:,.0f} frames "
          f"per CPU-s, {floor / per_frame:.1f}x this floor: {verdict(ok)} (>= {TARGET_FPS:,})")
    out["meets_targets"] = ok
    last_line(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
