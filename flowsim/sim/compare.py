"""Two kernels, the same traffic: what a patch changes (``flowsim compare``).

Theory of operation
-------------------
:func:`compare` runs one loaded topology twice — under profile A and profile B (each
possibly derived with ``--set``) — with tracing on and every frame written to
a device kept in memory.  The runs are deterministic, so packets line up by
their label (traffic, direction, sequence number) and frames by device and
order.  The result holds, side by side:

* per flowtable: fast-path, slow-path and drop counts, the per-reason counts
  and their differences, and the skb access cost of the hook (header copies,
  head reallocations, bytes copied, pulls of non-linear data — kernel bugs);
* per traffic direction: sent / delivered / fast / slow;
* the first packet whose flowtable verdicts differ, with both traces;
* the devices whose emitted bytes differ, with the first differing frame of
  each side.

It answers review questions such as pull vs header pointer on the IP6IP6 rx
patch (run with a small ``headlen`` so the outer header is not linear), the
7.0 → 7.1.5 IP6IP6 fixes, or the FIN/RST CLOSING change.
"""

from __future__ import annotations

import collections

import attrs

from flowsim.config.topology import Topology, load_topology
from flowsim.kernel.headers import (
    ETH_HLEN, ETH_P_8021AD, ETH_P_8021Q, ETH_P_IP, ETH_P_IPV6, ETH_P_PPP_SES, IPPROTO_IPIP, IPPROTO_IPV6, IPV4_HLEN,
    IPV6_HLEN, NEXTHDR_DEST, PPPOE_SES_HLEN, VLAN_HLEN, pppoe_proto_to_ethertype,
)
from flowsim.profiles import Profile, profile_from_cli
from flowsim.schemas import schema_id
from flowsim.sim.progress import SimProgress
from flowsim.sim.report import build_report
from flowsim.sim.simulation import Simulation

__all__ = ["Side", "Comparison", "compare", "hexdump_frame"]


@attrs.define
class Side:
    """One run: its profile, report, traces per packet and frames per device."""

    profile: Profile
    report: dict
    traces: dict  # packet label -> [TraceRecord]
    frames: dict  # (netns, dev) -> [bytes]


@attrs.define
class Comparison:
    topology: str
    a: Side
    b: Side

    # --- flowtables ----------------------------------------------------------
    def flowtables(self) -> list[dict]:
        rows = []
        fa = {(f["netns"], f["name"]): f for f in self.a.report["flowtables"]}
        fb = {(f["netns"], f["name"]): f for f in self.b.report["flowtables"]}
        for key in sorted(set(fa) | set(fb)):
            x, y = fa.get(key, {}), fb.get(key, {})
            reasons = sorted(set(x.get("reasons", {})) | set(y.get("reasons", {})))
            rows.append({
                "netns": key[0], "name": key[1],
                "a": {k: x.get(k, 0) for k in ("fastpath", "slowpath", "drops", "flows_created")},
                "b": {k: y.get(k, 0) for k in ("fastpath", "slowpath", "drops", "flows_created")},
                "reasons": {r: [x.get("reasons", {}).get(r, 0), y.get("reasons", {}).get(r, 0)] for r in reasons},
                "skb_cost": {"a": x.get("skb_cost"), "b": y.get("skb_cost")},
                "kernel_bugs": {"a": len(x.get("kernel_bugs", [])), "b": len(y.get("kernel_bugs", []))},
            })
        return rows

    def traffic(self) -> list[dict]:
        ta = {t["name"]: t for t in self.a.report["traffic"]}
        tb = {t["name"]: t for t in self.b.report["traffic"]}
        rows = []
        for name in ta.keys() | tb.keys():
            for d in ("original", "reply"):
                x = ta.get(name, {}).get("directions", {}).get(d, {})
                y = tb.get(name, {}).get("directions", {}).get(d, {})
                rows.append({"traffic": name, "direction": d,
                             "a": {k: x.get(k, 0) for k in ("sent", "delivered", "fastpath", "slowpath")},
                             "b": {k: y.get(k, 0) for k in ("sent", "delivered", "fastpath", "slowpath")}})
        return sorted(rows, key=lambda r: (r["traffic"], r["direction"]))

    # --- packets -------------------------------------------------------------
    def first_divergence(self) -> dict | None:
        """The first packet (in time) whose flowtable verdicts differ, with both traces."""
        def verdicts(records):
            return [r.what for r in records if r.where.startswith("flowtable @")]
        order = sorted(self.a.traces, key=lambda p: self.a.traces[p][0].time)
        for label in order:
            va, vb = verdicts(self.a.traces[label]), verdicts(self.b.traces.get(label, []))
            if va != vb:
                return {"packet": label, "a": [_step(r) for r in self.a.traces[label]],
                        "b": [_step(r) for r in self.b.traces.get(label, [])], "verdicts": {"a": va, "b": vb}}
        return None

    def frame_differences(self) -> list[dict]:
        """Devices whose emitted frames differ, with the first differing frame of each side."""
        out = []
        for key in sorted(set(self.a.frames) | set(self.b.frames)):
            fa, fb = self.a.frames.get(key, []), self.b.frames.get(key, [])
            if fa == fb:
                continue
            i = next((k for k, (x, y) in enumerate(zip(fa, fb)) if x != y), min(len(fa), len(fb)))
            out.append({"netns": key[0], "dev": key[1], "frames": [len(fa), len(fb)], "first_index": i,
                        "a": fa[i].hex() if i < len(fa) else None, "b": fb[i].hex() if i < len(fb) else None})
        return out

    def to_dict(self) -> dict:
        return {"schema": schema_id("compare"), "topology": self.topology, "profiles": [self.a.profile.name, self.b.profile.name],
                "profile_switches": _switch_diff(self.a.profile, self.b.profile),
                "packets": {"a": self.a.report["packets"], "b": self.b.report["packets"]},
                "drops": {"a": self.a.report.get("drops", {}), "b": self.b.report.get("drops", {})},
                "flowtables": self.flowtables(), "traffic": self.traffic(),
                "first_divergence": self.first_divergence(), "frame_differences": self.frame_differences()}

    def text(self) -> str:
        d = self.to_dict()
        a, b = d["profiles"]
        lines = [f"compare {self.topology}: A = {a}, B = {b}"]
        for k, (x, y) in d["profile_switches"].items():
            lines.append(f"  switch {k}: {x} -> {y}")
        pa, pb = d["packets"]["a"], d["packets"]["b"]
        lines.append(f"packets  A: injected {pa['injected']} delivered {pa['delivered']} dropped {pa['dropped']}"
                     f"   B: injected {pb['injected']} delivered {pb['delivered']} dropped {pb['dropped']}")
        for ft in d["flowtables"]:
            lines.append(f"flowtable {ft['netns']} @{ft['name']}          A        B")
            for k in ("fastpath", "slowpath", "drops", "flows_created"):
                lines.append(f"  {k:<22}{ft['a'][k]:>7}  {ft['b'][k]:>7}" + ("   *" if ft['a'][k] != ft['b'][k] else ""))
            for r, (x, y) in ft["reasons"].items():
                lines.append(f"  reason {r:<15}{x:>7}  {y:>7}" + ("   *" if x != y else ""))
            ca, cb = ft["skb_cost"]["a"] or {}, ft["skb_cost"]["b"] or {}
            for k in ("copies", "reallocs", "bytes_copied", "pull_bugs"):
                lines.append(f"  skb {k:<18}{ca.get(k, 0):>7}  {cb.get(k, 0):>7}" + ("   *" if ca.get(k) != cb.get(k) else ""))
        lines.append("traffic                          A fast/slow/dlv/sent       B fast/slow/dlv/sent")
        for t in d["traffic"]:
            fa, fb = t["a"], t["b"]
            name = t["traffic"] + " " + t["direction"]
            lines.append(f"  {name:<30} {fa['fastpath']:>5}/{fa['slowpath']}/{fa['delivered']}/{fa['sent']:<12}"
                         f" {fb['fastpath']:>5}/{fb['slowpath']}/{fb['delivered']}/{fb['sent']}")
        div = d["first_divergence"]
        if div is None:
            lines.append("no packet's flowtable verdicts differ")
        else:
            lines.append(f"first packet whose verdict differs: {div['packet']}")
            for side in ("a", "b"):
                lines.append(f"  {side.upper()}:")
                lines += [f"    {s}" for s in div[side]]
        diffs = d["frame_differences"]
        lines.append(f"devices whose emitted bytes differ: {len(diffs)}")
        for f in diffs[:8]:
            lines.append(f"  {f['netns']} {f['dev']}: frames {f['frames'][0]} vs {f['frames'][1]}, first difference "
                         f"at frame {f['first_index']}")
            for side in ("a", "b"):
                if f[side]:
                    lines.append(f"    {side.upper()}: " + hexdump_frame(bytes.fromhex(f[side])))
        return "\n".join(lines) + "\n"


def _step(record) -> str:
    """A trace record as text, without the frame bytes (frame differences are shown apart)."""
    return str(attrs.evolve(record, details=tuple((k, v) for k, v in record.details if k != "frame")))


def _switch_diff(a: Profile, b: Profile) -> dict:
    sa, sb = a.switches(), b.switches()
    return {k: [sa[k], sb[k]] for k in sa if sa[k] != sb[k]}


def hexdump_frame(frame: bytes) -> str:
    """Hex with header boundaries: Ethernet | (802.1Q)* | (PPPoE) | IP headers | rest."""
    parts, off = [], ETH_HLEN
    parts.append(frame[:ETH_HLEN].hex())
    etype = int.from_bytes(frame[12:14], "big")
    while etype in (ETH_P_8021Q, ETH_P_8021AD) and len(frame) >= off + VLAN_HLEN:
        parts.append(frame[off:off + VLAN_HLEN].hex())
        etype = int.from_bytes(frame[off + 2:off + 4], "big")
        off += VLAN_HLEN
    if etype == ETH_P_PPP_SES and len(frame) >= off + PPPOE_SES_HLEN:
        parts.append(frame[off:off + PPPOE_SES_HLEN].hex())
        etype = pppoe_proto_to_ethertype(int.from_bytes(frame[off + 6:off + 8], "big"))
        off += PPPOE_SES_HLEN
    inner = {IPPROTO_IPIP: ETH_P_IP, IPPROTO_IPV6: ETH_P_IPV6}
    for _ in range(3):  # outer and inner IP headers
        if etype == ETH_P_IP and len(frame) >= off + IPV4_HLEN:
            ihl = (frame[off] & 0x0F) * 4
            proto = frame[off + 9]
            parts.append(frame[off:off + ihl].hex())
            off += ihl
            etype = inner.get(proto, 0)
        elif etype == ETH_P_IPV6 and len(frame) >= off + IPV6_HLEN:
            nh = frame[off + 6]
            parts.append(frame[off:off + IPV6_HLEN].hex())
            off += IPV6_HLEN
            if nh == NEXTHDR_DEST and len(frame) >= off + 8:
                ln = (frame[off + 1] + 1) * 8
                nh = frame[off]
                parts.append(frame[off:off + ln].hex())
                off += ln
            etype = inner.get(nh, 0)
        else:
            break
    rest = frame[off:]
    parts.append(rest[:32].hex() + ("…" if len(rest) > 32 else ""))
    return " | ".join(parts)


def _run(topo: Topology, profile: Profile, *, headlen: int | None, duration: float | None,
         progress: bool = False, desc: str = "simulating") -> Side:
    sim = Simulation(topo, profile, tracing=True, headlen=headlen)
    frames: dict = collections.defaultdict(list)
    xmit = sim.kernel.capture

    def capture(netns, dev, frame):
        frames[(netns, dev)].append(frame)
        if xmit is not None:
            xmit(netns, dev, frame)

    sim.kernel.capture = capture
    with SimProgress.for_simulation(sim, duration, enabled=progress, desc=desc) as bar:
        sim.run(duration, progress=bar)
    traces: dict = collections.defaultdict(list)
    for r in sim.kernel.traces:
        traces[r.packet].append(r)
    return Side(profile, build_report(sim), dict(traces), dict(frames))


def compare(topology: str | Topology, profile_a: str | Profile, profile_b: str | Profile, *, settings_a=(), settings_b=(),
            headlen: int | None = None, duration: float | None = None, progress: bool = False) -> Comparison:
    """Run *topology* (a file, or a loaded :class:`~flowsim.config.topology.Topology`) under both profiles
    and line the results up; it is loaded once, each run instantiates it.  *progress*: draw a bar per
    run on stderr (:class:`~flowsim.sim.progress.SimProgress`)."""
    pa = profile_a if isinstance(profile_a, Profile) else profile_from_cli(profile_a, settings_a)
    pb = profile_b if isinstance(profile_b, Profile) else profile_from_cli(profile_b, settings_b)
    topo = topology if isinstance(topology, Topology) else load_topology(topology)
    name = str(topology) if not isinstance(topology, Topology) else str(topo.file)
    return Comparison(name, _run(topo, pa, headlen=headlen, duration=duration, progress=progress, desc="A " + pa.name),
                      _run(topo, pb, headlen=headlen, duration=duration, progress=progress, desc="B " + pb.name))
